"""Files planted or damaged where the sweeper writes or reads beside a sweep's main files: a
temporary file's name, a run's times, a study that is a FIFO, a corrupt record, a huge saved space
file, the record and key of a local Ray, a plot's name, a stray journal. Each is written past,
refused in one line, or read without blocking, never followed or waited on."""

from __future__ import annotations

import gzip
import os
import sqlite3
from pathlib import Path

import pytest

from core.errors import ConfigError
from core.files import write_atomic
from sweeper import orphans
from sweeper.curves import _read_record
from sweeper.fs import sqlite_immutable
from sweeper.space import SpaceError
from sweeper.space_file import load_saved_space
from sweeper.sweep_checks import space_digest
from trainables.run_dir import RunDir, check_run_files

from tests.conftest import ROOT
from tests.hostile import JOURNAL_MAGIC, kill_mid_write


@pytest.mark.parametrize("planted", ["fifo", "folder", "link"])
def test_a_thing_planted_at_the_temporary_name_is_written_past_never_into(tmp_path, planted):
    target, victim = tmp_path / "status.json", tmp_path / "victim"
    victim.write_text("precious")
    tmp = tmp_path / ".status.json.tmp"
    {"fifo": os.mkfifo, "folder": Path.mkdir, "link": lambda p: p.symlink_to(victim)}[planted](tmp)
    write_atomic(target, '{"state": "running"}')  # a FIFO opened for writing would block for ever
    assert target.read_text() == '{"state": "running"}' and victim.read_text() == "precious"


def test_a_run_s_times_that_are_no_file_are_unknown_and_a_resume_refuses_them(tmp_path):
    os.mkfifo(tmp_path / "times.json")
    assert RunDir(tmp_path).times() == {}  # read without blocking
    with pytest.raises(ConfigError, match="times.json: not a regular file"):
        check_run_files(tmp_path, "--resume")
    (tmp_path / "times.json").unlink()
    (tmp_path / "metrics.jsonl").mkdir()
    with pytest.raises(ConfigError, match="metrics.jsonl: a folder"):
        check_run_files(tmp_path, "--resume")


def test_a_study_that_is_a_fifo_is_one_line_not_a_wait(tmp_path):
    from sweeper.adapters.optuna_study import sweep_study, trial_points

    os.mkfifo(tmp_path / "optuna.db")
    for read in (lambda db: trial_points(db, "smoke"), lambda db: sweep_study(db, "smoke")):
        with pytest.raises(ConfigError, match="not a regular file"):
            read(tmp_path / "optuna.db")


def test_a_corrupt_compressed_record_is_one_line(tmp_path):
    data = bytearray(gzip.compress(b'{"runs": [' + b'{"params": {}, "reports": []},' * 200 + b'{"params": {}, "reports": []}]}'))
    data[20:60] = bytes(b ^ 0xFF for b in data[20:60])  # a damaged deflate stream (zlib.error), not a bad CRC
    (tmp_path / "r.json.gz").write_bytes(bytes(data))
    with pytest.raises(ConfigError, match="not a record of learning curves"):
        _read_record(tmp_path / "r.json.gz")


def test_a_saved_space_file_too_large_for_one_is_not_read_whole(tmp_path):
    huge = tmp_path / "space.yaml"
    with open(huge, "wb") as f:
        f.truncate(64 << 30)  # sparse: read whole, 64 GiB of memory
    assert space_digest(huge) is None
    assert space_digest(ROOT / "search_spaces" / "smoke.yaml") is not None


def test_a_saved_space_file_that_is_a_link_is_refused_not_quoted(tmp_path):
    secret = tmp_path / "netrc"
    secret.write_text("machine example.com login bob password hunter2\n")
    (tmp_path / "space.yaml").symlink_to(secret)
    with pytest.raises(SpaceError, match="a link") as refused:
        load_saved_space(tmp_path)
    assert "hunter2" not in str(refused.value)


def test_the_local_ray_record_and_signing_key_are_refused_when_no_files(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "state"))
    orphans.check_places(tmp_path)  # nothing there yet: nothing to refuse
    (tmp_path / "ray_processes.json").mkdir()
    with pytest.raises(ConfigError, match="record of the sweep's local Ray"):
        orphans.check_places(tmp_path)
    (tmp_path / "ray_processes.json").rmdir()
    orphans.key_path().parent.mkdir(parents=True)
    os.mkfifo(orphans.key_path())
    with pytest.raises(ConfigError, match="signing key"):
        orphans.check_places(tmp_path)
    with pytest.raises(ConfigError, match="signing key"):
        orphans.record(tmp_path)  # never opened, so never waited on


def test_a_link_planted_at_a_plot_s_name_is_replaced_not_written_through(tmp_path):
    from sweeper import plots

    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    (tmp_path / "lengths.png").symlink_to(victim)
    plots.trial_lengths({"acc_1x": 0.9, "acc_2x": 0.5}, 25, "t0000", tmp_path / "lengths.png")
    assert victim.read_text() == "precious"
    assert not (tmp_path / "lengths.png").is_symlink() and (tmp_path / "lengths.png").read_bytes()[:4] == b"\x89PNG"


def test_a_stray_journal_is_read_past_but_a_real_one_is_not(tmp_path):
    db = tmp_path / "optuna.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table t (x)")
    journal = tmp_path / "optuna.db-journal"
    journal.write_bytes(os.urandom(4096))  # no rollback journal: a read-only open would fail on it
    assert sqlite_immutable(db)
    journal.write_bytes(JOURNAL_MAGIC + os.urandom(4088))  # a killed writer's: refused, not skipped
    assert not sqlite_immutable(db)


@pytest.mark.parametrize("suffix, content, kind", [
    ("-journal", b"", "spent"), ("-journal", bytes(512), "spent"), ("-journal", JOURNAL_MAGIC + bytes(504), "log"),
    ("-journal", b"plain text, no journal", "foreign"), ("-journal", b"oops", "foreign"),  # hot to SQLite: byte 0 not 0
    ("-wal", b"", "spent"), ("-wal", b"\x37\x7f", "foreign"),
    ("-wal", b"\x37\x7f\x06\x82" + (3007000).to_bytes(4, "big") + bytes(24), "log"),
    ("-wal", b"\x37\x7f\x06\x82" + (1).to_bytes(4, "big") + bytes(24), "foreign"),  # a log's magic, no log's version
    ("-wal", b"plain text, no log", "foreign"), ("-wal", None, "foreign"), ("-journal", None, "foreign")])
def test_what_stands_beside_a_database_is_judged_once_for_every_reader(tmp_path, suffix, content, kind):
    from sweeper.fs import beside, foreign_beside, journal_left

    db = tmp_path / "optuna.db"
    with sqlite3.connect(db) as conn:
        conn.execute("create table t (x)")
    assert beside(db, suffix) == "none" and foreign_beside(db) is None
    name = tmp_path / f"optuna.db{suffix}"
    if content is None:
        os.mkfifo(name)
    else:
        name.write_bytes(content)
    assert beside(db, suffix) == kind
    assert (foreign_beside(db) == name) == (kind == "foreign")
    assert journal_left(db) == (suffix == "-journal" and kind == "log")
    if kind == "foreign" or (suffix == "-wal" and kind == "spent"):
        assert sqlite_immutable(db)  # nothing SQLite would read there: the database alone, nothing left beside it
    if kind == "foreign" and suffix == "-journal":  # a log beside it holds committed data: never skipped
        Path(f"{db}-wal").write_bytes(b"\x37\x7f\x06\x82" + (3007000).to_bytes(4, "big") + bytes(24))
        assert not sqlite_immutable(db)


@pytest.mark.parametrize("report", [{"step": 1e300, "acc_3x": 0.5}, {"step": 60, "acc_3x": 1e308},
                                    {"step": 60.5, "acc_3x": 0.5}])
def test_a_recorded_curve_with_numbers_no_run_makes_is_no_curve(report):
    from sweeper.curves import _complete
    from sweeper.space_file import load_space

    spec = load_space(ROOT / "search_spaces" / "smoke.yaml", n_samples=0)
    assert _complete([{"step": 10, "acc_3x": 0.1}, {"step": 60, "acc_3x": 0.2}], spec)  # a sound one is
    assert not _complete([{"step": 10, "acc_3x": 0.1}, report], spec)



def test_a_store_a_writer_was_killed_in_is_rolled_back_by_a_launch_s_check_not_refused(tmp_path):
    from sweeper.tracking_uri import check_sqlite_file

    store = tmp_path / "mlflow.db"
    with sqlite3.connect(store) as db:
        db.execute("create table kept (x)")
    kill_mid_write(store)
    assert not sqlite_immutable(store)
    check_sqlite_file(store, "sqlite:///mlflow.db", "--tracking-uri")  # refused before, with "move mlflow.db away"
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        assert [name for (name,) in db.execute("select name from sqlite_master")] == ["kept"]


def test_a_study_of_more_trials_than_a_replay_reads_is_refused_before_they_are_read(tmp_path):
    import optuna

    from sweeper.adapters.optuna_study import trial_points

    study = optuna.create_study(study_name="s", storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    study.set_user_attr("sweeper.version", 1)
    for x in range(4):
        study.enqueue_trial({"x": float(x)})
        study.optimize(lambda t: t.suggest_float("x", 0, 9), n_trials=1)
    assert [p for _, p in trial_points(tmp_path / "optuna.db", "s", limit=4)] == [{"x": float(x)} for x in range(4)]
    with pytest.raises(ConfigError, match="4 trials, more than the 3 a replay reads"):
        trial_points(tmp_path / "optuna.db", "s", limit=3)
    with pytest.raises(ConfigError) as refused:  # the folder renamed, or another sweep's study copied in
        trial_points(tmp_path / "optuna.db", "other", limit=4)
    assert str(refused.value) == (f"{tmp_path / 'optuna.db'}: holds sweep `s`'s study, not `other`'s; a sweep's folder "
                                  "keeps its sweep's name (name it so again)")


def test_importances_of_trials_of_one_value_are_none_and_say_nothing_on_stderr(tmp_path, recwarn):
    import optuna

    from sweeper.adapters.optuna_search import param_importances

    for name, value in (("tie", lambda x, y: 0.5), ("spread", lambda x, y: x + 0.1 * y)):
        study = optuna.create_study(study_name=name, storage=f"sqlite:///{tmp_path / (name + '.db')}")
        study.optimize(lambda t: value(t.suggest_float("x", 0, 1), t.suggest_float("y", 0, 1)), n_trials=8)
    assert param_importances(tmp_path / "tie.db", "tie") == ([], 8)
    rows, n = param_importances(tmp_path / "spread.db", "spread")
    assert n == 8 and rows[0].startswith("| `x` |"), rows  # x moves the value ten times as much as y
    assert not [w for w in recwarn if issubclass(w.category, UserWarning)], [str(w.message) for w in recwarn]
