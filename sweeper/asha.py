"""Asynchronous successive halving (ASHA), as a rule over recorded values: no framework in it.

The sweep's scheduler (`sweeper/adapters/ray_search.py`) keeps the values in the ledger and asks
`judge` at every report; a replay of recorded learning curves can ask the same function. The rule
is Ray Tune's `ASHAScheduler` with one bracket, step for step:

    milestones   grace x eta^k for k < int(log(max_t / grace) / log(eta) + 1), highest first
    a report     at step s with value v: the highest milestone m <= s the trial was not judged at
                 is judged now: the trial stops if v is worse than the (1 - 1/eta) quantile of
                 the values recorded at m before it (none recorded: it goes on); v is recorded at m.
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
          rungs: tuple[int, ...], reduction_factor: float, mode: str) -> tuple[int | None, bool]:
    """(the milestone this report is judged at or None, whether the trial stops there).

    `judged`: the milestones this trial was judged at before; `recorded[m]`: the values other
    trials left at milestone m; `rungs`: `milestones(...)`, highest first."""
    done = set(judged)
    for m in rungs:
        if step < m or m in done:
            continue
        bar = cutoff(recorded.get(m, ()), reduction_factor, mode)
        worse = bar is not None and (value < bar if mode == "max" else value > bar)
        return m, worse
    return None, False
