"""The live view of a real sweep: `sweeper launch search_spaces/smoke.yaml` (the session's smoke
sweep, its output captured, so not a terminal) starts with the plan line and reports progress as
plain lines with the ETA; `sweeper status --watch` of the finished sweep draws it once and ends."""

import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, sweeper_cmd
from sweeper.fs import sqlite_url

pytestmark = pytest.mark.integration
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
LINE = re.compile(r"^\[smoke \d+:\d\d:\d\d\] .* \| best acc_3x[: ].* \| [\d,]+ steps done, ~[\d,]+ to go( \| [\d.]+ steps/s per trial)? \| "
                  r"(ETA (after the first report|\d+:\d\d:\d\d)|nothing left to train)$")


def test_launch_prints_the_plan_then_plain_progress_lines_with_the_eta(smoke_sweep):
    _, r = smoke_sweep
    lines = r.stdout.splitlines()
    plan = next(i for i, line in enumerate(lines) if line.startswith("plan: "))
    # phase-aware ASHA: a trial that switches at s is judged only at rungs from s + 10 on (smoke.yaml's
    # phase_margin), so with switches 0..60 about 48 of 60 steps a trial are expected, not ASHA's 22
    assert lines[plan] == ("plan: 6 trials of up to 60 steps, 2 at a time; ASHA (rungs 10, 20, 40, eta 2, each trial judged "
                           "only after its switch) expects ~49 steps a trial, ~296 steps in all; ETA after the first report. "
                           "Ctrl-C stops; the same command resumes.")
    progress = [line for line in lines if line.startswith("[smoke ")]
    assert progress and all(LINE.match(line) for line in progress), "\n".join(progress)
    assert any(re.search(r"ETA \d+:\d\d:\d\d$", line) for line in progress)  # a measured ETA once trials reported
    assert progress[-1].endswith("nothing left to train") and "6 to sample" not in progress[-1]
    assert plan < lines.index(progress[0])
    assert "\x1b[" not in r.stdout  # no terminal codes in a log


def test_the_speed_status_json_shows_is_over_every_report_of_the_launch(smoke_sweep):
    """Every report the driver received in this launch (the study holds its value; a stopped trial
    may have written one more to its folder before it ended, which the sweep never saw)."""
    import optuna

    from sweeper.eta import LaunchSpeed
    from trainables.run_dir import RunDir

    workdir, _ = smoke_sweep
    sweep = workdir / "sweeps" / "smoke"
    status = json.loads((sweep / "status.json").read_text())
    study = optuna.load_study(study_name="smoke", storage=sqlite_url(sweep / "optuna.db"))
    expected = LaunchSpeed(eval_every=10)  # smoke.yaml's
    for t in study.trials:
        for report in RunDir(sweep / "trials" / f"t{t.number:04d}").reports():
            if int(report["step"]) in t.intermediate_values:
                expected.add(t.number, int(report["step"]), report.get("steps_per_s"))
    assert expected.steps > 0 and status["trial_speed"] == pytest.approx(expected.value(), rel=1e-6)


def test_status_watch_of_a_finished_sweep_draws_once_and_ends(smoke_sweep):
    workdir, _ = smoke_sweep
    r = subprocess.run(sweeper_cmd("status", "smoke", "--watch"), cwd=workdir, env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert len(r.stdout.splitlines()) == 1 and LINE.match(r.stdout.strip()), r.stdout
    summary = json.loads((workdir / "sweeps" / "smoke" / "summary.json").read_text())
    counts = summary["counts"]
    for status, n in counts.items():  # the line counts what the sweep holds, status by status
        assert f"{n} {status}" in r.stdout, (counts, r.stdout)
