"""The resident sweep service with a real service process: `sweeper serve --detach`, real Ray, warm
workers, real attached launches (sweeper/service_host.py, sweeper/commands/attach.py)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from conftest import ROOT, sweeper_cmd, sweeper_env
from sweeper.service_folder import SOCKET, STATE, read_state
from sweeper.service_link import Messages, request

pytestmark = [pytest.mark.integration,
              pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the service's peer check is Linux's SO_PEERCRED")]

SPACE = """\
name: {name}
description: a sweep for the service tests
metric: acc_3x
fixed:
  model: {{d_model: 16, n_layers: 1, n_heads: 2}}
  eval: {{n_sequences: 16, mid_run_sequences: 16}}
  optim: {{batch_size: 8, warmup_steps: 5}}
  dat: {{switch_step: 10}}
space:
  seed: {{type: categorical, choices: [0, 1]}}
budget: {{num_samples: 2, max_concurrent: 1, max_steps: {steps}, eval_every: 100}}
scheduler: {{type: fifo}}
searcher: {{sampler: grid, seed: 0}}
resources: {{cpu: 1}}
"""

LONG = 1200  # steps per trial of a sweep that is still training when the test interrupts it (2,400 left then)


@pytest.fixture
def service_dir():
    """A service folder of the test's own (short: a socket path has at most ~100 characters)."""
    directory = Path(tempfile.mkdtemp(prefix="sv", dir="/tmp"))
    yield directory
    request({"verb": "stop"}, directory)
    pid = read_state(directory).get("pid")
    deadline = time.monotonic() + 60
    while pid and _alive(pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    if pid and _alive(pid):
        os.kill(pid, signal.SIGKILL)
    shutil.rmtree(directory, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def env_of(directory: Path, pythonpath: Path = ROOT) -> dict:
    return {**sweeper_env(), "SWEEPER_SERVICE_DIR": str(directory), "PYTHONPATH": str(pythonpath)}


def start_service(directory: Path, cwd: Path, env: dict) -> int:
    done = subprocess.run(sweeper_cmd("serve", "--detach"), cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    return int(read_state(directory)["pid"])


def write_space(where: Path, name: str, steps: int) -> Path:
    path = where / f"{name}.yaml"
    path.write_text(SPACE.format(name=name, steps=steps))
    return path


def launch(space: Path, cwd: Path, env: dict, *extra: str, umask: int | None = None) -> subprocess.Popen:
    return subprocess.Popen(sweeper_cmd("launch", space, "--progress", "lines", *extra), cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            preexec_fn=None if umask is None else lambda: os.umask(umask))


def trained_steps(sweep_dir: Path) -> int:
    try:
        return max((t["step"] for t in json.loads((sweep_dir / "status.json").read_text())["trials"]), default=0)
    except (OSError, ValueError, KeyError):
        return 0


def wait_for(condition, timeout_s: float = 240.0, what: str = "the condition") -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.3)


def test_two_sweeps_at_once_and_a_ctrl_c_stops_only_its_own(tmp_path, service_dir):
    env = env_of(service_dir)
    pid = start_service(service_dir, tmp_path, env)
    a, b = write_space(tmp_path, "a", LONG), write_space(tmp_path, "b", LONG)
    first, second = launch(a, tmp_path, env), launch(b, tmp_path, env)
    wait_for(lambda: trained_steps(tmp_path / "sweeps" / "a") > 0 and trained_steps(tmp_path / "sweeps" / "b") > 0,
             what="both sweeps to report")
    listed = subprocess.run(sweeper_cmd("status"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert listed.returncode == 0 and "  a: running" in listed.stdout and "  b: running" in listed.stdout, listed.stdout
    first.send_signal(signal.SIGINT)  # what Ctrl-C in its terminal sends
    out_a = first.communicate(timeout=120)[0]
    assert first.returncode == 130, out_a
    assert "On the service (pid" in out_a and "interrupted with" in out_a
    assert request({"verb": "status"}, service_dir) is not None  # the service is up
    out_b = second.communicate(timeout=300)[0]
    assert second.returncode == 0, out_b  # the other sweep ran on to its end
    # whichever planned second found the other registered already (from its request on): its plan says they share
    assert "The workers are shared with 1 other sweep running now" in out_a + out_b, out_a + out_b
    assert json.loads((tmp_path / "sweeps" / "b" / "summary.json").read_text())
    status_a = json.loads((tmp_path / "sweeps" / "a" / "status.json").read_text())
    assert status_a["state"] == "interrupted"
    cut_off = [t["step"] for t in status_a["trials"] if t["status"] == "interrupted"]
    assert cut_off, status_a["trials"]  # (one may have ended before the Ctrl-C, or be cut after its last report)
    assert max(t["step"] for t in status_a["trials"]) > 0
    again = subprocess.run(sweeper_cmd("launch", a, "--progress", "none"), cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=400)
    assert again.returncode == 0, again.stdout + again.stderr
    reports = [json.loads(line) for line in (tmp_path / "sweeps" / "a" / "trials" / "t0000" / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in reports]
    assert steps == sorted(set(steps)) and steps[-1] == LONG  # resumed from its checkpoint: no step trained twice
    state = request({"verb": "status"}, service_dir)
    assert state["pid"] == pid and sum(w["trained"] for w in state["worker_info"]) >= 4  # every trial on a warm worker


def _switch_space(where: Path, name: str, switch: int, steps: int) -> Path:
    """A sweep whose trials differ from another's by their switch step (which every report carries)."""
    path = where / f"{name}.yaml"
    path.write_text(SPACE.format(name=name, steps=steps).replace("switch_step: 10", f"switch_step: {switch}"))
    return path


def test_two_sweeps_launched_together_keep_their_own_trials_runs_store_and_umask(tmp_path, service_dir):
    """Two sweeps whose names share a prefix, started at the same moment on one service, from a
    folder of the user's with umask 077 and a relative tracking URI: each trains its own trials in
    its own folder, with its own config, logs them to its own MLflow children in the user's store,
    and leaves nothing readable by others."""
    env = env_of(service_dir)
    start_service(service_dir, tmp_path, env)  # the service's folder is not the user's
    user = tmp_path / "user"
    user.mkdir()
    steps = 300
    spaces = {"fifo": _switch_space(user, "fifo", 40, steps), "fifoc": _switch_space(user, "fifoc", 170, steps)}
    switch = {"fifo": 40, "fifoc": 170}
    barrier = [sweeper_cmd("launch", path, "--progress", "none", "--tracking-uri", "sqlite:///rel.db")
               for path in spaces.values()]
    launches = [subprocess.Popen(cmd, cwd=user, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                                 preexec_fn=lambda: os.umask(0o077)) for cmd in barrier]  # both at once
    outs = [p.communicate(timeout=400)[0] for p in launches]
    for launched, out in zip(launches, outs):
        assert launched.returncode == 0 and "On the service (pid" in out, out
    assert (user / "rel.db").is_file() and not (tmp_path / "rel.db").exists()  # the launch's folder, not the service's
    import mlflow

    client = mlflow.MlflowClient(f"sqlite:///{user / 'rel.db'}")
    for name, path in spaces.items():
        trials = sorted(p.name for p in (user / "sweeps" / name / "trials").iterdir())
        assert trials == ["t0000", "t0001"], (name, trials)
        for trial in trials:
            reports = [json.loads(line) for line in (user / "sweeps" / name / "trials" / trial / "metrics.jsonl").read_text().splitlines()]
            assert [r["step"] for r in reports] == [100, 200, 300]
            assert reports[-1]["switch_step"] == switch[name]  # attention came on at its own sweep's switch
        experiment = client.get_experiment_by_name(name)
        children = client.search_runs([experiment.experiment_id], filter_string="tags.role = 'trial'")
        assert sorted(r.data.tags["trial_id"] for r in children) == ["t0000", "t0001"]
        for run in children:
            assert run.data.params["dat.switch_step"] == str(switch[name])
            assert [m.step for m in client.get_metric_history(run.info.run_id, "acc_3x")] == [100, 200, 300]
    readable = [str(p) for p in [user / "sweeps", *(user / "sweeps").rglob("*"), user / "rel.db", *(user / "mlartifacts").rglob("*")]
                if not p.is_symlink() and p.exists() and p.stat().st_mode & 0o007]
    assert readable == [], readable  # as a launch in its own process under umask 077 would leave them


@pytest.mark.long  # the ending itself, waited on, is tests/test_hostile_service.py's, under `make test`
def test_a_service_whose_start_folder_went_serves_and_its_terminal_closing_writes_its_sweeps_down(tmp_path, service_dir):
    """A service started in a folder since removed failed every launch (its imports looked there),
    blaming the caller's store; SIGHUP (its terminal closed) killed it outright; and while it ended,
    `serve --status` said none runs."""
    from sweeper.lock import lock_held
    from sweeper.service_folder import LOCK, LOG

    env = env_of(service_dir)
    start = tmp_path / "start"
    start.mkdir()
    pid = start_service(service_dir, start, env)
    shutil.rmtree(start)
    small = write_space(tmp_path, "small", 200)
    done = subprocess.run(sweeper_cmd("launch", small, "--progress", "lines"), cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=400)
    assert done.returncode == 0 and "On the service (pid" in done.stdout, done.stdout + done.stderr
    b = launch(write_space(tmp_path, "b", LONG), tmp_path, env)  # SIGTERM to an attached launch: as a Ctrl-C
    wait_for(lambda: trained_steps(tmp_path / "sweeps" / "b") > 0, what="the sweep to report")
    b.send_signal(signal.SIGTERM)
    out = b.communicate(timeout=300)[0]
    assert b.returncode == 130 and "interrupting: the service stops this sweep" in out, out  # it exited 143, no word
    a = launch(write_space(tmp_path, "a", LONG), tmp_path, env)
    wait_for(lambda: trained_steps(tmp_path / "sweeps" / "a") > 0, what="the sweep to report")
    os.kill(pid, signal.SIGHUP)

    def refused_or_gone() -> bool:  # the service has closed its socket (writing its sweeps down), or has ended
        with socket.socket(socket.AF_UNIX) as s:
            try:
                s.connect(str(service_dir / SOCKET))
                return False
            except OSError:
                return True

    wait_for(refused_or_gone, 120, "the service to close its socket")
    status = subprocess.run(sweeper_cmd("serve", "--status"), cwd=tmp_path, env=env, capture_output=True, text=True,
                            timeout=300)
    assert not lock_held(service_dir / LOCK), "said before the ending service had ended: " + status.stdout + status.stderr
    assert "no sweep service runs" in status.stdout + status.stderr and "Traceback" not in status.stderr
    out = a.communicate(timeout=300)[0]
    assert a.returncode == 130 and "interrupted" in out, out  # written down, not killed with its service
    assert json.loads((tmp_path / "sweeps" / "a" / "status.json").read_text())["state"] == "interrupted"
    assert "sweep service: stopped" in (service_dir / LOG).read_text()


def test_a_killed_service_loses_nothing(tmp_path, service_dir):
    env = env_of(service_dir)
    # the service SIGKILLs itself when the third report (step 300 of the first trial) reaches it (sweeper/faults.py)
    pid = start_service(service_dir, tmp_path, {**env, "SWEEPER_FAULT": "report:3:KILL"})
    max_steps = 600
    a = write_space(tmp_path, "a", max_steps)
    attached = launch(a, tmp_path, env, umask=0o077)
    out = attached.communicate(timeout=300)[0]
    assert attached.returncode == 1 and "the service stopped while running sweep a" in out, out
    # its socket closes before the kernel has finished the process: a loaded machine can show it running a moment longer
    wait_for(lambda: not _alive(pid), 60, "the killed service to be gone")
    opened = [str(p) for p in [tmp_path / "sweeps" / "a", tmp_path / "mlflow.db", tmp_path / "mlartifacts"]
              if p.exists() and p.stat().st_mode & 0o007]
    assert opened == [], opened  # the caller's umask held from the start, not only at an end the kill never reached
    recorded = json.loads((tmp_path / "sweeps" / "a" / "ray_processes.json").read_text())["processes"]
    resumed = subprocess.run(sweeper_cmd("launch", a, "--in-process", "--progress", "none"), cwd=tmp_path, env=env,
                             capture_output=True, text=True, timeout=900)  # a loaded machine: the resume trains both trials
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "ended" in resumed.stderr and "earlier local Ray" in resumed.stderr  # the killed service's Ray
    assert not any(_alive(p["pid"]) for p in recorded)
    status = json.loads((tmp_path / "sweeps" / "a" / "status.json").read_text())
    assert [t["status"] for t in status["trials"]] == ["completed", "completed"]
    steps = [json.loads(line)["step"] for line in (tmp_path / "sweeps" / "a" / "trials" / "t0000" / "metrics.jsonl").read_text().splitlines()]
    assert steps == sorted(set(steps)) and steps[-1] == max_steps


def test_a_changed_module_restarts_the_warm_workers(tmp_path, service_dir):
    project = tmp_path / "project"
    for package in ("core", "sweeper", "trainables", "experiments"):
        shutil.copytree(ROOT / package, project / package, ignore=shutil.ignore_patterns("__pycache__"))
    env = env_of(service_dir, pythonpath=project)
    start_service(service_dir, tmp_path, env)
    before = request({"verb": "status"}, service_dir)
    first = subprocess.run(sweeper_cmd("launch", write_space(tmp_path, "a", 200), "--progress", "none"), cwd=tmp_path,
                           env=env, capture_output=True, text=True, timeout=400)
    assert first.returncode == 0 and "On the service" in first.stdout, first.stdout + first.stderr
    with open(project / "trainables" / "tasks.py", "a") as f:
        f.write("\n# changed\n")
    second = subprocess.run(sweeper_cmd("launch", write_space(tmp_path, "b", 200), "--progress", "none"), cwd=tmp_path,
                            env=env, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stdout + second.stderr
    assert "runs older code than this checkout: it restarts" in second.stderr and "On the service" in second.stdout
    after = request({"verb": "status"}, service_dir)
    assert after["code"] != before["code"]
    old_pids = {w["pid"] for w in before["worker_info"]}
    new = after["worker_info"]
    assert not old_pids & {w["pid"] for w in new} and sum(w["trained"] for w in new) == 2  # new workers trained sweep b


def _connect_as(uid: int, path: Path) -> tuple[str, str]:
    """In a child process running as user `uid`: connect to the socket, ask for the status, read the
    answer (everything imported before the switch: that user may not read this Python's files)."""
    code = ("import json, os, socket\n"
            f"os.setgid({uid}); os.setuid({uid})\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            f"try:\n    s.connect({str(path)!r})\nexcept OSError as e:\n    print('refused', e.errno); raise SystemExit\n"
            "try:\n    s.sendall(b'{\"verb\": \"status\"}\\n')\nexcept BrokenPipeError:\n    pass  # refused before it asked\n"
            "print('answer', s.makefile('rb').readline().decode())\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    return done.stdout.strip(), done.stderr


def _out_of_descriptors_for_a_while(pid: int, sock: Path) -> None:
    """The service's file limit lowered to what it holds, 12 clients queued, the limit put back:
    it takes them once it can, and goes on serving (tested by the caller)."""
    import resource

    limits = resource.prlimit(pid, resource.RLIMIT_NOFILE)
    held = len(os.listdir(f"/proc/{pid}/fd"))
    resource.prlimit(pid, resource.RLIMIT_NOFILE, (held, limits[1]))
    clients = []
    try:
        for _ in range(12):
            clients.append(socket.socket(socket.AF_UNIX))
            clients[-1].connect(str(sock))
            clients[-1].sendall(b'{"verb": "status"}\n')
        time.sleep(1)  # the service meets EMFILE in this second, over and over
    finally:
        resource.prlimit(pid, resource.RLIMIT_NOFILE, limits)
    for c in clients:
        with c:
            c.settimeout(60)
            assert "pid" in next(iter(Messages(c)))  # answered once there was room


def test_the_socket_answers_its_user_only_and_bad_requests_get_one_line(tmp_path, service_dir):
    env = env_of(service_dir)
    start_service(service_dir, tmp_path, env)
    sock = service_dir / SOCKET
    assert oct(sock.stat().st_mode & 0o777) == "0o600" and oct(service_dir.stat().st_mode & 0o777) == "0o700"
    for line, expected in ((b"not json\n", "not a JSON message"), (b'{"verb": "dance"}\n', "unknown request verb"),
                           (b'{"verb": "launch", "file": "a.yaml", "storage": "/tmp", "tracking_uri": "x"}\n',
                            "code: must be the 16 hex digits"), (b"[1, 2]\n", "must be a JSON object"),
                           (b'{"verb": "status", "verb": "stop"}\n', 'the key "verb" is given twice'),
                           (b'{"verb": "stop", "sweep": "another", "pid": 1}\n', "stop request: takes no field but `verb`"),
                           (b'{"verb": "status", "sweep": "another"}\n', "status request: takes no field but `verb`"),
                           # a line past the limit: the rest is read and dropped, so the client's writing ends and
                           # it reads the refusal (it was a broken pipe)
                           (b'{"verb": "status", "pad": "' + b"x" * (3 << 20) + b'"}\n', "a message longer than")):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
            s.sendall(line)
            answer = next(iter(Messages(s)))
        assert expected in answer["error"] and "\n" not in answer["error"]
    from sweeper.request import SweepRequest, tracking_environment

    elsewhere = SweepRequest.from_caller(str(ROOT / "search_spaces" / "smoke.yaml"), cwd=tmp_path, environ={},
                                         address="ray://127.0.0.1:1").message()  # a cluster: not the service's Ray
    with socket.socket(socket.AF_UNIX) as s:
        s.connect(str(sock))
        s.sendall(json.dumps({"verb": "launch", "code": "0" * 16, "root": str(ROOT), **elsewhere}).encode() + b"\n")
        answer = next(iter(Messages(s)))
    assert "runs sweeps on its own Ray" in answer["error"] and not (tmp_path / "sweeps").exists()
    here = {**SweepRequest.from_caller(str(ROOT / "search_spaces" / "smoke.yaml"), cwd=tmp_path, environ={}).message(),
            "tracking_env": tracking_environment(env)}  # the service's own: a launch from its environment
    for fields, expected in (({"code": 5, "root": str(ROOT)}, "code: must be the 16 hex digits"),  # not a restart
                             ({"code": "0" * 16, "root": ["/"]}, "root: must be a non-empty text"),
                             ({"tracking_source": "\x1b[2J" + "x" * 100_000}, "tracking_source"),
                             ({"file": "/x\ud800.yaml"}, "file: holds '\\ud800', a character no file name can hold"),
                             ({"storage": str(tmp_path / "\udfff")}, "storage: holds"),
                             ({"file": "/x\nsweep service: stopped\n\x1b]0;owned\x07.yaml"}, "file: holds '\\n', a control"),
                             ({"cwd": str(tmp_path / "gone")}, "cwd: must be an existing folder"),
                             # paths the service would read as its own, or not as SQLAlchemy opens them
                             ({"file": "/dev/fd/3"}, "file: must be an absolute path without . or .."),
                             ({"storage": "/proc/self/cwd"}, "storage: must be an absolute path without"),
                             ({"tracking_uri": f"sqlite:///{tmp_path}/link/../m.db"}, "tracking_uri: must be resolved")):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
            s.sendall(json.dumps({"verb": "launch", "code": "0" * 16, "root": str(ROOT), **here, **fields}).encode() + b"\n")
            answer = next(iter(Messages(s)))
        assert expected in answer["error"] and "\x1b" not in answer["error"] and len(answer["error"]) < 400, answer
    assert "owned" not in (service_dir / "service.log").read_text()  # no forged line, no escape in the log
    deep = json.loads("[" * 600 + "]" * 600)  # JSON reads it; a value's stand-in in the answer must not recurse
    for fields in ({"verb": deep}, {"verb": "launch", "code": "0" * 16, "root": str(ROOT), **here, "umask": deep},
                   {"verb": "launch", "code": "0" * 16, "root": str(ROOT), **here, "zzz": deep}):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
            s.sendall(json.dumps(fields).encode() + b"\n")
            answer = next(iter(Messages(s)))
        assert "failed on this request" not in answer["error"] and len(answer["error"]) < 400, answer
    with socket.socket(socket.AF_UNIX) as s:  # MLflow reads these from its process: a sweep on the service would not have it
        s.connect(str(sock))
        s.sendall(json.dumps({"verb": "launch", "code": "0" * 16, "root": str(ROOT), **here,
                              "tracking_env": tracking_environment({"MLFLOW_ALLOW_FILE_STORE": "true"})}).encode() + b"\n")
        answer = next(iter(Messages(s)))
    assert "MLFLOW_ALLOW_FILE_STORE" in answer["stale"] and "runs in its own process" in answer["stale"], answer
    for env_field in ({"X": "0" * 16}, {"MLFLOW_A": "zz"}, [1]):
        with socket.socket(socket.AF_UNIX) as s:
            s.connect(str(sock))
            s.sendall(json.dumps({"verb": "launch", "code": "0" * 16, "root": str(ROOT), **here,
                                  "tracking_env": env_field}).encode() + b"\n")
            answer = next(iter(Messages(s)))
        assert "tracking_env: must map" in answer["error"], answer
    with socket.socket(socket.AF_UNIX) as s:  # a made-up code: the checkout on disk is the service's, so no restart
        s.connect(str(sock))
        s.sendall(json.dumps({"verb": "launch", "code": "f" * 16, "root": str(ROOT), **here,
                              "file": str(tmp_path / "absent.yaml")}).encode() + b"\n")
        s.settimeout(60)
        answers = list(Messages(s, timeout_is_error=True))  # the service ends the connection with its exit
    assert "accepted" in answers[0] and "absent.yaml" in json.dumps(answers[1:]) and "exit" in answers[-1], answers
    assert "restarting" not in (service_dir / "service.log").read_text()
    _out_of_descriptors_for_a_while(read_state(service_dir)["pid"], sock)
    assert "cannot take a connection now" in (service_dir / "service.log").read_text()  # said once, not raised
    with socket.socket(socket.AF_UNIX) as s:  # a client that connects and leaves
        s.connect(str(sock))
    with socket.socket(socket.AF_UNIX) as s:  # a client that leaves before the answer: no traceback in the log
        s.connect(str(sock))
        s.sendall(b'{"verb": "status"}\n')
    assert request({"verb": "status"}, service_dir)["pid"] == read_state(service_dir)["pid"]  # still serving
    assert "Traceback" not in (service_dir / "service.log").read_text()
    if os.getuid() != 0:
        pytest.skip("another user's connection needs root to act as that user")
    nobody = 65534
    out, err = _connect_as(nobody, sock)
    assert out.startswith("refused 13"), out + err  # the folder (0700) and the socket (0600) keep them out
    os.chmod(service_dir, 0o755)
    os.chmod(sock, 0o777)  # even with the file modes opened, the service checks who connects
    out, err = _connect_as(nobody, sock)
    assert "answers its own user" in out, out + err
    os.chmod(service_dir, 0o700)
    os.chmod(sock, 0o600)
    assert request({"verb": "status"}, service_dir) is not None


def test_a_launch_with_no_service_runs_in_its_own_process(tmp_path, service_dir):
    env = env_of(service_dir)
    done = subprocess.run(sweeper_cmd("launch", write_space(tmp_path, "a", 100), "--progress", "none"), cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "On the service" not in done.stdout and "Ctrl-C stops; the same command resumes." in done.stdout
    assert not (service_dir / STATE).exists()
    status = subprocess.run(sweeper_cmd("serve", "--status"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert status.returncode == 1 and "no sweep service runs" in status.stdout
    with pytest.raises(OSError):
        socket.socket(socket.AF_UNIX).connect(str(service_dir / SOCKET))


def test_a_launch_from_another_checkout_runs_in_its_own_process(tmp_path, service_dir):
    start_service(service_dir, tmp_path, env_of(service_dir))
    other = tmp_path / "other"
    for package in ("core", "sweeper", "trainables", "experiments"):
        shutil.copytree(ROOT / package, other / package, ignore=shutil.ignore_patterns("__pycache__"))
    done = subprocess.run(sweeper_cmd("launch", write_space(tmp_path, "a", 100), "--progress", "none"), cwd=tmp_path,
                          env=env_of(service_dir, pythonpath=other), capture_output=True, text=True, timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"runs the checkout at {ROOT}" in done.stderr and "On the service" not in done.stdout
    assert request({"verb": "status"}, service_dir)["sweeps"] == []  # nothing ran there


def test_a_stopped_service_or_a_full_queue_is_said_in_one_line_not_waited_on_or_passed_by(tmp_path, service_dir):
    env = env_of(service_dir)
    pid = start_service(service_dir, tmp_path, env)
    space = write_space(tmp_path, "frozen", 100)
    os.kill(pid, signal.SIGSTOP)  # the socket is there and the kernel queues connections; nobody answers
    held = []
    try:
        done = subprocess.run(sweeper_cmd("launch", space, "--progress", "none"), cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and done.stderr.count("\n") == 1, done.stdout + done.stderr
        assert "is stopped (SIGSTOP" in done.stderr and "--in-process" in done.stderr, done.stderr
        advice = [w for w in done.stderr.split("`") if str(pid) in w]  # the one signal named lets it go on, never ends it
        assert advice == [f"kill -CONT {pid}"], done.stderr
        status = subprocess.run(sweeper_cmd("serve", "--status"), cwd=tmp_path, env=env, capture_output=True, text=True,
                                timeout=300)
        assert status.returncode == 2 and "is stopped" in status.stderr, status.stdout + status.stderr
        assert "sweeper serve --status` again" in status.stderr and "--in-process" not in status.stderr
        listing = subprocess.run(sweeper_cmd("status"), cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300)
        assert listing.returncode == 2 and listing.stderr.count("\n") == 1, listing.stdout + listing.stderr
        assert listing.stdout == "" and "`sweeper status` again" in listing.stderr and "sweeper status NAME" in listing.stderr
        while True:  # fill the socket's queue of connections
            s = socket.socket(socket.AF_UNIX)
            s.settimeout(1.0)
            try:
                s.connect(str(service_dir / SOCKET))
            except (BlockingIOError, TimeoutError):  # a Unix socket's full queue: EAGAIN
                s.close()
                break
            held.append(s)
            assert len(held) < 1000
        done = subprocess.run(sweeper_cmd("launch", space, "--progress", "none"), cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 2 and "is stopped" in done.stderr, done.stdout + done.stderr  # said, not passed by
        assert not (tmp_path / "sweeps" / "frozen").exists()  # neither ran it in its own process nor began it
    finally:
        for s in held:
            s.close()
        os.kill(pid, signal.SIGCONT)
    assert request({"verb": "status"}, service_dir)["pid"] == pid  # it serves on once it runs again


def test_two_detached_services_started_at_the_same_moment_leave_one_and_both_say_so(tmp_path, service_dir):
    env = env_of(service_dir)
    starts = [subprocess.Popen(sweeper_cmd("serve", "--detach", "--workers", "1"), cwd=tmp_path, env=env,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    done = [(p.wait(timeout=300), *p.communicate()) for p in starts]
    pid = read_state(service_dir)["pid"]
    assert [rc for rc, _, _ in done] == [0, 0], done  # the one that lost the lock found the one that took it
    said = [out for _, out, _ in done]
    assert sum(out.startswith(f"sweep service running (pid {pid})") for out in said) == 1, said
    assert sum(out.startswith(f"a sweep service already runs (pid {pid})") for out in said) == 1, said
    assert request({"verb": "status"}, service_dir)["pid"] == pid


def test_a_stop_while_the_service_starts_waits_for_it_and_stops_it(tmp_path, service_dir):
    """`serve --stop` in the seconds a service holds its lock but has no socket yet (Ray starting) said
    "no sweep service runs", exit 0, and the service came up and stayed."""
    from sweeper.lock import lock_held
    from sweeper.service_folder import LOCK

    env = env_of(service_dir)
    start = subprocess.Popen(sweeper_cmd("serve", "--detach", "--workers", "1"), cwd=tmp_path, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    wait_for(lambda: lock_held(service_dir / LOCK), what="the service to take its lock")
    stop = subprocess.run(sweeper_cmd("serve", "--stop"), cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert stop.returncode == 0 and stop.stdout.startswith("sweep service stopped (pid "), stop.stdout + stop.stderr
    wait_for(lambda: not lock_held(service_dir / LOCK), timeout_s=60, what="the service to end")
    start.wait(timeout=300)


def test_a_store_removed_under_the_service_is_not_written_through_its_old_connection(tmp_path, service_dir):
    env = env_of(service_dir)
    start_service(service_dir, tmp_path, env)
    space = write_space(tmp_path, "gone", 100)
    first = subprocess.run(sweeper_cmd("launch", space, "--progress", "none"), cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert first.returncode == 0 and "On the service" in first.stdout, first.stdout + first.stderr
    for name in ("sweeps", "mlartifacts", "mlflow.db", "mlflow.db.lock"):  # the user starts over by hand
        path = tmp_path / name
        shutil.rmtree(path) if path.is_dir() else path.unlink()
    again = subprocess.run(sweeper_cmd("launch", space, "--progress", "none"), cwd=tmp_path, env=env,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stdout + again.stderr  # was: exit 2, "attempt to write a readonly database"
    assert "removed or replaced since" in again.stderr and "runs in its own process" in again.stderr, again.stderr
    assert json.loads((tmp_path / "sweeps" / "gone" / "status.json").read_text())["state"] == "finished"
    assert (tmp_path / "mlflow.db").stat().st_size > 0


@pytest.mark.long
def test_an_attached_launch_whose_stdout_reader_leaves_keeps_its_sweep_running_to_the_end(tmp_path, service_dir):
    # the launch is the service's client: a reader that leaves its stdout (`| head -c1`) used to drop the
    # connection, and the service stopped the sweep (exit 130 in its log) while the launch exited 0
    env = env_of(service_dir)
    start_service(service_dir, tmp_path, env)
    attached = subprocess.Popen(sweeper_cmd("launch", write_space(tmp_path, "piped", 100), "--progress", "lines"),
                                cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert attached.stdout.read(1)
    attached.stdout.close()
    err = attached.stderr.read().decode()
    assert attached.wait(timeout=400) == 0 and err.count("stdout's reader left") == 1, err
    assert "sweep piped: ended with 0" in (service_dir / "service.log").read_text()
    status = json.loads((tmp_path / "sweeps" / "piped" / "status.json").read_text())
    assert [t["status"] for t in status["trials"]] == ["completed"] * 2, status
