"""Trial records, statuses and the sweep's files, as pure functions."""

import json
import os

from sweeper.records import TrialRecord, classify, ranked
from sweeper.status import (STATUS_FILE, SweepListener, counts_line, driver_alive, format_table, load_records,
                            mark_state, write_summary)


def rec(i, status, step, acc3, **params):
    return TrialRecord(trial_id=f"t{i}", params=params, status=status, step=step,
                       metrics={"step": step, "acc_1x": 1.0, "acc_3x": acc3})


def test_classify_tells_completed_stopped_diverged_and_failed_apart():
    assert classify("TERMINATED", {"step": 100}, 100) == "completed"
    assert classify("TERMINATED", {"step": 40}, 100) == "stopped"  # ended early: ASHA
    assert classify("TERMINATED", {"step": 40, "diverged": 1.0}, 100) == "diverged"
    assert classify("ERROR", {"step": 40}, 100) == "failed"
    assert classify("RUNNING", {}, 100) == "running"
    assert classify("PENDING", {}, 100) == "pending"


def test_ranked_orders_by_metric_and_mode_and_skips_unreported():
    rs = [rec(1, "completed", 10, 0.5), rec(2, "stopped", 5, 0.9), TrialRecord("t3", {}, "pending", 0)]
    assert [r.trial_id for r in ranked(rs, "acc_3x", "max")] == ["t2", "t1"]
    assert [r.trial_id for r in ranked(rs, "acc_3x", "min")] == ["t1", "t2"]


def test_counts_line_counts_unsampled_trials():
    rs = [rec(1, "completed", 10, 0.5), rec(2, "running", 5, 0.4)]
    assert counts_line(rs, 5) == "1 running, 1 completed, 3 to sample"


def test_listener_writes_status_and_leaves_the_terminal_to_the_live_view(tmp_path, capsys):
    listener = SweepListener(tmp_path, "s", "acc_3x", "max", num_samples=3)
    listener([rec(1, "running", 10, 0.2, lr=0.1)], final=False)
    assert load_records(tmp_path)[1][0].status == "running"
    listener([rec(1, "completed", 20, 0.7, lr=0.1)], final=True)
    assert capsys.readouterr().out == ""  # sweeper/live.py draws from status.json
    data, records = load_records(tmp_path)
    assert data["state"] == "finished" and records[0].status == "completed"
    assert data["started"] == listener.started <= data["updated"]  # the view's elapsed time
    mark_state(tmp_path, "interrupted")
    assert json.loads((tmp_path / STATUS_FILE).read_text())["state"] == "interrupted"


def test_summary_names_the_best_trial(tmp_path):
    rs = [rec(1, "completed", 10, 0.5, lr=0.1), rec(2, "completed", 10, 0.8, lr=0.2)]
    summary = write_summary(tmp_path, "s", "acc_3x", "max", rs, {"steps": 10})
    assert summary["best"]["trial_id"] == "t2" and summary["best"]["params"] == {"lr": 0.2}
    assert json.loads((tmp_path / "summary.json").read_text())["counts"] == {"completed": 2}


def test_table_lists_params_and_lengths_best_first():
    table = format_table([rec(1, "completed", 10, 0.5, lr=0.1), rec(2, "stopped", 5, 0.8, lr=0.2)], "acc_3x", "max")
    lines = table.splitlines()
    assert lines[0].split()[:3] == ["trial", "lr", "acc_1x"]
    assert lines[2].startswith("t2") and lines[3].startswith("t1")


def test_a_dead_driver_is_detected():
    import socket

    assert driver_alive({"driver": {"host": socket.gethostname(), "pid": os.getpid()}})
    assert not driver_alive({"driver": {"host": socket.gethostname(), "pid": 2**22 + 12345}})


def test_tables_show_the_scored_metric_at_every_length():
    from sweeper.records import TrialRecord, length_family
    from sweeper.status import format_table

    assert length_family("tv_3x") == "tv" and length_family("acc_3x") == "acc" and length_family("loss") == "acc"
    rec = TrialRecord("t1", {"ema.decay": 0.99}, "completed", 10, {"tv_1x": 0.1, "tv_2x": 0.2, "tv_3x": 0.3, "tv_4x": 0.4, "acc_3x": 0.9})
    table = format_table([rec], "tv_3x", "min")
    assert "tv_3x" in table.splitlines()[0] and "0.3" in table.splitlines()[2] and "acc_3x" not in table
