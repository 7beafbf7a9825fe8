"""SweepTracker against a real MLflow store (SQLite): a resumed tracker never logs a step twice."""

import json
import pickle

from sweeper.records import TrialRecord
from sweeper.space import load_space
from sweeper.adapters.mlflow_tracking import RUNS_FILE, SweepTracker, client, summary_csv

from conftest import ROOT


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
    history = client(uri).get_metric_history(run_id, "acc_3x")
    assert [m.step for m in history] == [20, 40, 60]


def test_summary_csv_keeps_only_per_length_metrics():
    rec = TrialRecord("t0", {"optim.lr": 0.003}, "completed", 60,
                      {"acc_3x": 0.5, "raw_acc_3x": 0.4, "state_acc_1x": 0.9, "loss": 1.2, "switch_step": 10})
    header = summary_csv([rec]).splitlines()[0].split(",")
    assert header == ["trial_id", "status", "step", "optim.lr", "acc_3x", "raw_acc_3x", "state_acc_1x"]
