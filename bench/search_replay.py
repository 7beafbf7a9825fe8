"""How fast does each search method find the best switch? Replayed on the recorded grid.

Every method searches the grid's space (dat.switch_step 0-6000 every 500 x curriculum 0 | 1500 x
learning rate 1.5e-3 | 3e-3) with the sweep's own sampler and early stopping (sweeper/replay.py),
2 trials at a time, `--samples` trials, once per replay seed (the same seeds for every method).
Per method, over the replay seeds:

    to best     training steps (all trials) until the sweep's best-so-far point is within 0.01 of
                the grid's best mean final acc_3x (median [IQR]; a replay that never gets there
                costs infinite compute: it counts in every median, sweeper/replay_stats.py)
    speed-up    random + FIFO's median to-best / the method's, with a 95% bootstrap interval
    paired      against the previous default (TPE + ASHA grace 3000) on the same seeds: the median
                per-seed ratio with its bootstrap interval, and the seeds each side wins
    top-3 cut   how often a trial at one of the grid's 3 best points was stopped early
    final       the true value (mean over training seeds) of the point each replay ends with

and, from the grid itself, Kendall's tau between a run's value at a rung (acc_3x, or the
phase-state signal) and its final acc_3x, for runs judged there before their switch (+ margin) and after.

    python bench/search_replay.py [--seeds 200] [--samples 52] [--jobs 2]   # writes docs/results/search_efficiency.{md,json,png}

The whole rebuild takes about 2.3 h on 2 cores. `--keep DIR` keeps every finished chunk of replays in DIR
(keyed by the space, the grid, the seeds and the code that replays them), so that an interrupted rebuild
run again with the same DIR resumes where it stopped and writes the same files.

`--lr X` replays the half of the grid at one learning rate (the space searches the switch and the
curriculum only), so that a grid recorded seed by seed can be replayed before its other half exists.
"""

from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time
import warnings
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from experiments import adaptive_grid, switch_grid  # noqa: E402
from sweeper.pasha import progressive_for  # noqa: E402
from sweeper.replay import Grid, kendall_tau, load_grid, outcome  # noqa: E402
from sweeper.replay_stats import N_BOOT, paired, summarize  # noqa: E402
from sweeper.space import SearchSpace  # noqa: E402
from core.tool_cli import Parser, run_tool  # noqa: E402
from sweeper.cli_types import cpus, plain, replay_count  # noqa: E402
from sweeper.fs import check_output_file  # noqa: E402
from core.errors import ConfigError, brief, short_path  # noqa: E402
from bench.replay_chunks import Chunks, code_fingerprint  # noqa: E402

OUT = ROOT / "docs" / "results" / "search_efficiency"
OUT_SUFFIXES = (".md", ".json", ".png")  # the files written, each at --out with its suffix
SHIPPED_SPACE = ROOT / "search_spaces" / "switch_time.yaml"
AXES = ("dat.switch_step", "curriculum.state_only_steps", "optim.lr")
TOLERANCE = 0.01
MARGIN = 500
SIGNALS = ("state_acc_1x", "ood_state_acc_3x")  # the recurrent path's state accuracy: at 1x, beyond the range
CHUNK = 25  # replays per task of the process pool

PLAIN = {"type": "asha", "grace_period": 3000, "reduction_factor": 2, "phase_aware": False}  # switch_time.yaml before
PHASED = {**PLAIN, "grace_period": 500, "phase_aware": True, "phase_margin": MARGIN}
# name: (sampler, scheduler section, early stopping: None = the space's own, "pasha" = progressive ASHA on it)
METHODS = {
    "random + FIFO": ("random", {"type": "fifo"}, None),
    "TPE + FIFO": ("tpe", {"type": "fifo"}, None),
    "random + ASHA (grace 3000)": ("random", PLAIN, None),
    "TPE + ASHA (grace 3000)": ("tpe", PLAIN, None),
    "TPE + ASHA (grace 500)": ("tpe", {**PLAIN, "grace_period": 500}, None),
    "TPE + phase-aware (grace 3000)": ("tpe", {**PHASED, "grace_period": 3000}, None),
    "TPE + phase-aware (grace 500)": ("tpe", PHASED, None),
    "TPE + phase-state (grace 500, state_acc_1x)": ("tpe", {**PHASED, "pre_phase_metric": SIGNALS[0]}, None),
    "TPE + phase-state (grace 500, ood_state_acc_3x)": ("tpe", {**PHASED, "pre_phase_metric": SIGNALS[1]}, None),
    "TPE + PASHA (grace 500)": ("tpe", {**PLAIN, "grace_period": 500}, "pasha"),
    "TPE + phase-aware PASHA (grace 500)": ("tpe", PHASED, "pasha"),
}
# left out to keep the run near 10 min on 2 cores (each replayed at 20 seeds, and adding nothing): phase-aware
# at margin 250 (the same decisions as margin 500 on this grid), TPE after 4 random draws (+ FIFO, + phase-aware
# grace 500 or 3000: slower than Optuna's 10 in every pairing), phase-state at grace 3000 (one rung before max_t)
REFERENCE, SHIPPED_BEFORE = "random + FIFO", "TPE + ASHA (grace 3000)"
PICTURED = (REFERENCE, "TPE + FIFO", SHIPPED_BEFORE, "TPE + ASHA (grace 500)", "TPE + phase-aware (grace 500)",
            "TPE + phase-state (grace 500, state_acc_1x)", "TPE + PASHA (grace 500)")
STOPPING = {None: None, "pasha": progressive_for}


def space(sampler: str, scheduler: dict, samples: int, lrs: list[float]) -> SearchSpace:
    return SearchSpace.model_validate({
        "name": "replay", "metric": "acc_3x", "mode": "max", "fixed": switch_grid.FIXED,
        "space": {"dat.switch_step": {"type": "int", "low": 0, "high": 6000, "step": 500},
                  "curriculum.state_only_steps": {"type": "categorical", "choices": list(switch_grid.STATE_ONLY_STEPS)},
                  "optim.lr": {"type": "categorical", "choices": lrs}},
        "budget": {"num_samples": samples, "max_concurrent": 2, "max_steps": switch_grid.MAX_STEPS,
                   "eval_every": switch_grid.EVAL_EVERY},
        "scheduler": scheduler, "searcher": searcher(sampler),
    })


def shipped_method() -> str:
    """The method search_spaces/switch_time.yaml ships: the row whose sampler and scheduler are the file's."""
    from sweeper.space_file import load_space

    def layout(scheduler) -> dict:  # a margin only matters to a phase-aware rule
        return scheduler.model_dump(exclude=set() if scheduler.phase_aware else {"phase_margin"})

    spec = load_space(SHIPPED_SPACE)
    for name, (sampler, scheduler, stopping) in METHODS.items():
        if (stopping is None and sampler == spec.searcher.sampler
                and layout(space(sampler, scheduler, 1, [switch_grid.LEARNING_RATES[0]]).scheduler) == layout(spec.scheduler)):
            return name
    raise SystemExit(f"{SHIPPED_SPACE}: its sampler and scheduler are none of this benchmark's methods")


def searcher(name: str) -> dict:
    """`tpe`, `random`, or `tpe:N` (TPE after N random draws instead of Optuna's 10)."""
    sampler, _, startup = name.partition(":")
    return {"sampler": sampler, "seed": 0, **({"startup_trials": int(startup)} if startup else {})}


def method_space(name: str, samples: int, lrs: list[float], held_out: bool = False) -> SearchSpace:
    sampler, scheduler, _ = METHODS[name]
    return held_out_space(sampler, scheduler, samples) if held_out else space(sampler, scheduler, samples, lrs)


def replays(name: str, seeds: range, grid: Grid, samples: int, lrs: list[float], held_out: bool = False) -> list[dict]:
    """One method's replays at the given seeds: what each did, in the seeds' order."""
    spec = method_space(name, samples, lrs, held_out)
    return [outcome(spec, grid, seed, STOPPING[METHODS[name][2]], TOLERANCE, top=3) for seed in seeds]


def chunk_tasks(fn, names, seeds: int, describe, args) -> list[tuple[dict, tuple]]:
    """Every method's seeds 0..seeds-1 in chunks of CHUNK: (what decides a chunk's rows, fn's arguments)."""
    return [({**describe(name), "seeds": [lo, min(lo + CHUNK, seeds)], "replay": fn.__name__},
             (name, range(lo, min(lo + CHUNK, seeds)), *args))
            for name in names for lo in range(0, seeds, CHUNK)]


def check_grid(grid: Grid, data: str, lrs: list[float]) -> None:
    """The --data record as the replays read it, checked before any is run or any file written: the
    switch grid's metric, mode and budget, every planned point recorded (and no other), and every run a
    curve of whole rising steps up to the budget (or its divergence), with finite values of `acc_3x`
    and of the phase-state signals. One ConfigError line naming the file otherwise."""
    from sweeper.status import finite

    where = f"--data {short_path(data, 120)}"
    if (grid.metric, grid.mode, grid.max_steps) != ("acc_3x", "max", switch_grid.MAX_STEPS):
        raise ConfigError(f"{where}: grid: must be metric acc_3x, mode max, max_steps {switch_grid.MAX_STEPS} (the switch "
                          f"grid's), got {brief(grid.metric, 20)}, {brief(grid.mode, 20)}, {brief(grid.max_steps, 20)}")
    planned = {(s, c, lr) for s in switch_grid.SWITCH_STEPS for c in switch_grid.STATE_ONLY_STEPS for lr in lrs}
    if (stray := next((k for k in grid.runs if k not in planned), None)) is not None:
        raise ConfigError(f"{where}: a run at {brief(dict(zip(AXES, stray)), 80)}, no point of the switch grid")
    if len(grid.runs) < len(planned):
        advice = ("run `python -m experiments.switch_grid run` first" if Path(data) == switch_grid.DATA
                  else "a replay needs every point")
        raise ConfigError(f"{where}: holds {len(grid.runs)} of the switch grid's {len(planned)} points; {advice}")
    for key, runs in grid.runs.items():
        for reports in runs:
            steps = [finite(r.get("step")) if isinstance(r, dict) else None for r in reports]
            if not reports or any(s is None or s != int(s) or not 0 < s <= grid.max_steps for s in steps) or \
                    any(b <= a for a, b in zip(steps, steps[1:])):
                raise ConfigError(f"{where}: a run at {brief(dict(zip(AXES, key)), 80)}: its reports must have whole, "
                                  f"rising steps in (0, {grid.max_steps}]")
            if steps[-1] < grid.max_steps and not reports[-1].get("diverged"):
                raise ConfigError(f"{where}: a run at {brief(dict(zip(AXES, key)), 80)} ends at step {steps[-1]:.0f}, "
                                  f"before {grid.max_steps}, and did not diverge")
            for name in ("acc_3x", *SIGNALS):
                if any(finite(r.get(name)) is None for r in reports):
                    raise ConfigError(f"{where}: a run at {brief(dict(zip(AXES, key)), 80)}: `{name}` must be a finite "
                                      "number in every report")


def whole_chunk(task: dict, rows: list) -> bool:
    """Whether a kept chunk's rows are one replay's outcome per seed of the task (sweeper/replay.py's `outcome`)."""
    def count(v) -> bool:
        return isinstance(v, int) and not isinstance(v, bool) and v >= 0

    def number(v) -> bool:
        return v is None or (isinstance(v, (int, float)) and not isinstance(v, bool))

    lo, hi = task["seeds"]
    return len(rows) == hi - lo and all(
        isinstance(r, dict) and number(r.get("to_best")) and number(r.get("final", 0)) and "final" in r
        and all(count(r.get(k)) for k in ("top_trials", "top_stopped", "top_paused", "paused"))
        and isinstance(r.get("curve", []), list) for r in rows)


def grid_digest(grid: Grid) -> str:
    import hashlib

    return hashlib.sha256(repr(grid).encode()).hexdigest()


def compare(grid: Grid, seeds: int, samples: int, lrs: list[float], chunks: Chunks, jobs: int, held_out: bool = False,
            names: tuple[str, ...] = tuple(METHODS)) -> dict:
    """Every method's replays at seeds 0..seeds-1, `jobs` processes at a time, and their statistics."""
    digest = grid_digest(grid)
    tasks = chunk_tasks(replays, names, seeds, lambda name: {
        "space": method_space(name, samples, lrs, held_out).model_dump(mode="json"), "grid": digest,
        "stopping": METHODS[name][2], "tolerance": TOLERANCE}, (grid, samples, lrs, held_out))
    done = chunks.run(replays, tasks, jobs)
    per_method: dict[str, list[dict]] = {name: [] for name in names}
    for (_, (name, *_)), rows in zip(tasks, done):
        per_method[name].extend(rows)
    ref, before = ([r["to_best"] for r in per_method[name]] for name in (REFERENCE, SHIPPED_BEFORE))
    out = {}
    for name, rows in per_method.items():
        out[name] = {**summary_of(rows, ref), "paused": sum(r["paused"] for r in rows),
                     "top3_paused": sum(r["top_paused"] for r in rows),
                     "finals": [r["final"] for r in rows], "curves": [r["curve"] for r in rows],
                     "paired_vs_before": dataclasses.asdict(paired(before, [r["to_best"] for r in rows]))}
    return out


def summary_of(rows: list[dict], reference: list) -> dict:
    """A method's replays as this record stores them (sweeper/replay_stats.py's summary)."""
    m = summarize(rows, reference)
    return {"to_best": m.to_best, "to_best_quartiles": m.quartiles, "not_reached": m.not_reached,
            "top3_trials": m.top_trials, "top3_stopped": m.top_stopped, "speedup": dataclasses.asdict(m.speedup)}


# -- the held-out set: experiments/adaptive_grid.py ---------------------------------------------------

HELD_OUT_AXES = ("dat.mode", "dat.criterion", "dat.acc_threshold", "dat.patience", "dat.plateau_delta", "dat.grad_ratio",
                 "curriculum.state_only_steps", "optim.lr")
CRITERION_PARAMS = {"state_acc": ("dat.acc_threshold",), "loss_plateau": ("dat.patience", "dat.plateau_delta"),
                    "grad_norm": ("dat.grad_ratio",)}


def held_out_space(sampler: str, scheduler: dict, samples: int) -> SearchSpace:
    """The held-out grid as a search space: adaptive_switch.yaml's question (joint, the fixed switch,
    or an adaptive criterion and its parameter) at the recorded values, x curriculum x learning rate."""
    choices = {p: sorted({point[p] for point in adaptive_grid.POINTS if p in point}) for ps in CRITERION_PARAMS.values() for p in ps}
    when = {c: {p: {"type": "categorical", "choices": choices[p]} for p in ps} for c, ps in CRITERION_PARAMS.items()}
    return SearchSpace.model_validate({
        "name": "replay", "metric": "acc_3x", "mode": "max", "fixed": adaptive_grid.FIXED,
        "space": {"dat.mode": {"type": "categorical", "choices": ["adaptive", "fixed", "none"], "when": {"adaptive": {
                      "dat.criterion": {"type": "categorical", "choices": list(CRITERION_PARAMS), "when": when}}}},
                  "curriculum.state_only_steps": {"type": "categorical", "choices": list(switch_grid.STATE_ONLY_STEPS)},
                  "optim.lr": {"type": "categorical", "choices": list(switch_grid.LEARNING_RATES)}},
        "budget": {"num_samples": samples, "max_concurrent": 2, "max_steps": switch_grid.MAX_STEPS,
                   "eval_every": switch_grid.EVAL_EVERY},
        "scheduler": scheduler, "searcher": searcher(sampler),
    })


def held_out_key(params: dict) -> tuple:
    """A recorded run's point in held_out_space's terms: the parameters a point does not use are absent."""
    active = {"dat.mode", "curriculum.state_only_steps", "optim.lr"}
    if params["dat.mode"] == "adaptive":
        active |= {"dat.criterion", *CRITERION_PARAMS[params["dat.criterion"]]}
    return tuple((float(params[a]) if isinstance(params[a], float) else params[a]) if a in active else None
                 for a in HELD_OUT_AXES)


def load_held_out(path: Path) -> tuple[Grid, int]:
    """The held-out grid's runs by point, and how many runs it holds."""
    import gzip

    with gzip.open(path, "rt") as f:
        data = json.load(f)
    runs: dict[tuple, list[list[dict]]] = {}
    for run in sorted(data["runs"], key=lambda r: r["params"]["seed"]):
        runs.setdefault(held_out_key(run["params"]), []).append(run["reports"])
    return Grid(HELD_OUT_AXES, runs, "acc_3x", "max", switch_grid.MAX_STEPS), len(data["runs"])


def held_out(seeds: int, samples: int, chunks: Chunks, jobs: int, names: tuple[str, ...] = tuple(METHODS)) -> dict:
    """Every method replayed on the held-out set, or {"pending": runs recorded} until it is whole."""
    grid, recorded = load_held_out(adaptive_grid.DATA)
    planned = len(adaptive_grid.cells())
    if recorded < planned:
        return {"pending": recorded, "planned": planned}
    return {"grid": grid, "results": compare(grid, seeds, samples, [], chunks, jobs, held_out=True, names=names)}


def summary_line(results: dict, name: str) -> str:
    r = results[name]
    return f"held-out: {name} speed-up {interval(r['speedup'])} vs {REFERENCE}, top-3 stopped {rate(r):.1%}"


def held_out_lines(held: dict | None, seeds: int, samples: int) -> list[str]:
    """The held-out set's section: the rule's step 4, every method's row, or what is still missing."""
    if held is None:
        return []
    head = ["## The held-out set", ""]
    if "pending" in held:
        return [*head, f"Pending: experiments/adaptive_grid.py has not recorded all {held['planned']} runs yet (training "
                "seeds 42001-42002, evaluation seed 42100; `python -m experiments.adaptive_grid status` says how many, "
                "`... run` resumes it). The design rule's step 4 is applied once the set is whole; nothing here is a "
                "result yet."]
    grid, results = held["grid"], held["results"]
    near = sum(grid.best() - grid.final(k) <= TOLERANCE for k in grid.runs)
    chosen = held["selected_on_switch_grid"]
    r, before = results[chosen], results[SHIPPED_BEFORE]
    confirmed = r["speedup"]["low"] > 1.0 and rate(r) <= rate(before)
    return [*head,
            f"The same methods, {seeds} replays of {samples} trials each, on experiments/adaptive_grid.py's "
            f"{len(grid.runs)} points (adaptive_switch.yaml's question; training seeds 42001-42002, used by nothing "
            "before). Grid's best points: " + "; ".join(f"{held_out_point(k)}: {grid.final(k):.3f}" for k in grid.ranked()[:3])
            + f". {near} of its {len(grid.runs)} points are within {TOLERANCE} of the best"
            + (f" (on the switch grid: {held['near_on_switch_grid']} of {held['points_on_switch_grid']})"
               if "near_on_switch_grid" in held else "")
            + f": a random draw lands there in about {len(grid.runs) / near:.1f} draws, which bounds what a method "
            "can save by choosing points (stopping can save more).",
            "", *method_table(grid, results), "",
            f"Step 4 of the design rule for the method it selected on the switch grid, {chosen}: speed-up lower bound "
            f"{r['speedup']['low']:.2f} (must be above 1.0), top-3 stop rate {rate(r):.1%} against {rate(before):.1%} for "
            f"{SHIPPED_BEFORE}: **{'confirmed' if confirmed else 'not confirmed'}**"
            + ((", and search_spaces/switch_time.yaml ships it." if held["shipped"] == chosen else
                f"; search_spaces/switch_time.yaml still ships {held['shipped']}, against the rule.") if confirmed else
               f", so it does not ship; search_spaces/switch_time.yaml ships {held['shipped']}."), "",
            *targets(results, held["shipped"])]


def held_out_point(key: tuple) -> str:
    return ", ".join(f"{a.split('.')[-1]} {v:g}" if isinstance(v, float) else f"{a.split('.')[-1]} {v}"
                     for a, v in zip(HELD_OUT_AXES, key) if v is not None)


def rung_taus(grid: Grid, rungs: tuple[int, ...]) -> list[dict]:
    """Kendall's tau between the value at each rung and the final acc_3x, over all recorded runs,
    for runs before their switch + margin at that rung (acc_3x and each phase-state signal) and after."""
    rows = []
    for rung in rungs:
        groups: dict[str, tuple[list, list]] = {g: ([], []) for g in ("before", *SIGNALS, "after")}
        for key, runs in grid.runs.items():
            switch, curriculum = key[0], key[1]
            phase = max(switch, curriculum) + MARGIN
            for reports in runs:
                at = next((r for r in reports if r["step"] >= rung), None)
                if at is None or switch >= switch_grid.MAX_STEPS:
                    continue
                for g, metric in ((("before", "acc_3x"), *((s, s) for s in SIGNALS)) if rung < phase else (("after", "acc_3x"),)):
                    groups[g][0].append(at[metric])
                    groups[g][1].append(reports[-1]["acc_3x"])
        rows.append({"rung": rung, "before_n": len(groups["before"][0]), "after_n": len(groups["after"][0]),
                     **{f"{g}_tau": kendall_tau(xs, ys) for g, (xs, ys) in groups.items()}})
    return rows


def main() -> int:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=replay_count, default=200, help="replays per method (replay seeds 0..N-1)")
    parser.add_argument("--samples", type=replay_count, default=52, help="trials per replayed sweep")
    parser.add_argument("--jobs", type=cpus, default=min(2, os.cpu_count() or 1), help="processes replaying at once")
    parser.add_argument("--data", default=str(switch_grid.DATA), help="the recorded switch grid (default: the stored one)")
    parser.add_argument("--out", type=plain, default=str(OUT), help="the results' path, without suffix")
    parser.add_argument("--lr", type=float, choices=switch_grid.LEARNING_RATES, help="replay the grid at this learning rate only")
    parser.add_argument("--keep", metavar="DIR", type=plain,
                        help="keep each finished chunk of replays in DIR, so that a rebuild run again with it resumes")
    parser.add_argument("--held-out-summary", action="store_true",
                        help="replay only the shipped default, the previous one and random + FIFO on the held-out set, "
                             "print one line for the shipped default, and write nothing")
    args = parser.parse_args()
    default = shipped_method()
    if args.keep is not None and Path(args.keep).exists() and not Path(args.keep).is_dir():
        parser.error(f"--keep: {args.keep} is not a folder")
    chunks = Chunks(None if args.keep is None else Path(args.keep),
                    code_fingerprint(("sweeper.replay", "sweeper.pasha", "sweeper.commands.replay")), whole_chunk)
    if args.held_out_summary:
        held = held_out(args.seeds, args.samples, chunks, args.jobs, names=tuple(dict.fromkeys((REFERENCE, SHIPPED_BEFORE, default))))
        print(f"held-out: pending, {held['pending']} of {held['planned']} runs recorded" if "pending" in held
              else summary_line(held["results"], default))
        return 0
    if Path(args.out).is_dir():  # `--out /tmp` would write /tmp.md beside it
        parser.error(f"--out: the results' path without suffix, not a folder; name a file in it, e.g. {Path(args.out) / 'replay'}")
    for suffix in OUT_SUFFIXES:  # before the replays, not after an hour of them
        check_output_file(f"{args.out}{suffix}", "--out")
    grid = load_grid(args.data, AXES)
    lrs = list(switch_grid.LEARNING_RATES)
    if args.lr is not None:
        lrs = [args.lr]
        grid = dataclasses.replace(grid, runs={k: v for k, v in grid.runs.items() if k[2] == args.lr})
    check_grid(grid, args.data, lrs)
    seeds_per_point = sorted({len(r) for r in grid.runs.values()})
    started = time.monotonic()
    results = compare(grid, args.seeds, args.samples, lrs, chunks, args.jobs)
    taus = rung_taus(grid, (500, 1000, 2000, 3000, 4000))
    shipped = shipped_space(grid, args.seeds, chunks, args.jobs) if args.lr is None else None
    held = held_out(args.seeds, args.samples, chunks, args.jobs) if args.lr is None else None
    if held is not None and "results" in held:
        held["selected_on_switch_grid"], held["shipped"] = selected(results), default
        held["near_on_switch_grid"] = sum(grid.best() - grid.final(k) <= TOLERANCE for k in grid.runs)
        held["points_on_switch_grid"] = len(grid.runs)
    wall = time.monotonic() - started
    write(grid, results, taus, args, seeds_per_point, Path(args.out), shipped, held, wall, default)
    if args.keep is not None:
        print(f"chunks of replays: {chunks.kept} read from {args.keep}, {chunks.replayed} replayed", file=sys.stderr)
    if held is not None and "results" in held:
        print(summary_line(held["results"], default))
    return 0


def shipped_space(grid: Grid, seeds: int, chunks: Chunks, jobs: int) -> dict:
    """search_spaces/switch_time.yaml as written (its switch every 250 steps, its continuous learning
    rate, its 24 samples and 4 baselines), its FIFO variant and random + FIFO, each replayed on the
    grid with a drawn point training on the nearest recorded one: `sweeper replay`'s own comparison."""
    from sweeper.commands import replay as verb
    from sweeper.space_file import load_space

    spec = load_space(SHIPPED_SPACE)
    near = grid.with_scales_of(spec)
    names = list(verb.METHODS)
    digest = grid_digest(near)
    tasks = chunk_tasks(_shipped_replays, names, seeds, lambda name: {
        "space": verb.METHODS[name](spec).model_dump(mode="json"), "grid": digest, "tolerance": TOLERANCE}, (near,))
    done = chunks.run(_shipped_replays, tasks, jobs)
    rows: dict[str, list[dict]] = {name: [] for name in names}
    for (_, (name, *_)), part in zip(tasks, done):
        rows[name].extend(part)
    reference = [r["to_best"] for r in rows[verb.REFERENCE]]
    out = {name: summary_of(rs, reference) for name, rs in rows.items()}
    written = [r["to_best"] for r in rows["as written"]]
    out["stopping_paired"] = dataclasses.asdict(paired([r["to_best"] for r in rows["as written, FIFO"]], written))
    return out


def _shipped_replays(name: str, seeds: range, grid: Grid) -> list[dict]:
    from sweeper.commands import replay as verb
    from sweeper.space_file import load_space

    spec = verb.METHODS[name](load_space(SHIPPED_SPACE))
    return [{k: v for k, v in outcome(spec, grid, seed, tolerance=TOLERANCE).items() if k != "curve"} for seed in seeds]


def shipped_lines(shipped: dict | None, seeds: int) -> list[str]:
    if not shipped:
        return []
    p = shipped["stopping_paired"]
    lines = ["## The shipped space itself", "",
             f"`sweeper replay search_spaces/switch_time.yaml --curves docs/results/switch_grid.json.gz --replays {seeds}` "
             "runs the shipped space as written (its switch every 250 steps, its continuous learning rate, 24 samples "
             "with its 4 baselines first, TPE and its early stopping) on this grid; a point the space draws trains on "
             "the nearest recorded point (the switch to the nearest 500, the learning rate to the nearer of 1.5e-3 and "
             "3e-3 on its log scale). Beside it, the same space without early stopping, and random + FIFO on the same "
             "space (no baselines). Same replay seeds, same target (within 0.01 of the grid's best).", "",
             "| method | steps to within 0.01 of the best, median [IQR] | not reached | speed-up vs random + FIFO [95% CI] "
             "| top-3 trials stopped |", "|---|---|---|---|---|"]
    for name, r in shipped.items():
        if name == "stopping_paired":
            continue
        q = r["to_best_quartiles"]
        reach = f"{q[1]:,.0f} [{q[0]:,.0f}-{q[2]:,.0f}]" if q else "never"
        cut = f"{r['top3_stopped']}/{r['top3_trials']} ({rate(r):.0%})"
        lines.append(f"| {name} | {reach} | {r['not_reached']}/{len(r['to_best'])} | {interval(r['speedup'])} | {cut} |")
    lines += ["", f"What the early stopping adds to the shipped space, paired on the same seeds (as written, FIFO / as "
              f"written): median ratio **{interval(p['median_ratio'])}**, less compute on {p['wins']} seeds, as much on "
              f"{p['ties']}, more on {p['losses']}."]
    return lines


def interval(i: dict, unit: str = "x") -> str:
    return f"{i['value']:.2f}{unit} [{i['low']:.2f}, {i['high']:.2f}]"


def rate(r: dict) -> float:
    return r["top3_stopped"] / r["top3_trials"] if r["top3_trials"] else 0.0


def method_table(grid: Grid, results: dict) -> list[str]:
    """One row per method: to-best, speed-up, the paired comparison, top-3 stops, the final pick."""
    lines = ["| method | steps to within 0.01 of the best, median [IQR] | not reached | speed-up vs random + FIFO "
             "[95% CI] | paired vs TPE + ASHA (grace 3000): median ratio [95% CI] | seeds won / tied / lost | "
             "top-3 trials stopped | final point's true acc_3x, median | final point within 0.01 |",
             "|---|---|---|---|---|---|---|---|---|"]
    for name, r in results.items():
        q = r["to_best_quartiles"]
        reach = f"{q[1]:,.0f} [{q[0]:,.0f}-{q[2]:,.0f}]" if q else "never"
        p = r["paired_vs_before"]
        vs = "-" if name == SHIPPED_BEFORE else interval(p["median_ratio"])
        wins = "-" if name == SHIPPED_BEFORE else f"{p['wins']} / {p['ties']} / {p['losses']}"
        cut = f"{r['top3_stopped']}/{r['top3_trials']} ({rate(r):.0%})"
        finals = [f for f in r["finals"] if f is not None]
        ends = sum(abs(grid.best() - f) <= TOLERANCE for f in finals)
        lines.append(f"| {name} | {reach} | {r['not_reached']}/{len(r['to_best'])} | {interval(r['speedup'])} | {vs} | "
                     f"{wins} | {cut} | " + (f"{statistics.median(finals):.3f}" if finals else "-")
                     + f" | {ends}/{len(r['finals'])} |")
    return lines


def write(grid: Grid, results: dict, taus: list[dict], args, seeds_per_point: list[int], out: Path,
          shipped: dict | None, held: dict | None, wall: float, default: str) -> None:
    lines = method_table(grid, results)
    tau_lines = ["| rung | runs before switch + margin | tau before (acc_3x) | " + " | ".join(f"tau before ({s})" for s in SIGNALS)
                 + " | runs after | tau after (acc_3x) |", "|---|---|---|" + "---|" * len(SIGNALS) + "---|---|"]
    for t in taus:
        tau_lines.append(f"| {t['rung']} | {t['before_n']} | {t['before_tau']:.2f} | "
                         + " | ".join(f"{t[f'{s}_tau']:.2f}" for s in SIGNALS) + f" | {t['after_n']} | {t['after_tau']:.2f} |")
    best = grid.ranked()[:3]
    source = Path(args.data).relative_to(ROOT) if Path(args.data).is_relative_to(ROOT) else args.data
    md = [
        "# How fast each search method finds the best switch (replayed)",
        "",
        *design_rule(),
        "",
        "## This grid",
        "",
        f"Generated by `python bench/search_replay.py --seeds {args.seeds} --samples {args.samples}"
        + (f" --lr {args.lr:g}` (the grid's points at learning rate {args.lr:g} only) from " if args.lr else "` from ")
        + f"`{source}` ({len(grid.runs)} points, {'/'.join(map(str, seeds_per_point))} training seed(s) each; "
        "experiments/switch_grid.py). Each method replays a sweep of "
        f"{args.samples} trials, 2 at a time, {args.seeds} times (replay seeds 0-{args.seeds - 1}, the same seeds for "
        "every method); compute is training steps summed over trials. A point's true value is its final acc_3x "
        f"averaged over training seeds.",
        "",
        "Statistics (sweeper/replay_stats.py): a replay's cost is the compute until its best-so-far point's true "
        "value is within 0.01 of the grid's best; a replay that never gets there costs infinite compute, so it "
        "counts in every median (against its method) instead of being dropped. The speed-up is random + FIFO's "
        "median cost / the method's; its 95% interval is a percentile bootstrap with "
        f"{N_BOOT:,} resamples, each method's {args.seeds} replays resampled with replacement independently of the "
        "reference's. The paired comparison uses the shared replay seeds: per seed, TPE + ASHA (grace 3000)'s cost "
        "/ the method's (above 1: the method got there sooner; both never: 1), the median of those ratios with a "
        f"percentile bootstrap over seeds ({N_BOOT:,} resamples of the {args.seeds} seeds), and the seeds on which "
        "each needed less compute.",
        "",
        *([f"**Preliminary:** the grid holds {sum(len(r) for r in grid.runs.values())} runs of the "
           f"{len(switch_grid.cells())} it plans (experiments/switch_grid.py); these numbers change as it fills.", ""]
          if args.lr is not None or min(seeds_per_point) < len(switch_grid.SEEDS) else []),
        "Grid's best points: " + "; ".join(f"switch {k[0]}, curriculum {k[1]}, lr {k[2]:g}: {grid.final(k):.3f}" for k in best),
        "",
        *lines,
        "",
        "A replay reaches the best when its pick is first within 0.01 of it; the last column counts the replays "
        "whose pick at the end still is (a later trial with a higher seen value can move the pick off it).",
        "",
        *methods_note(results),
        "",
        *rule_applied(results),
        "",
        *targets(results, default),
        "",
        *shipped_lines(shipped, args.seeds),
        "",
        f"Kendall's tau between a run's value at a rung and its final acc_3x (all recorded runs; a switch at "
        f"6000 left out; margin {MARGIN}): before the switch + margin by acc_3x and by each phase-state signal, after by acc_3x:",
        "",
        *tau_lines,
        "",
        f"![best-so-far against compute]({out.name}.png)",
        "",
        *held_out_lines(held, args.seeds, args.samples),
        "",
    ]
    Path(f"{out}.md").write_text("\n".join(md))
    kept = {name: {k: v for k, v in r.items() if k != "curves"} for name, r in results.items()}
    held_kept = None if held is None else held if "pending" in held else {
        name: {k: v for k, v in r.items() if k != "curves"} for name, r in held["results"].items()}
    Path(f"{out}.json").write_text(json.dumps({"args": {**{k: v for k, v in vars(args).items() if k != "keep"}, "data": str(source),
                                                             "out": str(out.name)},
                                                    "n_boot": N_BOOT, "results": kept,
                                                    "taus": taus, "shipped_space": shipped, "held_out": held_kept},
                                                   indent=1, default=str))
    plot(grid, results, out, default)
    print("\n".join(md))
    print(f"replayed in {wall:.0f} s", file=sys.stderr)  # not in the files: they are rebuilt byte for byte


def design_rule() -> list[str]:
    """How the shipped default is chosen: fixed before a second set of curves exists."""
    return [
        "## Design rule",
        "",
        "The shipped early stopping of search_spaces/switch_time.yaml is chosen by this rule, fixed before a "
        "second set of learning curves exists:",
        "",
        "1. **Candidates** are the methods in the table below but the reference, random + FIFO, replayed by this "
        "command with its defaults (200 replay seeds, 52 trials, 10,000 bootstrap resamples).",
        "2. **Eligible** are the candidates whose top-3 stop rate (trials at one of the grid's 3 best points "
        "stopped early, over all replays) is at most that of the previous default, TPE + ASHA (grace 3000).",
        "3. **Selected** on this grid is the eligible candidate with the highest lower bound of the 95% bootstrap "
        "interval of its speed-up over random + FIFO; a tie goes to the higher paired median ratio against the "
        "previous default.",
        "4. **Confirmed** it ships only if, on a second set of learning curves (every trial to its end, on "
        "training seeds this grid did not use, for a different question: search_spaces/adaptive_switch.yaml's "
        "criteria and thresholds with this grid's model, curriculum and budget), the same replay gives it a "
        "speed-up interval over random + FIFO whose lower bound is above 1.0 and a top-3 stop rate no higher than "
        "the previous default's there. Otherwise the shipped default stays as it is, and the second set's table "
        "is reported beside this one.",
        "5. Nothing else moves the default: not this grid's point estimates, not a method added after the second "
        "grid is recorded (a new candidate needs a third set of curves).",
    ]


def selected(results: dict) -> str:
    """Steps 2-3 of the design rule: the eligible method with the highest lower bound of its speed-up."""
    eligible = [n for n in results if n != REFERENCE and rate(results[n]) <= rate(results[SHIPPED_BEFORE])]
    return max(eligible, key=lambda n: (results[n]["speedup"]["low"], results[n]["paired_vs_before"]["median_ratio"]["value"]))


def rule_applied(results: dict) -> list[str]:
    """The design rule's steps 1-3 on this grid: the eligible candidates and the one selected."""
    eligible = [n for n in results if n != REFERENCE and rate(results[n]) <= rate(results[SHIPPED_BEFORE])]
    chosen = selected(results)
    return ["The design rule on this grid (steps 1-3): eligible (top-3 stop rate at most "
            f"{rate(results[SHIPPED_BEFORE]):.0%}): " + "; ".join(f"{n} (lower bound {results[n]['speedup']['low']:.2f})" for n in eligible)
            + f". Selected: **{chosen}**, to be confirmed on the second set (step 4)."]


def methods_note(results: dict) -> list[str]:
    """What the phase-state and PASHA rows are, and how often PASHA paused a trial."""
    pasha = [f"{n}: {r['paused']:,} trials paused, {r['top3_paused']} of them at a top-3 point"
             for n, r in results.items() if METHODS[n][2] == "pasha"]
    return [
        "Phase-state: phase-aware ASHA (margin 500) that ranks a trial at the rungs before its switch (+ margin) "
        "by the named state accuracy, against the other trials' values before their own switch, instead of passing "
        "it unjudged, and after it by acc_3x (space file: `scheduler.pre_phase_metric`). PASHA: progressive ASHA "
        "(sweeper/pasha.py): the maximum resource starts at ASHA's second rung (1000 steps) and grows a level while "
        "the trials at the top two levels rank differently (soft ranking, epsilon 0.01); a trial reaching the current "
        "maximum is paused there (not counted as stopped), and the sweep's pick is the best of the trials that trained "
        "furthest. Stopping variant, no resume of a paused trial" + (f" ({'; '.join(pasha)})." if pasha else ".")
        + " A pick that was paused has not been trained to the end: using it costs one more full run "
        f"({switch_grid.MAX_STEPS:,} steps), not counted in its compute above.",
    ]


def targets(results: dict, default: str) -> list[str]:
    """The shipped default's targets on a set of curves, met or missed; its paired comparison with the
    previous default where it is another method."""
    if default not in results or REFERENCE not in results:
        return []
    ours, speed = results[default], results[default]["speedup"]
    lines = [f"Targets, for the shipped default ({default}, search_spaces/switch_time.yaml):",
             "",
             f"- within 0.01 of the best at least 2x faster than {REFERENCE}: **{speed['value']:.2f}x**, "
             + ("met" if speed["value"] >= 2 else "missed"),
             f"- the lower bound of its 95% interval above 1.3x: **{speed['low']:.2f}x**, " + ("met" if speed["low"] > 1.3 else "missed"),
             f"- a top-3 point stopped in at most 5% of its trials: **{rate(ours):.1%}** ({ours['top3_stopped']}/"
             f"{ours['top3_trials']}), " + ("met" if rate(ours) <= 0.05 else "missed")]
    if default == SHIPPED_BEFORE or SHIPPED_BEFORE not in results:
        return lines
    p = ours["paired_vs_before"]
    return [*lines, "",
            f"Paired, the shipped default against the previous one ({SHIPPED_BEFORE}) on the same {len(ours['to_best'])} "
            f"replay seeds: it needed less compute on {p['wins']} seeds, as much on {p['ties']}, more on {p['losses']}; "
            f"the median per-seed ratio (previous / shipped) is **{interval(p['median_ratio'])}** "
            + ("(the interval includes 1: no difference resolved)." if p["median_ratio"]["low"] <= 1 <= p["median_ratio"]["high"]
               else "(the interval excludes 1).")]


def plot(grid: Grid, results: dict, out: Path, default: str) -> None:
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
        line, = ax.plot(xs, med, label=name + (" (shipped)" if name == default else ""), lw=2.2 if name == default else 1.4)
        ax.fill_between(xs, lo, hi, color=line.get_color(), alpha=0.12)
    ax.axhline(TOLERANCE, color="grey", ls=":", lw=1)
    ax.set_xlabel("compute: training steps, all trials")
    ax.set_ylabel("grid's best acc_3x - best-so-far point's true acc_3x")
    ax.set_yscale("symlog", linthresh=0.01)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=7)
    ax.set_xlim(0, min(top, 200_000))
    ax.set_title(f"Search replay on the switch grid: median and IQR over replay seeds ({len(PICTURED)} of the methods)")
    fig.tight_layout()
    fig.savefig(f"{out}.png", dpi=110)


if __name__ == "__main__":
    run_tool(main)
