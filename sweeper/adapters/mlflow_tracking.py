"""MLflow tracking: one parent run per sweep, one nested child run per trial. The only module
of the project that imports mlflow.

    experiment (the sweep's name)
    └── parent run "<name>"        space file, compiled space, at the end: best config and score,
        │                          summary table (CSV, Markdown), sweep plots
        ├── child run "<trial>"    flattened trial config as params, every report at its training
        │                          step, tags trial_id / status / best, config YAML, length plot
        └── ...

The trial-to-run mapping lives in `<sweep dir>/mlflow_runs.json`, so a resumed sweep logs into
the same parent and the same children, and a report already logged is not logged twice.

Logging is off the sweep's critical path: the driver's callbacks put each report on a queue that
one background thread logs in order, retrying a tracking server that is down with backoff (the
trials train on meanwhile). What is still unlogged when the sweep stops is written to
`<sweep dir>/unlogged.jsonl`, listed, and logged first by the next launch of the sweep.

Tracking location: `--tracking-uri`, else $MLFLOW_TRACKING_URI, else an embedded SQLite store
`./mlflow.db` that needs no server.
"""

from __future__ import annotations

import csv
import io
import json
import os
import queue
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import yaml

from sweeper import plots
from sweeper.records import TrialRecord, is_per_length, ranked, score, trainer_metrics
from sweeper.space import SearchSpace, flatten, trial_config_for
from sweeper.status import format_table, write_json_atomic
from sweeper.fs import check_writable
from trainables.config import ConfigError
from trainables.errors import cut

RUNS_FILE = "mlflow_runs.json"
UNLOGGED_FILE = "unlogged.jsonl"  # reports (and trial ends) MLflow did not take before the sweep stopped
DEFAULT_DB = "mlflow.db"
BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # between tries of a call the tracking server failed; then 15 s each
PERMANENT_TRIES = 3  # a call that fails for another reason than an unreachable store: given up after this many
DRAIN_S = 60.0  # at the end of a sweep: how long the queue may take to empty before what is left is set aside
RUN_STATUS = {"completed": "FINISHED", "stopped": "FINISHED", "diverged": "FINISHED", "failed": "FAILED"}


def resolve_uri(cli_value: str | None) -> str:
    """--tracking-uri, else $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/mlflow.db (absolute)."""
    uri = cli_value or os.environ.get("MLFLOW_TRACKING_URI")
    if uri:
        return uri
    return f"sqlite:///{(Path.cwd() / DEFAULT_DB).resolve()}"


def uri_source(cli_value: str | None) -> str:
    """Where `resolve_uri` took the URI from, as a user would name it in an error."""
    if cli_value:
        return "--tracking-uri"
    return "$MLFLOW_TRACKING_URI" if os.environ.get("MLFLOW_TRACKING_URI") else "the default tracking URI"


def preflight(uri: str, timeout_s: float = 5.0, source: str = "--tracking-uri") -> None:
    """Fail fast, in one line, when the tracking store cannot be reached or written; `source`
    names where the URI came from (see `uri_source`)."""
    if uri.startswith(("http://", "https://")):
        try:
            with urllib.request.urlopen(f"{uri.rstrip('/')}/health", timeout=timeout_s) as response:
                if response.status != 200:
                    raise ConfigError(f"{source} {uri}: the MLflow server answered HTTP {response.status} on /health")
        except (urllib.error.URLError, OSError, ValueError) as err:
            reason = getattr(err, "reason", err)
            raise ConfigError(f"{source} {cut(uri, 120)}: MLflow tracking server unreachable ({cut(str(reason), 80)}); start it "
                              f"(on a cluster: is the mlflow Service up?), or, on one machine, "
                              f"unset it to log to ./{DEFAULT_DB}") from None
    elif uri.startswith("sqlite:///"):
        folder = Path(uri.removeprefix("sqlite:///")).parent
        if not folder.is_dir():
            raise ConfigError(f"{source} {cut(uri, 120)}: folder {cut(str(folder), 120)} does not exist")
        check_writable(folder, f"{source} {cut(uri, 120)}: folder")
    elif uri.startswith("file:") or "://" not in uri:
        check_writable(uri.removeprefix("file://").removeprefix("file:"), source)
    elif uri.split("://")[0] not in ("databricks", "postgresql", "mysql", "mssql"):
        raise ConfigError(f"{source} {cut(uri, 120)}: unknown scheme; use http(s)://HOST:PORT or sqlite:///PATH")


def store_lock(uri: str):
    """A file lock beside an embedded SQLite store while it may be created or migrated (two
    sweeps started at once in one folder would both run MLflow's migrations); no-op otherwise."""
    import contextlib

    from sweeper.lock import file_lock

    if uri.startswith("sqlite:///"):
        return file_lock(Path(uri.removeprefix("sqlite:///") + ".lock"))
    return contextlib.nullcontext()


def client(uri: str):
    from mlflow import MlflowClient

    return MlflowClient(tracking_uri=uri)


def unreachable(err: BaseException) -> bool:
    """Whether a tracking call failed because the store could not be reached (worth retrying),
    not because MLflow refused the call."""
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(err).__name__}: {err}"
    return any(sign in text for sign in (
        "Connection refused", "Max retries exceeded", "Failed to establish", "timed out", "Read timed out",
        "RemoteDisconnected", "Connection aborted", "database is locked", "status code 502", "status code 503",
        "status code 504", "ConnectionError", "Temporary failure in name resolution"))


def retrying(call, deadline: float, what: str):
    """`call()`, retried with backoff while the store is unreachable, until `deadline` (monotonic)."""
    for attempt in range(10**9):
        try:
            return call()
        except Exception as err:  # noqa: BLE001 - classified below
            wait = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
            if not unreachable(err) or time.monotonic() + wait > deadline:
                raise
            if attempt == 0:
                print(f"note: MLflow unreachable while {what} ({cut(str(err), 120)}); retrying", file=sys.stderr, flush=True)
            time.sleep(wait)


class BackgroundLog:
    """One thread that makes a tracker's calls in order, so a slow or failing tracking server
    never holds up the driver (and with it every trial). A call that fails because the store is
    unreachable is retried with backoff, however long, while the sweep runs; one MLflow refuses
    is tried PERMANENT_TRIES times, then set aside. `drain` waits for the queue to empty, for at
    most a deadline, and returns what is left and what was set aside: nothing is dropped."""

    def __init__(self, apply):
        self.apply = apply  # apply(method, record): the real call
        self.queue: queue.Queue = queue.Queue()
        self.failed: list[tuple[str, TrialRecord, str]] = []  # (method, record, why)
        self.deadline: float | None = None  # set by drain
        self.down_since: float | None = None
        self.thread = threading.Thread(target=self._run, name="mlflow-log", daemon=True)
        self.thread.start()

    def put(self, method: str, record: TrialRecord) -> None:
        self.queue.put((method, record))

    def _run(self) -> None:
        while True:
            item = self.queue.get()
            if item is None:
                return
            self._log(*item)
            self.queue.task_done()

    def _log(self, method: str, record: TrialRecord) -> None:
        attempt = 0
        while True:
            try:
                self.apply(method, record)
                if self.down_since is not None:
                    print(f"note: MLflow reachable again after {time.monotonic() - self.down_since:.0f} s; "
                          f"{self.queue.qsize()} queued calls to go", file=sys.stderr, flush=True)
                    self.down_since = None
                return
            except Exception as err:  # noqa: BLE001 - every failure is either retried or kept
                down = unreachable(err)
                if down and self.down_since is None:
                    self.down_since = time.monotonic()
                    print(f"warning: MLflow unreachable ({cut(str(err), 160)}); the sweep goes on, its reports "
                          "are queued and logged when the server answers", file=sys.stderr, flush=True)
                attempt += 1
                wait = BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
                out_of_time = self.deadline is not None and time.monotonic() + wait > self.deadline
                if out_of_time or (not down and attempt >= PERMANENT_TRIES):
                    self.failed.append((method, record, f"{type(err).__name__}: {cut(str(err), 160)}"))
                    return
                time.sleep(wait)

    def drain(self, timeout_s: float) -> list[tuple[str, TrialRecord, str]]:
        """Wait until every queued call is made or set aside (at most `timeout_s` more for retries);
        stop the thread; return the calls not made, in order."""
        self.deadline = time.monotonic() + timeout_s
        self.queue.put(None)
        self.thread.join()
        left = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not None:
                left.append((*item, "not tried: the sweep stopped first"))
        return self.failed + left


class SweepTracker:
    """Mirrors a sweep into MLflow. Picklable (Ray stores it with the experiment): the client
    and the mapping are rebuilt from `uri` and the runs file after unpickling."""

    def __init__(self, uri: str, spec: SearchSpace, sweep_dir: Path, experiment: str | None = None):
        self.uri, self.spec, self.sweep_dir = uri, spec, Path(sweep_dir)
        self.experiment = experiment or spec.name
        self._client = None
        self._state: dict | None = None
        self._restored = False  # an unpickled copy (a resumed sweep's callback) catches up with MLflow
        self._log: BackgroundLog | None = None  # the driver's background thread, started by the first report

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_client": None, "_state": None, "_log": None}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, _restored=True)

    @property
    def client(self):
        if self._client is None:
            # our own retries (BackgroundLog, retrying) decide how long to wait for a server: MLflow's
            # HTTP client would otherwise retry each call for minutes on its own
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_MAX_RETRIES", "0")
            os.environ.setdefault("MLFLOW_HTTP_REQUEST_TIMEOUT", "20")
            self._client = client(self.uri)
        return self._client

    # -- the mapping file ------------------------------------------------------------

    @property
    def state(self) -> dict:
        if self._state is None:
            path = self.sweep_dir / RUNS_FILE
            self._state = json.loads(path.read_text()) if path.exists() else {}
            if self._state.get("tracking_uri") not in (None, self.uri):  # moved stores: start a new mapping
                self._state = {}
            if self._restored:
                self._catch_up(self._state.get("trials", {}))
        return self._state

    def _catch_up(self, trials: dict) -> None:
        """A kill can land between logging a report and saving the mapping: take each run's last
        logged step from MLflow itself, so a resumed sweep never logs a step twice."""
        for entry in trials.values():
            try:
                logged = self.client.get_run(entry["run_id"]).data.metrics.get("step")
            except Exception:  # noqa: BLE001 - a run the store no longer has: keep the file's word
                continue
            if logged is not None:
                entry["last_step"] = max(entry["last_step"], int(logged))

    def _save(self) -> None:
        write_json_atomic(self.sweep_dir / RUNS_FILE, self.state)

    # -- parent run --------------------------------------------------------------------

    def start(self, space_file: str | Path, resuming: bool = False, timeout_s: float = DRAIN_S) -> str:
        """Create (or find again, on resume) the experiment and the sweep's parent run, then log
        what an earlier run of the sweep could not (UNLOGGED_FILE). A resumed sweep whose run
        mapping is lost finds its parent in MLflow (tagged with the sweep's directory)."""
        if resuming and not self.state.get("parent_run_id"):
            retrying(self._find_parent, time.monotonic() + timeout_s, "looking up the sweep's run")
        run_id = retrying(lambda: self._start(space_file), time.monotonic() + timeout_s, "starting the sweep's run")
        self.replay_unlogged(timeout_s)
        return run_id

    def _find_parent(self) -> None:
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is None:
            return
        runs = self.client.search_runs([exp.experiment_id], max_results=1, order_by=["attributes.start_time DESC"],
                                       filter_string=f"tags.role = 'sweep' and tags.sweep = '{self.spec.name}' "
                                                     f"and tags.sweep_dir = '{self.sweep_dir.resolve()}'")
        if runs:
            self.state.update({"tracking_uri": self.uri, "experiment_id": exp.experiment_id,
                               "parent_run_id": runs[0].info.run_id, "trials": {}})  # children: found by trial id
            self._save()

    def _start(self, space_file: str | Path) -> str:
        st = self.state
        if st.get("parent_run_id"):
            self.client.update_run(st["parent_run_id"], status="RUNNING")
            return st["parent_run_id"]
        if not st.get("parent_uid"):  # named before the run exists: a kill or a failed call after
            st.update(tracking_uri=self.uri, parent_uid=uuid.uuid4().hex)  # creating it finds it again, never makes a second
            self._save()
        exp = self.client.get_experiment_by_name(self.experiment)
        if exp is None:
            artifacts = None if "://" in self.uri and not self.uri.startswith("sqlite") else (Path.cwd() / "mlartifacts").resolve().as_uri()
            # the UI opens an experiment of this kind on its training-runs view
            exp_id = self.client.create_experiment(self.experiment, artifact_location=artifacts,
                                                   tags={"mlflow.experimentKind": "custom_model_development"})
        else:
            exp_id = exp.experiment_id
        spec, params = self.spec, self._sweep_params()
        made = self.client.search_runs([exp_id], filter_string=f"tags.parent_uid = '{st['parent_uid']}'", max_results=1)
        run = made[0] if made else self._adopt_stale_parent(exp_id, params)
        if run is None:
            run = self.client.create_run(exp_id, run_name=spec.name, tags={
                "sweep": spec.name, "role": "sweep", "metric": spec.metric, "mode": spec.mode,
                "sweep_dir": str(self.sweep_dir.resolve()), "parent_uid": st["parent_uid"],
                "mlflow.note.content": spec.description or spec.name,
            })
        from mlflow.entities import Param

        self.client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in params.items()])
        self.client.log_artifact(run.info.run_id, str(space_file))
        st.update({"tracking_uri": self.uri, "experiment_id": exp_id, "parent_run_id": run.info.run_id, "trials": {}})
        self._save()
        return run.info.run_id

    def _sweep_params(self) -> dict[str, str]:
        """The parent run's params: the budget, scheduler, searcher, fixed settings and the space."""
        from sweeper.adapters.optuna_search import describe_space

        spec = self.spec
        params = {
            "budget.num_samples": spec.budget.num_samples, "budget.max_concurrent": spec.budget.max_concurrent,
            "budget.max_steps": spec.budget.max_steps, "budget.eval_every": spec.budget.eval_every,
            "scheduler": spec.scheduler.type, "searcher.sampler": spec.searcher.sampler, "searcher.seed": spec.searcher.seed,
            **{f"fixed.{k}": v for k, v in flatten(spec.fixed).items()},
        }
        for line in describe_space(spec):
            name, dist = line.strip().split(None, 1)
            params[f"space.{name}"] = dist[:500]
        return {k: str(v)[:6000] for k, v in params.items()}

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
            self._save()
            return found
        from mlflow.entities import Param

        run = self.client.create_run(self.state["experiment_id"], run_name=record.trial_id, tags={
            "mlflow.parentRunId": self.state["parent_run_id"], "sweep": self.spec.name, "role": "trial",
            "trial_id": record.trial_id, "status": "running", "searched": ",".join(sorted(record.params)),
        })
        cfg = trial_config_for(self.spec, record.params).model_dump(mode="json")
        self.client.log_batch(run.info.run_id, params=[Param(k, str(v)) for k, v in flatten(cfg).items()])
        trials[record.trial_id] = {"run_id": run.info.run_id, "last_step": 0}
        self._save()
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
        return {"run_id": run.info.run_id, "last_step": max(steps, default=0)}

    # -- the driver's callbacks: queued, logged by the background thread ---------------------

    def on_result(self, record: TrialRecord) -> None:
        self._queue("on_result", record)

    def on_end(self, record: TrialRecord) -> None:
        self._queue("on_end", record)

    def _queue(self, method: str, record: TrialRecord) -> None:
        if self._log is None:
            self._log = BackgroundLog(self._apply)
            _LIVE.append(self)
        self._log.put(method, record)

    def _apply(self, method: str, record: TrialRecord) -> None:
        {"on_result": self._on_result, "on_end": self._on_end}[method](record)

    def drain(self, timeout_s: float = DRAIN_S) -> list[tuple[str, TrialRecord, str]]:
        """Wait for the background log (see BackgroundLog.drain), save the mapping, and keep what
        was not logged in UNLOGGED_FILE for the next launch. Returns it."""
        if self._log is None:
            return []
        left, self._log = self._log.drain(timeout_s), None
        if self in _LIVE:
            _LIVE.remove(self)
        if self._state is not None:
            self._save()
        if left:
            keep_unlogged(self.sweep_dir / UNLOGGED_FILE, left)
        return left

    def replay_unlogged(self, timeout_s: float = DRAIN_S) -> int:
        """Log what an earlier run of the sweep could not; what fails again stays in the file."""
        path = self.sweep_dir / UNLOGGED_FILE
        if not path.exists():
            return 0
        entries = []
        for line in path.read_text().splitlines():
            try:
                entry = json.loads(line)
                entries.append((entry["method"], TrialRecord.from_dict(entry["record"])))
            except (ValueError, KeyError, TypeError):
                continue  # a line cut by a kill mid-write: the rest still counts
        path.unlink()
        log = BackgroundLog(self._apply)
        for method, record in entries:
            log.put(method, record)
        left = log.drain(timeout_s)
        if left:
            keep_unlogged(path, left)
        print(f"MLflow: logged {len(entries) - len(left)} of {len(entries)} calls an earlier run of this sweep could not"
              + (f"; {len(left)} still in {path}" if left else ""), flush=True)
        return len(entries) - len(left)

    def reconcile(self, records: list[TrialRecord], timeout_s: float = DRAIN_S) -> int:
        """On resume, before Ray starts: bring MLflow up to the ledger where a kill of the driver cut
        its background log short: reports a trial made (its result file in the sweep's storage) that
        MLflow lacks, and ends it never heard of. One search for the sweep's runs, then per trial
        with reports one read of its logged steps (`_fill_gaps`: a call per trial, so a resume of a
        sweep of hundreds of trials against a remote server makes hundreds), and a write only for
        what is missing. Returns the number of calls made."""
        from sweeper.records import FINAL

        def children() -> dict[str, Any]:
            runs = self.client.search_runs([self.state["experiment_id"]], max_results=50_000,
                                           filter_string=f"tags.mlflow.parentRunId = '{self.state['parent_run_id']}'")
            return {r.data.tags.get("trial_id"): r for r in runs}

        deadline = time.monotonic() + timeout_s
        runs = retrying(children, deadline, "reading the sweep's runs")
        made = 0
        for record in records:
            run = runs.get(record.trial_id)
            logged = int(run.data.metrics.get("step", 0)) if run is not None else 0
            entry = self.state.setdefault("trials", {}).get(record.trial_id)
            if entry is not None:
                entry["last_step"] = max(entry["last_step"], logged)
            reports = trial_reports(record.path)  # status.json's step may lag its result file: read every trial's
            if reports:
                made += retrying(lambda: self._fill_gaps(record, reports, run), deadline, "logging a trial's reports")
            if record.status in FINAL and (run is None or run.info.status == "RUNNING" or run.data.tags.get("status") != record.status):
                retrying(lambda: self._on_end(record), deadline, "logging a trial's end")
                made += 1
        self._save()
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
            if resumed:
                self._save()
            return
        now = int(time.time() * 1000)
        metrics = [Metric(k, float(v), now, record.step) for k, v in trainer_metrics(record.metrics).items()
                   if isinstance(v, (int, float)) and v == v]
        self.client.log_batch(entry["run_id"], metrics=metrics)
        entry["last_step"] = record.step  # saved with the mapping at the next new run or at the end; a resume
        # takes the last logged step from MLflow itself (_catch_up), so the file need not follow every report

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

    # -- the end of the sweep -------------------------------------------------------------

    def finish(self, records: list[TrialRecord], baselines: list[dict], interrupted: bool, timeout_s: float = DRAIN_S) -> list[Path]:
        """Best-trial tags, summary tables and sweep plots on the parent run; returns the plot files.
        Retried while the store is unreachable, for at most `timeout_s`."""
        return retrying(lambda: self._finish(records, baselines, interrupted), time.monotonic() + timeout_s,
                        "finishing the sweep's run")

    def _finish(self, records: list[TrialRecord], baselines: list[dict], interrupted: bool) -> list[Path]:
        from mlflow.entities import Metric, RunTag

        spec, parent = self.spec, self.state["parent_run_id"]
        trials = self.state.get("trials", {})
        if not interrupted:
            self._drop_orphans(trials, {r.trial_id for r in records})
        top = ranked(records, spec.metric, spec.mode)
        for r in records:
            if r.trial_id in trials:
                self.client.set_tag(trials[r.trial_id]["run_id"], "best", "true" if top and r is top[0] else "false")
        if top:
            best = top[0]
            cfg = trial_config_for(spec, best.params).model_dump(mode="json")
            # the best point as tags, not params: params are immutable in MLflow, and a resumed sweep's
            # best trial may differ from the one an interrupted run wrote
            self.client.log_batch(parent, metrics=[Metric(f"best_{spec.metric}", score(best, spec.metric), int(time.time() * 1000), 0)],
                                  tags=[RunTag(f"best.{k}", str(v)) for k, v in best.params.items()])
            self.client.set_tag(parent, "best_trial", best.trial_id)
            self.client.log_text(parent, yaml.safe_dump(cfg, sort_keys=False), "best_config.yaml")
        self.client.log_text(parent, summary_csv(records), "summary.csv")
        self.client.log_text(parent, "```\n" + format_table(records, spec.metric, spec.mode, top=len(records)) + "\n```\n", "summary.md")
        written = self.sweep_plots(records, baselines)
        for png in written:
            self.client.log_artifact(parent, str(png), "plots")
        for r in records:  # trials an interrupt cut off: say so; a resume continues the same run
            if r.status == "interrupted" and r.trial_id in trials:
                self.client.set_tag(trials[r.trial_id]["run_id"], "status", "interrupted")
                self.client.set_terminated(trials[r.trial_id]["run_id"], "KILLED")
                trials[r.trial_id]["interrupted"] = True
        self._save()
        self.client.set_terminated(parent, "KILLED" if interrupted else "FINISHED")
        return written

    def _drop_orphans(self, trials: dict, known: set[str]) -> None:
        """Runs of trials the sweep no longer has (started just before a kill, after Ray's last
        snapshot; the resumed sweep sampled a new trial in their place): tagged and soft-deleted,
        so the experiment shows one run per trial; `mlflow runs restore --run-id ID` brings one back."""
        for trial_id in sorted(set(trials) - known):
            run_id = trials.pop(trial_id)["run_id"]
            self.client.set_tag(run_id, "status", "orphaned")
            self.client.set_terminated(run_id, "KILLED")
            self.client.delete_run(run_id)
        self._save()

    def sweep_plots(self, records: list[TrialRecord], baselines: list[dict]) -> list[Path]:
        spec = self.spec
        max_len = trial_config_for(spec, records[0].params).task.max_len if records else 25
        histories = {}
        for r in records:
            entry = self.state.get("trials", {}).get(r.trial_id)
            if entry:
                histories[r.trial_id] = [(m.step, m.value) for m in self.client.get_metric_history(entry["run_id"], spec.metric)]
        out = [
            plots.metric_vs_params(records, spec.metric, baselines, self.sweep_dir / f"{spec.metric}_vs_params.png"),
            plots.top_lengths(records, spec.metric, spec.mode, max_len, self.sweep_dir / "top_trials_vs_length.png"),
            plots.learning_curves(histories, {r.trial_id: r.status for r in records}, spec.metric, self.sweep_dir / "learning_curves.png"),
        ]
        return [p for p in out if p is not None]



def keep_unlogged(path: Path, left: list[tuple[str, TrialRecord, str]]) -> None:
    """Append calls MLflow did not take to UNLOGGED_FILE (read back by `replay_unlogged`)."""
    with open(path, "a") as f:
        for method, record, why in left:
            f.write(json.dumps({"method": method, "record": record.to_dict(), "why": why}) + "\n")


def trial_reports(trial_dir: str) -> list[tuple[int, dict]]:
    """(step, metrics) of every report in a trial's result file (Ray Tune's result.json, one JSON
    object per line); [] where there is none. A line cut by a kill is skipped."""
    path = Path(trial_dir) / "result.json" if trial_dir else None
    if path is None or not path.is_file():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict) and isinstance(data.get("step"), (int, float)):
            out.append((int(data["step"]), {k: v for k, v in data.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}))
    return out


_LIVE: list[SweepTracker] = []  # trackers of this process whose background log runs (a resumed sweep's is Ray's copy)


def drain_all(timeout_s: float = DRAIN_S) -> list[tuple[str, TrialRecord, str]]:
    """Drain every live tracker of this driver (see SweepTracker.drain)."""
    left = []
    for tracker in list(_LIVE):
        left += tracker.drain(timeout_s)
    return left


def describe_unlogged(left: list[tuple[str, TrialRecord, str]], sweep_dir: Path) -> str:
    """One line for the end of a sweep: what MLflow did not take, and where it waits."""
    trials = sorted({record.trial_id for _, record, _ in left})
    return (f"warning: MLflow did not take {len(left)} calls of {len(trials)} trials ({cut(', '.join(trials), 80)}; "
            f"last error: {left[-1][2]}); kept in {sweep_dir / UNLOGGED_FILE}: the next launch of this sweep logs them")


def summary_csv(records: list[TrialRecord]) -> str:
    params = sorted({k for r in records for k in r.params})
    metrics = sorted({k for r in records for k in r.metrics if is_per_length(k)})
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["trial_id", "status", "step", *params, *metrics])
    for r in records:
        writer.writerow([r.trial_id, r.status, r.step, *(r.params.get(p, "") for p in params), *(r.metrics.get(m, "") for m in metrics)])
    return buf.getvalue()


def experiment_url(uri: str, experiment: str, ui_address: str | None = None) -> str | None:
    """The MLflow UI address of a sweep's training runs (the server's, or a local `sweeper ui`'s):
    the experiment's runs table, not MLflow 3's GenAI overview that the bare experiment address
    opens, sorted by the sweep's metric, best first. Sorted by anything but date, the UI lists the
    trials as rows of their own instead of folding them under the sweep's parent run (MLflow
    3.17 ignores a `searchFilter` in the address; tests/test_mlflow_ui.py shows both)."""
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    base = ui_address or (uri if uri.startswith("http") else None)
    if exp is None or not base:
        return None
    url = f"{base.rstrip('/')}/#/experiments/{exp.experiment_id}/runs"
    parents = c.search_runs([exp.experiment_id], filter_string="tags.role = 'sweep'", max_results=1,
                            order_by=["attributes.start_time DESC"])
    metric = parents[0].data.tags.get("metric") if parents else None
    if not metric:
        return url
    ascending = "true" if parents[0].data.tags.get("mode") == "min" else "false"
    return f"{url}?orderByKey={urllib.parse.quote(f'metrics.`{metric}`')}&orderByAsc={ascending}"


def charts_url(runs_url: str) -> str:
    """The same runs as charts: each metric's curves of every trial, side by side."""
    return f"{runs_url}{'&' if '?' in runs_url else '?'}compareRunsMode=CHART"


def load_runs(sweep_dir: Path) -> dict[str, Any]:
    path = Path(sweep_dir) / RUNS_FILE
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: unreadable ({cut(str(err), 100)})") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a run mapping (a JSON object was expected)")
    return data


def fetch_trial_runs(uri: str, sweep_name: str, experiment: str | None = None) -> list[dict]:
    """The child runs of a sweep, newest parent first: [{run_id, trial_id, status, best, params, metrics}]."""
    c = client(uri)
    exp = c.get_experiment_by_name(experiment or sweep_name)
    if exp is None:
        raise ConfigError(f"{sweep_name}: no MLflow experiment `{experiment or sweep_name}` at {uri}")
    parents = c.search_runs([exp.experiment_id], filter_string=f"tags.role = 'sweep' and tags.sweep = '{sweep_name}'",
                            order_by=["attributes.start_time DESC"], max_results=1)
    if not parents:
        raise ConfigError(f"{sweep_name}: no sweep run in experiment `{exp.name}` at {uri}")
    parent = parents[0].info.run_id
    runs = c.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'", max_results=10_000)
    return [{
        "run_id": r.info.run_id, "trial_id": r.data.tags.get("trial_id", r.info.run_name),
        "status": r.data.tags.get("status", ""), "best": r.data.tags.get("best") == "true",
        "searched": [s for s in r.data.tags.get("searched", "").split(",") if s],
        "params": dict(r.data.params), "metrics": dict(r.data.metrics),
    } for r in runs]


def serve_ui(uri: str, host: str, port: int):
    """Start `mlflow ui` on a local store (a subprocess); the caller waits on it."""
    import subprocess
    import sys

    cmd = [sys.executable, "-m", "mlflow", "ui", "--backend-store-uri", uri, "--host", host, "--port", str(port)]
    return subprocess.Popen(cmd)
