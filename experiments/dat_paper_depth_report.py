"""The results of docs/results/dat_paper_depth.md, rebuilt from the record alone.

`report(data, plan)` rewrites the page's results section (between its markers) and writes one
picture per metric beside it; every number comes from dat_paper_depth_runs.json.gz. What has
not finished shows as pending: tables say how many seeds each arm has, a claim is judged only
when all its seeds are in.
"""

from __future__ import annotations

import math
import subprocess
from pathlib import Path
from statistics import mean, stdev

from experiments.dat_paper_depth import (ARMS, BEGIN, CURVE_POINTS, END, EVAL_SEED, EXPLORE_SEEDS, JOINT_CURRICULUM, MAX_LEN,
                                         MULTIPLIERS, OFF, RESULTS, ROOT, SEEDS, TRANSFORMER, TRANSFORMER_CANDIDATES, Plan, Run, candidate_of,
                                         converged_at, in_range_misses, runs_of, transformer_candidates_tried)
from experiments.pages import figure_bytes, read_page, replace_section, write_page
from trainables.metrics import CURVE
PAIRS = (("DAT", "joint"), ("DAT + curriculum", "joint"), ("DAT + curriculum", "DAT"),
         ("DAT + curriculum", JOINT_CURRICULUM), (JOINT_CURRICULUM, "joint"))  # the last two: the addendum's
PAIRED_METRICS = ("ood_acc_3x", "last_acc_3x", "seq_acc_3x")
PICTURES = {  # file suffix -> (title, metric family per length, or the position curve)
    "curve": "accuracy against the position in the sequence (100-step set)",
    "acc": "acc_{k}x: every target",
    "ood_acc": "ood_acc_{k}x: the targets beyond the training range",
    "last_acc": "last_acc_{k}x: each sequence's last target",
    "seq_acc": "seq_acc_{k}x: every target of a sequence right",
}


def t975(df: int) -> float:
    from scipy import stats

    return float(stats.t.ppf(0.975, df))


def detectable_gap(sd: float, n: int) -> float:
    """The smallest paired gap n seeds detect with 80% power (two-sided 5%), for paired spread sd."""
    from scipy import stats

    return (t975(n - 1) + float(stats.t.ppf(0.80, n - 1))) * sd / math.sqrt(n)


def interval(xs: list[float]) -> tuple[float, float, float]:
    """(mean, low, high) of the 95% t interval; infinite ends for fewer than 2 values."""
    m = mean(xs)
    if len(xs) < 2:
        return m, -math.inf, math.inf
    half = t975(len(xs) - 1) * stdev(xs) / math.sqrt(len(xs))
    return m, m - half, m + half


def cliff(final: dict) -> float:
    """Mean curve accuracy over steps 1-25 minus that over steps 51-75."""
    def band(lo, hi):
        return mean(final[k] for k in CURVE_POINTS if lo < int(k[len(CURVE):]) <= hi)
    return band(0, MAX_LEN) - band(2 * MAX_LEN, 3 * MAX_LEN)


def metric(run: Run, name: str) -> float:
    return cliff(run.final) if name == "cliff" else float(run.final[name])


def confirmation(runs: list[Run], budget: int, seeds: tuple[int, ...] | None = None) -> dict[str, dict[int, Run]]:
    """arm -> seed -> run, on the confirmation seeds at `budget` (a later arm only once it has one)."""
    seeds = SEEDS if seeds is None else seeds
    out: dict[str, dict[int, Run]] = {arm: {} for arm in (*ARMS, JOINT_CURRICULUM, TRANSFORMER)}
    for r in runs:
        if r.budget == budget and r.seed in seeds and r.arm in out:
            out[r.arm][r.seed] = r
    for later in (JOINT_CURRICULUM, TRANSFORMER):
        if not out[later]:
            del out[later]  # shown only once it has a run on the confirmation seeds
    return out


def _cell(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{mean(xs):.3f}" + (f" ({min(xs):.3f}-{max(xs):.3f})" if len(xs) > 1 else "")


# --------------------------------------------------------------------------- sections


def exploration_section(runs: list[Run], plan: Plan, seeds: tuple[int, ...] | None = None) -> list[str]:
    seeds = EXPLORE_SEEDS if seeds is None else seeds
    explored = sorted((r for r in runs if r.seed in seeds and r.arm != TRANSFORMER), key=lambda r: (r.budget, r.arm, r.seed))
    lines = [f"### Exploration (seeds {' and '.join(map(str, seeds))}): what the rules chose", ""]
    lines += [f"- {note}" for note in plan.notes] or ["- no rule applied yet"]
    lines += ["", "| budget | arm | seed | `acc_1x` | `state_acc_1x` | `recall_acc_1x` | `ood_acc_3x` | in-range check | state converged (best) |",
              "|---|---|---|---|---|---|---|---|---|"]
    for r in explored:
        f = r.final
        misses = in_range_misses(f)
        check = "-" if r.arm == OFF else ("pass" if not misses else "**fail**: " + ", ".join(misses))
        conv = "step {} ({:.3f})".format(*converged_at(r.reports)) if r.arm == OFF else "-"
        lines.append(f"| {r.budget} | {r.arm} | {r.seed} | {f['acc_1x']:.3f} | {f['state_acc_1x']:.3f} | "
                     f"{f['recall_acc_1x']:.3f} | {f['ood_acc_3x']:.3f} | {check} | {conv} |")
    return lines + [""]


def transformer_section(runs: list[Run], budget: int) -> list[str]:
    tried = transformer_candidates_tried(runs, budget)
    if not tried:
        return []
    lines = ["### The pure Transformer's candidates (exploration seed 0)", "",
             f"{len(tried)} of {len(TRANSFORMER_CANDIDATES)} trained, in the selection rule's order (`recall_acc_1x`, "
             "then `acc_1x`, then the earlier candidate): the first row "
             + ("is the rule's pick." if len(tried) == len(TRANSFORMER_CANDIDATES) else "leads so far."), "",
             "| n_layers | positional | lr | `recall_acc_1x` | `state_acc_1x` | `acc_1x` | `ood_state_acc_3x` | `ood_acc_3x` |",
             "|---|---|---|---|---|---|---|---|"]
    for r in tried:
        f = r.final
        n, pos, lr = candidate_of(r.params)
        lines.append(f"| {n} | {pos} | {lr:g} | {f['recall_acc_1x']:.3f} | {f['state_acc_1x']:.3f} | {f['acc_1x']:.3f} | "
                     f"{f['ood_state_acc_3x']:.3f} | {f['ood_acc_3x']:.3f} |")
    return lines + [""]


def arms_section(conf: dict[str, dict[int, Run]], base: dict) -> list[str]:
    cols = ["acc_1x", "recall_acc_1x", "acc_3x", "ood_acc_3x", "ood_state_acc_3x", "ood_recall_acc_3x", "last_acc_3x",
            "seq_acc_3x", "cliff"]
    lines = ["### The arms (confirmation seeds): mean (min-max) at the final step", "",
             "| arm | n | in-range check | " + " | ".join(f"`{c}`" for c in cols) + " |", "|---|---|---|" + "---|" * len(cols)]
    for arm, by_seed in conf.items():
        rs = list(by_seed.values())
        lines.append(f"| {arm} | {len(rs)} | {in_range_verdict(rs)} | "
                     + " | ".join(_cell([metric(r, c) for r in rs]) for c in cols) + " |")
    for name, label in (("chance", "chance"), ("recency", "recency baseline")):
        lines.append(f"| *{label}* | - | - | " + " | ".join(f"{base[name][c]:.3f}" if c in base[name] else "-" for c in cols) + " |")
    return lines + ["", "`cliff`: mean accuracy over steps 1-25 minus over steps 51-75 (the position curve).", ""]


def in_range_verdict(rs: list[Run]) -> str:
    if not rs:
        return "-"
    passing = sum(not in_range_misses(r.final) for r in rs)
    means = {m: mean(r.final[m] for r in rs) for m in ("acc_1x", "recall_acc_1x")}
    ok = not in_range_misses(means)
    return f"{'pass' if ok else '**undertrained**'} ({passing} of {len(rs)} seeds pass)"


def arm_passes(rs: list[Run]) -> bool:
    return bool(rs) and not in_range_misses({m: mean(r.final[m] for r in rs) for m in ("acc_1x", "recall_acc_1x")})


def per_seed_section(conf: dict[str, dict[int, Run]]) -> list[str]:
    cols = ["acc_1x", "recall_acc_1x", *(f"ood_acc_{k}x" for k in MULTIPLIERS[1:]), "ood_state_acc_3x", "ood_recall_acc_3x",
            "last_acc_3x", "seq_acc_1x", "seq_acc_3x", "cliff"]
    lines = ["### Every confirmation run", "", "| arm | seed | " + " | ".join(f"`{c}`" for c in cols)
             + " | wall (s) | trained on |", "|---|---|" + "---|" * (len(cols) + 2)]
    for arm, by_seed in conf.items():
        for seed, r in sorted(by_seed.items()):
            wall = training_seconds(r)
            wall_cell = f"{wall:.0f}" if wall is not None else "-"
            lines.append(f"| {arm} | {seed} | " + " | ".join(f"{metric(r, c):.3f}" for c in cols)
                         + f" | {wall_cell} | {r.trained_on} |")
    return lines + ["", "wall (s): the run's training time, evaluations included, summed over its report intervals "
                        "(steps in the interval / `steps_per_s`); time spent paused between sessions is not in it. "
                        "trained on: CPU is the sweep service on this project's 2-core machine (torch 2.13.0, one "
                        "thread and two runs at a time); other rows trained on a lent GPU machine through "
                        "`python -m experiments.device_runs` (its accelerator and torch named), the same trial "
                        "config but for `device`; a seed's runs of one phase always train on one machine. "
                        + mixed_machines(conf), ""]


def mixed_machines(conf: dict[str, dict[int, Run]]) -> str:
    """Which seeds' paired runs trained on more than one machine (a nuisance, not a bias, as long
    as no arm trains mostly on one machine), as a sentence."""
    where: dict[int, dict[str, str]] = {}
    for arm, by_seed in conf.items():
        for seed, r in by_seed.items():
            where.setdefault(seed, {})[arm] = r.trained_on
    mixed = {s: arms for s, arms in sorted(where.items()) if len(set(arms.values())) > 1}
    if not mixed:
        return "Every seed's runs trained on one machine, so each paired gap compares runs of one machine."
    return "Seeds whose runs trained on more than one machine: " + "; ".join(
        f"{s} (" + ", ".join(f"{arm} on {m}" for arm, m in arms.items()) + ")" for s, arms in mixed.items()) + "."


def training_seconds(r: Run) -> float | None:
    """Seconds the run spent training: each interval's steps over its measured rate, summed."""
    total, previous = 0.0, 0
    for report in r.reports:
        if not report.get("steps_per_s"):
            return None
        total += (report["step"] - previous) / report["steps_per_s"]
        previous = report["step"]
    return total


def gaps(conf: dict[str, dict[int, Run]], a: str, b: str, name: str) -> dict[int, float]:
    xs, ys = conf.get(a, {}), conf.get(b, {})
    return {s: metric(xs[s], name) - metric(ys[s], name) for s in sorted(xs.keys() & ys.keys())}


def wording(a: str, b: str, m: float, lo: float, hi: float) -> str:
    if lo > 0:
        return f"{a} beats {b} by {m:+.3f} [{lo:+.3f}, {hi:+.3f}]"
    if hi < 0:
        return f"{b} beats {a} by {-m:.3f} [{-hi:.3f}, {-lo:.3f}]"
    return f"no difference detected: rules out a benefit of {a} larger than {hi:+.3f} and a loss larger than {-lo:.3f}"


def paired_section(conf: dict[str, dict[int, Run]], pairs: tuple = PAIRS, n_seeds: int | None = None) -> list[str]:
    n_seeds = len(SEEDS) if n_seeds is None else n_seeds
    lines = ["### Paired comparisons (by training seed)", "",
             "| comparison | metric | n | per seed | mean | 95% interval | sd | detectable gap | reading |", "|---|---|---|---|---|---|---|---|---|"]
    for a, b in pairs:
        for name in PAIRED_METRICS:
            g = gaps(conf, a, b, name)
            if not g:
                lines.append(f"| {a} - {b} | `{name}` | 0 | - | - | - | - | - | pending |")
                continue
            m, lo, hi = interval(list(g.values()))
            sd = stdev(g.values()) if len(g) > 1 else math.nan
            mde = detectable_gap(sd, len(g)) if len(g) > 1 else math.nan
            reading = wording(a, b, m, lo, hi) if len(g) == n_seeds else f"pending ({len(g)} of {n_seeds} seeds)"
            lines.append(f"| {a} - {b} | `{name}` | {len(g)} | " + ", ".join(f"{s}: {v:+.3f}" for s, v in g.items())
                         + f" | {m:+.3f} | [{lo:+.3f}, {hi:+.3f}] | {sd:.3f} | {mde:.3f} | {reading} |")
    return lines + ["", "The detectable gap: `(t_0.975 + t_0.80) x sd / sqrt(n)`, the smallest paired gap these seeds "
                    "detect with 80% power at two-sided 5%, for the observed spread.", ""]


def claims_section(conf: dict[str, dict[int, Run]]) -> list[str]:
    complete = all(len(conf[arm]) == len(SEEDS) for arm in ("joint", "DAT"))
    dat, joint = list(conf["DAT"].values()), list(conf["joint"].values())

    def verdict(ok: bool) -> str:
        return ("pass" if ok else "**fail**") if complete else "pending"

    lines = ["### The paper's claims, as pre-registered", "", "| # | claim | verdict | measured |", "|---|---|---|---|"]
    if not dat or not joint:
        return lines + ["| P1-P3 | - | pending | no confirmation run of both arms yet |", ""]
    acc3 = mean(r.final["acc_3x"] for r in dat)
    lines.append(f"| P1 | DAT generalises to 3x (in range, mean `acc_3x` >= 0.90) | {verdict(arm_passes(dat) and acc3 >= 0.90)} | "
                 f"DAT in range: {in_range_verdict(dat)}; `acc_3x` {acc3:.3f} (n={len(dat)}) |")
    c = mean(cliff(r.final) for r in joint)
    lines.append(f"| P2 | joint falls off a cliff (in range, cliff >= 0.20) | {verdict(arm_passes(joint) and c >= 0.20)} | "
                 f"joint in range: {in_range_verdict(joint)}; cliff {c:.3f} (n={len(joint)}) |")
    g = gaps(conf, "DAT", "joint", "ood_acc_3x")
    m, lo, hi = interval(list(g.values())) if g else (math.nan, -math.inf, math.inf)
    lines.append(f"| P3 | DAT beats joint beyond the range (both in range, interval above 0) | "
                 f"{verdict(arm_passes(dat) and arm_passes(joint) and lo > 0)} | `ood_acc_3x` DAT - joint {m:+.3f} [{lo:+.3f}, {hi:+.3f}] (n={len(g)}) |")
    return lines + [""]


def recommended_arm(conf: dict[str, dict[int, Run]]) -> tuple[str | None, str]:
    """The pre-registered rule: DAT + curriculum if it passes the in-range check and beats plain DAT
    on `ood_acc_3x` with the paired interval above 0, else plain DAT; None until every seed is paired.
    Returns the arm and the sentence that says why."""
    g = gaps(conf, "DAT + curriculum", "DAT", "ood_acc_3x")
    if len(g) < len(SEEDS):
        return None, f"pending ({len(g)} of {len(SEEDS)} paired seeds); `hybrid_dat` stays plain DAT until then"
    m, lo, hi = interval(list(g.values()))
    if lo > 0 and arm_passes(list(conf["DAT + curriculum"].values())):
        return "DAT + curriculum", f"DAT + curriculum (beats plain DAT by {m:+.3f} [{lo:+.3f}, {hi:+.3f}] and passes the in-range check)"
    return "DAT", (f"plain DAT (DAT + curriculum - DAT {m:+.3f} [{lo:+.3f}, {hi:+.3f}]; "
                   "the rule asks an interval above 0 and the in-range check)")


def preset_section(conf: dict[str, dict[int, Run]]) -> list[str]:
    arm, why = recommended_arm(conf)
    tail = " `python -m experiments.dat_paper_depth preset` writes it as `hybrid_dat_paper`." if arm else ""
    return [f"**The recommended DAT arm:** {why}.{tail}", ""]


def at_switch(run: Run, switch: int) -> dict | None:
    """The run's last evaluation before `switch` (attention still off in a DAT arm), if any."""
    before = [r for r in run.reports if r["step"] < switch]
    return before[-1] if before else None


def premise_section(conf: dict[str, dict[int, Run]], switch: int,
                    heading: str = "Descriptive, not pre-registered: the recurrent path when attention came on") -> list[str]:
    """The recurrent path's state tracking when attention came on, beside the outcome."""
    rows, pairs, pres = [], [], []
    for arm in ARMS:
        for seed, r in sorted(conf[arm].items()):
            pre = at_switch(r, switch)
            if pre is None:
                continue
            pres.append(pre)
            rows.append(f"| {arm} | {seed} | {pre['state_acc_1x']:.3f} | {pre['ood_state_acc_3x']:.3f} | "
                        f"{r.final['ood_state_acc_3x']:.3f} | {r.final['ood_acc_3x']:.3f} |")
            if arm == "DAT":
                pairs.append((pre["ood_state_acc_3x"], r.final["ood_acc_3x"]))
    if not rows:
        return []
    steps = "/".join(str(x) for x in sorted({pre["step"] for pre in pres}))
    sizes = "/".join(str(x) for x in sorted({int(pre.get("eval_sequences", 0)) for pre in pres}))
    lines = [f"### {heading}", "",
             f"At the last evaluation before the switch (step {steps}, {sizes} sequences per "
             "length, attention still off in both DAT arms; joint, at the same step, trains attention from step 0): "
             "the in-range state accuracy, which the switch rule reads, and the state accuracy beyond the range at 3x, "
             "which it does not. Beside them, each run's final numbers.", "",
             "| arm | seed | `state_acc_1x` at the switch | `ood_state_acc_3x` at the switch | final `ood_state_acc_3x` | final `ood_acc_3x` |",
             "|---|---|---|---|---|---|", *rows, ""]
    if len(pairs) >= 3 and len({x for x, _ in pairs}) > 1 and len({y for _, y in pairs}) > 1:
        from scipy import stats

        r, _ = stats.pearsonr(*zip(*pairs))
        lines += [f"Plain DAT: across its {len(pairs)} runs, the correlation of `ood_state_acc_3x` at the switch with the "
                  f"final `ood_acc_3x` is r = {r:+.2f} (Pearson; a description of these runs, not a test).", ""]
    return lines


# --------------------------------------------------------------------------- pictures


def pictures(conf: dict[str, dict[int, Run]], base: dict, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from core.files import check_output

    for suffix in PICTURES:  # every picture's place first: a link at the last would leave the first written
        check_output(out.with_name(f"{out.stem}_{suffix}.png"), "the picture")
    written = []
    for suffix, title in PICTURES.items():
        fig, ax = plt.subplots(figsize=(6.4, 4.2))
        for i, (arm, by_seed) in enumerate(conf.items()):
            rs = list(by_seed.values())
            if not rs:
                continue
            if suffix == "curve":
                names = list(CURVE_POINTS)
                xs = [int(k[len(CURVE):]) for k in names]
            else:
                names = [f"{suffix}_{k}x" for k in MULTIPLIERS if all(f"{suffix}_{k}x" in r.final for r in rs)]
                xs = [int(n.rsplit("_", 1)[1][:-1]) * MAX_LEN for n in names]
            ys = [[r.final[n] for r in rs] for n in names]
            ax.plot(xs, [mean(v) for v in ys], marker="o", ms=3, color=f"C{i}", label=f"{arm} (n={len(rs)})")
            ax.fill_between(xs, [min(v) for v in ys], [max(v) for v in ys], color=f"C{i}", alpha=0.15)
        if suffix != "curve":
            for name, style in (("recency", ":"), ("chance", "--")):
                pts = [(k * MAX_LEN, base[name][f"{suffix}_{k}x"]) for k in MULTIPLIERS if f"{suffix}_{k}x" in base[name]]
                if pts:
                    ax.plot(*zip(*pts), style, color="grey", label=name)
        ax.axvline(MAX_LEN, color="black", lw=0.8, alpha=0.5)
        ax.set_xlabel("step in the sequence" if suffix == "curve" else "evaluation length (steps)")
        ax.set_ylabel("accuracy")
        ax.set_ylim(0, 1.02)
        ax.set_title(title, fontsize=10)
        ax.grid(alpha=0.3)
        if ax.has_data():
            ax.legend(fontsize=7)
        fig.tight_layout()
        path = out.with_name(f"{out.stem}_{suffix}.png")
        write_page(path, figure_bytes(fig, dpi=100))
        plt.close(fig)
        written.append(path)
    return written


# --------------------------------------------------------------------------- the page


def head_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, check=True,
                              cwd=ROOT).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def baselines(eval_seed: int | None = None) -> dict[str, dict[str, float]]:
    from trainables.baselines import baseline_table
    from trainables.config import TaskConfig

    return baseline_table(TaskConfig(), MULTIPLIERS, 256, EVAL_SEED if eval_seed is None else eval_seed)


def report(data: dict, plan: Plan, out: Path = RESULTS) -> str:
    """Rewrite `out`'s results section and its pictures; DamagedSection (nothing written) if its
    markers are damaged."""
    replace_section(read_page(out), BEGIN, END, "")
    runs = runs_of(data)
    base = baselines()
    conf = confirmation(runs, plan.budget)
    n_conf = sum(len(conf[arm]) for arm in ARMS)
    lines = [BEGIN, "",
             f"State: {len(runs)} runs recorded ({n_conf} of {len(ARMS) * len(SEEDS)} confirmation runs); plan phase "
             f"`{plan.phase}`, budget {plan.budget} steps, switch step {plan.switch if plan.switch is not None else 'not set yet (its exploration runs first)'}. Rebuilt by "
             f"`python -m experiments.dat_paper_depth report` at commit `{head_commit()}` from "
             "[dat_paper_depth_runs.json.gz](dat_paper_depth_runs.json.gz); every number is a final evaluation "
             f"(256 sequences per length, evaluation seed {EVAL_SEED}).", ""]
    lines += exploration_section(runs, plan) + transformer_section(runs, plan.budget)
    if n_conf:
        lines += arms_section(conf, base) + paired_section(conf) + claims_section(conf) + preset_section(conf)
        lines += [f"![{PICTURES[s]}]({out.stem}_{s}.png)" for s in PICTURES] + [""]
        lines += per_seed_section(conf) + premise_section(conf, plan.switch)
        pictures(conf, base, out)
    else:
        lines += ["No confirmation run has finished yet.", ""]
    lines.append(END)
    section = "\n".join(lines)
    write_page(out, replace_section(read_page(out), BEGIN, END, section))
    return section

