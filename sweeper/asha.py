"""Asynchronous successive halving (ASHA), as a rule over recorded values: no framework in it.

The sweep's scheduler (`sweeper/adapters/ray_search.py`) keeps the values in the ledger and asks
`judge` at every report; a replay of recorded learning curves can ask the same function. The rule
is Ray Tune's `ASHAScheduler` with one bracket, step for step:

    milestones   grace x eta^k for k < int(log(max_t / grace) / log(eta) + 1), highest first
    a report     at step s with value v: the highest milestone m <= s the trial was not judged at
                 is judged now: the trial stops if v is worse than the (1 - 1/eta) quantile of
                 the values recorded at m before it (none recorded: it goes on); v is recorded at m.

Phase-aware (`not_before`): a trial is judged only at milestones at or after the step its last
training phase began plus a margin (trainables/phases.py: a DAT trial's switch, the end of its
curriculum); it passes every milestone before that unjudged and leaves no value there. So a rung
holds only values of trials in their last phase, and a trial is compared only with those. A trial
whose phase change is not known yet (an adaptive switch still to come) is not judged. With
`not_before` 0 this is the rule above.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping

import numpy as np


def milestones(grace_period: int, max_t: int, reduction_factor: float) -> tuple[int, ...]:
    """The steps ASHA judges at, highest first (numpy's log, as Ray counts them)."""
    n = int(np.log(max_t / grace_period) / np.log(reduction_factor) + 1)
    return tuple(sorted({math.ceil(grace_period * reduction_factor**k) for k in range(max(n, 0))}, reverse=True))


def cutoff(recorded: Iterable[float], reduction_factor: float, mode: str) -> float | None:
    """The value a trial must reach at a rung to go on; None when nothing is recorded there."""
    signed = [v if mode == "max" else -v for v in recorded]
    if not signed:
        return None
    q = float(np.nanpercentile(signed, (1 - 1 / reduction_factor) * 100))
    return q if mode == "max" else -q


def judge(step: int, value: float, judged: Iterable[int], recorded: Mapping[int, Iterable[float]],
          rungs: tuple[int, ...], reduction_factor: float, mode: str,
          not_before: int | None = 0) -> tuple[int | None, bool]:
    """(the milestone this report is judged at or None, whether the trial stops there).

    `judged`: the milestones this trial was judged at before; `recorded[m]`: the values other
    trials left at milestone m; `rungs`: `milestones(...)`, highest first; `not_before`: the
    first step the trial may be judged at (None: not yet known, so not now)."""
    if not_before is None:
        return None, False
    done = set(judged)
    for m in rungs:
        if step < m or m in done or m < not_before:
            continue
        bar = cutoff(recorded.get(m, ()), reduction_factor, mode)
        worse = bar is not None and (value < bar if mode == "max" else value > bar)
        return m, worse
    return None, False
