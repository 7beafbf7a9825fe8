"""DAT on the rotating SSM at the paper's depth: the pre-registered experiment of docs/results/dat_ssm_depth.md.

The paper-depth experiment (experiments/dat_paper_depth.py) with its LSTM mixer replaced by the
SSM with rotation transitions: the same arms, budget rule, switch rule and in-range check, read
from its code; here only the seeds, the premise gate and the report. Every run goes through the
sweep service in chunks (experiments/sweep_chunks.py), each finished run's every report copied
into docs/results/dat_ssm_depth_runs.json.gz; interrupted in any way, `run` resumes.

    python -m experiments.dat_ssm_depth run       # explore, apply the rules, confirm (resumable)
    python -m experiments.dat_ssm_depth status    # where the plan stands
    python -m experiments.dat_ssm_depth export    # copy finished runs into the record
    python -m experiments.dat_ssm_depth report    # rebuild the results section and pictures
    python -m experiments.dat_ssm_depth park      # stopped sweeps packed to commit; `run` puts them back
    python -m experiments.dat_ssm_depth configs DIR --seeds S ...   # missing cells as trial configs, for
    python -m experiments.dat_ssm_depth import PACK                 # experiments/device_runs.py elsewhere

The plan: the paper-depth exploration on seeds 8 and 9, where a budget is kept only if, besides
the in-range check, both attention-off runs reach the premise (best `state_acc_1x` >= 0.95), and
a budget that misses it trains no DAT arm; at the kept budget, the premise gate: if an
attention-off run misses it, nothing more trains and the report says so; else the three arms on
the 15 confirmation seeds, two seeds per sweep.
"""

from __future__ import annotations

from pathlib import Path

from experiments import dat_paper_depth as depth
from experiments import packs
from experiments.dat_paper_depth import ARMS, OFF, Plan, Run, cell, explore, missing_from, premise_misses, runs_of
from experiments.sweep_chunks import Chunks, park_command, status_command
from core.tool_cli import Parser, run_tool, summary
from sweeper.cli_types import Distinct, count

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "docs" / "results" / "dat_ssm_depth_runs.json.gz"
RESULTS = ROOT / "docs" / "results" / "dat_ssm_depth.md"
SWEEPS = ROOT / "sweeps"
PARKED = ROOT / "experiments" / "parked" / "dat_ssm_depth.tar.gz"  # its unfinished sweeps, between machines
BEGIN, END = "<!-- results:begin (experiments/dat_ssm_depth.py report) -->", "<!-- results:end -->"

# Seeds, fresh: used by nothing in this repository before this experiment.
EXPLORE_SEEDS = (8, 9)
SEEDS = tuple(range(5201, 5216))
EVAL_SEED = 20261127
BUDGETS = (12_000, 24_000)
PREMISE = 0.95  # the attention-off run's best state_acc_1x: the SSM path counts in range before attention
FIXED = {
    "model": {"d_model": 64, "n_layers": 4, "n_heads": 4, "mixer": "ssm", "ssm_transition": "rotation",
              "attention": True, "positional": "rope"},
    "dat": {"hold": "gate"},
    "eval": {"seed": EVAL_SEED, "curve_window": depth.CURVE_WINDOW},
    "device": "cpu",
}
PAIRS = (("DAT", "joint"), ("DAT + curriculum", "joint"), ("DAT + curriculum", "DAT"))


def chunks() -> Chunks:
    """This experiment's sweeps and record (read at each call: tests point them elsewhere)."""
    return Chunks(label="dat_ssm_depth", title="DAT on the rotating SSM at the paper's depth", prefix="dat_ssm_",
                  folder=SWEEPS, record=DATA, fixed=FIXED, axes=depth.AXES, eval_every=depth.EVAL_EVERY,
                  concurrent=depth.CONCURRENT, key=depth.key, params_of=depth.params_of,
                  new_record=lambda: {"design": design(), "runs": []}, parked=PARKED, reads=depth.READS)


def design() -> dict:
    return {"fixed": FIXED, "budgets": list(BUDGETS), "eval_every": depth.EVAL_EVERY, "explore_seeds": list(EXPLORE_SEEDS),
            "seeds": list(SEEDS), "eval_seed": EVAL_SEED, "in_range": dict(depth.IN_RANGE),
            "converged_within": depth.CONVERGED_WITHIN, "premise": PREMISE,
            "command": "python -m experiments.dat_ssm_depth run"}


def gate_misses(runs: list[Run], budget: int) -> list[str]:
    """The premise gate at the kept budget: each exploration attention-off run that misses PREMISE, one line each."""
    return premise_misses([r for r in runs if r.budget == budget and r.arm == OFF and r.seed in EXPLORE_SEEDS], PREMISE)


def plan(data: dict) -> Plan:
    """Where the experiment stands and what to train next, from the record alone."""
    runs = runs_of(data)
    p = explore(runs, BUDGETS, EXPLORE_SEEDS, premise=PREMISE)
    if p.phase != "kept":
        return p
    notes = list(p.notes)
    if misses := gate_misses(runs, p.budget):
        notes.append("the premise gate fails (" + "; ".join(misses) + "): the SSM path does not count with attention "
                     "off within the budget, so no confirmation run trains")
        return Plan("done", p.budget, p.switch, [], notes)
    notes.append(f"the premise gate passes: both attention-off runs reach state_acc_1x >= {PREMISE}")
    todo = missing_from(runs)(p.budget, [cell(arm, s, p.budget, p.switch) for s in SEEDS for arm in ARMS])
    return Plan("confirm" if todo else "done", p.budget, p.switch, todo, notes)


def load() -> dict:
    return chunks().load()


def experiment() -> packs.Experiment:
    """For the device path: each phase hangs on the one before, so only the plan's own cells are determined."""
    return packs.Experiment(chunks(), plan, packs.plan_only)


def run() -> int:
    return chunks().run(plan, depth.chunk)


# --------------------------------------------------------------------------- the report


def premise_counts(conf: dict[str, dict[int, Run]], switch: int) -> list[str]:
    """Per DAT arm, how many seeds' SSM paths reached the premise at the last evaluation before the switch."""
    from experiments.dat_paper_depth_report import at_switch

    lines = []
    for arm in ("DAT", "DAT + curriculum"):
        pres = [pre for r in conf[arm].values() if (pre := at_switch(r, switch)) is not None]
        if pres:
            met = sum(pre["state_acc_1x"] >= PREMISE for pre in pres)
            lines.append(f"- {arm}: the SSM path's `state_acc_1x` at the last evaluation before the switch (attention "
                         f"off) is >= {PREMISE} on {met} of {len(pres)} seeds.")
    return lines + [""] if lines else []


ANSWER = "### Does DAT carry over to the rotating SSM? (as pre-registered)"


def gate_answer(misses: list[str], budget: int) -> list[str]:
    """The pre-registered answer when the premise gate fails."""
    return [ANSWER, "", f"DAT's premise is not met by the rotating SSM at this depth and budget ({budget} steps): "
            f"with attention off, the SSM path does not reach `state_acc_1x` {PREMISE} in range ("
            + "; ".join(misses) + "). No confirmation run was trained; the question stays open for this SSM.", ""]


def answer_section(conf: dict[str, dict[int, Run]]) -> list[str]:
    """The pre-registered answer: each DAT arm against joint on ood_acc_3x, once every seed is paired."""
    from experiments.dat_paper_depth_report import arm_passes, gaps, in_range_verdict, interval, wording

    lines = [ANSWER, ""]
    joint = list(conf["joint"].values())
    for arm in ("DAT", "DAT + curriculum"):
        g = gaps(conf, arm, "joint", "ood_acc_3x")
        if len(g) < len(SEEDS):
            lines.append(f"- {arm} - joint: pending ({len(g)} of {len(SEEDS)} paired seeds).")
            continue
        rs = list(conf[arm].values())
        if not (arm_passes(rs) and arm_passes(joint)):
            lines.append(f"- {arm} - joint: not read as a length-generalisation result: {arm} {in_range_verdict(rs)}, "
                         f"joint {in_range_verdict(joint)}.")
            continue
        m, lo, hi = interval(list(g.values()))
        reading = wording(arm, "joint", m, lo, hi)
        lead = "DAT carries over: " if lo > 0 else ""
        lines.append(f"- {arm} - joint on `ood_acc_3x`: {lead}{reading} (n = {len(g)}).")
    return lines + [""]


def beside_lstm(conf: dict[str, dict[int, Run]], budget: int) -> list[str]:
    """Descriptive: each arm's means beside the same arm with the LSTM mixer, from the paper-depth
    experiment's confirmation (other seeds, so not paired and not a test)."""
    from experiments import dat_paper_depth_report as rep

    lstm_data = depth.load()
    lstm_budget = depth.plan(lstm_data).budget
    lstm = rep.confirmation(runs_of(lstm_data), lstm_budget, depth.SEEDS)
    cols = ("acc_1x", "recall_acc_1x", "ood_acc_3x", "ood_state_acc_3x", "last_acc_3x", "seq_acc_3x", "cliff")
    lines = ["### Beside the LSTM (descriptive, not a test)", "",
             "Each arm's mean over its seeds here and in [dat_paper_depth.md](dat_paper_depth.md) (the same design "
             "with the LSTM mixer; other training and evaluation seeds).", "",
             "| arm | mixer | budget | n | " + " | ".join(f"`{c}`" for c in cols) + " |", "|---|---|---|---|" + "---|" * len(cols)]
    for arm in ARMS:
        for mixer, by_arm, steps in (("SSM `rotation`", conf, budget), ("LSTM", lstm, lstm_budget)):
            rs = list(by_arm.get(arm, {}).values())
            if rs:
                lines.append(f"| {arm} | {mixer} | {steps} | {len(rs)} | "
                             + " | ".join(f"{sum(rep.metric(r, c) for r in rs) / len(rs):.3f}" for c in cols) + " |")
    return lines + [""]


def report(data: dict, p: Plan, out: Path = RESULTS) -> str:
    """Rewrite `out`'s results section and its pictures; DamagedSection (nothing written) if its
    markers are damaged."""
    from experiments import dat_paper_depth_report as rep
    from experiments.pages import read_page, replace_section, write_page

    replace_section(read_page(out), BEGIN, END, "")
    runs = runs_of(data)
    conf = rep.confirmation(runs, p.budget, SEEDS)
    n_conf = sum(len(conf[arm]) for arm in ARMS)
    lines = [BEGIN, "",
             f"State: {len(runs)} runs recorded ({n_conf} of {len(ARMS) * len(SEEDS)} confirmation runs); plan phase "
             f"`{p.phase}`, budget {p.budget} steps, switch step {p.switch if p.switch is not None else 'not set yet (its exploration runs first)'}. Rebuilt by "
             f"`python -m experiments.dat_ssm_depth report` at commit `{rep.head_commit()}` from "
             f"[{DATA.name}]({DATA.name}); every number is a final evaluation "
             f"(256 sequences per length, evaluation seed {EVAL_SEED}).", ""]
    lines += rep.exploration_section(runs, p, EXPLORE_SEEDS)
    if n_conf:
        base = rep.baselines(EVAL_SEED)
        lines += rep.arms_section(conf, base) + rep.paired_section(conf, PAIRS, len(SEEDS)) + answer_section(conf)
        lines += beside_lstm(conf, p.budget)
        lines += [f"![{rep.PICTURES[s]}]({out.stem}_{s}.png)" for s in rep.PICTURES] + [""]
        lines += rep.per_seed_section(conf)
        lines += rep.premise_section(conf, p.switch, "The premise, per run: the SSM path when attention came on")
        lines += premise_counts(conf, p.switch)
        rep.pictures(conf, base, out)
    elif p.phase == "done" and (misses := gate_misses(runs, p.budget)):
        lines += gate_answer(misses, p.budget)
    else:
        lines += ["No confirmation run has finished yet.", ""]
    lines.append(END)
    section = "\n".join(lines)
    write_page(out, replace_section(read_page(out), BEGIN, END, section))
    return section


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m experiments.dat_ssm_depth", description=summary(__doc__))
    sub = parser.add_subparsers(dest="verb", required=True)
    sub.add_parser("run", help="explore, apply the rules, confirm; resumes what was interrupted")
    sub.add_parser("export", help="copy finished runs of sweeps/dat_ssm_* into the record")
    sub.add_parser("status", help="where the plan stands")
    sub.add_parser("report", help="rebuild the results section and pictures from the record")
    sub.add_parser("park", help="pack the stopped, unfinished sweeps into experiments/parked/, to commit")
    c = sub.add_parser("configs", help="write the trial configs of the plan's missing cells of some seeds, to train elsewhere")
    c.add_argument("folder", type=Path)
    c.add_argument("--seeds", type=count, nargs="+", required=True, action=Distinct)
    c.add_argument("--device", choices=("cpu", "cuda"), default="cuda")
    i = sub.add_parser("import", help="add the finished runs of a pack from experiments/device_runs.py to the record")
    i.add_argument("pack", type=Path)
    args = parser.parse_args(argv)
    if args.verb == "configs":
        return packs.configs_command(experiment(), args.folder, args.seeds, args.device, None)
    if args.verb == "import":
        return packs.import_command(experiment(), args.pack)
    if args.verb == "run":
        return run()
    if args.verb == "export":
        print(f"dat_ssm_depth: {chunks().export()} runs added")
        return 0
    if args.verb == "park":
        return park_command(chunks())
    data = load()
    if args.verb == "report":
        from experiments.pages import rebuild_command

        return rebuild_command("dat_ssm_depth", RESULTS, lambda: report(data, plan(data), RESULTS))
    return status_command("dat_ssm_depth", data, plan(data))


if __name__ == "__main__":
    run_tool(main)
