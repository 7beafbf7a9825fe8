"""The sweep's early stopping: ASHA on the ledger's rungs, aware of each trial's training phase.

`RungStopper` is what the Ray Tune scheduler (sweeper/adapters/ray_search.py) and the search replay
(sweeper/replay.py) both ask at every report, so a replay stops the trials a sweep would stop. The
rule is sweeper/asha.py's; the values it compares live in the ledger (the Optuna study), so a
resumed sweep continues with the rungs the killed one left.

With a `pre_metric` (the space's `scheduler.pre_phase_metric`), a trial before its last phase + margin
is not passed unjudged: it is ranked at those rungs by that metric (a signal of the phase it is in,
e.g. the recurrent path's state accuracy), against the values other trials left there before their
own phase change (`pre_rung.STEP` attributes); from its phase change + margin on, by the metric.
Each rung judges a trial once, by whichever signal its phase gives.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

from sweeper import asha

# (trial number, its report) -> the first step of the trial's last training phase, None while unknown
PhaseOf = Callable[[int, dict], "int | None"]


PRE_RUNG = "pre_rung."  # a trial attribute: the pre-phase signal's value a rung judged it by


def no_phases(number: int, report: dict) -> int:
    return 0


def pre_rungs(attrs: dict[str, Any]) -> dict[int, float]:
    """{rung: value} of the rungs a trial was judged at by the pre-phase signal."""
    return {int(k[len(PRE_RUNG):]): float(v) for k, v in attrs.items() if k.startswith(PRE_RUNG)}


class RungStopper:
    """ASHA on the ledger, phase-aware through `phase_of` + `margin`; with `pre_metric`, the
    phase-state rule (the module's docstring); `pre_mode`: that metric's better direction."""

    def __init__(self, ledger, metric: str, mode: str, grace_period: int, max_t: int, reduction_factor: float,
                 max_steps: int, phase_of: PhaseOf = no_phases, margin: int = 0,
                 pre_metric: str | None = None, pre_mode: str = "max"):
        self.ledger, self.metric, self.mode = ledger, metric, mode
        self.reduction_factor, self.max_t, self.max_steps = reduction_factor, max_t, max_steps
        self.rungs = asha.milestones(grace_period, max_t, reduction_factor)
        self.phase_of, self.margin = phase_of, margin
        self.pre_metric, self.pre_mode = pre_metric, pre_mode

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
        value = entry.values.get(step, value)  # a step trained again after a kill: judged by the value recorded first
        stopped_at = entry.attrs.get("stopped_at")
        if stopped_at is not None and step >= stopped_at:
            return True  # decided before a kill, never carried out
        judged = set(entry.rungs()) | set(pre_rungs(entry.attrs))
        not_before = self.not_before(number, report)
        if self.pre_metric is not None and (not_before is None or step < not_before):
            stop = self._judge_before_phase(number, step, report.get(self.pre_metric), judged, not_before)
        else:
            recorded = {m: self.ledger.rung_values(m, but=number) for m in self.rungs if step >= m and m not in judged}
            rung, stop = asha.judge(step, value, judged, recorded, self.rungs, self.reduction_factor, self.mode,
                                    not_before)
            if rung is not None:
                self.ledger.record_rung(number, rung, value)
        return self._verdict(number, step, stop)

    def _judge_before_phase(self, number: int, step: int, signal: Any, judged: set[int], not_before: int | None) -> bool:
        """ASHA at the rungs before the trial's phase change + margin, by the pre-phase signal,
        against the values other trials left there before theirs."""
        if not isinstance(signal, (int, float)) or not math.isfinite(signal):
            return False  # no signal in this report: not judged now
        rungs = tuple(m for m in self.rungs if not_before is None or m < not_before)
        recorded = {m: self._pre_values(m, but=number) for m in rungs if step >= m and m not in judged}
        rung, stop = asha.judge(step, float(signal), judged, recorded, rungs, self.reduction_factor, self.pre_mode)
        if rung is not None:
            self.ledger.set_trial_attr(number, f"{PRE_RUNG}{rung}", float(signal))
        return stop

    def _pre_values(self, rung: int, but: int) -> list[float]:
        key = f"{PRE_RUNG}{rung}"
        return [float(t.attrs[key]) for n, t in self.ledger.trials.items() if key in t.attrs and n != but]

    def _verdict(self, number: int, step: int, stop: bool) -> bool:
        if step >= self.max_steps or not stop and step < self.max_t:
            return False  # the last report ends the trial as completed, whatever the rung says
        self.ledger.set_trial_attr(number, "stopped_at", step)
        return True


def stopper_for(spec, ledger) -> RungStopper:
    """The early stopping of a validated SearchSpace with ASHA: phase-aware unless the space turns it
    off; ranking trials before their phase change by `scheduler.pre_phase_metric` when it is set."""
    from trainables.metrics import direction

    grace_period, max_t = spec.asha_limits()
    margin = spec.phase_margin()
    phase_of = no_phases if margin is None else TrialPhases(spec, ledger)
    pre_metric = spec.scheduler.pre_phase_metric if margin is not None else None
    return RungStopper(ledger, spec.metric, spec.mode, grace_period, max_t, spec.scheduler.reduction_factor,
                       spec.budget.max_steps, phase_of, margin or 0,
                       pre_metric, (direction(pre_metric) if pre_metric else None) or "max")


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
