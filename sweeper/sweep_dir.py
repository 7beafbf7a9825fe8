"""Where a sweep lives: `<storage>/<name>/`, or a sweep directory given as a path.

Stdlib only: the CLI's parser and every verb that finds a sweep by name import it cheaply.
"""

from __future__ import annotations

import json
import os
import pickletools
import shutil
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


RAY_STATE_FILES = ("experiment_state-*.json", "search_gen_state-*.json", "searcher-state-*.pkl")  # Ray's snapshot


def _intact(path: Path) -> bool:
    """Whether one of Ray's state files is whole: a pickle that runs to its STOP opcode (read with
    pickletools, which runs nothing; Ray pickles search_gen_state-*.json too), or else JSON that parses."""
    try:
        data = path.read_bytes()
        if data[:1] == b"\x80":  # a pickle's PROTO opcode (protocol 2 and later)
            ops = list(pickletools.genops(data))
            return ops[-1][0].name == "STOP"
        json.loads(data)
        return True
    except (OSError, ValueError, IndexError):
        return False


def ray_temp_dir() -> Path:
    """Where a local Ray keeps its sessions (Ray's rule on Linux: $RAY_TMPDIR, else $TMPDIR, else /tmp)."""
    return Path(os.environ.get("RAY_TMPDIR") or os.environ.get("TMPDIR") or "/tmp") / "ray"


def _newest_file(folder: Path) -> float:
    """When a folder's newest file was written (Ray rewrites some in place: the folder's own mtime lags)."""
    return max((f.stat().st_mtime for f in folder.iterdir() if f.is_file()), default=0.0)


def mend_cut_ray_state(experiment_dir: Path, name: str, ray_temp: Path | None = None) -> list[Path]:
    """Ray writes its snapshot whole in a staging folder on the driver's machine
    (<ray temp>/session_*/artifacts/<timestamp>/<name>/driver_artifacts) and then copies it over the
    sweep folder file by file: a kill during the copy leaves a file cut short, and Ray then "fails to
    restore the run state", logs it, and waits forever with no trial. If a state file here is cut,
    every one is replaced from the newest staging folder left on this machine that holds them all
    whole (a consistent snapshot, newer than the cut one). Returns the files replaced; a cut file
    that cannot be mended is one line (ConfigError)."""
    here = [p for pattern in RAY_STATE_FILES for p in sorted(Path(experiment_dir).glob(pattern))]
    cut = [p for p in here if not _intact(p)]
    if not cut:
        return []
    staging = sorted((ray_temp or ray_temp_dir()).glob(f"session_*/artifacts/*/{name}/driver_artifacts"),
                     key=_newest_file, reverse=True)
    for folder in staging:
        copies = [folder / p.name for p in here]
        if all(c.is_file() and _intact(c) for c in copies):
            for copy, target in zip(copies, here):
                tmp = target.with_name(f".mend-{target.name}")
                try:
                    shutil.copy2(copy, tmp)
                    os.replace(tmp, target)
                except OSError as err:
                    raise ConfigError(f"{target}: cut short by a kill, and its whole copy {copy} could not be put in "
                                      f"its place ({err.strerror or err}); pass --restart to start the sweep over") from None
            return here
    raise ConfigError(f"{cut[0]}: cut short (a kill while Ray copied its snapshot into the sweep folder), and no whole "
                      "copy is left on this machine; pass --restart to start the sweep over")


def check_not_moved(records: list, experiment_dir: Path) -> None:
    """A sweep resumes where it was made: Ray's tuner.pkl, our monitor inside it and status.json name
    the folder by its absolute path, so a moved or copied sweep folder would write to (or look for)
    the old one. One line instead of a resume that breaks halfway."""
    made_at = {str(Path(r.path).parent) for r in records if r.path and not is_uri(r.path)}
    here = str(Path(experiment_dir).resolve())
    if made_at and here not in made_at:
        raise ConfigError(f"{experiment_dir}: this sweep was made at {sorted(made_at)[0]} and has been moved; resume it "
                          "there (move it back), or pass --restart to start it over here")
