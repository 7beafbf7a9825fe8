"""What the ledger (sweeper/adapters/optuna_ledger.py) holds of one trial, and the trial's name.

A plain copy kept current by the ledger's writes; reading it touches no storage.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from optuna.trial import TrialState

from sweeper.records import trial_name


@dataclass
class LedgerTrial:
    """What the ledger holds of one trial (a copy kept current by the ledger's writes)."""

    number: int
    params: dict[str, Any]
    state: TrialState
    values: dict[int, float] = field(default_factory=dict)  # step -> the metric's value
    attrs: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return trial_name(self.number)

    @property
    def last_step(self) -> int:
        return max(self.values, default=0)

    @property
    def duplicate(self) -> bool:
        return "duplicate_of" in self.attrs

    @property
    def status(self) -> str:
        """The trial's status as every view shows it (sweeper/records.py)."""
        if self.state == TrialState.COMPLETE:
            return self.attrs.get("status", "completed")
        if self.state == TrialState.PRUNED:
            return "stopped"
        if self.state == TrialState.FAIL:
            return "failed"
        if self.attrs.get("interrupted"):
            return "interrupted"
        return "running" if self.values else "pending"

    def rungs(self) -> dict[int, float]:
        """The values this trial was judged with, by rung step."""
        return {int(k.split(".", 1)[1]): float(v) for k, v in self.attrs.items() if k.startswith("rung.")}
