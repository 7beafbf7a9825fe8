"""Plain DAT at its best switch, the cliff by its shape, a position-free Transformer: the
pre-registered experiment of docs/results/dat_plain_switch.md.

The paper-depth hybrid (experiments/dat_paper_depth.py) again: a grid of plain DAT's switch step and
learning rate and of joint training's learning rate on the exploration seeds, the best cell of each
chosen by the registered rule, then joint*, DAT*, the NoPE Transformer and joint + curriculum (at
36,000 steps) on 15 fresh seeds. Every run goes through the sweep service in chunks
(experiments/sweep_chunks.py) or a lent GPU (`configs` / `import`), each finished run copied with
its provenance into docs/results/dat_plain_switch_runs.json.gz; interrupted in any way, `run` resumes.

    python -m experiments.dat_plain_switch run       # explore, choose, confirm (resumable)
    python -m experiments.dat_plain_switch status    # where the plan stands
    python -m experiments.dat_plain_switch report    # rebuild the results section from the record
    python -m experiments.dat_plain_switch park      # stopped sweeps packed to commit; `run` puts them back
    python -m experiments.dat_plain_switch configs DIR --seeds S ... [--phase P]   # for experiments/device_runs.py
    python -m experiments.dat_plain_switch import PACK
"""

from __future__ import annotations

from pathlib import Path

from experiments import dat_paper_depth as depth
from experiments import packs
from experiments.dat_paper_depth import IN_RANGE, Plan, Run, in_range_misses
from experiments.sweep_chunks import Chunks, park_command, status_command
from core.tool_cli import Parser, run_tool, summary
from sweeper.cli_types import Distinct, count

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "results" / "dat_plain_switch_runs.json.gz"
RESULTS = ROOT / "docs" / "results" / "dat_plain_switch.md"
SWEEPS = ROOT / "sweeps"
PARKED = ROOT / "experiments" / "parked" / "dat_plain_switch.tar.gz"  # its unfinished sweeps, between machines
BEGIN, END = "<!-- results:begin (experiments/dat_plain_switch.py report) -->", "<!-- results:end -->"

EXPLORE_SEEDS, EXPLORE_EVAL_SEED = (0, 1), 20261125
SEEDS, EVAL_SEED = tuple(range(5301, 5316)), 20261128  # fresh: used by nothing in this repository before
BUDGET, JOINT_CURRICULUM_BUDGET, STATE_ONLY = 24_000, 36_000, 12_000
SWITCHES, LRS = (3_000, 6_000, 12_000, 18_000), (1e-3, 3e-3)
NOPE = (4, "none", 3e-3)  # (n_layers, positional, lr): the paper-depth selection's best position-free candidate
ABRUPT_BAR = 0.05  # accuracy per 5 positions: "a cliff" at or above it, "gradual" below
JOINT, DAT, NOPE_ARM, JOINT_CURRICULUM = "joint", "DAT", "NoPE Transformer", "joint + curriculum"
ARMS = (JOINT, DAT, NOPE_ARM, JOINT_CURRICULUM)
FIXED = {
    "model": {"d_model": 64, "n_layers": 4, "n_heads": 4, "mixer": "lstm", "attention": True, "positional": "rope"},
    "dat": {"hold": "gate"},
    "eval": {"curve_window": depth.CURVE_WINDOW},
    "device": "cpu",
}
AXES = ("dat.mode", "dat.switch_step", "curriculum.state_only_steps", "seed", "optim.lr", "eval.seed")
MODEL_AXES = ("model.mixer", "model.n_layers", "model.positional")


def cell(arm: str, seed: int, lr: float, switch: int = BUDGET, eval_seed: int = EVAL_SEED) -> dict:
    """The sampled parameters of one run of `arm`."""
    budget = JOINT_CURRICULUM_BUDGET if arm == JOINT_CURRICULUM else BUDGET
    mode, sw, state_only = {JOINT: ("none", budget, 0), DAT: ("fixed", switch, 0), NOPE_ARM: ("none", budget, 0),
                            JOINT_CURRICULUM: ("none", budget, STATE_ONLY)}[arm]
    c = {"dat.mode": mode, "dat.switch_step": sw, "curriculum.state_only_steps": state_only, "seed": seed,
         "optim.lr": lr, "eval.seed": eval_seed}
    if arm == NOPE_ARM:
        c.update({"model.mixer": "none", "model.n_layers": NOPE[0], "model.positional": NOPE[1]})
    return c


def arm_of(params: dict) -> str:
    if params.get("model.mixer") == "none":
        return NOPE_ARM
    if params["dat.mode"] == "none":
        return JOINT_CURRICULUM if params["curriculum.state_only_steps"] else JOINT
    return DAT


def key(budget: int, params: dict) -> tuple:
    return (budget, *(params[a] for a in AXES), *(params[a] for a in MODEL_AXES if a in params))


def params_of(config: dict) -> dict:
    return {**depth.params_of(config), "optim.lr": config["optim"]["lr"], "eval.seed": config["eval"]["seed"]}


def runs_of(data: dict) -> list[Run]:
    return [Run(arm_of(r["params"]), r["params"]["seed"], r["budget"], r["params"], r["reports"], r.get("trained_on", "CPU"))
            for r in data["runs"]]


# --------------------------------------------------------------------------- the plan


def explore_phase(lr: float) -> str:
    return f"explore-lr{lr:g}"


def explore_cells(lr: float) -> list[dict]:
    return [cell(arm, s, lr, sw, EXPLORE_EVAL_SEED) for s in EXPLORE_SEEDS
            for arm, sw in ((JOINT, BUDGET), *((DAT, sw) for sw in SWITCHES))]


def grid(runs: list[Run], arm: str) -> list[tuple[tuple[float, int], list[Run]]]:
    """The exploration cells of `arm`, each ((lr, switch), its runs on the exploration seeds)."""
    cells: dict[tuple[float, int], list[Run]] = {}
    for r in runs:
        if r.arm == arm and r.params["eval.seed"] == EXPLORE_EVAL_SEED and r.seed in EXPLORE_SEEDS:
            cells.setdefault((r.params["optim.lr"], r.params["dat.switch_step"]), []).append(r)
    return sorted(cells.items())


def select(runs: list[Run], arm: str) -> tuple[tuple[float, int], str]:
    """The registered selection rule: the cell with the best mean ood_acc_3x among those whose runs
    all pass the in-range check (else of all: undertrained); ties to the lower lr, then the earlier switch."""
    cells = grid(runs, arm)
    passing = [(c, rs) for c, rs in cells if not any(in_range_misses(r.final) for r in rs)]
    pool = passing or cells
    best_c, best_rs = max(pool, key=lambda item: (mean_of(item[1], "ood_acc_3x"), -item[0][0], -item[0][1]))
    note = f"mean ood_acc_3x {mean_of(best_rs, 'ood_acc_3x'):.3f} over seeds {sorted(r.seed for r in best_rs)}"
    return best_c, note + ("" if passing else "; no cell passes the in-range check: undertrained")


def mean_of(rs: list[Run], name: str) -> float:
    return sum(float(r.final[name]) for r in rs) / len(rs)


def plan(data: dict) -> Plan:
    """Where the experiment stands and what to train next, from the record alone."""
    runs = runs_of(data)
    missing = depth.missing_from(runs)
    for lr in LRS:
        if todo := missing(BUDGET, explore_cells(lr)):
            return Plan(explore_phase(lr), BUDGET, None, todo, [])
    (dat_lr, switch), dat_note = select(runs, DAT)
    (joint_lr, _), joint_note = select(runs, JOINT)
    notes = [f"DAT*: switch {switch}, lr {dat_lr:g} ({dat_note})", f"joint*: lr {joint_lr:g} ({joint_note})"]
    later = confirmation_cells(dat_lr, switch, joint_lr)
    for phase in ("confirm", "nope"):
        if todo := missing(BUDGET, later[phase]):
            return Plan(phase, BUDGET, switch, todo, notes)
    todo = missing(JOINT_CURRICULUM_BUDGET, later["joint-curriculum"])
    return Plan("joint-curriculum" if todo else "done", JOINT_CURRICULUM_BUDGET, switch, todo, notes)


def confirmation_cells(dat_lr: float, switch: int, joint_lr: float) -> dict[str, list[dict]]:
    return {"confirm": [c for s in SEEDS for c in (cell(JOINT, s, joint_lr), cell(DAT, s, dat_lr, switch))],
            "nope": nope_cells(),
            "joint-curriculum": [cell(JOINT_CURRICULUM, s, joint_lr) for s in SEEDS]}


def nope_cells() -> list[dict]:
    return [cell(NOPE_ARM, s, NOPE[2]) for s in SEEDS]


def determined(p: Plan) -> dict[str, list[dict]]:
    """For the device path: the phases at the plan's budget already determined (the exploration's
    two learning rates and the NoPE Transformer hang on nothing), each with the cells the record misses."""
    if p.budget != BUDGET:
        return packs.plan_only(p)
    runs = runs_of(load())
    missing = depth.missing_from(runs)
    phases = {explore_phase(lr): missing(BUDGET, explore_cells(lr)) for lr in LRS}
    phases["nope"] = missing(BUDGET, nope_cells())
    if p.phase == "confirm":
        phases["confirm"] = p.todo
    return {ph: cells for ph, cells in phases.items() if cells}


# --------------------------------------------------------------------------- the record


def chunks() -> Chunks:
    """This experiment's sweeps and record (read at each call: tests point them elsewhere)."""
    return Chunks(label="dat_plain_switch", title="Plain DAT at its best switch", prefix="dat_plain_", folder=SWEEPS,
                  record=DATA, fixed=FIXED, axes=(*AXES, *MODEL_AXES), eval_every=depth.EVAL_EVERY,
                  concurrent=depth.CONCURRENT, key=key, params_of=params_of,
                  new_record=lambda: {"design": design(), "runs": []}, parked=PARKED, reads=depth.READS)


def design() -> dict:
    return {"fixed": FIXED, "budget": BUDGET, "joint_curriculum_budget": JOINT_CURRICULUM_BUDGET,
            "state_only": STATE_ONLY, "switches": list(SWITCHES), "lrs": list(LRS), "nope": list(NOPE),
            "eval_every": depth.EVAL_EVERY, "explore_seeds": list(EXPLORE_SEEDS), "explore_eval_seed": EXPLORE_EVAL_SEED,
            "seeds": list(SEEDS), "eval_seed": EVAL_SEED, "in_range": dict(IN_RANGE), "abrupt_bar": ABRUPT_BAR,
            "command": "python -m experiments.dat_plain_switch run"}


def load() -> dict:
    return chunks().load()


def experiment() -> packs.Experiment:
    return packs.Experiment(chunks(), plan, determined)


def run() -> int:
    return chunks().run(plan, depth.chunk)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m experiments.dat_plain_switch", description=summary(__doc__))
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("run", help="explore, apply the rules, confirm; resumes what was interrupted")
    sub.add_parser("status", help="where the plan stands")
    sub.add_parser("export", help="copy finished runs of sweeps/dat_plain_* into the record")
    sub.add_parser("report", help="rebuild docs/results/dat_plain_switch.md's results from the record")
    sub.add_parser("park", help="pack the stopped, unfinished sweeps into experiments/parked/, to commit")
    c = sub.add_parser("configs", help="the missing cells of SEEDS as trial configs, for experiments/device_runs.py")
    c.add_argument("folder", type=Path)
    c.add_argument("--seeds", type=count, nargs="+", required=True, action=Distinct)
    c.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    c.add_argument("--phase", choices=(*map(explore_phase, LRS), "confirm", "nope", "joint-curriculum"), default=None,
                   help="a determined phase other than the plan's own")
    i = sub.add_parser("import", help="add the finished runs of a pack from experiments/device_runs.py")
    i.add_argument("pack", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "run":
        return run()
    if args.verb == "export":
        print(f"dat_plain_switch: {chunks().export()} runs added")
        return 0
    if args.verb == "park":
        return park_command(chunks())
    if args.verb == "configs":
        return packs.configs_command(experiment(), args.folder, args.seeds, args.device, args.phase)
    if args.verb == "import":
        return packs.import_command(experiment(), args.pack)
    data = load()
    if args.verb == "status":
        return status_command("dat_plain_switch", data, plan(data))
    from experiments.dat_plain_switch_report import write_report

    return write_report(data, plan(data))


if __name__ == "__main__":
    run_tool(main)
