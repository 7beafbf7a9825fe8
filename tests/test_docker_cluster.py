"""The image as a real Ray cluster (docker/cluster.sh, `make docker-cluster`): a head and a worker
container of the image, an MLflow server container, and `sweeper submit --follow` from this
machine; the smoke sweep succeeds with trials on both containers and every run in MLflow.

Minutes (it builds the image), so marked `docker` and left out of the default run (pyproject's
addopts: -m "not docker"); `make test-docker` runs it. Skipped, with the reason, where Docker or
the image's prerequisites are missing."""

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import ROOT

pytestmark = pytest.mark.docker
TORCH_WHEEL_DIR = Path(os.environ.get("TORCH_WHEEL_DIR", "/opt/wheels"))


def _missing() -> str | None:
    """Why docker/cluster.sh cannot run here, or None."""
    if not shutil.which("docker"):
        return "docker (the client) is not installed: apt-get install docker.io"
    daemon = subprocess.run(["docker", "info"], capture_output=True).returncode == 0
    if not daemon and not (shutil.which("dockerd") and os.geteuid() == 0):
        return "no Docker daemon answers, and this user cannot start dockerd (not root, or not installed)"
    if not os.environ.get("BASE_IMAGE"):  # the local stand-in base and the CPU torch wheel (docker/image.sh)
        if not (shutil.which("debootstrap") or Path(os.environ.get("ROOTFS_CACHE", "/var/tmp/dat-sweeper-standin.tar")).exists()):
            return "no BASE_IMAGE, and debootstrap (for the stand-in base) is not installed: apt-get install debootstrap"
        if not list(TORCH_WHEEL_DIR.glob("torch-*+cpu-*.whl")):
            return f"no BASE_IMAGE, and no CPU torch wheel in {TORCH_WHEEL_DIR} ($TORCH_WHEEL_DIR) for the stand-in build"
    return None


def test_the_image_runs_the_smoke_sweep_as_a_two_node_cluster(tmp_path):
    if reason := _missing():
        pytest.skip(reason)
    r = subprocess.run(["bash", str(ROOT / "docker" / "cluster.sh")], cwd=ROOT, stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=1800)
    out = r.stdout
    (tmp_path / "docker-cluster.log").write_text(out)  # the whole run, for a failure's post-mortem
    assert r.returncode == 0, out[-6000:]
    assert "nodes: 2 alive" in out, out[-3000:]
    assert re.search(r"job sweep-smoke-\w+: SUCCEEDED", out), out[-3000:]
    # where the trials ran, read from the sweep's ledger (each trial's node_ip)
    per_node = dict(re.findall(r"(head|worker) (\d+)", re.search(r"trials per node \(ledger\): (.*)", out)[1]))
    assert set(per_node) == {"head", "worker"} and sum(map(int, per_node.values())) == 6, out[-3000:]
    assert re.search(r"experiment smoke: 1 parent run, 6 trial runs", out), out[-3000:]
    # torn down: none of the script's containers is left
    left = subprocess.run(["docker", "ps", "-a", "--filter", "name=dat-sweeper-", "--format", "{{.Names}}"],
                          capture_output=True, text=True)
    assert left.returncode != 0 or not left.stdout.strip(), left.stdout
