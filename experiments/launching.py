"""`sweeper launch` as a child of an experiment's runner, stopped the way a user stops a sweep.

The child runs in a session of its own, so a Ctrl-C at the terminal (or a SIGINT to the runner)
reaches it exactly once, forwarded by the runner: the sweep stops as its own Ctrl-C stops it,
writes itself down and resumes on the next run, and the runner then records what finished.
A runner started in the background (`nohup ... &`) is born ignoring SIGINT; while it waits on
the child it takes SIGINT again, so `kill -INT` stops it there too.
"""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path


def sweeper_launch(space: Path, *options: str, cwd: Path) -> int:
    """Run `sweeper launch SPACE OPTIONS...` to its end; its exit code (130: interrupted, resumable)."""
    child = subprocess.Popen([str(Path(sys.executable).with_name("sweeper")), "launch", str(space), *options], cwd=cwd,
                             start_new_session=True)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # the runner's main thread
    try:
        return child.wait()
    except KeyboardInterrupt:
        child.send_signal(signal.SIGINT)
        return child.wait()
    finally:
        signal.signal(signal.SIGINT, previous)
