"""How far a mid-run evaluation on the first `eval.mid_run_sequences` sequences lies from the full sets.

    python bench/eval_subsets.py [--seeds 11 12] [--steps 3000] [--head 64]

Trains default `hybrid_dat` trials (one process per seed, side by side, one thread each) with full
sets at every report, and scores each report's weights on the first `--head` sequences of every set
as well. Prints, per length, the mean, spread and largest difference subset - full of `acc_{k}x`, and
the time of one evaluation on each. ASHA never sees the subset: its rungs and every trial's last
report use the full sets (docs/trainer.md).
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import Distinct, count, positive_int


def child(seed: int, steps: int, head: int) -> None:
    import torch

    torch.set_num_threads(1)
    from trainables.config import load_trial_config, with_overrides
    from trainables.model import HybridLM
    from trainables.objectives import make_objective
    from trainables.train import CHECKPOINT_FILE, train

    cfg = load_trial_config("hybrid_dat")
    cfg = with_overrides(cfg, {"seed": seed, "steps": steps, "device": "cpu", "eval.mid_run_sequences": 10**6,
                               "dat.switch_step": min(cfg.dat.switch_step, steps // 2)}, source="bench")
    objective = make_objective(cfg)
    full = objective.eval_sets(torch.device("cpu"))
    subsets = {k: s.head(head) for k, s in full.items()}
    model = HybridLM(cfg.model, objective.vocab_size)

    def report(metrics, ckpt):
        model.load_state_dict(torch.load(f"{ckpt}/{CHECKPOINT_FILE}", weights_only=False)["model"])
        model.attn_scale = metrics["attn_scale"]
        times = {}
        for name, sets in (("full", full), ("head", subsets)):
            start = time.perf_counter()
            scores = objective.evaluate(model, sets)
            times[name] = time.perf_counter() - start
            if name == "head":
                row = {"step": metrics["step"], "seed": seed, "times": times,
                       "diff": {k: scores[f"acc_{k}x"] - metrics[f"acc_{k}x"] for k in cfg.eval.multipliers}}
        print("ROW " + json.dumps(row), flush=True)

    train(cfg, report=report)


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=count, nargs="+", default=[11, 12], action=Distinct)
    parser.add_argument("--steps", type=positive_int, default=3000)
    parser.add_argument("--head", type=positive_int, default=64)
    parser.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        return child(args.child, args.steps, args.head)
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(s), "--steps", str(args.steps), "--head", str(args.head)],
                              stdout=subprocess.PIPE, text=True) for s in args.seeds]
    rows = [json.loads(line[4:]) for p in procs for line in p.communicate()[0].splitlines() if line.startswith("ROW ")]
    if any(p.returncode for p in procs) or not rows:
        raise SystemExit("a training run failed")
    print(f"{len(rows)} reports (seeds {args.seeds}, every 250 steps to {args.steps}): first {args.head} sequences "
          "against the full sets, acc_{k}x")
    for k in rows[0]["diff"]:
        d = [r["diff"][k] for r in rows]
        print(f"  {k}x: mean {statistics.mean(d):+.4f}  sd {statistics.pstdev(d):.4f}  largest |diff| {max(map(abs, d)):.4f}")
    full, head = (statistics.median(r["times"][n] for r in rows) for n in ("full", "head"))
    print(f"one evaluation at every length: full sets {full:.2f} s, first {args.head}: {head:.2f} s (ratio {head / full:.2f}; "
          "its own process, beside the others)")


if __name__ == "__main__":
    run_tool(main)
