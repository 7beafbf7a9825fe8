"""SweepTracker against real MLflow stores: a resumed tracker never logs a step twice; logging is off the
driver's path, survives a server outage, and never drops a report silently."""

import json
import pickle

from sweeper.records import TrialRecord
from sweeper.space import load_space
from sweeper.adapters.mlflow_tracking import (RUNS_FILE, UNLOGGED_FILE, BackgroundLog, SweepTracker, client, summary_csv,
                                              unreachable)
from sweeper.commands.launch import check_same_store
from trainables.errors import ConfigError

from conftest import ROOT, start_mlflow_server, stop


def _record(step: int) -> TrialRecord:
    return TrialRecord("t0", {"dat.switch_step": 10, "optim.lr": 3e-3}, "running", step, {"step": step, "acc_3x": step / 1000, "loss": 1.0})  # the trainer reports its step


def test_a_restored_tracker_takes_the_last_logged_step_from_mlflow(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec = load_space(ROOT / "search_spaces" / "smoke.yaml")
    sweep_dir = tmp_path / "sweep"
    sweep_dir.mkdir()
    (sweep_dir / "space.yaml").write_text("name: smoke\n")
    live = SweepTracker(uri, spec, sweep_dir)
    live.start(sweep_dir / "space.yaml")
    live.on_result(_record(20))
    live.on_result(_record(40))
    assert live.drain() == []
    run_id = live.state["trials"]["t0"]["run_id"]

    # a kill between logging step 40 and saving the mapping: the file still says 20
    runs_file = sweep_dir / RUNS_FILE
    mapping = json.loads(runs_file.read_text())
    mapping["trials"]["t0"]["last_step"] = 20
    runs_file.write_text(json.dumps(mapping))

    fresh = SweepTracker(uri, spec, sweep_dir)  # the one `finish` builds: reads the file, asks MLflow nothing
    assert fresh.state["trials"]["t0"]["last_step"] == 20

    restored = pickle.loads(pickle.dumps(live))  # the resumed sweep's callback
    assert restored.state["trials"]["t0"]["last_step"] == 40
    restored.on_result(_record(40))  # Ray re-reports the step the kill interrupted
    restored.on_result(_record(60))
    assert restored.drain() == []
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


def test_a_server_outage_neither_blocks_the_driver_nor_loses_a_report(tmp_path):
    """The real `mlflow server` stopped mid-sweep: reports queue without waiting; those logged after
    it came back are all there once; those it never took are kept and logged by the next launch."""
    import time

    root = tmp_path / "server"
    root.mkdir()
    url, proc = start_mlflow_server(root, f"sqlite:///{root / 'mlflow.db'}")
    port = int(url.rsplit(":", 1)[1])
    spec, sweep_dir = _sweep(tmp_path, url)
    tracker = SweepTracker(url, spec, sweep_dir)
    tracker.start(sweep_dir / "space.yaml")
    tracker.on_result(_record(10))
    time.sleep(1)
    stop(proc)
    t0 = time.monotonic()
    for step in (20, 30):
        tracker.on_result(_record(step))
    assert time.monotonic() - t0 < 0.5  # the driver does not wait for the server
    time.sleep(3)  # retried meanwhile
    url2, proc = start_mlflow_server(root, f"sqlite:///{root / 'mlflow.db'}", port=port)
    try:
        assert tracker.drain(timeout_s=60) == []
        run_id = tracker.state["trials"]["t0"]["run_id"]
        assert [m.step for m in client(url).get_metric_history(run_id, "acc_3x")] == [10, 20, 30]

        # down at the end of a sweep: what is left is kept, listed, and logged by the next start
        tracker.on_result(_record(40))
        time.sleep(1)
        stop(proc)
        tracker.on_result(_record(50))
        left = tracker.drain(timeout_s=2)
        assert [r.step for _, r, _ in left] == [50]
        assert [json.loads(line)["record"]["step"] for line in (sweep_dir / UNLOGGED_FILE).read_text().splitlines()] == [50]
        url2, proc = start_mlflow_server(root, f"sqlite:///{root / 'mlflow.db'}", port=port)
        SweepTracker(url, spec, sweep_dir).start(sweep_dir / "space.yaml")
        assert not (sweep_dir / UNLOGGED_FILE).exists()
        assert [m.step for m in client(url).get_metric_history(run_id, "acc_3x")] == [10, 20, 30, 40, 50]
    finally:
        stop(proc)


def test_reconcile_logs_what_a_killed_driver_never_logged(tmp_path):
    """The ledger (status.json records, each trial's result.json) ahead of MLflow after a SIGKILL:
    the missing reports (below MLflow's last step too, and beyond status.json's lagging step) and
    the missing end are logged, nothing twice."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    tracker = SweepTracker(uri, spec, sweep_dir)
    tracker.start(sweep_dir / "space.yaml")
    tracker.on_result(_record(20))  # the report of step 10 was lost with a killed driver's queue
    assert tracker.drain() == []
    trial_dir = tmp_path / "trial_t0"
    trial_dir.mkdir()
    (trial_dir / "result.json").write_text("".join(json.dumps({"step": s, "acc_3x": s / 1000, "loss": 1.0}) + "\n" for s in (10, 20, 30))
                                           + '{"step": 40, "acc')  # a line cut by the kill
    ended = TrialRecord("t0", _record(0).params, "completed", 20, {"step": 20, "acc_3x": 0.02}, str(trial_dir))  # status.json lags
    fresh = SweepTracker(uri, spec, sweep_dir)
    assert fresh.reconcile([ended]) == 3  # steps 10 (a gap below the last logged) and 30, and the end
    run = client(uri).get_run(fresh.state["trials"]["t0"]["run_id"])
    assert run.info.status == "FINISHED" and run.data.tags["status"] == "completed"
    assert sorted(m.step for m in client(uri).get_metric_history(run.info.run_id, "acc_3x")) == [10, 20, 30]  # each once
    assert SweepTracker(uri, spec, sweep_dir).reconcile([ended]) == 0  # nothing left to do


def test_resuming_with_another_tracking_store_is_refused(tmp_path):
    runs = {"tracking_uri": "http://127.0.0.1:5000"}
    check_same_store(tmp_path, "http://127.0.0.1:5000", "--tracking-uri", runs)
    check_same_store(tmp_path, "sqlite:///x.db", "--tracking-uri", {})  # a sweep that never logged
    try:
        check_same_store(tmp_path, "sqlite:///x.db", "--tracking-uri", runs)
    except ConfigError as err:
        assert "logs to http://127.0.0.1:5000" in str(err) and "--restart" in str(err) and "\n" not in str(err)
    else:
        raise AssertionError("a changed tracking URI was accepted")


def test_reconcile_logs_whole_reports_so_a_failed_call_loses_none(tmp_path):
    """Many missing reports take several calls (MLflow: at most 1000 metrics each). The second call
    fails; the retry must log every metric of every report: a call never holds half of a report,
    whose `step` alone would make the retry take that step as logged."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    SweepTracker(uri, spec, sweep_dir).start(sweep_dir / "space.yaml")
    trial_dir = tmp_path / "trial_t0"
    trial_dir.mkdir()
    names = [f"m{i:02d}" for i in range(30)]  # with step: 31 metrics a report, 100 reports: 4 calls
    (trial_dir / "result.json").write_text("".join(
        json.dumps({"step": s, **{n: s + i for i, n in enumerate(names)}}) + "\n" for s in range(1, 101)))
    ended = TrialRecord("t0", _record(0).params, "completed", 100, {"step": 100}, str(trial_dir))
    tracker = SweepTracker(uri, spec, sweep_dir)
    log_batch, calls = tracker.client.log_batch, []

    def second_call_fails(run_id, metrics=(), **kwargs):
        calls.append(len(metrics))
        if len(calls) == 2:
            raise ConnectionError("Connection refused")
        return log_batch(run_id, metrics=metrics, **kwargs)

    tracker.client.log_batch = second_call_fails
    tracker.reconcile([ended])
    assert len(calls) >= 3 and all(n % 31 == 0 for n in calls if n), calls  # whole reports only
    run_id = tracker.state["trials"]["t0"]["run_id"]
    for name in ("step", "m00", "m29"):
        assert sorted(m.step for m in client(uri).get_metric_history(run_id, name)) == list(range(1, 101)), name


def test_a_kill_after_the_parent_run_is_made_never_makes_a_second(tmp_path):
    """SIGKILL inside the write that records the new parent run (a real process, SWEEPER_FAULT), then
    start again as `sweeper launch` does: Ray had written nothing to resume from, so the relaunch
    clears the sweep directory (the run mapping with it) and starts afresh. The same parent run
    comes back, and the sweep has one."""
    import os
    import subprocess
    import sys

    from sweeper.commands.launch import prepare_sweep_dir

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    start = ("from sweeper import faults; faults.arm(); "  # as `sweeper launch` arms them
             "from sweeper.space import load_space; from sweeper.adapters.mlflow_tracking import SweepTracker; "
             f"from pathlib import Path; SweepTracker({uri!r}, load_space({str(ROOT / 'search_spaces' / 'smoke.yaml')!r}), "
             f"Path({str(sweep_dir)!r})).start(Path({str(sweep_dir / 'space.yaml')!r}))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "SWEEPER_FAULT": "state_write:2:KILL"}  # 1: the name, 2: the run
    killed = subprocess.run([sys.executable, "-c", start], env=env, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert killed.returncode == -9, killed.stderr[-2000:]
    assert "parent_run_id" not in json.loads((sweep_dir / RUNS_FILE).read_text())  # the kill came before it was recorded
    parents = lambda: [r for r in client(uri).search_runs(["1"]) if r.data.tags.get("role") == "sweep"]  # noqa: E731
    [orphan] = parents()
    assert orphan.info.status == "RUNNING"

    space_file = ROOT / "search_spaces" / "smoke.yaml"
    assert not prepare_sweep_dir(spec, str(space_file), sweep_dir, restorable=False, restart=False)  # as launch: afresh
    assert not (sweep_dir / RUNS_FILE).exists()
    run_id = SweepTracker(uri, spec, sweep_dir).start(sweep_dir / "space.yaml")
    assert [r.info.run_id for r in parents()] == [orphan.info.run_id] == [run_id]


def test_a_fresh_start_ends_the_runs_a_cleared_sweep_directory_left_running(tmp_path):
    """A parent of this directory still RUNNING with trials under it (its directory was cleared: --restart,
    or removed by hand) can never finish: a fresh start ends it as KILLED instead of adopting it."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    old = SweepTracker(uri, spec, sweep_dir)
    old_id = old.start(sweep_dir / "space.yaml")
    old.on_result(_record(10))
    old.drain()
    (sweep_dir / RUNS_FILE).unlink()  # the directory started afresh
    new_id = SweepTracker(uri, spec, sweep_dir).start(sweep_dir / "space.yaml")
    assert new_id != old_id
    ended = client(uri).get_run(old_id)
    assert ended.info.status == "KILLED" and ended.data.tags["status"].startswith("abandoned")
    assert client(uri).get_run(new_id).info.status == "RUNNING"


def test_a_failed_call_after_the_parent_run_is_made_never_makes_a_second(tmp_path):
    """The server fails once right after creating the parent (its params refused): the retry finds that run."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    spec, sweep_dir = _sweep(tmp_path, uri)
    tracker = SweepTracker(uri, spec, sweep_dir)
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
