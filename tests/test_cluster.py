"""A real two-node Ray cluster on this machine (`ray start --head` + `ray start --address`):
`sweeper launch search_spaces/smoke.yaml --address` runs its trials on both nodes, and
`sweeper submit` refuses a local storage path there unless it is marked as shared."""

import contextlib
import json
import os
import secrets
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, free_port, sweeper_cmd

pytestmark = [pytest.mark.integration, pytest.mark.serial]  # a `ray start` cluster: alone
TRAINABLE = "ImplicitFunc"  # the actor class Ray Tune runs a function trainable in
BIN = Path(sys.executable).parent  # ray and sweeper of this environment
# the test clusters use Ray's token auth (as Ray 2.60 clusters do by default) with a token of their own
ENV = {**os.environ, "PYTHONPATH": str(ROOT), "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}",
       "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "token", "RAY_AUTH_TOKEN": secrets.token_hex(32)}


@contextlib.contextmanager
def ray_node(*args: str, ready):
    """`ray start ARGS --block` until the context ends; stopped by its own process (never `ray stop`,
    which would end every Ray on the machine). `ready()` is polled until it holds."""
    # each node's dashboard agent on a free port: on Ray's fixed default (52365) a second Ray on this
    # machine (another test's, a sweep running beside the tests) takes it, and the head then answers
    # every job submission "No available agent to submit job"
    agent = ["--dashboard-agent-listen-port", str(free_port())]
    proc = subprocess.Popen([str(BIN / "ray"), "start", "--block", "--disable-usage-stats", *agent, *args], env=ENV,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        deadline = time.time() + 90
        while not ready():
            if proc.poll() is not None or time.time() > deadline:
                raise RuntimeError(f"ray start {' '.join(args)} failed: {proc.stderr.read()[-2000:] if proc.poll() is not None else 'timeout'}")
            time.sleep(0.5)
        yield proc
    finally:
        proc.terminate()  # `ray start --block` stops its node's processes on SIGTERM
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, 9)
            proc.wait()


def _answers(url: str) -> bool:
    try:
        urllib.request.urlopen(url, timeout=2).close()
        return True
    except urllib.error.HTTPError:  # 401: token auth, but it answers
        return True
    except OSError:
        return False


def ray_state(dashboard: str, query: str):
    """`query` (Python on `ray.util.state`, e.g. "list_nodes(address=A)") answered in a fresh process
    with the cluster's token (Ray reads its auth settings once per process), as JSON."""
    code = f"import json, ray.util.state as s; A = {dashboard!r}; print(json.dumps([x.__dict__ for x in s.{query}], default=str))"
    r = subprocess.run([sys.executable, "-c", code], env=ENV, capture_output=True, text=True, timeout=60)
    if r.returncode:
        raise RuntimeError(r.stderr[-1000:])
    return json.loads(r.stdout)


def _alive_nodes(dashboard: str) -> int:
    try:
        return len(ray_state(dashboard, 'list_nodes(address=A, filters=[("state", "=", "ALIVE")])'))
    except RuntimeError:  # the state API is not up yet
        return 0


@contextlib.contextmanager
def ray_cluster(workers: int, cpus_per_node: int = 1):
    """A head (job server on 127.0.0.1) and `workers` worker nodes; yields (gcs, dashboard) addresses."""
    temp = tempfile.mkdtemp(prefix="ray", dir="/tmp")  # short: Ray's socket paths must fit in 107 bytes
    gcs, dash = f"127.0.0.1:{free_port()}", free_port()
    dashboard = f"http://127.0.0.1:{dash}"
    head = ["--head", "--port", gcs.split(":")[1], "--num-cpus", str(cpus_per_node),
            "--include-dashboard", "true", "--dashboard-host", "127.0.0.1", "--dashboard-port", str(dash),
            "--temp-dir", temp]
    try:
        with contextlib.ExitStack() as nodes:
            nodes.enter_context(ray_node(*head, ready=lambda: _answers(f"{dashboard}/api/version") and _alive_nodes(dashboard) == 1))
            for n in range(workers):
                nodes.enter_context(ray_node("--address", gcs, "--num-cpus",
                                             str(cpus_per_node), ready=lambda n=n: _alive_nodes(dashboard) == n + 2))
            yield gcs, dashboard
    finally:
        shutil.rmtree(temp, ignore_errors=True)


@pytest.fixture(scope="module")
def two_nodes():
    with ray_cluster(workers=1) as addresses:
        yield addresses


def test_smoke_sweep_runs_its_trials_on_both_nodes(two_nodes, tmp_path):
    gcs, dashboard = two_nodes
    storage = tmp_path / "shared"  # one machine: a path both nodes see
    r = subprocess.run(sweeper_cmd("launch", ROOT / "search_spaces" / "smoke.yaml", "--address", gcs,
                                   "--storage", storage, "--shared-storage"),
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    summary = json.loads((storage / "smoke" / "summary.json").read_text())
    assert len(summary["trials"]) == 6 and summary["best"]["score"] is not None
    nodes = {n["node_id"] for n in ray_state(dashboard, "list_nodes(address=A)")}
    # every trial ran in an actor of the trainable; Ray's state API remembers where each one lived
    actors = ray_state(dashboard, "list_actors(address=A, detail=True, limit=10000)")
    used = {a["node_id"] for a in actors if a["class_name"] == TRAINABLE}
    assert len(nodes) == 2 and used == nodes, (nodes, [(a["class_name"], a["node_id"]) for a in actors])


def test_submit_refuses_an_unshared_local_path_on_two_nodes(two_nodes, tmp_path):
    _, dashboard = two_nodes
    r = subprocess.run(sweeper_cmd("submit", ROOT / "search_spaces" / "smoke.yaml", "--address", dashboard,
                                   "--storage", tmp_path, "--tracking-uri", "http://mlflow:5000"),
                       cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip().splitlines() == [
        f"error: --storage {tmp_path}: the cluster has 2 nodes and a local path is not shared; "
        "pass --shared-storage if every node mounts it (NFS, a ReadWriteMany volume)"]
