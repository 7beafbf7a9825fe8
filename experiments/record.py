"""A committed record of runs: one gzipped JSON file, written so that the same runs give the same bytes."""

from __future__ import annotations

import contextlib
import fcntl
import gzip
import json
from pathlib import Path
from typing import Callable, Iterator


def read_record(path: Path, empty: Callable[[], dict]) -> dict:
    """The record at `path`, or `empty()` where there is none yet."""
    if not path.exists():
        return empty()
    with gzip.open(path, "rt") as f:
        return json.load(f)


@contextlib.contextmanager
def record_lock(path: Path) -> Iterator[None]:
    """Hold the record's lock (a file beside it) for one read-change-write, so that two writers
    (a running experiment's export, an import by hand) do not drop each other's runs."""
    with open(path.with_name(path.name + ".lock"), "a") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def write_record(path: Path, data: dict) -> None:
    """Replace the record at `path` atomically (mtime 0 and sorted keys: the same runs, the same bytes)."""
    tmp = path.with_suffix(".tmp")
    with gzip.GzipFile(tmp, "wb", mtime=0) as f:
        f.write(json.dumps(data, separators=(",", ":"), sort_keys=True).encode())
    tmp.replace(path)


def finished_trials(sweep: Path) -> Iterator[tuple[dict, list[dict]]]:
    """(config, reports) of each trial in a sweep folder that trained its every configured step."""
    import yaml

    from trainables.run_dir import RunDir

    for trial in sorted((sweep / "trials").glob("t*")):
        run = RunDir(trial)
        reports, checkpoint = run.reports(), run.checkpoint()
        if not reports or checkpoint is None:
            continue
        try:
            config = yaml.safe_load((checkpoint / "config.yaml").read_text())
        except (OSError, yaml.YAMLError):
            continue
        if isinstance(config, dict) and reports[-1].get("step") == config.get("steps"):
            yield config, reports
