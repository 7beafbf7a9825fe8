"""Where a sweep lives: `<storage>/<name>/`, or a sweep directory given as a path.

Stdlib only: the CLI's parser and every verb that finds a sweep by name import it cheaply.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from trainables.errors import ConfigError

DEFAULT_STORAGE = "sweeps"
OPTUNA_DB = "optuna.db"  # the sweep's Optuna study (SQLite), in its directory


def is_uri(path: str) -> bool:
    return "://" in path


def sweep_dir_for(name: str, storage: str | None) -> tuple[str, Path]:
    """(Ray's experiment directory, our local sweep directory). They are the same folder for
    a local storage path; for a URI (s3://...) our files stay in ./sweeps/<name>."""
    storage = storage or DEFAULT_STORAGE
    if is_uri(storage):
        return f"{storage.rstrip('/')}/{name}", Path(DEFAULT_STORAGE).resolve() / name
    local = Path(storage).expanduser().resolve() / name
    return str(local), local


def find_sweep_dir(name: str, storage: str | None, marker: str, missing: str | None = None) -> Path:
    """The directory of sweep `name`: `name` itself when it is a path holding `marker`, else
    `<storage>/<name>`. With `missing`, a directory without `marker` is a ConfigError that
    says `missing`; without it, the directory is returned as it is."""
    direct = Path(name)
    sweep_dir = direct if (direct / marker).exists() else sweep_dir_for(name, storage)[1]
    if missing is not None and not (sweep_dir / marker).exists():
        raise ConfigError(f"{sweep_dir}: {missing}")
    return sweep_dir


def study_id(db: Path, study_name: str) -> int | None:
    """The study's id in the SQLite file (its page is /dashboard/studies/ID); None if unknown."""
    try:
        with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as con:
            rows = con.execute("SELECT study_id, study_name FROM studies ORDER BY study_id").fetchall()
    except sqlite3.Error as err:
        raise ConfigError(f"{db}: not an Optuna study ({err})") from None
    if not rows:
        raise ConfigError(f"{db}: holds no study yet")
    return next((i for i, n in rows if n == study_name), rows[0][0] if len(rows) == 1 else None)


def check_study(sweep_dir: Path, study_name: str) -> None:
    """A sweep resumes with its Optuna study (every trial's point and state): a missing or damaged
    study file is one line before Ray starts, not a restore traceback with no trial running."""
    db = Path(sweep_dir) / OPTUNA_DB
    if not db.is_file():
        raise ConfigError(f"{db}: missing: the sweep's Optuna study (its trials' points and states) is gone; "
                          "put it back, or pass --restart to start the sweep over")
    if study_id(db, study_name) is None:
        raise ConfigError(f"{db}: holds no study `{study_name}`; put the sweep's study back, or pass --restart")
