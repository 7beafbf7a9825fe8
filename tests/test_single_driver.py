"""One driver per sweep (a lock beside its directory) and one creator of an embedded MLflow store."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import psutil
import pytest

from tests.conftest import ROOT, sweeper_cmd, sweeper_env

pytestmark = pytest.mark.integration
ENV = sweeper_env()
SMOKE = ROOT / "search_spaces" / "smoke.yaml"


def test_a_second_launch_of_a_running_sweep_refuses_in_one_line(tmp_path):
    # the first driver freezes itself at its first report (SWEEPER_FAULT ...:STOP), holding the sweep's
    # lock with a trial mid-run, for as long as the test needs: no race with its end
    first = subprocess.Popen(sweeper_cmd("launch", SMOKE), cwd=tmp_path, env={**ENV, "SWEEPER_FAULT": "report:1:STOP"},
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    lock = tmp_path / "sweeps" / ".smoke.lock"
    try:
        deadline = time.time() + 300
        while psutil.Process(first.pid).status() != psutil.STATUS_STOPPED:
            assert first.poll() is None and time.time() < deadline, "the first launch never reached its first report"
            time.sleep(0.2)
        assert json.loads(lock.read_text())["pid"] == first.pid
        second = subprocess.run(sweeper_cmd("launch", SMOKE), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
        assert second.returncode == 2 and "Traceback" not in second.stderr, second.stderr[-2000:]
        assert second.stderr.strip().count("\n") == 0
        assert f"sweep smoke is already running (driver pid {first.pid}" in second.stderr
        assert first.poll() is None  # the running sweep is untouched
    finally:
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=60)
    # the lock dies with its process: the next launch gets it (validated, then stopped by the same check
    # against a dummy holder would be needed otherwise); a fresh holder takes it at once
    code = f"from sweeper.lock import hold_sweep_lock; hold_sweep_lock(__import__('pathlib').Path({str(tmp_path / 'sweeps' / 'smoke')!r}), 'smoke'); print('ok')"
    r = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60)
    assert r.stdout.strip() == "ok", r.stderr


START_STORE = """
import sys
from pathlib import Path
from sweeper.adapters import mlflow_store as store, mlflow_tracking as tracking
from sweeper.space_file import load_space
spec = load_space(sys.argv[1])
uri = sys.argv[2]
sweep_dir = Path(sys.argv[3])
sweep_dir.mkdir(parents=True, exist_ok=True)
with store.store_lock(uri):
    tracking.SweepTracker(uri, spec, sweep_dir, None).start(sys.argv[1])
print("started")
"""


def test_two_sweeps_create_one_embedded_store_at_once(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    procs = [subprocess.Popen([sys.executable, "-c", START_STORE, str(SMOKE), uri, str(tmp_path / f"s{i}")],
                              cwd=tmp_path, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for i in range(2)]
    outs = [p.communicate(timeout=300) for p in procs]
    for p, (out, err) in zip(procs, outs):
        assert p.returncode == 0 and out.strip() == "started", err[-3000:]
    from mlflow import MlflowClient

    runs = MlflowClient(tracking_uri=uri).search_runs([MlflowClient(tracking_uri=uri).get_experiment_by_name("smoke").experiment_id])
    assert len(runs) == 2
