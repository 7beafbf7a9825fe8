"""Learning curves of the switch question on a grid, recorded once for the search replay.

Every cell of switch step x curriculum x learning rate x training seed is trained to the end
(no early stopping) and every report of every run is kept, so that searchers and schedulers can
be replayed on these curves (sweeper/replay.py, bench/search_replay.py) without training again.

Recorded as every curve grid is (experiments/curve_grid.py): sweeps of the cells not yet in
docs/results/switch_grid.json.gz, the committed data file, exported as they finish; resumable.

    python -m experiments.switch_grid run [--concurrent 2]   # train the missing cells, export as they finish
    python -m experiments.switch_grid export                 # copy finished runs into the data file
    python -m experiments.switch_grid status                 # cells recorded / planned
    python -m experiments.switch_grid report                 # docs/results/switch_grid.{md,png}: the switch question itself
"""

from __future__ import annotations

from itertools import product
from pathlib import Path

from experiments import curve_grid
from experiments.curve_grid import ROOT, CurveGrid
from core.tool_cli import run_tool

DATA = ROOT / "docs" / "results" / "switch_grid.json.gz"

# The grid. Training seeds 41001-41002 and evaluation seed 41100 were used by nothing before
# this grid (no exploration, sweep or reproduction touched them).
SWITCH_STEPS = tuple(range(0, 6001, 500))
STATE_ONLY_STEPS = (0, 1500)
LEARNING_RATES = (1.5e-3, 3.0e-3)
SEEDS = (41001, 41002)
EVAL_SEED = 41100
MAX_STEPS, EVAL_EVERY = 6000, 250
AXES = ("dat.switch_step", "curriculum.state_only_steps", "optim.lr", "seed")

FIXED = {
    "model": {"d_model": 64, "n_layers": 2, "n_heads": 4, "mixer": "lstm", "attention": True},
    "dat": {"mode": "fixed", "hold": "gate"},
    "optim": {"batch_size": 64, "schedule": "cosine"},
    "eval": {"seed": EVAL_SEED},
    "device": "cpu",
}


def cells() -> list[dict]:
    """Every cell, seed-major: the first seed's whole grid comes before the second's."""
    out = []
    for seed, lr, state_only, switch in product(SEEDS, LEARNING_RATES, STATE_ONLY_STEPS, SWITCH_STEPS):
        out.append({"dat.switch_step": switch, "curriculum.state_only_steps": state_only, "optim.lr": lr, "seed": seed})
    return out


def cell_of(config: dict) -> dict:
    """A trained trial's cell, from its config."""
    return {"dat.switch_step": config["dat"]["switch_step"], "curriculum.state_only_steps": config["curriculum"]["state_only_steps"],
            "optim.lr": config["optim"]["lr"], "seed": config["seed"]}


def grid() -> CurveGrid:
    return CurveGrid("switch_grid", DATA, AXES, tuple(cells()), FIXED, MAX_STEPS, EVAL_EVERY, {
        "command": "python -m experiments.switch_grid run",
        "seeds_note": "training seeds 41001-41002 and evaluation seed 41100: used by nothing before this grid"}, cell_of)


def key(cell: dict) -> tuple:
    return grid().key(cell)


def load() -> dict:
    """The data file: {"grid": ..., "runs": [{"params": cell, "reports": [report, ...]}, ...]}."""
    return grid().load()


def missing(data: dict) -> list[dict]:
    return grid().missing(data)


def space_for(todo: list[dict], concurrent: int) -> tuple[str, dict]:
    """A sweep that runs exactly the cells in `todo` (as baseline points), every run to the end."""
    return grid().space_for(todo, concurrent)


def export(sweep_dirs: list[Path] | None = None) -> int:
    """Copy every finished run of the grid's sweep folders into the data file; the number added."""
    return grid().export(sweep_dirs)


REPORT = ROOT / "docs" / "results" / "switch_grid"


def report() -> str:
    """Final metrics against the switch step, per training seed, with and without the curriculum, per
    learning rate: the table (Markdown) and the picture, from what the data file holds so far."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    data = load()
    final = {key(r["params"]): r["reports"][-1] for r in data["runs"]}
    fig, axes = plt.subplots(1, len(LEARNING_RATES), figsize=(6 * len(LEARNING_RATES), 4.2), sharey=True, squeeze=False)
    lines = ["# The switch question on the grid: final accuracy against the switch step", "",
             f"`python -m experiments.switch_grid report` from `{DATA.relative_to(ROOT)}` ({len(final)} of {len(cells())} "
             f"runs recorded; the rest of the grid shows as `-`). Each run trains {MAX_STEPS} steps with attention held "
             f"off until its switch (switch {MAX_STEPS} = never on), with or without the state-only curriculum's first "
             f"{STATE_ONLY_STEPS[-1]} steps; training seeds {', '.join(map(str, SEEDS))} (fresh), evaluation seed {EVAL_SEED}. "
             "Cells: final acc_3x per training seed (`-`: not recorded yet).", ""]
    for ax, lr in zip(axes[0], LEARNING_RATES):
        lines += [f"## learning rate {lr:g}", "", "| curriculum | " + " | ".join(f"switch {s}" for s in SWITCH_STEPS) + " |",
                  "|---|" + "---|" * len(SWITCH_STEPS)]
        for state_only in STATE_ONLY_STEPS:
            row = []
            for switch in SWITCH_STEPS:
                values = [final.get((switch, state_only, lr, seed)) for seed in SEEDS]
                row.append(" / ".join("-" if v is None else f"{v['acc_3x']:.3f}" for v in values))
            lines.append(f"| {'state-only ' + str(state_only) if state_only else 'none'} | " + " | ".join(row) + " |")
            for seed, style in zip(SEEDS, ("-", "--")):
                pts = [(s, final[(s, state_only, lr, seed)]["acc_3x"]) for s in SWITCH_STEPS if (s, state_only, lr, seed) in final]
                if pts:
                    ax.plot(*zip(*pts), style, marker="o", ms=3, color="C1" if state_only else "C0",
                            label=f"curriculum {state_only}, seed {seed}")
        lines.append("")
        ax.set_title(f"lr {lr:g}")
        ax.set_xlabel("dat.switch_step")
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7)
    axes[0][0].set_ylabel(f"final acc_3x (step {MAX_STEPS})")
    return curve_grid.write_report(REPORT, fig, lines, "final acc_3x against the switch step")


def main(argv: list[str] | None = None) -> int:
    return curve_grid.main(grid(), argv, "python -m experiments.switch_grid", __doc__.splitlines()[0], report)


if __name__ == "__main__":
    run_tool(main)
