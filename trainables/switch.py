"""Adaptive switch criteria: when has the recurrent path learned enough to let attention in?

`dat.mode: adaptive` asks one criterion, step by step, while attention is held back. The
trainer feeds it the signals of each training step (`Signals`) after the step; the
schedule (trainables/dat.py) switches attention on before the next step once the criterion
is `ready` and `dat.min_step` has passed, and at `dat.max_step` regardless.

Every signal is smoothed by a bias-corrected exponential moving average with decay
`dat.smoothing` (0: the raw value), so one lucky batch does not fire a criterion:

    s_n = smoothing * s_{n-1} + (1 - smoothing) * x_n,   smoothed_n = s_n / (1 - smoothing^n)

Criteria:
    state_acc     the smoothed training accuracy on state-tracking (ADD) positions reaches
                  `dat.acc_threshold`: the recurrent path tracks the state on training lengths.
    loss_plateau  the smoothed training loss has not improved on its best by more than the
                  relative `dat.plateau_delta` for `dat.patience` consecutive steps.
    grad_norm     the smoothed gradient norm of the recurrent (mixer) parameters has fallen to
                  `dat.grad_ratio` times its largest smoothed value so far: the recurrent
                  pathway has settled (its updates shrank after the learning phase).

A criterion is a small object with `observe(signals)`, `ready` and a state dict (part of the
checkpoint, so a resumed run switches at the same step).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from trainables.config import DATConfig
from trainables.state_checks import finite_number, whole_number


@dataclass(frozen=True)
class Signals:
    """What one training step tells the criteria (plain floats; NaN where not measured)."""

    loss: float  # training loss of the step
    state_acc: float = math.nan  # accuracy on the batch's state-tracking positions
    mixer_grad_norm: float = math.nan  # L2 norm of the recurrent parameters' gradient (before clipping)


class SmoothedValue:
    """Bias-corrected exponential moving average of a stream of floats."""

    def __init__(self, decay: float):
        self.decay = decay
        self.raw = 0.0
        self.count = 0

    def update(self, x: float) -> float:
        self.raw = self.decay * self.raw + (1.0 - self.decay) * x
        self.count += 1
        return self.value

    @property
    def value(self) -> float:
        return self.raw / (1.0 - self.decay**self.count) if self.count else math.nan

    def state_dict(self) -> dict:
        return {"raw": self.raw, "count": self.count}

    def load_state_dict(self, state: dict) -> None:
        self.raw, self.count = finite_number(state["raw"], "smoothed.raw"), whole_number(state["count"], "smoothed.count")


class Criterion:
    """Base: a smoothed signal plus the rule on it; subclasses set `signal` and `_rule`."""

    signal: str

    def __init__(self, cfg: DATConfig):
        self.cfg = cfg
        self.smoothed = SmoothedValue(cfg.smoothing)
        self.ready = False

    def observe(self, signals: Signals) -> None:
        x = getattr(signals, self.signal)
        if math.isnan(x):
            raise ValueError(f"criterion {type(self).__name__} needs the signal {self.signal!r}, got NaN")
        self.ready = self._rule(self.smoothed.update(x))

    def _rule(self, value: float) -> bool:
        raise NotImplementedError

    def state_dict(self) -> dict:
        return {"smoothed": self.smoothed.state_dict(), "ready": self.ready}

    def load_state_dict(self, state: dict) -> None:
        self.smoothed.load_state_dict(state["smoothed"])
        self.ready = bool(state["ready"])


class StateAccuracy(Criterion):
    signal = "state_acc"

    def _rule(self, value: float) -> bool:
        return value >= self.cfg.acc_threshold


class LossPlateau(Criterion):
    signal = "loss"

    def __init__(self, cfg: DATConfig):
        super().__init__(cfg)
        self.best = math.inf
        self.since_best = 0  # observations since the last relative improvement

    def _rule(self, value: float) -> bool:
        if value < self.best * (1.0 - self.cfg.plateau_delta):
            self.best, self.since_best = value, 0
        else:
            self.since_best += 1
        return self.since_best >= self.cfg.patience

    def state_dict(self) -> dict:
        return {**super().state_dict(), "best": self.best, "since_best": self.since_best}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        best = state["best"]  # inf until the first observation
        self.best = math.inf if best == math.inf else finite_number(best, "criterion.best")
        self.since_best = whole_number(state["since_best"], "criterion.since_best")


class GradNormSettled(Criterion):
    signal = "mixer_grad_norm"

    def __init__(self, cfg: DATConfig):
        super().__init__(cfg)
        self.peak = 0.0

    def _rule(self, value: float) -> bool:
        self.peak = max(self.peak, value)
        return value <= self.cfg.grad_ratio * self.peak

    def state_dict(self) -> dict:
        return {**super().state_dict(), "peak": self.peak}

    def load_state_dict(self, state: dict) -> None:
        super().load_state_dict(state)
        self.peak = finite_number(state["peak"], "criterion.peak")


CRITERIA: dict[str, type[Criterion]] = {
    "state_acc": StateAccuracy,
    "loss_plateau": LossPlateau,
    "grad_norm": GradNormSettled,
}


def make_criterion(cfg: DATConfig) -> Criterion:
    return CRITERIA[cfg.criterion](cfg)
