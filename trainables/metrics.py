"""The names of the metrics a trial reports, derived from its config (no torch).

A sweep is scored by one of these names, so `sweeper validate` checks the `metric` of a
search space against this list before anything runs; tests/test_metrics.py checks it
against what a real training run reports. Each evaluation metric exists once per length
multiplier k (`acc_3x`); with `ema.decay > 0` the live weights' metrics come again as
`raw_acc_3x` and so on. The sequence tasks also report, for every k > 1, the accuracies over
the targets beyond the training range only (`ood_acc_3x`, `ood_state_acc_3x`, ...); at k = 1
nothing lies beyond it, so there is no `ood_*_1x` (trainables/evaluate.py). With
`eval.curve_window` they report the points of the accuracy-against-position curve as well
(`curve_acc_s025`: no length suffix, no direction).
"""

from __future__ import annotations

from typing import Literal

# every report of the loop (trainables/train.py)
LOOP_METRICS = ("step", "loss", "train_acc", "attention_active", "attn_scale", "switch_step", "lr",
                "steps_per_s", "diverged", "eval_sequences")

# evaluation metric families per task, each reported as `{family}_{k}x`
TASK_FAMILIES: dict[str, tuple[str, ...]] = {
    "modsum_recall": ("acc", "state_acc", "recall_acc", "seq_acc", "last_acc", "ood_acc", "ood_state_acc", "ood_recall_acc"),
    "modsum": ("acc", "state_acc", "seq_acc", "last_acc", "ood_acc", "ood_state_acc"),
    "recall": ("acc", "recall_acc", "seq_acc", "last_acc", "ood_acc", "ood_recall_acc"),
    "set_complement": ("acc", "seen_mass", "tv", "loss"),
    "othello": ("acc", "tv", "illegal_mass", "loss"),
}
# families over the targets beyond task.max_len: reported for k > 1 only
BEYOND_RANGE_FAMILIES = frozenset({"ood_acc", "ood_state_acc", "ood_recall_acc"})

# families where lower is better; every other evaluation family is an accuracy (higher is better)
LOWER_IS_BETTER = frozenset({"loss", "tv", "seen_mass", "illegal_mass"})
# loop metrics with a direction a sweep could sensibly optimise
LOOP_DIRECTIONS = {"loss": "min", "train_acc": "max"}


CURVE = "curve_acc_s"  # prefix of the accuracy-against-position curve's points


def curve_names(max_len: int, multipliers: tuple[int, ...], window: int) -> list[str]:
    """The names of the position curve's points, on the longest set (none without a window)."""
    steps = max(multipliers) * max_len
    return [f"{CURVE}{e:03d}" for e in range(window, steps + window, window)] if window else []


def length_families(cfg) -> tuple[str, ...]:
    return TASK_FAMILIES[cfg.task.name]


def reported_metrics(cfg) -> frozenset[str]:
    """Every metric name a run of `cfg` reports at each evaluation."""
    names = {f"{fam}_{k}x" for fam in length_families(cfg) for k in cfg.eval.multipliers
             if k > 1 or fam not in BEYOND_RANGE_FAMILIES}
    names |= set(curve_names(cfg.task.max_len, cfg.eval.multipliers, cfg.eval.curve_window))
    if cfg.ema.decay > 0:
        names |= {f"raw_{n}" for n in names}
    return frozenset(names | set(LOOP_METRICS))


def family_of(metric: str) -> str:
    """`raw_tv_3x` -> `tv`; a loop metric is its own family."""
    name = metric.removeprefix("raw_")
    head, sep, tail = name.rpartition("_")
    return head if sep and tail.endswith("x") and tail[:-1].isdigit() else name


def direction(metric: str) -> Literal["max", "min"] | None:
    """Which way is better for `metric`; None when there is no sensible direction (lr, step...)."""
    if metric in LOOP_DIRECTIONS:
        return LOOP_DIRECTIONS[metric]  # type: ignore[return-value]
    family = family_of(metric)
    if family == metric.removeprefix("raw_"):  # not a per-length metric
        return None
    return "min" if family in LOWER_IS_BETTER else "max"
