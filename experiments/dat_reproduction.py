"""The pre-registered factorial reproduction: run it as sweeps, and rebuild its results.

The experiment is built on the service, not part of it: each group of arms is one grid sweep
(experiments/dat_reproduction_spaces/*.yaml, run by `sweeper launch`, which keeps finished runs
and resumes a killed one from its checkpoint), and this script only reads what those sweeps
recorded (sweeps/<name>/status.json, one record per run) into the results section of
docs/results/dat_reproduction.md, a JSON of the finished runs and a plot. The bars it checks
are the ones committed in that file before the first run.

    python -m experiments.dat_reproduction run       # launch (or resume) every group, in order
    python -m experiments.dat_reproduction report    # rebuild the results from whatever has finished

`report` may run at any time, also while the sweeps run: what has not finished is left out and
every table says how many seeds each arm has (n); a bar whose seeds are not all in is "pending".
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from statistics import mean, stdev

from experiments.launching import sweeper_launch
from core.errors import ConfigError, brief, cut, one_line, short_path
from core.files import check_output
from trainables.run_dir import is_number
from core.tool_cli import run_tool, summary
from sweeper.cli_types import Distinct

ROOT = Path(__file__).resolve().parent.parent
SPACES = Path(__file__).resolve().parent / "dat_reproduction_spaces"
RESULTS = ROOT / "docs" / "results" / "dat_reproduction.md"
BEGIN, END = "<!-- results:begin (experiments/dat_reproduction.py report) -->", "<!-- results:end -->"
# the order they run in: the central claim first, then the baselines (the pure Transformer after its
# selection, experiments/transformer_selection.py, which `run` does first while its space file does not
# exist, then stops for the choice to be written down), then robustness and depth
GROUPS = ("hybrids", "lstm", "transformer", "nope", "depth4")
SEEDS = (2027, 2028, 2029, 2030, 2031)
EVAL_SEED, N_EVAL, STEPS = 20271122, 256, 6000
MULTIPLIERS = (1, 2, 3, 4)
RUN_COMMAND = "nohup nice -n 5 .venv/bin/python -m experiments.dat_reproduction run > sweeps/dat_reproduction.log 2>&1 &"

# arm name -> (group, how to recognise its runs from the sampled parameters)
ARMS = {
    "joint": ("hybrids", {"dat.mode": "none", "curriculum.state_only_steps": 0}),
    "joint + curriculum": ("hybrids", {"dat.mode": "none", "curriculum.state_only_steps": 1500}),
    "DAT": ("hybrids", {"dat.mode": "fixed", "curriculum.state_only_steps": 0}),
    "DAT + curriculum": ("hybrids", {"dat.mode": "fixed", "curriculum.state_only_steps": 1500}),
    "pure LSTM": ("lstm", {}),
    "pure Transformer": ("transformer", {}),
    "joint, no positions": ("nope", {"dat.mode": "none"}),
    "DAT, no positions": ("nope", {"dat.mode": "fixed"}),
    "joint, 4 blocks": ("depth4", {"dat.mode": "none"}),
    "DAT, 4 blocks": ("depth4", {"dat.mode": "fixed"}),
}
ARM_ORDER = tuple(ARMS)  # an arm's colour in every plot: C<its index>
SWEEP_NAME = {g: f"dat_repro_{g}" for g in GROUPS}
PLANNED = {"hybrids": 20, "lstm": 5, "transformer": 5, "nope": 10, "depth4": 6}  # runs per group (the grids' sizes)
# two-sided 95% t quantiles, by degrees of freedom
T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262, 10: 2.228}


@dataclass(frozen=True)
class Run:
    arm: str
    seed: int
    metrics: dict  # the final report (step 6000)


# --------------------------------------------------------------------------- reading the sweeps


def arm_of(group: str, params: dict) -> str | None:
    for arm, (g, match) in ARMS.items():
        if g == group and all(params.get(k) == v for k, v in match.items()):
            return arm
    return None


MAX_STATUS_BYTES = 64 * 2**20  # a sweep's status.json: a few KB per trial
MAX_TIMESTAMP = 253402300799  # 9999-12-31: beyond it no date can be printed


def read_status(path: Path) -> dict:
    """A group's status.json, read under a size limit, with every field this report reads checked:
    `trials` a list of mappings; a trial's `status` text and `step` a whole number >= 0; a
    completed trial's `params` a mapping with a whole-number `seed` and its `metrics` finite
    numbers (accuracies in [0, 1]); `started` a time a date can be printed for. One line if not."""
    from sweeper.fs import read_json_limited

    where = short_path(path, 100)
    status = read_json_limited(path, "status", MAX_STATUS_BYTES, where)
    if not isinstance(status, dict):
        raise ConfigError(f"{where}: must be a JSON object, got {brief(status, 40)}")
    started = status.get("started")
    if started is not None and (not is_number(started) or not 0 <= started <= MAX_TIMESTAMP):
        raise ConfigError(f"{where}: started: must be a time in seconds since 1970, got {brief(started, 40)}")
    trials = status.get("trials", [])
    if not isinstance(trials, list):
        raise ConfigError(f"{where}: trials: must be a list, got {brief(trials, 40)}")
    for i, t in enumerate(trials):
        at = f"{where}: trials[{i}]"
        if not isinstance(t, dict):
            raise ConfigError(f"{at}: must be a mapping, got {brief(t, 40)}")
        if not isinstance(t.get("status", ""), str):
            raise ConfigError(f"{at}.status: must be text, got {brief(t['status'], 40)}")
        step = t.get("step", 0)
        if not is_number(step) or step < 0 or step != int(step):
            raise ConfigError(f"{at}.step: must be a whole number >= 0, got {brief(step, 40)}")
        if t.get("status") != "completed":
            continue
        params, metrics = t.get("params"), t.get("metrics")
        if not isinstance(params, dict):
            raise ConfigError(f"{at}.params: must be a mapping, got {brief(params, 40)}")
        seed = params.get("seed")
        if not isinstance(seed, int) or isinstance(seed, bool) or not 0 <= seed <= 2**32 - 1:
            raise ConfigError(f"{at}.params.seed: must be a whole number in [0, 2**32-1], got {brief(seed, 40)}")
        if not isinstance(metrics, dict):
            raise ConfigError(f"{at}.metrics: must be a mapping, got {brief(metrics, 40)}")
        for key, value in metrics.items():
            if not is_number(value):
                raise ConfigError(f"{at}.metrics.{cut(str(key), 40)}: must be a finite number, got {brief(value, 40)}")
            if "acc_" in key and not 0 <= value <= 1:
                raise ConfigError(f"{at}.metrics.{cut(key, 40)}: an accuracy must lie in [0, 1], got {value}")
    return status


def finished_runs(sweeps_dir: Path) -> tuple[list[Run], dict[str, tuple[int, int]]]:
    """Every completed run (all STEPS trained) of every group, and per group (finished, planned)."""
    runs, progress = [], {}
    for group in GROUPS:
        path = sweeps_dir / SWEEP_NAME[group] / "status.json"
        if not path.exists():
            continue
        status = read_status(path)
        done = 0
        for t in status.get("trials", []):
            if t.get("status") != "completed" or t.get("step", 0) < STEPS:
                continue
            arm = arm_of(group, t["params"])
            if arm is not None:
                runs.append(Run(arm, int(t["params"]["seed"]), t["metrics"]))
                done += 1
        progress[group] = (done, PLANNED[group])
    return runs, progress


# --------------------------------------------------------------------------- statistics and bars


def values(runs: list[Run], arm: str, metric: str) -> dict[int, float]:
    """seed -> the metric's final value, for the finished runs of `arm`."""
    return {r.seed: float(r.metrics[metric]) for r in runs if r.arm == arm and metric in r.metrics}


def paired_gaps(runs: list[Run], a: str, b: str, metric: str) -> dict[int, float]:
    """seed -> a - b, over the seeds both arms have finished."""
    va, vb = values(runs, a, metric), values(runs, b, metric)
    return {s: va[s] - vb[s] for s in sorted(va.keys() & vb.keys())}


def mean_interval(xs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high): the 95% t interval of the mean; an infinite one for fewer than 2 values."""
    m = mean(xs)
    if len(xs) < 2:
        return m, -math.inf, math.inf
    half = T975.get(len(xs) - 1, 1.96) * stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


@dataclass(frozen=True)
class Bar:
    id: str
    text: str
    verdict: str  # pass | fail | pending
    measured: str


def check_bars(runs: list[Run]) -> list[Bar]:
    """The bars committed in docs/results/dat_reproduction.md, on the finished runs. A bar is
    judged only when every seed it names has finished (else `pending`, with the numbers so far),
    except an every-seed bar, which fails as soon as one seed loses."""
    bars = []
    five, three = set(SEEDS), set(SEEDS[:3])

    def judged(seeds_needed: set, have: set, ok: bool) -> str:
        return ("pass" if ok else "fail") if seeds_needed <= have else "pending"

    def every_seed(bar_id, text, a, b, seeds):
        g = {s: v for s, v in paired_gaps(runs, a, b, "ood_acc_3x").items() if s in seeds}
        ok = bool(g) and all(v > 0 for v in g.values())
        lost = any(v <= 0 for v in g.values())  # one seed lost: the bar has failed, whatever the rest give
        bars.append(Bar(bar_id, text, "fail" if lost else judged(seeds, set(g), ok),
                        ", ".join(f"{s}: {v:+.3f}" for s, v in g.items()) or "no paired seed yet"))

    def mean_gap(bar_id, text, a, b, margin, seeds):
        g = {s: v for s, v in paired_gaps(runs, a, b, "ood_acc_3x").items() if s in seeds}
        if not g:
            bars.append(Bar(bar_id, text, "pending", "no paired seed yet"))
            return
        m, lo, hi = mean_interval(list(g.values()))
        ok = m >= margin and lo > 0
        bars.append(Bar(bar_id, text, judged(seeds, set(g), ok), f"mean {m:+.3f}, 95% [{lo:+.3f}, {hi:+.3f}] (n={len(g)})"))

    def mean_at_least(bar_id, text, checks, seeds):
        parts, ok, have = [], True, set(seeds)
        for arm, metric, op, bound in checks:
            v = values(runs, arm, metric)
            have &= set(v)
            if not v:
                parts.append(f"{arm} {metric}: -")
                ok = False
                continue
            m = mean(v.values())
            ok &= (m >= bound) if op == ">=" else (m < bound)
            parts.append(f"{arm} {metric} {m:.3f} (n={len(v)})")
        bars.append(Bar(bar_id, text, judged(seeds, have, ok), "; ".join(parts)))

    every_seed("B1", "DAT > joint on ood_acc_3x in every seed", "DAT", "joint", five)
    mean_gap("B2", "mean gap DAT - joint on ood_acc_3x >= 0.10, 95% interval excludes 0", "DAT", "joint", 0.10, five)
    mean_at_least("B3", "DAT: mean acc_3x >= 0.90 and mean ood_acc_3x >= 0.85",
                  [("DAT", "acc_3x", ">=", 0.90), ("DAT", "ood_acc_3x", ">=", 0.85)], five)
    mean_at_least("B4", "joint: mean acc_1x >= 0.95", [("joint", "acc_1x", ">=", 0.95)], five)
    mean_gap("B5", "DAT > joint + curriculum on ood_acc_3x, 95% interval excludes 0", "DAT", "joint + curriculum", -math.inf, five)
    mean_at_least("B6", "pure LSTM: mean ood_recall_acc_3x < 0.60", [("pure LSTM", "ood_recall_acc_3x", "<", 0.60)], five)
    mean_at_least("B7", "pure Transformer: mean recall_acc_1x >= 0.95 and mean ood_state_acc_3x < 0.60",
                  [("pure Transformer", "recall_acc_1x", ">=", 0.95), ("pure Transformer", "ood_state_acc_3x", "<", 0.60)], five)
    mean_gap("B8", "no positions: DAT > joint on ood_acc_3x, 95% interval excludes 0", "DAT, no positions", "joint, no positions", -math.inf, five)
    every_seed("B9", "4 blocks: DAT > joint on ood_acc_3x in every seed", "DAT, 4 blocks", "joint, 4 blocks", three)
    return bars


def preset_decision(runs: list[Run]) -> str:
    """The pre-registered rule for which arm `hybrid_dat` is."""
    g = paired_gaps(runs, "DAT + curriculum", "DAT", "ood_acc_3x")
    if set(g) < set(SEEDS) or not g:
        return f"undecided (DAT + curriculum minus DAT on ood_acc_3x has {len(g)} of 5 paired seeds): hybrid_dat stays plain DAT"
    m, lo, hi = mean_interval(list(g.values()))
    if m > 0 and lo > 0:
        return f"DAT + curriculum beats DAT (mean {m:+.3f}, 95% [{lo:+.3f}, {hi:+.3f}]): hybrid_dat becomes DAT + curriculum"
    return f"DAT + curriculum does not beat DAT (mean {m:+.3f}, 95% [{lo:+.3f}, {hi:+.3f}]): hybrid_dat stays plain DAT"


# --------------------------------------------------------------------------- tables and plot


def _cell(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{mean(xs):.3f}" + (f" ({min(xs):.3f}-{max(xs):.3f})" if len(xs) > 1 else "")


def baselines() -> dict[str, dict[str, float]]:
    from trainables.baselines import baseline_table
    from trainables.config import TaskConfig

    return baseline_table(TaskConfig(), MULTIPLIERS, N_EVAL, EVAL_SEED)


def headline_table(runs: list[Run], base: dict) -> str:
    cols = ["acc_1x", "acc_3x", "ood_acc_3x", "ood_state_acc_3x", "ood_recall_acc_3x", "seq_acc_1x", "seq_acc_3x"]
    lines = ["| arm | n | " + " | ".join(f"`{c}`" for c in cols) + " |", "|---|---|" + "---|" * len(cols)]
    for arm in ARMS:
        n = len(values(runs, arm, "acc_1x"))
        lines.append(f"| {arm} | {n} | " + " | ".join(_cell(list(values(runs, arm, c).values())) for c in cols) + " |")
    for name, label in (("chance", "chance"), ("recency", "recency baseline"), ("in_range", "in-range oracle, recency beyond")):
        lines.append(f"| *{label}* | - | " + " | ".join(f"{base[name][c]:.3f}" if c in base[name] else "-" for c in cols) + " |")
    return "\n".join(lines)


def length_table(runs: list[Run], base: dict) -> str:
    lines = ["| arm | metric | " + " | ".join(f"{k}x" for k in MULTIPLIERS) + " | beyond: " + " | ".join(f"{k}x" for k in MULTIPLIERS[1:]) + " |",
             "|---|---|" + "---|" * (2 * len(MULTIPLIERS) - 1)]
    for arm in [*ARMS, "chance", "recency", "in_range"]:
        for fam, label in (("acc", "all"), ("state_acc", "state"), ("recall_acc", "recall")):
            if arm in ARMS:
                row = [_mean_or_dash(values(runs, arm, f"{fam}_{k}x")) for k in MULTIPLIERS]
                row += [_mean_or_dash(values(runs, arm, f"ood_{fam}_{k}x")) for k in MULTIPLIERS[1:]]
                name = f"{arm} (n={len(values(runs, arm, 'acc_1x'))})"
            else:
                row = [f"{base[arm].get(f'{fam}_{k}x', math.nan):.3f}" for k in MULTIPLIERS]
                row += [f"{base[arm].get(f'ood_{fam}_{k}x', math.nan):.3f}" for k in MULTIPLIERS[1:]]
                name = f"*{arm}*"
            lines.append(f"| {name} | {label} | " + " | ".join(row) + " |")
    return "\n".join(lines)


def _mean_or_dash(v: dict) -> str:
    return f"{mean(v.values()):.3f}" if v else "-"


def per_seed_table(runs: list[Run]) -> str:
    cols = [*(f"acc_{k}x" for k in MULTIPLIERS), *(f"ood_acc_{k}x" for k in MULTIPLIERS[1:]),
            "ood_state_acc_3x", "ood_recall_acc_3x", "state_acc_1x", "recall_acc_1x", "seq_acc_1x", "seq_acc_3x"]
    lines = ["| arm | seed | " + " | ".join(f"`{c}`" for c in cols) + " | wall (s) |", "|---|---|" + "---|" * (len(cols) + 1)]
    for arm in ARMS:
        for r in sorted((r for r in runs if r.arm == arm), key=lambda r: r.seed):
            wall = f"{r.metrics['time_total_s']:.0f}" if "time_total_s" in r.metrics else "-"
            lines.append(f"| {arm} | {r.seed} | " + " | ".join(f"{r.metrics[c]:.3f}" if c in r.metrics else "-" for c in cols) + f" | {wall} |")
    return "\n".join(lines)


def time_line(runs: list[Run]) -> str:
    """The training time of the finished runs, as Ray measured it (time_total_s of each run)."""
    walls = [r.metrics["time_total_s"] for r in runs if "time_total_s" in r.metrics]
    if not walls:
        return "No run has finished yet."
    return (f"{len(walls)} finished runs took {sum(walls) / 3600:.2f} h of training in all, each on one core of "
            f"this project's shared 2-core CPU machine, one run at a time per group, two in the 4-block group (per run {mean(walls):.0f} s, {min(walls):.0f}-{max(walls):.0f} s; "
            f"the other core busy with other work most of the time, so these are not clean timings).")


def gap_table(runs: list[Run]) -> str:
    pairs = [("DAT", "joint"), ("DAT + curriculum", "joint"), ("joint + curriculum", "joint"), ("DAT", "joint + curriculum"),
             ("DAT + curriculum", "DAT"), ("DAT, no positions", "joint, no positions"), ("DAT, 4 blocks", "joint, 4 blocks")]
    lines = ["| comparison (`ood_acc_3x`, paired by seed) | per seed | mean | 95% interval |", "|---|---|---|---|"]
    for a, b in pairs:
        g = paired_gaps(runs, a, b, "ood_acc_3x")
        if not g:
            lines.append(f"| {a} - {b} | - | - | - |")
            continue
        m, lo, hi = mean_interval(list(g.values()))
        lines.append(f"| {a} - {b} | " + ", ".join(f"{s}: {v:+.3f}" for s, v in g.items()) + f" | {m:+.3f} | [{lo:+.3f}, {hi:+.3f}] (n={len(g)}) |")
    return "\n".join(lines)


def _length_axes(ax, max_len: int) -> None:
    """Accuracy (0-1) against evaluation length up to the longest multiplier, training lengths shaded."""
    ax.axvspan(0, max_len, color="0.92")
    ax.set_xlim(0, max(MULTIPLIERS) * max_len + 5)
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)


def plot(runs: list[Run], base: dict, path: Path, max_len: int = 25) -> None:
    """Mean accuracy against evaluation length: all targets / state / recall (top), and over the
    targets beyond the training range only (bottom); chance and the recency baseline in grey."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(2, 3, figsize=(14, 7), sharey=True)
    arms = [a for a in ARMS if values(runs, a, "acc_1x")]
    for row, prefix in enumerate(("", "ood_")):
        ks = MULTIPLIERS if not prefix else MULTIPLIERS[1:]
        for ax, (fam, title) in zip(axes[row], (("acc", "all targets"), ("state_acc", "state (ADD)"), ("recall_acc", "recall (QUERY)"))):
            _length_axes(ax, max_len)
            for arm in arms:
                i = ARM_ORDER.index(arm)
                ys = [values(runs, arm, f"{prefix}{fam}_{k}x") for k in ks]
                if all(ys):
                    style = "--" if "no positions" in arm else ":" if "4 blocks" in arm else "-"
                    ax.plot([k * max_len for k in ks], [mean(y.values()) for y in ys], style, marker="o", color=f"C{i}",
                            label=f"{arm} (n={len(ys[0])})")
            for name, style in (("chance", (0, (1, 1))), ("recency", (0, (4, 2)))):
                ax.plot([k * max_len for k in ks], [base[name][f"{prefix}{fam}_{k}x"] for k in ks], color="0.5", ls=style, label=name)
            ax.set_title(("beyond the training range: " if prefix else "") + title, fontsize=10)
        axes[row][0].set_ylabel("accuracy (mean over seeds)")
    for ax in axes[1]:
        ax.set_xlabel("evaluation length (steps; shaded: training lengths)")
    axes[0][2].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


FRONT_ARMS = ("joint", "DAT", "DAT + curriculum", "pure LSTM", "pure Transformer")  # the main group's story


def front_plot(runs: list[Run], base: dict, path: Path, max_len: int = 25) -> None:
    """A one-figure summary: the main group's accuracy against evaluation length, over all targets and
    beyond the training range only; each point the mean over seeds, its bar the seeds' min to max."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    for ax, prefix, title in zip(axes, ("", "ood_"), ("all targets", "only the targets beyond the training range")):
        ks = MULTIPLIERS if not prefix else MULTIPLIERS[1:]
        xs = [k * max_len for k in ks]
        _length_axes(ax, max_len)
        for j, arm in enumerate(FRONT_ARMS):
            ys = [values(runs, arm, f"{prefix}acc_{k}x") for k in ks]
            if not all(ys):
                continue
            mid = [mean(y.values()) for y in ys]
            err = [[m - min(y.values()) for m, y in zip(mid, ys)], [max(y.values()) - m for m, y in zip(mid, ys)]]
            dodge = 1.2 * (j - (len(FRONT_ARMS) - 1) / 2)  # side by side, so the bars do not hide each other
            ax.errorbar([x + dodge for x in xs], mid, yerr=err, marker="o", capsize=3, color=f"C{ARM_ORDER.index(arm)}", label=f"{arm} (n={len(ys[0])})")
        ax.plot(xs, [base["recency"][f"{prefix}acc_{k}x"] for k in ks], color="0.5", ls=(0, (4, 2)), label="recency baseline")
        ax.plot(xs, [base["chance"][f"{prefix}acc_{k}x"] for k in ks], color="0.5", ls=(0, (1, 1)), label="chance")
        ax.set_title(title, fontsize=10)
        ax.set_xlabel("evaluation length (steps; shaded: training lengths)")
    axes[0].set_ylabel("accuracy (mean over seeds; bars: min-max)")
    axes[1].legend(fontsize=8, loc="lower left")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


def results_section(runs: list[Run], progress: dict, base: dict, commit: str) -> str:
    total_done = sum(d for d, _ in progress.values())
    complete = total_done == sum(PLANNED.values())
    state = "complete" if complete else f"**PARTIAL**: {total_done} of the {sum(PLANNED.values())} planned runs have finished"
    groups = ", ".join(f"{g} {progress.get(g, (0, 0))[0]}/{PLANNED[g]}" for g in GROUPS)
    bar_lines = "\n".join(f"| {b.id} | {b.text} | {'**fail**' if b.verdict == 'fail' else b.verdict} | {b.measured} |" for b in check_bars(runs))
    return f"""{BEGIN}
State: {state} (groups: {groups}). Rebuilt by `python -m experiments.dat_reproduction report` at
commit `{commit}` from the sweeps' records (sweeps/dat_repro_*/status.json); finished runs only,
each at its final step ({STEPS}). n is the number of seeds an arm has so far. Resume (or start) the
runs with `{RUN_COMMAND}`.

![accuracy against evaluation length, and beyond the training range](dat_reproduction.png)

![the main group in one figure: accuracy against length, over all targets and beyond the range](dat_reproduction_front.png)

Means over seeds (min-max in brackets); chance, the recency baseline and an oracle that is
perfect in range and plays the recency baseline beyond are on the same evaluation sets
(`trainables/baselines.py`):

{headline_table(runs, base)}

### The bars

| # | bar | verdict | measured |
|---|---|---|---|
{bar_lines}

`hybrid_dat` preset: {preset_decision(runs)}.

### Paired differences

{gap_table(runs)}

### Mean accuracy at every length (all targets, then beyond the training range)

{length_table(runs, base)}

### Every run

{per_seed_table(runs)}

### Time

{time_line(runs)}
{END}"""


def _commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True, cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def started_at(sweeps_dir: Path) -> str:
    """When each launched group's sweep first started (UTC), from its status.json."""
    import datetime as dt

    out = []
    for g in GROUPS:
        path = sweeps_dir / SWEEP_NAME[g] / "status.json"
        if path.exists() and (t := read_status(path).get("started")):
            out.append(f"{g} {dt.datetime.fromtimestamp(t, dt.timezone.utc):%Y-%m-%d %H:%M} UTC")
    return ", ".join(out) or "none yet"


MAX_RESULTS_BYTES = 4 * 2**20  # the results page this report rewrites


def report_outputs(out: Path) -> list[Path]:
    return [out, out.with_name("dat_reproduction_runs.json"), out.with_suffix(".png"), out.with_name(out.stem + "_front.png")]


def check_report_paths(sweeps_dir: Path, out: Path) -> str:
    """Before anything is read into the report or written: `--sweeps` a folder; `--out` a results
    page (a regular file under the size limit whose results markers, if any, come in pairs) in a
    folder where real bytes can be written; the files written beside it not folders or links.
    Returns the page's text."""
    from sweeper.fs import check_writable, read_limited

    if not sweeps_dir.is_dir():
        raise ConfigError(f"--sweeps {short_path(sweeps_dir, 100)}: "
                          f"{'not a folder' if sweeps_dir.exists() else 'no such folder'}; the report would have no runs")
    if not any((sweeps_dir / SWEEP_NAME[group] / "status.json").exists() for group in GROUPS):
        raise ConfigError(f"--sweeps {short_path(sweeps_dir, 100)}: no sweep of this experiment there (no "
                          f"{SWEEP_NAME[GROUPS[0]]}/status.json, nor of its other groups); the report would have no runs")
    for path in report_outputs(out):  # each a regular file of one name, or absent
        check_output(path, "--out" if path == out else f"--out {short_path(out, 60)}: beside it,")
    try:
        text = read_limited(out, "--out", MAX_RESULTS_BYTES).decode("utf-8")
    except UnicodeDecodeError as err:
        raise ConfigError(f"--out {short_path(out, 100)}: not UTF-8 text (byte {err.start})") from None
    if BEGIN not in text and "\n## Results\n" not in "\n" + text:
        raise ConfigError(f"--out {short_path(out, 100)}: not a results page (no `## Results` section, no "
                          f"{cut(BEGIN, 40)} marker); the report is written into one")
    if text.count(BEGIN) > 1 or (BEGIN in text and END not in text[text.index(BEGIN):]):
        raise ConfigError(f"--out {short_path(out, 100)}: its results section is damaged (each marker "
                          f"{cut(BEGIN, 40)} needs one {END} after it)")
    check_writable(out.parent, "--out")
    return text


def report(sweeps_dir: Path, out: Path) -> None:
    text = check_report_paths(sweeps_dir, out)
    runs, progress = finished_runs(sweeps_dir)
    base = baselines()
    section = results_section(runs, progress, base, _commit()).replace(
        "\n![accuracy", f"\nSweeps (re)started: {started_at(sweeps_dir)}.\n\n![accuracy", 1)
    if BEGIN in text:
        text = text[: text.index(BEGIN)] + section + text[text.index(END) + len(END):]
    else:  # the first report replaces the "Pending" line of the Results section
        head, sep, tail = text.partition("## Results\n")
        rest = tail.split("\n## ", 1)
        text = head + sep + "\n" + section + "\n" + ("\n## " + rest[1] if len(rest) > 1 else "")
    out.write_text(text)
    (out.with_name("dat_reproduction_runs.json")).write_text(json.dumps(
        {"progress": progress, "runs": [{"arm": r.arm, "seed": r.seed, "metrics": r.metrics} for r in runs]}, indent=1))
    if runs:
        plot(runs, base, out.with_suffix(".png"))
        front_plot(runs, base, out.with_name(out.stem + "_front.png"))
    print(f"{len(runs)} finished runs -> {out}")
    for b in check_bars(runs):
        print(f"{b.id} {b.verdict:<8} {b.text}: {b.measured}")


def run(groups: list[str]) -> int:
    """Launch (or resume) each group's sweep in turn; a group already finished returns at once."""
    for group in groups:
        space = SPACES / f"{group}.yaml"
        if group == "transformer" and not space.exists():
            print("== the pure Transformer's configuration is not chosen yet: running its selection "
                  "(experiments/transformer_selection.py; resumable)", flush=True)
            subprocess.run([sys.executable, "-m", "experiments.transformer_selection"], cwd=ROOT, check=False)
            print("write the chosen candidate into trainables/presets/transformer.yaml and "
                  f"{space.relative_to(ROOT)} (docs/results/transformer_baseline.md), then run again", flush=True)
            return 0
        print(f"== {group}: sweeper launch {space.relative_to(ROOT)}", flush=True)
        rc = sweeper_launch(space, cwd=ROOT)
        if rc != 0:
            print(f"sweeper launch {space.name} ended with {rc}; stopping here (run again to resume)", flush=True)
            return rc
    return 0


def main(argv: list[str] | None = None) -> int:
    from sweeper.cli import Parser

    ap = Parser(prog="python -m experiments.dat_reproduction", description=summary(__doc__))
    sub = ap.add_subparsers(dest="verb", required=True)
    r = sub.add_parser("run", help="launch or resume the groups' sweeps, one after another")
    r.add_argument("--groups", nargs="+", choices=GROUPS, default=list(GROUPS), action=Distinct)
    rep = sub.add_parser("report", help="rebuild the results section, JSON and plot from the finished runs")
    rep.add_argument("--sweeps", type=Path, default=ROOT / "sweeps")
    rep.add_argument("--out", type=Path, default=RESULTS)
    args = ap.parse_args(argv)
    try:
        if args.verb == "run":
            return run(args.groups)
        report(args.sweeps, args.out)
    except ConfigError as err:
        print(f"error: {one_line(str(err))}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    run_tool(main)
