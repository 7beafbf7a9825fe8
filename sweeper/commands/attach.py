"""`sweeper launch` attached to this user's running service (`sweeper serve`).

The launch checks its input here first, in its own folder and environment, with the same code and
the same one-line errors as a launch without the service; then it hands the sweep to the service,
paths and tracking URI made absolute, prints what the service says about it, draws the progress
from the sweep's folder as the sweep runs, and exits with the sweep's code. Ctrl-C (or SIGTERM)
asks the service to stop this sweep (its trials interrupted, resumable by the same command), not
the service; a second Ctrl-C leaves at once, the sweep still stopping on the service.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from sweeper.events import Fitted, Running, Say, TopTrials
from sweeper.live_events import Terminal
from sweeper.request import SweepRequest, tracking_environment
from sweeper.service_folder import read_state, service_dir
from sweeper.service_link import ANSWER_S, SILENT_S, Messages, code_hash, connect, project_root, send, unresponsive
from sweeper.sweep_checks import check_request
from core.errors import ConfigError, brief, cut, one_line, visible
from core.tool_cli import to_stderr


def attach(sweep: SweepRequest, progress: str, every_s: float) -> int | None:
    """The sweep's exit code, run on the service; None when no service answers (or it runs older
    code than this checkout's and cannot restart now): the caller runs the sweep itself."""
    conn = connect(say=to_stderr)
    if conn is None:
        return None
    name = check_request(sweep).spec.name
    request = {"verb": "launch", "code": code_hash(), "root": project_root(),
               "tracking_env": tracking_environment(os.environ), **sweep.message()}
    for _ in range(2):  # a second time after the service restarted on this checkout's code
        with conn:  # to a service of other code, what every version reads (it restarts on this code, or says why not)
            send(conn, request if read_state().get("code") == request["code"] else
                 {k: v for k, v in request.items() if k != "tracking_env"})
            code = _follow(conn, Terminal(progress, every_s), name)
        if code is not RESTARTED:
            return code
        conn = _wait_for_restart(request["code"])
        if conn is None:
            return None
    return None


RESTARTED = object()  # the service restarts on this checkout's code: ask again
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


def _follow(conn, terminal: Terminal, name: str) -> int | object | None:
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

    previous = {sig: signal.signal(sig, on_interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}  # as in its own process
    conn.settimeout(ANSWER_S)  # until the service's first word: a stopped service is said, not waited on for ever
    accepted = False
    try:
        for message in Messages(conn, timeout_is_error=True):
            if not accepted:
                accepted = True
                conn.settimeout(SILENT_S)  # then it says it is alive every ALIVE_S while the sweep runs
            key, value = _reply(message)
            if key == "out":
                terminal(Say(value, "info"))
            elif key == "err":
                terminal(Say(value, "note"))
            elif key == "sweep_dir":
                terminal(Running(Path(value)))
            elif key == "fitted":
                terminal(Fitted())
            elif key == "top_trials":
                terminal(TopTrials(Path(value)))
            elif key == "stale":
                print(f"note: {value}", file=sys.stderr)
                return None
            elif key == "restart":
                print(f"note: {value}", file=sys.stderr)
                return RESTARTED
            elif key == "error":
                raise ConfigError(value)
            elif key == "exit":
                return value
    except TimeoutError:
        raise (unresponsive(service_dir(), "took the sweep but has said nothing", SILENT_S) if accepted else
               unresponsive(service_dir(), "took the sweep but does not answer")) from None
    finally:
        terminal.close()
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"error: the service stopped while running sweep {one_line(name, 80)} (killed?); the same command resumes "
          f"the sweep (service log: {service_dir() / 'service.log'})", file=sys.stderr)
    return 1


TEXTS = ("out", "err", "stale", "restart", "error")  # what the service says, shown to the user
PATHS = ("sweep_dir", "top_trials")
MAX_OUT = 1 << 16  # characters of one `out` message (a table may take several lines)


def _reply(message: dict) -> tuple[str | None, object]:
    """The one thing a message of the service says, checked before it is used: its key and value
    (None for a message this launch has no use for: `accepted`, `alive`, a newer service's news).
    What breaks the protocol is one ConfigError line."""
    key = next((k for k in (*TEXTS, *PATHS, "fitted", "exit") if k in message), None)
    value = message.get(key)
    if key in TEXTS and isinstance(value, str):
        text = visible(value, keep="\n" if key == "out" else "").rstrip("\n")
        return key, text[:MAX_OUT] if key == "out" else one_line(text)
    if key in PATHS and isinstance(value, str) and 0 < len(value) <= 4096 and value.isprintable() \
            and os.path.isabs(value):
        return key, value
    if key == "exit" and isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
        return key, value
    if key in (None, "fitted"):
        return key, None
    raise ConfigError(f"the sweep service at {cut(str(service_dir()), 120)} answered what is not its protocol ({key}: "
                      f"{brief(value, 40)}); its log: {service_dir() / 'service.log'}")
