"""`sweeper launch` attached to this user's running service (`sweeper serve`).

The launch checks its input here first, in its own folder and environment, with the same code and
the same one-line errors as a launch without the service; then it hands the sweep to the service,
paths and tracking URI made absolute, prints what the service says about it, draws the progress
from the sweep's folder as the sweep runs, and exits with the sweep's code. Ctrl-C asks the service
to stop this sweep (its trials interrupted, resumable by the same command), not the service; a
second Ctrl-C leaves at once, the sweep still stopping on the service.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from sweeper.events import Fitted, Running, Say, TopTrials
from sweeper.live_events import Terminal
from sweeper.request import SweepRequest
from sweeper.service_link import ANSWER_S, Messages, code_hash, connect, project_root, send, service_dir, unresponsive
from sweeper.sweep_checks import check_request
from core.errors import ConfigError, one_line


def attach(sweep: SweepRequest, progress: str, every_s: float) -> int | None:
    """The sweep's exit code, run on the service; None when no service answers (or it runs older
    code than this checkout's and cannot restart now): the caller runs the sweep itself."""
    conn = connect()
    if conn is None:
        return None
    name = check_request(sweep).spec.name
    request = {"verb": "launch", "code": code_hash(), "root": project_root(), **sweep.message()}
    for _ in range(2):  # a second time after the service restarted on this checkout's code
        with conn:
            send(conn, request)
            code = _follow(conn, Terminal(progress, every_s), name)
        if code != RESTARTED:
            return code
        conn = _wait_for_restart(request["code"])
        if conn is None:
            return None
    return None


RESTARTED = -1
RESTART_TIMEOUT_S = 180.0


def _wait_for_restart(code: str):
    """A connection to the service once it answers with this checkout's code; None if it does not."""
    import time

    from sweeper.service_link import request

    deadline = time.monotonic() + RESTART_TIMEOUT_S
    while time.monotonic() < deadline:
        try:
            answer = request({"verb": "status"})
        except ConfigError:  # the old service still ending, the new one not yet answering
            answer = None
        if answer is not None and answer.get("code") == code:
            return connect()
        time.sleep(0.5)
    print("note: the sweep service did not come back on the new code; this sweep runs in its own process", file=sys.stderr)
    return None


def _follow(conn, terminal: Terminal, name: str) -> int | None:
    """The service's messages about the sweep, shown as the events they carry, until its exit code."""
    interrupts = []

    def on_interrupt(*_) -> None:
        interrupts.append(1)
        if len(interrupts) > 1:
            print("\nleft at once; the sweep is still stopping on the service", file=sys.stderr)
            os._exit(130)
        print("\ninterrupting: the service stops this sweep (Ctrl-C again to leave at once)", file=sys.stderr)
        try:
            send(conn, {"verb": "interrupt"})
        except OSError:
            pass

    previous = signal.signal(signal.SIGINT, on_interrupt)
    conn.settimeout(ANSWER_S)  # until the service's first word: a stopped service is said, not waited on for ever
    try:
        for message in Messages(conn, timeout_is_error=True):
            conn.settimeout(None)
            if "accepted" in message:
                continue
            if "out" in message or "err" in message:
                terminal(Say(str(message.get("out", message.get("err"))).rstrip("\n"), "info" if "out" in message else "note"))
            elif "sweep_dir" in message:
                terminal(Running(Path(message["sweep_dir"])))
            elif "fitted" in message:
                terminal(Fitted())
            elif "top_trials" in message:
                terminal(TopTrials(Path(str(message["top_trials"]))))
            elif "stale" in message:
                print(f"note: {message['stale']}", file=sys.stderr)
                return None
            elif "restart" in message:
                print(f"note: {message['restart']}", file=sys.stderr)
                return RESTARTED
            elif "error" in message:
                raise ConfigError(str(message["error"]))
            elif "exit" in message:
                return int(message["exit"])
    except TimeoutError:
        raise unresponsive(service_dir(), "took the sweep but does not answer") from None
    finally:
        terminal.close()
        signal.signal(signal.SIGINT, previous)
    print(f"error: the service stopped while running sweep {one_line(name, 80)} (killed?); the same command resumes "
          f"the sweep (service log: {service_dir() / 'service.log'})", file=sys.stderr)
    return 1
