"""Trial records, statuses and the sweep's files, as pure functions."""

import json
import os
from pathlib import Path

import pytest

from sweeper.records import TrialRecord, ranked
from sweeper.status import (STATUS_FILE, counts_line, driver_alive, format_table, load_records,
                            mark_state, write_summary)


def rec(i, status, step, acc3, **params):
    return TrialRecord(trial_id=f"t{i}", params=params, status=status, step=step,
                       metrics={"step": step, "acc_1x": 1.0, "acc_3x": acc3})


def sweep_views(tmp_path, num_samples: int, max_steps: int, fifo: bool = True, **views_kwargs):
    """A one-parameter sweep's spec (FIFO, or the default scheduler), its ledger (a real SQLite study)
    and its views, in tmp_path."""
    from sweeper.adapters.optuna_ledger import Ledger
    from sweeper.space import SearchSpace
    from sweeper.views import SweepViews

    spec = SearchSpace.model_validate({
        "name": "s", "metric": "acc_3x", "mode": "max",
        "space": {"optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "budget": {"num_samples": num_samples, "max_concurrent": 1, "max_steps": max_steps, "eval_every": 10},
        **({"scheduler": {"type": "fifo"}} if fifo else {}),
    })
    ledger = Ledger(f"sqlite:///{tmp_path}/optuna.db", spec, create=True)
    return spec, ledger, SweepViews(tmp_path, spec, ledger, str(tmp_path / "trials"), **views_kwargs)


def test_ranked_orders_by_metric_and_mode_and_skips_unreported():
    rs = [rec(1, "completed", 10, 0.5), rec(2, "stopped", 5, 0.9), TrialRecord("t3", {}, "pending", 0)]
    assert [r.trial_id for r in ranked(rs, "acc_3x", "max")] == ["t2", "t1"]
    assert [r.trial_id for r in ranked(rs, "acc_3x", "min")] == ["t1", "t2"]


def test_counts_line_counts_unsampled_trials():
    rs = [rec(1, "completed", 10, 0.5), rec(2, "running", 5, 0.4)]
    assert counts_line(rs, 5) == "1 running, 1 completed, 3 to sample"


def test_views_write_status_from_the_ledger_and_leave_the_terminal_to_the_live_view(tmp_path, capsys):
    spec, ledger, views = sweep_views(tmp_path, 3, 20)
    number = ledger.new_trial()
    views.on_start(number)
    assert load_records(tmp_path)[1][0].status == "pending"
    ledger.report(number, 10, 0.2)
    views.on_report(number, {"step": 10, "acc_3x": 0.2, "time_total_s": 1.0})
    views.write("running")  # (a report is written at most every STATUS_EVERY_S; the Ray callback flushes)
    assert load_records(tmp_path)[1][0].status == "running"
    ledger.report(number, 20, 0.7)
    views.on_report(number, {"step": 20, "acc_3x": 0.7})
    ledger.end(number, "completed", 0.7)
    views.on_end(number)
    views.write("finished")
    assert capsys.readouterr().out == ""  # sweeper/live.py draws from status.json
    data, records = load_records(tmp_path)
    assert data["state"] == "finished" and records[0].status == "completed" and records[0].step == 20
    assert data["best"] == {"value": 0.7, "step": 20, "trial_id": records[0].trial_id}
    assert data["started"] <= data["updated"]  # the view's elapsed time
    mark_state(tmp_path, "interrupted")
    assert json.loads((tmp_path / STATUS_FILE).read_text())["state"] == "interrupted"


def test_best_is_the_best_judged_value_and_never_goes_down(tmp_path):
    spec, ledger, views = sweep_views(tmp_path, 3, 40, fifo=False)
    number = ledger.new_trial()
    ledger.report(number, 20, 0.66)
    ledger.record_rung(number, 20, 0.66)
    assert views.best() == {"value": 0.66, "step": 20, "trial_id": ledger.trials[number].name}
    ledger.report(number, 30, 0.59)  # its latest value went down; the judged best did not
    assert views.best()["value"] == 0.66


def test_summary_names_the_best_judged_value_s_trial_with_its_latest_beside_it(tmp_path):
    # t1 was judged 0.9 at a rung, then went down to 0.5 by its end; t2 ended at 0.8
    rs = [rec(1, "completed", 10, 0.5, lr=0.1), rec(2, "completed", 10, 0.8, lr=0.2)]
    best = {"value": 0.9, "step": 5, "trial_id": "t1"}
    summary = write_summary(tmp_path, "s", "acc_3x", "max", rs, best, {"steps": 10})
    assert summary["best"]["trial_id"] == "t1" and summary["best"]["params"] == {"lr": 0.1}
    assert (summary["best"]["score"], summary["best"]["step"]) == (0.9, 5)
    assert (summary["best"]["latest"], summary["best"]["latest_step"]) == (0.5, 10)
    assert write_summary(tmp_path, "s", "acc_3x", "max", rs, None, None)["best"] is None  # nothing judged yet
    assert json.loads((tmp_path / "summary.json").read_text())["counts"] == {"completed": 2}


def test_table_lists_params_and_lengths_best_first():
    table = format_table([rec(1, "completed", 10, 0.5, lr=0.1), rec(2, "stopped", 5, 0.8, lr=0.2)], "acc_3x", "max")
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["trial", "lr", "acc_1x"]
    assert lines[2].startswith("t2") and lines[3].startswith("t1")


@pytest.mark.parametrize("width", [120, 80, 60, 40])
def test_the_final_table_fits_the_terminal_and_says_what_it_hid(width):
    rs = [TrialRecord(f"t{i:04d}", {"dat.switch_step": 250 * i, "curriculum.state_only_steps": 1500, "optim.lr": 0.003},
                      "completed", 6000, {"acc_1x": 1.0, "acc_2x": 0.9, "acc_3x": 0.794 + i / 100, "acc_4x": 0.5})
          for i in range(4)]
    full = format_table(rs, "acc_3x", "max")
    assert max(map(len, full.splitlines())) > 80  # too wide for 80 columns as it is
    table = format_table(rs, "acc_3x", "max", width=width)
    lines = table.splitlines()
    assert max(map(len, lines)) <= width
    assert lines[0].split()[0] == "trial" and "acc_3x" in lines[0].split()  # the scored metric always stays
    assert [line.split()[0] for line in lines[2:6]] == ["t0003", "t0002", "t0001", "t0000"]
    assert "0.824" in lines[2] and "0.814" in lines[3]  # values whole, never cut across a line
    if width < 120:
        assert lines[-1].startswith(f"hidden to fit {width} columns: acc_1x")


def test_a_table_of_thousands_of_parameters_keeps_the_first_and_hides_the_rest_in_order():
    # a status.json anyone can write: fitting its table drops a column at a time, each drop a
    # constant cost (it once summed every column again: minutes for 20,000 parameters)
    params = {f"model.p{i:05d}": i for i in range(20_000)}
    rs = [TrialRecord("t0000", params, "completed", 10, {"acc_3x": 0.5})]
    lines = format_table(rs, "acc_3x", "max", width=100).splitlines()
    assert lines[0].split()[:3] == ["trial", "p00000", "p00001"] and "acc_3x" in lines[0].split()
    assert max(map(len, lines)) <= 100
    assert lines[-1].startswith("hidden to fit 100 columns: acc_1x, acc_2x, acc_4x, status, steps, p19999, p19998")


def test_a_dead_driver_is_detected():
    import socket

    assert driver_alive({"driver": {"host": socket.gethostname(), "pid": os.getpid()}})
    assert not driver_alive({"driver": {"host": socket.gethostname(), "pid": 2**22 + 12345}})


def test_a_record_without_a_start_time_is_judged_by_when_the_file_was_written():
    """An older status.json names its driver by pid alone: a process that started after the file's
    last write (a pid reused since) is not its driver; one that started before it may be."""
    import socket
    import time

    import psutil

    me = {"host": socket.gethostname(), "pid": os.getpid()}
    started = psutil.Process().create_time()
    assert driver_alive({"driver": me, "updated": time.time()})
    assert not driver_alive({"driver": me, "updated": started - 60})
    assert driver_alive({"driver": {**me, "started": started}, "updated": started - 60})  # the start time decides
    assert not driver_alive({"driver": {**me, "started": started - 1}, "updated": time.time()})


def test_tables_show_the_scored_metric_at_every_length():
    from sweeper.records import TrialRecord, length_family
    from sweeper.status import format_table

    assert length_family("tv_3x") == "tv" and length_family("acc_3x") == "acc" and length_family("loss") == "acc"
    rec = TrialRecord("t1", {"ema.decay": 0.99}, "completed", 10, {"tv_1x": 0.1, "tv_2x": 0.2, "tv_3x": 0.3, "tv_4x": 0.4, "acc_3x": 0.9})
    table = format_table([rec], "tv_3x", "min")
    assert "tv_3x" in table.splitlines()[0] and "0.3" in table.splitlines()[2] and "acc_3x" not in table


def test_a_report_reaches_status_json_within_the_write_interval(tmp_path):
    """status.json is written at most every STATUS_EVERY_S after a report, and the flush between Ray's
    steps writes a pending report once that interval has passed (a clock of our own: no sleeping)."""
    from sweeper.views import STATUS_EVERY_S

    now = [100.0]
    spec, ledger, views = sweep_views(tmp_path, 1, 40, fifo=False, clock=lambda: now[0])
    number = ledger.new_trial()
    views.on_start(number)  # written at once
    step_of = lambda: load_records(tmp_path)[1][0].step  # noqa: E731
    ledger.report(number, 10, 0.1)
    views.on_report(number, {"step": 10, "acc_3x": 0.1})
    assert step_of() == 0  # within the interval of the last write: held back
    now[0] += STATUS_EVERY_S / 2
    views.flush()
    assert step_of() == 0
    now[0] += STATUS_EVERY_S / 2
    views.flush()
    assert step_of() == 10  # the interval passed: the flush wrote it
    now[0] += 10 * STATUS_EVERY_S
    ledger.report(number, 20, 0.2)
    views.on_report(number, {"step": 20, "acc_3x": 0.2})
    assert step_of() == 20  # a report after a quiet spell is written at once


def test_an_interrupted_trial_carries_a_note_on_the_dashboard_until_it_reports_again(tmp_path):
    """optuna-dashboard (its own WSGI app on the study) shows why a RUNNING trial is not running."""
    import io
    import json as _json
    from wsgiref.util import setup_testing_defaults

    from optuna_dashboard import wsgi

    from sweeper.adapters.optuna_ledger import Ledger
    from sweeper.space import SearchSpace

    spec = SearchSpace.model_validate({
        "name": "noted", "space": {"optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "budget": {"num_samples": 2, "max_concurrent": 1, "max_steps": 40, "eval_every": 10},
    })
    ledger = Ledger(f"sqlite:///{tmp_path}/optuna.db", spec, create=True)
    number = ledger.new_trial()
    ledger.report(number, 10, 0.3)
    assert ledger.mark_interrupted() == [number]

    def dashboard_note() -> str:
        environ, out, errors = {"PATH_INFO": f"/api/studies/{ledger.study_id}"}, [], io.StringIO()
        setup_testing_defaults(environ)
        environ["wsgi.errors"] = errors
        body = wsgi(ledger.storage)(environ, lambda status, headers, exc_info=None: out.append(status))
        assert out[0].startswith("200"), (out, errors.getvalue()[-2000:])
        trial = next(t for t in _json.loads(b"".join(body))["trials"] if t["number"] == number)
        return trial["note"]["body"]

    assert "Interrupted" in dashboard_note() and "step 10" in dashboard_note()
    ledger.report(number, 20, 0.4)  # the next launch resumed it
    assert dashboard_note().startswith("Resumed")


def test_status_without_a_name_lists_every_sweep_of_the_storage_and_a_damaged_one_in_a_line(tmp_path, monkeypatch, capsys):
    from sweeper.cli import main

    monkeypatch.setenv("SWEEPER_SERVICE_DIR", str(tmp_path / "service"))  # no service runs there
    for name, state in (("first", "finished"), ("second", "interrupted")):
        (tmp_path / name).mkdir()
        (tmp_path / name / STATUS_FILE).write_text(json.dumps({
            "name": name, "metric": "acc_3x", "mode": "max", "state": state, "updated": 1.0, "num_samples": 3,
            "trials": [rec(0, "completed", 10, 0.5).to_dict()]}))
    (tmp_path / "damaged").mkdir()
    (tmp_path / "damaged" / STATUS_FILE).write_text("{\"name\": ")
    (tmp_path / "not_a_sweep").mkdir()
    assert main(["status", "--storage", str(tmp_path)]) == 0
    out = capsys.readouterr().out.splitlines()
    listed = {line.split(":")[0].strip(): line for line in out if line.startswith("  ")}
    assert set(listed) == {"first", "second", "damaged"}
    assert "finished; 1 completed, 2 to sample; best acc_3x: none judged yet (t0 leads with 0.500 at step 10)" in listed["first"]
    assert "interrupted" in listed["second"] and "unreadable" in listed["damaged"]
    assert any(line.startswith("no sweep service runs") for line in out)
    assert main(["status", "--storage", str(tmp_path / "empty")]) == 1


@pytest.mark.parametrize("damage", ["garbage\n", "", None])
def test_a_trial_whose_folder_lost_its_reports_shows_the_ledger_s_value_not_nothing(tmp_path, damage):
    """status.json rebuilt from the study: a completed trial whose metrics.jsonl is damaged, emptied or
    gone was counted but left out of the table (and saved so); it shows the study's last value."""
    from sweeper.views import SweepViews
    from trainables.run_dir import REPORTS, RunDir

    spec, ledger, views = sweep_views(tmp_path, 2, 20)
    for value in (0.7, 0.4):
        number = ledger.new_trial()
        for step in (10, 20):
            RunDir(views._dir(number)).append({"step": step, "acc_3x": value})
            ledger.report(number, step, value)
        ledger.end(number, "completed", value)
    reports = Path(views._dir(0)) / REPORTS
    if damage is None:
        reports.unlink()
    else:
        reports.write_text(damage)
    fresh = SweepViews(tmp_path, spec, ledger, str(tmp_path / "trials"))  # as a rebuild reads the folders
    fresh.write("finished")
    records = load_records(tmp_path)[1]
    assert [(r.trial_id, r.step, r.metrics.get("acc_3x")) for r in ranked(records, "acc_3x", "max")] == \
        [(records[0].trial_id, 20, 0.7), (records[1].trial_id, 20, 0.4)]
