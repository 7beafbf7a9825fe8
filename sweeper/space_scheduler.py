"""The `scheduler` section of a search-space file: FIFO, or ASHA and how it sees a trial's phases.

    type               asha (default) | fifo
    grace_period       steps before a trial can be stopped (default 2 x budget.eval_every)
    max_t              must equal budget.max_steps (its default)
    reduction_factor   ASHA's eta: a rung keeps the best 1/eta
    phase_aware        a trial is judged only from its last training phase on (a DAT switch, the end
                       of a curriculum: trainables/phases.py) + phase_margin steps; false: plain ASHA
    phase_margin       default 2 x budget.eval_every
    pre_phase_metric   a metric the trials report (e.g. state_acc_1x): before its phase change +
                       margin a trial is ranked at the rungs by it instead of passing them unjudged
                       (sweeper/stopping.py); unset (the default): not judged there

Cross-checks against the budget and the trials' reports: sweeper/space_file.py.
"""

from __future__ import annotations

from typing import Literal

from pydantic import ConfigDict, Field, field_validator, model_validator

from core.numbers_only import NumbersOnly

from trainables.config import MAX_STEPS
from trainables.metrics import direction


class Scheduler(NumbersOnly):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    type: Literal["asha", "fifo"] = "asha"
    grace_period: int | None = Field(None, ge=1, le=MAX_STEPS)
    max_t: int | None = Field(None, ge=1, le=MAX_STEPS)
    reduction_factor: float = Field(3.0, gt=1.0, le=1000.0)
    phase_aware: bool = True
    phase_margin: int | None = Field(None, ge=0, le=MAX_STEPS)
    pre_phase_metric: str | None = Field(None, max_length=100)

    @field_validator("pre_phase_metric")
    @classmethod
    def _ranked(cls, value: str | None) -> str | None:
        if value is not None and direction(value) is None:
            raise ValueError(f"must be a per-length metric with a better direction (e.g. state_acc_1x, "
                             f"ood_state_acc_3x), got {value!r}")
        return value

    @model_validator(mode="after")
    def _check(self) -> "Scheduler":
        if self.pre_phase_metric is not None and (self.type != "asha" or not self.phase_aware):
            raise ValueError("`pre_phase_metric` needs `type: asha` with `phase_aware: true` (it ranks trials "
                             f"before their phase change), got type {self.type}, phase_aware {self.phase_aware}")
        return self
