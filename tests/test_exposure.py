"""What a sweep exposes: its local Ray listens on loopback only, and credentials never reach
its logs, parameters, tags, artifacts or files."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT, SECRET_CANARIES

pytestmark = pytest.mark.integration

LISTEN_PROBE = """
import json, os
from sweeper.local_ray import loopback_only
loopback_only()
from sweeper.adapters import ray_tune
import ray
ray_tune.init_ray(None)

@ray.remote
def ping():
    return 1

ray.get([ping.remote() for _ in range(2)])  # start workers too
from tests.test_exposure import listening_sockets
print(json.dumps(listening_sockets(os.getpid())))
ray.shutdown()
"""


def _tree(root: int) -> set[int]:
    """`root` and its descendants, from /proc."""
    parent = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    parent[int(entry)] = int(f.read().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
    tree, frontier = {root}, [root]
    while frontier:
        kids = [pid for pid, ppid in parent.items() if ppid in frontier and pid not in tree]
        tree.update(kids)
        frontier = kids
    return tree


def _decode(hex_addr: str) -> str:
    raw = bytes.fromhex(hex_addr)
    if len(raw) == 4:
        return ".".join(str(b) for b in raw[::-1])
    words = [raw[i:i + 4][::-1] for i in range(0, 16, 4)]  # /proc stores each 32-bit word in host order
    import ipaddress

    return str(ipaddress.IPv6Address(b"".join(words)))


def listening_sockets(root: int) -> list[list]:
    """[process name, address, port] of every TCP socket in LISTEN state held by `root`'s tree."""
    owner = {}
    for pid in _tree(root):
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
            for fd in os.listdir(f"/proc/{pid}/fd"):
                link = os.readlink(f"/proc/{pid}/fd/{fd}")
                if link.startswith("socket:["):
                    owner[link[8:-1]] = name
        except OSError:
            continue
    found = []
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with open(table) as f:
            for line in f.readlines()[1:]:
                cols = line.split()
                if cols[3] == "0A" and cols[9] in owner:  # 0A: LISTEN
                    addr, port = cols[1].split(":")
                    found.append([owner[cols[9]], _decode(addr), int(port, 16)])
    return found


def _is_loopback(address: str) -> bool:
    import ipaddress

    ip = ipaddress.ip_address(address)
    mapped = getattr(ip, "ipv4_mapped", None)
    return ip.is_loopback or bool(mapped and mapped.is_loopback)


def test_a_local_sweeps_ray_listens_on_loopback_only_and_keeps_its_files_where_only_its_user_can_enter(tmp_path):
    import shutil
    import stat
    import tempfile

    temp = Path(tempfile.mkdtemp(prefix="r", dir="/tmp"))  # short: Ray's socket paths stay under 107 bytes
    temp.chmod(0o755)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(temp)}
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)
    env.pop("RAY_TMPDIR", None)
    try:
        r = subprocess.run([sys.executable, "-c", LISTEN_PROBE], cwd=tmp_path, env=env, capture_output=True, text=True,
                           timeout=180)
        assert r.returncode == 0, r.stderr[-3000:]
        private = temp / f"sweeper-ray-{os.getuid()}"
        assert stat.S_IMODE(private.stat().st_mode) == 0o700 and private.stat().st_uid == os.getuid()
        assert list(private.glob("ray/session_2*/sockets"))  # Ray's session (its sockets folder) is in there
        assert not (temp / "ray").exists()  # and nowhere else under the temp folder
    finally:
        shutil.rmtree(temp, ignore_errors=True)
    listening = json.loads(r.stdout.strip().splitlines()[-1])
    names = {name for name, _, _ in listening}
    assert any("gcs_server" in n for n in names) and any("raylet" in n for n in names), listening
    beyond = [entry for entry in listening if not _is_loopback(entry[1])]
    assert not beyond, beyond


def _files_with(root, needle: bytes, chunk: int = 1 << 20) -> list[str]:
    """The files under `root` holding `needle`, read a MiB at a time (a chunk keeps the tail the
    needle could straddle)."""
    hits = []
    for dirpath, _, files in os.walk(root):
        for name in files:
            path = os.path.join(dirpath, name)
            try:
                with open(path, "rb") as f:
                    tail = b""
                    while block := f.read(chunk):
                        if needle in tail + block:
                            hits.append(path)
                            break
                        tail = block[-len(needle) + 1:]
            except OSError:
                continue
    return hits


def test_credentials_reach_no_file_param_tag_or_artifact(smoke_sweep, mlflow_server, tmp_path_factory):
    workdir, run = smoke_sweep
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=mlflow_server)
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    assert runs
    for canary in SECRET_CANARIES.values():
        assert canary not in run.stdout + run.stderr
        for r in runs:
            assert not any(canary in str(v) for v in {**r.data.params, **r.data.tags}.values()), r.info.run_id
        # the sweep's directory, and the MLflow server's store and artifacts (other tests' folders under
        # the session's temp root are theirs: some hold sparse files of a TiB)
        for root in (workdir, *tmp_path_factory.getbasetemp().glob("mlflow-server*")):
            assert not _files_with(root, canary.encode()), (canary, root)
        # Ray's session folders (logs of the runtime-env agent, the raylet, the workers): the canaries are this
        # test session's own, so a hit in any session folder on the machine is the smoke sweep's leak
        from sweeper.local_ray import private_temp_root

        ray_temp = private_temp_root()
        assert any(ray_temp.glob("session_2*")), ray_temp  # where the smoke sweep's Ray kept its session
        for session in ray_temp.glob("session_2*"):
            assert not _files_with(session, canary.encode()), (canary, session)


def test_the_private_folder_is_made_narrowed_or_refused_and_a_chosen_one_is_kept(tmp_path, monkeypatch):
    import stat
    import tempfile


    from core.errors import ConfigError
    from sweeper.local_ray import private_temp_dir, private_temp_root

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(os, "environ", {k: v for k, v in os.environ.items() if k != "RAY_TMPDIR"})  # put back whole
    folder = tmp_path / f"sweeper-ray-{os.getuid()}"
    folder.mkdir(mode=0o777)
    folder.chmod(0o777)  # left open by someone: narrowed, not trusted as it is
    private_temp_dir()
    assert stat.S_IMODE(folder.stat().st_mode) == 0o700 and os.environ["RAY_TMPDIR"] == str(folder)
    assert private_temp_root() == folder / "ray"
    del os.environ["RAY_TMPDIR"]
    folder.rmdir()
    folder.write_text("not a folder")
    with pytest.raises(ConfigError) as err:
        private_temp_dir()
    assert "\n" not in str(err.value) and "RAY_TMPDIR" in str(err.value) and "RAY_TMPDIR" not in os.environ
    folder.unlink()
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    folder.symlink_to(tmp_path / "elsewhere")  # a folder of mine behind a link: not taken, as `check_ray_temp` says
    with pytest.raises(ConfigError, match="a link"):
        private_temp_dir()
    assert "RAY_TMPDIR" not in os.environ
    os.environ["RAY_TMPDIR"] = str(tmp_path / "mine")  # the caller's choice is theirs
    private_temp_dir()
    assert os.environ["RAY_TMPDIR"] == str(tmp_path / "mine") and not (tmp_path / "mine").exists()
