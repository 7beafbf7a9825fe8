"""Chunks of a long replay run in a process pool, each kept in a folder as it finishes, so that an
interrupted rebuild resumes where it stopped.

A chunk is filed under a hash of everything that decides its rows: the task as the caller describes it
(the search space, the grid, the seeds) and the code that replays it (the bytes of this checkout's
modules that the replay imports, and the versions of the libraries it samples with). A chunk made by
other code or on another grid is never read back; it is replayed again.
"""

from __future__ import annotations

import gzip
import hashlib
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OWN = ("core", "sweeper", "trainables", "experiments")  # this checkout's packages
LIBRARIES = ("optuna", "numpy", "pydantic")


def code_fingerprint(modules: Sequence[str]) -> str:
    """A hash of this checkout's modules that importing `modules` loads (read in a fresh interpreter,
    so what the caller happens to have imported does not count) and of the libraries' versions."""
    probe = ("import importlib, importlib.metadata as m, json, sys\n"
             f"for name in {list(modules)!r}: importlib.import_module(name)\n"
             f"own = sorted(n for n in sys.modules if n.split('.')[0] in {OWN!r} and getattr(sys.modules[n], '__file__', None))\n"
             "print(json.dumps({'files': [sys.modules[n].__file__ for n in own],"
             f" 'versions': [m.version(p) for p in {LIBRARIES!r}], 'python': sys.version}}))")
    found = json.loads(subprocess.run([sys.executable, "-c", probe], cwd=ROOT, check=True, capture_output=True,
                                      text=True).stdout)
    digest = hashlib.sha256(json.dumps([found["versions"], found["python"]]).encode())
    for file in found["files"]:
        path = Path(file)
        digest.update(str(path.relative_to(ROOT)).encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()


class Chunks:
    """Finished chunks in `folder` (None: none kept), valid for the code whose fingerprint is `code`;
    `whole(task, rows)` says whether rows read back are what the task makes (else it is replayed)."""

    def __init__(self, folder: Path | None, code: str, whole: Callable[[dict, list], bool] = lambda task, rows: True):
        self.folder, self.code, self.whole = folder, code, whole
        self.kept = self.replayed = 0

    def _path(self, task: dict) -> Path | None:
        if self.folder is None:
            return None
        blob = json.dumps({"task": task, "code": self.code}, sort_keys=True, default=repr)
        return self.folder / f"{hashlib.sha256(blob.encode()).hexdigest()[:32]}.json.gz"

    def read(self, task: dict) -> list | None:
        path = self._path(task)
        if path is None or not path.is_file():
            return None
        try:
            with gzip.open(path, "rt") as f:
                stored = json.load(f)
        except (OSError, EOFError, ValueError):  # cut short by a kill: replay it again
            return None
        rows = stored.get("rows") if isinstance(stored, dict) else None
        return rows if isinstance(rows, list) and self.whole(task, rows) else None  # damaged: replayed

    def write(self, task: dict, rows: list) -> None:
        path = self._path(task)
        if path is None:
            return
        self.folder.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=self.folder, suffix=".tmp", delete=False) as raw:
            with gzip.GzipFile(fileobj=raw, mode="wb", mtime=0) as f:
                f.write(json.dumps({"rows": rows}).encode())
        os.replace(raw.name, path)

    def run(self, fn: Callable[..., list], tasks: Sequence[tuple[dict, tuple]], jobs: int) -> list[list]:
        """fn(*args) for every (description, args) in `tasks`, in their order; a chunk kept before is read,
        every other one is kept as soon as it finishes."""
        done: list[list | None] = [self.read(task) for task, _ in tasks]
        todo = [i for i, rows in enumerate(done) if rows is None]
        self.kept += len(tasks) - len(todo)
        self.replayed += len(todo)
        if jobs == 1:
            for i in todo:
                done[i] = self._keep(tasks[i][0], fn(*tasks[i][1]))
            return done
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            futures = {pool.submit(fn, *tasks[i][1]): i for i in todo}
            for future in as_completed(futures):
                i = futures[future]
                done[i] = self._keep(tasks[i][0], future.result())
        return done

    def _keep(self, task: dict, rows: list) -> list:
        """The rows as a chunk read back gives them (JSON's lists for tuples), so that a resumed rebuild
        and one run in one go compute from the same values."""
        rows = json.loads(json.dumps(rows))
        self.write(task, rows)
        return rows
