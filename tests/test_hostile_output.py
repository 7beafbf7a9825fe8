"""What the sweeper prints, when what it prints comes from someone else: names and values with
terminal escapes, bytes that are no UTF-8, a terminal whose encoding lacks a character, a working
folder removed under the shell, a full disk behind stdout, a credentials file named by mistake, a
record of curves that would take gigabytes to parse, and a tracking store's values in the report."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from core.errors import ConfigError, error_line, visible
from sweeper.curves import MAX_RECORD_VALUES, _read_record

from tests.hostile import ENV, SWEEPER, assert_refused, snapshot, sweeper

ESCAPES = "\x1b]0;pwned\x07\x1b[2J"
NO_SERVICE = {"SWEEPER_SERVICE_DIR": "/nonexistent/no-service-here"}


def _finished_status(sweep_dir: Path, name: str, text: str) -> None:
    sweep_dir.mkdir(parents=True)
    trial = {"trial_id": "t0000" + text, "params": {"seed" + text: "v" + text + "\r\nINJECTED"}, "status": "completed",
             "step": 10, "metrics": {"step": 10, "acc_3x": 0.5}, "path": ""}
    (sweep_dir / "status.json").write_text(json.dumps({"name": name, "metric": "acc_3x", "mode": "max", "state": "finished",
                                                       "updated": 1.0e9, "num_samples": 1, "trials": [trial]}))


def test_visible_escapes_control_characters_and_undecodable_bytes_and_keeps_the_rest():
    assert visible("a" + ESCAPES + "b") == "a\\x1b]0;pwned\\x07\\x1b[2Jb"
    assert visible(os.fsdecode(b"run-\xff\xfe")) == "run-\\xff\\xfe"
    assert visible("line\nnext", keep="\n") == "line\nnext" and visible("t\u00e9 \u2713") == "t\u00e9 \u2713"
    assert error_line("no sweep " + ESCAPES + "\nhere") == "error: no sweep \\x1b]0;pwned\\x07\\x1b[2J here"


def test_terminal_escapes_in_a_status_file_and_a_folder_name_reach_the_terminal_escaped(tmp_path):
    _finished_status(tmp_path / "sweeps" / "s", "s" + ESCAPES, ESCAPES)
    _finished_status(tmp_path / "sweeps" / ("e" + ESCAPES), "e", ESCAPES)
    for args in (["status", "s"], ["status"]):
        r = sweeper(*args, cwd=tmp_path, env=NO_SERVICE)
        assert r.returncode == 0, r.stderr[-2000:]
        assert "\x1b" not in r.stdout and "\x07" not in r.stdout and "\r" not in r.stdout, r.stdout
        assert "\\x1b]0;pwned\\x07" in r.stdout
        assert not any(line.startswith("INJECTED") for line in r.stdout.splitlines())  # a value breaks no line
    assert "INJECTED" in sweeper("status", "s", cwd=tmp_path, env=NO_SERVICE).stdout  # the table's value, on its row
    assert_refused(sweeper("status", "x" + ESCAPES, cwd=tmp_path, env=NO_SERVICE), "\\x1b]0;pwned\\x07")


def test_names_the_output_encoding_lacks_are_escaped_not_a_traceback(tmp_path):
    _finished_status(tmp_path / "sweeps" / "s", "s", "\u00e9\u2713")
    _finished_status(tmp_path / "sweeps" / os.fsdecode(b"\xff\xfe"), "u", "")
    for encoding in ("ascii", "utf-8"):  # utf-8 as a real UTF-8 locale sets it: strict, no surrogates
        for args in (["status", "s"], ["status"]):
            r = sweeper(*args, cwd=tmp_path, env={**NO_SERVICE, "PYTHONIOENCODING": encoding})
            assert r.returncode == 0 and "Traceback" not in r.stderr, (encoding, args, r.stderr[-2000:])
            assert "t0000" in r.stdout
    assert "\\xff\\xfe" in r.stdout  # the folder that is no UTF-8, by its bytes


def test_a_working_folder_removed_under_the_shell_is_one_line(tmp_path):
    cmd = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
    for verb in (["status"], ["launch", str(Path(__file__).parents[1] / "search_spaces" / "smoke.yaml")]):
        script = 'mkdir gone && cd gone && rmdir ../gone && exec "$@"'
        r = subprocess.run(["sh", "-c", script, "sh", *cmd, *verb], cwd=tmp_path, env={**ENV, **NO_SERVICE},
                           capture_output=True, text=True, timeout=120)
        assert_refused(r, "working folder no longer exists")
    assert sorted(p.name for p in tmp_path.iterdir()) == []  # nothing was written anywhere


def test_output_a_full_disk_refuses_is_one_line_not_a_silent_success(tmp_path):
    if not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    _finished_status(tmp_path / "sweeps" / "s", "s", "")
    cmd = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
    for args in (["status", "s"], ["validate", str(Path(__file__).parents[1] / "search_spaces" / "smoke.yaml")]):
        with open("/dev/full", "w") as full:
            r = subprocess.run([*cmd, *args], cwd=tmp_path, env={**ENV, **NO_SERVICE}, stdout=full,
                               stderr=subprocess.PIPE, text=True, timeout=120)
        r.stdout = ""
        assert_refused(r, "stdout", "No space left on device")


def test_a_closed_stdout_is_one_line_before_any_work(tmp_path):
    _finished_status(tmp_path / "sweeps" / "s", "s", "")
    cmd = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
    before = snapshot(tmp_path)
    for args in (["status", "s"], ["launch", str(Path(__file__).parents[1] / "search_spaces" / "smoke.yaml"), "--in-process"]):
        r = subprocess.run([*cmd, *args], cwd=tmp_path, env={**ENV, **NO_SERVICE}, stdout=subprocess.DEVNULL,
                           stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1))
        r.stdout = ""
        assert_refused(r, "stdout is closed", root=tmp_path, before=before)  # the launch trained nothing


@pytest.mark.parametrize("stderr", ["closed", "/dev/full"])
def test_a_refusal_with_stderr_closed_or_full_is_exit_2_and_never_reaches_stdout(tmp_path, stderr):
    # with descriptor 2 closed, Python's sys.stderr is None and print() wrote the refusal on stdout;
    # with stderr on a full disk, the refusal's own print failed: exit 1
    if stderr == "/dev/full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    cmd = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
    for args in (["validate", "nonexistent.yaml"], ["status", "--bogus"], ["report", "nosuch"]):
        with open("/dev/full" if stderr == "/dev/full" else os.devnull, "w") as err:
            r = subprocess.run([*cmd, *args], cwd=tmp_path, env={**ENV, **NO_SERVICE}, stdout=subprocess.PIPE, stderr=err,
                               text=True, timeout=120, preexec_fn=(lambda: os.close(2)) if stderr == "closed" else None)
        assert (r.returncode, r.stdout) == (2, ""), (args, r.returncode, r.stdout)


@pytest.mark.parametrize("content", ["machine example.com login bob password S3cr3tPassw0rd\n",
                                     "https://bob:ghp_S3cr3tToken1234567890@github.com\n",
                                     "export MLFLOW_TRACKING_PASSWORD=S3cr3tPassw0rd\n"])
def test_a_credentials_file_named_as_a_space_or_config_is_refused_without_its_text(tmp_path, content):
    (tmp_path / "creds").write_text(content)
    for verb in ("validate", "trial"):
        line = assert_refused(sweeper(verb, "creds", cwd=tmp_path), "must be a mapping of keys", "characters")
        assert "S3cr3t" not in line and "bob" not in line, line


def test_a_record_of_many_tiny_values_is_refused_before_it_is_parsed(tmp_path):
    record = tmp_path / "bomb.json.gz"  # ~11 MB of JSON text, compressed to a few KB: gigabytes once parsed at scale
    with gzip.open(record, "wb", compresslevel=1) as f:
        f.write(b'{"runs": [{"params": {}, "reports": [' + b"{}," * (MAX_RECORD_VALUES + 1) + b"{}]}]}")
    with pytest.raises(ConfigError, match="values, more than"):
        _read_record(record)


def test_the_report_bounds_and_escapes_what_a_tracking_store_holds(tmp_path):
    import mlflow

    from sweeper.commands.report import build_report

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    exp = client.create_experiment("s", artifact_location=str(tmp_path / "artifacts"))
    parent = client.create_run(exp, tags={"role": "sweep", "sweep": "s"}).info.run_id
    for i, lr in enumerate(["0.001" + ESCAPES, "9" * 100_000, "10 | x\n## injected heading\n| a"]):
        run = client.create_run(exp, tags={"mlflow.parentRunId": parent, "trial_id": f"t{i}" + ESCAPES + "t" * 5000,
                                           "status": "completed" + ESCAPES, "searched": "optim.lr"})
        client.log_param(run.info.run_id, "optim.lr", lr)
        client.log_metric(run.info.run_id, "acc_3x", 0.5 + i / 10)
    text = build_report("s", uri, None, None, top=5)
    assert "\x1b" not in text and "\x07" not in text and "## injected heading" not in text.replace("| x ## injected", "")
    assert all(len(line) <= 400 for line in text.splitlines()), max(map(len, text.splitlines()))
    assert "\\|" in text and "\\x1b]0;pwned\\x07" in text


def test_validate_prints_a_choice_of_a_thousand_values_in_bounded_lines(tmp_path):
    from sweeper.commands.validate import MAX_LINE

    choices = [round(1e-4 * (i + 1), 6) for i in range(1000)]
    space = {"name": "big", "space": {"optim.lr": {"type": "categorical", "choices": choices}},
             "searcher": {"baseline": [{"optim.lr": choices[-1]}]}}
    (tmp_path / "big.yaml").write_text(json.dumps(space))
    r = sweeper("validate", "big.yaml", "--samples", "2", cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = r.stdout.splitlines()
    assert any("CategoricalDistribution" in line for line in lines) and any(line.startswith("baseline 0") for line in lines)
    assert max(map(len, lines)) <= MAX_LINE, max(map(len, lines))


def test_status_and_replay_lines_stay_bounded_whatever_the_files_hold(tmp_path):
    from sweeper.views import TABLE_WIDTH

    _finished_status(tmp_path / "sweeps" / "s", "s", "")
    status = json.loads((tmp_path / "sweeps" / "s" / "status.json").read_text())
    status["trials"][0]["params"].update({f"p{i}": i for i in range(3000)})  # a damaged or planted file
    (tmp_path / "sweeps" / "s" / "status.json").write_text(json.dumps(status))
    r = sweeper("status", "s", cwd=tmp_path, env=NO_SERVICE)
    assert r.returncode == 0 and "t0000" in r.stdout, r.stderr[-2000:]
    assert max(map(len, r.stdout.splitlines())) <= TABLE_WIDTH

    reports = [{"step": 20, "acc_3x": 0.1}, {"step": 40, "acc_3x": 0.2}]
    (tmp_path / "rec.json").write_text(json.dumps({"runs": [
        {"params": {"dat.switch_step": "s" * 100_000, "optim.lr": 0.003}, "reports": reports},
        {"params": {"dat.switch_step": 0, "optim.lr": 0.003}, "reports": reports}]}))
    space = {"name": "r", "budget": {"num_samples": 2, "max_concurrent": 1, "max_steps": 40, "eval_every": 20},
             "scheduler": {"type": "fifo"},
             "space": {"dat.switch_step": {"type": "int", "low": 0, "high": 40, "step": 20},
                       "optim.lr": {"type": "categorical", "choices": [0.003]}}}
    (tmp_path / "r.yaml").write_text(json.dumps(space))
    r = sweeper("replay", "r.yaml", "--curves", "rec.json", "--replays", "2", cwd=tmp_path, env=NO_SERVICE)
    assert r.returncode in (0, 2) and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert max(map(len, (r.stdout + r.stderr).splitlines())) <= 1000


@pytest.mark.integration
@pytest.mark.parametrize("stderr_too", [False, pytest.param(True, marks=pytest.mark.long)], ids=["stdout", "stdout-and-stderr"])
def test_a_launch_whose_stdout_reader_leaves_runs_its_sweep_to_the_end_and_says_so_once(tmp_path, stderr_too):
    # `sweeper launch ... | head -c1`: the reader is no owner of the sweep; the sweep used to stop at its first
    # line with exit 0 and no word, its study, folder and a RUNNING MLflow run left for a resume nobody knew of
    from tests.conftest import tiny_space

    (tmp_path / "pipe.yaml").write_text(tiny_space("pipe", switch_high=20, switch_step=10, samples=2, max_steps=20,
                                                   eval_every=10, scheduler="{type: fifo}", seed=0))
    cmd = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
    launch = subprocess.Popen([*cmd, "launch", "pipe.yaml", "--in-process", "--progress", "lines"], cwd=tmp_path,
                              env={**ENV, **NO_SERVICE}, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT if stderr_too else subprocess.PIPE)  # `2>&1 | head -c1`: both go
    assert launch.stdout.read(1)
    launch.stdout.close()  # the reader leaves
    err = "" if stderr_too else launch.stderr.read().decode()
    assert launch.wait(timeout=600) == 0, err
    assert stderr_too or (err.count("stdout's reader left") == 1 and "Traceback" not in err), err
    status = json.loads((tmp_path / "sweeps" / "pipe" / "status.json").read_text())
    assert status["state"] == "finished" and [t["status"] for t in status["trials"]] == ["completed"] * 2, status


def test_a_trial_whose_stdout_reader_is_gone_trains_to_its_end_into_its_folder_and_says_so_once(tmp_path):
    # `sweeper trial tiny --out o | head -c1`: the run stopped at its first line, exit 0, no word, its folder
    # holding a config and no report; a run kept in --out is the reader's no more than a sweep is
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    cmd = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
    try:
        r = subprocess.run([*cmd, "trial", "tiny", "--steps", "20", "--set", "eval.every=10", "--out", "o"], cwd=tmp_path,
                           env={**ENV, **NO_SERVICE}, stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert r.returncode == 0 and r.stderr.count("stdout's reader left") == 1 and "Traceback" not in r.stderr, r.stderr
    reports = [json.loads(line) for line in (tmp_path / "o" / "metrics.jsonl").read_text().splitlines()]
    assert [x["step"] for x in reports] == [10, 20], reports
    assert json.loads((tmp_path / "o" / "result.json").read_text())["status"] == "completed"


def test_serve_status_keeps_its_exit_code_when_its_reader_is_gone(tmp_path):
    # `sweeper serve --status | true` in a script: "no service" is exit 1, whether or not the line was read
    read_end, write_end = os.pipe()
    os.close(read_end)
    cmd = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
    try:
        r = subprocess.run([*cmd, "serve", "--status"], cwd=tmp_path, env={**ENV, "SWEEPER_SERVICE_DIR": str(tmp_path / "svc")},
                           stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert r.returncode == 1 and r.stderr == "", r.stderr


@pytest.mark.parametrize("args, must", [(("ui",), "no tracking store there yet"),
                                        (("report", "nosuch", "--markdown", "r.md"), "no sweep here")])
def test_a_refused_view_leaves_the_working_folder_untouched(tmp_path, args, must):
    # the writability probe (a file made and removed) ran before these refusals: the folder's time changed
    os.utime(tmp_path, ns=(0, 0))
    r = sweeper(*args, cwd=tmp_path, env=NO_SERVICE)
    assert_refused(r, must)
    assert os.stat(tmp_path).st_mtime_ns == 0 and list(tmp_path.iterdir()) == []
