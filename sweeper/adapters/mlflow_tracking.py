"""MLflow tracking, the sweep's mirror: one parent run per sweep, one nested child run per trial.

    experiment (the sweep's name)
    └── parent run "<name>"        space file, compiled space, at the end: best config and score,
        │                          summary table (CSV, Markdown), sweep plots
        ├── child run "<trial>"    flattened trial config as params, every report at its training
        │                          step, tags trial_id / status / best, config YAML, length plot
        └── ...

MLflow is a view of the ledger: runs are found again by their tags (the parent by the uid the
ledger keeps for it, written there before the run is made; each child by its trial's name), so a
resumed sweep logs into the same parent and the same children, and `reconcile` logs once each
report a trial's folder holds that MLflow lacks: a trial never gets a second run.

Logging is off the sweep's critical path: the driver's callbacks put each report on a queue that
one background thread logs in order (`mlflow_store.BackgroundLog`), retrying a tracking server that
is down with backoff (the trials train on meanwhile). What is still unlogged when the sweep stops is
listed; the next launch logs it from the trials' folders.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Any, Callable

import yaml

from sweeper import plots
from sweeper.adapters.mlflow_store import VIEW_TAG, BackgroundLog, client, retrying, sweep_params, trial_reports, trials_view, view_key
from sweeper.records import TrialRecord, trainer_metrics
from sweeper.space import SearchSpace, flatten, iter_params, trial_config_for

PARENT_UID = "sweeper.mlflow_uid"  # the ledger's attribute naming the sweep's parent run (its tag parent_uid)
DRAIN_S = 60.0  # at the end of a sweep: how long the queue may take to empty before what is left is set aside
RUN_STATUS = {"completed": "FINISHED", "stopped": "FINISHED", "diverged": "FINISHED", "failed": "FAILED"}


def artifact_root(uri: str, cwd: Path) -> str:
    """Where an embedded store's artifacts go: `mlartifacts` beside its database file (for the
    default ./mlflow.db, ./mlartifacts), else in the caller's folder `cwd`."""
    if uri.startswith("sqlite:///"):
        return (Path(uri.removeprefix("sqlite:///")).parent / "mlartifacts").resolve().as_uri()
    return (cwd / "mlartifacts").resolve().as_uri()


class SweepTracker:
    """Mirrors a sweep into MLflow; `ledger` keeps the parent run's uid (None: a new one each time)."""

    def __init__(self, uri: str, spec: SearchSpace, sweep_dir: Path, experiment: str | None = None, ledger=None,
                 say: Callable[[str], None] | None = None, cwd: str | Path | None = None):
        self.uri, self.spec, self.sweep_dir = uri, spec, Path(sweep_dir)
        self.say = say  # where notes on an unreachable store go (the sweep's caller)
        self.cwd = Path(cwd) if cwd is not None else Path.cwd()  # a file store's artifacts go beside the caller
        self.experiment = experiment or spec.name
        self.ledger = ledger
        self._client = None
        self.state: dict = {}  # experiment_id, parent_run_id, trials: {trial name: {run_id, last_step}}
        self._log: BackgroundLog | None = None  # the driver's background thread, started by the first report

    @property
    def client(self):
        if self._client is None:
            self._client = client(self.uri, retries=False)
        return self._client

    # -- parent run --------------------------------------------------------------------

    def start(self, space_file: str | Path, timeout_s: float = DRAIN_S) -> str:
        """Create (or find again, on resume) the experiment and the sweep's parent run."""
        return retrying(lambda: self._start(space_file), time.monotonic() + timeout_s, "starting the sweep's run", self.say)

    def _start(self, space_file: str | Path) -> str:
        st = self.state
        if st.get("parent_run_id"):
            self.client.update_run(st["parent_run_id"], status="RUNNING")
            return st["parent_run_id"]
        if not st.get("parent_uid"):  # named (in the ledger) before the run exists: a kill or a failed call
            uid = self.ledger.attr(PARENT_UID) if self.ledger is not None else None  # after creating it finds it
            if not uid:  # again, never makes a second
                uid = uuid.uuid4().hex
                if self.ledger is not None:
                    self.ledger.set_attr(PARENT_UID, uid)
            st.update(tracking_uri=self.uri, parent_uid=uid)
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is None:
            artifacts = None if "://" in self.uri and not self.uri.startswith("sqlite") else artifact_root(self.uri, self.cwd)
            # the UI opens an experiment of this kind on its training-runs view
            exp_id = self.client.create_experiment(self.experiment, artifact_location=artifacts,
                                                   tags={"mlflow.experimentKind": "custom_model_development"})
        else:
            exp_id = exp.experiment_id
        spec, params = self.spec, sweep_params(self.spec)
        self.client.set_experiment_tag(exp_id, VIEW_TAG + view_key(spec.name),  # the runs table `sweeper ui` opens
                                       trials_view(spec.metric, spec.mode, sorted({p for p, _, _ in iter_params(spec.space)})))
        made = self.client.search_runs([exp_id], filter_string=f"tags.parent_uid = '{st['parent_uid']}'", max_results=1)
        run = made[0] if made else self._adopt_stale_parent(exp_id, params)
        if run is not None and run.info.status != "RUNNING":
            self.client.update_run(run.info.run_id, status="RUNNING")
        if run is None:
            run = self.client.create_run(exp_id, run_name=spec.name, tags={
                "sweep": spec.name, "role": "sweep", "metric": spec.metric, "mode": spec.mode,
                "sweep_dir": str(self.sweep_dir.resolve()), "parent_uid": st["parent_uid"],
                "mlflow.note.content": spec.description or spec.name,
            })
        from mlflow.entities import Param

        if not run.data.params:  # params are immutable in MLflow: logged once (a retry after a failed call
            self.client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in params.items()])  # finds none)
            self.client.log_artifact(run.info.run_id, str(space_file))
        st.update({"tracking_uri": self.uri, "experiment_id": exp_id, "parent_run_id": run.info.run_id, "trials": {}})
        return run.info.run_id

    def _adopt_stale_parent(self, exp_id: str, params: dict[str, str]):
        """A fresh start of this sweep directory: a parent run of it still RUNNING has no driver (this one
        holds the sweep's lock). Such a run is left by a start killed before Ray wrote anything to resume
        from, whose relaunch cleared the directory and the run mapping with it. The newest one without
        trials whose params agree with ours becomes this sweep's parent (so a kill there never leaves a
        second one); any other is ended as KILLED, so none stays RUNNING forever."""
        stale = self.client.search_runs([exp_id], order_by=["attributes.start_time DESC"], filter_string=(
            f"tags.role = 'sweep' and tags.sweep = '{self.spec.name}' and tags.sweep_dir = '{self.sweep_dir.resolve()}' "
            "and attributes.status = 'RUNNING'"))
        adopted = None
        for run in stale:
            has_trials = self.client.search_runs([exp_id], filter_string=f"tags.mlflow.parentRunId = '{run.info.run_id}'",
                                                 max_results=1)
            agrees = all(params.get(k) == v for k, v in run.data.params.items())
            if adopted is None and not has_trials and agrees:
                adopted = run
                self.client.set_tag(run.info.run_id, "parent_uid", self.state["parent_uid"])
            else:
                self.client.set_tag(run.info.run_id, "status", "abandoned: its sweep directory was started afresh")
                self.client.set_terminated(run.info.run_id, "KILLED")
        return adopted

    # -- child runs --------------------------------------------------------------------

    def _child(self, record: TrialRecord) -> dict:
        trials = self.state.setdefault("trials", {})
        if record.trial_id in trials:
            return trials[record.trial_id]
        found = self._find_child(record.trial_id)  # a kill between creating the run and saving the mapping
        if found is not None:
            trials[record.trial_id] = found
            return found
        from mlflow.entities import Param

        run = self.client.create_run(self.state["experiment_id"], run_name=record.trial_id, tags={
            "mlflow.parentRunId": self.state["parent_run_id"], "sweep": self.spec.name, "role": "trial",
            "trial_id": record.trial_id, "status": "running", "searched": ",".join(sorted(record.params)),
        })
        cfg = trial_config_for(self.spec, record.params).model_dump(mode="json")
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in flatten(cfg).items()])
        trials[record.trial_id] = {"run_id": run.info.run_id, "last_step": 0}
        return trials[record.trial_id]

    def _find_child(self, trial_id: str) -> dict | None:
        """The child run MLflow already holds for this trial under this sweep's parent, if any:
        MLflow is the record of which runs exist; the mapping file is only a cache of it."""
        runs = self.client.search_runs([self.state["experiment_id"]], filter_string=f"tags.trial_id = '{trial_id}'",
                                       max_results=50)
        mine = [r for r in runs if r.data.tags.get("mlflow.parentRunId") == self.state["parent_run_id"]]
        if not mine:
            return None
        run = min(mine, key=lambda r: r.info.start_time)
        steps = [m.step for m in self.client.get_metric_history(run.info.run_id, "step")]
        entry = {"run_id": run.info.run_id, "last_step": max(steps, default=0)}
        if run.info.status != "RUNNING" and run.data.tags.get("status") == "interrupted":
            entry["interrupted"] = True  # continued now: the same run goes on
        return entry

    # -- the driver's callbacks: queued, logged by the background thread ---------------------

    def on_result(self, record: TrialRecord) -> None:
        self._queue("on_result", record)

    def on_end(self, record: TrialRecord) -> None:
        self._queue("on_end", record)

    def _queue(self, method: str, record: TrialRecord) -> None:
        if self._log is None:
            self._log = BackgroundLog(self._apply, self.say)
        self._log.put(method, record)

    def _apply(self, method: str, record: TrialRecord) -> None:
        {"on_result": self._on_result, "on_end": self._on_end}[method](record)

    def drain(self, timeout_s: float = DRAIN_S) -> list[tuple[str, TrialRecord, str]]:
        """Wait for the background log (see BackgroundLog.drain). Returns what was not logged (the
        next launch logs it from the trials' folders, `reconcile`)."""
        if self._log is None:
            return []
        left, self._log = self._log.drain(timeout_s), None
        return left

    def reconcile(self, records: list[TrialRecord], timeout_s: float = DRAIN_S) -> int:
        """Before Ray starts: bring MLflow up to the ledger where a kill of the driver, or a tracking
        server that was down, cut its background log short: reports a trial made (its folder's
        metrics.jsonl) that MLflow lacks, and ends it never heard of. One search for the sweep's runs, then per trial
        with reports one read of its logged steps (`_fill_gaps`: a call per trial, so a resume of a
        sweep of hundreds of trials against a remote server makes hundreds), and a write only for
        what is missing. Returns the number of calls made."""
        from sweeper.records import FINAL

        def children() -> dict[str, Any]:
            runs = self.client.search_runs([self.state["experiment_id"]], max_results=50_000,
                                           filter_string=f"tags.mlflow.parentRunId = '{self.state['parent_run_id']}'")
            return {r.data.tags.get("trial_id"): r for r in runs}

        deadline = time.monotonic() + timeout_s
        runs = retrying(children, deadline, "reading the sweep's runs", self.say)
        made = 0
        for record in records:
            run = runs.get(record.trial_id)
            logged = int(run.data.metrics.get("step", 0)) if run is not None else 0
            trials = self.state.setdefault("trials", {})
            if run is not None and record.trial_id not in trials:  # known from here on: no second run, no search
                trials[record.trial_id] = {"run_id": run.info.run_id, "last_step": logged}
                if run.info.status != "RUNNING" and run.data.tags.get("status") == "interrupted":
                    trials[record.trial_id]["interrupted"] = True
            entry = trials.get(record.trial_id)
            if entry is not None:
                entry["last_step"] = max(entry["last_step"], logged)
            reports = trial_reports(record.path)  # the views' step may lag the trial's folder: read every trial's
            if reports:
                made += retrying(lambda: self._fill_gaps(record, reports, run), deadline, "logging a trial's reports", self.say)
            if record.status in FINAL and (run is None or run.info.status == "RUNNING" or run.data.tags.get("status") != record.status):
                retrying(lambda: self._on_end(record), deadline, "logging a trial's end", self.say)
                made += 1
        return made

    def _fill_gaps(self, record: TrialRecord, reports: list[tuple[int, dict]], run) -> int:
        """Log each report of `reports` whose step MLflow lacks for this trial (gaps below its last
        logged step too: a killed driver's queue can lose an early report). Returns how many."""
        from mlflow.entities import Metric

        have = {m.step for m in self.client.get_metric_history(run.info.run_id, "step")} if run is not None else set()
        missing = [(step, metrics) for step, metrics in reports if step not in have]
        if not missing:
            return 0
        entry = self._child(TrialRecord(record.trial_id, record.params, record.status, missing[0][0], missing[0][1], record.path))
        now = int(time.time() * 1000)
        batch: list = []
        for step, metrics in missing:  # whole reports per call: a report is logged entirely or not at all, so a
            report = [Metric(k, float(v), now, step) for k, v in trainer_metrics(metrics).items()  # retry after a
                      if isinstance(v, (int, float)) and v == v]  # failed call never takes a half-logged step as logged
            if batch and len(batch) + len(report) > 1000:  # MLflow takes at most 1000 metrics per call
                self.client.log_batch(entry["run_id"], metrics=batch)
                batch = []
            batch += report
        if batch:
            self.client.log_batch(entry["run_id"], metrics=batch)
        entry["last_step"] = max(entry["last_step"], max(step for step, _ in missing))
        return len(missing)

    def _on_result(self, record: TrialRecord) -> None:
        """Log one report of a trial at its training step (skipped if already logged)."""
        from mlflow.entities import Metric

        entry = self._child(record)
        resumed = entry.pop("interrupted", False)
        if resumed:  # the first report after an interrupt: the same run goes on
            self.client.update_run(entry["run_id"], status="RUNNING")
            self.client.set_tag(entry["run_id"], "status", "running")
        if record.step <= entry["last_step"]:
            return
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, record.step) for k, v in trainer_metrics(record.metrics).items()
                   if isinstance(v, (int, float)) and v == v]
        self.client.log_batch(entry["run_id"], metrics=metrics)
        entry["last_step"] = record.step  # saved with the mapping at the next new run or at the end; a resume
        # finds the last logged step in MLflow itself (_find_child), so nothing on disk follows every report

    def _on_end(self, record: TrialRecord) -> None:
        """A trial ended: its status, its config and its accuracy-vs-length plot."""
        self._on_result(record)  # Ray skips on_trial_result for the report that ends a trial
        entry = self._child(record)
        run_id = entry["run_id"]
        self.client.set_tag(run_id, "status", record.status)
        cfg = trial_config_for(self.spec, record.params)
        self.client.log_text(run_id, yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False), "config.yaml")
        if any(k.startswith("acc_") for k in record.metrics):
            with tempfile.TemporaryDirectory() as tmp:
                title = f"{record.trial_id} ({record.status}, step {record.step})"
                png = plots.trial_lengths(record.metrics, cfg.task.max_len, title, Path(tmp) / "accuracy_vs_length.png")
                self.client.log_artifact(run_id, str(png))
        self.client.set_terminated(run_id, RUN_STATUS.get(record.status, "FINISHED"))
