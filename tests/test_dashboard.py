"""`sweeper dashboard NAME`: optuna-dashboard on the smoke sweep's study, seen in a real headless
Chromium (the study, its trials and their states, the intermediate-values chart); a missing
study is one line and exit 2. Browser setup: tests/test_mlflow_ui.py."""

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import ROOT, free_port, sweeper_cmd, tiny_space
from test_mlflow_ui import browser, wait_for_text  # noqa: F401 - the fixture

ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
SCREENSHOT = os.environ.get("SWEEPER_DASHBOARD_SCREENSHOT")  # set to also save the chart, e.g. docs/optuna_dashboard.png


def test_a_sweep_without_a_study_is_one_line_and_exit_2(tmp_path):
    r = subprocess.run(sweeper_cmd("dashboard", "nosuch"), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "sweeps/nosuch: no Optuna study here" in lines[0]
    (tmp_path / "sweeps" / "broken").mkdir(parents=True)
    (tmp_path / "sweeps" / "broken" / "optuna.db").write_text("not a database")
    r = subprocess.run(sweeper_cmd("dashboard", "broken"), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "Optuna study" in r.stderr, r.stderr


@pytest.mark.parametrize("stray", ["journal_of_text", "wal_of_text", "journal_a_fifo"])
def test_a_stray_file_beside_the_study_is_one_line_and_kept(smoke_sweep, tmp_path, stray):
    # the dashboard's server opens the study for writing: SQLite would delete a -journal or -wal as its own
    from tests.hostile import assert_refused, snapshot, sweeper

    workdir, _ = smoke_sweep
    folder = tmp_path / "sweeps" / "smoke"
    folder.mkdir(parents=True)
    shutil.copyfile(workdir / "sweeps" / "smoke" / "optuna.db", folder / "optuna.db")
    beside = folder / f"optuna.db-{stray.split('_')[0]}"
    os.mkfifo(beside) if stray.endswith("fifo") else beside.write_text("the user's notes, not SQLite's\n")
    before = snapshot(tmp_path)
    assert_refused(sweeper("dashboard", "smoke", cwd=tmp_path), beside.name, "move it away", root=tmp_path, before=before)


def test_a_study_file_holding_another_study_beside_the_sweep_s_is_one_line(smoke_sweep, tmp_path):
    """The dashboard lists every study of its file: a second one (copied in, another sweep's) would be
    shown beside the sweep's; `.` names the sweep's own folder (it was read as a sweep named '')."""
    import optuna

    from tests.hostile import assert_refused, snapshot, sweeper

    workdir, _ = smoke_sweep
    folder = tmp_path / "sweeps" / "smoke"
    folder.mkdir(parents=True)
    shutil.copyfile(workdir / "sweeps" / "smoke" / "optuna.db", folder / "optuna.db")
    optuna.create_study(study_name="other", storage=f"sqlite:///{folder / 'optuna.db'}")
    before = snapshot(tmp_path)
    assert_refused(sweeper("dashboard", "smoke", cwd=tmp_path), "holds 2 studies", root=tmp_path, before=before)
    assert_refused(sweeper("dashboard", ".", cwd=folder), "holds 2 studies", root=tmp_path, before=before)


def _ipv6_loopback() -> bool:
    import socket

    try:
        with socket.socket(socket.AF_INET6, socket.SOCK_STREAM) as s:
            s.bind(("::1", 0))
        return True
    except OSError:
        return False


@pytest.mark.skipif(not _ipv6_loopback(), reason="no IPv6 loopback on this machine")
def test_the_dashboard_serves_on_an_ipv6_address(tmp_path):
    # optuna-dashboard's server reads HOST:PORT: an IPv6 address unbracketed failed (exit 1, "'' is
    # not a valid port number") after the exposure warning
    import json
    import urllib.request

    import optuna

    db = tmp_path / "sweeps" / "v6" / "optuna.db"
    db.parent.mkdir(parents=True)
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.create_study(study_name="v6", storage=f"sqlite:///{db}")
    study.set_user_attr("sweeper.format", 2)  # a sweep's study: the dashboard serves no other
    study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=2)
    proc = subprocess.Popen(sweeper_cmd("dashboard", "v6", "--host", "::1", "--port", free_port()), cwd=tmp_path,
                            env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        proc.stdout.readline()
        ready = proc.stdout.readline()
        assert ready.startswith("ready: http://[::1]:"), ready + (proc.stderr.read() if proc.poll() is not None else "")
        base = ready.split()[1].split("/dashboard")[0]
        with urllib.request.urlopen(f"{base}/api/studies", timeout=10) as answer:
            studies = json.load(answer)["study_summaries"]
        assert [s["study_name"] for s in studies] == ["v6"]
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.fixture
def dashboard(smoke_sweep):
    """`sweeper dashboard smoke` in the smoke sweep's folder: (its address, the process)."""
    workdir, _ = smoke_sweep
    port = free_port()
    proc = subprocess.Popen(sweeper_cmd("dashboard", "smoke", "--port", port), cwd=workdir, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    line = proc.stdout.readline()  # printed at once: the study and the address
    assert line.startswith("Optuna dashboard on ") and "optuna.db" in line, line + proc.stdout.read() if proc.poll() else line
    ready = proc.stdout.readline()  # printed once the server answers: the study's page
    assert ready.startswith("ready: http://"), ready + proc.stdout.read() if proc.poll() else ready
    yield ready.split()[1], proc
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


@pytest.mark.integration
@pytest.mark.long  # a browser on the dashboard: `make test-long`; `make test` drives the MLflow UI's (test_mlflow_ui.py)
def test_the_dashboard_shows_the_study_its_trials_and_intermediate_values(dashboard, browser, tmp_path):  # noqa: F811
    url, proc = dashboard
    assert url.startswith("http://127.0.0.1:") and url.endswith("/dashboard/studies/1")

    browser.get(url)  # the study's page: history, the best trial, the intermediate values by step
    body = wait_for_text(browser, ["smoke (id=1)", "Best Trial", "Intermediate values", "Step"])
    assert "dat.switch_step" in body and "optim.lr" in body
    chart = next(e for e in browser.find_elements("css selector", ".MuiCard-root, .MuiPaper-root")
                 if e.text.startswith("Intermediate values"))
    deadline = time.time() + 60  # plotly draws the curves after the card's text
    while not chart.find_elements("css selector", "svg .scatterlayer .trace") and time.time() < deadline:
        time.sleep(0.5)
    assert chart.find_elements("css selector", "svg .scatterlayer .trace"), "no curve drawn in the chart"
    browser.execute_script("arguments[0].scrollIntoView()", chart)
    shot = tmp_path / "intermediate_values.png"
    chart.screenshot(str(shot))
    assert shot.stat().st_size > 10_000
    if SCREENSHOT:
        Path(SCREENSHOT).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(shot, SCREENSHOT)

    browser.get(url + "/trials")  # all six trials, ASHA's stops as Pruned
    body = wait_for_text(browser, ["6 Trials", "Trial 5"])
    assert "Pruned" in body and "Complete" in body

    # stopping the verb stops the server
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(timeout=30) == 0
    import urllib.request

    deadline = time.time() + 10
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=1)
            time.sleep(0.5)
        except OSError:
            return
    raise AssertionError(f"{url} still answers after `sweeper dashboard` ended")


NOTE_SHOT = os.environ.get("SWEEPER_DASHBOARD_NOTE_SCREENSHOT")  # set to also save it, e.g. docs/optuna_dashboard_note.png
CUT_SPACE = tiny_space("cut", switch_high=200, switch_step=50, samples=2, max_steps=2000, eval_every=20,
                       scheduler="{type: fifo}", seed=3)


@pytest.mark.integration
@pytest.mark.long
def test_an_interrupted_trial_says_so_on_its_dashboard_page(tmp_path, browser):  # noqa: F811
    """A sweep cut off by Ctrl-C (on cue): the dashboard names the objective acc_3x, and the trial
    page of a trial left RUNNING carries the note that it was interrupted and resumes."""
    (tmp_path / "cut.yaml").write_text(CUT_SPACE)
    r = subprocess.run(sweeper_cmd("launch", "cut.yaml", "--progress", "none"), cwd=tmp_path, timeout=600,
                       env={**ENV, "SWEEPER_FAULT": "report:4:INT"}, capture_output=True, text=True)
    assert r.returncode == 130, r.stderr[-2000:]
    port = free_port()
    proc = subprocess.Popen(sweeper_cmd("dashboard", "cut", "--port", port), cwd=tmp_path, env=ENV,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        proc.stdout.readline()
        ready = proc.stdout.readline()
        assert ready.startswith("ready: http://"), ready
        browser.get(ready.split()[1])  # the study's page: the objective by its name
        body = wait_for_text(browser, ["cut (id=1)", "acc_3x"])
        assert "Objective 0" not in body
        browser.get(ready.split()[1] + "/trials")  # the first trial's page: Running, and why
        wait_for_text(browser, ["2 Trials", "Running", "Interrupted at step", "resumes it from its checkpoint",
                                "interrupted True"])
        if NOTE_SHOT:
            browser.save_screenshot(NOTE_SHOT)
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)
