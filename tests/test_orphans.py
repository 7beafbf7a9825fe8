"""A SIGKILLed driver's local Ray does not outlive it: the next launch of the sweep ends every
process that driver's Ray started (recorded in ray_processes.json) before starting its own.
`make test` checks the same within its kill-and-resume sweep (test_sweep_integration.py); this
smaller sweep, with concurrent trials, is `make test-long`'s."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import ray_left_running, sweeper_cmd, sweeper_env, tiny_space

pytestmark = [pytest.mark.integration, pytest.mark.long]
ENV = sweeper_env()

SPACE = tiny_space("orph", switch_high=100, switch_step=50, samples=2, max_steps=300, eval_every=50,
                   scheduler="{type: fifo}", seed=1)


def killed_at_its_third_report(tmp_path) -> tuple[list[str], Path]:
    """The sweep's launch command and folder, after a driver that SIGKILLed itself at its 3rd
    report (SWEEPER_FAULT): Ray and its agents were all up, trials mid-run."""
    space = tmp_path / "orph.yaml"
    space.write_text(SPACE)
    cmd = sweeper_cmd("launch", space, "--progress", "lines")
    proc = subprocess.run(cmd, cwd=tmp_path, env={**ENV, "SWEEPER_FAULT": "report:3:KILL"}, capture_output=True, text=True,
                          timeout=600)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    return cmd, tmp_path / "sweeps" / "orph"


def test_the_next_launch_ends_a_sigkilled_drivers_ray(tmp_path):
    cmd, sweep_dir = killed_at_its_third_report(tmp_path)
    recorded = json.loads((sweep_dir / "ray_processes.json").read_text())["processes"]
    assert any("raylet" in p["name"] for p in recorded) and any("gcs_server" in p["name"] for p in recorded), recorded
    time.sleep(2)
    left_behind = ray_left_running(sweep_dir)
    assert left_behind, "nothing of the killed driver's Ray was left running: the test's premise no longer holds"

    r = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert ray_left_running(sweep_dir) == [], "the first driver's Ray outlived the next launch"
    assert "processes of this sweep's earlier local Ray" in r.stderr, r.stderr[-2000:]
    final = json.loads((sweep_dir / "status.json").read_text())
    assert len(final["trials"]) == 2 and all(t["status"] == "completed" for t in final["trials"]), final["trials"]


def test_a_refused_resume_after_a_sigkill_is_one_line_that_names_the_leftovers_it_ended(tmp_path):
    cmd, sweep_dir = killed_at_its_third_report(tmp_path)
    time.sleep(2)
    assert ray_left_running(sweep_dir), "nothing of the killed driver's Ray was left running: the test's premise no longer holds"
    (sweep_dir / "space.yaml").write_text("")  # damaged while no driver ran: the resume refuses it

    r = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 2, r.stdout[-2000:] + r.stderr[-2000:]
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "space.yaml: empty" in lines[0], r.stderr[-2000:]
    assert lines[0].endswith("leftover Ray processes of its killed driver]"), lines[0]
    assert ray_left_running(sweep_dir) == []
