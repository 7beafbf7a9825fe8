"""How fast does each search method find the best switch? Replayed on the recorded grid.

Every method searches the grid's space (dat.switch_step 0-6000 every 500 x curriculum 0 | 1500 x
learning rate 1.5e-3 | 3e-3) with the sweep's own sampler and early stopping (sweeper/replay.py),
2 trials at a time, `--samples` trials, once per replay seed. Per method, over the replay seeds:

    to best     training steps (all trials) until the sweep's best-so-far point is within 0.01 of
                the grid's best mean final acc_3x (median [IQR]; `not reached`: replays that never got there)
    top-3 cut   how often a trial at one of the grid's 3 best points was stopped early
    final       the true value (mean over training seeds) of the point each replay ends with

and, from the grid itself, Kendall's tau between a run's acc_3x at a rung and its final acc_3x,
for runs judged there before their switch (+ margin) and after. The targets (the early-stopping
issue): the phase-aware rule with TPE reaches the best >= 2x faster than random + FIFO, and cuts
the top 3 at most half as often as the shipped ASHA.

    python bench/search_replay.py [--seeds 20] [--samples 52]   # writes docs/results/search_efficiency.{md,json,png}

`--lr X` replays the half of the grid at one learning rate (the space searches the switch and the
curriculum only), so that a grid recorded seed by seed can be replayed before its other half exists.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments import switch_grid  # noqa: E402
from sweeper.replay import Grid, kendall_tau, load_grid, replay  # noqa: E402
from sweeper.space import SearchSpace  # noqa: E402

OUT = ROOT / "docs" / "results" / "search_efficiency"
AXES = ("dat.switch_step", "curriculum.state_only_steps", "optim.lr")
TOLERANCE = 0.01
MARGIN = 500

PLAIN = {"type": "asha", "grace_period": 3000, "reduction_factor": 2, "phase_aware": False}  # switch_time.yaml before
METHODS = {
    "random + FIFO": ("random", {"type": "fifo"}),
    "TPE + FIFO": ("tpe", {"type": "fifo"}),
    "random + ASHA (grace 3000)": ("random", PLAIN),
    "TPE + ASHA (grace 3000)": ("tpe", PLAIN),
    "TPE + ASHA (grace 500)": ("tpe", {**PLAIN, "grace_period": 500}),
    "TPE + phase-aware (grace 3000)": ("tpe", {**PLAIN, "phase_aware": True, "phase_margin": MARGIN}),
    "TPE + phase-aware (grace 500)": ("tpe", {**PLAIN, "grace_period": 500, "phase_aware": True, "phase_margin": MARGIN}),
    "TPE + phase-aware (grace 500, margin 250)": ("tpe", {**PLAIN, "grace_period": 500, "phase_aware": True, "phase_margin": 250}),
    "TPE (4 startup) + FIFO": ("tpe:4", {"type": "fifo"}),
    "TPE (4 startup) + phase-aware (grace 500)": ("tpe:4", {**PLAIN, "grace_period": 500, "phase_aware": True, "phase_margin": MARGIN}),
    "TPE (4 startup) + phase-aware (grace 3000)": ("tpe:4", {**PLAIN, "phase_aware": True, "phase_margin": MARGIN}),
}
REFERENCE, SHIPPED_BEFORE = "random + FIFO", "TPE + ASHA (grace 3000)"
SHIPPED = "TPE + phase-aware (grace 500)"  # search_spaces/switch_time.yaml
PICTURED = (REFERENCE, "TPE + FIFO", SHIPPED_BEFORE, "TPE + ASHA (grace 500)", "TPE + phase-aware (grace 3000)", SHIPPED)


LRS = list(switch_grid.LEARNING_RATES)  # the learning rates searched (main: one, with --lr)


def space(sampler: str, scheduler: dict, samples: int) -> SearchSpace:
    return SearchSpace.model_validate({
        "name": "replay", "metric": "acc_3x", "mode": "max", "fixed": switch_grid.FIXED,
        "space": {"dat.switch_step": {"type": "int", "low": 0, "high": 6000, "step": 500},
                  "curriculum.state_only_steps": {"type": "categorical", "choices": list(switch_grid.STATE_ONLY_STEPS)},
                  "optim.lr": {"type": "categorical", "choices": LRS}},
        "budget": {"num_samples": samples, "max_concurrent": 2, "max_steps": switch_grid.MAX_STEPS,
                   "eval_every": switch_grid.EVAL_EVERY},
        "scheduler": scheduler, "searcher": searcher(sampler),
    })



def searcher(name: str) -> dict:
    """`tpe`, `random`, or `tpe:N` (TPE after N random draws instead of Optuna's 10)."""
    sampler, _, startup = name.partition(":")
    return {"sampler": sampler, "seed": 0, **({"startup_trials": int(startup)} if startup else {})}


def quartiles(xs: list[float]) -> tuple[float, float, float]:
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


def compare(grid: Grid, seeds: int, samples: int) -> dict:
    top3 = set(grid.ranked()[:3])
    out = {}
    for name, (sampler, scheduler) in METHODS.items():
        spec = space(sampler, scheduler, samples)
        reach, cut, at_top, finals, curves = [], 0, 0, [], []
        for seed in range(seeds):
            trace = replay(spec, grid, seed)
            reach.append(trace.compute_to_reach(grid, TOLERANCE))
            for e in trace.ended:
                if e["key"] in top3:
                    at_top += 1
                    cut += e["status"] == "stopped"
            incumbents = trace.incumbents(grid)
            finals.append(incumbents[-1][1] if incumbents else None)
            curves.append(incumbents)
        reached = [r for r in reach if r is not None]
        out[name] = {"to_best": reach, "to_best_quartiles": quartiles(reached) if reached else None,
                     "not_reached": len(reach) - len(reached), "top3_trials": at_top, "top3_stopped": cut,
                     "finals": finals, "curves": curves}
    return out


def rung_taus(grid: Grid, rungs: tuple[int, ...]) -> list[dict]:
    """Kendall's tau between the value at each rung and the final value, over all recorded runs,
    for runs before their switch + margin at that rung and for runs after it."""
    rows = []
    for rung in rungs:
        groups = {"before": ([], []), "after": ([], [])}
        for key, runs in grid.runs.items():
            switch, curriculum = key[0], key[1]
            phase = max(switch, curriculum) + MARGIN
            for reports in runs:
                at = next((r for r in reports if r["step"] >= rung), None)
                if at is None or switch >= switch_grid.MAX_STEPS:
                    continue
                xs, ys = groups["before" if rung < phase else "after"]
                xs.append(at["acc_3x"])
                ys.append(reports[-1]["acc_3x"])
        rows.append({"rung": rung, **{f"{g}_n": len(xs) for g, (xs, _) in groups.items()},
                     **{f"{g}_tau": kendall_tau(xs, ys) for g, (xs, ys) in groups.items()}})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=20, help="replays per method")
    parser.add_argument("--samples", type=int, default=52, help="trials per replayed sweep")
    parser.add_argument("--data", default=str(switch_grid.DATA))
    parser.add_argument("--out", default=str(OUT), help="the results' path, without suffix")
    parser.add_argument("--lr", type=float, choices=switch_grid.LEARNING_RATES, help="replay the grid at this learning rate only")
    args = parser.parse_args()
    grid = load_grid(args.data, AXES)
    if args.lr is not None:
        LRS[:] = [args.lr]
        grid = dataclasses.replace(grid, runs={k: v for k, v in grid.runs.items() if k[2] == args.lr})
    planned = len(switch_grid.SWITCH_STEPS) * len(switch_grid.STATE_ONLY_STEPS) * len(LRS)
    seeds_per_point = sorted({len(r) for r in grid.runs.values()})
    if len(grid.runs) < planned:
        print(f"the grid has {len(grid.runs)} of {planned} points; run `python -m experiments.switch_grid run` first")
        return 1
    results = compare(grid, args.seeds, args.samples)
    taus = rung_taus(grid, (500, 1000, 2000, 3000, 4000))
    write(grid, results, taus, args, seeds_per_point, Path(args.out))
    return 0


def write(grid: Grid, results: dict, taus: list[dict], args, seeds_per_point: list[int], out: Path) -> None:
    ref = results[REFERENCE]["to_best_quartiles"]
    lines = ["| method | steps to within 0.01 of the best, median [IQR] | not reached | speed-up vs random + FIFO (medians) | "
             "top-3 trials stopped | final point's true acc_3x, median |", "|---|---|---|---|---|---|"]
    for name, r in results.items():
        q = r["to_best_quartiles"]
        reach = f"{q[1]:,.0f} [{q[0]:,.0f}-{q[2]:,.0f}]" if q else "never"
        speed = f"{ref[1] / q[1]:.2f}x" if q and ref else "-"
        cut = f"{r['top3_stopped']}/{r['top3_trials']}" + (f" ({r['top3_stopped'] / r['top3_trials']:.0%})" if r["top3_trials"] else "")
        finals = [f for f in r["finals"] if f is not None]
        lines.append(f"| {name} | {reach} | {r['not_reached']}/{len(r['to_best'])} | {speed} | {cut} | "
                     f"{statistics.median(finals):.3f} |" if finals else f"| {name} | {reach} | - | - | {cut} | - |")
    tau_lines = ["| rung | runs before switch + margin | tau before | runs after | tau after |", "|---|---|---|---|---|"]
    for t in taus:
        tau_lines.append(f"| {t['rung']} | {t['before_n']} | {t['before_tau']:.2f} | {t['after_n']} | {t['after_tau']:.2f} |")
    best = grid.ranked()[:3]
    md = [
        "# How fast each search method finds the best switch (replayed)",
        "",
        f"Generated by `python bench/search_replay.py --seeds {args.seeds} --samples {args.samples}"
        + (f" --lr {args.lr:g}` (the grid's points at learning rate {args.lr:g} only) from " if args.lr else "` from ")
        + f"`{Path(args.data).relative_to(ROOT) if Path(args.data).is_relative_to(ROOT) else args.data}` "
        f"({len(grid.runs)} points, {'/'.join(map(str, seeds_per_point))} training seed(s) each; "
        "experiments/switch_grid.py). Each method replays a sweep of "
        f"{args.samples} trials, 2 at a time, {args.seeds} times (replay seeds 0-{args.seeds - 1}); compute is "
        "training steps summed over trials. A point's true value is its final acc_3x averaged over training seeds.",
        "",
        *([f"**Preliminary:** the grid holds {sum(len(r) for r in grid.runs.values())} runs of the "
           f"{len(switch_grid.cells())} it plans (experiments/switch_grid.py); these numbers change as it fills.", ""]
          if args.lr is not None or min(seeds_per_point) < len(switch_grid.SEEDS) else []),
        "Grid's best points: " + "; ".join(f"switch {k[0]}, curriculum {k[1]}, lr {k[2]:g}: {grid.final(k):.3f}" for k in best),
        "",
        *lines,
        "",
        *verdict(results),
        "",
        "Kendall's tau between a run's acc_3x at a rung and its final acc_3x (all recorded runs; a switch at "
        f"6000 left out; margin {MARGIN}):",
        "",
        *tau_lines,
        "",
        f"![best-so-far against compute]({out.name}.png)",
        "",
    ]
    out.with_suffix(".md").write_text("\n".join(md))
    out.with_suffix(".json").write_text(json.dumps({"args": vars(args), "results": results, "taus": taus}, indent=1, default=str))
    plot(grid, results, out)
    print("\n".join(md))



def verdict(results: dict) -> list[str]:
    """The issue's two targets for the shipped layout, met or missed, with their numbers."""
    if SHIPPED not in results or REFERENCE not in results or SHIPPED_BEFORE not in results:
        return []
    ref, ours = results[REFERENCE]["to_best_quartiles"], results[SHIPPED]["to_best_quartiles"]
    speed = ref[1] / ours[1] if ref and ours else float("nan")

    def cut(name: str) -> float:
        r = results[name]
        return r["top3_stopped"] / r["top3_trials"] if r["top3_trials"] else 0.0

    ours_cut, before_cut = cut(SHIPPED), cut(SHIPPED_BEFORE)
    return [f"Targets, for the shipped layout ({SHIPPED}, search_spaces/switch_time.yaml):",
            "",
            f"- within 0.01 of the best at least 2x faster than {REFERENCE}: **{speed:.2f}x**, "
            + ("met" if speed >= 2 else "missed"),
            f"- the top 3 stopped at most half as often as {SHIPPED_BEFORE} (shipped before): **{ours_cut:.0%}** against "
            f"{before_cut:.0%}, " + ("met" if ours_cut <= before_cut / 2 else "missed")
            + (" (both stopped none, so the bar is met trivially)" if ours_cut == before_cut == 0 else "")]


def plot(grid: Grid, results: dict, out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    fig, ax = plt.subplots(figsize=(9, 5.5))
    top = max(c for r in results.values() for curve in r["curves"] for c, _ in curve)
    xs = np.linspace(0, top, 200)
    for name, r in ((n, results[n]) for n in PICTURED if n in results):  # the rest: the table
        rows = []
        for curve in r["curves"]:
            row = []
            for x in xs:
                seen = [v for c, v in curve if c <= x]
                row.append(grid.best() - seen[-1] if seen else np.nan)
            rows.append(row)
        arr = np.array(rows, dtype=float)
        with warnings.catch_warnings():  # before a replay's first trial ends, no best-so-far yet
            warnings.simplefilter("ignore", RuntimeWarning)
            med = np.nanmedian(arr, axis=0)
            lo, hi = np.nanpercentile(arr, 25, axis=0), np.nanpercentile(arr, 75, axis=0)
        line, = ax.plot(xs, med, label=name + (" (shipped)" if name == SHIPPED else ""), lw=2.2 if name == SHIPPED else 1.4)
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12)
    ax.axhline(TOLERANCE, color="grey", ls=":", lw=1)
    ax.set_xlabel("compute: training steps, all trials")
    ax.set_ylabel("grid's best acc_3x - best-so-far point's true acc_3x")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    ax.set_xlim(0, min(top, 200_000))
    ax.set_title("Search replay on the switch grid: median and IQR over replay seeds (six of the methods)")
    fig.tight_layout()
    fig.savefig(out.with_suffix(".png"), dpi=110)


if __name__ == "__main__":
    raise SystemExit(main())
