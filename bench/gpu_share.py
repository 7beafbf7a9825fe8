"""GPU sharing: the default trial on CUDA, alone and with 2 or 4 trials on the same GPU.

    python bench/gpu_share.py [--steps 600] [--procs 1 2 4] [--device cuda] [--out FILE.json]

A sweep with `resources.gpu: 1 / 0.5 / 0.25` runs 1 / 2 / 4 trials at once on one GPU: Ray
only co-locates the trial processes (it does not partition the GPU), so this benchmark starts
that many trainer processes on the device directly, each training the default `hybrid_dat`
preset for `--steps` steps (switch at a quarter of them, evaluation on the full sets every quarter, so the first report is
before the switch and a default trial's share of evaluation is kept), and
prints for each sharing level: the training steps/s of one trial before and after the switch
(the trainer's own `steps_per_s`), the wall time, and trials per hour of the whole GPU, counted
as default trials (6000 steps, evaluation included in the same proportion as here).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from core.errors import ConfigError
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import Distinct, positive_int
from sweeper.fs import check_output_file

ROOT = Path(__file__).resolve().parent.parent
TRIAL_STEPS = 6000  # a default trial


def child(steps: int, device: str) -> None:
    import torch

    from trainables.config import load_trial_config, with_overrides
    from trainables.train import train

    torch.set_num_threads(1)
    cfg = with_overrides(load_trial_config("hybrid_dat"), {
        "steps": steps, "dat.switch_step": steps // 4, "eval.every": steps // 4, "device": device})  # first report: before the switch
    reports: list[dict] = []
    start = time.perf_counter()
    train(cfg, report=lambda m, _: reports.append(m))
    wall = time.perf_counter() - start
    print(json.dumps({"wall_s": wall, "steps_per_s": [r["steps_per_s"] for r in reports], "acc_3x": reports[-1]["acc_3x"]}))


def level(n: int, steps: int, device: str) -> dict:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    start = time.perf_counter()
    procs = [subprocess.Popen([sys.executable, __file__, "--child", "--steps", str(steps), "--device", device],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env) for _ in range(n)]
    outs = [p.communicate() for p in procs]
    wall = time.perf_counter() - start
    runs = []
    for p, (out, err) in zip(procs, outs):
        if p.returncode != 0:
            raise SystemExit(f"a trial failed: {err[-2000:]}")
        runs.append(json.loads(out.strip().splitlines()[-1]))
    per_trial_wall = sum(r["wall_s"] for r in runs) / n
    return {
        "trials_at_once": n, "gpu_per_trial": 1 / n, "wall_s": wall,
        "steps_per_s_before_switch": sum(r["steps_per_s"][0] for r in runs) / n,
        "steps_per_s_after_switch": sum(r["steps_per_s"][-1] for r in runs) / n,
        "trials_per_hour": n * 3600 / (per_trial_wall * TRIAL_STEPS / steps),
    }


def main() -> None:
    p = Parser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=positive_int, default=600)
    p.add_argument("--procs", type=positive_int, nargs="+", default=[1, 2, 4], action=Distinct)
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--out")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        return child(args.steps, args.device)
    import torch

    if args.device == "cuda" and not torch.cuda.is_available():
        raise ConfigError("--device cuda: this machine has no CUDA device; use --device cpu")
    if args.out:
        check_output_file(args.out, "--out")  # before the runs, not after them
    name = torch.cuda.get_device_name(0) if args.device == "cuda" else "cpu"
    print(f"device: {name}; torch {torch.__version__}; default hybrid_dat, {args.steps} steps per trial")
    rows = []
    for n in args.procs:
        row = level(n, args.steps, args.device)
        rows.append(row)
        print(f"gpu {row['gpu_per_trial']:.2f} per trial ({n} at once): {row['steps_per_s_before_switch']:.1f} / "
              f"{row['steps_per_s_after_switch']:.1f} steps/s per trial before/after the switch, "
              f"{row['trials_per_hour']:.1f} default trials per hour, wall {row['wall_s']:.1f} s", flush=True)
    if args.out:
        Path(args.out).write_text(json.dumps({"device": name, "torch": torch.__version__, "steps": args.steps, "levels": rows}, indent=2))


if __name__ == "__main__":
    run_tool(main)
