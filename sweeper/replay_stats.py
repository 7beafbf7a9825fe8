"""Statistics of search replays: speed-ups with bootstrap intervals, and paired comparisons.

A replay's cost is the compute it spent until its best-so-far point was good enough; a replay that
never got there costs infinite compute (`None` in, `inf` inside), so it counts against its method
in every median instead of being left out. A method's speed-up over a reference is the ratio of
the two medians (reference / method: above 1 is faster). Intervals are percentile bootstraps:

    speed-up   each method's replays resampled with replacement, independently of the other's
    paired     the replay seeds resampled with replacement (both methods ran every seed), and the
               median of the per-seed ratios taken

No framework in it: numpy only.
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

N_BOOT = 10_000
LEVEL = 0.95


def costs(values: Sequence[float | None]) -> np.ndarray:
    """Compute per replay as floats, `inf` for a replay that never reached the target."""
    return np.array([np.inf if v is None else float(v) for v in values], dtype=float)


def ratio(reference: np.ndarray, method: np.ndarray) -> np.ndarray:
    """reference / method elementwise: inf / inf is 1 (both never got there), x / inf is 0."""
    with np.errstate(divide="ignore", invalid="ignore"):
        out = np.asarray(reference, dtype=float) / np.asarray(method, dtype=float)
    both = np.isinf(reference) & np.isinf(method)
    return np.where(both, 1.0, out)


def speedup(reference: Sequence[float | None], method: Sequence[float | None]) -> float:
    """Ratio of the medians: reference's median compute / the method's."""
    return float(ratio(np.median(costs(reference)), np.median(costs(method))))


@dataclass(frozen=True)
class Interval:
    value: float
    low: float
    high: float


def percentile_interval(samples: np.ndarray, value: float) -> Interval:
    tail = (1 - LEVEL) / 2 * 100
    low, high = np.percentile(samples, [tail, 100 - tail], method="inverted_cdf")  # no interpolation: inf stays inf
    return Interval(float(value), float(low), float(high))


def speedup_interval(reference: Sequence[float | None], method: Sequence[float | None],
                     n_boot: int = N_BOOT, seed: int = 0) -> Interval:
    """The speed-up and its bootstrap interval: both lists of replays resampled independently."""
    ref, mine = costs(reference), costs(method)
    rng = np.random.default_rng(seed)
    ref_med = np.median(ref[rng.integers(0, len(ref), (n_boot, len(ref)))], axis=1)
    mine_med = np.median(mine[rng.integers(0, len(mine), (n_boot, len(mine)))], axis=1)
    return percentile_interval(ratio(ref_med, mine_med), speedup(reference, method))


@dataclass(frozen=True)
class Paired:
    """`method` against `baseline` on the same replay seeds: ratio = baseline / method per seed."""

    median_ratio: Interval
    wins: int  # seeds where the method needed less compute
    ties: int
    losses: int


def paired(baseline: Sequence[float | None], method: Sequence[float | None],
           n_boot: int = N_BOOT, seed: int = 0) -> Paired:
    """Per-seed ratios baseline / method (equal lists, index = replay seed), their median with a
    bootstrap interval over seeds, and how many seeds each side wins."""
    base, mine = costs(baseline), costs(method)
    if len(base) != len(mine):
        raise ValueError(f"paired replays need the same seeds, got {len(base)} and {len(mine)}")
    per_seed = ratio(base, mine)
    rng = np.random.default_rng(seed)
    boot = np.median(per_seed[rng.integers(0, len(per_seed), (n_boot, len(per_seed)))], axis=1)
    same = (base == mine)
    return Paired(percentile_interval(boot, float(np.median(per_seed))),
                  int(np.sum((mine < base) & ~same)), int(np.sum(same)), int(np.sum((mine > base) & ~same)))


def quartiles(xs: Sequence[float]) -> tuple[float, float, float]:
    """The quartiles (inclusive method); one value is its own three quartiles."""
    if len(xs) == 1:
        return xs[0], xs[0], xs[0]
    q1, q2, q3 = statistics.quantiles(xs, n=4, method="inclusive")
    return q1, q2, q3


@dataclass(frozen=True)
class Summary:
    """One method's replays (rows of `sweeper.replay.outcome`) against the reference's."""

    to_best: list[float | None]
    quartiles: tuple[float, float, float] | None  # of the replays that got there
    not_reached: int
    speedup: Interval
    top_trials: int  # trials at one of the top points
    top_stopped: int  # ... of them stopped early


def summarize(rows: Sequence[dict], reference: Sequence[float | None]) -> Summary:
    reach = [r["to_best"] for r in rows]
    reached = [x for x in reach if x is not None]
    return Summary(reach, quartiles(reached) if reached else None, len(reach) - len(reached),
                   speedup_interval(reference, reach), sum(r["top_trials"] for r in rows),
                   sum(r["top_stopped"] for r in rows))
