"""Outputs that cannot take the results, inputs that are not what they claim: answered in one
line before anything trains (`sweeper reproduce` runs 16-26 minutes; its --out and --reuse are
checked first), nothing written or deleted.

A full disk is a real one: a 1 MiB tmpfs filled to the last block (root only; skipped elsewhere).
An empty probe file still fits there (an inode, no block), so only a probe of real bytes sees it.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from sweeper.fs import PROBE_BYTES, check_writable
from tests.hostile import ENV, ROOT, SWEEPER, assert_refused, snapshot, sweeper
from core.errors import ConfigError

SWEEPER_CMD = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
QUICK = ("reproduce", "--quick", "--seeds", "1", "--systems", "lstm")


@pytest.fixture
def full_disk(tmp_path):
    """A folder on a file system with no free block left."""
    mount = tmp_path / "full"
    mount.mkdir()
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mount)], capture_output=True)
    if r.returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        with open(mount / "fill", "wb") as f:
            try:
                while True:
                    f.write(b"\0" * 65536)
                    f.flush()
            except OSError:
                pass
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], capture_output=True)


def test_check_writable_sees_a_full_disk_an_empty_probe_would_miss(full_disk):
    (full_disk / "empty-probe").touch()  # the check that used to pass: an inode is still free
    (full_disk / "empty-probe").unlink()
    with pytest.raises(ConfigError, match="No space left"):
        check_writable(full_disk / "sweeps", "--storage")
    assert sorted(p.name for p in full_disk.iterdir()) == ["fill"]


@pytest.mark.parametrize("unnamed", [True, False], ids=["unnamed probe", "file systems without O_TMPFILE"])
def test_check_writable_leaves_nothing_behind(tmp_path, monkeypatch, unnamed):
    if not unnamed:  # NFS, vfat: the probe is a hidden file, removed
        real_open = os.open
        monkeypatch.setattr(os, "open", lambda path, flags, *a: _no_tmpfile() if flags & os.O_TMPFILE == os.O_TMPFILE
                            else real_open(path, flags, *a))
    os.utime(tmp_path, ns=(0, 0))
    check_writable(tmp_path / "a" / "b", "--out")
    assert list(tmp_path.iterdir()) == [] and PROBE_BYTES >= 4096
    assert (os.stat(tmp_path).st_mtime_ns == 0) == unnamed  # an unnamed probe leaves even the folder's time as it was


def _no_tmpfile():
    raise OSError(errno.EOPNOTSUPP, "Operation not supported")


@pytest.mark.parametrize("command", [("trial", "tiny", "--out", "run"), (*QUICK, "--out", "results"),
                                     ("launch", ROOT / "search_spaces" / "smoke.yaml")])
def test_a_full_disk_is_one_line_naming_the_flag_and_path(full_disk, command):
    before = snapshot(full_disk)
    r = sweeper(*command, cwd=full_disk)
    line = assert_refused(r, "No space left", root=full_disk, before=before)
    assert r.stdout == ""  # refused before it said a word of a plan or a run
    assert "--out" in line or "sweep directory" in line


# --------------------------------------------------------------------------- reproduce --out, --reuse


def _reuse(tmp_path: Path, content) -> str:
    path = tmp_path / "earlier.json"
    path.write_text(content if isinstance(content, str) else json.dumps(content))
    return path.name


RESULT = {"system": "hybrid_dat", "seed": 0, "metrics": {"acc_3x": 0.5}, "history": [{"step": 20, "acc_3x": 0.4}]}


@pytest.mark.parametrize("setup, args, expect", [
    (lambda d: (d / "results").write_text("x"), ("--out", "results"), "a folder is expected"),
    (lambda d: (d / "file").write_text("x"), ("--out", "file/results"), "not a folder"),
    (lambda d: (d / "results" / "dat_reproduction_quick.json").mkdir(parents=True), ("--out", "results"), "is a folder"),
    (lambda d: ((d / "results").mkdir(), (d / "results" / "dat_reproduction_quick.md").symlink_to(d / "precious")),
     ("--out", "results"), "is a link"),
    (lambda d: None, ("--reuse", "missing.json"), "no such file"),
    (lambda d: (d / "adir").mkdir(), ("--reuse", "adir"), "is a folder"),
    (lambda d: _reuse(d, "{not json"), ("--reuse", "earlier.json"), "not JSON"),
    (lambda d: _reuse(d, "[" * 100_000), ("--reuse", "earlier.json"), "nested too deep"),
    (lambda d: _reuse(d, "\xff\xfe"), ("--reuse", "earlier.json"), "not JSON"),
    (lambda d: _reuse(d, {"results": 3}), ("--reuse", "earlier.json"), "results: must be a list"),
    (lambda d: _reuse(d, {"results": [{**RESULT, "system": "gpt"}]}), ("--reuse", "earlier.json"), "results[0].system"),
    (lambda d: _reuse(d, {"results": [{**RESULT, "system": ["lstm"]}]}), ("--reuse", "earlier.json"), "results[0].system"),
    (lambda d: _reuse(d, '{"results": [{"system": "lstm", "seed": 0, "metrics": {"acc_3x": ' + "[" * 900 + "]" * 900 + "}}]}"),
     ("--reuse", "earlier.json"), "results[0].metrics.acc_3x: must be a finite number, got <list of 1 item>"),
    (lambda d: _reuse(d, {"results": [{**RESULT, "seed": -1}]}), ("--reuse", "earlier.json"), "results[0].seed"),
    (lambda d: _reuse(d, {"results": [{**RESULT, "metrics": {"acc_3x": 7}}]}), ("--reuse", "earlier.json"), "[0, 1]"),
    (lambda d: _reuse(d, {"results": [{**RESULT, "metrics": {"acc_3x": "high"}}]}), ("--reuse", "earlier.json"), "finite number"),
    (lambda d: _reuse(d, {"results": [{**RESULT, "history": [{"acc_3x": 0.1}]}]}), ("--reuse", "earlier.json"), "history[0].step"),
    (lambda d: _reuse(d, {"results": [RESULT, RESULT]}), ("--reuse", "earlier.json"), "the same system and seed as results[0]"),
])
def test_reproduce_refuses_its_outputs_and_inputs_before_training(tmp_path, setup, args, expect):
    setup(tmp_path)
    before = snapshot(tmp_path)
    r = sweeper(*QUICK, *args, cwd=tmp_path)
    assert_refused(r, args[0], expect, root=tmp_path, before=before)
    assert r.stdout == ""  # answered before any training: the runs' banner ("reproduce: ...") never came


def test_a_reuse_file_over_the_limit_is_refused_unread(tmp_path):
    import os

    (tmp_path / "big.json").touch()
    os.truncate(tmp_path / "big.json", 2**36)  # sparse
    before = snapshot(tmp_path)
    assert_refused(sweeper(*QUICK, "--reuse", "big.json", cwd=tmp_path), "--reuse", "at most", root=tmp_path, before=before)


@pytest.mark.parametrize("folder, rule", [("runs?v2", "query arguments"), ("100%25", "a % in an SQLite store's path")])
def test_a_default_store_in_a_folder_mlflow_would_misread_is_one_line(tmp_path, folder, rule):
    # MLflow makes an SQLite store's folder from its URI unquoted: a ? or % there would name
    # another file or leave a folder of the escaped name beside the real one
    (tmp_path / folder).mkdir()
    before = snapshot(tmp_path)
    r = sweeper("launch", ROOT / "search_spaces" / "smoke.yaml", cwd=tmp_path / folder)
    assert_refused(r, "the default tracking URI", rule, "sqlite:///PATH/mlflow.db", root=tmp_path, before=before)


@pytest.mark.parametrize("storage", ["x://", "://", "s3://bucket/sweeps"])
def test_any_storage_uri_is_refused_not_made_a_folder_of_another_process(tmp_path, storage):
    # `x://` lost its `://` to a trailing-slash cut and was taken for the process's own ./sweeps
    before = snapshot(tmp_path)
    r = sweeper("launch", ROOT / "search_spaces" / "smoke.yaml", "--storage", storage, "--in-process", cwd=tmp_path)
    assert_refused(r, f"--storage {storage}", "a path every node sees", root=tmp_path, before=before)


@pytest.mark.parametrize("where", ["service", "service/deeper"])
def test_a_storage_inside_the_sweep_service_s_own_folder_is_one_line_before_anything_is_written(tmp_path, where):
    service = tmp_path / "service"
    service.mkdir(mode=0o700)
    before = snapshot(tmp_path)
    r = sweeper("launch", ROOT / "search_spaces" / "smoke.yaml", "--storage", tmp_path / where, "--in-process",
                cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(service)})
    assert_refused(r, "--storage", "inside the sweep service's own folder", root=tmp_path, before=before)


@pytest.mark.parametrize("store, said", [
    ("service/m.db", "inside the sweep service's own folder"),
    ("to-service/m.db", "inside the sweep service's own folder"),  # a link to it
    ("service/service.lock", "a lock file's name"),  # the service's own lock, flocked while it runs
    ("sw/.smoke.lock", "a lock file's name"),  # the sweep's own lock: made by the launch, then opened as the store
    ("mlflow.db.lock", "a lock file's name"),
])
def test_a_tracking_store_in_the_service_s_folder_or_at_a_lock_s_name_is_one_line_before_anything_is_written(
        tmp_path, store, said):
    service = tmp_path / "service"
    service.mkdir(mode=0o700)
    (service / "service.lock").touch()
    (tmp_path / "to-service").symlink_to(service)
    (tmp_path / "sw").mkdir()
    before = snapshot(tmp_path)
    r = sweeper("launch", ROOT / "search_spaces" / "smoke.yaml", "--storage", tmp_path / "sw", "--in-process",
                "--tracking-uri", f"sqlite:///{tmp_path / store}", cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(service)})
    assert_refused(r, "--tracking-uri", said, root=tmp_path, before=before)


@pytest.mark.parametrize("planted, said", [("dangling", "a dangling link"), ("file", "a file"), ("fifo", "not a folder")])
def test_what_stands_where_the_store_keeps_its_artifacts_is_one_line_before_anything_is_written(tmp_path, planted, said):
    import os

    artifacts = tmp_path / "mlartifacts"
    {"dangling": lambda: artifacts.symlink_to(tmp_path / "elsewhere"), "file": lambda: artifacts.write_text("x\n"),
     "fifo": lambda: os.mkfifo(artifacts)}[planted]()
    before = snapshot(tmp_path)
    r = sweeper("launch", ROOT / "search_spaces" / "smoke.yaml", "--in-process", cwd=tmp_path)
    assert_refused(r, "mlartifacts", said, "keeps its artifacts", root=tmp_path, before=before)
    assert not (tmp_path / "elsewhere").exists()  # a dangling link's target is not made


@pytest.mark.parametrize("verb", ["status", "report", "dashboard"])
def test_a_storage_uri_for_a_reading_verb_is_one_line_not_the_working_folder_s_sweep(tmp_path, verb):
    # a URI was read as the process's own ./sweeps: the answer was about another folder's sweep
    before = snapshot(tmp_path)
    r = sweeper(verb, "smoke", "--storage", "s3://bucket/sweeps", cwd=tmp_path)
    assert_refused(r, "--storage s3://bucket/sweeps", "not a URI", root=tmp_path, before=before)


@pytest.mark.parametrize("target", ["nowhere", "empty", "other-sweep"])
@pytest.mark.parametrize("restart", [False, True])
def test_a_link_at_the_sweep_s_name_is_named_as_a_link_before_anything_is_written(tmp_path, target, restart):
    """A dangling link was "File exists" after the sweep's lock was made; a link to an empty folder or
    to another sound sweep was said to hold files that are not a sweep's."""
    (tmp_path / "empty").mkdir()
    (tmp_path / "other-sweep").mkdir()
    (tmp_path / "other-sweep" / "optuna.db").write_bytes(b"")
    (tmp_path / "sw").mkdir()
    (tmp_path / "sw" / "smoke").symlink_to(tmp_path / target)
    before = snapshot(tmp_path)
    r = sweeper("launch", ROOT / "search_spaces" / "smoke.yaml", "--storage", tmp_path / "sw", "--in-process",
                *(["--restart"] if restart else []), cwd=tmp_path)
    line = assert_refused(r, "sw/smoke: a link (to ", target, "never reached through a link", root=tmp_path, before=before)
    assert ("which does not exist" in line) == (target == "nowhere"), line


@pytest.mark.parametrize("where", ["/dev/full", "a file on a full disk"])
def test_a_command_whose_stdout_takes_no_byte_is_refused_before_it_acts(tmp_path, request, where):
    """`sweeper launch smoke.yaml > /dev/full` made the sweep's folder, lock and study (and `trial`
    its run folder) before its first line failed; `serve --stop` stopped the service, then exit 2."""
    work = tmp_path / "work"
    work.mkdir()
    if where == "/dev/full" and not Path("/dev/full").exists():
        pytest.skip("no /dev/full here")
    target = Path("/dev/full") if where == "/dev/full" else request.getfixturevalue("full_disk") / "out.txt"
    before = snapshot(work)
    for args in (("launch", str(ROOT / "search_spaces" / "smoke.yaml"), "--in-process"), ("trial", "tiny", "--out", "run"),
                 ("serve", "--stop")):
        with open(target, "a") as out:
            r = subprocess.run([*SWEEPER_CMD, *args], cwd=work, stdout=out, stderr=subprocess.PIPE, text=True, timeout=120,
                               env={**ENV, "SWEEPER_SERVICE_DIR": str(tmp_path / "svc")})
        r.stdout = ""
        assert_refused(r, "stdout", "No space left on device", "nothing was done", root=work, before=before)
    assert not (tmp_path / "svc").exists()
