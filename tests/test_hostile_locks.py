"""Lock files planted as links, folders or FIFOs: refused in one line, never followed, their
targets never written (sweeper/lock.py opens them with O_NOFOLLOW)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sweeper.lock import file_lock, hold_sweep_lock, sweep_lock_path
from tests.hostile import ROOT, assert_refused, snapshot, sweeper
from core.errors import ConfigError

SMOKE = ROOT / "search_spaces" / "smoke.yaml"


def test_a_sweep_lock_that_is_a_link_is_refused_and_its_target_untouched(tmp_path):
    (tmp_path / "sweeps").mkdir()
    target = tmp_path / "precious.txt"
    target.write_text("the user's file\n")
    (tmp_path / "sweeps" / ".smoke.lock").symlink_to(target)
    before = snapshot(tmp_path)
    r = sweeper("launch", SMOKE, cwd=tmp_path)
    assert_refused(r, ".smoke.lock", "a link", root=tmp_path, before=before)
    assert target.read_text() == "the user's file\n"


def test_a_dangling_lock_link_creates_nothing_at_its_target(tmp_path):
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / ".smoke.lock").symlink_to(tmp_path / "would_be_created")
    before = snapshot(tmp_path)
    assert_refused(sweeper("launch", SMOKE, cwd=tmp_path), "a link", root=tmp_path, before=before)
    assert not (tmp_path / "would_be_created").exists()


def test_a_sweep_lock_hard_linked_with_another_file_is_refused_and_that_file_untouched(tmp_path):
    # O_NOFOLLOW does not see a hard link: the driver wrote its pid into the user's file
    (tmp_path / "sweeps").mkdir()
    precious = tmp_path / "precious.txt"
    precious.write_text("the user's file\n")
    os.link(precious, tmp_path / "sweeps" / ".smoke.lock")
    before = snapshot(tmp_path)
    assert_refused(sweeper("launch", SMOKE, cwd=tmp_path), ".smoke.lock", "hard-linked with another file (2 links)",
                   root=tmp_path, before=before)
    with pytest.raises(ConfigError, match="hard-linked"):
        hold_sweep_lock(tmp_path / "sweeps" / "smoke", "smoke")  # the lock's own open refuses it too
    assert precious.read_text() == "the user's file\n"


@pytest.mark.parametrize("kind", ["fifo", "folder"])
def test_a_sweep_lock_that_is_not_a_regular_file_is_refused(tmp_path, kind):
    (tmp_path / "sweeps").mkdir()
    lock = tmp_path / "sweeps" / ".smoke.lock"
    os.mkfifo(lock) if kind == "fifo" else lock.mkdir()
    before = snapshot(tmp_path)
    assert_refused(sweeper("launch", SMOKE, cwd=tmp_path), ".smoke.lock", root=tmp_path, before=before)


def test_file_lock_refuses_a_link(tmp_path):
    target = tmp_path / "target"
    target.write_text("x")
    (tmp_path / "store.lock").symlink_to(target)
    with pytest.raises(ConfigError, match="a link"):
        with file_lock(tmp_path / "store.lock", timeout_s=1):
            pass
    assert target.read_text() == "x"


def test_a_lock_holding_garbage_still_names_its_holder_in_one_line(tmp_path):
    # another process holds the lock and its file holds no JSON object: the refusal is still one short line
    import subprocess
    import sys

    sweep = tmp_path / "sweeps" / "s"
    code = ("import sys, fcntl, time; f = open(sys.argv[1], 'w'); f.write('[' * 100000); f.flush(); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")
    sweep.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", code, str(sweep_lock_path(sweep))], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError) as err:
            hold_sweep_lock(sweep, "s")
        assert "already running" in str(err.value) and len(str(err.value)) < 300
    finally:
        holder.kill()
        holder.wait()


def test_a_regular_lock_file_still_locks(tmp_path):
    path: Path = tmp_path / "x.lock"
    with file_lock(path, timeout_s=1):
        assert path.is_file()


def test_a_sweep_held_by_the_service_is_refused_without_naming_the_service_s_pid(tmp_path):
    # a signal to the service stops every sweep on it: the refusal gives neither its pid nor a kill
    import json
    import subprocess
    import sys

    sweep = tmp_path / "sweeps" / "s"
    record = json.dumps({"pid": 4242, "host": "vm", "service": True})
    code = ("import sys, fcntl, time; f = open(sys.argv[1], 'w'); f.write(sys.argv[2]); f.flush(); "
            "fcntl.flock(f, fcntl.LOCK_EX); print('held', flush=True); time.sleep(60)")
    sweep.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", code, str(sweep_lock_path(sweep)), record], stdout=subprocess.PIPE,
                              text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError) as err:
            hold_sweep_lock(sweep, "s")
        line = str(err.value)
        assert "already running on the sweep service" in line and "4242" not in line and "kill" not in line, line
    finally:
        holder.kill()
        holder.wait()


@pytest.mark.parametrize("record", ["an_ended_driver_s", "a_live_process_started_at_another_time", "the_holder_s_own"])
def test_a_refusal_names_a_pid_to_stop_only_when_the_lock_s_record_is_its_holder_s(tmp_path, record):
    # a launch holds the lock before it writes itself into it (its checks first): until then the file holds
    # the last driver's record, whose pid may be gone or reused, and `kill -INT` of it would hit a stranger
    import json
    import subprocess
    import sys

    sweep = tmp_path / "sweeps" / "s"
    code = ("import sys, fcntl, json, os, time, psutil; f = open(sys.argv[1], 'w'); fcntl.flock(f, fcntl.LOCK_EX); "
            "r = json.loads(sys.argv[2]) or {'pid': os.getpid(), 'host': sys.argv[3], "
            "'started': psutil.Process().create_time(), 'service': False}; "
            "f.write(json.dumps(r)); f.flush(); print('held', flush=True); time.sleep(60)")
    import socket

    ended = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    stranger = {"an_ended_driver_s": {"pid": int(ended.stdout), "host": socket.gethostname(), "started": 1.0e9, "service": False},
                "a_live_process_started_at_another_time": {"pid": os.getpid(), "host": socket.gethostname(), "started": 1.0e9,
                                                           "service": False},
                "the_holder_s_own": {}}[record]
    sweep.parent.mkdir(parents=True)
    holder = subprocess.Popen([sys.executable, "-c", code, str(sweep_lock_path(sweep)), json.dumps(stranger),
                               socket.gethostname()], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        with pytest.raises(ConfigError) as err:
            hold_sweep_lock(sweep, "s")
        line = str(err.value)
        assert "already running" in line and "\n" not in line and len(line) < 300, line
        if record == "the_holder_s_own":
            assert f"kill -INT {holder.pid}" in line, line
        else:
            assert "kill" not in line and str(stranger["pid"]) not in line, line
    finally:
        holder.kill()
        holder.wait()


def test_a_second_launch_beside_a_live_driver_s_write_reports_no_killed_driver(tmp_path):
    """A journal beside the study while a driver holds the sweep's lock is that driver's write in
    progress: the second launch is refused as running, with no note of a killed driver's write."""
    import json
    import sqlite3
    import subprocess
    import sys

    from sweeper.adapters.optuna_ledger import Ledger
    from sweeper.space_file import load_space

    space = tmp_path / "smoke.yaml"
    space.write_bytes(SMOKE.read_bytes())
    folder = tmp_path / "sweeps" / "smoke"
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_bytes(space.read_bytes())
    Ledger(f"sqlite:///{folder / 'optuna.db'}", load_space(space), create=True).new_trial()
    record = json.dumps({"pid": 4242, "host": "vm", "service": False})
    # the live driver: the sweep's lock held, a write to its study begun (the journal on disk), rolled back 20 s later
    code = ("import sys, fcntl, sqlite3, time; f = open(sys.argv[1], 'w'); f.write(sys.argv[2]); f.flush(); "
            "fcntl.flock(f, fcntl.LOCK_EX); db = sqlite3.connect(sys.argv[3], isolation_level=None); "
            "db.execute('pragma cache_size = 1'); db.execute('begin exclusive'); "
            "db.execute('create table half_done (x)'); db.executemany('insert into half_done values (?)', [(i,) for i in range(50000)]); "
            "print('writing', flush=True); time.sleep(20); db.execute('rollback'); time.sleep(60)")
    holder = subprocess.Popen([sys.executable, "-c", code, str(sweep_lock_path(folder)), record,
                               str(folder / "optuna.db")], stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "writing"
        assert (folder / "optuna.db-journal").exists()
        r = sweeper("launch", space, cwd=tmp_path)
        assert_refused(r, "already running")
        assert "rolled back" not in r.stderr + r.stdout, r.stderr
    finally:
        holder.kill()
        holder.wait()
    with sqlite3.connect(folder / "optuna.db") as db:  # the live write was the driver's to end: nothing of it kept
        assert not db.execute("select name from sqlite_master where name = 'half_done'").fetchall()
