"""The guard of a server a CLI verb started: it stops the server's process group once the verb's
process is gone, however it went (SIGKILL included), where the verb itself can no longer.

    python -m sweeper.server_guard GROUP

Its stdin is the read end of a pipe only the verb's process holds open: end of file on it means
that process has ended. It then sends SIGTERM to process group GROUP and, after STOP_TIMEOUT_S,
SIGKILL to what is left. Standard library only: it starts in a moment and holds no memory to
speak of. A verb that stops its server itself has left the group empty, and the guard just ends."""

from __future__ import annotations

import os
import signal
import sys
import time

STOP_TIMEOUT_S = 10.0  # after SIGTERM, before SIGKILL


def _signal(group: int, sig: int) -> bool:
    """Send `sig` to the group; whether any member was there."""
    try:
        os.killpg(group, sig)
        return True
    except (ProcessLookupError, PermissionError):
        return False


def guard(group: int) -> None:
    """Wait for end of file on stdin, then stop the group."""
    for sig in (signal.SIGINT, signal.SIGHUP):  # a Ctrl-C or a closed terminal must not end the guard first
        signal.signal(sig, signal.SIG_IGN)
    while os.read(sys.stdin.fileno(), 4096):
        pass
    if not _signal(group, signal.SIGTERM):
        return
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while time.monotonic() < deadline and _signal(group, 0):
        time.sleep(0.2)
    _signal(group, signal.SIGKILL)


def main() -> None:
    """`python -m sweeper.server_guard GROUP`; a GROUP that is no process group id is one line, exit 2.
    Standard library only: the verbs start the guard with `python -I`, which leaves this checkout
    off sys.path."""
    arg = sys.argv[1] if len(sys.argv) == 2 else ""
    if not (arg.isascii() and arg.isdigit() and 1 < int(arg) < 2**31):
        print("error: usage: python -m sweeper.server_guard GROUP (a process group id above 1)", file=sys.stderr)
        sys.exit(2)
    guard(int(arg))


if __name__ == "__main__":
    main()
