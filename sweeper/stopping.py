"""The sweep's early stopping: ASHA on the ledger's rungs, aware of each trial's training phase.

`RungStopper` is what the Ray Tune scheduler (sweeper/adapters/ray_search.py) and the search replay
(sweeper/replay.py) both ask at every report, so a replay stops the trials a sweep would stop. The
rule is sweeper/asha.py's; the values it compares live in the ledger (the Optuna study), so a
resumed sweep continues with the rungs the killed one left.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sweeper import asha

# (trial number, its report) -> the first step of the trial's last training phase, None while unknown
PhaseOf = Callable[[int, dict], "int | None"]


def no_phases(number: int, report: dict) -> int:
    return 0


class RungStopper:
    def __init__(self, ledger, metric: str, mode: str, grace_period: int, max_t: int, reduction_factor: float,
                 max_steps: int, phase_of: PhaseOf = no_phases, margin: int = 0):
        self.ledger, self.metric, self.mode = ledger, metric, mode
        self.reduction_factor, self.max_t, self.max_steps = reduction_factor, max_t, max_steps
        self.rungs = asha.milestones(grace_period, max_t, reduction_factor)
        self.phase_of, self.margin = phase_of, margin

    def not_before(self, number: int, report: dict) -> int | None:
        start = self.phase_of(number, report)
        return None if start is None else start + self.margin

    def on_report(self, number: int, report: dict[str, Any]) -> bool:
        """Record the report's value in the ledger and judge it; True when the trial stops now."""
        value, step = report.get(self.metric), report.get("step")
        if not isinstance(value, (int, float)) or not isinstance(step, (int, float)) or not math.isfinite(value):
            return False
        step, value = int(step), float(value)
        self.ledger.report(number, step, value)  # before judging: the rung's record is the ledger's
        entry = self.ledger.trials[number]
        stopped_at = entry.attrs.get("stopped_at")
        if stopped_at is not None and step >= stopped_at:
            return True  # decided before a kill, never carried out
        judged = entry.rungs()
        recorded = {m: self.ledger.rung_values(m, but=number) for m in self.rungs if step >= m and m not in judged}
        rung, stop = asha.judge(step, value, judged, recorded, self.rungs, self.reduction_factor, self.mode,
                                self.not_before(number, report))
        if rung is not None:
            self.ledger.record_rung(number, rung, value)
        if step >= self.max_steps or not stop and step < self.max_t:
            return False  # the last report ends the trial as completed, whatever the rung says
        self.ledger.set_trial_attr(number, "stopped_at", step)
        return True


def stopper_for(spec, ledger) -> RungStopper:
    """The early stopping of a validated SearchSpace with ASHA: phase-aware unless the space turns it off."""
    grace_period, max_t = spec.asha_limits()
    margin = spec.phase_margin()
    phase_of = no_phases if margin is None else TrialPhases(spec, ledger)
    return RungStopper(ledger, spec.metric, spec.mode, grace_period, max_t, spec.scheduler.reduction_factor,
                       spec.budget.max_steps, phase_of, margin or 0)


class TrialPhases:
    """phase_of for a space's trials: each trial's config built once from its sampled point."""

    def __init__(self, spec, ledger):
        self.spec, self.ledger = spec, ledger
        self.configs: dict[int, Any] = {}

    def __call__(self, number: int, report: dict) -> int | None:
        from sweeper.space import trial_config_for
        from trainables.phases import last_phase_change

        if number not in self.configs:
            self.configs[number] = trial_config_for(self.spec, self.ledger.trials[number].params, f"trial {number}")
        return last_phase_change(self.configs[number], report.get("switch_step"))


def planned_not_before(spec, params: dict) -> int:
    """The first step a trial at `params` may be judged at, as planned before it runs."""
    from sweeper.space import trial_config_for
    from core.errors import ConfigError
    from trainables.phases import planned_phase_change

    try:
        return planned_phase_change(trial_config_for(spec, params, "plan")) + (spec.phase_margin() or 0)
    except ConfigError:  # a point the space does not make (a record of an edited space): judged from the first rung
        return 0


N_PLANNED = 64


def sample_not_before(spec) -> tuple[int, ...]:
    """`planned_not_before` of the space's baseline points and random draws: N_PLANNED in all."""
    from sweeper.adapters.optuna_search import random_points

    points = [*spec.searcher.baseline, *random_points(spec, max(0, N_PLANNED - len(spec.searcher.baseline)))]
    return tuple(planned_not_before(spec, p) for p in points[:N_PLANNED])
