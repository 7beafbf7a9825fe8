"""The results section of docs/results/dat_plain_switch.md, rebuilt from its record alone."""

from __future__ import annotations

import math
from pathlib import Path
from statistics import mean, stdev

from experiments import dat_paper_depth as depth
from experiments import dat_paper_depth_report as rep
from experiments.dat_paper_depth import Plan, Run, in_range_misses
from experiments.dat_plain_switch import (ABRUPT_BAR, ARMS, BEGIN, DAT, DATA, END, EXPLORE_SEEDS, JOINT, JOINT_CURRICULUM,
                                          LRS, NOPE_ARM, RESULTS, SEEDS, SWITCHES, grid, runs_of, select)
from trainables.metrics import CURVE

PRIMARY = ((DAT, JOINT), (NOPE_ARM, JOINT))
SECONDARY_METRICS = ("last_acc_3x", "seq_acc_3x", "abruptness")


def curve(final: dict, end: int) -> float:
    """The position curve's window ending at position `end`."""
    return float(final[f"{CURVE}{end:03d}"])


def abruptness(final: dict) -> float:
    """The registered shape measure: the mean drop per 5-position window over the first two windows
    past the training range, minus that over the last two windows inside it."""
    edge = rep.MAX_LEN
    return (curve(final, edge) - curve(final, edge + 10)) / 2 - (curve(final, edge - 10) - curve(final, edge)) / 2


def value(run: Run, name: str) -> float:
    return abruptness(run.final) if name == "abruptness" else rep.metric(run, name)


def shape_words(lo: float, hi: float) -> str:
    return "a cliff" if lo >= ABRUPT_BAR else "gradual" if hi < ABRUPT_BAR else "not resolved"


def holm(ps: list[float]) -> list[float]:
    """Holm-adjusted p-values, in the order given."""
    order = sorted(range(len(ps)), key=lambda i: ps[i])
    out, running = [0.0] * len(ps), 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (len(ps) - rank) * ps[i]))
        out[i] = running
    return out


def paired_p(xs: list[float]) -> float:
    from scipy import stats

    return float(stats.ttest_1samp(xs, 0.0).pvalue) if len(xs) > 1 and stdev(xs) > 0 else math.nan


def welch(a: list[float], b: list[float]) -> tuple[float, float, float]:
    """Difference of means a - b with its 95% Welch interval."""
    from scipy import stats

    va, vb = stdev(a) ** 2 / len(a), stdev(b) ** 2 / len(b)
    df = (va + vb) ** 2 / (va ** 2 / (len(a) - 1) + vb ** 2 / (len(b) - 1))
    half = float(stats.t.ppf(0.975, df)) * math.sqrt(va + vb)
    d = mean(a) - mean(b)
    return d, d - half, d + half


def by_arm(runs: list[Run]) -> dict[str, dict[int, Run]]:
    """arm -> seed -> run, on the confirmation seeds (each arm at its own budget)."""
    out: dict[str, dict[int, Run]] = {}
    for r in runs:
        if r.seed in SEEDS:
            out.setdefault(r.arm, {})[r.seed] = r
    return {arm: out[arm] for arm in ARMS if arm in out}


def provenance_cells(entry: dict) -> str:
    commit = (entry.get("commit") or "-")[:12]
    return f"{entry.get('started_utc') or '-'} | {entry.get('ended_utc') or '-'} | {commit} | {(entry.get('config_hash') or '-')[:12]}"


def run_rows(entries: list[tuple[Run, dict]], cols: tuple[str, ...]) -> list[str]:
    lines = ["| arm | seed | lr | switch | budget | " + " | ".join(f"`{c}`" for c in cols)
             + " | trained on | started (UTC) | ended (UTC) | commit | config hash |", "|---|" * 1 + "---|" * (len(cols) + 9)]
    for r, e in entries:
        switch = r.params["dat.switch_step"] if r.arm == DAT else "-"
        lines.append(f"| {r.arm} | {r.seed} | {r.params['optim.lr']:g} | {switch} | {r.budget} | "
                     + " | ".join(f"{value(r, c):.3f}" for c in cols) + f" | {r.trained_on} | {provenance_cells(e)} |")
    return lines + [""]


EXPLORE_COLS = ("acc_1x", "recall_acc_1x", "ood_acc_3x", "abruptness", "cliff")
CONFIRM_COLS = ("acc_1x", "recall_acc_1x", "ood_acc_3x", "last_acc_3x", "seq_acc_3x", "abruptness", "cliff")


def exploration_section(runs: list[Run], entries: dict[int, dict]) -> list[str]:
    explore = [(r, entries[id(r)]) for r in runs if r.seed in EXPLORE_SEEDS]
    lines = ["### Exploration: the grid (seeds 0 and 1, evaluation seed 20261125)", ""]
    if not explore:
        return lines + ["No run yet.", ""]
    lines += ["| arm | lr | switch | runs | mean `ood_acc_3x` | in-range check |", "|---|---|---|---|---|---|"]
    for arm in (JOINT, DAT):
        for (lr, switch), rs in grid(runs, arm):
            passing = sum(not in_range_misses(r.final) for r in rs)
            lines.append(f"| {arm} | {lr:g} | {switch if arm == DAT else '-'} | {len(rs)} | "
                         f"{rep._cell([float(r.final['ood_acc_3x']) for r in rs])} | {passing} of {len(rs)} pass |")
    lines.append("")
    for arm in (JOINT, DAT):
        cells = grid(runs, arm)
        if len(cells) == len(LRS) * (len(SWITCHES) if arm == DAT else 1) and all(len(rs) == len(EXPLORE_SEEDS) for _, rs in cells):
            (lr, switch), note = select(runs, arm)
            lines.append(f"- {arm}*: lr {lr:g}" + (f", switch {switch}" if arm == DAT else "") + f" ({note}).")
    return lines + ["", "Every exploration run:", ""] + run_rows(sorted(explore, key=lambda x: (x[0].arm, x[0].params["optim.lr"], x[0].params["dat.switch_step"], x[0].seed)), EXPLORE_COLS)


def shape_section(conf: dict[str, dict[int, Run]], title: str, note: str) -> list[str]:
    lines = [title, "", note, "", f"| arm | n | mean abruptness | 95% interval | seeds >= {ABRUPT_BAR} | reading | "
             "mean `cliff` (how far) |", "|---|---|---|---|---|---|---|"]
    for arm, seeds in conf.items():
        xs = [abruptness(r.final) for r in seeds.values()]
        m, lo, hi = rep.interval(xs)
        lines.append(f"| {arm} | {len(xs)} | {m:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {sum(x >= ABRUPT_BAR for x in xs)} of {len(xs)} | "
                     f"{shape_words(lo, hi)} | {mean(rep.cliff(r.final) for r in seeds.values()):.3f} |")
    return lines + [""]


def paired_section(conf: dict[str, dict[int, Run]]) -> list[str]:
    lines = ["### Paired comparisons (by training seed)", "",
             "| comparison | metric | n | mean | 95% interval | sd | detectable gap | Holm p | reading |",
             "|---|---|---|---|---|---|---|---|---|"]
    primary = []
    for a, b in PRIMARY:
        g = {s: value(conf[a][s], "ood_acc_3x") - value(conf[b][s], "ood_acc_3x")
             for s in sorted(conf.get(a, {}).keys() & conf.get(b, {}).keys())}
        primary.append((a, b, g))
    adjusted = holm([paired_p(list(g.values())) if len(g) > 1 else 1.0 for _, _, g in primary])
    rows = [(a, b, "ood_acc_3x", g, p) for (a, b, g), p in zip(primary, adjusted)]
    rows += [(a, b, name, {s: value(conf[a][s], name) - value(conf[b][s], name)
                           for s in sorted(conf.get(a, {}).keys() & conf.get(b, {}).keys())}, None)
             for a, b in PRIMARY for name in SECONDARY_METRICS]
    for a, b, name, g, p in rows:
        if len(g) < 2:
            lines.append(f"| {a} - {b} | `{name}` | {len(g)} | - | - | - | - | - | pending |")
            continue
        xs = list(g.values())
        m, lo, hi = rep.interval(xs)
        sd = stdev(xs)
        said = abruptness_wording if name == "abruptness" else rep.wording  # higher: a steeper fall, not a gain
        reading = said(a, b, m, lo, hi) if len(g) == len(SEEDS) else f"pending ({len(g)} of {len(SEEDS)} seeds)"
        if short := [arm for arm in (a, b) if not rep.arm_passes(list(conf.get(arm, {}).values()))]:
            reading += f" ({' and '.join(short)} undertrained: not read as a length-generalisation result)"
        lines.append(f"| {a} - {b} | `{name}` | {len(g)} | {m:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {sd:.3f} | "
                     f"{rep.detectable_gap(sd, len(g)):.3f} | {'-' if p is None else f'{p:.3f}'} | {reading} |")
    return lines + ["", "Holm p: the paired t test's p-value, Holm-adjusted over the two primary comparisons.", ""]


def abruptness_wording(a: str, b: str, m: float, lo: float, hi: float) -> str:
    """A paired difference of abruptness, read by direction only: a higher one is a steeper fall."""
    if lo > 0:
        return f"{a} falls more abruptly than {b}, by {m:.3f} [{lo:.3f}, {hi:.3f}]"
    if hi < 0:
        return f"{b} falls more abruptly than {a}, by {-m:.3f} [{-hi:.3f}, {-lo:.3f}]"
    return (f"no difference detected: rules out {a} falling more abruptly than {b} by more than {hi:.3f}, "
            f"and less abruptly by more than {-lo:.3f}")


def beside_section(conf: dict[str, dict[int, Run]]) -> list[str]:
    """Descriptive: NoPE beside the rotary Transformer, joint + curriculum beside DAT + curriculum, of the paper-depth confirmation."""
    old = rep.confirmation(depth.runs_of(depth.load()), depth.plan(depth.load()).budget)
    lines = ["### Beside the paper-depth confirmation (descriptive: other seeds and evaluation sets, not tests)", "",
             "| here | there | n here | n there | difference of means `ood_acc_3x` | 95% Welch interval |", "|---|---|---|---|---|---|"]
    for here, there in ((NOPE_ARM, depth.TRANSFORMER), (JOINT_CURRICULUM, "DAT + curriculum")):
        a = [float(r.final["ood_acc_3x"]) for r in conf.get(here, {}).values()]
        b = [float(r.final["ood_acc_3x"]) for r in old.get(there, {}).values()]
        if len(a) < 2 or len(b) < 2:
            lines.append(f"| {here} | {there} | {len(a)} | {len(b)} | pending | - |")
            continue
        d, lo, hi = welch(a, b)
        lines.append(f"| {here} | {there} | {len(a)} | {len(b)} | {d:+.3f} | [{lo:+.3f}, {hi:+.3f}] |")
    return lines + [""]


def write_report(data: dict, p: Plan, out: Path = RESULTS) -> int:
    """Rewrite `out`'s results section from the record; 0."""
    from experiments.pages import read_page, replace_section, write_page

    runs = runs_of(data)
    entries = {id(r): e for r, e in zip(runs, data["runs"])}
    conf = by_arm(runs)
    old_data = depth.load()
    old = rep.confirmation(depth.runs_of(old_data), depth.plan(old_data).budget)
    lines = [BEGIN, "", f"State: {len(runs)} runs recorded ({sum(len(v) for v in conf.values())} of {len(ARMS) * len(SEEDS)} "
             f"confirmation runs); plan phase `{p.phase}`. Rebuilt by `python -m experiments.dat_plain_switch report` at "
             f"commit `{rep.head_commit()}` from [{DATA.name}]({DATA.name}); every number is a final evaluation "
             "(256 sequences per length).", ""]
    lines += [f"- {n}" for n in p.notes] + ([""] if p.notes else [])
    lines += exploration_section(runs, entries)
    if conf:
        lines += ["### Every confirmation run (seeds 5301-5315, evaluation seed 20261128)", ""]
        lines += run_rows([(r, entries[id(r)]) for arm in conf for r in sorted(conf[arm].values(), key=lambda r: r.seed)],
                          CONFIRM_COLS)
        lines += ["In-range check: " + "; ".join(f"{arm} {rep.in_range_verdict(list(v.values()))}" for arm, v in conf.items()), ""]
        lines += shape_section(conf, "### The cliff by its shape (registered)", "Abruptness per arm over the confirmation seeds.")
        lines += paired_section(conf) + beside_section(conf)
    lines += shape_section(old, "### The paper-depth confirmation's curves by the same measure (post hoc)",
                           "A re-analysis of [dat_paper_depth.md](dat_paper_depth.md)'s confirmation runs (seeds "
                           "5101-5115): the measure was written after those curves had been seen, so this is descriptive.")
    lines += [END]
    write_page(out, replace_section(read_page(out), BEGIN, END, "\n".join(lines)))
    print(f"dat_plain_switch: {out} rebuilt ({len(runs)} runs)")
    return 0
