"""Faults around the driver: the MLflow server gone for 20 s mid-sweep, the storage turning read-only,
a worker node of a real two-node Ray cluster lost mid-trial. Each ends with the same ledger checks as
the signal matrix (tests/faults/harness.py). Slow: `make faults`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.faults.harness import Sweep, check_ledger, finished_trials, resume_and_watch

pytestmark = [pytest.mark.integration, pytest.mark.faults]
OUTAGE_S = 20


def _wait(what: str, condition, timeout: float = 300, proc: subprocess.Popen | None = None, every: float = 0.3):
    deadline = time.time() + timeout
    while not condition():
        assert proc is None or proc.poll() is None, f"the sweep ended (rc {proc.returncode}) before {what}"
        assert time.time() < deadline, f"timed out waiting for {what}"
        time.sleep(every)


@contextlib.contextmanager
def mlflow_server_on(root: Path, port: int):
    """`mlflow server` on 127.0.0.1:port with its store in `root` (restartable on the same port and store)."""
    import urllib.request

    log = open(root / "server.log", "a")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}", "--artifacts-destination",
                             str(root / "artifacts"), "--workers", "1"], stdout=log, stderr=subprocess.STDOUT,
                            cwd=root, start_new_session=True)

    def healthy():
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2).close()
            return True
        except OSError:
            return False
    try:
        _wait("the MLflow server", healthy, timeout=120)
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        log.close()


def test_mlflow_server_down_for_20s_mid_sweep_stalls_nothing_and_loses_nothing(tmp_path):
    root = tmp_path / "mlflow"
    root.mkdir()
    port = free_port()
    # long enough that the server is back before the trials end, even on a quiet machine (the tiny model
    # trains hundreds of steps a second): 4 trials of 600 steps, 2 at once, no early stops
    sweep = Sweep(tmp_path, f"http://127.0.0.1:{port}", "outage", num_samples=4, max_steps=600, fifo=True)
    proc = None
    try:
        with mlflow_server_on(root, port):
            proc = sweep.start()
            _wait("a first report", lambda: any(t["step"] >= 10 for t in (sweep.status() or {"trials": []})["trials"]), proc=proc)
        steps = lambda: sum(t["step"] for t in (sweep.status() or {"trials": []})["trials"])  # noqa: E731
        down_at, steps_at_down = time.time(), steps()
        # the server is down: the trials train on, and the status file follows them (40 steps more, or to
        # the sweep's end: stopping the server can take longer than a fast machine needs for the rest)
        target = min(steps_at_down + 40, 4 * 600)
        _wait("trials to make progress while MLflow is down", lambda: steps() >= target, timeout=OUTAGE_S + 60, proc=proc)
        progress_s = time.time() - down_at
        time.sleep(max(0.0, OUTAGE_S - (time.time() - down_at)))  # the outage lasts OUTAGE_S, whatever the sweep does
        with mlflow_server_on(root, port):
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, f"rc {proc.returncode}: {out[-2000:]}{err[-3000:]}"
            assert progress_s < OUTAGE_S, f"40 steps took {progress_s:.0f} s with MLflow down: the sweep stalled"
            wrong = check_ledger(sweep, {})
            assert not wrong, "\n".join(wrong) + "\n" + err[-2000:]
    finally:
        sweep.cleanup()


def _mount(*args: str) -> None:
    subprocess.run(["mount", *args], check=True, capture_output=True, text=True)


def test_storage_turned_read_only_is_refused_in_one_line_then_resumes_clean(tmp_path):
    # (Read-only under a running driver cannot be made here: Linux refuses to remount a file system
    # read-only while files on it are open for writing, and Ray keeps some open.)
    store = tmp_path / "store"
    store.mkdir()
    try:
        _mount("-t", "tmpfs", "-o", "size=256m", "tmpfs", str(store))
    except (subprocess.CalledProcessError, FileNotFoundError) as err:
        pytest.skip(f"cannot mount a tmpfs here (needs root): {err}")
    from tests.conftest import start_mlflow_server, stop

    url, server = start_mlflow_server(tmp_path, f"sqlite:///{tmp_path / 'mlflow.db'}")
    sweep = Sweep(tmp_path, url, "readonly", storage=store)
    try:
        rc, out, err = sweep.run(fault="report:6:KILL")
        assert rc == -signal.SIGKILL, err[-2000:]
        before = finished_trials(sweep)
        sweep.cleanup()  # the dead driver's Ray (nothing may hold a file open for writing on a remount)
        snapshot = {p: p.stat().st_mtime_ns for p in store.rglob("*") if p.is_file()}
        _mount("-o", "remount,ro", str(store))
        rc, out, err = sweep.run()  # read-only: one line, exit 2, before Ray; nothing touched
        assert rc == 2 and len(err.strip().splitlines()) == 1 and "cannot write there" in err, err[-2000:]
        assert "Traceback" not in err and {p: p.stat().st_mtime_ns for p in store.rglob("*") if p.is_file()} == snapshot
        _mount("-o", "remount,rw", str(store))
        rc, out, err, problems = resume_and_watch(sweep)
        assert rc == 0, f"rc {rc}: {out[-2000:]}{err[-3000:]}"
        wrong = problems + check_ledger(sweep, before)
        assert not wrong, "\n".join(wrong)
    finally:
        sweep.cleanup()
        stop(server)
        subprocess.run(["umount", "-l", str(store)], capture_output=True)


def _children(pid: int) -> dict[int, str]:
    """Every descendant of `pid`: {pid: command name}."""
    found, todo = {}, [pid]
    while todo:
        parent = todo.pop()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            fields = stat.rsplit(")", 1)[1].split()
            if int(fields[1]) == parent:
                found[int(entry.name)] = stat.split("(", 1)[1].rsplit(")", 1)[0]
                todo.append(int(entry.name))
    return found


def test_a_lost_worker_node_costs_its_trial_a_restart_from_checkpoint_on_the_head(tmp_path, mlflow_server):
    from tests.test_cluster import ENV as CLUSTER_ENV, _alive_nodes, _answers, ray_node

    import shutil
    import tempfile

    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")
    gcs, dash = f"127.0.0.1:{free_port()}", free_port()
    dashboard = f"http://127.0.0.1:{dash}"
    head = ["--head", "--port", gcs.split(":")[1], "--num-cpus", "1", "--include-dashboard", "true",
            "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash), "--temp-dir", temp]
    storage = tmp_path / "shared"
    sweep = Sweep(tmp_path, mlflow_server, "node-loss", storage=storage, address=gcs, max_steps=600, fifo=True)
    try:
        with contextlib.ExitStack() as nodes:
            nodes.enter_context(ray_node(*head, ready=lambda: _answers(f"{dashboard}/api/version") and _alive_nodes(dashboard) == 1))
            worker = nodes.enter_context(ray_node("--address", gcs, "--num-cpus", "1", ready=lambda: _alive_nodes(dashboard) == 2))
            proc = sweep.start(env={k: v for k, v in CLUSTER_ENV.items() if k != "MLFLOW_TRACKING_URI"})
            # two trials reporting at once: one on each node (1 CPU each); long enough to be seen on a quiet
            # machine (status.json is written once a second, the tiny model trains hundreds of steps a second)
            running = lambda: [t for t in (sweep.status() or {"trials": []})["trials"] if t["status"] == "running" and 10 <= t["step"] < 450]  # noqa: E731
            _wait("a trial mid-training on each node", lambda: len(running()) >= 2, proc=proc)
            raylets = [pid for pid, name in _children(worker.pid).items() if name == "raylet"]
            assert raylets, _children(worker.pid)
            os.kill(raylets[0], signal.SIGKILL)  # the worker node is lost
            out, err = proc.communicate(timeout=600)
            assert proc.returncode == 0, f"rc {proc.returncode}: {out[-2000:]}{err[-3000:]}"
            wrong = check_ledger(sweep, {}, lost_node=True)
            assert not wrong, "\n".join(wrong)
    finally:
        sweep.cleanup()
        shutil.rmtree(temp, ignore_errors=True)
