"""Damaged views, long names, the service's folder and raw requests: each is one short line (exit 2,
nothing written), never a traceback or an unbounded line."""

from __future__ import annotations

import fcntl
import os
import json
import contextlib
import socket
import subprocess
import sys
import threading

import pytest

from sweeper.service_folder import LOCK as SERVICE_LOCK
from sweeper.service_link import Messages
from tests.hostile import ROOT, assert_refused, module, snapshot, sweeper

HEAD = {"name": "s", "metric": "acc_3x", "mode": "max", "state": "finished", "updated": 1.0e9, "num_samples": 1,
        "trials": [{"trial_id": "t0000", "params": {"seed": 0}, "status": "completed", "step": 10,
                    "metrics": {"step": 10, "acc_3x": 0.5}, "path": ""}]}


def _status(tmp_path, **changes) -> None:
    folder = tmp_path / "sweeps" / "s"
    folder.mkdir(parents=True, exist_ok=True)
    data = {k: v for k, v in {**HEAD, **changes}.items() if v is not None}
    (folder / "status.json").write_text(json.dumps(data))


@pytest.mark.parametrize("verb", ["status", "report", "dashboard"])
@pytest.mark.parametrize("length", [300, 5000])
def test_a_name_too_long_for_the_file_system_is_one_line(tmp_path, verb, length):
    before = snapshot(tmp_path)
    assert_refused(sweeper(verb, "a" * length, cwd=tmp_path), "not a sweep's name or folder", root=tmp_path, before=before)


def test_markdown_to_stdout_is_one_line_not_a_file_named_dash(tmp_path):
    before = snapshot(tmp_path)  # it wrote a file named `-`
    assert_refused(sweeper("report", "s", "--markdown", "-", cwd=tmp_path), "--markdown -", "stdout", root=tmp_path, before=before)


@pytest.mark.parametrize("markdown", ["x" * 300 + ".md", "adir/" + "x" * 300 + "/a.md"])
def test_a_markdown_file_name_too_long_for_the_file_system_is_one_line(tmp_path, markdown):
    before = snapshot(tmp_path)
    assert_refused(sweeper("report", "s", "--markdown", markdown, cwd=tmp_path), "--markdown", root=tmp_path, before=before)


@pytest.mark.parametrize("args,env,named", [
    (["ui"], {}, "the default tracking URI sqlite:///"),
    (["ui", "smoke"], {}, "the default tracking URI sqlite:///"),
    (["ui", "--tracking-uri", "sqlite:///store.db"], {}, "--tracking-uri sqlite:///"),
    (["ui"], {"MLFLOW_TRACKING_URI": "sqlite:///elsewhere.db"}, "$MLFLOW_TRACKING_URI sqlite:///"),
])
def test_the_ui_of_a_store_that_is_not_there_yet_is_one_line_and_makes_none(tmp_path, args, env, named):
    """MLflow's server would create the database, its tables and a folder for it in the user's folder."""
    before = snapshot(tmp_path)
    assert_refused(sweeper(*args, cwd=tmp_path, env=env, timeout=120), named, "no tracking store there yet",
                   root=tmp_path, before=before)


@pytest.mark.parametrize("damage,named", [("empty", "an empty file, not an MLflow store"),
                                          ("-journal", "mlflow.db-journal: not a file SQLite wrote"),
                                          ("-wal", "mlflow.db-wal: not a file SQLite wrote")])
def test_the_ui_of_an_empty_store_or_one_with_a_stray_file_beside_it_is_one_line_and_changes_neither(tmp_path, damage, named):
    """MLflow's server wrote its schema into an empty file, and deleted a stray -journal or -wal as SQLite's."""
    import sqlite3

    if damage == "empty":
        (tmp_path / "mlflow.db").write_bytes(b"")
    else:
        with sqlite3.connect(tmp_path / "mlflow.db") as db:
            db.execute("create table t (x)")
        (tmp_path / f"mlflow.db{damage}").write_text("someone's notes\n")
    before = snapshot(tmp_path)
    assert_refused(sweeper("ui", cwd=tmp_path, timeout=120), named, root=tmp_path, before=before)


def test_a_launch_beside_a_stray_file_under_the_store_s_journal_name_is_one_line_and_writes_nothing(tmp_path):
    """MLflow's first write to the store would delete it as SQLite's own."""
    (tmp_path / "mlflow.db-journal").write_text("someone's notes\n")
    before = snapshot(tmp_path)
    assert_refused(sweeper("launch", str(ROOT / "search_spaces" / "smoke.yaml"), "--in-process", cwd=tmp_path, timeout=120),
                   "mlflow.db-journal: not a file SQLite wrote beside the tracking store", root=tmp_path, before=before)


@pytest.mark.parametrize("host", ["", " ", "[]"])
def test_an_empty_host_is_one_line_not_every_interface(tmp_path, host):
    before = snapshot(tmp_path)
    assert_refused(sweeper("ui", "--host", host, cwd=tmp_path), "--host", "empty", root=tmp_path, before=before)


def test_a_report_line_or_times_file_nested_beyond_the_parser_s_stack_is_skipped_or_one_line(tmp_path):
    from core.errors import ConfigError
    from trainables.run_dir import RunDir, strict_reports

    run = tmp_path / "t0000"
    run.mkdir()
    deep = "[" * 100_000
    (run / "metrics.jsonl").write_text(json.dumps({"step": 10, "acc_3x": 0.5}) + "\n" + deep + "\n")
    (run / "times.json").write_text(deep)
    assert [r["step"] for r in RunDir(run).reports()] == [10]  # the lenient reader skips it, as any non-report
    assert RunDir(run).times() == {}
    with pytest.raises(ConfigError, match="line 2: not a JSON report"):
        strict_reports((run / "metrics.jsonl").read_bytes(), "metrics.jsonl")


@pytest.mark.parametrize("changes,named", [
    ({"state": None}, "state: missing"),
    ({"updated": "yesterday"}, "updated: must be"),
    ({"state": "dancing"}, "state/mode"),
    ({"trials": [{**HEAD["trials"][0], "metrics": {"acc_3x": "high"}}]}, "trial field metrics"),
    ({"trials": [{**HEAD["trials"][0], "step": "ten"}]}, "trial field step"),
    ({"trials": ["t0000"]}, "a trial must be a mapping"),
    # a driver of the wrong kind was read as one on another host, or pid true as pid 1: "running"
    ({"state": "running", "driver": "junk"}, "driver: must be a mapping"),
    ({"state": "running", "driver": {"host": ["x"], "pid": -5, "started": "abc"}}, "driver: must be a mapping"),
    ({"state": "running", "driver": {"host": "vm", "pid": True, "started": None}}, "driver.pid: must be a process id"),
    ({"state": "running", "driver": {"host": "vm", "pid": 7, "started": "abc"}}, "driver.started: must be a time"),
    # the best shown as given: a step "soon", a trial not in the file, a step past the trial's, 1e300 of a float
    ({"best": {"trial_id": "t0000", "step": "soon", "value": 0.07}}, "best.step: must be a step t0000 reached"),
    ({"best": {"trial_id": "t0099", "step": 10, "value": 0.07}}, "best.trial_id: 't0099' is no trial of the file"),
    ({"best": {"trial_id": [1, {"a": 2}], "step": 10, "value": 0.07}}, "best.trial_id"),
    ({"best": {"trial_id": "t0000", "step": 400, "value": 0.07}}, "(0 to 10), got 400"),
    ({"best": [0.5]}, "best: must be a mapping"),
])
def test_a_status_file_with_a_field_missing_or_of_the_wrong_kind_is_one_line(tmp_path, changes, named):
    _status(tmp_path, **changes)
    before = snapshot(tmp_path)
    assert_refused(sweeper("status", "s", cwd=tmp_path), "not a sweep status file", named, root=tmp_path, before=before)


def test_a_key_given_twice_in_a_status_file_or_a_report_is_not_read_as_its_last(tmp_path):
    """JSON keeps a key's last value: a finished sweep was shown as interrupted, a report's second
    `acc_3x` as the trial's value."""
    from core.errors import ConfigError
    from trainables.run_dir import RunDir, strict_reports

    _status(tmp_path)
    path = tmp_path / "sweeps" / "s" / "status.json"
    path.write_text(path.read_text().replace('"state": "finished"', '"state": "finished", "state": "running"'))
    before = snapshot(tmp_path)
    assert_refused(sweeper("status", "s", cwd=tmp_path), 'the key "state" is given twice', root=tmp_path, before=before)
    run = tmp_path / "t0000"
    run.mkdir()
    (run / "metrics.jsonl").write_text('{"step": 10, "acc_3x": 0.05}\n{"step": 20, "acc_3x": 0.06, "acc_3x": 0.95}\n')
    assert [r["acc_3x"] for r in RunDir(run).reports()] == [0.05]  # the lenient reader skips it, as any non-report
    with pytest.raises(ConfigError, match="line 2: .*given twice"):
        strict_reports((run / "metrics.jsonl").read_bytes(), "metrics.jsonl")


def test_a_huge_trial_id_or_parameter_leaves_every_line_bounded(tmp_path):
    trial = {**HEAD["trials"][0], "trial_id": "t" * 10_000_000, "params": {"p" * 5000: "v" * 5000}}
    _status(tmp_path, trials=[trial])
    r = sweeper("status", "s", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    assert max(len(line) for line in r.stdout.splitlines()) < 400, max(len(line) for line in r.stdout.splitlines())


def test_a_status_file_that_is_a_dangling_link_or_holds_an_absurd_count_is_one_line(tmp_path):
    _status(tmp_path, num_samples=10**100)
    r = sweeper("status", "s", cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and r.stderr.count("\n") == 1 and "num_samples" in r.stderr, r.stderr
    folder = tmp_path / "sweeps" / "s"
    (folder / "status.json").unlink()
    (folder / "optuna.db").write_bytes(b"")  # a study and a space there: `status` would rebuild the view
    (folder / "space.yaml").write_text((ROOT / "search_spaces" / "smoke.yaml").read_text())
    (folder / "status.json").symlink_to(tmp_path / "elsewhere.json")
    r = sweeper("status", "s", cwd=tmp_path, timeout=120)
    assert r.returncode == 2 and "a link" in r.stderr and not (tmp_path / "elsewhere.json").exists(), r.stderr


def test_a_tracking_store_that_is_a_fifo_is_one_line_not_a_hang(tmp_path):
    os.mkfifo(tmp_path / "m.db")
    before = snapshot(tmp_path)
    r = sweeper("launch", ROOT / "search_spaces" / "smoke.yaml", "--tracking-uri", f"sqlite:///{tmp_path / 'm.db'}",
                cwd=tmp_path, timeout=120)
    assert_refused(r, "not a regular file", root=tmp_path, before=before)


@pytest.mark.parametrize("value", [10**400, float("nan"), "0.9", [1]])
def test_a_best_or_speed_that_is_no_finite_number_is_left_out_not_a_traceback(tmp_path, value):
    _status(tmp_path, best={"value": value, "step": 10, "trial_id": "t0000"}, trial_speed=value, state="running")
    for args in (("status", "s"), ("status",)):
        r = sweeper(*args, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(tmp_path / "no-service")}, timeout=120)
        assert "Traceback" not in r.stderr and r.returncode in (0, 1), r.stderr[-2000:]
        assert "none judged yet (t0000 leads with 0.500" in r.stdout, r.stdout  # the value is not taken for a best


@pytest.mark.parametrize("speed", [1e-308, 1e308])
def test_a_speed_no_trial_trains_at_gives_no_eta_past_a_clock_or_a_line_of_digits(tmp_path, speed):
    # 1e-308 steps/s made an infinite ETA (an OverflowError traceback); 1e308 a 309-digit speed
    trial = {**HEAD["trials"][0], "status": "running", "metrics": {"step": 10, "acc_3x": 0.5, "steps_per_s": speed}}
    _status(tmp_path, trial_speed=speed, state="running", trials=[trial])
    (tmp_path / "sweeps" / "s" / "space.yaml").write_text((ROOT / "search_spaces" / "smoke.yaml").read_text())
    r = sweeper("status", "s", cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(tmp_path / "no-service")}, timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    progress = next(line for line in r.stdout.splitlines() if line.startswith("progress: "))
    assert "steps/s" not in progress and progress.endswith("ETA -"), progress
    assert max(len(line) for line in r.stdout.splitlines()) < 300


@pytest.mark.parametrize("field", ["started", "launched", "elapsed_before_s"])
def test_a_watched_time_past_a_float_is_unknown_not_a_traceback(tmp_path, field):
    _status(tmp_path, **{"started": 1.0e9, "launched": 1.0e9, "elapsed_before_s": 0.0, field: 10**400})
    (tmp_path / "sweeps" / "s" / "space.yaml").write_text((ROOT / "search_spaces" / "smoke.yaml").read_text())
    r = sweeper("status", "s", "--watch", cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(tmp_path / "no-service")},
                timeout=120)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert r.stdout.startswith("[smoke ") and "10 steps done" in r.stdout, r.stdout[-2000:]  # the watch's line, drawn


def test_a_trial_step_past_any_budget_is_one_line(tmp_path):
    _status(tmp_path, trials=[{**HEAD["trials"][0], "step": 10**400}])
    before = snapshot(tmp_path)
    assert_refused(sweeper("status", "s", cwd=tmp_path), "not a sweep status file", "trial field step", root=tmp_path,
                   before=before)


@pytest.mark.parametrize("verb", [("serve",), ("launch", str(ROOT / "search_spaces" / "smoke.yaml"))])
@pytest.mark.parametrize("where", ["a file", "under a file"])
def test_a_service_folder_that_is_a_file_or_under_one_is_one_line(tmp_path, where, verb):
    """Said by the service and by a launch alike: a launch does not quietly run without the service."""
    (tmp_path / "f").write_text("not a folder")
    target = tmp_path / "f" if where == "a file" else tmp_path / "f" / "service"
    before = snapshot(tmp_path)
    r = sweeper(*verb, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(target)}, timeout=120)
    assert_refused(r, "cannot be the service's folder", root=tmp_path, before=before)


def test_a_service_folder_whose_socket_path_is_too_long_is_refused_before_it_is_made(tmp_path):
    target = tmp_path / ("d" * 120)
    r = sweeper("serve", cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(target)}, timeout=120)
    assert_refused(r, "a socket path longer than")
    assert not target.exists()


def test_a_second_service_beside_a_cut_short_state_file_is_one_line(tmp_path):
    """Another service holds the lock (here: this test), its service.json cut short mid-write."""
    folder = tmp_path / "sv"
    folder.mkdir(mode=0o700)
    (folder / "service.json").write_text('{"pid": 12')
    with open(folder / SERVICE_LOCK, "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX | fcntl.LOCK_NB)
        r = sweeper("serve", cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(folder)}, timeout=120)
    assert_refused(r, "a sweep service already runs for this user (pid ?")


def test_a_request_nested_beyond_the_parser_s_stack_is_one_line():
    ours, theirs = socket.socketpair()

    def send() -> None:  # from a thread: the line is larger than the socket's buffer
        theirs.sendall(b"[" * 900_000 + b"\n")
        theirs.shutdown(socket.SHUT_WR)

    with ours, theirs:
        sender = threading.Thread(target=send, daemon=True)
        sender.start()
        with pytest.raises(Exception) as refused:
            next(iter(Messages(ours)))
        sender.join(timeout=30)
    assert type(refused.value).__name__ == "ConfigError" and "not a JSON message" in str(refused.value)


def test_a_client_that_sends_its_first_line_a_byte_at_a_time_is_cut_off_not_waited_on_for_ever():
    from sweeper.service_session import first_message

    ours, theirs = socket.socketpair()
    stop = threading.Event()

    def trickle() -> None:  # a byte well within each read's timeout, never a whole line
        theirs.sendall(b'{"verb"')
        while not stop.wait(0.05):
            with contextlib.suppress(OSError):
                theirs.sendall(b" ")

    with ours, theirs:
        sender = threading.Thread(target=trickle, daemon=True)
        sender.start()
        try:
            first_message(ours, iter(Messages(ours)), within_s=1.0)
        except Exception as err:  # noqa: BLE001 - the line cut short is no JSON: one line for the client
            assert type(err).__name__ == "ConfigError" and "not a JSON message" in str(err), err
        else:
            raise AssertionError("a line cut short was taken for a request")
        assert sender.is_alive()  # cut off while the client was still trickling, not when it stopped
        stop.set()
        sender.join(timeout=30)


def test_a_reader_that_leaves_early_is_not_an_error(tmp_path):
    done = subprocess.run(f"{sys.executable} -m trainables.othello sample --n 3000 | head -1", shell=True, cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout.count("\n") == 1, done.stderr[-2000:]
    assert done.stderr == "", done.stderr[-2000:]


def test_the_module_entry_point_of_the_games_still_prints_them(tmp_path):
    r = module("trainables.othello", "sample", "--n", "2", cwd=tmp_path)
    assert r.returncode == 0 and len(r.stdout.splitlines()) == 2, r.stderr[-2000:]


@pytest.mark.parametrize("damage", ["UPDATE study_user_attributes SET value_json='[[[['",
                                    "UPDATE study_user_attributes SET value_json='1e999'"])
def test_report_of_a_study_damaged_past_its_schema_is_one_line(tmp_path, damage):
    import sqlite3

    import optuna

    folder = tmp_path / "sweeps" / "s"
    folder.mkdir(parents=True)
    study = optuna.create_study(study_name="s", storage=f"sqlite:///{folder / 'optuna.db'}")
    study.set_user_attr("sweeper.tracking_uri", f"sqlite:///{tmp_path / 'mlflow.db'}")
    with sqlite3.connect(folder / "optuna.db") as db:
        db.execute(damage)
    before = snapshot(tmp_path)
    r = sweeper("report", "s", cwd=tmp_path, timeout=120)
    assert_refused(r, "optuna.db", root=tmp_path, before=before)


def test_a_socket_that_answers_outside_the_protocol_is_said_not_taken_for_no_service(tmp_path):
    from core.errors import ConfigError
    from sweeper.service_folder import SOCKET
    from sweeper.service_link import request

    folder = tmp_path / "svc"
    folder.mkdir(mode=0o700)
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(folder / SOCKET))
    os.chmod(folder / SOCKET, 0o600)
    server.listen(1)

    def answer_garbage():
        conn, _ = server.accept()
        with conn:
            conn.recv(1024)
            conn.sendall(b"<html>not the service</html>\n")

    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        with pytest.raises(ConfigError) as err:
            request({"verb": "status"}, folder, timeout_s=10)
        assert "not its protocol" in str(err.value) and "\n" not in str(err.value)
    finally:
        server.close()


@pytest.mark.parametrize("table", ["trials", "trial_values", "study_user_attributes"])
def test_a_resume_of_a_study_missing_a_table_is_one_line_and_changes_nothing(tmp_path, table):
    """The study is made by the sweep's own ledger, then loses a table: the resume's read-only checks
    refuse it in one line (not Optuna's SQL), before Ray, with every file as it was."""
    import sqlite3

    from sweeper.adapters.optuna_ledger import Ledger
    from sweeper.space_file import load_space

    space = tmp_path / "smoke.yaml"
    space.write_bytes((ROOT / "search_spaces" / "smoke.yaml").read_bytes())
    folder = tmp_path / "sweeps" / "smoke"
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_bytes(space.read_bytes())
    (folder.parent / ".smoke.lock").write_text('{"pid": 1, "host": "h", "since": 1.0, "service": false}')  # its last driver's
    ledger = Ledger(f"sqlite:///{folder / 'optuna.db'}", load_space(space), create=True)
    ledger.new_trial()
    db = sqlite3.connect(folder / "optuna.db")
    db.execute("PRAGMA foreign_keys=OFF")
    db.execute(f"DROP TABLE {table}")
    db.commit()
    db.close()
    before = snapshot(tmp_path)
    r = sweeper("launch", space, "--in-process", cwd=tmp_path, timeout=300)
    assert_refused(r, "optuna.db", "--restart", root=tmp_path, before=before)


@pytest.mark.parametrize("study,why", [(b"", "an empty file"), (b"\x8f garbage, not SQLite " * 200, "not an SQLite database")])
def test_status_rebuilding_its_view_from_a_damaged_study_is_one_line(tmp_path, study, why):
    """status.json gone, so `status` rebuilds it from the study: an empty or garbage study is refused
    in one line, and nothing is written."""
    folder = tmp_path / "sweeps" / "s"
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_text((ROOT / "search_spaces" / "smoke.yaml").read_text())
    (folder / "optuna.db").write_bytes(study)
    before = snapshot(tmp_path)
    assert_refused(sweeper("status", "s", cwd=tmp_path), f"optuna.db: not a readable Optuna study ({why})",
                   root=tmp_path, before=before)


def _smoke_folder(tmp_path, study: str | None):
    """sweeps/smoke with its space.yaml and, by `study`: the sweep's own ledger ("sweep"), a study of
    its name that no sweep made ("foreign"), or only a study of another name ("other")."""
    import optuna

    from sweeper.adapters.optuna_ledger import Ledger
    from sweeper.space_file import load_space

    folder = tmp_path / "sweeps" / "smoke"
    folder.mkdir(parents=True)
    (folder / "space.yaml").write_bytes((ROOT / "search_spaces" / "smoke.yaml").read_bytes())
    url = f"sqlite:///{folder / 'optuna.db'}"
    if study == "sweep":
        Ledger(url, load_space(folder / "space.yaml"), create=True)
    else:
        made = optuna.create_study(study_name="smoke" if study == "foreign" else "other", storage=url)
        made.optimize(lambda t: t.suggest_float("y", 0, 1), n_trials=2)
    return folder


@pytest.mark.parametrize("verb", ["report", "dashboard", "status"])
@pytest.mark.parametrize("study, expect", [("foreign", "study `smoke` was not made by a sweep"),
                                           ("other", "holds no study `smoke`")])
def test_a_study_no_sweep_made_is_one_line_for_every_view_not_shown_as_the_sweep_s(tmp_path, verb, study, expect):
    """`report` listed the stranger's parameter (`y`, importance 1.000) as the sweep's; `status` told
    the user to finish it "with the sweeper version that started it"."""
    _smoke_folder(tmp_path, study)
    before = snapshot(tmp_path)
    assert_refused(sweeper(verb, "smoke", "--port", "1", cwd=tmp_path, timeout=120) if verb == "dashboard" else
                   sweeper(verb, "smoke", cwd=tmp_path, timeout=120), "optuna.db", expect, root=tmp_path, before=before)


def test_a_saved_space_whose_name_was_changed_is_named_not_the_sound_study(tmp_path):
    folder = _smoke_folder(tmp_path, "sweep")
    space = folder / "space.yaml"
    space.write_text(space.read_text().replace("name: smoke", "name: other", 1))
    before = snapshot(tmp_path)
    assert_refused(sweeper("status", "smoke", cwd=tmp_path), "space.yaml: names sweep `other`, but its folder and study "
                   "are `smoke`", root=tmp_path, before=before)


def test_report_reads_the_sweep_s_own_parent_run_not_the_newest_of_its_name(tmp_path):
    """Two folders' sweeps named `smoke` log to one store: the report of this folder's shows the trials
    of the parent run its study names, though the other folder's is newer."""
    import mlflow

    from sweeper.adapters.mlflow_tracking import PARENT_UID

    folder = _smoke_folder(tmp_path, "sweep")
    uri = f"sqlite:///{tmp_path / 'shared.db'}"
    client = mlflow.MlflowClient(uri)
    exp = client.create_experiment("smoke")
    uids = {"mine": "a" * 32, "theirs": "b" * 32}
    for who in ("mine", "theirs"):  # theirs last: the newer parent
        parent = client.create_run(exp, tags={"role": "sweep", "sweep": "smoke", "parent_uid": uids[who]})
        child = client.create_run(exp, tags={"mlflow.parentRunId": parent.info.run_id, "trial_id": f"{who}-t0000"})
        client.log_metric(child.info.run_id, "acc_3x", 0.5)
    import optuna

    study = optuna.load_study(study_name="smoke", storage=f"sqlite:///{folder / 'optuna.db'}")
    study.set_user_attr("sweeper.tracking_uri", uri)
    study.set_user_attr(PARENT_UID, uids["mine"])
    r = sweeper("report", "smoke", cwd=tmp_path, timeout=300)
    assert r.returncode == 0, r.stderr
    assert "mine-t0000" in r.stdout and "theirs-t0000" not in r.stdout
    study.set_user_attr(PARENT_UID, "c" * 32)  # its parent run is in no store: said, not another's shown
    before = snapshot(tmp_path)
    assert_refused(sweeper("report", "smoke", cwd=tmp_path, timeout=300), "parent_uid " + "c" * 32,
                   "another folder", root=tmp_path, before=before)
