"""`sweeper submit` and `sweeper job status|logs|stop` against a real Ray head whose job server
listens on 127.0.0.1 (token auth on), logging to a real MLflow server: submit, follow, status,
logs, stop, and the preflight's refusals."""

import subprocess
import time

import pytest
import yaml

from conftest import ROOT, sweeper_cmd
from core.errors import ConfigError
from test_cluster import ENV, ray_cluster

SMOKE = ROOT / "search_spaces" / "smoke.yaml"


def _space(tmp_path, name: str, max_steps: int, num_samples: int) -> str:
    """smoke.yaml shrunk (or stretched) under a new name."""
    space = yaml.safe_load(SMOKE.read_text())
    space["name"] = name
    space["budget"].update(num_samples=num_samples, max_steps=max_steps)
    space["space"]["dat.switch_step"]["high"] = min(60, max_steps)
    path = tmp_path / f"{name}.yaml"
    path.write_text(yaml.safe_dump(space))
    return str(path)


def submit(tmp_path, *args, env=None, timeout=300):
    return subprocess.run(sweeper_cmd("submit", *args), cwd=tmp_path, env={**ENV, **(env or {})},
                          capture_output=True, text=True, timeout=timeout)


def job(tmp_path, *args, timeout=300):
    """`sweeper job ACTION JOB ...`"""
    return subprocess.run(sweeper_cmd("job", *args), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=timeout)


def _one_line_exit_2(r, expected: str) -> None:
    assert r.returncode == 2, r.stdout + r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and expected in lines[0], r.stderr


# -- preflight: no cluster needed to be refused ----------------------------------------------


def test_an_unreachable_job_server_is_one_line_and_exit_2(tmp_path):
    r = submit(tmp_path, SMOKE, "--address", "http://127.0.0.1:9", "--storage", "/srv/sweeps",
               "--tracking-uri", "http://mlflow:5000")
    _one_line_exit_2(r, "--address http://127.0.0.1:9: Ray job server unreachable")


def test_a_local_tracking_store_is_refused_before_contacting_the_cluster(tmp_path):
    env = {k: v for k, v in ENV.items() if k != "MLFLOW_TRACKING_URI"}
    r = subprocess.run(sweeper_cmd("submit", SMOKE, "--address", "http://127.0.0.1:9", "--storage", "/srv/sweeps"),
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    _one_line_exit_2(r, "a local store the cluster cannot see")
    r = submit(tmp_path, SMOKE, "--address", "http://127.0.0.1:9", "--storage", "/srv/sweeps",
               "--tracking-uri", f"sqlite:///{tmp_path}/mlflow.db")
    _one_line_exit_2(r, "a local store the cluster cannot see")


# -- against a real head ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def head():
    with ray_cluster(workers=0, cpus_per_node=2) as (_, dashboard):
        yield dashboard


@pytest.mark.integration
def test_storage_must_be_given_and_outlive_the_job(head, tmp_path):
    base = (SMOKE, "--address", head, "--tracking-uri", "http://mlflow:5000")
    _one_line_exit_2(submit(tmp_path, *base), "--storage: required for a job")
    _one_line_exit_2(submit(tmp_path, *base, "--storage", "sweeps"), "a relative path would land in the job's temporary")


@pytest.mark.integration
def test_a_submitted_sweep_runs_and_its_status_and_logs_come_back(head, tmp_path, mlflow_server):
    from mlflow import MlflowClient

    storage = tmp_path / "results"
    env = {"RAY_AUTH_MODE": ""}  # unset: submit finds out that the server wants the token, and sends it
    env = {k: v for k, v in {**ENV, **env}.items() if v != ""}
    r = subprocess.run(sweeper_cmd("submit", _space(tmp_path, "submitted", 20, 2), "--address", head, "--storage",
                                   storage, "--tracking-uri", mlflow_server, "--follow"),
                       cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    job_id = r.stdout.splitlines()[0]
    assert job_id.startswith("sweep-submitted-")
    assert "summary:" in r.stdout  # the followed logs: the sweep's own end
    assert (storage / "submitted" / "summary.json").exists()  # results where --storage said
    exp = MlflowClient(mlflow_server).get_experiment_by_name("submitted")
    assert exp is not None and len(MlflowClient(mlflow_server).search_runs([exp.experiment_id])) == 3  # parent + 2
    s = job(tmp_path, "status", job_id, "--address", head)
    assert s.returncode == 0 and s.stdout.startswith(f"{job_id}: SUCCEEDED"), s.stdout + s.stderr
    logs = job(tmp_path, "logs", job_id, "--address", head)
    assert logs.returncode == 0 and "plan: 2 trials of up to 20 steps" in logs.stdout, logs.stdout[-2000:]
    # a job's log is not a terminal: progress comes as plain lines with the ETA
    assert "[submitted " in logs.stdout and "ETA" in logs.stdout


@pytest.mark.integration
def test_stop_stops_a_running_sweep(head, tmp_path, mlflow_server):
    r = submit(tmp_path, _space(tmp_path, "long", 100000, 2), "--address", head, "--storage", tmp_path / "results",
               "--tracking-uri", mlflow_server)
    assert r.returncode == 0, r.stderr
    job_id = r.stdout.strip()
    deadline = time.time() + 120
    while "RUNNING" not in (s := job(tmp_path, "status", job_id, "--address", head)).stdout:
        assert time.time() < deadline and "FAILED" not in s.stdout, s.stdout + s.stderr
        time.sleep(1)
    stopped = job(tmp_path, "stop", job_id, "--address", head)
    assert stopped.returncode == 0 and stopped.stdout.strip() == f"{job_id}: STOPPED", stopped.stdout + stopped.stderr
    assert job(tmp_path, "status", job_id, "--address", head).stdout.startswith(f"{job_id}: STOPPED")


@pytest.mark.integration
def test_an_unknown_job_is_one_line_and_exit_2(head, tmp_path):
    _one_line_exit_2(job(tmp_path, "status", "no-such-job", "--address", head), "no-such-job: no such job on")


def test_the_old_submit_job_flags_say_where_they_moved(tmp_path):
    _one_line_exit_2(submit(tmp_path, "--status", "sweep-x-1"), "submit --status: moved: sweeper job status sweep-x-1")
    _one_line_exit_2(submit(tmp_path, "--logs", "sweep-x-1", "--follow"), "moved: sweeper job logs sweep-x-1 --follow")
    _one_line_exit_2(submit(tmp_path), "a search-space file to submit")


def test_job_needs_an_address_and_an_action(tmp_path):
    env_without = {k: v for k, v in ENV.items() if k not in ("RAY_ADDRESS", "RAY_API_SERVER_ADDRESS")}
    r = subprocess.run(sweeper_cmd("job", "status", "sweep-x-1"), cwd=tmp_path, env=env_without,
                       capture_output=True, text=True, timeout=60)
    _one_line_exit_2(r, "--address: required")
    r = job(tmp_path, "restart", "sweep-x-1")
    _one_line_exit_2(r, "invalid choice: 'restart'")


def test_a_head_whose_job_agent_is_not_up_yet_is_asked_again():
    """Ray answers HTTP 500 "No available agent" for a few seconds after its head starts (longer on a
    loaded machine): the submission waits for the agent; any other refusal is not retried."""
    import pytest

    from sweeper.adapters.ray_jobs import submit_job

    class Head:  # the answers a real head gave in CI (tests/test_submit.py, 2026-11-22)
        def __init__(self, refusals: int, message: str):
            self.calls, self.refusals, self.message = 0, refusals, message

        def submit_job(self, **kwargs):
            self.calls += 1
            if self.calls <= self.refusals:
                raise RuntimeError(f"Request failed with status code 500: {self.message}")
            return kwargs["submission_id"]

    head = Head(2, "No available agent to submit job, please try again later..")
    assert submit_job(head, timeout_s=30, submission_id="sweep-x") == "sweep-x" and head.calls == 3
    other = Head(1, "Job with submission_id sweep-x already exists.")
    with pytest.raises(RuntimeError, match="already exists"):
        submit_job(other, timeout_s=30, submission_id="sweep-x")
    assert other.calls == 1
    never_up = Head(100, "No available agent to submit job, please try again later..")
    with pytest.raises(ConfigError, match="job agent did not come up in 1 s") as refused:  # one line, exit 2
        submit_job(never_up, timeout_s=1, submission_id="sweep-x")
    assert "\n" not in str(refused.value) and "No available agent" in str(refused.value)



@pytest.mark.parametrize("name", ["-h", "--restart", "--in-process", "smoke.yaml"])
def test_a_space_file_named_like_an_option_stays_the_file_of_the_job_s_launch(name):
    """The job's entrypoint, read by the sweeper's own parser: the file is the file, and the only
    options are the ones submit sets (a file `-h` printed help on the head, a job that SUCCEEDED)."""
    import shlex
    from pathlib import Path

    from sweeper.cli import build_parser
    from sweeper.commands.submit import launch_command

    argv = shlex.split(launch_command(name, "/data", False, "http://mlflow:5000", None, False))
    args = build_parser().parse_args(argv[1:])
    assert Path(args.file) == Path(name), argv  # `./-h` is the file `-h` of the job's working folder
    assert not args.restart and not args.in_process and args.address == "auto" and args.storage == "/data", argv
