"""A second set of learning curves, for another question: can an adaptive criterion decide the
switch? search_spaces/adaptive_switch.yaml's criteria and thresholds on a grid, with the switch
grid's model, curriculum, learning rates and budget, on training seeds nothing else used.

It confirms what the first set (experiments/switch_grid.py) designed: the shipped early stopping
is chosen there by the rule at the head of docs/results/search_efficiency.md, fixed before this set
existed, and replayed here. And it answers its own question, per training seed. Recorded as every
curve grid is (experiments/curve_grid.py): resumable, exported as runs finish.

    python -m experiments.adaptive_grid run [--concurrent 2]   # train the missing cells, export as they finish
    python -m experiments.adaptive_grid export                 # copy finished runs into the data file
    python -m experiments.adaptive_grid status                 # cells recorded / planned
"""

from __future__ import annotations

from itertools import product

from experiments import switch_grid
from experiments import curve_grid
from experiments.curve_grid import ROOT, CurveGrid

DATA = ROOT / "docs" / "results" / "adaptive_grid.json.gz"

# Training seeds 42001-42002 and evaluation seed 42100: used by nothing before this grid.
SEEDS = (42001, 42002)
EVAL_SEED = 42100
DEFAULTS = {"dat.mode": "adaptive", "dat.criterion": "state_acc", "dat.acc_threshold": 0.95, "dat.patience": 200,
            "dat.plateau_delta": 0.01, "dat.grad_ratio": 0.3}  # a parameter a point does not use keeps its default
POINTS = (
    {"dat.mode": "none"},  # joint training
    {"dat.mode": "fixed"},  # the default DAT hybrid: switch at 1500
    *({"dat.acc_threshold": t} for t in (0.80, 0.90, 0.95, 0.99)),
    *({"dat.criterion": "loss_plateau", "dat.patience": p, "dat.plateau_delta": d} for p in (100, 300) for d in (0.003, 0.015)),
    *({"dat.criterion": "grad_norm", "dat.grad_ratio": r} for r in (0.2, 0.4, 0.6)),
)
AXES = (*DEFAULTS, "curriculum.state_only_steps", "optim.lr", "seed")
FIXED = {
    **switch_grid.FIXED,
    # adaptive_switch.yaml's: every criterion may fire from step 250 and must by 4000; no ramp
    "dat": {"hold": "gate", "switch_step": 1500, "min_step": 250, "max_step": 4000, "smoothing": 0.95, "ramp_steps": 0},
    "eval": {"seed": EVAL_SEED},
}


def cells() -> list[dict]:
    """Every cell, seed-major: the first seed's whole grid comes before the second's."""
    return [{**DEFAULTS, **point, "curriculum.state_only_steps": state_only, "optim.lr": lr, "seed": seed}
            for seed, lr, state_only, point in product(SEEDS, switch_grid.LEARNING_RATES, switch_grid.STATE_ONLY_STEPS, POINTS)]


def cell_of(config: dict) -> dict:
    """A trained trial's cell, from its config."""
    dat = config["dat"]
    return {"dat.mode": dat["mode"], "dat.criterion": dat["criterion"], "dat.acc_threshold": dat["acc_threshold"],
            "dat.patience": dat["patience"], "dat.plateau_delta": dat["plateau_delta"], "dat.grad_ratio": dat["grad_ratio"],
            "curriculum.state_only_steps": config["curriculum"]["state_only_steps"], "optim.lr": config["optim"]["lr"],
            "seed": config["seed"]}


def grid() -> CurveGrid:
    return CurveGrid("adaptive_grid", DATA, AXES, tuple(cells()), FIXED, switch_grid.MAX_STEPS, switch_grid.EVAL_EVERY, {
        "command": "python -m experiments.adaptive_grid run",
        "seeds_note": "training seeds 42001-42002 and evaluation seed 42100: used by nothing before this grid",
        "design": "the confirmation set of docs/results/search_efficiency.md's design rule"}, cell_of)


def main(argv: list[str] | None = None) -> int:
    return curve_grid.main(grid(), argv, "python -m experiments.adaptive_grid", __doc__.splitlines()[0])


if __name__ == "__main__":
    raise SystemExit(main())
