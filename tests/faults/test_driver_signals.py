"""Every fault cue of sweeper/faults.py with SIGKILL, SIGINT and SIGTERM, then the same command again:
the resumed sweep ends with exactly num_samples trials, no finished trial trained again, no interrupt
labelled a stop, Optuna and MLflow agreeing with the scheduler, and `sweeper status` describing the
running driver while it resumes. One case runs in `make test`; `make faults` runs them all."""

from __future__ import annotations

import signal
import subprocess

import pytest

from tests.conftest import sweeper_cmd
from tests.faults.harness import ENV, Sweep, check_after_fault, check_ledger, finished_trials, resume_and_watch

pytestmark = pytest.mark.integration

# event -> the pass on which the driver kills itself: chosen so that some trials have ended and some
# are mid-training (4 trials, 2 at once, 4 reports each at most, ASHA rungs at steps 10 and 20)
CUES = {
    "verdict": 1,      # ASHA's first stop, decided and in the ledger (stopped_at); Ray has not acted on it
    "report": 6,       # after the 6th report reached the driver (the ledger has it; MLflow, status.json not)
    "logged": 5,       # a report queued for MLflow, status.json not yet written
    "state_write": 9,  # mid-write of a view file: the new one beside the old, not yet in place
    "stop": 1,         # ASHA stopped a trial: the ledger says PRUNED, nothing else knows yet
    "end": 1,          # a trial ran to its end: the ledger has it, the views not yet
    "finish": 1,       # every trial ended; summary.json written, the MLflow parent still open
}
SIGNALS = ("KILL", "INT", "TERM")
FAST = {("report", "KILL")}  # the default subset (make test); the rest: make faults


def _cases():
    for event in CUES:
        for sig in SIGNALS if event != "end" else ("KILL",):  # SIGINT/SIGTERM at an end: as at a stop
            marks = [] if (event, sig) in FAST else [pytest.mark.faults]
            yield pytest.param(event, sig, marks=marks, id=f"{event}-{sig}")


@pytest.mark.parametrize("event,sig", list(_cases()))
def test_fault_then_relaunch_loses_and_repeats_nothing(event, sig, tmp_path, mlflow_server):
    sweep = Sweep(tmp_path, mlflow_server, experiment=f"faults-{event}-{sig}")
    try:
        rc, out, err = sweep.run(fault=f"{event}:{CUES[event]}:{sig}")
        # the cue fired: SIGKILL ends the driver at once; SIGINT/SIGTERM stop it for a resume
        if sig == "KILL":
            assert rc == -signal.SIGKILL, f"the fault never fired (rc {rc}): {err[-2000:]}"
        else:
            assert rc == 130, f"rc {rc} after SIG{sig} at {event}: {out[-1500:]}{err[-2500:]}"
            assert "Traceback" not in err, err[-3000:]
            assert "run the same command to resume" in err or "interrupted" in err, err[-2000:]
        before = finished_trials(sweep)
        after_fault = check_after_fault(sweep)
        rc, out, err, status_problems = resume_and_watch(sweep)
        assert rc == 0, f"the relaunch failed (rc {rc}): {out[-2000:]}{err[-3000:]}"
        assert "resuming sweep" in out, out[-2000:]
        wrong = after_fault + status_problems + check_ledger(sweep, before)
        assert not wrong, "\n".join(wrong)
    finally:
        sweep.cleanup()


def test_a_bad_fault_cue_is_one_line_and_exit_2_before_ray(tmp_path):
    sweep = Sweep(tmp_path, "http://127.0.0.1:9", experiment="bad-cue")  # never reached
    r = subprocess.run(sweeper_cmd("launch", sweep.space), cwd=tmp_path, env={**ENV, "SWEEPER_FAULT": "report:0:HUP"},
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr[-2000:]
    assert "$SWEEPER_FAULT must be EVENT:COUNT:SIGNAL" in r.stderr and "'report:0:HUP'" in r.stderr
    assert not (tmp_path / "sweeps").exists()


COUNT_TO_FIVE = """
from sweeper.faults import Faults
faults = Faults.from_env()
for i in range(1, 6):
    faults.point("stop")  # another event: never counted
    faults.point("report")
    print(i, flush=True)
"""


@pytest.mark.parametrize("cue,rc,printed", [(None, 0, "1 2 3 4 5"), ("report:3:TERM", -signal.SIGTERM, "1 2"),
                                            ("report:1:KILL", -signal.SIGKILL, "")])
def test_a_cue_fires_once_on_its_count_and_an_unset_one_never(cue, rc, printed):
    import sys

    env = {**ENV, "SWEEPER_FAULT": cue} if cue else ENV
    r = subprocess.run([sys.executable, "-c", COUNT_TO_FIVE], env=env, capture_output=True, text=True, timeout=60)
    assert (r.returncode, r.stdout.split()) == (rc, printed.split()), r.stderr
