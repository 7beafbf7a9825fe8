"""One driver per sweep, and one creator of an embedded tracking store, through OS file locks.

`flock` locks belong to the open file: the kernel drops them when the process ends, however
it ends (SIGKILL included), so a lock left by a dead driver never blocks the next launch.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
from pathlib import Path
from typing import IO, Iterator

from trainables.errors import ConfigError

_held: list[IO] = []  # the sweep locks of this process, open for its lifetime


def sweep_lock_path(sweep_dir: Path) -> Path:
    """Beside the sweep's directory, not in it: `--restart` deletes the directory."""
    return Path(sweep_dir).parent / f".{Path(sweep_dir).name}.lock"


def hold_sweep_lock(sweep_dir: Path, name: str) -> None:
    """Take the sweep's lock for the rest of this process, or refuse in one line naming the
    driver that holds it."""
    path = sweep_lock_path(sweep_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open(path, "a+")
    try:
        fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        f.seek(0)
        try:
            holder = json.loads(f.read() or "{}")
        except ValueError:
            holder = {}
        f.close()
        pid, host = holder.get("pid", "?"), holder.get("host", "?")
        raise ConfigError(f"sweep {name} is already running (driver pid {pid} on {host}); "
                          f"wait for it, or stop it (Ctrl-C there, or kill -INT {pid}) and run this again") from None
    f.seek(0)
    f.truncate()
    f.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
    f.flush()
    _held.append(f)


@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """An exclusive lock on `path` for the block (waits up to `timeout_s`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a+") as f:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise ConfigError(f"{path}: still locked after {timeout_s:.0f} s by another sweeper process") from None
                time.sleep(0.1)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
