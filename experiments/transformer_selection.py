"""Choose the pure Transformer baseline's positions and depth on the recall-only task at 1x.

The rule, fixed before the runs (docs/results/transformer_baseline.md): the candidates are tried
in a fixed order, cheapest first (CANDIDATES), and the first whose `recall_acc_1x` is >= 0.95 on
*both* exploration seeds (100, 101) is chosen; a candidate that misses on one seed is not run on
the other (it cannot pass), and nothing after the chosen one is run. Only the 1x
evaluation is computed: longer lengths are not looked at, and neither the confirmation seeds
nor the confirmation's evaluation seed are used (evaluation seed 7 here).

    .venv/bin/python -m experiments.transformer_selection

Runs one at a time (one torch thread); results are appended to
docs/results/transformer_baseline.json as each finishes, and a finished run is never redone.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import torch

from core.errors import ConfigError, brief, short_path
from experiments.record import git_restore, read_json_rows
from trainables.config import TrialConfig
from trainables.train import train
from core.tool_cli import Parser, run_tool, summary

OUT = Path(__file__).resolve().parent.parent / "docs" / "results" / "transformer_baseline.json"
SEEDS = (100, 101)  # exploration seeds: never the confirmation's
EVAL_SEED = 7  # not the confirmation's evaluation seed
# (positional, n_layers, lr): depth first, then positions; a lower learning rate only if no depth passes
CANDIDATES = (("rope", 2, 3e-3), ("sinusoidal", 2, 3e-3), ("rope", 4, 3e-3), ("sinusoidal", 4, 3e-3),
              ("rope", 2, 1e-3), ("sinusoidal", 2, 1e-3))
BAR = 0.95


def candidate(positional: str, n_layers: int, lr: float, seed: int) -> TrialConfig:
    return TrialConfig.model_validate({
        "task": {"name": "recall"},
        "model": {"mixer": "none", "attention": True, "positional": positional, "n_layers": n_layers,
                  "attn_zero_init": False},  # standard init: nothing is switched on later
        "dat": {"mode": "none"},
        "optim": {"lr": lr},
        "eval": {"multipliers": [1], "seed": EVAL_SEED},
        "steps": 6000, "seed": seed, "device": "cpu",
    })


def main() -> None:
    ap = Parser(description=summary(__doc__))
    ap.parse_args()
    torch.set_num_threads(1)
    done = read_json_rows(OUT, {"positional": str, "n_layers": int, "seed": int, "recall_acc_1x": (int, float)})
    if bad := next((r for r in done if not 0 <= r["recall_acc_1x"] <= 1), None):
        raise ConfigError(f"{short_path(OUT, 100)}: recall_acc_1x {brief(bad['recall_acc_1x'], 20)} of seed "
                          f"{brief(bad['seed'], 20)} is not an accuracy in [0, 1]; restore it with {git_restore(OUT)}")
    for positional, n_layers, lr in CANDIDATES:
        for seed in SEEDS:
            rows = [r for r in done if (r["positional"], r["n_layers"], r.get("lr", 3e-3)) == (positional, n_layers, lr)]
            if any(r["recall_acc_1x"] < BAR for r in rows):
                break  # missed on a seed: cannot pass
            if any(r["seed"] == seed for r in rows):
                continue
            cfg = candidate(positional, n_layers, lr, seed)
            start = time.perf_counter()
            history = []
            result = train(cfg, report=lambda m, _c: history.append((int(m["step"]), m["recall_acc_1x"])))
            row = {"positional": positional, "n_layers": n_layers, "lr": lr, "seed": seed, "status": result.status,
                   "recall_acc_1x": result.metrics.get("recall_acc_1x"), "wall_s": round(time.perf_counter() - start, 1),
                   "history": history, "config": cfg.model_dump(mode="json")}
            done.append(row)
            OUT.write_text(json.dumps(done, indent=1))
            print(f"{positional:<10} {n_layers} layers lr {lr:g} seed {seed}: recall_acc_1x {row['recall_acc_1x']:.3f} "
                  f"({row['wall_s']:.0f} s)", flush=True)
        rows = [r for r in done if (r["positional"], r["n_layers"], r.get("lr", 3e-3)) == (positional, n_layers, lr)]
        if len(rows) == len(SEEDS) and all(r["recall_acc_1x"] >= BAR for r in rows):
            print(f"chosen: positional {positional}, n_layers {n_layers}, lr {lr:g}", flush=True)
            return
    print("no candidate reached the bar on both seeds", flush=True)


if __name__ == "__main__":
    run_tool(main)
