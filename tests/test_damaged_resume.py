"""A resume of a sweep folder damaged where the sweeper reads or writes it (a view or a trial's
folder replaced by something else, a study row no sweeper wrote, a trial's checkpoint taken under
another config) is one line before Ray starts,
and the storage is left byte for byte as it was: no lock file where there was none."""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from tests.conftest import ray_left_running, sweeper_cmd, sweeper_env, tiny_space
from tests.hostile import kill_mid_write, sweeper  # refusals: forked from a warm CLI (tests/forked_cli.py)

pytestmark = pytest.mark.integration
ENV = sweeper_env()

SPACE = tiny_space("dmg", switch_high=40, switch_step=20, samples=2, max_steps=40, eval_every=20,
                   scheduler="{type: asha, grace_period: 20, reduction_factor: 2}", seed=5)


def _sql(statement: str):
    def damage(sweep: Path) -> None:
        with sqlite3.connect(sweep / "optuna.db") as db:
            db.execute(statement)
    return damage


def _replace_with_folder(name: str):
    def damage(sweep: Path) -> None:
        (sweep / name).unlink()
        (sweep / name).mkdir()
    return damage


def _replace_with_file(name: str):
    def damage(sweep: Path) -> None:
        shutil.rmtree(sweep / name)
        (sweep / name).write_text("not a folder\n")
    return damage


def _running_with(change):
    """Trial 0 left running (an interrupted sweep continues it) and its checkpoint then changed."""
    def damage(sweep: Path) -> None:
        _sql("update trials set state = 'RUNNING', datetime_complete = NULL where number = 0")(sweep)
        change(sweep / "trials" / "t0000" / "checkpoint" / "config.yaml")
    return damage


def _dangling(saved: Path) -> None:
    link = saved.parent.parent / "checkpoint"
    link.unlink()
    link.symlink_to("checkpoint-999")


def _another_seed(saved: Path) -> None:
    cfg = yaml.safe_load(saved.read_text())
    saved.write_text(yaml.safe_dump({**cfg, "seed": cfg["seed"] + 1}, sort_keys=False))


def _in_run_folder(name: str, make):
    """The trial's own file `name` (beside its checkpoint link) replaced by what `make` makes there."""
    def change(saved: Path) -> None:
        path = saved.parent.parent / name
        path.unlink(missing_ok=True)
        make(path)
    return change


def _trial_0_running_with(change):
    """Trial 0 left running, and `change(t0000, t0001)` made to the two trials' folders."""
    def damage(sweep: Path) -> None:
        _sql("update trials set state = 'RUNNING', datetime_complete = NULL where number = 0")(sweep)
        change(sweep / "trials" / "t0000", sweep / "trials" / "t0001")
    return damage


def _state_of_the_other_trial(t0: Path, t1: Path) -> None:
    # t0001's weights, optimizer and switch under t0000's own config.yaml: only the report it was taken with tells
    shutil.copy((t1 / "checkpoint").resolve() / "state.pt", (t0 / "checkpoint").resolve() / "state.pt")


def _reports_linked_to_the_other_trial_s(t0: Path, t1: Path) -> None:
    (t0 / "metrics.jsonl").unlink()
    os.link(t1 / "metrics.jsonl", t0 / "metrics.jsonl")  # both trials would append to one file


def _metric_renamed(trial: str, name: str):
    def damage(sweep: Path) -> None:
        if trial == "t0000":
            _sql("update trials set state = 'RUNNING', datetime_complete = NULL where number = 0")(sweep)
        reports = sweep / "trials" / trial / "metrics.jsonl"
        reports.write_text(reports.read_text().replace('"loss"', f'"{name}"', 1))
    return damage


def _report_past_the_budget(sweep: Path) -> None:
    reports = sweep / "trials" / "t0001" / "metrics.jsonl"
    last = json.loads(reports.read_text().splitlines()[-1])
    with reports.open("a") as f:  # a trial's newest report at a step it never trained, its best value
        f.write(json.dumps({**last, "step": 400, "acc_3x": 1.0}) + "\n")


def _ray_record_a_folder(sweep: Path) -> None:
    (sweep / "ray_processes.json").unlink(missing_ok=True)
    (sweep / "ray_processes.json").mkdir()


DAMAGES = {
    # name: (damage, text the line must contain)
    "status_json_a_folder": (_replace_with_folder("status.json"), "status.json: a folder, not the sweep's view"),
    "summary_json_a_folder": (_replace_with_folder("summary.json"), "summary.json: a folder, not the sweep's view"),
    "a_trial_folder_a_file": (_replace_with_file("trials/t0000"), "t0000: a file, not the trial's folder"),
    "the_trials_folder_a_file": (_replace_with_file("trials"), "trials: a file, not the folder of the sweep's trials"),
    "elapsed_time_a_word": (_sql("update study_user_attributes set value_json = '\"abc\"' where key = 'sweeper.elapsed_s'"),
                            "study attribute sweeper.elapsed_s is 'abc', not a number"),
    "a_rung_value_a_word": (_sql("insert or replace into trial_user_attributes (trial_id, key, value_json) "
                                 "values (1, 'rung.20', '\"x\"')"), "attribute rung.20 is 'x', not a number"),
    "one_trial_number_twice": (_sql("update trials set number = 0 where trial_id = 2"), "a number given twice"),
    "a_checkpoint_of_another_run": (_running_with(_another_seed), "seed: the checkpoint was trained with"),
    "a_checkpoint_without_its_config": (_running_with(Path.unlink), "config.yaml: no such file"),
    "a_checkpoint_link_to_nothing": (_running_with(_dangling), "checkpoint: names no checkpoint folder"),
    # a FIFO would block the trial, a folder fail it inside Ray: refused before Ray
    "its_times_a_fifo": (_running_with(_in_run_folder("times.json", os.mkfifo)), "times.json: not a regular file"),
    "its_reports_a_folder": (_running_with(_in_run_folder("metrics.jsonl", Path.mkdir)), "metrics.jsonl: a folder"),
    "the_saved_space_emptied": (lambda sweep: (sweep / "space.yaml").write_text(""), "space.yaml: empty: the saved copy"),
    "the_ray_record_a_folder": (_ray_record_a_folder, "not a file this sweeper wrote (the record of the sweep's local Ray)"),
    "a_checkpoint_state_of_another_trial": (_trial_0_running_with(_state_of_the_other_trial), "another run's"),
    "its_reports_hard_linked_with_another_trial_s": (_trial_0_running_with(_reports_linked_to_the_other_trial_s),
                                                     "metrics.jsonl: hard-linked with another file (2 links)"),
    # the resume logs every trial's reports to MLflow: a name it refuses failed the store, after writing to it
    "a_metric_name_mlflow_refuses_in_a_finished_trial": (_metric_renamed("t0001", "lo*ss"),
                                                         "t0001/metrics.jsonl line 1: lo*ss: not a metric name MLflow takes"),
    "a_metric_name_too_long_in_a_running_trial": (_metric_renamed("t0000", "l" * 600),
                                                  "t0000/metrics.jsonl line 1: " + "l" * 37 + "...: a metric name of 600 characters"),
    # the study's own values, edited: each was taken (a second parent run, a best no trial reached,
    # a traceback) or refused only after the sweep's files were written
    "the_tracking_uri_attribute_a_number": (_sql("update study_user_attributes set value_json = '5' "
                                                 "where key = 'sweeper.tracking_uri'"),
                                            "study attribute sweeper.tracking_uri is 5, not a tracking URI"),
    "the_parent_run_s_uid_not_a_uid": (_sql("update study_user_attributes set value_json = '\"nope\"' "
                                            "where key = 'sweeper.mlflow_uid'"), "is 'nope', not an MLflow run's uid"),
    "a_trial_status_no_end": (_sql("update trial_user_attributes set value_json = '\"weird\"' where key = 'status'"),
                              "attribute status is 'weird', not how a trial ends"),
    "a_rung_value_no_report_made": (_sql("insert or replace into trial_user_attributes (trial_id, key, value_json) "
                                         "values (1, 'rung.20', '7.0')"), "a value the trial never reported at or past step 20"),
    "a_rung_value_infinite": (_sql("insert or replace into trial_user_attributes (trial_id, key, value_json) "
                                   "values (1, 'rung.20', 'Infinity')"), "no value a trial reports"),
    "a_parameter_off_its_step": (_sql("update trial_params set param_value = 30 where trial_id = 1"),
                                 "dat.switch_step is 30, not a value the space draws"),
    "a_parameter_of_another_distribution": (_sql("update trial_params set distribution_json = '{\"name\": \"IntDistribution\", "
                                                 "\"attributes\": {\"log\": false, \"step\": 10, \"low\": 0, \"high\": 80}}' "
                                                 "where trial_id = 1"), "dat.switch_step was drawn from"),
    "the_study_s_direction_turned": (_sql("update study_directions set direction = 'MINIMIZE'"),
                                     "the study minimizes, the space's mode is max"),
    # SQLite deletes a -wal or -journal it did not write on the resume's first write (and here kept the
    # resumed study in a -wal beside a database holding the interrupted one)
    "a_stray_file_beside_the_study": (lambda sweep: (sweep / "optuna.db-wal").write_text("precious notes\n"),
                                      "optuna.db-wal: not a file SQLite wrote beside the sweep's study"),
    "a_report_past_the_budget_in_a_finished_trial": (_report_past_the_budget,
                                                     "t0001/metrics.jsonl line 3: step: 400 is past the sweep's budget of 40"),
}


def _files(top: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in top.rglob("*") if p.is_file()}


def _finished_sweep(tmp_path: Path) -> Path:
    """A sweep run to its end in tmp_path/sweeps; its space file."""
    space = tmp_path / "dmg.yaml"
    space.write_text(SPACE)
    r = subprocess.run(sweeper_cmd("launch", space, "--progress", "none"), cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    return space


# one case of each class under `make test`; the rest of the matrix under `make test-long`
EACH_CLASS = ("status_json_a_folder", "a_trial_folder_a_file", "elapsed_time_a_word", "one_trial_number_twice",
              "a_checkpoint_of_another_run", "its_reports_a_folder", "the_saved_space_emptied",
              "the_ray_record_a_folder", "its_reports_hard_linked_with_another_trial_s",
              "a_metric_name_mlflow_refuses_in_a_finished_trial", "a_rung_value_no_report_made",
              "the_study_s_direction_turned", "a_report_past_the_budget_in_a_finished_trial",
              "a_stray_file_beside_the_study")


def _refused_as_it_was(tmp_path: Path, space: Path, made: Path, names) -> None:
    """Each damage of `names`, made to a copy of the finished sweep's storage, is refused by a
    relaunch in one line, the copy left byte for byte as it was."""
    for name in names:
        damage, must = DAMAGES[name]
        storage = tmp_path / name
        shutil.copytree(made, storage, symlinks=True)
        damage(storage / "dmg")
        (storage / ".dmg.lock").unlink()  # a copy without its lock file: the refusal must not make one
        before = _files(storage)
        r = sweeper("launch", space, "--storage", storage, "--progress", "none", cwd=tmp_path, timeout=300)
        lines = r.stderr.strip().splitlines()
        assert r.returncode == 2 and len(lines) == 1 and must in lines[0], (name, r.stderr[-2000:])
        assert "Traceback" not in r.stderr and r.stdout == "", (name, r.stdout[-500:])
        assert _files(storage) == before, f"{name}: the refused resume changed the storage"
        assert not (storage / ".dmg.lock").exists(), f"{name}: the refused resume made a lock file"


@pytest.mark.long
def test_every_damage_of_the_matrix_is_refused_in_one_line_and_left_as_it_was(tmp_path):
    space = _finished_sweep(tmp_path)
    _refused_as_it_was(tmp_path, space, tmp_path / "sweeps", [name for name in DAMAGES if name not in EACH_CLASS])


def test_a_damaged_sweep_folder_is_refused_in_one_line_and_left_as_it_was(tmp_path):
    assert set(EACH_CLASS) <= set(DAMAGES)
    space = _finished_sweep(tmp_path)
    made = tmp_path / "sweeps"
    assert (made / "dmg" / "status.json").is_file() and (made / "dmg" / "trials" / "t0000").is_dir()
    assert set(_sql_rows(made / "dmg")) >= {"sweeper.elapsed_s"}
    _refused_as_it_was(tmp_path, space, made, EACH_CLASS)

    # the space file and the sweep's copy of it, both edited to another valid space: not taken for the sweep's
    edited = tmp_path / "edited.yaml"
    edited.write_text(SPACE.replace("high: 40, step: 20", "high: 40, step: 10"))
    storage = tmp_path / "both_space_files_edited"
    shutil.copytree(made, storage, symlinks=True)
    shutil.copy(edited, storage / "dmg" / "space.yaml")
    before = _files(storage)
    r = sweeper("launch", edited, "--storage", storage, "--progress", "none", cwd=tmp_path, timeout=300)
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "not the space the sweep began with" in lines[0], r.stderr
    assert _files(storage) == before

    # the view rebuilt from that folder shows the trial where it trained to: not the report past the budget
    # and updated when the sweep last wrote, an hour ago here, not when it was rebuilt ("0s ago")
    storage = tmp_path / "a_report_past_the_budget_in_a_finished_trial"
    (storage / "dmg" / "status.json").unlink()
    an_hour_ago = time.time() - 3600
    for path in (storage / "dmg").rglob("*"):
        os.utime(path, (an_hour_ago, an_hour_ago), follow_symlinks=False)
    r = sweeper("status", "dmg", "--storage", storage, cwd=tmp_path, timeout=300)
    row = next(line for line in r.stdout.splitlines() if line.lstrip().startswith("t0001"))
    assert r.returncode == 0 and " 40 " in f"{row} " and "400" not in r.stdout, r.stdout + r.stderr
    age = int(r.stdout.split("updated ", 1)[1].split("s ago", 1)[0])
    assert 3590 <= age < 4000, r.stdout

    # and a view rebuilt from a study holding a trial number twice says so, as the resume does
    storage = tmp_path / "one_trial_number_twice"
    (storage / "dmg" / "status.json").unlink()
    r = sweeper("status", "dmg", "--storage", storage, cwd=tmp_path, timeout=300)
    assert r.returncode == 2 and "a number given twice" in r.stderr and r.stdout == "", r.stdout + r.stderr


STORE_LOCK_DAMAGES = {"a_fifo": os.mkfifo, "a_folder": Path.mkdir,
                      "a_dangling_link": lambda lock: lock.symlink_to(lock.parent / "nowhere")}


def test_a_bad_store_lock_is_refused_before_a_restart_removes_the_sweep(tmp_path):
    # the tracking store's lock file, damaged: refused before --restart removes anything, or a resume changes anything
    space = _finished_sweep(tmp_path)
    lock = tmp_path / "mlflow.db.lock"
    for name, damage in STORE_LOCK_DAMAGES.items():
        for restart in ((), ("--restart",)):
            lock.rmdir() if lock.is_dir() and not lock.is_symlink() else lock.unlink(missing_ok=True)
            damage(lock)
            before = _files(tmp_path)
            r = sweeper("launch", space, "--progress", "none", *restart, cwd=tmp_path, timeout=300)
            lines = r.stderr.strip().splitlines()
            case = (name, restart, r.stderr[-2000:])
            assert r.returncode == 2 and len(lines) == 1 and "mlflow.db.lock" in lines[0], case
            assert _files(tmp_path) == before, f"{case}: the refused launch changed the storage"
            assert (tmp_path / "sweeps" / "dmg" / "trials" / "t0000").is_dir(), case


def test_a_study_a_driver_was_killed_writing_is_said_by_reads_and_rolled_back_by_the_launch(tmp_path):
    space = _finished_sweep(tmp_path)
    kill_mid_write(tmp_path / "sweeps" / "dmg" / "optuna.db")
    before = _files(tmp_path / "sweeps")
    read = subprocess.run(sweeper_cmd("report", "dmg"), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert read.returncode == 2 and "half-done" in read.stderr and "move it away" not in read.stderr, read.stderr
    assert _files(tmp_path / "sweeps") == before  # a read never writes, not even a rollback
    again = subprocess.run(sweeper_cmd("launch", space, "--progress", "none"), cwd=tmp_path, env=ENV,
                           capture_output=True, text=True, timeout=600)
    assert again.returncode == 0 and "rolled back" in again.stderr + again.stdout, again.stderr[-3000:]
    assert "half_done" not in _tables(tmp_path / "sweeps" / "dmg")


def _tables(sweep: Path) -> list[str]:
    with sqlite3.connect(f"file:{sweep / 'optuna.db'}?mode=ro", uri=True) as db:
        return [name for (name,) in db.execute("select name from sqlite_master where type = 'table'")]


def _sql_rows(sweep: Path) -> list[str]:
    with sqlite3.connect(f"file:{sweep / 'optuna.db'}?mode=ro", uri=True) as db:
        return [key for (key,) in db.execute("select key from study_user_attributes")]


def test_a_metric_name_mlflow_refuses_in_an_interrupted_sweep_is_one_line_and_the_store_untouched(tmp_path):
    # a killed driver leaves reports MLflow may not have heard of: the resume logs them from the trials' folders,
    # where a name MLflow refuses failed the store ("the tracking store failed") after the resume had written to
    # it, or, when the report was logged already, was taken silently
    space = tmp_path / "dmg.yaml"
    space.write_text(SPACE)
    cmd = sweeper_cmd("launch", space, "--progress", "none")
    killed = subprocess.run(cmd, cwd=tmp_path, env={**ENV, "SWEEPER_FAULT": "report:3:KILL"}, capture_output=True,
                            text=True, timeout=600)
    assert killed.returncode == -signal.SIGKILL, killed.stderr[-2000:]
    deadline = time.monotonic() + 120  # the killed driver's trials train on a moment, writing their folders
    while any("Agent" not in name for name in ray_left_running(tmp_path / "sweeps" / "dmg")) and time.monotonic() < deadline:
        time.sleep(1)
    from sweeper.fs import roll_back
    from sweeper.orphans import end_orphans

    end_orphans(tmp_path / "sweeps" / "dmg")  # as the resume would: no trial of the killed driver writes after the snapshot
    for db in (tmp_path / "mlflow.db", tmp_path / "sweeps" / "dmg" / "optuna.db"):
        roll_back(db)  # as the resume's checks would: a write the kill cut short (its -journal) is not the refusal's
    reports = min((tmp_path / "sweeps" / "dmg" / "trials").glob("t*/metrics.jsonl"))  # the trial that reported first
    sound = reports.read_text()
    try:
        reports.write_text(sound.replace('"loss"', '"lo*ss"', 1))
        before = _files(tmp_path)
        r = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
        lines = r.stderr.strip().splitlines()
        must = f"{reports.parent.name}/metrics.jsonl line 1: lo*ss: not a metric name MLflow takes"
        assert r.returncode == 2 and len(lines) == 1 and must in lines[0], r.stderr[-2000:]
        assert _files(tmp_path) == before, "the refused resume changed the sweep or the tracking store"
    finally:  # mended: the sweep resumes, and ends what the killed driver's Ray left running
        reports.write_text(sound)
        again = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)
    assert again.returncode == 0, again.stderr[-3000:]
    assert ray_left_running(tmp_path / "sweeps" / "dmg") == []


@pytest.mark.parametrize("value, expect", [(10**400, "no value a trial reports"), (float("inf"), "no value a trial reports"),
                                           (7.0, "never reported at or past step 20"), (0.5, None), (float("nan"), None)])
def test_a_rung_value_no_trial_reports_is_named_never_a_traceback(value, expect):
    # a whole number past a float raised OverflowError in math.isnan
    from types import SimpleNamespace

    from sweeper.adapters.optuna_checks import _rung_problem

    problem = _rung_problem(SimpleNamespace(intermediate_values={20: 0.5, 40: 0.6}), 20, value)
    assert problem == expect if expect is None else expect in problem
