"""A local Ray reachable by this user alone: it listens on 127.0.0.1, and keeps its session files
(sockets, logs) under a folder only this user can enter.

Ray binds its servers (GCS, raylet, workers, agents) to the node IP; with LOOPBACK_ENV set to 0,
read when ray is imported and inherited by every Ray process, the node IP of a single-machine
instance is loopback. Ray's session folder (`sockets/` in it is writable by anyone) lies under
$RAY_TMPDIR/ray: unless the caller set RAY_TMPDIR, `private_temp_dir` sets it to a folder of this
user's, mode 0700. Stdlib only: call `loopback_only` before anything imports ray.
"""

from __future__ import annotations

import os
import stat
import sys
import tempfile
from pathlib import Path

from core.errors import ConfigError, check_folder_variable, cut

LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback_only() -> bool:
    """Ask Ray for a loopback-only local instance. False when ray was imported before the setting
    (the local Ray may then listen beyond 127.0.0.1: the caller says so)."""
    late = "ray" in sys.modules and os.environ.get(LOOPBACK_ENV) != "0"
    os.environ.setdefault(LOOPBACK_ENV, "0")
    return not late


LATE_NOTE = "note: ray was imported before the loopback setting; the local Ray may listen beyond 127.0.0.1"


def private_temp_root() -> Path:
    """Where a local Ray keeps its session folders: $RAY_TMPDIR/ray when the caller set RAY_TMPDIR,
    else <temp>/sweeper-ray-UID/ray (the folder `private_temp_dir` makes)."""
    chosen = os.environ.get("RAY_TMPDIR")
    return Path(chosen or Path(tempfile.gettempdir()) / f"sweeper-ray-{os.getuid()}") / "ray"


SOCKET_LIMIT = 107  # bytes in a Unix socket's path (Linux)
LONGEST_SOCKET = "/session_2026-01-01_00-00-00_000000_4194304/sockets/plasma_store"  # what Ray adds to its root


def check_socket_room() -> None:
    """Before a local Ray starts: its socket paths (its temp root, a session folder, sockets/...) fit
    in a Unix socket's 107 bytes; a longer $RAY_TMPDIR (or $TMPDIR) is one ConfigError line."""
    folder = str(private_temp_root().parent)  # $RAY_TMPDIR, or the folder made under $TMPDIR
    room = SOCKET_LIMIT - len(f"/ray{LONGEST_SOCKET}".encode())
    if len(folder.encode()) > room:
        given = "$RAY_TMPDIR" if os.environ.get("RAY_TMPDIR") else "$TMPDIR"
        raise ConfigError(f"{given} {cut(folder, 120)}: {len(folder.encode())} bytes, too long "
                          f"for the local Ray's socket paths (at most {room}: a Unix socket's path holds "
                          f"{SOCKET_LIMIT}); set RAY_TMPDIR to a shorter folder")


def check_ray_temp() -> None:
    """Read-only, before anything is written: the folder a local Ray will keep its files in can be
    used (`private_temp_dir`'s rules: a folder of this user's, or one that can be made) and its
    socket paths fit (`check_socket_room`); one ConfigError line otherwise."""
    from sweeper.fs import check_writable

    check_folder_variable("RAY_TMPDIR")
    check_folder_variable("TMPDIR")
    if chosen := os.environ.get("RAY_TMPDIR"):
        check_writable(chosen, "$RAY_TMPDIR")
    else:
        if (given := os.environ.get("TMPDIR")) and not os.path.isdir(given):  # Python would fall back to /tmp unsaid
            raise ConfigError(f"$TMPDIR {cut(given, 100)}: no such folder (Ray's files would go to "
                              f"{tempfile.gettempdir()} instead); make it, or unset TMPDIR")
        folder = private_temp_root().parent
        try:
            st = os.lstat(folder)
        except FileNotFoundError:
            check_writable(folder, "$TMPDIR")  # made by `private_temp_dir` when Ray starts
        except OSError as err:
            raise _unusable(folder, err) from None
        else:
            if why := _not_ours(st):
                raise _unusable(folder, why)
    check_socket_room()


def _not_ours(st: os.stat_result) -> str | None:
    """Why a folder's `lstat` rules it out for the local Ray's files, or None: it must be a folder
    (not a link to one) of this user's."""
    if stat.S_ISLNK(st.st_mode):
        return "a link"
    if not stat.S_ISDIR(st.st_mode):
        return "not a folder"
    return "another user's" if st.st_uid != os.getuid() else None


def _unusable(folder: Path, why) -> ConfigError:
    why = why if isinstance(why, str) else why.strerror or why
    return ConfigError(f"{cut(str(folder), 120)}: cannot keep the local Ray's files there ({why}); "
                       "set RAY_TMPDIR to a folder of your own")


def private_temp_dir() -> None:
    """Before a local Ray starts: RAY_TMPDIR a folder only this user can enter (made 0700, or made
    so), unless the caller chose one. A folder of that name owned by another user, or not a
    folder, is one ConfigError line."""
    if os.environ.get("RAY_TMPDIR"):
        return
    folder = private_temp_root().parent
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        st = os.lstat(folder)
        if why := _not_ours(st):
            raise _unusable(folder, why)
        if stat.S_IMODE(st.st_mode) & 0o077:
            os.chmod(folder, 0o700)
    except OSError as err:
        raise _unusable(folder, err) from None
    os.environ["RAY_TMPDIR"] = str(folder)
