"""DAT at the paper's depth: the pre-registered experiment of docs/results/dat_paper_depth.md.

Four hybrid blocks (LSTM + rope attention), the composite task. The rules that choose the
training budget and plain DAT's switch step are code here, applied to the exploration seeds'
runs only; the confirmation runs train fresh seeds under what they chose. Every run goes
through the service (`sweeper launch`, one run per core, FIFO: nothing is cut short); each
finished run's every report is copied into docs/results/dat_paper_depth_runs.json.gz, the
committed record, which `report` rebuilds the results from. Interrupted in any way, `run`
resumes: a chunk's sweep continues from its checkpoints, and what the record holds is not
trained again (in a new checkout too).

    python -m experiments.dat_paper_depth run       # explore, apply the rules, confirm (resumable)
    python -m experiments.dat_paper_depth export    # copy finished runs into the record
    python -m experiments.dat_paper_depth report    # rebuild the results section and pictures
    python -m experiments.dat_paper_depth preset    # the recommended DAT arm as a preset, once decided
    python -m experiments.dat_paper_depth configs DIR --seeds S ...   # missing cells as trial configs, for
    python -m experiments.dat_paper_depth import PACK                 # experiments/device_runs.py elsewhere

The plan, in order (`plan`): for each budget of BUDGETS until one passes, (1) joint training and
the attention-off hybrid on the exploration seeds; (2) the switch rule on the attention-off runs,
then plain DAT and DAT + curriculum at that switch on the same seeds; (3) the budget rule: every
arm passes the in-range check on every exploration seed, else the next budget (the last budget is
kept whatever it gives). Then (4) the three arms on the confirmation seeds, two seeds per sweep;
(5) the addendum's joint + curriculum on the confirmation seeds, six per sweep; (6) the pure
Transformer's candidates on exploration seed 0 at the kept budget, and (7) the one with the best
in-range recall on the confirmation seeds, if that recall passes the check.
"""

from __future__ import annotations

import math
import sys
from dataclasses import dataclass
from pathlib import Path

from experiments import packs
from experiments.sweep_chunks import Chunks, status_command
from core.tool_cli import Parser, run_tool, summary
from sweeper.cli_types import Distinct, count
from trainables.metrics import curve_names

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "results" / "dat_paper_depth_runs.json.gz"
RESULTS = ROOT / "docs" / "results" / "dat_paper_depth.md"
SWEEPS = ROOT / "sweeps"
BEGIN, END = "<!-- results:begin (experiments/dat_paper_depth.py report) -->", "<!-- results:end -->"

# Seeds. Exploration: 0 and 1 (the only seeds any rule here reads). Confirmation: 5101-5115 and
# evaluation seed 20261125, used by nothing in this repository before this experiment.
EXPLORE_SEEDS = (0, 1)
SEEDS = tuple(range(5101, 5116))
EVAL_SEED = 20261125
BUDGETS = (12_000, 24_000)  # training steps, tried in this order
EVAL_EVERY, CURVE_WINDOW, MULTIPLIERS = 250, 5, (1, 2, 3, 4)
MAX_LEN = 25  # the task's training range (the trainer's default)
IN_RANGE = (("acc_1x", 0.95), ("recall_acc_1x", 0.95))  # the in-range check, at the final step
CURVE_POINTS = tuple(curve_names(MAX_LEN, MULTIPLIERS, CURVE_WINDOW))  # the position curve, 5 to 100
# what the plans and reports read of every report of a run
READS = (*(m for m, _ in IN_RANGE), "ood_acc_3x", "state_acc_1x", "acc_3x", "ood_state_acc_3x", "last_acc_3x",
         "seq_acc_3x", *CURVE_POINTS)
CONVERGED_WITHIN = 0.01  # the switch rule: state_acc_1x stays within this of its best from then on
RUNS_PER_SWEEP = 6  # confirmation chunks: the three arms of two seeds, or one arm of six seeds
CONCURRENT = 2  # runs at once, one torch thread each

FIXED = {
    "model": {"d_model": 64, "n_layers": 4, "n_heads": 4, "mixer": "lstm", "attention": True, "positional": "rope"},
    "dat": {"hold": "gate"},
    "eval": {"seed": EVAL_SEED, "curve_window": CURVE_WINDOW},
    "device": "cpu",
}
AXES = ("dat.mode", "dat.switch_step", "curriculum.state_only_steps", "seed")
# the pure Transformer's cells set these too (a hybrid's cell leaves them at FIXED's and the defaults)
MODEL_AXES = ("model.mixer", "model.n_layers", "model.positional", "optim.lr")
ARMS = ("joint", "DAT", "DAT + curriculum")  # the confirmation's arms
OFF = "attention off"  # exploration only: the hybrid with attention held off for the whole run
JOINT_CURRICULUM = "joint + curriculum"  # the addendum's control: the curriculum without the delay
TRANSFORMER = "pure Transformer"
# the pure Transformer's candidates: (n_layers, positional, lr), tried on exploration seed 0
TRANSFORMER_CANDIDATES = tuple((n, pos, lr) for n in (2, 4) for pos in ("rope", "none") for lr in (1e-3, 3e-3))


# --------------------------------------------------------------------------- cells and arms


def cell(arm: str, seed: int, budget: int, switch: int) -> dict:
    """The sampled parameters of one run of `arm` (joint's switch step is unused: the budget)."""
    mode, sw, state_only = {"joint": ("none", budget, 0), OFF: ("fixed", budget, 0), JOINT_CURRICULUM: ("none", budget, switch),
                            "DAT": ("fixed", switch, 0), "DAT + curriculum": ("fixed", switch, switch)}[arm]
    return {"dat.mode": mode, "dat.switch_step": sw, "curriculum.state_only_steps": state_only, "seed": seed}


def transformer_cell(candidate: tuple, seed: int, budget: int) -> dict:
    n_layers, positional, lr = candidate
    return {"dat.mode": "none", "dat.switch_step": budget, "curriculum.state_only_steps": 0, "seed": seed,
            "model.mixer": "none", "model.n_layers": n_layers, "model.positional": positional, "optim.lr": lr}


def candidate_of(params: dict) -> tuple:
    return params["model.n_layers"], params["model.positional"], params["optim.lr"]


def arm_of(params: dict, budget: int) -> str:
    if params.get("model.mixer") == "none":
        return TRANSFORMER
    if params["dat.mode"] == "none":
        return JOINT_CURRICULUM if params["curriculum.state_only_steps"] else "joint"
    if params["dat.switch_step"] >= budget:
        return OFF
    return "DAT + curriculum" if params["curriculum.state_only_steps"] else "DAT"


def key(budget: int, params: dict) -> tuple:
    """A run's identity: a hybrid's by the four AXES, a pure Transformer's by MODEL_AXES too."""
    return (budget, *(params[a] for a in AXES), *(params[a] for a in MODEL_AXES if a in params))


@dataclass(frozen=True)
class Run:
    arm: str
    seed: int
    budget: int
    params: dict
    reports: list  # every report, in step order; the last is the final evaluation (full sets)
    trained_on: str = "CPU"  # where it trained: the sweep service here, or a pack's machine (import_pack)

    @property
    def final(self) -> dict:
        return self.reports[-1]


def runs_of(data: dict) -> list[Run]:
    return [Run(arm_of(r["params"], r["budget"]), r["params"]["seed"], r["budget"], r["params"], r["reports"],
                r.get("trained_on", "CPU")) for r in data["runs"]]


# --------------------------------------------------------------------------- the rules


def in_range_misses(final: dict) -> list[str]:
    """The in-range check's failures on one run's final report (empty: it passes)."""
    return [f"{m} {final.get(m, math.nan):.3f} < {bar}" for m, bar in IN_RANGE if not final.get(m, 0.0) >= bar]


def converged_at(reports: list[dict]) -> tuple[int, float]:
    """(the first evaluation step from which state_acc_1x stays within CONVERGED_WITHIN of the
    run's best, that best)."""
    series = [(r["step"], r["state_acc_1x"]) for r in reports if "state_acc_1x" in r]
    best = max(v for _, v in series)
    at = series[-1][0]
    for step, v in reversed(series):
        if v < best - CONVERGED_WITHIN:
            break
        at = step
    return at, best


def switch_rule(off_runs: list[Run], budget: int) -> int:
    """Plain DAT's switch step: the latest convergence step over the exploration seeds'
    attention-off runs, rounded up to an evaluation step, at most half the budget."""
    latest = max(converged_at(r.reports)[0] for r in off_runs)
    return min(-(-latest // EVAL_EVERY) * EVAL_EVERY, budget // 2)


@dataclass(frozen=True)
class Plan:
    phase: str  # explore-1 | explore-2 | kept (the exploration's end) | confirm | ... | done
    budget: int
    switch: int | None  # None before the switch rule could be applied
    todo: list  # the cells of the next sweep (empty when done)
    notes: list  # what the rules decided so far, one line each


def missing_from(runs: list[Run]):
    """cells -> those of them (at a budget) that `runs` has no run of."""
    have = {key(r.budget, r.params) for r in runs}

    def missing(budget: int, cells: list[dict]) -> list[dict]:
        return [c for c in cells if key(budget, c) not in have]
    return missing


def premise_misses(off_runs: list[Run], premise: float) -> list[str]:
    """The attention-off runs whose best state_acc_1x misses `premise` (the recurrent path alone does
    not track the state in range), one line each."""
    return [f"attention off seed {r.seed}: best state_acc_1x {best:.3f} < {premise}" for r in off_runs
            if (best := converged_at(r.reports)[1]) < premise]


def explore(runs: list[Run], budgets: tuple[int, ...] | None = None, seeds: tuple[int, ...] | None = None,
            premise: float | None = None) -> Plan:
    """The exploration (the budget and switch rules, on `seeds`' runs only): the next chunk to
    train (phase explore-1 or explore-2), or the budget and switch step kept (phase "kept"). With
    `premise`, a budget is kept only if each attention-off run's best state_acc_1x reaches it too,
    and one that misses it trains no second phase: the next budget, or at the last, "kept" at once
    (for the caller's premise gate)."""
    budgets = BUDGETS if budgets is None else budgets
    seeds = EXPLORE_SEEDS if seeds is None else seeds
    missing = missing_from(runs)
    notes: list[str] = []
    for i, budget in enumerate(budgets):
        last = i == len(budgets) - 1
        first = [cell(arm, s, budget, 0) for s in seeds for arm in ("joint", OFF)]
        if todo := missing(budget, first):
            return Plan("explore-1", budget, None, todo, notes)
        off = [r for r in runs if r.budget == budget and r.arm == OFF and r.seed in seeds]
        short = premise_misses(off, premise) if premise is not None else []
        if short:
            notes.append(f"budget {budget}: the premise fails ({'; '.join(short)}): "
                         + ("the last budget, its DAT arms not explored" if last else "next budget"))
            if not last:
                continue
            return Plan("kept", budget, switch_rule(off, budget), [], notes)
        switch = switch_rule(off, budget)
        notes.append(f"budget {budget}: switch rule -> dat.switch_step {switch} ("
                     + ", ".join(f"seed {r.seed}: state_acc_1x within {CONVERGED_WITHIN} of its best "
                                 f"{converged_at(r.reports)[1]:.3f} from step {converged_at(r.reports)[0]}" for r in off) + ")")
        second = [cell(arm, s, budget, switch) for s in seeds for arm in ("DAT", "DAT + curriculum")]
        if todo := missing(budget, second):
            return Plan("explore-2", budget, switch, todo, notes)
        explored = {key(budget, c) for c in first + second}
        misses = [(r.arm, r.seed, in_range_misses(r.final)) for r in runs
                  if key(r.budget, r.params) in explored and r.arm != OFF]
        failing = "; ".join(f"{a} seed {s}: {', '.join(m)}" for a, s, m in misses if m)
        if failing and not last:
            notes.append(f"budget {budget}: the in-range check fails ({failing}): next budget")
            continue
        passes = "the in-range check" if premise is None else "the in-range check and the premise"
        notes.append(f"budget {budget}: " + (f"every arm passes {passes} on every exploration seed" if not failing else
                     f"the last budget; the in-range check still fails ({failing}): such arms are reported as undertrained"))
        return Plan("kept", budget, switch, [], notes)
    raise AssertionError("unreachable: the last budget always returns")


def plan(data: dict) -> Plan:
    """Where the experiment stands and what to train next, from the record alone."""
    runs = runs_of(data)
    p = explore(runs)
    if p.phase != "kept":
        return p
    budget, switch, notes, missing = p.budget, p.switch, p.notes, missing_from(runs)
    later = kept_budget_cells(budget, switch)
    if todo := missing(budget, later["confirm"]):
        return Plan("confirm", budget, switch, todo, notes)
    if todo := missing(budget, later["joint-curriculum"]):
        return Plan("joint-curriculum", budget, switch, todo, notes)  # the addendum, before the Transformer
    return transformer_plan(runs, budget, switch, notes, missing)


def kept_budget_cells(budget: int, switch: int) -> dict[str, list[dict]]:
    """Every cell of the phases that the kept budget and switch determine, in the plan's order."""
    return {"confirm": [cell(arm, s, budget, switch) for s in SEEDS for arm in ARMS],
            "joint-curriculum": [cell(JOINT_CURRICULUM, s, budget, switch) for s in SEEDS],
            "transformer-select": [transformer_cell(c, EXPLORE_SEEDS[0], budget) for c in TRANSFORMER_CANDIDATES]}


def selection_key(r: Run) -> tuple:
    """The pure Transformer's selection order, in-range numbers only: recall_acc_1x, then acc_1x,
    then the earlier candidate in TRANSFORMER_CANDIDATES (the smaller model, then rope, then the lower lr)."""
    return r.final["recall_acc_1x"], r.final["acc_1x"], -TRANSFORMER_CANDIDATES.index(candidate_of(r.params))


def transformer_candidates_tried(runs: list[Run], budget: int) -> list[Run]:
    """The pure Transformer's selection runs (exploration seed 0) at this budget, best first by selection_key."""
    return sorted((r for r in runs if r.budget == budget and r.arm == TRANSFORMER and r.seed == EXPLORE_SEEDS[0]),
                  key=selection_key, reverse=True)


def transformer_plan(runs: list[Run], budget: int, switch: int, notes: list, missing) -> Plan:
    """After the hybrids: the pure Transformer's selection, then its confirmation if one passes."""
    select = kept_budget_cells(budget, switch)["transformer-select"]
    if todo := missing(budget, select):
        return Plan("transformer-select", budget, switch, todo, notes)
    best = transformer_candidates_tried(runs, budget)[0]
    chosen, recall = candidate_of(best.params), best.final["recall_acc_1x"]
    if recall < dict(IN_RANGE)["recall_acc_1x"]:
        notes.append(f"pure Transformer: no candidate learns recall in range (best {chosen}: recall_acc_1x {recall:.3f}); "
                     "not trained on the confirmation seeds")
        return Plan("done", budget, switch, [], notes)
    notes.append(f"pure Transformer: candidate (n_layers, positional, lr) = {chosen}, recall_acc_1x {recall:.3f}")
    todo = missing(budget, [transformer_cell(chosen, s, budget) for s in SEEDS])
    return Plan("transformer-confirm" if todo else "done", budget, switch, todo, notes)


# --------------------------------------------------------------------------- the record


def chunks() -> Chunks:
    """This experiment's sweeps and record (read at each call: tests point them elsewhere)."""
    return Chunks(label="dat_paper_depth", title="DAT at the paper's depth", prefix="dat_depth_", folder=SWEEPS,
                  record=DATA, fixed=FIXED, axes=(*AXES, *MODEL_AXES), eval_every=EVAL_EVERY, concurrent=CONCURRENT,
                  key=key, params_of=params_of, new_record=lambda: {"design": design(), "runs": []}, reads=READS)


def load() -> dict:
    """The record: {"design": ..., "runs": [{"budget", "params", "reports", "trained_on"?}, ...]}."""
    return chunks().load()


def design() -> dict:
    return {"fixed": FIXED, "budgets": list(BUDGETS), "eval_every": EVAL_EVERY, "explore_seeds": list(EXPLORE_SEEDS),
            "seeds": list(SEEDS), "eval_seed": EVAL_SEED, "in_range": dict(IN_RANGE),
            "converged_within": CONVERGED_WITHIN, "command": "python -m experiments.dat_paper_depth run"}


def save(data: dict) -> None:
    chunks().save(data)


def params_of(config: dict) -> dict:
    """A trial config's cell: the values of AXES (and MODEL_AXES for a pure Transformer)."""
    params = {"dat.mode": config["dat"]["mode"], "dat.switch_step": config["dat"]["switch_step"],
              "curriculum.state_only_steps": config["curriculum"]["state_only_steps"], "seed": config["seed"]}
    if config["model"]["mixer"] == "none":
        params.update({"model.mixer": "none", "model.n_layers": config["model"]["n_layers"],
                       "model.positional": config["model"]["positional"], "optim.lr": config["optim"]["lr"]})
    return params


def export() -> int:
    """Copy every finished run of sweeps/dat_depth_* into the record; the number added."""
    return chunks().export()


# --------------------------------------------------------------------------- running


def chunk(p: Plan) -> list[dict]:
    """The next sweep's cells: a whole exploration phase, or, on the confirmation seeds, the cells
    of the next seeds that still miss a run, as many seeds as RUNS_PER_SWEEP runs hold."""
    if p.phase.startswith("explore") or p.phase == "transformer-select":
        return p.todo
    seeds = sorted({c["seed"] for c in p.todo})
    per_seed = max(sum(c["seed"] == s for c in p.todo) for s in seeds)
    take = seeds[:max(1, RUNS_PER_SWEEP // per_seed)]
    return [c for c in p.todo if c["seed"] in take]


def space_for(p: Plan, cells: list[dict]) -> tuple[str, dict]:
    """A sweep that trains exactly `cells` (its baseline points) to the end, named by them."""
    return chunks().space_for(p.phase, p.budget, cells)


def recorded(data: dict) -> set[tuple]:
    """The keys of the runs the record holds."""
    return chunks().recorded(data)


def unfinished_sweep(p: Plan, folder: Path) -> Path | None:
    """A sweep file in `folder` for this budget that still holds a cell the plan misses (to resume)."""
    return chunks().unfinished_sweep(p.budget, p.todo, folder)


def run() -> int:
    """Train what the plan asks, one sweep at a time, exporting after each, until done."""
    return chunks().run(plan, chunk)


# --------------------------------------------------------------------------- elsewhere (experiments/device_runs.py)


def phase_cells(p: Plan) -> dict[str, list[dict]]:
    """Every cell of each phase that is already determined: the plan's own (its missing cells), and
    once the budget and switch are kept, the confirmation, the addendum and the Transformer's
    candidates whole (they depend on no result still to come)."""
    out = {p.phase: p.todo} if p.todo else {}
    if p.phase.startswith("explore") or p.phase == "done":
        return out
    return {**out, **kept_budget_cells(p.budget, p.switch)}


def experiment() -> packs.Experiment:
    return packs.Experiment(chunks(), plan, phase_cells)


def trial_config(p: Plan, c: dict, device: str = "cpu") -> dict:
    """The trial config a sweep of this plan trains `c` with, on `device`."""
    return packs.trial_config(chunks(), p, c, device)


def open_cells(data: dict) -> dict[tuple, tuple[str, dict]]:
    """The cells of determined phases that the record misses: {key: (phase, cell)}."""
    return packs.open_cells(experiment(), data)


def write_configs(folder: Path, seeds: list[int], device: str, phase: str | None = None) -> tuple[int, list[int]]:
    """The trial configs of the missing cells of `seeds` in `phase` (default: the plan's), one file
    each, named s{seed}_{phase}-{n}.yaml; the number, and the seeds a local sweep is training too."""
    return packs.write_configs(experiment(), folder, seeds, device, phase)


def import_pack(path: Path) -> tuple[int, list[str]]:
    """Add the finished runs of a pack from experiments/device_runs.py to the record (packs.import_pack)."""
    return packs.import_pack(experiment(), path)


PRESET = ROOT / "trainables" / "presets" / "hybrid_dat_paper.yaml"


def preset_text(arm: str, budget: int, switch: int, why: str) -> str:
    """The recommended DAT arm's confirmed configuration as a preset: FIXED's model and hold, the
    arm's schedule at the kept budget and switch, the trainer's defaults for everything else."""
    from trainables.config import set_dotted, trial_config_from_dict
    import yaml

    data = {"task": {"name": "modsum_recall"}, "model": dict(FIXED["model"]), "dat": dict(FIXED["dat"])}
    for dotted, value in cell(arm, 0, budget, switch).items():
        set_dotted(data, dotted, value)
    data["steps"] = budget
    trial_config_from_dict(data, source=PRESET.name)  # the trainer accepts it, or this raises
    header = (f"# The recommended DAT arm at the paper's depth ({data['model']['n_layers']} blocks): {arm}, chosen by\n"
              f"# the rule pre-registered in docs/results/dat_paper_depth.md:\n# {why}.\n"
              f"# Written by `python -m experiments.dat_paper_depth preset` from the stored runs.\n")
    return header + yaml.safe_dump(data, sort_keys=False)


def write_preset() -> int:
    """Write the recommended arm's preset once every confirmation seed is paired; else one line, 2."""
    from experiments.dat_paper_depth_report import confirmation, recommended_arm

    data = load()
    p = plan(data)
    arm, why = recommended_arm(confirmation(runs_of(data), p.budget))
    if arm is None:
        print(f"dat_paper_depth: preset: the recommended arm is not decided yet: {why}", file=sys.stderr)
        return 2
    from experiments.pages import write_page

    write_page(PRESET, preset_text(arm, p.budget, p.switch, why))
    print(f"dat_paper_depth: wrote {PRESET} ({arm}, {p.budget} steps, switch {p.switch})")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m experiments.dat_paper_depth", description=summary(__doc__))
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("run", help="explore, apply the rules, confirm; resumes what was interrupted")
    sub.add_parser("export", help="copy finished runs of sweeps/dat_depth_* into the record")
    sub.add_parser("status", help="where the plan stands")
    sub.add_parser("report", help="rebuild the results section and pictures from the record")
    sub.add_parser("preset", help="write the recommended DAT arm as trainables/presets/hybrid_dat_paper.yaml")
    c = sub.add_parser("configs", help="write the trial configs of the missing cells of some seeds, to train elsewhere")
    c.add_argument("folder", type=Path)
    c.add_argument("--seeds", type=count, nargs="+", required=True, action=Distinct)
    c.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    c.add_argument("--phase", choices=("confirm", "joint-curriculum", "transformer-select", "transformer-confirm"),
                   help="a phase already determined (default: the plan's current one)")
    i = sub.add_parser("import", help="add the finished runs of a pack from experiments/device_runs.py to the record")
    i.add_argument("pack", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "configs":
        return packs.configs_command(experiment(), args.folder, args.seeds, args.device, args.phase)
    if args.verb == "import":
        return packs.import_command(experiment(), args.pack)
    if args.verb == "preset":
        return write_preset()
    if args.verb == "run":
        return run()
    if args.verb == "export":
        print(f"dat_paper_depth: {export()} runs added")
        return 0
    data = load()
    if args.verb == "report":
        from experiments.dat_paper_depth_report import report
        from experiments.pages import rebuild_command

        return rebuild_command("dat_paper_depth", RESULTS, lambda: report(data, plan(data), RESULTS))
    return status_command("dat_paper_depth", data, plan(data))


if __name__ == "__main__":
    run_tool(main)
