"""MLflow tracking, the sweep's mirror: one parent run per sweep, one nested child run per trial.

    experiment (the sweep's name)
    └── parent run "<name>"        space file, compiled space, at the end: best config and score,
        │                          summary table (CSV, Markdown), sweep plots
        ├── child run "<trial>"    flattened trial config as params, every report at its training
        │                          step, tags trial_id / status / best, config YAML, length plot
        └── ...

MLflow is a view of the ledger and the trials' folders, kept by one idempotent `sync` per trial:
runs are found again by their tags (the parent by the uid the ledger keeps for it, written there
before the run is made; each child by its trial's name), the trial's run is made if MLflow has
none, every report its folder holds that MLflow lacks is logged, and its end once it ended. A
second sync writes nothing, and a trial never gets a second run.

Syncs run as reports come, off the sweep's critical path: the driver's callbacks queue them for one
background thread (`mlflow_store.BackgroundLog`), which retries a tracking server that is down with
backoff (the trials train on meanwhile); every trial is synced again at the start of a launch and
at its end, so what a kill or an outage left out is logged from the folders.
"""

from __future__ import annotations

import tempfile
import time
import uuid
from pathlib import Path
from typing import Callable
from urllib.parse import urlparse
from urllib.request import url2pathname

import yaml

from sweeper import plots
from sweeper.adapters.mlflow_store import VIEW_TAG, BackgroundLog, client, deleted_experiment, retrying, trials_view, view_key
from sweeper.records import FINAL, TrialRecord, trainer_metrics
from sweeper.space import SearchSpace, iter_params, trial_config_for
from sweeper.tracking_uri import artifacts_folder
from trainables.config import flatten
from trainables.run_dir import trial_reports

PARENT_UID = "sweeper.mlflow_uid"  # the ledger's attribute naming the sweep's parent run (its tag parent_uid)
DRAIN_S = 60.0  # at the end of a sweep: how long the queue may take to empty before what is left is set aside
RUN_STATUS = {"completed": "FINISHED", "stopped": "FINISHED", "diverged": "FINISHED", "failed": "FAILED"}


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
        self.state: dict = {}  # experiment_id, parent_run_id, trials: {name: {run_id, steps, caught_up, status, open}}
        self._log: BackgroundLog | None = None  # the driver's background thread, started by the first report

    @property
    def client(self):
        if self._client is None:
            self._client = client(self.uri)
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
            folder = artifacts_folder(self.uri, self.cwd)
            artifacts = None if folder is None else folder.resolve().as_uri()
            # the UI opens an experiment of this kind on its training-runs view
            exp_id = self.client.create_experiment(self.experiment, artifact_location=artifacts,
                                                   tags={"mlflow.experimentKind": "custom_model_development"})
        elif exp.lifecycle_stage == "deleted":  # (a store the preflight does not read, or deleted since)
            raise deleted_experiment("MLflow", self.experiment, self.uri, exp.experiment_id)
        else:
            exp_id = exp.experiment_id
        spec, params = self.spec, sweep_params(self.spec)
        self.client.set_experiment_tag(exp_id, VIEW_TAG + view_key(spec.name),  # the runs table `sweeper ui` opens
                                       trials_view(spec.metric, spec.mode, sorted({p for p, _, _ in iter_params(spec.space)})))
        made = self.client.search_runs([exp_id], filter_string=f"tags.parent_uid = '{st['parent_uid']}'", max_results=1)
        run = made[0] if made else None
        if run is not None and run.info.status != "RUNNING":
            self.client.update_run(run.info.run_id, status="RUNNING")
        if run is None:
            self._end_abandoned(exp_id)
            run = self.client.create_run(exp_id, run_name=spec.name, tags={
                "sweep": spec.name, "role": "sweep", "metric": spec.metric, "mode": spec.mode,
                "sweep_dir": str(self.sweep_dir.resolve()), "parent_uid": st["parent_uid"],
                "mlflow.note.content": spec.description or spec.name,
            })
        from mlflow.entities import Param

        if not run.data.params:  # params are immutable in MLflow: logged once (a retry after a failed call
            self.client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in params.items()])  # finds none)
            self.client.log_artifact(run.info.run_id, str(space_file))
        st.update({"tracking_uri": self.uri, "experiment_id": exp_id, "parent_run_id": run.info.run_id})
        st.pop("trials", None)  # read from MLflow at the first sync
        return run.info.run_id

    def local_artifact_dirs(self) -> list[Path]:
        """The folders on this machine that hold this sweep's runs' artifacts (an embedded store's),
        one per run: what the caller's umask is applied to at the sweep's end (none if MLflow fails)."""
        ids = [self.state.get("parent_run_id"), *(t["run_id"] for t in self.state.get("trials", {}).values())]
        try:
            uris = [self.client.get_run(run_id).info.artifact_uri for run_id in ids if run_id]
        except Exception:  # noqa: BLE001 - a store gone by the end: nothing of it to narrow
            return []
        folders = [Path(url2pathname(urlparse(uri).path)) for uri in uris if uri and urlparse(uri).scheme == "file"]
        return [f.parent if f.name == "artifacts" else f for f in folders]

    def _end_abandoned(self, exp_id: str) -> None:
        """A fresh start of this sweep's folder: a parent run of the folder still RUNNING belongs to a
        start whose ledger is gone (--restart, or a folder removed by hand) and can never finish: it
        is ended as KILLED, tagged abandoned."""
        stale = self.client.search_runs([exp_id], filter_string=(
            f"tags.role = 'sweep' and tags.sweep = '{self.spec.name}' and tags.sweep_dir = '{self.sweep_dir.resolve()}' "
            "and attributes.status = 'RUNNING'"))
        for run in stale:
            self.client.set_tag(run.info.run_id, "status", "abandoned: its sweep directory was started afresh")
            self.client.set_terminated(run.info.run_id, "KILLED")

    # -- child runs: one idempotent sync per trial -------------------------------------------

    def sync(self, record: TrialRecord) -> None:
        """Bring the trial's child run up to `record` and its folder, in the background (queued in
        order, off the sweep's critical path)."""
        if self._log is None:
            self._log = BackgroundLog(lambda method, rec: self._sync(rec, live=True), self.say)
        self._log.put("sync", record)

    def drain(self, timeout_s: float = DRAIN_S) -> list[tuple[str, TrialRecord, str]]:
        """Wait for the background syncs (see BackgroundLog.drain). Returns what was not logged (the
        next sync of those trials logs it from their folders)."""
        if self._log is None:
            return []
        left, self._log = self._log.drain(timeout_s), None
        return left

    def sync_all(self, records: list[TrialRecord], timeout_s: float = DRAIN_S) -> int:
        """Sync every trial now (at the start of a launch, and at its end): what a killed driver or an
        unreachable server left out is logged from the trials' folders. Returns the calls that wrote."""
        deadline = time.monotonic() + timeout_s
        self._known(deadline)
        return sum(retrying(lambda r=record: self._sync(r), deadline, "logging the trials", self.say) for record in records)

    def _known(self, deadline: float) -> None:
        """Every child run this sweep's parent has, by trial name: one search, once per launch."""
        if "trials" in self.state:
            return

        def children() -> list:
            return self.client.search_runs([self.state["experiment_id"]], max_results=50_000,
                                           filter_string=f"tags.mlflow.parentRunId = '{self.state['parent_run_id']}'")

        trials: dict[str, dict] = {}
        for run in sorted(retrying(children, deadline, "reading the sweep's runs", self.say), key=lambda r: r.info.start_time):
            name = run.data.tags.get("trial_id")
            if name and name not in trials:  # the oldest run of a name is the trial's
                trials[name] = {"run_id": run.info.run_id, "steps": None, "caught_up": False,
                                "status": run.data.tags.get("status"), "open": run.info.status == "RUNNING"}
        self.state["trials"] = trials

    def _sync(self, record: TrialRecord, live: bool = False) -> int:
        """Create the trial's run if MLflow has none, log every report of its folder (and `record`'s)
        that MLflow lacks, and its end once it ended. Idempotent: a second call writes nothing.
        `live`: `record` is the report that just came; the folder's later ones wait for their own
        (each record adds what only the driver saw: the trial's system metrics)."""
        self._known(time.monotonic() + DRAIN_S)
        entry, writes = self.state["trials"].get(record.trial_id), 0
        if entry is None:
            if not record.metrics and record.status not in FINAL:
                return 0  # nothing to show yet: a run is made with the trial's first report
            entry, writes = self._create(record), 1
        if not entry.get("params", True):  # made, its parameters not logged yet (the call failed: again)
            self._log_params(entry, record)
            writes += 1
        if entry["steps"] is None:  # the first sync of this trial in this launch: what MLflow holds
            entry["steps"] = {int(m.step) for m in self.client.get_metric_history(entry["run_id"], "step")}
        reports: dict[int, dict] = {}
        step = int(record.metrics["step"]) if "step" in record.metrics else None
        if not entry["caught_up"]:  # until MLflow has its folder's reports (whole reports: a record may be partial)
            reports = {s: m for s, m in trial_reports(record.path) if not live or step is None or s <= step}
        if step is not None:
            reports[step] = {**reports.get(step, {}), **record.metrics}
        writes += self._log_reports(entry, reports)
        entry["caught_up"] = True  # from here on each report comes with its record
        if record.status == "running" and not entry["open"]:  # an interrupted trial trains again: the same run
            self.client.update_run(entry["run_id"], status="RUNNING")
            self.client.set_tag(entry["run_id"], "status", "running")
            entry.update(open=True, status="running")
            writes += 1
        if record.status in FINAL and (entry["status"] != record.status or entry["open"]):
            self._end(entry, record)
            writes += 1
        return writes

    def _create(self, record: TrialRecord) -> dict:
        """The trial's run, made once: a create whose answer was lost (the server went down with the
        call in flight) is found, not made twice, when the call is tried again."""
        name, creating = record.trial_id, self.state.setdefault("creating", set())
        made = self._child_named(name) if name in creating else None
        found = made is not None  # its reports MLflow may hold are read, not assumed none
        if made is None:
            creating.add(name)
            made = self.client.create_run(self.state["experiment_id"], run_name=name, tags={
                "mlflow.parentRunId": self.state["parent_run_id"], "sweep": self.spec.name, "role": "trial",
                "trial_id": name, "status": "running", "searched": ",".join(sorted(record.params)),
            })
        creating.discard(name)
        entry = self.state["trials"][name] = {"run_id": made.info.run_id, "steps": None if found else set(), "caught_up": False,
                                              "status": "running", "open": True, "params": False}
        return entry

    def _child_named(self, name: str):
        """The parent's child run of trial `name`, if MLflow has one."""
        found = self.client.search_runs([self.state["experiment_id"]], max_results=1, order_by=["attributes.start_time ASC"],
                                        filter_string=f"tags.mlflow.parentRunId = '{self.state['parent_run_id']}' "
                                                      f"and tags.trial_id = '{name}'")
        return found[0] if found else None

    def _log_params(self, entry: dict, record: TrialRecord) -> None:
        from mlflow.entities import Param

        cfg = trial_config_for(self.spec, record.params).model_dump(mode="json")
        self.client.log_batch(entry["run_id"], params=[Param(k, str(v)) for k, v in flatten(cfg).items()])
        entry["params"] = True

    def _log_reports(self, entry: dict, reports: dict[int, dict]) -> int:
        """The reports MLflow lacks, whole reports per call (a report is logged entirely or not at all,
        so a retry after a failed call never takes a half-logged step as logged). Returns the calls."""
        from mlflow.entities import Metric

        missing = {step: metrics for step, metrics in reports.items() if step not in entry["steps"]}
        now, batch, calls, steps = int(time.time() * 1000), [], 0, []
        for step in sorted(missing):
            report = [Metric(k, float(v), now, step) for k, v in trainer_metrics(missing[step]).items()
                      if isinstance(v, (int, float)) and v == v]
            if batch and len(batch) + len(report) > 1000:  # MLflow takes at most 1000 metrics per call
                self.client.log_batch(entry["run_id"], metrics=batch)
                entry["steps"].update(steps)
                batch, steps, calls = [], [], calls + 1
            batch, steps = batch + report, steps + [step]
        if batch:
            self.client.log_batch(entry["run_id"], metrics=batch)
            entry["steps"].update(steps)
            calls += 1
        return calls

    def _end(self, entry: dict, record: TrialRecord) -> None:
        """A trial ended: its status, its config and its accuracy-vs-length plot."""
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
        entry.update(status=record.status, open=False)


def sweep_params(spec) -> dict[str, str]:
    """The parent run's params: the budget, scheduler, searcher, fixed settings and the space."""
    from sweeper.adapters.optuna_search import describe_space
    from trainables.config import flatten

    params = {
        "budget.num_samples": spec.budget.num_samples, "budget.max_concurrent": spec.budget.max_concurrent,
        "budget.max_steps": spec.budget.max_steps, "budget.eval_every": spec.budget.eval_every,
        "scheduler": spec.scheduler.type, "searcher.sampler": spec.searcher.sampler, "searcher.seed": spec.searcher.seed,
        **({"searcher.startup_trials": spec.searcher.startup_trials} if spec.searcher.startup_trials else {}),
        **{f"fixed.{k}": v for k, v in flatten(spec.fixed).items()},
    }
    for line in describe_space(spec):
        name, dist = line.strip().split(None, 1)
        params[f"space.{name}"] = dist[:500]
    return {k: str(v)[:6000] for k, v in params.items()}
