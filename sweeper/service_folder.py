"""This user's folder of the resident service and the files in it (no Ray, MLflow or torch).

    service_dir()     the folder (mode 0700): $SWEEPER_SERVICE_DIR, else $XDG_RUNTIME_DIR/dat-sweeper,
                      else ~/.cache/dat-sweeper/service
    SOCKET, STATE, LOG, LOCK  in it: the Unix socket (mode 0600), the running service's pid and
                      code, its log, the lock its one service holds
    check_entries()   each of those this user's and of its kind, or one line naming it
    read_state()      what the running service wrote of itself ({} when nothing sound is there)
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from core import json_text
from core.errors import ConfigError, brief, check_folder_variable, cut
from sweeper.orphans import PROCESSES_FILE

SOCKET, STATE, LOG, LOCK = "service.sock", "service.json", "service.log", "service.lock"
MAX_SOCKET_PATH = 100  # sun_path holds 108 bytes on Linux, 104 on macOS
MAX_STATE = 1 << 16  # service.json: a few fields


def service_dir() -> Path:
    if os.environ.get("SWEEPER_SERVICE_DIR"):
        check_folder_variable("SWEEPER_SERVICE_DIR")
        given = os.environ["SWEEPER_SERVICE_DIR"]
        try:
            folder = Path(given).expanduser()
            if not folder.is_absolute():  # a service per working folder: a launch elsewhere would never find it
                raise ConfigError(f"SWEEPER_SERVICE_DIR {brief(given, 80)}: a relative path; give an absolute one "
                                  "(the service is found by it from every folder)")
            return folder.resolve()
        except (RuntimeError, OSError) as err:  # `~user` of no user, a loop of links
            raise ConfigError(f"SWEEPER_SERVICE_DIR {cut(given, 80)}: not a usable folder ({cut(str(err), 80)})") from None
    if os.path.isabs(os.environ.get("XDG_RUNTIME_DIR", "")):  # a relative one is ignored, as the XDG spec says
        return Path(os.environ["XDG_RUNTIME_DIR"]) / "dat-sweeper"
    return Path.home() / ".cache" / "dat-sweeper" / "service"


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (mode 0700), or check that it is a folder of this user's that no one else may
    enter; one line otherwise (a folder another user planted would let them take the socket's place)."""
    socket_path = path / SOCKET
    if len(str(socket_path)) > MAX_SOCKET_PATH:  # refused before anything is made
        raise ConfigError(f"{cut(str(socket_path), 80)}: a socket path longer than {MAX_SOCKET_PATH} characters; "
                          "set SWEEPER_SERVICE_DIR to a shorter folder")
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        info = os.lstat(path)
    except OSError as err:  # a file where the folder (or a folder above it) should be, no permission
        raise ConfigError(f"{cut(str(path), 120)}: cannot be the service's folder ({err.strerror or err}); "
                          "set SWEEPER_SERVICE_DIR to a folder of yours") from None
    if not stat.S_ISDIR(info.st_mode):
        raise ConfigError(f"{path}: the service's folder is not a folder (a link?); remove it")
    if info.st_uid != os.getuid():
        raise ConfigError(f"{path}: the service's folder belongs to user {info.st_uid}, not to you ({os.getuid()}); "
                          "set SWEEPER_SERVICE_DIR to a folder of yours")
    if info.st_mode & 0o077:
        mode = stat.S_IMODE(info.st_mode)
        if _holds_only_the_service_s(path):
            raise ConfigError(f"{path}: the service's folder is open to other users (mode {mode:o}); chmod 700 {path}")
        raise ConfigError(f"{cut(str(path), 120)}: open to other users (mode {mode:o}) and holding more than the "
                          "service's files (a folder others use): set SWEEPER_SERVICE_DIR to a folder of the service's own")
    return path


def _holds_only_the_service_s(path: Path) -> bool:
    """Whether the folder holds the service's files and nothing else (closing it then harms no one)."""
    try:
        with os.scandir(path) as entries:
            return all(entry.name in KINDS for entry in entries)
    except OSError:
        return False


KINDS = {SOCKET: ("a socket", stat.S_ISSOCK), STATE: ("a file", stat.S_ISREG), LOG: ("a file", stat.S_ISREG),
         LOCK: ("a file", stat.S_ISREG), PROCESSES_FILE: ("a file", stat.S_ISREG)}  # the last: its Ray's processes


def check_entries(directory: Path) -> None:
    """Each of the service's files in its folder is absent, this user's and of its kind (never a link,
    a folder in a file's place, or a socket open to others): one line naming it otherwise."""
    for name, (kind, is_kind) in KINDS.items():
        try:
            info = os.lstat(directory / name)
        except FileNotFoundError:
            continue
        except OSError as err:
            raise ConfigError(f"{directory / name}: cannot be read ({err.strerror or err}); remove it") from None
        if not is_kind(info.st_mode) or stat.S_ISLNK(info.st_mode):
            raise ConfigError(f"{cut(str(directory / name), 160)}: not {kind} (a link or a folder in its place?); the "
                              "service's own file goes there: remove it")
        if info.st_uid != os.getuid() or (name == SOCKET and info.st_mode & 0o077):  # the folder keeps the files
            raise ConfigError(f"{cut(str(directory / name), 160)}: not this user's alone (owner {info.st_uid}, mode "
                              f"{stat.S_IMODE(info.st_mode):o}); remove it, or `chmod 600` it if it is yours")


def folder_info(directory: Path) -> os.stat_result | None:
    """The service folder's lstat, None where it does not exist (no service runs); a file there, or
    above it, is a ConfigError: no service could ever run there."""
    try:
        info = os.lstat(directory)
    except NotADirectoryError:
        info = None
    except OSError:
        return None
    if info is None or not (stat.S_ISDIR(info.st_mode) or stat.S_ISLNK(info.st_mode)):
        raise ConfigError(f"{cut(str(directory), 120)}: cannot be the service's folder (a file, or under one); set "
                          "SWEEPER_SERVICE_DIR to a folder of yours, or unset it")
    return info


def read_state(directory: Path | None = None) -> dict:
    """service.json's fields; {} for anything but a regular file of JSON object (a FIFO put there is
    not waited on, a link not followed)."""
    try:
        fd = os.open((directory or service_dir()) / STATE, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError:
        return {}
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return {}
        state = json_text.loads(os.read(fd, MAX_STATE))
        return state if isinstance(state, dict) else {}
    except (OSError, ValueError):
        return {}
    finally:
        os.close(fd)
