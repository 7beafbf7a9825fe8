"""One sweep, from its request to its summary: the engine that `sweeper launch` and the resident
service both call.

    sweep = Sweep(request, sink)          a typed request (sweeper/request.py); events to `sink`
    with sweep:                           close(): the lock, Ray's scratch folder, the MLflow thread
        sweep.open()    checks, the sweep's lock, its folder (new, resumed, --restart), the ledger
                        (its Optuna study), the MLflow tracker, the views, Ray, the plan line
        sweep.run()     the Tuner (none for a finished sweep): trials until num_samples, or until stopped
                        (Ctrl-C, SIGTERM, the service's `stop`); Running and Fitted events around it
        code = sweep.finish()   interrupted trials marked, status.json, summary.json, MLflow's
                        finish, the table; 0 when every trial ended, 130 when it was interrupted

A sweep holds everything it uses and shares nothing with another sweep in the process but Ray:
its trainable is registered under a name of its own, it drains only its own tracker, it reads
paths, the tracking URI and the umask from its request, and it never prints: every line it has to
say is an event (sweeper/events.py). What the process does on a signal, and whether Ray is shut
down at the end, are its caller's.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sweeper import orphans
from sweeper.events import Fitted, Running, Sink, Speaker, TopTrials
from sweeper.faults import Faults
from sweeper.fs import first_missing, narrow_modes, sqlite_url
from sweeper.lock import claim_sweep_lock, hold_sweep_lock, release_sweep_lock, roll_back_unheld, sweep_lock_path
from sweeper.request import SweepRequest, current_umask
from sweeper.status import write_summary
from sweeper.sweep_checks import check_request, check_resume, check_sweep_dir, prepare_sweep_dir
from sweeper.sweep_dir import OPTUNA_DB, SPACE_FILE
from sweeper.tracking_uri import artifacts_folder, hide_password, sqlite_path, store_failure
from core.errors import ConfigError

TRIALS_DIR = "trials"  # in the sweep's folder: one folder per trial, the trainer's own (trainables/run_dir.py)


@dataclass(frozen=True)
class SweepHost:
    """What the resident service gives a sweep it runs: its Ray is up, `stop` ends the sweep when
    set, and trials train on the warm `workers` (sweeper/adapters/ray_warm.py)."""

    stop: threading.Event
    workers: list
    others: Callable[[], int] = lambda: 0  # how many other sweeps the service runs now (they share the workers)


class Sweep:
    """One sweep of one request; `host`: the service running it (None: a sweep in its own process)."""

    def __init__(self, request: SweepRequest, sink: Sink, host: SweepHost | None = None, faults: Faults | None = None):
        self.request, self.host = request, host
        self.say = Speaker(sink)
        self.faults = faults or Faults()
        self._resources = contextlib.ExitStack()
        self._mask = request.umask & ~current_umask()  # what the caller denies that this process would allow
        self._created: list[Path] = []  # what this sweep made outside its folder (narrowed to the caller's umask)
        self.tracker = self.tuner = None

    def __enter__(self) -> "Sweep":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        self._resources.close()

    # -- open ----------------------------------------------------------------------------------

    def open(self) -> None:
        req, host = self.request, self.host
        checked = check_request(req)
        self.spec, self.sweep_dir = spec, sweep_dir = checked.spec, checked.sweep_dir
        if req.address is not None:
            from sweeper.adapters import ray_tune

            ray_tune.join_cluster(req.address)  # before anything is written: a cluster that never answers is one line
            if not req.shared_storage:
                self.say.note(f"note: --address {hide_password(req.address)} with the storage path {checked.sweep_dir}: on a "
                              "multi-node cluster every node must see it (NFS, a shared volume; pass --shared-storage "
                              "to confirm it is shared)")
        if not req.restart and roll_back_unheld(sweep_dir, sweep_dir / OPTUNA_DB):  # as any writer of the study would
            self.say.note("note: rolled back the write to the sweep's study that a killed driver left half-done")
        if not os.path.lexists(sweep_lock_path(sweep_dir)):  # checked before the lock file is made: a refusal
            if check_sweep_dir(spec, req.file, sweep_dir, req.restart):  # leaves the storage as it was
                check_resume(sweep_dir, spec, req.tracking_uri, req.tracking_source)
        orphans.check_places(sweep_dir)
        self._created += [p for p in (first_missing(sweep_dir.parent),) if p is not None]
        lock = hold_sweep_lock(sweep_dir, spec.name, claim=False)  # one driver per sweep
        self._narrow_at_close(sweep_dir)  # runs last: after the trials and the MLflow thread have stopped
        self._resources.callback(release_sweep_lock, lock)
        ended = orphans.end_orphans(sweep_dir)  # a SIGKILLed driver's local Ray: ended before its files are read
        with orphans.told_in_refusal(ended):  # a resume's checks only read: a refused one leaves the folder as it was
            if resuming := not req.restart and prepare_sweep_dir(spec, req.file, sweep_dir, False, self.say.info):
                check_resume(sweep_dir, spec, req.tracking_uri, req.tracking_source)
        if ended:
            self.say.note(orphans.ended_note(ended))
        claim_sweep_lock(lock, on_service=host is not None)
        if req.restart:
            prepare_sweep_dir(spec, req.file, sweep_dir, True, self.say.info)
        self._narrow([sweep_dir, *self._created, sweep_lock_path(sweep_dir)])  # closed to others from here on
        self.ledger, self.views, records = self._open_records(resuming)
        from sweeper.eta import Plan
        from sweeper.live_table import plan_line

        self.plan = Plan.from_space(spec)
        line = plan_line(self.plan, records)  # trials, steps, concurrency, the estimate
        if host is not None:
            line = line.replace("Ctrl-C stops;", f"On the service (pid {os.getpid()}, {len(host.workers)} warm workers): "
                                                 "Ctrl-C stops this sweep;")
            if others := host.others():
                line += (f" The workers are shared with {others} other sweep{'s' if others > 1 else ''} running now: "
                         "this sweep's trials wait for a free one.")
        self.say.info(line)
        self._start_ray(records)
        if resuming:
            self.say.info(f"resuming sweep {spec.name} from {sweep_dir}: {len(self.ledger.unfinished())} trials continue")
        else:
            self.say.info(f"sweep {spec.name}: {spec.budget.num_samples} trials, {spec.budget.max_concurrent} at once "
                          f"-> {sweep_dir}")
        self.views.write("running")
        from sweeper.adapters import ray_tune

        scratch = ray_tune.scratch_dir(spec.name)
        self._resources.callback(ray_tune.remove_scratch, scratch)
        self.tuner = ray_tune.build_tuner(spec, self.ledger, self.views, str(self.trials_root), scratch,
                                          stop=host.stop if host else None, workers=host.workers if host else None)

    def _open_records(self, resuming: bool):
        """The ledger (the sweep's Optuna study), its MLflow tracker and its views."""
        from sweeper.adapters import mlflow_tracking as tracking
        from sweeper.adapters.optuna_ledger import Ledger
        from sweeper.views import SweepViews

        req, spec, sweep_dir = self.request, self.spec, self.sweep_dir
        ledger = Ledger(sqlite_url(sweep_dir / OPTUNA_DB), spec, create=not resuming)  # checked by check_resume
        if closed := ledger.close_decided():
            self.say.note(f"ended {len(closed)} trials whose end the study held before the last driver stopped")
        self.trials_root = Path(sweep_dir) / TRIALS_DIR
        self.tracker = tracking.SweepTracker(req.tracking_uri, spec, sweep_dir, req.experiment, ledger=ledger,
                                             say=self.say.warning, cwd=req.cwd)
        self._resources.callback(self.tracker.drain, 5.0)  # a sweep that failed: its MLflow thread ends too
        views = SweepViews(sweep_dir, spec, ledger, str(self.trials_root), tracker=self.tracker, say=self.say, faults=self.faults)
        return ledger, views, views.records()

    def _start_ray(self, records) -> None:
        """Ray started (or the service's, or a cluster's, joined) while MLflow starts beside it."""
        from sweeper.adapters.mlflow_store import store_lock

        req, uri = self.request, self.request.tracking_uri
        store = sqlite_path(uri)
        if store is not None:  # an embedded store this sweep makes: its file, lock and artifacts
            artifacts = artifacts_folder(uri, req.cwd)
            made = [p for p in (store, Path(f"{store}.lock"), artifacts) if not p.exists()]
            self._created += made
            if self._mask:  # made here with the caller's mode: what MLflow writes is out of others' reach from the start
                self._make_with_callers_mode(made, folder=artifacts)

        def start_tracking() -> int:
            try:
                with store_lock(uri):  # an embedded store is created (schema migrations) by one process at a time
                    self.tracker.start(self.sweep_dir / SPACE_FILE)
                # what the ledger and the trial folders hold that MLflow lacks (a kill cut the last driver's log short)
                return self.tracker.sync_all(records) if records else 0
            except ConfigError:
                raise
            except Exception as err:  # noqa: BLE001 - a store that passed the preflight and then failed: one line
                raise store_failure(uri, req.tracking_source, err) from None

        if req.address is None and self.host is None:
            from sweeper.local_ray import LATE_NOTE, loopback_only

            if not loopback_only():
                self.say.note(LATE_NOTE)
        from sweeper.adapters import ray_tune  # heavy: imported only once the input is known to be good

        with ThreadPoolExecutor(1) as pool:  # MLflow's start-up (imports, store, parent run) while Ray starts
            tracking_started = pool.submit(start_tracking)
            if self.host is None:
                ray_tune.init_ray(req.address)
            made = tracking_started.result()
            # the store the sweep logs to, once it took the parent run (a store that failed holds no run of it);
            # a password never goes into the study
            self.ledger.set_attr("sweeper.tracking_uri", hide_password(uri))
            if made:
                self.say.info(f"MLflow: {made} calls logged what the last run of this sweep left out (from the "
                              "trials' folders)")
        self.say.info(f"tracking: {hide_password(uri)} (experiment {self.tracker.experiment}); `sweeper ui` opens it")
        if req.address is None:
            orphans.record(self.sweep_dir)  # so that a next launch can end them if this driver (or the service) is SIGKILLed
        if req.address is not None and (note := ray_tune.cluster_fit_note(self.spec.resources.cpu, self.spec.resources.gpu)):
            self.say.note(note)

    # -- run and finish ------------------------------------------------------------------------

    def run(self) -> None:
        """The trials, until every one has ended or the sweep is stopped."""
        self.say(Running(self.sweep_dir))  # the live view draws from the sweep's folder from now on
        try:
            if self.ledger.unfinished() or self.ledger.counted() < self.spec.budget.num_samples:  # else nothing to train
                self.tuner.fit()
        finally:
            self.say(Fitted())

    def finish(self) -> int:
        """Write the sweep down: 0 when all its trials ended, 130 when it was interrupted (resumable)."""
        from sweeper.records import FINAL

        spec, ledger, views = self.spec, self.ledger, self.views
        views.catch_up(ledger.unfinished())  # a report its trial wrote as the sweep stopped
        left = ledger.mark_interrupted()
        interrupted = bool(left) or ledger.counted() < spec.budget.num_samples
        records, best = views.records(), views.best()
        views.write("interrupted" if interrupted else "finished")  # its elapsed_before_s: the earlier launches' alone
        ledger.set_attr("sweeper.elapsed_s", float(ledger.attr("sweeper.elapsed_s", 0.0)) + time.time() - views.launched)
        write_summary(self.sweep_dir, spec.name, spec.metric, spec.mode, records, best, _best_config(spec, records, best),
                      lambda: self.faults.point("state_write"))
        self.faults.point("finish")
        if unlogged := self.tracker.drain():  # this sweep's reports still queued for MLflow
            from sweeper.adapters.mlflow_store import describe_unlogged

            self.say.warning(describe_unlogged(unlogged))
        pictures = self._draw(records)
        try:
            from sweeper.adapters.mlflow_summary import finish

            finish(self.tracker, records, pictures, interrupted, best)
        except Exception as err:  # noqa: BLE001 - the sweep's results are safe on disk; only MLflow's view is behind
            self.say.warning(f"warning: could not finish the sweep's MLflow run ({type(err).__name__}: {str(err)[:160]}); "
                             "run the same command again to finish it")
        self.say(TopTrials(self.sweep_dir))
        if interrupted:
            self.say.warning(f"sweep {spec.name} interrupted with {sum(r.status in FINAL for r in records)} of "
                             f"{spec.budget.num_samples} trials finished; run the same command to resume")
            return 130
        self.say.info(f"summary: {self.sweep_dir / 'summary.json'}")
        return 0

    def _draw(self, records) -> list[Path]:
        """The sweep's plots in its folder, from the ledger and the trials' folders, whatever MLflow does."""
        from sweeper import plots
        from trainables.run_dir import trial_reports
        from sweeper.adapters.optuna_search import baseline_points

        try:
            return plots.sweep_plots(self.spec, self.sweep_dir, records, baseline_points(self.spec), trial_reports)
        except Exception as err:  # noqa: BLE001 - a plot is a view: the sweep's results are on disk
            self.say.warning(f"warning: could not draw the sweep's plots ({type(err).__name__}: {str(err)[:160]})")
            return []

    # -- the caller's umask ----------------------------------------------------------------------

    def _narrow(self, paths: list[Path]) -> None:
        if self._mask:
            narrow_modes(paths, self._mask)

    def _make_with_callers_mode(self, paths: list[Path], folder: Path) -> None:
        """Empty files (and `folder`) made now with the mode the caller's umask gives: an empty file is
        a new SQLite database to MLflow, and SQLite gives its journal the database file's mode. One
        that appeared meanwhile (another sweep's, a planted link) is left to MLflow's own checks."""
        for path in paths:
            try:
                if path == folder:
                    path.mkdir(0o777 & ~self.request.umask)
                else:
                    os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o666 & ~self.request.umask))
            except FileExistsError:
                continue

    def _narrow_at_close(self, sweep_dir: Path) -> None:
        """At the end, what the sweep and its trials made follows the caller's umask (the folder itself
        already does from the start, so nothing in it was reachable by others meanwhile)."""
        if self._mask:
            self._resources.callback(lambda: self._narrow([sweep_dir, sweep_lock_path(sweep_dir), *self._created,
                                                           *self._own_artifacts()]))

    def _own_artifacts(self) -> list[Path]:
        """This sweep's runs' artifact folders in an embedded store (which another sweep may have made
        and narrowed before this one wrote its last artifacts)."""
        if self.tracker is None or sqlite_path(self.request.tracking_uri) is None:
            return []
        return self.tracker.local_artifact_dirs()


def _best_config(spec, records, best: dict | None) -> dict | None:
    """The trial config of the best judged value's trial."""
    from sweeper.space import trial_config_for

    trial = next((r for r in records if best is not None and r.trial_id == best["trial_id"]), None)
    return None if trial is None else trial_config_for(spec, trial.params).model_dump(mode="json")
