"""Trials per hour of a real sweep on one GPU at `resources.gpu` 1, 0.5 and 0.25.

    python bench/gpu_sweep.py [--trials 16] [--steps 1000] [--gpus 1 0.5 0.25 0.125] [--out FILE.json]

For each fraction, `sweeper launch` runs a generated space of `--trials` fixed points (seeds 0..N-1 of
the default `hybrid_dat` trial, `fixed.device: cuda`, switch at a quarter of the steps, evaluation on
the full sets at the middle and the end), FIFO, with `resources: {cpu: 1, gpu: FRACTION}`, so Ray packs
1/FRACTION trials on the GPU at once (it co-locates them; the GPU is not partitioned). Prints the wall
time of each launch (Ray start-up, MLflow, and tail included), trials per hour of the whole GPU at this
trial size, and the same as default 6000-step trials (`--steps` over 6000 of a trial's time, the fixed
costs of each launch scaled alike: an estimate). `bench/gpu_share.py` measures the trainer's side of the
same sharing with plain processes, without Ray.
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path (the tests)
from fixed_trials import space_file, start_launch  # noqa: E402
from core.errors import ConfigError
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import Distinct, positive_int, positive_number
from sweeper.fs import check_output_file

TRIAL_STEPS = 6000  # a default trial


def gpu_space_file(directory: Path, name: str, trials: int, steps: int, gpu: float) -> Path:
    return space_file(directory, name, trials, steps, concurrent=trials, eval_every=steps // 2,
                      resources={"cpu": 1, "gpu": gpu}, fixed={"device": "cuda"},
                      description=f"bench/gpu_sweep.py: {trials} fixed trials at resources.gpu {gpu:g}")


def launch(path: Path, workdir: Path, name: str, expected: int) -> dict:
    start = time.perf_counter()
    proc = start_launch(path, workdir, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out, err = proc.communicate()
    wall = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"sweeper launch failed ({proc.returncode}): {out[-1500:]}\n{err[-1500:]}")
    trials = json.loads((workdir / "sweeps" / name / "status.json").read_text())["trials"]
    statuses = sorted({t["status"] for t in trials})
    if statuses != ["completed"] or len(trials) != expected:  # a failed trial (out of GPU memory, say) is no throughput
        raise SystemExit(f"{name}: {len(trials)} trials of {expected}, statuses {statuses}: not a measurement")
    return {"wall_s": wall, "statuses": statuses, "n": len(trials)}


def main() -> None:
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--trials", type=positive_int, default=16)
    ap.add_argument("--steps", type=positive_int, default=1000)
    ap.add_argument("--gpus", type=positive_number, nargs="+", default=[1, 0.5, 0.25, 0.125], action=Distinct)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    if args.out:  # before any trial runs: a refusal after them would lose the result
        check_output_file(args.out, "--out")
    import torch

    if not torch.cuda.is_available():
        raise ConfigError("bench/gpu_sweep.py: needs a CUDA device; this machine has none")
    print(f"device: {torch.cuda.get_device_name(0)}; torch {torch.__version__}; {args.trials} default hybrid_dat "
          f"trials of {args.steps} steps per sweep", flush=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="gpu-sweep-") as tmp:
        for gpu in args.gpus:
            name = f"gpu{str(gpu).replace('.', '_')}"
            run = launch(gpu_space_file(Path(tmp), name, args.trials, args.steps, gpu), Path(tmp), name, args.trials)
            per_hour = args.trials * 3600 / run["wall_s"]
            row = {"gpu_per_trial": gpu, "trials_at_once": int(1 / gpu), **run, "trials_per_hour": per_hour,
                   "default_trials_per_hour": per_hour * args.steps / TRIAL_STEPS}
            rows.append(row)
            print(f"resources.gpu {gpu:g} ({row['trials_at_once']} at once): {run['n']} trials {'/'.join(run['statuses'])} "
                  f"in {run['wall_s']:.1f} s: {per_hour:.0f} trials of {args.steps} steps per hour, "
                  f"~{row['default_trials_per_hour']:.1f} default trials per hour", flush=True)
    if args.out:
        args.out.write_text(json.dumps({"device": torch.cuda.get_device_name(0), "steps": args.steps,
                                        "trials": args.trials, "levels": rows}, indent=1))


if __name__ == "__main__":
    run_tool(main)
