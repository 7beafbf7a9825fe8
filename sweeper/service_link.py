"""The resident service's wire, on both ends (no Ray, MLflow or torch: a launch reaches it fast);
its folder and the files in it are sweeper/service_folder.py.

    connect()         a connection to this user's running service, or None where none runs; a
                      service that does not take the connection within a bound (stopped, its
                      queue full) is one ConfigError line, never silently passed by;
                      a socket or folder that is not this user's alone is refused, never used
    send / Messages   one JSON object per line, each at most MAX_MESSAGE bytes
    peer(conn)        the connecting process's pid and user (SO_PEERCRED): the service answers its own only
    code_hash()       a hash of the project's modules (sweeper/, trainables/): the code a process runs

A launch attached to the service sends {"verb": "launch", ...}; the service answers at once with
{"accepted": true} (a launch that hears nothing within ANSWER_S says so and stops), then lines
{"out": text} and {"err": text}, one {"sweep_dir": path} once the sweep's folder is ready,
{"alive": true} every ALIVE_S (a launch that hears nothing for SILENT_S says so and stops), and a
last {"exit": code}; the launch checks each before use (sweeper/commands/attach.py).
{"verb": "interrupt"} on the same connection, or the connection closing, stops that sweep (its
trials interrupted, resumable).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import socket
import stat
import struct
import time
from pathlib import Path
from typing import Callable, Iterator

from core import json_text
from core.errors import ConfigError, cut
from sweeper.lock import lock_held
from sweeper.service_folder import (LOCK, LOG, SOCKET, STATE, check_entries, ensure_private_dir, folder_info, read_state,
                                    service_dir)
from sweeper.status import a_pid

MAX_MESSAGE = 1 << 20


ANSWER_S = 20.0  # a running service takes a connection and answers a request within this
START_S = 180.0  # a service that holds its lock opens its socket within this (Ray and the workers' imports; slow on 2 busy cores)
ALIVE_S = 10.0  # while it runs an attached launch's sweep, the service says it is alive this often
SILENT_S = 6 * ALIVE_S  # an attached launch that hears nothing for this long says the service does not answer
NOTICE_S = 2.0  # a wait on the service longer than this is said, once


class _Wait:
    """A bounded wait on the service, said once (through `say`) when it lasts past NOTICE_S."""

    def __init__(self, say: Callable[[str], None] | None):
        self.say, self.since = say, time.monotonic()

    def on(self, text: str) -> None:
        if self.say is not None and time.monotonic() - self.since >= NOTICE_S:
            self.say(text)
            self.say = None


IN_PROCESS = "`sweeper launch --in-process` runs a sweep in its own process"


def unresponsive(directory: Path, what: str, timeout_s: float = ANSWER_S, then: str = IN_PROCESS) -> ConfigError:
    """A service that does not answer: stopped (SIGSTOP, a debugger) said as such, with the one harmless
    signal that lets it go on; otherwise where its pid and log are. `then`: what the user can do now."""
    pid_at = f"its pid is in {STATE}, " if (directory / STATE).is_file() else ""  # a bare socket has no state file
    why = f"{what} within {timeout_s:.0f} s (overloaded, or stopped; {pid_at}its log {LOG})"
    if (pid := stopped_pid(directory)) is not None:
        why = f"is stopped (SIGSTOP or a debugger): `kill -CONT {pid}` lets it go on"
    return ConfigError(f"the sweep service at {cut(str(directory), 120)} {why}" + (f"; {then}" if then else ""))


def stopped_pid(directory: Path) -> int | None:
    """The pid of the service in `directory` when its process is stopped (SIGSTOP, a debugger), else None."""
    import psutil

    with contextlib.suppress(psutil.Error, ValueError):
        process = psutil.Process(a_pid(read_state(directory).get("pid")) or -1)
        if "sweeper.service_host" in process.cmdline() and process.status() in ("stopped", "tracing-stop"):
            return process.pid
    return None


def connect(directory: Path | None = None, timeout_s: float = ANSWER_S,
            say: Callable[[str], None] | None = None, then: str = IN_PROCESS) -> socket.socket | None:
    """A connection to this user's service, or None when none runs (no socket, or a stale one);
    a service that does not take it within `timeout_s`, or whose process is stopped, is a ConfigError
    (its one line, ending with `then`: what the user can do now). A wait on a service starting or
    ending (up to START_S) is said once through `say` when it lasts past NOTICE_S."""
    directory = directory or service_dir()
    wait = _Wait(say)
    path = directory / SOCKET
    info = folder_info(directory)
    if info is None:
        return None
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != os.getuid() or info.st_mode & 0o077:
        ensure_private_dir(directory)  # its line: a link, another user's, or open to others; never talked to
    starting = time.monotonic() + START_S
    while not os.path.lexists(path) and not os.path.lexists(directory / STATE) and lock_held(directory / LOCK):
        if time.monotonic() >= starting:  # starting (or ending) with no socket yet: waited on, within a bound
            raise ConfigError(f"a sweep service in {cut(str(directory), 120)} holds its lock but has not opened its socket "
                              f"within {START_S:.0f} s; its log: {directory / LOG}")
        wait.on(f"waiting for the sweep service in {cut(str(directory), 120)} to open its socket (starting; "
                f"at most {START_S:.0f} s, Ctrl-C stops)")
        time.sleep(0.2)
    if not os.path.lexists(path):
        if lock_held(directory / LOCK) and os.path.lexists(directory / STATE):  # serving, yet its socket is gone
            raise ConfigError(f"{cut(str(directory), 120)}: the sweep service holding this folder has lost its socket "
                              f"{SOCKET}: its sweeps go on, but nothing new reaches it; `sweeper launch --in-process` "
                              f"runs a sweep in its own process; once its sweeps end, restart it ({STATE} names it)")
        return None
    check_entries(directory)  # a socket open to others, or something else in its place: never talked to
    deadline, settled = time.monotonic() + timeout_s, time.monotonic() + START_S
    while True:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.settimeout(timeout_s)
        try:
            conn.connect(str(path))
        except (BlockingIOError, TimeoutError):  # listening, its queue full: wait for room, within the bound
            conn.close()
            if time.monotonic() >= deadline or stopped_pid(directory) is not None:  # a stopped one makes none
                raise unresponsive(directory, "does not take a connection", timeout_s, then) from None
            time.sleep(0.2)
            continue
        except OSError as err:  # refused, or the socket gone: a killed service's, or one starting or ending
            conn.close()
            if err.errno not in (errno.ECONNREFUSED, errno.ENOENT) or not lock_held(directory / LOCK):
                return None
            if time.monotonic() >= settled:  # else waited on: a launch now would start a Ray beside the ending one
                raise ConfigError(f"the sweep service in {cut(str(directory), 120)} holds its lock but has taken no "
                                  f"connection for {START_S:.0f} s (starting or ending); its log: {directory / LOG}")
            wait.on(f"waiting for the sweep service in {cut(str(directory), 120)}, which holds its lock but takes no "
                    f"connection (starting, or writing its sweeps down as it ends; at most {START_S:.0f} s, Ctrl-C stops)")
            time.sleep(0.2)
            continue
        if stopped_pid(directory) is not None:  # the kernel queued the connection; nobody will answer it
            conn.close()
            raise unresponsive(directory, "does not answer", timeout_s, then)
        conn.settimeout(None)
        return conn


def listen(directory: Path) -> socket.socket:
    """The service's socket, listening (its caller holds the service's lock)."""
    path = directory / SOCKET
    if os.path.lexists(path):
        path.unlink()  # a killed service's socket: nothing answers on it
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))  # in the service's 0700 folder: nobody else reaches it before the chmod
    os.chmod(path, 0o600)  # only this user may connect
    listener.listen(16)
    listener.settimeout(0.5)
    return listener


def send(conn: socket.socket, message: dict) -> None:
    conn.sendall(json.dumps(message).encode() + b"\n")


class Messages:
    """The messages arriving on a connection, one JSON object per line; ends when it closes.
    A line too long or not a JSON object is a ConfigError (one line for the other end)."""

    def __init__(self, conn: socket.socket, timeout_is_error: bool = False):
        self.file = conn.makefile("rb")
        self.timeout_is_error = timeout_is_error  # a timeout raises TimeoutError rather than ending the messages

    def __iter__(self) -> Iterator[dict]:
        while True:
            try:
                line = self.file.readline(MAX_MESSAGE + 1)
            except TimeoutError:
                if self.timeout_is_error:
                    raise
                return
            except OSError:
                return
            if not line:
                return
            if len(line) > MAX_MESSAGE:
                raise ConfigError(f"a message longer than {MAX_MESSAGE} bytes")
            try:
                message = json_text.loads(line, unique_keys=True)  # `{"verb": "launch", "verb": "stop"}` is no request
            except json_text.DuplicateKey as err:
                raise ConfigError(f"not a request: {err}") from None
            except ValueError:
                raise ConfigError(f"not a JSON message: {cut(line.decode(errors='replace').strip(), 60)}") from None
            if not isinstance(message, dict):
                raise ConfigError(f"a message must be a JSON object, got {cut(line.decode(errors='replace').strip(), 60)}")
            yield message


def request(message: dict, directory: Path | None = None, timeout_s: float = ANSWER_S, then: str | None = None,
            say: Callable[[str], None] | None = None) -> dict | None:
    """One question, one answer (status, stop); None when no service runs; a ConfigError when one runs and
    does not answer within `timeout_s`, ending with `then` (what to run again; by default `serve --VERB`).
    `say`: as for `connect`."""
    then = then or f"`sweeper serve --{message.get('verb')}` again once it answers"  # a launch asks through `attach`
    conn = connect(directory, say=say, then=then)
    if conn is None:
        return None
    with conn:
        conn.settimeout(timeout_s)
        try:
            send(conn, message)
            answer = next(iter(Messages(conn, timeout_is_error=True)), None)
        except TimeoutError:
            raise unresponsive(directory or service_dir(), "does not answer", timeout_s, then) from None
        except ConfigError as err:  # something answers on the socket, but not in the service's words
            raise ConfigError(f"the sweep service at {cut(str(directory or service_dir()), 120)} answered what is not "
                              f"its protocol ({cut(str(err), 80)}); its log: {(directory or service_dir()) / LOG}") from None
        except OSError:
            return None
    where = cut(str(directory or service_dir()), 120)
    if answer is None:
        raise ConfigError(f"the sweep service at {where} closed the connection without an answer; its log: "
                          f"{(directory or service_dir()) / LOG}")
    if "error" in answer:
        raise ConfigError(f"the sweep service at {where} refused: {cut(str(answer['error']), 160)}")
    return answer


def peer(conn: socket.socket) -> tuple[int, int]:
    """(pid, user id) of the process at the other end of a Unix socket (Linux SO_PEERCRED)."""
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    pid, uid, _ = struct.unpack("3i", creds)
    return pid, uid


def project_root() -> str:
    """The checkout this process runs (the folder holding sweeper/ and trainables/)."""
    return str(Path(__file__).resolve().parent.parent)


def code_hash() -> str:
    """The project's modules as they are on disk now (every .py of core/, sweeper/ and trainables/)."""
    digest = hashlib.sha256()
    for package in ("core", "sweeper", "trainables"):
        root = Path(project_root()) / package
        for path in sorted(root.rglob("*.py")):
            digest.update(str(path.relative_to(root.parent)).encode() + b"\0")
            try:
                digest.update(path.read_bytes())
            except OSError:
                continue
    return digest.hexdigest()[:16]
