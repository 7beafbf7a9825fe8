"""An experiment's runner stops its sweep as a user's Ctrl-C would: a SIGINT to the runner reaches
the sweep's driver once, the sweep writes itself down as interrupted (resumable), and the runner
returns its exit code instead of killing it."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time

import pytest

from tests.conftest import sweeper_env, tiny_space

pytestmark = pytest.mark.integration

RUNNER = "import sys; from pathlib import Path; from experiments.launching import sweeper_launch; " \
         "sys.exit(sweeper_launch(Path('long.yaml'), '--progress', 'none', cwd=Path('.')))"


def ignore_sigint() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # what a shell's `nohup runner &` leaves a background job


@pytest.mark.parametrize("started", ["in the foreground", "in the background"])
def test_a_sigint_to_the_runner_interrupts_its_sweep_as_a_ctrl_c_would(tmp_path, started):
    # trials far longer than the wait for their first report: the signal always comes mid-training
    (tmp_path / "long.yaml").write_text(tiny_space("long", switch_high=100, switch_step=50, samples=2, max_steps=20000,
                                                   eval_every=20, scheduler="{type: fifo}", seed=5))
    runner = subprocess.Popen([sys.executable, "-c", RUNNER], cwd=tmp_path, env=sweeper_env(), text=True,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              preexec_fn=ignore_sigint if started == "in the background" else None)
    trials = tmp_path / "sweeps" / "long" / "trials"
    while not any(p.stat().st_size for p in trials.glob("*/metrics.jsonl")):  # a trial is training
        assert runner.poll() is None, runner.communicate()[0]
        time.sleep(0.2)
    runner.send_signal(signal.SIGINT)
    out = runner.communicate(timeout=300)[0]
    assert runner.returncode == 130, out  # the sweep's own exit code for an interrupted, resumable sweep
    status = json.loads((tmp_path / "sweeps" / "long" / "status.json").read_text())
    assert status["state"] == "interrupted", status  # written down by its driver, not killed mid-run
    assert "run the same command to resume" in out, out
