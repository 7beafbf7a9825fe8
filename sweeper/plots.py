"""The pictures of a sweep, as PNG files (matplotlib, no display needed).

    trial_lengths      one trial: accuracy against evaluation length, with the state and recall halves
    metric_vs_params   the sweep: the score against each searched parameter, baselines marked
    top_lengths        the sweep: accuracy-vs-length curves of the best trials
    learning_curves    the sweep: the score over training steps for every trial (ASHA's stops visible)
    sweep_plots        the three sweep pictures at once, into the sweep's folder
"""

from __future__ import annotations

import io
from pathlib import Path
from typing import Callable, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from core.files import write_atomic  # noqa: E402
from sweeper.records import MULTIPLIERS, TrialRecord, length_family, ranked, score  # noqa: E402

HALVES = (("acc", "all targets", "-"), ("state_acc", "state (ADD)", "--"), ("recall_acc", "recall (QUERY)", ":"))


def _lengths(max_len: int) -> list[int]:
    return [k * max_len for k in MULTIPLIERS]


def _finish(fig, path: Path, layout: bool = True) -> Path:
    if layout:  # tight_layout draws the figure once more to measure it: ~half of a small plot's time
        fig.tight_layout()
    image = io.BytesIO()
    fig.savefig(image, dpi=100, format=Path(path).suffix.lstrip(".") or "png")
    plt.close(fig)
    write_atomic(path, image.getvalue())  # a link planted at its name is replaced, never written through
    return path


def trial_lengths(metrics: dict, max_len: int, title: str, path: Path) -> Path:
    """One per trial, drawn on the tracking thread of the driver: fixed margins (what tight_layout finds
    for these labels) rather than tight_layout, which draws it once more (113 -> 76 ms of CPU a plot)."""
    fig, ax = plt.subplots(figsize=(5.5, 3.6))
    fig.subplots_adjust(left=0.12, right=0.97, bottom=0.14, top=0.92)
    ax.axvspan(0, max_len, color="0.92", label="training lengths")
    for prefix, label, style in HALVES:
        ys = [metrics.get(f"{prefix}_{k}x") for k in MULTIPLIERS]
        if None not in ys:
            ax.plot(_lengths(max_len), ys, style, marker="o", label=label)
    ax.set(xlabel="evaluation length (steps)", ylabel="per-token accuracy", ylim=(0, 1.02), title=title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    return _finish(fig, path, layout=False)


def metric_vs_params(records: list[TrialRecord], metric: str, baselines: Sequence[dict], path: Path) -> Path | None:
    scored = [r for r in records if score(r, metric) is not None]
    names = sorted({k for r in scored for k in r.params})
    if not names:
        return None
    fig, axes = plt.subplots(1, len(names), figsize=(4.2 * len(names), 3.6), squeeze=False)
    for ax, name in zip(axes[0], names):
        rows = [r for r in scored if name in r.params]
        is_base = [any(all(r.params.get(k) == v for k, v in b.items()) for b in baselines) for r in rows]
        xs = [r.params[name] for r in rows]
        categorical = any(isinstance(x, (str, bool)) or x is None for x in xs)
        if categorical:
            cats = sorted({str(x) for x in xs})
            xs = [cats.index(str(x)) for x in xs]
            ax.set_xticks(range(len(cats)), cats)
        for flag, marker, label in ((False, "o", "trials"), (True, "*", "baseline / control")):
            pts = [(x, score(r, metric), r.status) for x, r, b in zip(xs, rows, is_base) if b == flag]
            if pts:
                ax.scatter([p[0] for p in pts], [p[1] for p in pts], marker=marker, s=120 if flag else 30,
                           c=["tab:red" if flag else ("0.6" if p[2] == "stopped" else "tab:blue") for p in pts], label=label)
        ax.set(xlabel=name, ylabel=metric, ylim=(0, 1.02))
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=8, loc="lower right", title="grey: stopped early", title_fontsize=7)
    return _finish(fig, path)


def top_lengths(records: list[TrialRecord], metric: str, mode: str, max_len: int, path: Path, top: int = 5) -> Path | None:
    best = ranked(records, metric, mode)[:top]
    if not best:
        return None
    family = length_family(metric)  # acc, or the family of the score (tv for set_complement)
    fig, ax = plt.subplots(figsize=(6, 3.8))
    ax.axvspan(0, max_len, color="0.92", label="training lengths")
    for r in best:
        # the lengths the family exists at (ood_acc: beyond the range, so from 2x on)
        points = [(x, y) for x, k in zip(_lengths(max_len), MULTIPLIERS) if (y := r.metrics.get(f"{family}_{k}x")) is not None]
        if points:
            ax.plot(*zip(*points), marker="o", label=f"{r.trial_id} ({score(r, metric):.3f})")
    ylabel = "per-token accuracy" if family == "acc" else family
    ax.set(xlabel="evaluation length", ylabel=ylabel, ylim=(0, 1.02), title=f"top {len(best)} trials by {metric}")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="lower left")
    return _finish(fig, path)


def learning_curves(histories: dict[str, list[tuple[int, float]]], statuses: dict[str, str], metric: str, path: Path) -> Path | None:
    if not histories:
        return None
    fig, ax = plt.subplots(figsize=(6, 3.8))
    for trial_id, points in histories.items():
        if not points:
            continue
        steps, values = zip(*sorted(points))
        stopped = statuses.get(trial_id) == "stopped"
        ax.plot(steps, values, color="0.6" if stopped else None, alpha=0.8, lw=1)
        if stopped:
            ax.plot(steps[-1], values[-1], "x", color="tab:red")
    ax.set(xlabel="training step", ylabel=metric, ylim=(0, 1.02), title=f"{metric} over training (x: stopped by ASHA)")
    ax.grid(alpha=0.3)
    return _finish(fig, path)


def sweep_plots(spec, sweep_dir: Path, records: list[TrialRecord], baselines: Sequence[dict],
                reports: Callable[[str], list[tuple[int, dict]]]) -> list[Path]:
    """The sweep's pictures in `sweep_dir`; `reports(trial_dir)` reads a trial's (step, metrics) from its folder."""
    from sweeper.space import trial_config_for

    max_len = trial_config_for(spec, records[0].params).task.max_len if records else 25
    histories = {r.trial_id: [(step, m[spec.metric]) for step, m in reports(r.path) if spec.metric in m] for r in records}
    out = [
        metric_vs_params(records, spec.metric, baselines, sweep_dir / f"{spec.metric}_vs_params.png"),
        top_lengths(records, spec.metric, spec.mode, max_len, sweep_dir / "top_trials_vs_length.png"),
        learning_curves(histories, {r.trial_id: r.status for r in records}, spec.metric, sweep_dir / "learning_curves.png"),
    ]
    return [p for p in out if p is not None]
