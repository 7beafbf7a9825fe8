"""The sweep's ledger: its Optuna study, the one record of the search, and its only writer.

Per trial (through Optuna's public API: `study.ask`/`tell` and the storage's methods):

    params               the sampled point
    intermediate values  the sweep's metric at each reported training step
    state                COMPLETE (ran to its last step, or diverged), PRUNED (the scheduler stopped
                         it at a rung), FAIL (raised, even after retries), RUNNING (started, not
                         ended: running now, or interrupted: the driver stopped before it ended)
    user attributes      status (completed, diverged, stopped, failed), `rung.STEP` (the value the
                         scheduler judged at a rung), stopped_at, interrupted, ray_trial_id, trial_dir,
                         duplicate_of (a draw of a finished point, told that trial's outcome)

Per study (user attributes): the folder format, the tracking URI, the MLflow parent's uid, when the
sweep first started and how long its earlier launches ran. Every other file of a sweep is a view
rebuilt from this and the trial folders.
"""

from __future__ import annotations

import math
import threading
import time
from typing import Any

import optuna
from optuna.trial import TrialState

from sweeper.adapters.optuna_trial import LedgerTrial
from sweeper.adapters.optuna_search import DefineByRun, baseline_points, make_sampler
from sweeper.space import SearchSpace
from trainables.config import ConfigError

FORMAT = 2  # the sweep folder's layout: the study is the ledger, the trainer owns each trial's folder
FORMAT_ATTR = "sweeper.format"
MAX_REDRAWS = 20  # draws per new trial before a point that already ran is trained again
FINAL_STATES = (TrialState.COMPLETE, TrialState.PRUNED, TrialState.FAIL)


INTERRUPTED_NOTE = ("**Interrupted** at step {step}: its sweep's driver stopped before the trial ended. Optuna "
                    "shows it as RUNNING; `sweeper launch` of the same space resumes it from its checkpoint. "
                    "Failing it here would end it for good.")
MEMORY = "memory"  # the url of a ledger held in memory only (a replay of recorded curves)


def storage_for(url: str) -> optuna.storages.BaseStorage:
    if url == MEMORY:
        return optuna.storages.InMemoryStorage()
    return optuna.storages.RDBStorage(url, skip_table_creation="mode=ro" in url)


class Ledger:
    """The study of one sweep, opened by its driver (which holds the sweep's lock: the only writer)."""

    def __init__(self, url: str, spec: SearchSpace, create: bool):
        self.spec = spec
        self.storage = storage_for(url)
        direction = "maximize" if spec.mode == "max" else "minimize"
        try:
            drawn = self.storage.get_n_trials(self.storage.get_study_id_from_name(spec.name))
        except KeyError:
            drawn = 0
        if create:
            self.study = optuna.create_study(storage=self.storage, study_name=spec.name, sampler=make_sampler(spec, drawn),
                                             direction=direction, load_if_exists=True)
        else:
            try:
                self.study = optuna.load_study(study_name=spec.name, storage=self.storage, sampler=make_sampler(spec, drawn))
            except KeyError:
                raise ConfigError(f"{url}: holds no study `{spec.name}`; put the sweep's study back, or pass --restart") from None
        self.study_id = self.storage.get_study_id_from_name(spec.name)
        self._ids: dict[int, int] = {}  # trial number -> the storage's trial id
        self.trials: dict[int, LedgerTrial] = {}
        for t in self.study.get_trials(deepcopy=False):
            if t.state == TrialState.WAITING:  # a baseline point still queued: drawn (and counted) when asked
                continue
            self.trials[t.number] = LedgerTrial(t.number, dict(t.params), t.state, dict(t.intermediate_values), dict(t.user_attrs))
        self._define = DefineByRun(spec)
        self._notes_loading: threading.Thread | None = None  # see `report`
        if create and not self.attr(FORMAT_ATTR):
            self.study.set_metric_names([spec.metric])
            self.set_attr(FORMAT_ATTR, FORMAT)
            self.set_attr("sweeper.started", time.time())
            for point in baseline_points(spec):
                self.study.enqueue_trial(point, skip_if_exists=True)

    # -- the study's own attributes --------------------------------------------------------------

    def attr(self, key: str, default: Any = None) -> Any:
        return self.study.user_attrs.get(key, default)

    def set_attr(self, key: str, value: Any) -> None:
        self.study.set_user_attr(key, value)

    # -- trials -------------------------------------------------------------------------------

    def _id(self, number: int) -> int:
        if number not in self._ids:
            self._ids[number] = self.storage.get_trial_id_from_study_id_trial_number(self.study_id, number)
        return self._ids[number]

    def counted(self) -> int:
        """Trials that count towards num_samples (a duplicate draw does not)."""
        return sum(not t.duplicate for t in self.trials.values())

    def unfinished(self) -> list[int]:
        """Trials started and not ended, oldest first: a resumed sweep continues them first."""
        return sorted(n for n, t in self.trials.items() if t.state == TrialState.RUNNING and not t.duplicate)

    def new_trial(self) -> int:
        """Draw a new point from the sampler. Trials are seeded, so a point that already ran would give
        the same result: a draw of a finished point is told that trial's outcome at once, a draw of a
        point in training is set aside (FAIL), both marked `duplicate_of`, and the sampler draws again,
        up to MAX_REDRAWS times."""
        for attempt in range(MAX_REDRAWS):
            trial = self.study.ask()
            self._define(trial)
            entry = self.trials[trial.number] = LedgerTrial(trial.number, dict(trial.params), TrialState.RUNNING)
            twin = self._twin(entry)
            if twin is None or attempt == MAX_REDRAWS - 1:  # the last draw trains, twin or not: the space is exhausted
                return trial.number
            if twin.state == TrialState.RUNNING:
                self.set_trial_attr(entry.number, "duplicate_of", twin.number)
                entry.state = self.study.tell(entry.number, state=TrialState.FAIL).state
            else:
                self._copy_outcome(entry, twin)
        raise AssertionError("unreachable: the last draw returns")

    def _twin(self, entry: LedgerTrial) -> LedgerTrial | None:
        """A trial at the same point that finished (and not failed) or is training; None if none."""
        for t in self.trials.values():
            if t is not entry and t.state != TrialState.FAIL and not t.duplicate and t.params == entry.params:
                return t
        return None

    def _copy_outcome(self, entry: LedgerTrial, twin: LedgerTrial) -> None:
        self.set_trial_attr(entry.number, "duplicate_of", twin.number)
        for step, value in sorted(twin.values.items()):
            self.report(entry.number, step, value)
        if twin.state == TrialState.COMPLETE:
            self.end(entry.number, twin.status, self.storage.get_trial(self._id(twin.number)).value)  # one trial, not a copy of all
        else:
            self.end(entry.number, "stopped", None)

    def set_trial_attr(self, number: int, key: str, value: Any) -> None:
        if self.trials[number].attrs.get(key) == value:
            return
        self.storage.set_trial_user_attr(self._id(number), key, value)
        self.trials[number].attrs[key] = value

    def report(self, number: int, step: int, value: float) -> bool:
        """The metric's value at a training step; False when the ledger had it (or the trial ended)."""
        t = self.trials[number]
        if step in t.values or t.state in FINAL_STATES or not math.isfinite(value):
            return False
        self.storage.set_trial_intermediate_value(self._id(number), step, float(value))
        t.values[step] = float(value)
        if not self._notes_loading:  # a trial trains: an interrupt may come and write notes
            self._notes_loading = threading.Thread(target=_import_notes, name="import-notes", daemon=True)
            self._notes_loading.start()
        if t.attrs.get("interrupted"):
            self.set_trial_attr(number, "interrupted", False)
            self.note(number, f"Resumed: reported step {step} after an interruption.")
        return True

    def record_rung(self, number: int, step: int, value: float) -> None:
        self.set_trial_attr(number, f"rung.{step}", float(value))

    def rung_values(self, step: int, but: int | None = None) -> list[float]:
        key = f"rung.{step}"
        return [float(t.attrs[key]) for n, t in self.trials.items() if key in t.attrs and n != but]

    def end(self, number: int, status: str, value: float | None) -> None:
        """Record how a trial ended: completed or diverged (COMPLETE, with its value), stopped by
        the scheduler (PRUNED), failed (FAIL)."""
        t = self.trials[number]
        if t.state in FINAL_STATES:
            return
        self.set_trial_attr(number, "status", status)
        if status in ("completed", "diverged") and value is not None and math.isfinite(value):
            frozen = self.study.tell(number, float(value))
        elif status == "failed" or status in ("completed", "diverged"):
            frozen = self.study.tell(number, state=TrialState.FAIL)
        else:
            frozen = self.study.tell(number, state=TrialState.PRUNED)
        t.state = frozen.state

    def mark_interrupted(self) -> list[int]:
        """At the end of a driver's run: every trial it leaves unended is interrupted."""
        left = self.unfinished()
        for number in left:
            if self.trials[number].values or self.trials[number].attrs.get("ray_trial_id"):
                self.set_trial_attr(number, "interrupted", True)
                self.note(number, INTERRUPTED_NOTE.format(step=self.trials[number].last_step))
        return left

    def note(self, number: int, body: str) -> None:
        """A note on the trial where optuna-dashboard shows it (Markdown; the newest replaces the last).
        Without optuna-dashboard, none: the trial's attribute `interrupted` says it too."""
        try:
            from optuna_dashboard import save_note
        except ImportError:
            return
        save_note(optuna.Trial(self.study, self._id(number)), body)

    def close_decided(self) -> list[int]:
        """On resume: trials whose end the ledger already decided (the scheduler stopped them; a kill
        came before the end was told) are ended now. Returns their numbers."""
        closed = []
        for number in self.unfinished():
            t = self.trials[number]
            if "stopped_at" in t.attrs:
                self.end(number, "stopped", None)
                closed.append(number)
            elif t.attrs.get("status") in ("completed", "diverged", "failed"):
                self.end(number, t.attrs["status"], t.values.get(t.last_step))
                closed.append(number)
        return closed


def _import_notes() -> None:
    """optuna-dashboard's note writer takes ~1 s to import: done in the background while trials
    train, so that an interrupt's notes do not wait for it."""
    try:
        import optuna_dashboard  # noqa: F401
    except ImportError:
        pass
