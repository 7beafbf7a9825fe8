"""Sweep overhead: the same N fixed trials through `sweeper launch` and run directly.

    sweep   `sweeper launch` on a generated search space whose N trials are all baseline
            points (seeds 0..N-1 of one config), FIFO scheduler, `--concurrent` at a time.
    direct  the trainer on the same N configs in N plain processes, `--concurrent` at a time.

Prints both wall times and the ratio (target: sweep <= 1.15 x direct), and the time from
starting `sweeper launch` to the first trial's first report (target: <= 15 s).

    python bench/sweep_overhead.py [--trials 4] [--steps 500] [--concurrent 2]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent


def space_file(directory: Path, trials: int, steps: int, concurrent: int) -> Path:
    spec = {
        "name": "overhead",
        "description": "bench/sweep_overhead.py: N fixed trials",
        "fixed": {"eval": {"n_sequences": 128}, "dat": {"switch_step": steps // 4}},
        "space": {"seed": {"type": "int", "low": 0, "high": max(1, trials - 1)}},
        "budget": {"num_samples": trials, "max_concurrent": concurrent, "max_steps": steps, "eval_every": max(1, steps // 4)},
        "scheduler": {"type": "fifo"},
        "searcher": {"sampler": "random", "baseline": [{"seed": i} for i in range(trials)]},
        "resources": {"cpu": 1},
    }
    path = directory / "overhead.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _direct_job(args: tuple) -> float:
    path, seed = args
    import torch

    from sweeper.space import load_space, trial_config_for
    from trainables.train import train

    torch.set_num_threads(1)
    spec = load_space(path, n_samples=0)
    train(trial_config_for(spec, {"seed": seed}))
    return time.perf_counter()


def run_direct(path: Path, trials: int, concurrent: int) -> float:
    start = time.perf_counter()
    with mp.get_context("spawn").Pool(concurrent) as pool:
        pool.map(_direct_job, [(path, i) for i in range(trials)])
    return time.perf_counter() - start


def run_sweep(path: Path, workdir: Path) -> tuple[float, float | None]:
    """(wall time, seconds from start to the first trial's first report)."""
    status = workdir / "sweeps" / "overhead" / "status.json"
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper.cli", "launch", str(path)], cwd=workdir,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    first_report = None
    while proc.poll() is None:
        time.sleep(0.2)
        if first_report is None and status.exists():
            try:
                trials = json.loads(status.read_text())["trials"]
            except (json.JSONDecodeError, KeyError):
                continue
            if any(t["step"] > 0 for t in trials):
                first_report = time.perf_counter() - start
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"sweeper launch failed ({proc.returncode}): {proc.stderr.read()[-2000:]}")
    return wall, first_report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=4)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--concurrent", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="sweep-overhead-") as tmp:
        tmp = Path(tmp)
        path = space_file(tmp, args.trials, args.steps, args.concurrent)
        direct = run_direct(path, args.trials, args.concurrent)
        sweep, first = run_sweep(path, tmp)
    print(f"{args.trials} trials of the default hybrid, {args.steps} steps each, {args.concurrent} at a time")
    print(f"direct  {direct:7.1f} s  (plain processes)")
    print(f"sweep   {sweep:7.1f} s  (sweeper launch: Ray, Optuna, checkpoints)")
    print(f"ratio   {sweep / direct:7.3f}  (target <= 1.15)")
    print(f"first report after {first:.1f} s (target <= 15 s)" if first is not None else "first report: not seen")


if __name__ == "__main__":
    main()
