"""Where a sweep lives: `<storage>/<name>/`, or a sweep directory given as a path.

Stdlib only: the CLI's parser and every verb that finds a sweep by name import it cheaply.
"""

from __future__ import annotations

from pathlib import Path

from core.errors import ConfigError, brief, cut, expand_user, short_path

DEFAULT_STORAGE = "sweeps"
OPTUNA_DB = "optuna.db"  # the sweep's Optuna study (SQLite), in its directory
SPACE_FILE = "space.yaml"  # the sweep's own copy of its search space, in its directory
NAME_CHARS = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-.")
MAX_NAME = 80


def check_name(value: str) -> str:
    """`value` if it is a safe sweep name, else ValueError stating the rule and a cut value."""
    if not isinstance(value, str):
        raise ValueError(f"must be a string, got {brief(value, 40)}")
    if not value or len(value) > MAX_NAME:
        raise ValueError(f"must be 1 to {MAX_NAME} characters (it names a folder and MLflow runs), "
                         f"got {len(value):,}: {brief(value, 40)}")
    bad = next((c for c in value if c not in NAME_CHARS), None)
    if bad is not None:
        raise ValueError(f"may hold only ASCII letters and digits, `_`, `-` and `.`, got {bad!a} in {brief(value, 40)}")
    if value[0] in ".-":
        raise ValueError(f"must start with a letter, a digit or `_`, got {brief(value, 40)}")
    return value


def is_path(name: str) -> bool:
    """A sweep given as a path, never a name: `.`, `..`, or a `/` before its last part, which no
    sweep's name holds (`NAME/` is the name, as a shell completes it)."""
    bare = name.rstrip("/")
    return name.startswith("/") or "/" in bare or bare in (".", "..")


def is_uri(path: str) -> bool:
    return "://" in path


def sweep_dir_for(name: str, storage: str | None) -> Path:
    """The sweep's own folder, which is also the storage folder of its trials. A URI is a
    ConfigError: trials keep their checkpoints in folders, so sweeps live on a path."""
    storage = storage or DEFAULT_STORAGE
    if is_uri(storage):  # never a folder of the process's own working folder in its place
        raise ConfigError(f"--storage {cut(storage, 80)}: sweeps live in folders (their trials keep checkpoints "
                          "there), so the storage is a path every node sees (a local folder, NFS, a shared volume), "
                          "not a URI")
    return expand_user(storage).resolve() / name


def find_sweep_dir(name: str, storage: str | None, marker: str, missing: str | None = None) -> Path:
    """The directory of sweep `name`: `name` itself when it is a path (`is_path`) or holds `marker`,
    else `<storage>/<name>`. With `missing`, a directory without `marker` is a ConfigError that
    says `missing`; without it, the directory is returned as it is."""
    direct = expand_user(name)
    try:
        sweep_dir = direct if is_path(name) or (direct / marker).exists() else sweep_dir_for(name, storage)
        there = (sweep_dir / marker).exists()
    except ConfigError:
        raise
    except (OSError, ValueError) as err:  # a name too long for the file system, a NUL in it
        raise ConfigError(f"{short_path(name, 80)}: not a sweep's name or folder "
                          f"({getattr(err, 'strerror', None) or err})") from None
    if not there and "/" not in name and not direct.is_symlink() and not direct.exists():
        try:  # nothing of that name here: a name no sweep can have is said so, not looked up (in MLflow, a storage)
            check_name(name)
        except ValueError as err:
            raise ConfigError(f"{short_path(name, 60)}: no sweep of that name or folder here (a sweep's name {err})") from None
    if missing is not None and not there:
        raise ConfigError(f"{short_path(sweep_dir, 120)}: {missing}")
    return sweep_dir


def folder_kind(sweep_dir: Path) -> str:
    """What sits at a sweep's path: `none` (nothing, or an empty folder), `sweep` (a sweep: its study
    is there; `check_ledger` tells its format), `started` (a start killed before its study was made:
    only its space file), `lost` (a sweep whose study is gone), `link` (a symbolic link, dangling or
    not: never followed, never ours to delete), or `foreign` (anything else, never ours to delete)."""
    path = Path(sweep_dir)
    if path.is_symlink():
        return "link"
    if not path.exists():
        return "none"
    if not path.is_dir():
        return "foreign"
    names = {p.name for p in path.iterdir()}
    if not names:
        return "none"
    if OPTUNA_DB in names:
        return "sweep"
    if names <= {SPACE_FILE}:
        return "started"
    if SPACE_FILE in names and names & {"trials", "status.json", "summary.json"}:
        return "lost"
    return "foreign"


def enclosing_sweep(path: Path) -> Path | None:
    """The sweep's folder `path` is or lies in, or None. Stricter than `folder_kind`'s `sweep`, which
    judges the folder a sweep's name points at: over the folders above a path, only one holding both a
    study and a space file counts, so that a user's own `optuna.db` above the storage is not a sweep."""
    for folder in (path, *path.parents):
        if (folder / OPTUNA_DB).is_file() and (folder / SPACE_FILE).is_file():
            return folder
    return None


def check_not_in_sweep(path: Path, what: str) -> None:
    """One ConfigError line when `path` (resolved) lies in a sweep's folder: a sweep's folder holds
    its own files only, and its `--restart` removes everything in it."""
    if (outer := enclosing_sweep(Path(path))) is not None:
        raise ConfigError(f"{what} {short_path(path, 100)}: inside the folder of sweep `{cut(outer.name, 60)}` "
                          f"({short_path(outer, 80)}), which holds that sweep's files only (its --restart removes "
                          "them all); choose a folder outside it")


def check_no_sweep_inside(sweep_dir: Path) -> None:
    """Before a `--restart` removes a sweep's folder: one ConfigError line when another sweep's
    folder lies in it (stored there by an earlier version, or moved in by hand)."""
    import os

    for root, _, files in os.walk(sweep_dir):  # links are not followed
        if root != str(sweep_dir) and OPTUNA_DB in files:
            raise ConfigError(f"--restart: {short_path(sweep_dir, 80)} holds another sweep's folder "
                              f"({short_path(root, 100)}); nothing was removed. Move that sweep out first")
