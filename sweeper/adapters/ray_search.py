"""Ray Tune's searcher and scheduler of a sweep, both on the ledger (Ray Tune's public API only).

`LedgerSearcher` (a `ray.tune.search.Searcher`) asks the ledger for each trial: the trials a
resumed sweep left unended first, then new draws until `num_samples`; it tells the ledger every
report and how each trial ended. `LedgerASHA` (a `ray.tune.schedulers.FIFOScheduler`) stops the
trials the sweep's early stopping (sweeper/stopping.py) stops; its rungs are the ledger's, so it
survives the driver with nothing of its own to save.
"""

from __future__ import annotations

from collections import deque

from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

from sweeper.adapters.optuna_ledger import Ledger
from sweeper.faults import Faults
from sweeper.stopping import RungStopper

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
    def __init__(self, ledger: Ledger, views, num_samples: int, max_steps: int, metric: str, mode: str,
                 faults: Faults | None = None):
        super().__init__(metric=metric, mode=mode)
        self.ledger, self.views = ledger, views
        self.num_samples, self.max_steps = num_samples, max_steps
        self.fault = (faults or Faults()).point  # the sweep's fault cues (tests/faults/), if any
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
        self.fault("report")
        self.views.on_report(number, result)

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        number = self.numbers.get(trial_id)
        if number is None:
            return
        if error:
            self.ledger.end(number, "failed", None)
            self.fault("end")
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
        self.fault("stop" if status == "stopped" else "end")
        self.views.on_end(number)


class LedgerASHA(FIFOScheduler):
    """Ray Tune's side of the sweep's early stopping (sweeper/stopping.py): a STOP when it says so."""

    def __init__(self, stopper: RungStopper, faults: Faults | None = None):
        super().__init__()
        self.stopper, self.fault = stopper, (faults or Faults()).point

    def set_search_properties(self, metric, mode, **spec) -> bool:
        return True

    def on_trial_result(self, tune_controller, trial, result: dict) -> str:
        number = trial.config.get("number")
        if number is None or STEP not in result or not self.stopper.on_report(number, result):
            return TrialScheduler.CONTINUE
        self.fault("verdict")
        return TrialScheduler.STOP
