"""The fault matrix with the resident service in it: the service (not a launch's own driver) kills
itself at each cue of sweeper/faults.py with SIGKILL, SIGINT and SIGTERM while it runs an attached
launch's sweep; then the same command, with no service left, resumes the sweep. The same checks
as tests/faults/test_driver_signals.py: exactly num_samples trials, no finished trial trained
again, no interrupt labelled a stop, Optuna and MLflow agreeing. `make faults` runs them all."""

from __future__ import annotations

import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from sweeper.service_link import connect
from tests.faults.harness import ENV, Sweep, check_after_fault, check_ledger, finished_trials, resume_and_watch
from tests.faults.test_driver_signals import CUES, SIGNALS

pytestmark = [pytest.mark.integration, pytest.mark.faults]


def _cases():
    for event in CUES:
        for sig in SIGNALS if event != "end" else ("KILL",):
            yield pytest.param(event, sig, id=f"service-{event}-{sig}")


def start_service(sweep: Sweep, directory: Path, fault: str) -> subprocess.Popen:
    """The service in a session of its own (the sweep's cleanup ends it and its Ray), armed with `fault`."""
    env = {**ENV, "SWEEPER_SERVICE_DIR": str(directory), "SWEEPER_FAULT": fault}
    log = open(sweep.workdir / "service.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "sweeper.service_host"], cwd=sweep.workdir, env=env, stdout=log,
                            stderr=subprocess.STDOUT, start_new_session=True)
    sweep.sessions.append(proc.pid)
    deadline = time.monotonic() + 240
    while (conn := connect(directory)) is None:
        assert proc.poll() is None, (sweep.workdir / "service.log").read_text()[-3000:]
        assert time.monotonic() < deadline, "the service did not answer within 240 s"
        time.sleep(0.3)
    conn.close()
    return proc


@pytest.mark.parametrize("event,sig", list(_cases()))
def test_a_service_fault_then_relaunch_loses_and_repeats_nothing(event, sig, tmp_path, mlflow_server):
    sweep = Sweep(tmp_path, mlflow_server, experiment=f"service-faults-{event}-{sig}")
    directory = Path(tempfile.mkdtemp(prefix="sf", dir="/tmp"))
    try:
        service = start_service(sweep, directory, f"{event}:{CUES[event]}:{sig}")
        attached = subprocess.run(sweep.cmd, cwd=tmp_path, env={**ENV, "SWEEPER_SERVICE_DIR": str(directory)},
                                  capture_output=True, text=True, timeout=480)
        sweep.keep_log(attached.stdout, attached.stderr)
        assert "On the service" in attached.stdout, attached.stdout[-2000:] + attached.stderr[-2000:]
        service.wait(timeout=180)
        if sig == "KILL":  # the service died at once: the launch says so and how to resume
            assert service.returncode == -9, f"the fault never fired (service rc {service.returncode})"
            assert attached.returncode == 1 and "the same command resumes" in attached.stderr, attached.stderr[-2000:]
        elif event == "finish":  # every trial had ended: the service lets the sweep write its end, then stops
            assert service.returncode == 0, (tmp_path / "service.log").read_text()[-3000:]
            assert attached.returncode in (0, 130) and "Traceback" not in attached.stderr, attached.stderr[-2500:]
        else:  # the service stopped its sweep for a resume, then itself
            assert service.returncode == 0, (tmp_path / "service.log").read_text()[-3000:]
            assert attached.returncode == 130, attached.stdout[-1500:] + attached.stderr[-2500:]
            assert "Traceback" not in attached.stderr and "run the same command to resume" in attached.stderr
        before = finished_trials(sweep)
        after_fault = check_after_fault(sweep)
        rc, out, err, status_problems = resume_and_watch(sweep)  # no service now: the launch's own driver
        assert rc == 0, f"the relaunch failed (rc {rc}): {out[-2000:]}{err[-3000:]}"
        assert "resuming sweep" in out and "On the service" not in out, out[-2000:]
        wrong = after_fault + status_problems + check_ledger(sweep, before)
        assert not wrong, "\n".join(wrong)
    finally:
        sweep.cleanup()
        shutil.rmtree(directory, ignore_errors=True)
