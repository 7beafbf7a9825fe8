"""Progressive ASHA (PASHA): ASHA whose maximum resource grows only while the top rungs disagree.

Bohdal et al., "PASHA: Efficient HPO and NAS with Progressive Resource Allocation" (ICLR 2023),
as Syne Tune's PASHA rung system decides it, on the stopping variant of ASHA this project runs
(sweeper/stopping.py; a paused trial is not resumed later):

    levels       ASHA's milestones, lowest first, then max_t
    current max  starts at the second level; a trial that reaches it is paused there
    growth       after every report, the trials with a value at both the current max level and
                 the level below are ranked at each; if one of them at the top level's rank i is
                 not within `epsilon` of the value ranked i at the level below (soft ranking), the
                 current max moves one level up, to max_t at most

A sweep picks its best trial among those that trained furthest (sweeper/replay.py's incumbent).
The current max is a study attribute of the ledger. For replays: a real sweep's scheduler does not
offer it (a paused trial would wait for a resume that never comes).
"""

from __future__ import annotations

from typing import Any

from sweeper.stopping import RungStopper, stopper_for

CURRENT_MAX = "pasha.max_t"  # the study attribute holding the current max level
PAUSED_AT = "paused_at"  # a trial attribute: paused at the current max level (not stopped by a rung)


class ProgressiveStopper(RungStopper):
    """RungStopper's rule with PASHA's growing maximum resource; `epsilon`: soft ranking's band."""

    def __init__(self, *args: Any, epsilon: float = 0.01, **kwargs: Any):
        super().__init__(*args, **kwargs)
        levels = sorted(self.rungs)
        self.levels = tuple(levels + [self.max_t] if not levels or levels[-1] < self.max_t else levels)
        self.epsilon = epsilon

    def current_max(self) -> int:
        return int(self.ledger.attr(CURRENT_MAX, self.levels[min(1, len(self.levels) - 1)]))

    def on_report(self, number: int, report: dict[str, Any]) -> bool:
        stopped = super().on_report(number, report)
        top = self.current_max()
        if top < self.max_t and self.disagree(top):  # after every report, the stopping one too
            top = self.levels[self.levels.index(top) + 1]
            self.ledger.set_attr(CURRENT_MAX, top)
        if stopped:
            return True
        step = report.get("step")
        if isinstance(step, (int, float)) and top <= step < self.max_t:
            self.ledger.set_trial_attr(number, PAUSED_AT, int(step))
            return True
        return False

    def disagree(self, top: int) -> bool:
        """Whether the trials recorded at both `top` and the level below rank differently there."""
        below = self.levels[self.levels.index(top) - 1]
        pairs = [(r[top], r[below]) for r in (t.rungs() for t in self.ledger.trials.values()) if top in r and below in r]
        return soft_ranks_differ([a for a, _ in pairs], [b for _, b in pairs], self.mode, self.epsilon)


def soft_ranks_differ(upper: list[float], lower: list[float], mode: str, epsilon: float) -> bool:
    """Trials i with values upper[i] (top level) and lower[i] (the level below): True when the
    trial at rank k of `upper` is not within `epsilon` of the value at rank k of `lower`, i.e.
    outside the group of trials soft ranking treats as tied with rank k there."""
    sign = 1.0 if mode == "max" else -1.0
    by_upper = sorted(range(len(upper)), key=lambda i: -sign * upper[i])
    lower_sorted = sorted(lower, key=lambda v: -sign * v)
    return any(abs(lower[i] - lower_sorted[k]) > epsilon for k, i in enumerate(by_upper))


def progressive_for(spec, ledger) -> ProgressiveStopper:
    """PASHA on the early stopping `stopper_for` gives a validated space with ASHA (its phases too)."""
    base = stopper_for(spec, ledger)
    grace_period, max_t = spec.asha_limits()
    return ProgressiveStopper(ledger, spec.metric, spec.mode, grace_period, max_t, spec.scheduler.reduction_factor,
                              spec.budget.max_steps, base.phase_of, base.margin, base.pre_metric, base.pre_mode)
