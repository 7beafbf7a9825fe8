"""MLflow, the connection: calls retried while the store is down, one background thread that logs
in order, the sweep's saved view, and the read side (`sweeper ui`, `sweeper report`). With
`mlflow_tracking.py` (the sweep's mirror) the only modules of the project that import mlflow; the
store's address and its preflight are `sweeper/tracking_uri.py`.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import queue
import shlex
import threading
import time
import urllib.parse
from pathlib import Path
from typing import Callable

from sweeper.fs import sqlite_read_only_url
from sweeper.tracking_uri import hide_password, is_server, sqlite_path, store_failure
from core.uri_secrets import shown as shown_uri
from sweeper.records import TrialRecord, is_per_length, length_metrics
from trainables.config import ConfigError
from core.errors import cut

BACKOFF_S = (0.5, 1.0, 2.0, 4.0, 8.0, 15.0)  # between tries of a call the tracking server failed; then 15 s each
PERMANENT_TRIES = 3  # a call that fails for another reason than an unreachable store: given up after this many


def store_lock(uri: str):
    """A file lock beside an embedded SQLite store while it may be created or migrated (two
    sweeps started at once in one folder would both run MLflow's migrations); no-op otherwise."""
    from sweeper.lock import file_lock

    store = sqlite_path(uri)
    return file_lock(Path(f"{store}.lock")) if store is not None else contextlib.nullcontext()


def client(uri: str):
    """An MLflow client of the store, every one of the process with the settings MLflow reads from the
    environment (a user's own win): no retries of its HTTP client (ours, BackgroundLog and `retrying`,
    decide how long to wait), 20 s a call; its log lines (store creation, migrations, the errors a failed
    call logs: the caller says those in one line) off the terminal unless $SWEEPER_VERBOSE is set."""
    from sweeper.store_settings import MLFLOW_DEFAULTS, QUIET

    for name, value in MLFLOW_DEFAULTS.items():
        os.environ.setdefault(name, value)
    from mlflow import MlflowClient  # (its import sets its loggers' levels: ours come after)

    if not os.environ.get("SWEEPER_VERBOSE"):
        for name, value in QUIET.items():
            os.environ.setdefault(name, value)
        for name in ("mlflow", "alembic"):
            logging.getLogger(name).setLevel(logging.CRITICAL)
    return MlflowClient(tracking_uri=uri)


# what a read-only open of a database MLflow did not make says: it would create its tables, or finds another's schema
FOREIGN_SIGNS = ("attempt to write a readonly database", "no such table", "Can't locate revision")


def check_store(uri: str, source: str, experiment: str | None = None) -> None:
    """An existing, non-empty SQLite database named as the store opens read-only as an MLflow store: one line
    where it holds something else (an application's tables, an Optuna study) a writable open would add MLflow's
    tables to, a schema this MLflow cannot read, or `experiment` (the sweep's) deleted, whose runs MLflow refuses;
    on a server, only the last. A sweep creating an SQLite store holds its lock (`store_lock`): waited for."""
    if is_server(uri):  # a server the preflight found answering: its experiment only
        try:  # (one GET; MLflow's client POSTs a search, which a server only looking like MLflow's may fail)
            found = client(uri).get_experiment_by_name(experiment) if experiment else None
        except Exception as err:  # noqa: BLE001 - whatever the client raises: one line
            raise store_failure(uri, source, err) from None
        if found is not None and found.lifecycle_stage == "deleted":
            raise deleted_experiment(source, experiment, uri, found.experiment_id)
        return
    path = sqlite_path(uri)
    if path is None or not path.is_file() or path.stat().st_size == 0:
        return
    url, deleted = sqlite_read_only_url(path.resolve()), []  # the experiment's id, if deleted

    def check() -> None:
        c = client(url)
        c.search_experiments(max_results=1)
        found = c.get_experiment_by_name(experiment) if experiment else None  # a deleted one too
        deleted[:] = [found.experiment_id] if found is not None and found.lifecycle_stage == "deleted" else []

    try:
        try:
            check()
        except Exception:  # noqa: BLE001 - perhaps a store being created now, under its lock: after it, again
            if not os.path.lexists(f"{path}.lock"):
                raise
            with store_lock(uri):
                check()
    except Exception as err:  # noqa: BLE001 - whatever the store's library raises: one line
        if "locked" in str(err):  # a sweep writing to it now: readable, only busy
            return
        if not any(sign in str(err) for sign in FOREIGN_SIGNS):  # an MLflow store, damaged
            raise store_failure(uri, source, err) from None
        first = (str(err).strip().splitlines() or [""])[0]
        raise ConfigError(f"{source} {hide_password(uri)}: a database that is no MLflow store ({type(err).__name__}: "
                          f"{cut(first, 80)}); name an MLflow store's database, or a new file (a store is made there)") from None
    if deleted:
        raise deleted_experiment(source, experiment, uri, deleted[0])


def deleted_experiment(source: str, experiment: str, uri: str, ident: str) -> ConfigError:  # a launch's line
    return ConfigError(f"{source}: experiment `{experiment}` is deleted in the store (id {ident}); restore it: "
                       f"{restore_command(uri, 'experiments', '--experiment-id', ident)}; or name another with --experiment")


def restore_command(uri: str, noun: str, flag: str, ident: str) -> str:
    """The MLflow command that restores a deleted experiment or run of the store at `uri` (its password hidden)."""
    return f"MLFLOW_TRACKING_URI={shlex.quote(shown_uri(uri, 100))} mlflow {noun} restore {flag} {ident}"


def unreachable(err: BaseException) -> bool:
    """Whether a tracking call failed because the store could not be reached (worth retrying), not refused."""
    if isinstance(err, (ConnectionError, TimeoutError)):
        return True
    text = f"{type(err).__name__}: {err}"
    return any(sign in text for sign in ("Connection refused", "Max retries exceeded", "Failed to establish", "timed out",
                                         "RemoteDisconnected", "Connection aborted", "database is locked", "status code 502",
                                         "status code 503", "status code 504", "ConnectionError", "Temporary failure in name resolution"))


def retrying(call, deadline: float, what: str, say: Callable[[str], None] | None = None):
    """`call()`, retried with backoff while the store is unreachable, until `deadline` (monotonic); `say` hears of the first retry."""
    for attempt in range(10**9):
        try:
            return call()
        except Exception as err:  # noqa: BLE001 - classified below
            wait = BACKOFF_S[min(attempt, len(BACKOFF_S) - 1)]
            if not unreachable(err) or time.monotonic() + wait > deadline:
                raise
            if attempt == 0 and say is not None:
                say(f"note: MLflow unreachable while {what} ({cut(str(err), 120)}); retrying")
            time.sleep(wait)


class BackgroundLog:
    """One thread that makes a tracker's calls in order, so a slow or failing tracking server never holds up
    the driver (and every trial). A call failing on an unreachable store is retried with backoff while the sweep
    runs; one MLflow refuses, PERMANENT_TRIES times, then set aside. `drain` waits for the queue to empty, for
    at most a deadline, and returns what is left and what was set aside: nothing is dropped."""

    def __init__(self, apply, say: Callable[[str], None] | None = None):
        self.apply = apply  # apply(method, record): the real call
        self.say = say or (lambda text: None)  # where a store that went down, or came back, is told
        self.queue: queue.Queue = queue.Queue()
        self.failed: list[tuple[str, TrialRecord, str]] = []  # (method, record, why)
        self.deadline: float | None = None  # set by drain
        self.down_since: float | None = None
        self.thread = threading.Thread(target=self._run, name="mlflow-log", daemon=True)
        self.thread.start()

    def put(self, method: str, record: TrialRecord) -> None:
        self.queue.put((method, record))

    def _run(self) -> None:
        while (item := self.queue.get()) is not None:
            self._log(*item)
            self.queue.task_done()

    def _log(self, method: str, record: TrialRecord) -> None:
        attempt = 0
        while True:
            try:
                self.apply(method, record)
                if self.down_since is not None:
                    self.say(f"note: MLflow reachable again after {time.monotonic() - self.down_since:.0f} s; "
                             f"{self.queue.qsize()} queued calls to go")
                    self.down_since = None
                return
            except Exception as err:  # noqa: BLE001 - every failure is either retried or kept
                down = unreachable(err)
                if down and self.down_since is None:
                    self.down_since = time.monotonic()
                    self.say(f"warning: MLflow unreachable ({cut(str(err), 160)}); the sweep goes on, its reports "
                             "are queued and logged when the server answers")
                attempt += 1
                wait = BACKOFF_S[min(attempt - 1, len(BACKOFF_S) - 1)]
                out_of_time = self.deadline is not None and time.monotonic() + wait > self.deadline
                if out_of_time or (not down and attempt >= PERMANENT_TRIES):
                    self.failed.append((method, record, f"{type(err).__name__}: {cut(str(err), 160)}"))
                    return
                time.sleep(wait)

    def drain(self, timeout_s: float) -> list[tuple[str, TrialRecord, str]]:
        """Every queued call made or set aside (at most `timeout_s` more for retries), the thread stopped: the calls not made, in order."""
        self.deadline = time.monotonic() + timeout_s
        self.queue.put(None)
        self.thread.join()
        left = []
        while not self.queue.empty():
            item = self.queue.get_nowait()
            if item is not None:
                left.append((*item, "not tried: the sweep stopped first"))
        return self.failed + left


VIEW_TAG = "mlflow.sharedViewState."  # an experiment tag the MLflow UI opens as a saved view (?viewStateShareKey=KEY)


def view_key(sweep: str) -> str:
    """The saved view of a sweep's trials in its experiment (sweep names are URL-safe)."""
    return f"sweeper-{sweep}"


def trials_view(metric: str, mode: str, searched: list[str]) -> str:
    """The MLflow UI's view state for a sweep's runs table: sorted by the sweep's metric, best first,
    with the metric, the searched parameters, each trial's status and the other lengths as columns."""
    lengths = length_metrics(metric) if is_per_length(metric) else []
    metrics = [metric, *(m for m in lengths if m != metric)]
    return json.dumps({
        "orderByKey": f"metrics.`{metric}`", "orderByAsc": mode == "min",
        "selectedColumns": [f"metrics.`{metric}`", *(f"params.`{p}`" for p in searched), "tags.`status`",
                            *(f"metrics.`{m}`" for m in metrics[1:])],
    })


def experiment_url(uri: str, experiment: str, ui_address: str | None = None) -> str | None:
    """The MLflow UI address of a sweep's training runs (the server's, or a local `sweeper ui`'s): the
    runs table (not MLflow 3's GenAI overview), sorted by the sweep's metric, best first, in the tracker's
    saved view (`trials_view`) where there is one. Sorted by anything but date, the UI lists the trials as
    rows of their own, not folded under the parent run (MLflow 3.17 ignores a `searchFilter` in the
    address; tests/test_mlflow_ui.py shows both)."""
    c = client(uri)
    exp = c.get_experiment_by_name(experiment)
    base = ui_address or (uri if uri.startswith("http") else None)
    if exp is None or not base:
        return None
    url = f"{base.rstrip('/')}/#/experiments/{exp.experiment_id}/runs"
    parents = c.search_runs([exp.experiment_id], filter_string="tags.role = 'sweep'", max_results=1,
                            order_by=["attributes.start_time DESC"])
    tags = parents[0].data.tags if parents else {}
    key = view_key(tags.get("sweep", ""))
    if tags and VIEW_TAG + key in exp.tags:
        return f"{url}?viewStateShareKey={urllib.parse.quote(key)}"
    if not tags.get("metric"):
        return url
    ascending = "true" if tags.get("mode") == "min" else "false"
    order = urllib.parse.quote(f"metrics.`{tags['metric']}`")
    return f"{url}?orderByKey={order}&orderByAsc={ascending}"


def charts_url(runs_url: str) -> str:
    """The same runs as charts: each metric's curves of every trial, side by side."""
    return f"{runs_url}{'&' if '?' in runs_url else '?'}compareRunsMode=CHART"


def fetch_trial_runs(uri: str, sweep_name: str, experiment: str | None = None, parent_uid: str | None = None,
                     user_uri: str | None = None) -> list[dict]:
    """The child runs of a sweep: [{run_id, trial_id, status, best, params, metrics}]. Its parent run is
    the one tagged `parent_uid` (what the sweep's study records) when given; else the newest run of a
    sweep of that name (a store that other folders' sweeps of the same name log to holds several).
    `user_uri`: the store as its user named it, in every line (`uri` may be a read-only URL of it)."""
    from mlflow.entities import ViewType

    c, named, where = client(uri), experiment or sweep_name, shown_uri(user_uri or uri)
    exp = c.get_experiment_by_name(named)
    if exp is None:
        raise ConfigError(f"{sweep_name}: no MLflow experiment `{named}` at {where}")
    if exp.lifecycle_stage == "deleted":
        raise ConfigError(f"{sweep_name}: experiment `{named}` is deleted in the store; restore it: " + restore_command(
            user_uri or uri, 'experiments', '--experiment-id', exp.experiment_id))
    which = f" and tags.parent_uid = '{parent_uid}'" if parent_uid else ""
    parents = next(filter(None, (c.search_runs([exp.experiment_id], run_view_type=view, max_results=1, order_by=[
        "attributes.start_time DESC"], filter_string=f"tags.role = 'sweep' and tags.sweep = '{sweep_name}'{which}")
        for view in (ViewType.ACTIVE_ONLY, ViewType.ALL))), [])  # the newest active one, else a deleted one
    if parents and parents[0].info.lifecycle_stage == "deleted":
        raise ConfigError(f"{sweep_name}: the sweep's run {parents[0].info.run_id} is deleted in experiment `{exp.name}`; "
                          f"restore it: {restore_command(user_uri or uri, 'runs', '--run-id', parents[0].info.run_id)}")
    if not parents:
        raise ConfigError(f"{sweep_name}: the sweep's run (parent_uid {parent_uid}, as its study records) is not in experiment "
                          f"`{exp.name}` at {where}; a sweep of that name from another folder logs there" if parent_uid
                          else f"{sweep_name}: no sweep run in experiment `{exp.name}` at {where}")
    parent = parents[0].info.run_id
    runs = c.search_runs([exp.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{parent}'", max_results=10_000)
    return [{
        "run_id": r.info.run_id, "trial_id": r.data.tags.get("trial_id", r.info.run_name),
        "status": r.data.tags.get("status", ""), "best": r.data.tags.get("best") == "true",
        "searched": [s for s in r.data.tags.get("searched", "").split(",") if s],
        "params": dict(r.data.params),
        "metrics": {k: float(v) for k, v in r.data.metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)},
    } for r in runs]  # a value a damaged store holds as text is left out, not drawn


def describe_unlogged(left: list[tuple[str, TrialRecord, str]]) -> str:
    """One line for the end of a sweep: what MLflow did not take (the next launch logs it)."""
    trials = sorted({record.trial_id for _, record, _ in left})
    return (f"warning: MLflow did not take {len(left)} calls of {len(trials)} trials ({cut(', '.join(trials), 80)}; "
            f"last error: {left[-1][2]}); the trials' folders keep them: the next launch of this sweep logs them")
