"""Nothing lost, nothing planted runs: a folder that is not a sweep's is never deleted (with or
without --restart), a planted process file ends no one else's process, and planted pickles in a
sweep folder are never loaded."""

from __future__ import annotations

import json
import pickle
import shutil
import subprocess
import sys

import psutil
import pytest

from tests.conftest import ROOT, sweeper_cmd, sweeper_env

ENV = sweeper_env()
SMOKE = ROOT / "search_spaces" / "smoke.yaml"


def _tree(folder):
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("restart", [False, True])
def test_a_folder_that_is_not_a_sweep_is_never_deleted(tmp_path, restart):
    notes = tmp_path / "sweeps" / "smoke" / "notes.txt"
    notes.parent.mkdir(parents=True)
    notes.write_text("a user's notes, nothing to do with the sweep")
    before = _tree(tmp_path / "sweeps")
    r = subprocess.run(sweeper_cmd("launch", SMOKE, *(["--restart"] if restart else [])), cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=120)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and len(lines[0]) <= 300 and "not a sweep's" in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    after = _tree(tmp_path / "sweeps")
    after.pop(".smoke.lock", None)  # the lock beside the folder, taken before the folder is looked at
    assert after == before


class Planted:
    """A pickle that, loaded, leaves a file behind."""

    def __init__(self, mark: str):
        self.mark = mark

    def __reduce__(self):
        return (open, (self.mark, "w"))


def _sleeper(env=None) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"], env=env)


def test_a_planted_process_file_ends_no_one_else_s_process(tmp_path, monkeypatch):
    from sweeper import orphans

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))  # this test's own signing key
    other = _sleeper()  # not this driver's: named in a planted file with its real start time
    try:
        procs = [{"pid": other.pid, "started": psutil.Process(other.pid).create_time(), "name": "raylet"}]
        for planted in ({"driver": 1, "processes": procs},  # unsigned
                        {"driver": 1, "processes": procs, "signature": "0" * 64}):  # signed by someone else
            (tmp_path / orphans.PROCESSES_FILE).write_text(json.dumps(planted))
            assert orphans.end_orphans(tmp_path, grace_s=1) == [] and other.poll() is None
        # a driver that records its child and dies (as a SIGKILLed one): the next launch ends that child
        recorder = ("import subprocess, sys; from pathlib import Path; from sweeper import orphans; "
                    "c = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'], stdout=subprocess.DEVNULL, "
                    "stderr=subprocess.DEVNULL); "
                    "orphans.record(Path(sys.argv[1])); print(c.pid)")
        r = subprocess.run([sys.executable, "-c", recorder, str(tmp_path)], env={**ENV, "XDG_STATE_HOME": str(tmp_path / "state")},
                           capture_output=True, text=True, timeout=60)
        orphan = psutil.Process(int(r.stdout.strip()))
        name = orphan.name()
        assert orphans.end_orphans(tmp_path, grace_s=5) == [name]
        assert not orphan.is_running() or orphan.status() == psutil.STATUS_ZOMBIE
        assert other.poll() is None
        assert oct(orphans.key_path().stat().st_mode & 0o777) == "0o600"
    finally:
        other.kill()
        other.wait()


@pytest.mark.parametrize("damaged", [b"", b"  \n", b"abc", b"0" * 63, b"\xff" * 64])
def test_a_damaged_signing_key_is_replaced_and_a_record_signed_under_it_ends_no_one(tmp_path, monkeypatch, damaged):
    import hashlib
    import hmac

    from sweeper import orphans

    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    key = orphans.key_path()
    key.parent.mkdir(parents=True)
    key.write_bytes(damaged)  # a kill or a full disk between the key's creation and its write
    victim = _sleeper()
    try:
        driver = {"pid": 1, "started": 0.0}
        procs = [{"pid": victim.pid, "started": psutil.Process(victim.pid).create_time(), "name": "sleep"}]
        body = json.dumps([driver, *procs], sort_keys=True).encode()
        forged = hmac.new(damaged.strip(), body, hashlib.sha256).hexdigest()  # what anyone can sign with that key
        (tmp_path / orphans.PROCESSES_FILE).write_text(json.dumps(
            {"driver": 1, "driver_started": 0.0, "processes": procs, "signature": forged}))
        assert orphans.end_orphans(tmp_path, grace_s=1) == [] and victim.poll() is None
        fresh = key.read_bytes()
        assert len(fresh) == 64 and fresh != damaged and int(fresh, 16) >= 0
        assert oct(key.stat().st_mode & 0o777) == "0o600"
    finally:
        victim.kill()
        victim.wait()


@pytest.mark.integration
def test_planted_pickles_in_a_sweep_folder_never_run(smoke_sweep, tmp_path):
    workdir, _ = smoke_sweep
    shutil.copytree(workdir / "sweeps", tmp_path / "sweeps")
    sweep_dir = tmp_path / "sweeps" / "smoke"
    mark = tmp_path / "planted-code-ran"
    for name in ("asha.pkl", "tuner.pkl", "searcher-state.pkl", "ended.json"):
        (sweep_dir / name).write_bytes(pickle.dumps(Planted(str(mark))))
    from sweeper.adapters.optuna_study import sweep_study

    uri = sweep_study(sweep_dir / "optuna.db", "smoke")[1]["sweeper.tracking_uri"]
    trials = _tree(sweep_dir / "trials")
    r = subprocess.run(sweeper_cmd("launch", SMOKE, "--tracking-uri", uri), cwd=tmp_path, env=ENV, capture_output=True,
                       text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert not mark.exists(), "a pickle planted in the sweep folder was loaded"
    assert _tree(sweep_dir / "trials") == trials  # a finished sweep: nothing trained again
    assert "Traceback" not in r.stderr, r.stderr[-3000:]  # nor a Tune run started for it (its state files raced)


def test_processes_making_the_first_signing_key_at_the_same_moment_agree_on_it(tmp_path):
    # each writes a whole key and links it into place; a key already there is kept, not replaced
    code = "from sweeper import orphans; print(orphans._key().decode())"
    env = {**ENV, "XDG_STATE_HOME": str(tmp_path), "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", code], env=env, stdout=subprocess.PIPE, text=True) for _ in range(4)]
    keys = {p.communicate(timeout=60)[0].strip() for p in procs}
    assert len(keys) == 1 and len(keys.pop()) == 64
    assert [p.name for p in (tmp_path / "dat-sweeper").iterdir()] == ["process-record.key"]  # no temporary file left
