"""An experiment's unfinished sweeps parked in a committed tarball and put back on another machine
(experiments/parking.py through `Chunks`): what is packed, what is left out, and a damaged or
planted tarball refused in one line with nothing put back."""

from __future__ import annotations

import fcntl
import io
import os
import tarfile
from pathlib import Path

import pytest
import yaml

from core.errors import ConfigError
from experiments import dat_plain_switch as dps, parking
from experiments.sweep_chunks import COMMIT_SUFFIX
from sweeper.lock import sweep_lock_path
from trainables.run_dir import RunDir
from tests.test_dat_paper_depth import final


@pytest.fixture
def chunks(tmp_path, monkeypatch):
    monkeypatch.setattr(dps, "DATA", tmp_path / "record.json.gz")
    monkeypatch.setattr(dps, "SWEEPS", tmp_path / "sweeps")
    monkeypatch.setattr(dps, "PARKED", tmp_path / "repo" / "parked.tar.gz")
    return dps.chunks()


def a_stopped_sweep(chunks, tmp_path: Path) -> Path:
    """A sweep of the plan's first chunk as a stopped launch leaves it: its files beside it, a
    trial with reports and its newest checkpoint (an older one a kill left behind), the driver's
    process record."""
    p = dps.plan(chunks.load())
    cells = dps.depth.chunk(p)
    name, space = chunks.space_for(p.phase, p.budget, cells)
    folder = chunks.folder / name
    (chunks.folder).mkdir(parents=True)
    (chunks.folder / f"{name}.yaml").write_text(yaml.safe_dump(space, sort_keys=False))
    (chunks.folder / f"{name}{COMMIT_SUFFIX}").write_text("0123456789abcdef0123456789abcdef01234567\n")
    (folder / "optuna.db").parent.mkdir(parents=True)
    (folder / "optuna.db").write_bytes(os.urandom(4096))
    (folder / "ray_processes.json").write_text('{"pids": [1]}')
    (folder / "status.json").write_text("{}")
    (folder / "learning_curves.png").write_bytes(b"png")
    run = RunDir(folder / "trials" / "t0000")
    for step in (250, 500):
        run.append({**final(), "step": step})
        (tmp_path / f"ckpt{step}").mkdir()
        (tmp_path / f"ckpt{step}" / "state.pt").write_bytes(os.urandom(1000))
        run.keep_checkpoint(tmp_path / f"ckpt{step}", step)
    (tmp_path / "ckpt250").rename(folder / "trials" / "t0000" / "checkpoint-250")  # a kill's leftover
    return folder


def files_under(root: Path) -> dict[str, bytes | str]:
    out: dict[str, bytes | str] = {}
    for path in sorted(root.rglob("*")):
        rel = str(path.relative_to(root))
        out[rel] = f"-> {os.readlink(path)}" if path.is_symlink() else path.read_bytes() if path.is_file() else "dir"
    return out


def test_a_stopped_sweep_is_parked_with_its_newest_checkpoint_and_put_back_whole_where_it_is_missing(chunks, tmp_path):
    folder = a_stopped_sweep(chunks, tmp_path)
    before = files_under(chunks.folder)
    assert chunks.park() == [folder.name]
    with tarfile.open(dps.PARKED) as tar:
        names = set(tar.getnames())
    assert {f"{folder.name}.yaml", f"{folder.name}{COMMIT_SUFFIX}", f"{folder.name}/optuna.db",
            f"{folder.name}/trials/t0000/checkpoint", f"{folder.name}/trials/t0000/checkpoint-500/state.pt"} <= names
    assert not any("checkpoint-250" in n or "ray_processes" in n or "status.json" in n or ".png" in n for n in names)

    os.rename(chunks.folder, tmp_path / "gone")  # another machine: only the repository came along
    assert chunks.unpark() == [folder.name]
    after = files_under(chunks.folder)
    left_out = {k for k in before if "checkpoint-250" in k or "ray_processes" in k or "status.json" in k or ".png" in k}
    assert after == {k: v for k, v in before.items() if k not in left_out}
    assert RunDir(folder / "trials" / "t0000").checkpoint() == folder / "trials" / "t0000" / "checkpoint-500"

    (folder / "optuna.db").write_bytes(b"newer")  # a sweep already there is never replaced
    assert chunks.unpark() == []
    assert (folder / "optuna.db").read_bytes() == b"newer"
    assert not [p for p in chunks.folder.iterdir() if p.name.startswith(".unpark-")]


def test_a_sweep_whose_runs_are_all_recorded_is_not_parked_and_the_old_tarball_goes(chunks, tmp_path):
    folder = a_stopped_sweep(chunks, tmp_path)
    assert chunks.park() == [folder.name]
    space = yaml.safe_load((chunks.folder / f"{folder.name}.yaml").read_text())
    data = chunks.load()
    data["runs"] = [{"budget": space["budget"]["max_steps"], "params": c,
                     "reports": [{"step": space["budget"]["max_steps"], **dict.fromkeys(chunks.reads, 1.0)}]}
                    for c in space["searcher"]["baseline"]]
    chunks.save(data)
    assert chunks.park() == [] and not dps.PARKED.exists()


def test_a_running_sweep_is_not_parked(chunks, tmp_path):
    folder = a_stopped_sweep(chunks, tmp_path)
    with open(sweep_lock_path(folder), "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        with pytest.raises(ConfigError, match="its sweep runs; stop it"):
            chunks.park()
    assert not dps.PARKED.exists()


def _tarball(path: Path, *members: tuple) -> None:
    """Members (name, file bytes, link target, tar type, PAX headers), all but the name optional; gzipped."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz", format=tarfile.PAX_FORMAT) as tar:
        for name, data, link, kind, pax in (tuple(m) + (None,) * (5 - len(m)) for m in members):
            info = tarfile.TarInfo(name)
            if pax:
                info.pax_headers = pax
            if kind is not None or link is not None:
                info.type, info.linkname = kind or tarfile.SYMTYPE, link or ""
                tar.addfile(info)
            else:
                info.size = len(data or b"")
                tar.addfile(info, io.BytesIO(data or b""))


DB = ("dat_plain_a/optuna.db", b"db")


@pytest.mark.parametrize("members, expect", [
    ([DB, ("dat_plain_a/../../escaped", b"x")], "a name other than plain"),
    ([DB, ("/tmp/absolute", b"x")], "a name other than plain"),
    ([DB, ("somebody_else/file", b"x")], "not a sweep of this experiment"),
    ([DB, ("dat_plain_a/trials", None, "/etc")], "a link to a path"),
    ([DB, ("dat_plain_a/link", None, "../../outside")], "a link to a path"),
    ([DB, ("dat_plain_a/optuna2.db", None, "../dat_plain_b/optuna.db")], "a link to a path"),
    ([("dat_plain_a", None, ".")], "a link to a path"),
    ([("dat_plain_a", None, "dat_plain_b")], "a link to a path"),
    ([("dat_plain_a", b"a file where a sweep's folder goes")], "a sweep's folder or file of another kind"),
    ([DB, ("dat_plain_a/h", None, "dat_plain_a/nothere", tarfile.LNKTYPE)], "neither a folder"),
    ([DB, ("dat_plain_a/f", None, None, tarfile.FIFOTYPE)], "neither a folder"),
    ([DB, ("x", b"", None, None, {"path": "dat_plain_a/x\x00y"})], "a name other than plain"),
    ([DB, ("dat_plain_a\n\x1b[2Jx/optuna.db", b"x")], "a name other than plain"),
    ([("dat_plain_a.yaml", b"x"), ("dat_plain_a", None, None, tarfile.DIRTYPE),
      ("dat_plain_a/t", b"x", None, None, {"mtime": "1e400"})],
     "not a readable parked sweep"),
    ([DB, DB], "names a member twice"),
    # a sweep file the launch could not read: its sweep was put back, then refused
    ([("dat_plain_a.yaml", b"- ["), ("dat_plain_a", None, None, tarfile.DIRTYPE), DB], "a damaged sweep file"),
    ([("dat_plain_a.yaml", b"[1, 2]"), ("dat_plain_a", None, None, tarfile.DIRTYPE), DB], "a damaged sweep file"),
    ([("dat_plain_a.yaml", b"name: dat_plain_b\n"), ("dat_plain_a", None, None, tarfile.DIRTYPE), DB], "naming another sweep"),
    # links to each other, a file under one: extracting it failed ("File exists"), blamed on the sweeps' folder
    ([("dat_plain_a.yaml", b"name: dat_plain_a\n"), ("dat_plain_a", None, None, tarfile.DIRTYPE), DB,
      ("dat_plain_a/a", None, "b"), ("dat_plain_a/b", None, "a"), ("dat_plain_a/a/x", b"x")], "under a link"),
], ids=["dotdot", "absolute", "foreign", "link-absolute", "link-outside", "link-to-another-sweep", "top-link-dot",
        "top-link-alias", "top-file", "hardlink", "fifo", "nul", "escapes", "mtime-overflow", "twice", "sweep-file-yaml",
        "sweep-file-a-list", "sweep-file-of-another", "file-under-a-link"])
def test_a_planted_tarball_is_one_line_and_puts_nothing_back(chunks, tmp_path, members, expect):
    _tarball(dps.PARKED, *members)
    with pytest.raises(ConfigError, match=expect) as err:
        chunks.unpark()
    line = str(err.value)
    assert "\n" not in line and "\x1b" not in line and "\x00" not in line and len(line) <= 300
    assert not chunks.folder.exists()  # not even an empty folder of the sweeps is left made
    assert not (tmp_path / "escaped").exists() and not (tmp_path.parent / "escaped").exists()


@pytest.mark.parametrize("kind", ["fifo", "folder", "link"])
def test_a_parked_path_that_is_no_regular_file_is_one_line_and_never_blocks(chunks, tmp_path, kind):
    dps.PARKED.parent.mkdir(parents=True)
    if kind == "fifo":
        os.mkfifo(dps.PARKED)
    elif kind == "folder":
        dps.PARKED.mkdir()
    else:
        (tmp_path / "victim").write_bytes(b"keep")
        dps.PARKED.symlink_to(tmp_path / "victim")
    for call in (chunks.unpark, chunks.park):
        with pytest.raises(ConfigError, match="not a regular file"):
            call()
    assert not chunks.folder.exists() or list(chunks.folder.iterdir()) == []
    assert sorted(p.name for p in dps.PARKED.parent.iterdir()) == ["parked.tar.gz"]
    assert kind != "link" or (tmp_path / "victim").read_bytes() == b"keep"


@pytest.mark.parametrize("plant, expect", [
    (lambda f: os.mkfifo(f / "trials" / "t0000" / "pipe"), "neither a folder"),
    (lambda f: (f / "trials" / "t0000" / "out").symlink_to("/etc/passwd"), "a link to a path"),
], ids=["fifo", "absolute-link"])
def test_park_refuses_what_unpark_would_refuse_and_writes_nothing(chunks, tmp_path, plant, expect):
    plant(a_stopped_sweep(chunks, tmp_path))
    with pytest.raises(ConfigError, match=expect):
        chunks.park()
    assert not dps.PARKED.parent.exists() or list(dps.PARKED.parent.iterdir()) == []


@pytest.mark.parametrize("limit, value, expect", [("MAX_MEMBERS", 5, "more than 5 files"), ("MAX_BYTES", 2000, "more than 2,000 bytes")])
def test_park_refuses_more_than_unpark_takes_and_writes_nothing(chunks, tmp_path, monkeypatch, limit, value, expect):
    # a tarball of more members or bytes than unpark takes was written, and the next park or run refused it,
    # advising to throw it away with its checkpoints
    a_stopped_sweep(chunks, tmp_path)
    monkeypatch.setattr(parking, limit, value)
    with pytest.raises(ConfigError, match=expect):
        chunks.park()
    assert not dps.PARKED.parent.exists() or list(dps.PARKED.parent.iterdir()) == []


def test_a_damaged_sweep_file_after_parking_keeps_the_parked_tarball(chunks, tmp_path):
    folder = a_stopped_sweep(chunks, tmp_path)
    chunks.park()
    parked = dps.PARKED.read_bytes()
    (chunks.folder / f"{folder.name}.yaml").write_text("name: [unclosed")
    with pytest.raises(ConfigError, match=f"{folder.name}.yaml"):
        chunks.park()
    os.rename(folder, tmp_path / "moved")
    os.symlink(tmp_path / "moved", folder)  # the folder replaced by a link
    with pytest.raises(ConfigError, match="not a sweep's folder or file"):
        chunks.park()
    assert dps.PARKED.read_bytes() == parked


def test_park_puts_back_what_the_tarball_holds_before_it_packs_again(chunks, tmp_path):
    folder = a_stopped_sweep(chunks, tmp_path)
    chunks.park()
    os.rename(chunks.folder, tmp_path / "gone")  # a fresh checkout, parked again before any run
    assert chunks.park() == [folder.name]
    assert (folder / "optuna.db").is_file()


def test_what_a_park_or_unpark_killed_midway_left_is_cleared_by_the_next(chunks, tmp_path):
    folder = a_stopped_sweep(chunks, tmp_path)
    chunks.park()
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "keep").write_bytes(b"keep")
    scratch = chunks.folder / ".unpark-k1ll3d"  # an unpark killed while it unpacked
    (scratch / folder.name / "trials").mkdir(parents=True)
    (chunks.folder / ".unpark-link").symlink_to(tmp_path / "outside")
    partial = dps.PARKED.parent / f".{dps.PARKED.name}.k1ll3d"  # a park killed while it packed
    partial.write_bytes(b"\x1f\x8b half a tarball")

    assert chunks.unpark() == []
    assert sorted(p.name for p in chunks.folder.iterdir()) == sorted([folder.name, f"{folder.name}.yaml",
                                                                        f"{folder.name}{COMMIT_SUFFIX}"])
    assert chunks.park() == [folder.name]
    assert sorted(p.name for p in dps.PARKED.parent.iterdir()) == [dps.PARKED.name]
    assert (tmp_path / "outside" / "keep").read_bytes() == b"keep"  # a planted link removed, not followed


def test_a_refused_park_records_nothing(chunks, tmp_path):
    from experiments import packs

    folder = a_stopped_sweep(chunks, tmp_path)
    p = dps.plan(chunks.load())
    config = {**packs.trial_config(chunks, p, p.todo[0]), "steps": 500}
    (folder / "trials" / "t0000" / "checkpoint" / "config.yaml").write_text(yaml.safe_dump(config))  # a finished run
    dps.PARKED.parent.mkdir(parents=True)
    os.mkfifo(dps.PARKED)
    with pytest.raises(ConfigError, match="not a regular file"):
        chunks.park()
    assert not dps.DATA.exists()  # the finished run is recorded by a park that is done, not by one refused
    os.unlink(dps.PARKED)
    assert chunks.park() == [folder.name] and len(chunks.load()["runs"]) == 1


@pytest.mark.parametrize("kind", ["file", "dangling-link"])
def test_a_sweeps_folder_that_is_no_folder_is_named_not_the_sound_tarball(chunks, tmp_path, kind):
    a_stopped_sweep(chunks, tmp_path)
    chunks.park()
    parked = dps.PARKED.read_bytes()
    os.rename(chunks.folder, tmp_path / "gone")
    if kind == "file":
        chunks.folder.write_text("hi")
    else:
        chunks.folder.symlink_to(tmp_path / "nowhere")
    for call in (chunks.unpark, chunks.park):
        with pytest.raises(ConfigError, match="not a folder") as err:
            call()
        assert str(err.value).startswith(str(chunks.folder)[-100:]) and "git checkout" not in str(err.value)
    assert dps.PARKED.read_bytes() == parked


def test_a_tarball_of_too_many_members_or_a_sweep_without_its_file_is_one_line_before_unpacking(chunks, tmp_path,
                                                                                                monkeypatch):
    from experiments import parking

    monkeypatch.setattr(parking, "MAX_MEMBERS", 50)
    _tarball(dps.PARKED, ("dat_plain_a.yaml", b"x: 1"), ("dat_plain_a", None, None, tarfile.DIRTYPE),
             *((f"dat_plain_a/d{i}", None, None, tarfile.DIRTYPE) for i in range(60)))
    with pytest.raises(ConfigError, match="more than 50 members"):
        chunks.unpark()
    _tarball(dps.PARKED, ("dat_plain_a", None, None, tarfile.DIRTYPE), DB)
    with pytest.raises(ConfigError, match="without its sweep file dat_plain_a.yaml"):
        chunks.unpark()
    assert not chunks.folder.exists() or list(chunks.folder.iterdir()) == []


def test_the_advice_to_restore_a_committed_file_names_it_as_git_takes_it_from_the_repository_s_root():
    from experiments.record import git_restore

    assert git_restore(dps.ROOT / "experiments" / "parked" / "x.tar.gz") == "`git checkout -- experiments/parked/x.tar.gz`"
    assert git_restore(dps.DATA) == "`git checkout -- docs/results/dat_plain_switch_runs.json.gz`"


@pytest.mark.parametrize("damage", [lambda b: b[: len(b) // 2], lambda b: b"not gzip at all"], ids=["cut", "garbage"])
def test_a_damaged_tarball_is_one_line_and_puts_nothing_back(chunks, tmp_path, damage):
    a_stopped_sweep(chunks, tmp_path)
    chunks.park()
    os.rename(chunks.folder, tmp_path / "gone")
    dps.PARKED.write_bytes(damage(dps.PARKED.read_bytes()))
    with pytest.raises(ConfigError, match="not a readable parked sweep") as err:
        chunks.unpark()
    assert "git checkout" in str(err.value) and "\n" not in str(err.value)
    assert not chunks.folder.exists()
