"""`sweeper launch` on a real local Ray instance with a real Optuna study (no mocks)."""

import json
import os
import signal
import sqlite3
import subprocess
import time

import pytest

from conftest import ROOT, sweeper_cmd

SMOKE = ROOT / "search_spaces" / "smoke.yaml"
pytestmark = pytest.mark.integration


def _summary(tmp_path, name="smoke"):
    return json.loads((tmp_path / "sweeps" / name / "summary.json").read_text())


def _optuna_states(tmp_path, name="smoke"):
    with sqlite3.connect(tmp_path / "sweeps" / name / "optuna.db") as db:
        return [row[0] for row in db.execute("SELECT state FROM trials ORDER BY number")]


def test_smoke_sweep_runs_end_to_end_with_asha_stopping_trials(tmp_path, run_sweeper):
    r = run_sweeper("launch", SMOKE)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = _summary(tmp_path)
    trials = summary["trials"]
    assert len(trials) == 6 and len({t["trial_id"] for t in trials}) == 6
    statuses = [t["status"] for t in trials]
    assert "stopped" in statuses, statuses  # ASHA stopped at least one trial early
    assert "completed" in statuses
    for t in trials:
        if t["status"] == "stopped":
            assert t["step"] < 60
        if t["status"] == "completed":
            assert t["step"] == 60
    # the baseline (joint training) was evaluated first
    assert any(t["params"] == {"dat.switch_step": 0, "optim.lr": 0.003} for t in trials)
    best = summary["best"]
    assert best["score"] == max(t["metrics"]["acc_3x"] for t in trials)
    assert best["config"]["steps"] == 60 and best["config"]["dat"]["switch_step"] == best["params"]["dat.switch_step"]
    # the Optuna study on disk knows which trials were pruned by ASHA
    states = _optuna_states(tmp_path)
    assert len(states) == 6 and "PRUNED" in states and "COMPLETE" in states
    # the live view printed a progress line, the end a table
    assert "[smoke" in r.stdout and "acc_3x" in r.stdout
    s = run_sweeper("status", "smoke")
    assert s.returncode == 0 and "sweep smoke: finished" in s.stdout


def test_bad_space_exits_2_before_ray_starts_and_writes_nothing(tmp_path, run_sweeper):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SMOKE.read_text().replace("low: 0, high: 60", "low: 60, high: 0"))
    r = run_sweeper("launch", bad, timeout=60)
    assert r.returncode == 2
    assert r.stderr.strip().count("\n") == 0 and "space.dat.switch_step: `low < high` must hold" in r.stderr
    assert not (tmp_path / "sweeps").exists()
    assert "Ray" not in r.stdout + r.stderr


def test_killed_sweep_resumes_to_exactly_num_samples_trials(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    status_file = tmp_path / "sweeps" / "smoke" / "status.json"
    proc = subprocess.Popen(sweeper_cmd("launch", SMOKE), cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    finished_before = {}
    deadline = time.time() + 480
    try:
        while time.time() < deadline:
            time.sleep(0.5)
            if not status_file.exists():
                continue
            trials = json.loads(status_file.read_text())["trials"]
            done = {t["trial_id"]: t for t in trials if t["status"] in ("completed", "stopped")}
            if len(done) >= 2 and len(done) < 5:
                finished_before = done
                break
        assert finished_before, "the sweep never reached two finished trials"
    finally:
        proc.send_signal(signal.SIGKILL)  # the driver dies without any chance to clean up
        proc.wait()

    r = subprocess.run(sweeper_cmd("launch", SMOKE), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    assert "resuming sweep smoke" in r.stdout
    trials = _summary(tmp_path)["trials"]
    assert len(trials) == 6 and len({t["trial_id"] for t in trials}) == 6
    after = {t["trial_id"]: t for t in trials}
    for trial_id, before in finished_before.items():
        # a finished trial is kept as it was, not run again
        assert after[trial_id]["status"] == before["status"] and after[trial_id]["step"] == before["step"]
        # training is deterministic, but throughput is not: a re-run would report other steps_per_s
        assert after[trial_id]["metrics"] == before["metrics"]
        assert after[trial_id]["metrics"]["steps_per_s"] == before["metrics"]["steps_per_s"]
    assert all(t["status"] in ("completed", "stopped", "diverged") for t in trials)
    # the searcher sampled no extra trials (trials Ray's last snapshot never saw are closed as FAIL)
    assert len([s for s in _optuna_states(tmp_path) if s != "FAIL"]) == 6
