"""SweepTracker against real MLflow stores: a resumed tracker never logs a step twice; logging is off the
driver's path, survives a server outage, and never drops a report silently."""

import json

import pytest

from sweeper.adapters.mlflow_store import BackgroundLog, client, unreachable
from sweeper.adapters.mlflow_tracking import SweepTracker
from sweeper.status import summary_csv
from sweeper.adapters.optuna_ledger import Ledger
from sweeper.records import TrialRecord
from sweeper.space_file import load_space
from sweeper.sweep_checks import check_same_store
from core.errors import ConfigError

from conftest import ROOT, start_mlflow_server, stop


def _record(step: int) -> TrialRecord:
    return TrialRecord("t0", {"dat.switch_step": 10, "optim.lr": 3e-3}, "running", step, {"step": step, "acc_3x": step / 1000, "loss": 1.0})  # the trainer reports its step


def _ledger(sweep_dir, spec) -> Ledger:
    return Ledger(f"sqlite:///{sweep_dir / 'optuna.db'}", spec, create=True)


def _reports(trial_dir, steps, cut: str = "") -> None:
    trial_dir.mkdir(parents=True, exist_ok=True)
    (trial_dir / "metrics.jsonl").write_text("".join(json.dumps({"step": s, "acc_3x": s / 1000, "loss": 1.0}) + "\n" for s in steps) + cut)


def test_a_resumed_sweep_s_tracker_takes_the_last_logged_step_from_mlflow(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    ledger = _ledger(sweep_dir, spec)
    live = SweepTracker(uri, spec, sweep_dir, ledger=ledger)
    live.start(sweep_dir / "space.yaml")
    live.sync(_record(20))
    live.sync(_record(40))
    assert live.drain() == []
    run_id = live.state["trials"]["t0"]["run_id"]

    resumed = SweepTracker(uri, spec, sweep_dir, ledger=ledger)  # the next launch: nothing on disk but the ledger
    assert resumed.start(sweep_dir / "space.yaml") == live.state["parent_run_id"]
    resumed.sync(_record(40))  # the trial re-reports the step its checkpoint holds
    resumed.sync(_record(60))
    assert resumed.drain() == []
    assert resumed.state["trials"]["t0"]["run_id"] == run_id
    history = client(uri).get_metric_history(run_id, "acc_3x")
    assert [m.step for m in history] == [20, 40, 60]


def test_summary_csv_keeps_only_per_length_metrics():
    rec = TrialRecord("t0", {"optim.lr": 0.003}, "completed", 60,
                      {"acc_3x": 0.5, "raw_acc_3x": 0.4, "state_acc_1x": 0.9, "loss": 1.2, "switch_step": 10})
    header = summary_csv([rec]).splitlines()[0].split(",")
    assert header == ["trial_id", "status", "step", "optim.lr", "acc_3x", "raw_acc_3x", "state_acc_1x"]


def _sweep(tmp_path, uri):
    spec = load_space(ROOT / "search_spaces" / "smoke.yaml")
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir(exist_ok=True)
    (sweep_dir / "space.yaml").write_text("name: smoke\n")
    return spec, sweep_dir


def test_the_background_log_retries_an_unreachable_store_and_sets_aside_a_refused_call():
    calls = []

    def apply(method, record):
        calls.append((method, record.step))
        if record.step == 10 and len(calls) < 3:
            raise ConnectionError("Connection refused")  # down twice, then back
        if record.step == 20:
            raise ValueError("INVALID_PARAMETER_VALUE: refused")  # not a reachability problem

    log = BackgroundLog(apply)
    for step in (10, 20, 30):
        log.put("on_result", _record(step))
    left = log.drain(timeout_s=30)
    assert [c[1] for c in calls] == [10, 10, 10, 20, 20, 20, 30]  # in order, 10 retried until it went through
    assert [(m, r.step) for m, r, _ in left] == [("on_result", 20)] and "INVALID_PARAMETER_VALUE" in left[0][2]
    assert unreachable(RuntimeError("HTTPConnectionPool(host='127.0.0.1'): Max retries exceeded"))
    assert not unreachable(RuntimeError("RESOURCE_ALREADY_EXISTS"))


@pytest.mark.long  # `make test-long`; the fault matrix has the same outage against a whole sweep
def test_a_server_outage_neither_blocks_the_driver_nor_loses_a_report(tmp_path):
    """The real `mlflow server` stopped mid-sweep: reports queue without waiting; those logged after
    it came back are all there once; those it never took are kept and logged by the next launch."""
    import time

    root = tmp_path / "server"
    root.mkdir()
    url, proc = start_mlflow_server(root, f"sqlite:///{root / 'mlflow.db'}")
    port = int(url.rsplit(":", 1)[1])
    spec, sweep_dir = _sweep(tmp_path, url)
    ledger = _ledger(sweep_dir, spec)
    tracker = SweepTracker(url, spec, sweep_dir, ledger=ledger)
    tracker.start(sweep_dir / "space.yaml")
    tracker.sync(_record(10))
    time.sleep(1)
    stop(proc)
    t0 = time.monotonic()
    for step in (20, 30):
        tracker.sync(_record(step))
    assert time.monotonic() - t0 < 0.5  # the driver does not wait for the server
    time.sleep(3)  # retried meanwhile
    url2, proc = start_mlflow_server(root, f"sqlite:///{root / 'mlflow.db'}", port=port)
    try:
        assert tracker.drain(timeout_s=60) == []
        run_id = tracker.state["trials"]["t0"]["run_id"]
        assert [m.step for m in client(url).get_metric_history(run_id, "acc_3x")] == [10, 20, 30]

        # down at the end of a sweep: what is left is listed, and the next launch logs it from the trial's folder
        tracker.sync(_record(40))
        time.sleep(1)
        stop(proc)
        tracker.sync(_record(50))
        left = tracker.drain(timeout_s=2)
        assert [r.step for _, r, _ in left] == [50]
        url2, proc = start_mlflow_server(root, f"sqlite:///{root / 'mlflow.db'}", port=port)
        trial_dir = sweep_dir / "trials" / "t0"
        _reports(trial_dir, (10, 20, 30, 40, 50))
        nxt = SweepTracker(url, spec, sweep_dir, ledger=ledger)
        nxt.start(sweep_dir / "space.yaml")
        assert nxt.sync_all([TrialRecord("t0", _record(0).params, "running", 50, {"step": 50}, str(trial_dir))]) == 1
        assert [m.step for m in client(url).get_metric_history(run_id, "acc_3x")] == [10, 20, 30, 40, 50]
    finally:
        stop(proc)


def test_a_sync_logs_what_a_killed_driver_never_logged_and_a_second_writes_nothing(tmp_path):
    """The ledger and each trial's folder (metrics.jsonl) ahead of MLflow after a SIGKILL:
    the missing reports (below MLflow's last step too, and beyond status.json's lagging step) and
    the missing end are logged, nothing twice."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    ledger = _ledger(sweep_dir, spec)
    tracker = SweepTracker(uri, spec, sweep_dir, ledger=ledger)
    tracker.start(sweep_dir / "space.yaml")
    tracker.sync(_record(20))  # the report of step 10 was lost with a killed driver's queue
    assert tracker.drain() == []
    trial_dir = tmp_path / "trial_t0"
    _reports(trial_dir, (10, 20, 30), cut='{"step": 40, "acc')  # a line cut by the kill
    ended = TrialRecord("t0", _record(0).params, "completed", 20, {"step": 20, "acc_3x": 0.02}, str(trial_dir))  # status.json lags
    fresh = SweepTracker(uri, spec, sweep_dir, ledger=ledger)
    fresh.start(sweep_dir / "space.yaml")
    assert fresh.sync_all([ended]) == 2  # steps 10 (a gap below the last logged) and 30 in one call, and the end
    run = client(uri).get_run(fresh.state["trials"]["t0"]["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
    assert sorted(m.step for m in client(uri).get_metric_history(run.info.run_id, "acc_3x")) == [10, 20, 30]  # each once
    again = SweepTracker(uri, spec, sweep_dir, ledger=ledger)
    again.start(sweep_dir / "space.yaml")
    assert again.sync_all([ended]) == 0  # nothing left to do
    assert again.sync_all([ended]) == 0 and len(client(uri).search_runs(["1"], "tags.role = 'trial'")) == 1


def test_resuming_with_another_tracking_store_is_refused(tmp_path):
    started_with = "http://127.0.0.1:5000"
    check_same_store(tmp_path, "http://127.0.0.1:5000", "--tracking-uri", started_with)
    check_same_store(tmp_path, "sqlite:///x.db", "--tracking-uri", None)  # a sweep that never logged
    try:
        check_same_store(tmp_path, "sqlite:///x.db", "--tracking-uri", started_with)
    except ConfigError as err:
        assert "logs to http://127.0.0.1:5000" in str(err) and "--restart" in str(err) and "\n" not in str(err)
    else:
        raise AssertionError("a changed tracking URI was accepted")


def test_a_sync_logs_whole_reports_so_a_failed_call_loses_none(tmp_path):
    """Many missing reports take several calls (MLflow: at most 1000 metrics each). The second call
    fails; the retry must log every metric of every report: a call never holds half of a report,
    whose `step` alone would make the retry take that step as logged."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    ledger = _ledger(sweep_dir, spec)
    SweepTracker(uri, spec, sweep_dir, ledger=ledger).start(sweep_dir / "space.yaml")
    trial_dir = tmp_path / "trial_t0"
    trial_dir.mkdir()
    names = [f"m{i:02d}" for i in range(30)]  # with step: 31 metrics a report, 100 reports: 4 calls
    (trial_dir / "metrics.jsonl").write_text("".join(
        json.dumps({"step": s, **{n: s + i for i, n in enumerate(names)}}) + "\n" for s in range(1, 101)))
    ended = TrialRecord("t0", _record(0).params, "completed", 100, {"step": 100}, str(trial_dir))
    tracker = SweepTracker(uri, spec, sweep_dir, ledger=ledger)
    tracker.start(sweep_dir / "space.yaml")
    log_batch, calls = tracker.client.log_batch, []

    def second_call_fails(run_id, metrics=(), **kwargs):
        calls.append(len(metrics))
        if len(calls) == 2:
            raise ConnectionError("Connection refused")
        return log_batch(run_id, metrics=metrics, **kwargs)

    tracker.client.log_batch = second_call_fails
    tracker.sync_all([ended])
    assert len(calls) >= 3 and all(n % 31 == 0 for n in calls if n), calls  # whole reports only
    run_id = tracker.state["trials"]["t0"]["run_id"]
    for name in ("step", "m00", "m29"):
        assert sorted(m.step for m in client(uri).get_metric_history(run_id, name)) == list(range(1, 101)), name


def test_the_parent_run_s_uid_is_in_the_ledger_before_the_run_exists(tmp_path):
    """The uid that tags the sweep's parent run is written to the ledger before the run is made: a start
    cut off after making it (a kill, a failed call) finds that run again on the next start, never makes
    a second."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    ledger = _ledger(sweep_dir, spec)
    tracker = SweepTracker(uri, spec, sweep_dir, ledger=ledger)
    create_run, seen = tracker.client.create_run, []

    def create_and_look(*args, **kwargs):
        seen.append(Ledger(f"sqlite:///{sweep_dir / 'optuna.db'}", spec, create=False).attr("sweeper.mlflow_uid"))
        return create_run(*args, **kwargs)

    tracker.client.create_run = create_and_look
    run_id = tracker.start(sweep_dir / "space.yaml")
    assert seen and seen[0] == client(uri).get_run(run_id).data.tags["parent_uid"]
    reopened = Ledger(f"sqlite:///{sweep_dir / 'optuna.db'}", spec, create=False)
    again = SweepTracker(uri, spec, sweep_dir, ledger=reopened).start(sweep_dir / "space.yaml")
    parents = [r.info.run_id for r in client(uri).search_runs(["1"]) if r.data.tags.get("role") == "sweep"]
    assert parents == [run_id] == [again]


def test_a_fresh_start_ends_the_runs_a_cleared_sweep_directory_left_running(tmp_path):
    """A parent of this directory still RUNNING with trials under it (its directory was cleared: --restart,
    or removed by hand) can never finish: a fresh start ends it as KILLED instead of adopting it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    old = SweepTracker(uri, spec, sweep_dir, ledger=_ledger(sweep_dir, spec))
    old_id = old.start(sweep_dir / "space.yaml")
    old.sync(_record(10))
    old.drain()
    (sweep_dir / "optuna.db").unlink()  # the directory started afresh: a new ledger
    new_id = SweepTracker(uri, spec, sweep_dir, ledger=_ledger(sweep_dir, spec)).start(sweep_dir / "space.yaml")
    assert new_id != old_id
    ended = client(uri).get_run(old_id)
    assert ended.info.status == "KILLED" and ended.data.tags["status"].startswith("abandoned")
    assert client(uri).get_run(new_id).info.status == "RUNNING"


def test_a_failed_call_after_the_parent_run_is_made_never_makes_a_second(tmp_path):
    """The server fails once right after creating the parent (its params refused): the retry finds that run."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    tracker = SweepTracker(uri, spec, sweep_dir, ledger=_ledger(sweep_dir, spec))
    log_batch, failures = tracker.client.log_batch, []

    def failing_once(*args, **kwargs):
        if not failures:
            failures.append(1)
            raise ConnectionError("Connection refused")
        return log_batch(*args, **kwargs)

    tracker.client.log_batch = failing_once
    run_id = tracker.start(sweep_dir / "space.yaml")
    assert failures
    assert [r.info.run_id for r in client(uri).search_runs(["1"]) if r.data.tags.get("role") == "sweep"] == [run_id]


def test_the_saved_view_shows_the_metric_its_family_at_every_length_and_the_searched_params():
    import json

    from sweeper.adapters.mlflow_store import trials_view

    view = json.loads(trials_view("tv_3x", "min", ["model.dropout"]))
    assert view["orderByKey"] == "metrics.`tv_3x`" and view["orderByAsc"] is True
    assert view["selectedColumns"] == ["metrics.`tv_3x`", "params.`model.dropout`", "tags.`status`",
                                       "metrics.`tv_1x`", "metrics.`tv_2x`", "metrics.`tv_4x`"]
    view = json.loads(trials_view("loss", "min", []))  # a metric over training, not at a length: alone
    assert view["selectedColumns"] == ["metrics.`loss`", "tags.`status`"]
    assert json.loads(trials_view("acc_3x", "max", []))["orderByAsc"] is False


def test_each_sweep_names_its_own_runs_artifact_folders_in_a_shared_embedded_store(tmp_path):
    """What the caller's umask is applied to at a sweep's end: the folders of its own runs, which hold
    every artifact it logged (another sweep on the same store may have narrowed the shared folder before)."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    trackers = []
    for name in ("one", "two"):
        (tmp_path / name).mkdir()
        tracker = SweepTracker(uri, spec, sweep_dir, experiment=name, ledger=_ledger(tmp_path / name, spec))
        tracker.start(sweep_dir / "space.yaml")
        tracker.sync(TrialRecord("t0", _record(0).params, "completed", 20, {"step": 20, "acc_3x": 0.02}, str(tmp_path / name)))
        assert tracker.drain() == []
        trackers.append(tracker)
    one, two = (set(t.local_artifact_dirs()) for t in trackers)
    assert len(one) == len(two) == 2 and not one & two  # the parent run's and the trial's, each sweep its own
    written = {p for p in (tmp_path / "mlartifacts").rglob("*") if p.is_file()}
    assert all(f.parent == tmp_path / "mlartifacts" for f in one | two)
    for folders in (one, two):  # each sweep logged artifacts (its space file, the trial's config), all in its folders
        assert any(folder in p.parents for p in written for folder in folders)
    assert all(any(folder in p.parents for folder in one | two) for p in written)


@pytest.mark.parametrize("lost", ["the_create_s_answer", "the_params_call"])
def test_a_trial_s_run_is_made_once_when_a_call_fails_around_its_creation(tmp_path, lost):
    """The server goes down with the trial run's create in flight (the run is made, the answer lost),
    or right after it (its parameters refused): the retry finds that run, never makes a second, and
    logs its parameters and every report."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    tracker = SweepTracker(uri, spec, sweep_dir, ledger=_ledger(sweep_dir, spec))
    tracker.start(sweep_dir / "space.yaml")
    _reports(tmp_path / "t0", [10, 20])
    ended = TrialRecord("t0", _record(0).params, "completed", 20, {"step": 20}, str(tmp_path / "t0"))
    create_run, log_batch, failures = tracker.client.create_run, tracker.client.log_batch, []

    def create_then_fail(*args, **kwargs):
        made = create_run(*args, **kwargs)
        if not failures and kwargs.get("run_name") == "t0":
            failures.append("create")
            raise ConnectionError("Connection aborted: RemoteDisconnected")
        return made

    def params_fail_once(run_id, **kwargs):
        if not failures and kwargs.get("params"):
            failures.append("params")
            raise ConnectionError("Connection refused")
        return log_batch(run_id, **kwargs)

    if lost == "the_create_s_answer":
        tracker.client.create_run = create_then_fail
    else:
        tracker.client.log_batch = params_fail_once
    tracker.sync_all([ended])
    assert failures, "the fault never fired"
    children = [r for r in client(uri).search_runs(["1"]) if r.data.tags.get("trial_id") == "t0"]
    assert len(children) == 1, [r.info.run_id for r in children]
    run = client(uri).get_run(children[0].info.run_id)
    assert run.data.params and run.data.tags["status"] == "completed"
    assert sorted(m.step for m in client(uri).get_metric_history(run.info.run_id, "acc_3x")) == [10, 20]


def test_a_finish_run_again_logs_the_sweep_s_best_once(tmp_path):
    """Each launch ends with `finish` (an interrupted one, its resume, a relaunch of a finished sweep):
    the parent's best score is in its history once per value and step, not once per finish."""
    from sweeper.adapters.mlflow_summary import finish

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    ledger = _ledger(sweep_dir, spec)
    record = TrialRecord("t0", _record(0).params, "completed", 40, {"step": 40, "acc_3x": 0.04})
    best = {"trial_id": "t0", "value": 0.04, "step": 40}
    for _ in range(2):
        tracker = SweepTracker(uri, spec, sweep_dir, ledger=ledger)
        parent = tracker.start(sweep_dir / "space.yaml")
        finish(tracker, [record], [], interrupted=True, best=best)
    better = {"trial_id": "t0", "value": 0.05, "step": 40}  # a step trained again to another value: logged
    finish(tracker, [record], [], interrupted=False, best=better)
    history = client(uri).get_metric_history(parent, f"best_{spec.metric}")
    assert sorted((m.step, m.value) for m in history) == [(40, 0.04), (40, 0.05)], history
