"""One attached launch's sweep on the service: its events as messages to the launch, and the
launch's messages (an interrupt, or the connection closing) as the sweep's stop.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from pathlib import Path
from typing import Iterator

from sweeper.events import Event, Fitted, Running, Say, TopTrials
from sweeper.service_link import ALIVE_S, send
from core.errors import ConfigError, cut


FIRST_REQUEST_S = 30.0  # a connection's first line must come within this, all of it


def first_message(conn: socket.socket, messages: Iterator[dict], within_s: float = FIRST_REQUEST_S) -> dict | None:
    """A connection's first message, or None when none came whole within `within_s` in all (a
    client sending a byte now and then holds no thread past it: its reading side is shut, so the
    line ends there, as if it had left)."""
    def shut_reading() -> None:
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RD)

    conn.settimeout(within_s)  # each read, too
    timer = threading.Timer(within_s, shut_reading)
    timer.daemon = True
    timer.start()
    try:
        return next(messages, None)
    finally:
        timer.cancel()
        conn.settimeout(None)


class StoreFiles:
    """The embedded tracking stores this service's MLflow has opened, by URI, and the file each was
    then. MLflow keeps a store (and its database connections) per URI for the life of the process:
    a store file removed or replaced since would be written through the old connections ("attempt
    to write a readonly database"), so the service must not run a sweep on it."""

    def __init__(self):
        self.seen: dict[str, tuple[int, int]] = {}
        self.lock = threading.Lock()

    @staticmethod
    def _identity(uri: str) -> tuple[int, int] | None:
        from sweeper.tracking_uri import sqlite_path

        path = sqlite_path(uri)
        try:
            info = os.stat(path) if path is not None else None
        except OSError:
            return None
        return None if info is None else (info.st_dev, info.st_ino)

    def replaced(self, uri: str) -> str | None:
        """Why the store at `uri` is not the file this service's MLflow holds open; None when it is."""
        with self.lock:
            held = self.seen.get(uri)
        if held is None or self._identity(uri) == held:
            return None
        return (f"the sweep service's MLflow holds {cut(uri, 100)} open, and the file was removed or replaced since: "
                "this sweep runs in its own process (a service restarted once its sweeps have ended runs it there)")

    def remember(self, uri: str) -> None:
        if (identity := self._identity(uri)) is not None:
            with self.lock:
                self.seen.setdefault(uri, identity)


DRAIN_S, DRAIN_BYTES = 2.0, 64 << 20  # what a refused client may still send, read and dropped


def reply_error(conn: socket.socket, text: str) -> None:
    """A refused request: its one line, then exit code 2 (a launch that left hears nothing). What the
    client still sends (the rest of a line too long) is then read and dropped, within DRAIN_S and
    DRAIN_BYTES, so that its writing ends and it reads the line rather than a broken pipe."""
    try:
        send(conn, {"error": text})
        send(conn, {"exit": 2})
        conn.settimeout(DRAIN_S)
        deadline, left = time.monotonic() + DRAIN_S, DRAIN_BYTES
        while left > 0 and time.monotonic() < deadline and (chunk := conn.recv(min(left, 1 << 16))):
            left -= len(chunk)
    except OSError:
        pass


class LaunchSink:
    """A sweep's events as messages to the launch attached to it (sweeper/commands/attach.py)."""

    def __init__(self, conn: socket.socket):
        self.conn, self.lock = conn, threading.Lock()

    def __call__(self, event: Event) -> None:
        if isinstance(event, Say):
            self.send({"out" if event.level == "info" else "err": event.text})
        elif isinstance(event, Running):
            self.send({"sweep_dir": str(event.sweep_dir)})
        elif isinstance(event, Fitted):
            self.send({"fitted": True})
        elif isinstance(event, TopTrials):
            self.send({"top_trials": str(event.sweep_dir)})

    def send(self, message: dict) -> None:
        try:
            with self.lock:
                send(self.conn, message)
        except OSError:
            pass  # the launch left; its sweep is being stopped

    def end(self, code: int) -> None:
        """The launch's exit code, and the end of its connection (the reader of its messages holds
        the socket's file open: a client that reads on would wait for ever, its thread held)."""
        self.send({"exit": code})
        with contextlib.suppress(OSError):
            self.conn.shutdown(socket.SHUT_RDWR)


class Served:
    """A sweep the service runs for one attached launch."""

    def __init__(self, name: str, client_pid: int):
        self.name, self.client_pid, self.since = name, client_pid, time.time()
        self.stop = threading.Event()
        self.sweep_dir: Path | None = None


def watch_client(messages, stop: threading.Event) -> None:
    """The rest of the launch's messages: an interrupt, or the connection closing, stops its sweep."""
    try:
        for message in messages:
            if message.get("verb") == "interrupt":
                stop.set()
    except ConfigError:
        pass
    stop.set()


def say_alive(sink: LaunchSink, ended: threading.Event) -> None:
    """While a sweep runs, tell its launch every ALIVE_S that the service still answers (a launch
    that hears nothing for long says so: sweeper/commands/attach.py)."""
    while not ended.wait(ALIVE_S):
        sink.send({"alive": True})
