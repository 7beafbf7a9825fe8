"""What the sweep benchmarks share: a search space of N fixed trials and the `sweeper launch` process.

The space's N trials are all baseline points (seeds 0..N-1 of the default `hybrid_dat` trial, switch at a
quarter of the steps), FIFO, so every launch runs the same work; the benchmarks vary where it runs
(`resources`), how many at once and how often it evaluates.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parent.parent


def space_file(directory: Path, name: str, trials: int, steps: int, *, concurrent: int, eval_every: int,
               resources: dict[str, float], fixed: dict[str, Any] | None = None, description: str = "") -> Path:
    """Write `<directory>/<name>.yaml`, a space of `trials` fixed seeds of `steps` steps each."""
    spec = {
        "name": name,
        "description": description or f"{trials} fixed trials",
        "fixed": {**(fixed or {}), "dat": {"switch_step": steps // 4}},
        "space": {"seed": {"type": "int", "low": 0, "high": max(1, trials - 1)}},
        "budget": {"num_samples": trials, "max_concurrent": concurrent, "max_steps": steps, "eval_every": eval_every},
        "scheduler": {"type": "fifo"},
        "searcher": {"sampler": "random", "baseline": [{"seed": i} for i in range(trials)]},
        "resources": resources,
    }
    path = directory / f"{name}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def start_launch(path: Path, workdir: Path, root: Path = ROOT, extra_env: dict[str, str] | None = None,
                 **popen: Any) -> subprocess.Popen:
    """`sweeper launch PATH --progress lines` in `workdir`, on the code of `root` (this checkout, or an
    older commit's tree: bench/worktree.py), output unbuffered; `extra_env` on top of this environment
    (SWEEPER_SERVICE_DIR: which sweep service it may attach to)."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1", **(extra_env or {}),
           "PYTHONPATH": os.pathsep.join(p for p in [str(root), os.environ.get("PYTHONPATH", "")] if p)}
    return subprocess.Popen([sys.executable, "-m", "sweeper.cli", "launch", str(path), "--progress", "lines"],
                            cwd=workdir, env=env, text=True, **popen)
