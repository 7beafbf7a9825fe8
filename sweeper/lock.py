"""One driver per sweep, and one creator of an embedded tracking store, through OS file locks.

`flock` locks belong to the open file: the kernel drops them when the process ends, however
it ends (SIGKILL included), so a lock left by a dead driver never blocks the next launch.

A lock file sits in a folder others may write to (a shared `--storage`), and the driver writes
its pid into it, so it is opened without following a link (O_NOFOLLOW): a lock file planted as a
link, to a file the user can write, is refused in one line and its target never opened for
writing; so is a lock path that is a folder, a FIFO or a device, or a file hard-linked with another
(O_NOFOLLOW does not see a hard link: its other name's file would take the pid).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import stat
import time
from pathlib import Path
from typing import IO, Iterator

from core import json_text
from core.errors import ConfigError, cut

def _link_refused(path: Path) -> ConfigError:
    return ConfigError(f"lock file {path}: a link (to {cut(os.readlink(path), 80)}); a lock file is never "
                       "followed through a link: remove the link")


def _not_regular(path: Path) -> ConfigError:
    return ConfigError(f"lock file {path}: not a regular file; remove it")


def _hard_linked(path: Path, links: int) -> ConfigError:
    return ConfigError(f"lock file {path}: hard-linked with another file ({links} links), which the driver's pid "
                       "would overwrite; remove it (a lock file is the sweeper's own)")


def check_lock_file(path: Path) -> None:
    """What `open_lock_file` would refuse, found without opening or making anything: a check run
    before a launch changes anything (a `--restart` removes the sweep's folder only after it)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    except OSError as err:
        raise ConfigError(f"lock file {path}: cannot be read ({err.strerror or err})") from None
    if stat.S_ISLNK(st.st_mode):
        raise _link_refused(path)
    if not stat.S_ISREG(st.st_mode):
        raise _not_regular(path)
    if st.st_nlink > 1:
        raise _hard_linked(path, st.st_nlink)
    if not os.access(path, os.R_OK | os.W_OK):
        raise ConfigError(f"lock file {path}: cannot be opened (Permission denied)")


def open_lock_file(path: Path) -> IO:
    """`path` opened for reading and writing, created if missing, never through a link; one
    ConfigError line for a link or anything but a regular file."""
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o644)
    except OSError as err:
        if os.path.islink(path):
            raise _link_refused(path) from None
        raise ConfigError(f"lock file {path}: cannot be opened ({err.strerror or err})") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
        os.close(fd)
        raise _not_regular(path) if not stat.S_ISREG(st.st_mode) else _hard_linked(path, st.st_nlink)
    os.set_blocking(fd, True)
    return os.fdopen(fd, "r+")


PROBE_S = 1.0  # `lock_held` holds a shared lock for an instant: an exclusive one is retried this long


def take_exclusive(f, within_s: float = PROBE_S, pause_s: float = 0.05) -> None:
    """The exclusive lock of the open lock file `f`, retried within `within_s` (by default PROBE_S: a
    reader's `lock_held` probe may hold it shared at that instant); BlockingIOError when another
    process holds it past that."""
    deadline = time.monotonic() + within_s
    while True:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise
            time.sleep(pause_s)


def lock_held(path: Path) -> bool:
    """Whether a process holds the lock file at `path` now (read-only: nothing made, nothing taken;
    the kernel drops a lock when its holder ends)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
        return False
    except BlockingIOError:
        return True
    except OSError:
        return False
    finally:
        os.close(fd)


def roll_back_unheld(sweep_dir: Path, study: Path) -> bool:
    """What a killed driver left half-done in the sweep's study rolled back (`fs.roll_back`); True
    when there was a rollback. A journal beside the study while a driver holds the sweep's lock is
    that driver's write in progress, not a killed one's: SQLite waits for it, and it is not reported."""
    from sweeper.fs import roll_back

    lock = sweep_lock_path(sweep_dir)
    return not lock_held(lock) and roll_back(study) and not lock_held(lock)


def sweep_lock_path(sweep_dir: Path) -> Path:
    """Beside the sweep's directory, not in it: `--restart` deletes the directory."""
    return Path(sweep_dir).parent / f".{Path(sweep_dir).name}.lock"


def hold_sweep_lock(sweep_dir: Path, name: str, on_service: bool = False, claim: bool = True) -> IO:
    """Take the sweep's lock until `release_sweep_lock` (or the process's end), or refuse in one
    line naming the driver that holds it. The caller keeps the handle: the lock lives with it.
    `claim=False`: the file keeps the last holder's record until `claim_sweep_lock` (a launch
    refused before it changes nothing)."""
    path = sweep_lock_path(sweep_dir)
    path.parent.mkdir(parents=True, exist_ok=True)
    f = open_lock_file(path)
    try:
        take_exclusive(f)
    except BlockingIOError:
        f.seek(0)
        try:
            holder = json_text.loads(f.read(4096) or "{}")  # what the holder wrote: a short JSON object
        except ValueError:
            holder = {}
        f.close()
        holder = holder if isinstance(holder, dict) else {}
        pid, host = cut(str(holder.get("pid", "?")), 20), cut(str(holder.get("host", "?")), 60)
        if holder.get("service") is True:  # the pid is the service's: a signal there stops every sweep on it
            raise ConfigError(f"sweep {name} is already running on the sweep service (on {host}); wait "
                              "for it, or stop it (Ctrl-C in the launch that started it) and run this again") from None
        if not _recorded_holder(holder):  # the lock's taker has not written itself yet: the record is an ended one's
            raise ConfigError(f"sweep {name} is already running or starting in another launch (its lock names no live "
                              "driver to stop yet); wait for it (`sweeper status`) and run this again") from None
        raise ConfigError(f"sweep {name} is already running (driver pid {pid} on {host}); "
                          f"wait for it, or stop it (Ctrl-C there, or kill -INT {pid}) and run this again") from None
    if claim:
        claim_sweep_lock(f, on_service)
    return f


def claim_sweep_lock(handle: IO, on_service: bool) -> None:
    """Write this driver into the lock it holds: the pid and host a second launch names."""
    from sweeper.status import driver_record

    text = json.dumps({**driver_record(), "since": time.time(), "service": on_service})
    handle.seek(0)
    handle.write(text)  # then cut to its length: a second launch never reads an empty file in between
    handle.truncate()
    handle.flush()


def _recorded_holder(holder: dict) -> bool:
    """Whether the lock file names the process that holds the lock: alive, and started when its record
    says (a record of a driver that has ended, or none yet, names no one to stop)."""
    from sweeper.status import driver_alive

    if not isinstance(holder.get("pid"), int) or isinstance(holder.get("pid"), bool):
        return False
    return driver_alive({"driver": holder, "updated": holder.get("since")})


def release_sweep_lock(handle: IO) -> None:
    """Give a sweep's lock back."""
    handle.close()  # closing the file drops its flock


@contextlib.contextmanager
def file_lock(path: Path, timeout_s: float = 120.0) -> Iterator[None]:
    """An exclusive lock on `path` for the block (waits up to `timeout_s`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_lock_file(path) as f:
        try:
            take_exclusive(f, timeout_s, pause_s=0.1)
        except BlockingIOError:
            raise ConfigError(f"{path}: still locked after {timeout_s:.0f} s by another sweeper process") from None
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)
