"""Ray Tune adapter on the driver: ray.init, the Tuner (OptunaSearch + ASHA), restore, events.

The driver-side twin of `sweeper/adapters/ray_trainable.py`; together they are the only modules that
import ray. `SweepMonitor` turns Ray's trial events into plain `TrialRecord`s and hands
them to a listener (the progress line, the status file, the tracker), so nothing
downstream needs to know Ray's trial objects.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import pickle
import shutil
import sys
import time
from pathlib import Path
from typing import Any

# Defaults a user can still override from the environment:
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: our own progress line, not Ray's tables
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")  # ...without nagging
os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")  # trials keep the launch directory as their cwd

import optuna  # noqa: E402
import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.schedulers import ASHAScheduler, FIFOScheduler  # noqa: E402
from ray.tune.search.optuna import OptunaSearch  # noqa: E402

from sweeper.adapters.optuna_search import baseline_points, define_by_run, make_sampler  # noqa: E402
from sweeper.records import FINAL, TrialRecord, classify, trainer_metrics  # noqa: E402
from sweeper.space import SearchSpace, trial_config_for  # noqa: E402
from sweeper.adapters.ray_trainable import make_trainable  # noqa: E402
from sweeper.faults import fault_point  # noqa: E402

STEP = "step"  # ASHA's time attribute: the training step the trainer reports


def init_ray(address: str | None, quiet: bool = True) -> None:
    """A local Ray instance on this machine (address None), or an existing cluster."""
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"log_to_driver": not quiet, "logging_level": "ERROR" if quiet else "INFO"}
    if address is None:  # a private instance, even if some other Ray runs on this machine,
        # reachable from this machine only: every Ray server binds the node IP, here loopback
        # (with LOOPBACK_ENV set before ray was imported, see `loopback_only`)
        address, kwargs["include_dashboard"], kwargs["_node_ip_address"] = "local", False, "127.0.0.1"
    ray.init(address=address, **kwargs)


def shutdown_ray() -> None:
    """Stop this driver's local Ray (or leave the cluster) now, once the sweep's state is written: at
    interpreter exit Ray first sleeps 0.5 s for late log lines (~2.1 s from the end of the work to the
    exit, against ~1.6 s)."""
    ray.shutdown()


def cluster_fit_note(cpu: float, gpu: float) -> str | None:
    """On an existing cluster: a line when no node that is up now could hold one trial (an
    autoscaling cluster may add one later, so this warns instead of refusing); None if one can."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(r.get("CPU", 0) >= cpu and r.get("GPU", 0) >= gpu for r in nodes):
        return None
    biggest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    return (f"note: a trial asks for {cpu:g} CPU and {gpu:g} GPU, but no node of the cluster has that now (largest: "
            f"{biggest.get('CPU', 0):g} CPU, {biggest.get('GPU', 0):g} GPU); trials wait until the autoscaler adds "
            "one, or forever on a fixed cluster (lower resources.* then)")


MAX_REDRAWS = 20  # draws per suggestion before a point that already ran is trained again


class StepAwareOptunaSearch(OptunaSearch):
    """OptunaSearch that files results under the training step, tells Optuna PRUNED for trials
    the scheduler stopped early (Ray's own class marks them COMPLETE), survives a resume from an
    experiment snapshot older than the study on disk, and never trains a point twice: a draw
    equal to a finished trial (trials are seeded, so it would give the same result) is told
    that trial's outcome at once, tagged `duplicate_of`, and the sampler draws again."""

    def __init__(self, *args, max_steps: int, **kwargs):
        super().__init__(*args, **kwargs)
        self._max_steps = max_steps

    def suggest(self, trial_id: str) -> dict | None:
        if trial_id in self._ot_trials:  # a restored trial keeps its point
            return super().suggest(trial_id)
        for _ in range(MAX_REDRAWS):
            params = super().suggest(trial_id)
            ot_trial = self._ot_trials[trial_id]
            twin = self._finished_twin(ot_trial)
            if twin is None:
                return params
            self._tell_as(ot_trial, twin)
            del self._ot_trials[trial_id]
        return super().suggest(trial_id)  # the space is exhausted: train the point again

    def _finished_twin(self, ot_trial) -> optuna.trial.FrozenTrial | None:
        """The finished trial at `ot_trial`'s point, if any: one scan of the study the first time,
        then a lookup (each suggestion would otherwise read every finished trial: O(N) per trial)."""
        if getattr(self, "_done", None) is None:
            self._done = {}
            done = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
            for t in self._ot_study.get_trials(deepcopy=False, states=done):
                self._keep_done(t)
        return self._done.get(_point_key(ot_trial.params))

    def _keep_done(self, t: optuna.trial.FrozenTrial) -> None:
        if t.state in (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED) and "duplicate_of" not in t.user_attrs:
            self._done.setdefault(_point_key(t.params), t)

    def _remember(self, trial_id: str) -> None:
        """A trial of this run was just told its end: later draws of its point find it."""
        if getattr(self, "_done", None) is not None and trial_id in self._ot_trials:
            self._keep_done(self._ot_study._storage.get_trial(self._ot_trials[trial_id]._trial_id))

    def _tell_as(self, ot_trial, twin: optuna.trial.FrozenTrial) -> None:
        """Give `ot_trial` the outcome of `twin`, the finished trial at the same point."""
        ot_trial.set_user_attr("duplicate_of", twin.number)
        for step, value in sorted(twin.intermediate_values.items()):
            ot_trial.report(value, step)
        if twin.state == optuna.trial.TrialState.COMPLETE:
            self._ot_study.tell(ot_trial, twin.value)
        else:
            self._ot_study.tell(ot_trial, state=optuna.trial.TrialState.PRUNED)

    def on_trial_result(self, trial_id: str, result: dict) -> None:
        if trial_id in self._completed_trials or self.metric not in result:
            return
        step, last = int(result[STEP]), self.__dict__.setdefault("_last_step", {})  # trial id -> last step told
        if step <= last.get(trial_id, -1):
            return  # a resumed trial retraining steps the study has (Optuna would warn once a step)
        try:
            self._ot_trials[trial_id].report(result[self.metric], step)
        except optuna.exceptions.UpdateFinishedTrialError:
            pass  # the study already holds this trial's end (the snapshot predates it)
        last[trial_id] = step

    def restore(self, checkpoint_path: str) -> None:
        """After a kill, Optuna trials that Ray's snapshot never knew stay RUNNING: close them as FAIL."""
        super().restore(checkpoint_path)
        self._done = None  # rebuilt from the study on disk, which may be newer than the snapshot
        known = {t._trial_id for t in self._ot_trials.values()}
        steps = {}  # each known trial's last step the study holds
        for t in self._ot_study.get_trials(deepcopy=False):  # one read of the study for both
            if t._trial_id in known and t.intermediate_values:
                steps[t._trial_id] = max(t.intermediate_values)
            elif t._trial_id not in known and t.state == optuna.trial.TrialState.RUNNING:
                self._ot_study.tell(t.number, state=optuna.trial.TrialState.FAIL)
        self._last_step = {rid: steps[t._trial_id] for rid, t in self._ot_trials.items() if t._trial_id in steps}

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        if result is not None and not error and trial_id in self._ot_trials:  # Ray skips on_trial_result for the report that ends a trial:
            self.on_trial_result(trial_id, result)  # the study gets it too (ASHA's verdict step, the last step)
        stopped_early = (
            result is not None and not error and trial_id not in self._completed_trials
            and result.get(STEP, self._max_steps) < self._max_steps and not result.get("diverged")
        )
        if trial_id in self._ot_trials and self._finished_in_study(trial_id):
            self._completed_trials.add(trial_id)  # told before a kill that Ray's snapshot predates
            return
        if stopped_early:
            self._ot_study.tell(self._ot_trials[trial_id], state=optuna.trial.TrialState.PRUNED)
            self._completed_trials.add(trial_id)
            self._remember(trial_id)
            return
        super().on_trial_complete(trial_id, result=result, error=error)
        self._remember(trial_id)

    def _finished_in_study(self, trial_id: str) -> bool:
        ot_trial = self._ot_trials[trial_id]
        return self._ot_study._storage.get_trial(ot_trial._trial_id).state.is_finished()


def _point_key(params: dict) -> tuple:
    return tuple(sorted((k, repr(v)) for k, v in params.items()))


ASHA_STATE = "asha.pkl"  # in the experiment directory, beside Ray's own snapshot (ResumableASHA)
SWEEP_STATE_FILES = ("status.json", "summary.json", "mlflow_runs.json", "ray_processes.json", ASHA_STATE)  # ours, in Ray's experiment folder


def drop_restored_copies(staging_dir: Path) -> list[Path]:
    """A restored Ray experiment copies every .json and .pkl of its folder (the sweep folder) into
    its driver staging folder and uploads that folder back over the sweep folder at every snapshot
    (about once a second): our state files would be put back, again and again, as they were when
    the sweep resumed (status.json naming the dead driver, a run mapping without the trials since).
    Remove those copies before the first snapshot of a run; Ray's own files stay."""
    gone = [staging_dir / name for name in SWEEP_STATE_FILES if (staging_dir / name).is_file()]
    for path in gone:
        path.unlink()
    return gone


STATUS_EVERY_S = 1.0  # status.json after a report: at most this often (it holds every trial: O(N) to write)


class SweepMonitor(tune.Callback):
    """Turns Ray's trial events into records for a listener: `on_result(record)` for each report,
    `on_end(record)` when a trial ends, and `listener(records, final)` with all trials after each event."""

    def __init__(self, listener, max_steps: int):
        self.listener = listener
        self.max_steps = max_steps
        self.final: dict[str, str] = {}  # trial id -> its final status, set only by an end event
        self.__dict__.update(self._run_state())

    @staticmethod
    def _run_state() -> dict:
        """What one run of the driver keeps (`setup` starts it again on resume)."""
        return {
            "_ended": {},  # trial id -> the record of a trial that ended (built once)
            "_restored_seen": True,  # False from `setup` until the first step: Ray's restored trials not yet adopted
            "_written": 0.0,  # when status.json was last written (monotonic)
            "_dirty": False,  # a report came since then
        }

    def __setstate__(self, state: dict) -> None:  # a monitor pickled by an older version lacks some of them
        self.__dict__.update(self._run_state())
        self.__dict__.update(state)

    def setup(self, **info):  # also called when a sweep is resumed
        self.__dict__.update(self._run_state())
        reset = getattr(self.listener, "reset", None)
        if reset:
            reset()
        known = getattr(self.listener, "final_statuses", None)  # trials that ended in an earlier run
        self.final = dict(known()) if known else {}
        self._restored_seen = False

    def on_step_begin(self, iteration, trials, **info):
        if not self._restored_seen and trials:  # the first step of this run
            drop_restored_copies(Path(trials[0].local_experiment_path))
        self._adopt(trials)

    def _adopt(self, trials) -> None:
        """Before the first step of a (resumed) run, or at its end if it had none (every trial had
        ended): a trial Ray's snapshot holds as ended that status.json does not know (the file was
        lost) ended in an earlier run; its status comes from its last report, as it did then. (Ray
        resets the trials an interrupt cut off to PENDING, so none of them is taken for ended.)"""
        if self._restored_seen:
            return
        self._restored_seen = True
        for t in trials:
            if t.status in ("TERMINATED", "ERROR") and t.trial_id not in self.final:
                metrics = {k: v for k, v in (t.last_result or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
                self.final[t.trial_id] = classify(t.status, metrics, self.max_steps)

    def _emit(self, trials, final: bool = False, ending=None, ray_status: str = "", report: bool = False) -> None:
        """Hand every trial's record to the listener (status.json). A start, an end and the sweep's
        end are written at once; a report at most every STATUS_EVERY_S (on_step_end writes the
        last one), so the driver's cost per event does not grow with the number of trials."""
        now = time.monotonic()
        if report and now - self._written < STATUS_EVERY_S:
            self._dirty = True
            return
        self._written, self._dirty = now, False
        # inside on_trial_complete/on_trial_error Ray has not yet updated the ending trial's status
        self.listener([self.record(t, ray_status if t is ending else t.status) for t in trials], final)

    def on_step_end(self, iteration, trials, **info):
        if self._dirty and time.monotonic() - self._written >= STATUS_EVERY_S:
            self._emit(trials)

    def record(self, trial, ray_status: str) -> TrialRecord:
        if trial.trial_id in self._ended and ray_status in ("TERMINATED", "ERROR"):
            return self._ended[trial.trial_id]  # an ended trial's record does not change: built once
        record = self._record(trial, ray_status)
        if record.status in FINAL and ray_status in ("TERMINATED", "ERROR") and trial.trial_id in self.final:
            self._ended[trial.trial_id] = record
        return record

    def _record(self, trial, ray_status: str) -> TrialRecord:
        last = dict(trial.last_result or {})
        metrics = {k: v for k, v in last.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        status = classify(ray_status, metrics, self.max_steps)
        if ray_status in ("TERMINATED", "ERROR"):
            # a trial ends through on_trial_complete / on_trial_error (its end, the scheduler's stop,
            # an error); one Ray terminated without such an event was cut off by an interrupt
            status = self.final.get(trial.trial_id, "interrupted")
        return TrialRecord(
            trial_id=trial.trial_id,
            params=dict(trial.config),
            status=status,
            step=int(metrics.get(STEP, 0)),
            metrics=metrics,
            path=str(trial.path) if trial.path else "",
        )

    def on_trial_start(self, iteration, trials, trial, **info):
        self._emit(trials)

    def on_trial_result(self, iteration, trials, trial, result, **info):
        fault_point("report")
        self.listener.on_result(self.record(trial, "RUNNING"))
        fault_point("logged")
        self._emit(trials, report=True)

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        fault_point("checkpoint")

    def on_trial_complete(self, iteration, trials, trial, **info):
        self._end(trial, "TERMINATED")
        self._emit(trials, ending=trial, ray_status="TERMINATED")

    def on_trial_error(self, iteration, trials, trial, **info):
        self._end(trial, "ERROR")
        self._emit(trials, ending=trial, ray_status="ERROR")

    def _end(self, trial, ray_status: str) -> None:
        self.final.pop(trial.trial_id, None)
        self._ended.pop(trial.trial_id, None)
        metrics = {k: v for k, v in (trial.last_result or {}).items() if isinstance(v, (int, float)) and not isinstance(v, bool)}
        self.final[trial.trial_id] = classify(ray_status, metrics, self.max_steps)
        fault_point("stop" if self.final[trial.trial_id] == "stopped" else "end")
        self.listener.on_end(self.record(trial, ray_status))

    def on_experiment_end(self, trials, **info):
        self._adopt(trials)
        self._emit(trials, final=True)


def _trial_config(spec: SearchSpace, params: dict):
    return trial_config_for(spec, params, source=f"trial {params}")


SNAPSHOT_EVERY_S_UP_TO = 64  # trials: up to this many, Ray snapshots the experiment every second
CHECKPOINT_PERIOD_MAX_S = 300.0  # the most training a resumed trial of a large sweep repeats (checkpoint_period_s)


def snapshot_policy(spec: SearchSpace) -> None:
    """How often Ray snapshots the experiment (TUNE_GLOBAL_CHECKPOINT_S, read when the Tuner runs;
    a user's setting wins). A snapshot holds every trial, so its cost grows with the sweep: every
    second for small sweeps (a killed sweep resumes from a fresh one), Ray's adaptive period for
    large ones (at most ~5% of the driver's time, at least every 10 s); the resume copes with an
    older snapshot either way (docs/architecture.md, the ledger)."""
    os.environ.setdefault("TUNE_GLOBAL_CHECKPOINT_S", "1" if spec.budget.num_samples <= SNAPSHOT_EVERY_S_UP_TO else "auto")


class ResumableASHA(ASHAScheduler):
    """ASHA whose rungs survive the driver. Ray snapshots the searcher but not the scheduler, so a
    resumed sweep would forget every value recorded at a rung and compare the next trials against
    fewer (the first ones against none: never stopped). After each result this saves its state
    with the scheduler's own `save` (one small pickle, replaced atomically); unpickled again (Ray's
    `Tuner.restore` reads the scheduler from tuner.pkl, pickled before any trial ran) it reloads
    the latest one. A kill between a decision and its save loses at most that one record. A save
    that fails (a full or read-only disk) is reported once and never stops the sweep: the rungs
    live on in memory, only a resume would start them older. Its stops are saved with the rungs
    (`stops`: trial id -> step): a kill after a stop was decided but before Ray acted on it would
    otherwise let the trial train on past its rung when resumed. Such a trial ends at its rung on
    resume (`ended_by_scheduler`), or, resumed from an older checkpoint, is stopped again there."""

    def __init__(self, *args, state_file: str | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.state_file = state_file
        self.save_failed = False
        self.stops: dict[str, int] = {}  # trial id -> the step this scheduler stopped it at

    def _save_state(self) -> None:
        if not self.state_file or not Path(self.state_file).parent.is_dir():
            return
        tmp = f"{self.state_file}.tmp"
        try:
            self.save(tmp)
            os.replace(tmp, self.state_file)
        except OSError as err:
            with contextlib.suppress(OSError):  # a half-written copy, if there is one
                Path(tmp).unlink(missing_ok=True)
            if not self.save_failed:
                print(f"warning: could not save ASHA's rungs to {self.state_file} ({err.strerror or err}); the sweep "
                      "goes on, a resume would judge with the rungs last saved", file=sys.stderr, flush=True)
            self.save_failed = True

    def on_trial_result(self, tune_controller, trial, result):
        stopped_at = self.stops.get(trial.trial_id)
        if stopped_at is not None and result.get(self._time_attr, -1) >= stopped_at:
            return self.STOP  # a stop decided before a kill, which Ray never carried out (resumed from an older checkpoint)
        decision = super().on_trial_result(tune_controller, trial, result)
        if decision == self.STOP:
            self.stops[trial.trial_id] = int(result[self._time_attr])
        self._save_state()
        if decision == self.STOP:
            fault_point("verdict")
        return decision

    def on_trial_complete(self, tune_controller, trial, result):
        super().on_trial_complete(tune_controller, trial, result)
        self._save_state()

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update({"save_failed": False, "stops": {}, **state})  # not in a tuner.pkl of before them
        if self.state_file and Path(self.state_file).is_file():
            try:
                self.restore(self.state_file)
            except Exception:  # noqa: BLE001 - a damaged state file: ASHA starts its rungs afresh, as Ray's would
                self.__dict__.update(state)
            # metric and mode as pickled (unset: Ray's Tuner sets them and refuses a scheduler that has them)
            self.__dict__.update({k: v for k, v in state.items() if k in ("_metric", "_mode", "_metric_op")})
            self.__dict__.setdefault("stops", {})  # a state file of before them

    @staticmethod
    def saved_stops(state_file: Path | str) -> dict[str, int]:
        """The stops (trial id -> step) in a saved state file; {} if there is none or it is unreadable."""
        try:
            with open(state_file, "rb") as f:
                stops = pickle.load(f).get("stops", {})  # our own file, beside Ray's tuner.pkl
        except Exception:  # noqa: BLE001 - missing or damaged: no stops known, as a resume would find
            return {}
        return {str(k): int(v) for k, v in stops.items()} if isinstance(stops, dict) else {}


def build_tuner(spec: SearchSpace, experiment_dir: Path | str, monitor: SweepMonitor, optuna_storage: str) -> tune.Tuner:
    """A fresh Tuner for `spec` whose results go to `experiment_dir` (= storage/name)."""
    snapshot_policy(spec)
    budget, sch = spec.budget, spec.scheduler
    searcher = StepAwareOptunaSearch(
        space=define_by_run(spec),
        metric=spec.metric,
        mode=spec.mode,
        points_to_evaluate=baseline_points(spec) or None,
        sampler=make_sampler(spec),
        study_name=spec.name,
        storage=optuna.storages.RDBStorage(optuna_storage),
        max_steps=budget.max_steps,
    )
    if sch.type == "asha":
        grace_period, max_t = spec.asha_limits()
        scheduler = ResumableASHA(time_attr=STEP, max_t=max_t, grace_period=grace_period, reduction_factor=sch.reduction_factor,
                                  state_file=None if "://" in str(experiment_dir) else str(Path(experiment_dir) / ASHA_STATE))
    else:
        scheduler = FIFOScheduler()
    experiment_dir = str(experiment_dir)
    storage_path, name = experiment_dir.rstrip("/").rsplit("/", 1)
    return tune.Tuner(
        _resourced_trainable(spec, experiment_dir),
        tune_config=tune.TuneConfig(
            metric=spec.metric,
            mode=spec.mode,
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=budget.num_samples,
            max_concurrent_trials=budget.max_concurrent,
            reuse_actors=True,  # a finished trial's worker (torch already imported) takes the next one
        ),
        run_config=tune.RunConfig(
            name=name,
            storage_path=storage_path,
            failure_config=tune.FailureConfig(max_failures=2),
            checkpoint_config=tune.CheckpointConfig(num_to_keep=1),
            callbacks=[monitor],
            verbose=0,
        ),
    )


def checkpoint_period_s(spec: SearchSpace) -> float:
    """The least time (seconds of a trial) between two reports that carry its checkpoint. Ray keeps
    one checkpoint per trial (num_to_keep=1) and so snapshots the whole experiment, every trial in it,
    each time a trial checkpoints: up to SNAPSHOT_EVERY_S_UP_TO trials, every report carries one (a
    resume repeats no training); beyond, at most one every 0.02 s x trials x trials at once (5 minutes at most),
    which keeps those O(N) snapshots near 2.5% of the driver's time at ~0.5 ms per trial in a snapshot
    (docs/benchmarks.md, target 6), at the price of repeating up to that much of a trial's training
    when a killed sweep resumes."""
    n = spec.budget.num_samples
    if n <= SNAPSHOT_EVERY_S_UP_TO:
        return 0.0
    return min(CHECKPOINT_PERIOD_MAX_S, 0.02 * n * min(n, spec.budget.max_concurrent))


def _resourced_trainable(spec: SearchSpace, experiment_dir: Path | str):
    threads = max(1, int(spec.resources.cpu))
    local = None if "://" in str(experiment_dir) else str(Path(experiment_dir).resolve())  # where mark_ended_trials writes
    trainable = make_trainable(functools.partial(_trial_config, spec), threads, local, checkpoint_period_s(spec))
    return tune.with_resources(trainable, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu})


def can_restore(experiment_dir: Path | str) -> bool:
    return tune.Tuner.can_restore(str(experiment_dir))


def restore_missing_checkpoints(experiment_dir: Path | str) -> list[Path]:
    """Ray keeps one checkpoint per trial (num_to_keep=1) and snapshots the experiment about once a
    second, so a kill can leave the snapshot naming a checkpoint a newer one already replaced, and
    Ray cannot restore that trial ("does not exist on storage anymore"). Every checkpoint a trial
    reported that is gone, older than its newest, gets the newest one's files (hard links, no
    space): the trial resumes from its newest state. Local storage only. Returns what it made."""
    made = []
    for result_file in Path(experiment_dir).glob("*/result.json"):
        trial_dir = result_file.parent
        existing = sorted(p.name for p in trial_dir.glob("checkpoint_*"))
        if not existing:
            continue
        reported = set()
        for line in result_file.read_text().splitlines():
            try:
                reported.add(json.loads(line).get("checkpoint_dir_name"))
            except ValueError:  # a line cut by the kill
                continue
        for name in sorted(n for n in reported - set(existing) if n and n < existing[-1]):
            shutil.copytree(trial_dir / existing[-1], trial_dir / name, copy_function=os.link)
            made.append(trial_dir / name)
        if existing[-1] in reported:  # an interrupt between a report and Ray recording its checkpoint: the
            for name in existing[:-1]:  # snapshot names the older one, still there; it gets the newest state
                if _same_files(trial_dir / name, trial_dir / existing[-1]):
                    continue  # mended before (a resume run twice): nothing to do
                shutil.rmtree(trial_dir / name)
                shutil.copytree(trial_dir / existing[-1], trial_dir / name, copy_function=os.link)
                made.append(trial_dir / name)
    return made


def _same_files(a: Path, b: Path) -> bool:
    """Whether two checkpoint folders hold the same files (hard links of each other)."""
    def inodes(d: Path) -> dict[str, int]:
        return {str(f.relative_to(d)): f.stat().st_ino for f in d.rglob("*") if f.is_file()}
    return inodes(a) == inodes(b)


def mark_ended_trials(records: list[TrialRecord]) -> list[Path]:
    """Trials our status file saw end (completed, stopped by ASHA, diverged) may still be running
    in Ray's last snapshot; on resume Ray would train them on. Each gets its last report in its
    directory, and the trainable re-reports it and ends at once. Returns the files written."""
    from sweeper.adapters.ray_trainable import ENDED_FILE

    written = []
    for r in records:
        if r.status in ("completed", "stopped", "diverged") and r.path and Path(r.path).is_dir():
            path = Path(r.path) / ENDED_FILE
            path.write_text(json.dumps(trainer_metrics(r.metrics)))
            written.append(path)
    return written


def ended_in_study(records: list[TrialRecord], optuna_storage: str, study_name: str, max_steps: int) -> list[TrialRecord]:
    """Trials status.json holds unfinished whose end the study already has: a kill between the
    searcher telling Optuna (ASHA's stop: PRUNED; the last step: COMPLETE) and the monitor recording
    it. Ray's snapshot has them running too, and resumed they would train past the scheduler's
    verdict. The study is the record of that end: each comes back ended at the study's last step,
    with that step's report (status.json's, or its newest checkpoint's), for `mark_ended_trials`."""
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    study = optuna.load_study(study_name=study_name, storage=optuna_storage)
    done = [t for t in study.get_trials(deepcopy=False, states=states) if "duplicate_of" not in t.user_attrs and t.intermediate_values]
    ended = []
    for r in records:
        twin = next((t for t in done if t.params == r.params), None)
        if r.status not in FINAL and r.path and twin is not None:
            ended += _ended_at(r, max(twin.intermediate_values), max_steps)
    return ended


def ended_by_scheduler(records: list[TrialRecord], experiment_dir: Path | str, max_steps: int) -> list[TrialRecord]:
    """Trials status.json holds unfinished that ASHA had stopped (its saved `stops`): a kill after
    the scheduler's decision, before Ray acted on it and before the searcher or the monitor heard of
    it. Resumed, they would train on past the rung. Each comes back ended at the step it was stopped
    at, with that step's report (status.json's, or its newest checkpoint's), for `mark_ended_trials`."""
    stops = ResumableASHA.saved_stops(Path(experiment_dir) / ASHA_STATE)
    ended = []
    for r in records:
        if r.status not in FINAL and r.path and r.trial_id in stops:
            ended += _ended_at(r, stops[r.trial_id], max_steps)
    return ended


def _ended_at(r: TrialRecord, step: int, max_steps: int) -> list[TrialRecord]:
    """`r` ended at `step`, with that step's report: status.json's if it holds that step, else the
    newest checkpoint's if that is of that step; [] if neither (the trial then resumes as it is)."""
    from dataclasses import replace

    from trainables.errors import ConfigError
    from trainables.train import read_checkpoint

    metrics = r.metrics
    if r.step != step:
        newest = sorted(Path(r.path).glob("checkpoint_*"))[-1:]
        try:
            metrics = read_checkpoint(newest[0]).get("metrics", {}) if newest else {}
        except ConfigError:
            metrics = {}
    if metrics.get(STEP) != step:
        return []
    return [replace(r, status=classify("TERMINATED", metrics, max_steps), step=step, metrics=metrics)]


def restore_tuner(spec: SearchSpace, experiment_dir: Path | str) -> tune.Tuner:
    """Continue a sweep: finished trials are kept, unfinished ones resume from their checkpoints,
    errored ones are retried, and the searcher (with its Optuna study) comes back."""
    snapshot_policy(spec)
    if "://" not in str(experiment_dir):  # local or mounted storage; on s3:// Ray's race stays
        restore_missing_checkpoints(experiment_dir)
    return tune.Tuner.restore(str(experiment_dir), trainable=_resourced_trainable(spec, experiment_dir),
                              resume_unfinished=True, resume_errored=True)
