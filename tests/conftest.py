"""Shared fixtures: the project root, and a `sweeper` subprocess runner."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def sweeper_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sweeper.cli", *map(str, args)]


@pytest.fixture
def run_sweeper(tmp_path):
    """Run `sweeper ARGS` in tmp_path (so ./sweeps and ./mlflow.db land there)."""

    def run(*args, timeout=600, env=None):
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        return subprocess.run(sweeper_cmd(*args), cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=full_env)

    return run


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 with a free port, SQLite backend, served artifacts."""
    import time
    import urllib.request

    root = tmp_path_factory.mktemp("mlflow-server")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(root / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", f"sqlite:///{root / 'mlflow.db'}",
                             "--artifacts-destination", str(root / "artifacts"), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=root)
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            break
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError("mlflow server did not start: " + (root / "server.log").read_text()[-2000:])
            time.sleep(0.5)
    yield url
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


# credentials a user may have in the environment; the smoke sweep runs with them set, and
# tests/test_exposure.py checks that none of them reaches a file, a parameter or a tag
SECRET_CANARIES = {
    "MLFLOW_TRACKING_PASSWORD": "canary-mlflow-password-5f1c2e",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-secret-9b7d4a",
    "AWS_ACCESS_KEY_ID": "canary-aws-key-id-31e8f0",
    "RAY_AUTH_TOKEN": "canary-ray-token-c0ffee",
    "HF_TOKEN": "canary-hf-token-77aa01",
}


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory, mlflow_server):
    """search_spaces/smoke.yaml run once through `sweeper launch`, logging to the real MLflow server,
    with credential canaries in its environment."""
    workdir = tmp_path_factory.mktemp("smoke")
    env = {**os.environ, "PYTHONPATH": str(ROOT), **SECRET_CANARIES}
    cmd = sweeper_cmd("launch", ROOT / "search_spaces" / "smoke.yaml", "--tracking-uri", mlflow_server)
    r = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return workdir, r
