"""`sweeper ui` on the embedded store: it serves on loopback, prints where, and SIGTERM stops
it together with its MLflow server (no server left behind). More of its behaviour (the address
printed at once, Ctrl-C, held ports, hosts): tests/test_views_serve.py."""

from __future__ import annotations

import os
import signal
import subprocess
import time
import urllib.request

import pytest

from tests.conftest import ROOT, empty_mlflow_store, free_port, sweeper_cmd

pytestmark = pytest.mark.integration


@pytest.mark.long  # `make test-long`; `make test` stops the same server with Ctrl-C (test_views_serve.py)
def test_sigterm_stops_the_ui_and_its_server(tmp_path):
    empty_mlflow_store(tmp_path)
    port = free_port()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    proc = subprocess.Popen(sweeper_cmd("ui", "--port", port), cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        seen = []
        while not any(l.startswith("ready: ") for l in seen):  # the address at once, `ready` once the server answers
            line = proc.stdout.readline()
            assert line, f"`sweeper ui` ended before it was ready: {seen[-5:]}"
            seen.append(line)
        assert seen[0].startswith("MLflow UI on") and f"http://127.0.0.1:{port}" in seen[0], seen
        assert f"http://127.0.0.1:{port}" in seen[-1], seen[-1]
        urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=5).close()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
        deadline = time.time() + 15
        while time.time() < deadline:  # the MLflow server went with it
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
                time.sleep(0.5)
            except OSError:
                break
        else:
            raise AssertionError("the MLflow server outlived `sweeper ui`")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
