"""Ray Tune's searcher and scheduler of a sweep, both on the ledger (Ray Tune's public API only).

`LedgerSearcher` (a `ray.tune.search.Searcher`) asks the ledger for each trial: the trials a
resumed sweep left unended first, then new draws until `num_samples`; it tells the ledger every
report and how each trial ended. `LedgerASHA` (a `ray.tune.schedulers.FIFOScheduler`) is
asynchronous successive halving (sweeper/asha.py) whose rungs are the ledger's: it survives the
driver with nothing of its own to save.
"""

from __future__ import annotations

import math
from collections import deque

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from sweeper import asha
from sweeper.adapters.optuna_ledger import Ledger
from sweeper.faults import fault_point

STEP = "step"  # the time axis: the training step the trainer reports


def outcome(ledger: Ledger, number: int, result: dict, max_steps: int) -> str | None:
    """How a trial whose last report is `result` ended; None if it did not (an interrupt cut it off)."""
    if "stopped_at" in ledger.trials[number].attrs:
        return "stopped"
    if result.get("diverged"):
        return "diverged"
    if int(result.get(STEP, 0)) >= max_steps:
        return "completed"
    return None


class LedgerSearcher(Searcher):
    def __init__(self, ledger: Ledger, views, num_samples: int, max_steps: int, metric: str, mode: str):
        super().__init__(metric=metric, mode=mode)
        self.ledger, self.views = ledger, views
        self.num_samples, self.max_steps = num_samples, max_steps
        self.numbers: dict[str, int] = {}  # Ray's trial id -> the ledger's trial number
        self.to_resume = deque(ledger.unfinished())

    def set_search_properties(self, metric, mode, config, **spec) -> bool:
        return True  # the metric and mode are the space file's, set at construction

    def suggest(self, trial_id: str) -> dict | str | None:
        if self.to_resume:
            number = self.to_resume.popleft()
        elif self.ledger.counted() < self.num_samples:
            number = self.ledger.new_trial()
        else:
            return Searcher.FINISHED
        self.ledger.set_trial_attr(number, "ray_trial_id", trial_id)
        self.numbers[trial_id] = number
        self.views.on_start(number)
        return {"number": number, "params": dict(self.ledger.trials[number].params)}

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        number = self.numbers.get(trial_id)
        if number is not None and STEP in result:
            self._report(number, result)

    def _report(self, number: int, result: dict) -> None:
        if isinstance(result.get("node_ip"), str):  # where it trains (a retry may move it)
            self.ledger.set_trial_attr(number, "node_ip", result["node_ip"])
        value = result.get(self.metric)
        if isinstance(value, (int, float)):
            self.ledger.report(number, int(result[STEP]), float(value))
        fault_point("report")
        self.views.on_report(number, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        number = self.numbers.get(trial_id)
        if number is None:
            return
        if error:
            self.ledger.end(number, "failed", None)
            fault_point("end")
            self.views.on_end(number)
            return
        if not result or STEP not in result:
            return  # removed before it ran (the sweep is stopping): it stays to resume
        self._report(number, result)  # Ray skips on_trial_result for the report that ends a trial
        status = outcome(self.ledger, number, result, self.max_steps)
        if status is None:
            return  # cut off by an interrupt: the next launch continues it
        value = result.get(self.metric)
        self.ledger.end(number, status, float(value) if isinstance(value, (int, float)) else None)
        fault_point("stop" if status == "stopped" else "end")
        self.views.on_end(number)


class LedgerASHA(FIFOScheduler):
    """ASHA with one bracket, on the training step; the values it judges by live in the ledger."""

    def __init__(self, ledger: Ledger, metric: str, mode: str, grace_period: int, max_t: int, reduction_factor: float,
                 max_steps: int):
        super().__init__()
        self.ledger, self.score, self.direction = ledger, metric, mode
        self.reduction_factor, self.max_t, self.max_steps = reduction_factor, max_t, max_steps
        self.rungs = asha.milestones(grace_period, max_t, reduction_factor)

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        number = trial.config.get("number")
        value = result.get(self.score)
        if number is None or STEP not in result or not isinstance(value, (int, float)) or not math.isfinite(value):
            return TrialScheduler.CONTINUE
        step = int(result[STEP])
        self.ledger.report(number, step, float(value))  # before judging: the rung's record is the ledger's
        entry = self.ledger.trials[number]
        stopped_at = entry.attrs.get("stopped_at")
        if stopped_at is not None and step >= stopped_at:
            return TrialScheduler.STOP  # decided before a kill, never carried out
        judged = entry.rungs()
        recorded = {m: self.ledger.rung_values(m, but=number) for m in self.rungs if step >= m and m not in judged}
        rung, stop = asha.judge(step, float(value), judged, recorded, self.rungs, self.reduction_factor, self.direction)
        if rung is not None:
            self.ledger.record_rung(number, rung, float(value))
        if step >= self.max_steps:
            return TrialScheduler.CONTINUE  # its last report: the trial ends as completed, whatever the rung says
        if not stop and step < self.max_t:
            return TrialScheduler.CONTINUE
        self.ledger.set_trial_attr(number, "stopped_at", step)
        fault_point("verdict")
        return TrialScheduler.STOP
