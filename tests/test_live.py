"""The live view as pure functions of records, plan and time: ASHA's expected steps, the ETA,
the plain line, the table; and the view following a status.json."""

import io
import json
from dataclasses import replace

import pytest

from sweeper.eta import LaunchSpeed, Plan, asha_rungs, makespan, progress
from sweeper.eta import clock
from sweeper.live import LiveView
from sweeper.live_table import plain_line, plan_line, running_rows, table
from sweeper.records import TrialRecord
from sweeper.space_file import load_space
from sweeper.status import STATUS_FILE

from conftest import ROOT

# a flagship-sized plan: 24 trials of 6000 steps, 2 at a time, ASHA deciding at 3000 with eta 2
FLAGSHIP = Plan("switch_time", "acc_3x", "max", num_samples=24, max_concurrent=2, max_steps=6000,
                rungs=(3000,), reduction_factor=2.0)


def rec(i, status, step, seconds=None, acc3=0.5, **params):
    metrics = {"step": step, "acc_1x": 0.9, "acc_2x": 0.7, "acc_3x": acc3, "acc_4x": 0.3, "steps_per_s": 10.0}
    if seconds is not None:
        metrics["time_total_s"] = seconds
    return TrialRecord(f"t{i}", params or {"lr": 0.001 * i}, status, step, metrics)


# -- ASHA's rungs and expected steps -----------------------------------------------------------


def test_rungs_are_rays_milestones_moved_to_the_next_report():
    assert asha_rungs(3000, 6000, 2, 250, 6000) == (3000,)  # 6000 = max_steps stops nothing
    assert asha_rungs(10, 60, 2, 10, 60) == (10, 20, 40)
    assert asha_rungs(500, 6000, 3, 250, 6000) == (500, 1500, 4500)
    assert asha_rungs(100, 1000, 3, 250, 1000) == (250, 500)  # 100 and 300 are judged at the reports 250 and 500


def test_shipped_spaces_give_the_plan_of_their_budget():
    plan = Plan.from_space(load_space(ROOT / "search_spaces" / "switch_time.yaml", n_samples=0))
    plain = replace(FLAGSHIP, rungs=(500, 1000, 2000, 4000))  # grace 500, eta 2, the rule without phases
    assert replace(plan, not_before=(), not_before_of=None) == plain
    assert plan.not_before and plan.expected_steps(0) > plain.expected_steps(0)  # late switches are never stopped
    smoke = Plan.from_space(load_space(ROOT / "search_spaces" / "smoke.yaml", n_samples=0))
    assert (smoke.rungs, smoke.reduction_factor, smoke.max_steps) == ((10, 20, 40), 2.0, 60)


def test_expected_steps_weigh_each_segment_by_the_chance_of_reaching_it():
    # a new trial: 3000 for sure, then the second half with chance 1/2
    assert FLAGSHIP.expected_steps(0) == 3000 + 3000 / 2
    assert FLAGSHIP.expected_steps(1000) == 2000 + 3000 / 2
    assert FLAGSHIP.expected_steps(3000) == 3000 / 2  # reporting at the rung: still to be judged there
    assert FLAGSHIP.expected_steps(3250) == 2750  # past the rung: it was promoted
    assert FLAGSHIP.expected_steps(6000) == 0
    smoke = Plan("s", "acc_3x", "max", 6, 2, 60, (10, 20, 40), 2.0)
    assert smoke.expected_steps(0) == 10 + 10 / 2 + 20 / 4 + 20 / 8
    fifo = Plan("s", "acc_3x", "max", 6, 2, 60)
    assert fifo.expected_steps(0) == 60 and fifo.expected_steps(25) == 35


# -- the ETA ---------------------------------------------------------------------------------


def test_makespan_deals_waiting_trials_to_the_first_free_slot():
    # slot A frees at 100 and takes the first 200 (free at 300); both are free at 300, the next 200 ends at 500
    assert makespan([100, 300], [200, 200], slots=2) == 500
    assert makespan([100, 300], [200], slots=2) == 300
    assert makespan([100, 300], [200, 200, 200], slots=2) == 500  # ...and the third on the other slot, also 500
    assert makespan([100, 300], [200] * 4, slots=2) == 700
    assert makespan([], [50] * 4, slots=2) == 100
    assert makespan([500], [], slots=4) == 500
    assert makespan([], [], slots=2) == 0


def test_eta_is_expected_steps_over_the_measured_speed():
    # two running trials at 1000 and 3250 steps, 10 steps/s each (steps over time_total_s),
    # one stopped, 21 not sampled yet
    records = [rec(1, "running", 1000, 100.0), rec(2, "running", 3250, 325.0), rec(3, "stopped", 3000, 300.0)]
    p = progress(records, FLAGSHIP)
    assert p.speed == 10.0
    assert p.done == 7250
    e = 4500  # a new trial's expected steps
    assert p.left == (2000 + 1500) + 2750 + 21 * e
    # slots: 3500 and 2750; 21 trials of 4500 dealt in turn: 11 on the slot free first, 10 on the other
    assert p.eta_s == max(2750 + 11 * e, 3500 + 10 * e) / 10.0


def test_a_resumed_trial_s_speed_is_the_trainer_s_not_its_steps_over_ray_s_time_since_this_launch():
    # resumed at step 4750, 12 s into this launch: Ray's time_total_s counts this launch only
    resumed = rec(0, "running", 4750, seconds=12.0)
    resumed.metrics["steps_per_s"] = 20.0
    assert progress([resumed], FLAGSHIP).speed == 20.0  # not 4750 / 12 = 396
    old = rec(1, "completed", 6000, seconds=600.0)
    del old.metrics["steps_per_s"]  # a report without the trainer's own speed: steps over Ray's time
    assert progress([old], FLAGSHIP).speed == 10.0
    assert progress([resumed, old], FLAGSHIP).speed == (4750 + 6000) / (4750 / 20 + 600)


def test_the_speed_after_a_resume_is_this_launch_s_own_and_steady():
    # before the interrupt the trials trained at ~9.6 steps/s; after the resume the first interval
    # of each trial includes its restore (6.3), then one trial runs alone for a while (19.3)
    speed = LaunchSpeed(eval_every=250)
    assert speed.value() is None  # nothing reported in this launch yet: the views fall back to the trials' last speeds
    seen = []
    for trial, step, v in [(0, 2250, 6.3), (1, 2500, 6.3), (0, 2500, 9.6), (1, 2750, 9.6), (0, 2750, 19.3),
                           (1, 3000, 9.5), (0, 3000, 9.7), (1, 3250, 9.6), (0, 3250, 9.6), (1, 3500, 9.5)]:
        speed.add(trial, step, v)
        seen.append(speed.value())
    assert seen[0] == 6.3 and 8.5 < seen[-1] < 9.6  # the harmonic mean of the intervals: time-weighted
    assert max(seen[4:]) / min(seen[4:]) < 1.1  # once a few reports are in, one odd interval barely moves it
    speed.add(1, 3500, 1.0)  # the same report told again (Ray: the last result, then the trial's end) counts once
    speed.add(0, 3600, 0.0)  # a report without a speed is left out
    assert speed.steps == 10 * 250 and speed.value() == seen[-1]
    speed.add(0, 3600, 50.0)  # a short last interval (steps 3500-3600)
    assert speed.steps == 10 * 250 + 100
    records = [rec(1, "running", 3600, 12.0)]
    records[0].metrics["steps_per_s"] = 19.3  # the trainer's last interval: the old way's figure
    assert progress(records, FLAGSHIP, speed.value()).speed == speed.value()
    assert progress(records, FLAGSHIP).speed == 19.3


def test_no_eta_before_the_first_report_and_none_left_at_the_end():
    p = progress([rec(1, "running", 0)], FLAGSHIP)
    assert p.speed is None and p.eta_s is None and p.left == 24 * 4500
    done = [rec(i, "completed", 6000, 600.0) for i in range(24)]
    assert progress(done, FLAGSHIP).left == 0 and progress(done, FLAGSHIP).eta_s == 0


# -- the text --------------------------------------------------------------------------------


def test_plan_line_says_trials_steps_concurrency_estimate_and_how_to_resume():
    line = plan_line(FLAGSHIP)
    assert line.startswith("plan: 24 trials of up to 6,000 steps, 2 at a time; ")
    assert "~4,500 steps a trial, ~108,000 steps in all" in line and "ETA after the first report" in line
    assert line.endswith("Ctrl-C stops; the same command resumes.") and "\n" not in line
    resumed = plan_line(FLAGSHIP, [rec(1, "running", 1000, 100.0), rec(2, "stopped", 3000, 300.0)])
    assert "~102,500 left" in resumed  # 2000 + 3000/2 for the running one, 22 x 4500 not started
    assert "ETA 1:28:20" in resumed and "10.0 steps/s per trial" in resumed  # (3500 + 11 x 4500) / 10 = 5300 s


def test_plain_line_has_counts_best_steps_speed_and_eta():
    records = [rec(1, "running", 1000, 100.0, acc3=0.4), rec(2, "stopped", 3000, 300.0, acc3=0.779)]
    line = plain_line(records, FLAGSHIP, elapsed=145, best={"value": 0.779, "step": 3000, "trial_id": "t2"})
    assert line.startswith("[switch_time 0:02:25] 1 running, 1 stopped, 22 to sample | best acc_3x 0.779 (t2, step 3000)")
    assert "| 4,000 steps done, ~102,500 to go | 10.0 steps/s per trial | ETA 1:28:20" in line  # (3500 + 11 x 4500) / 10 s
    assert clock(None) == "-" and clock(90061) == "1d 1:01:01"


def test_the_table_shows_each_running_trial_with_its_budget_and_accuracies():
    from rich.console import Console

    records = [rec(1, "running", 1500, 150.0, lr=0.002), rec(2, "completed", 6000, 600.0, acc3=0.9, lr=0.003),
               rec(3, "pending", 0, lr=0.004)]
    header, rows = running_rows(records, FLAGSHIP)
    assert header == ["trial", "lr", "step", "acc_1x", "acc_2x", "acc_3x", "acc_4x", "steps/s", "status"]
    assert rows == [["t1", "0.002", "1500/6000", "0.900", "0.700", "0.500", "0.300", "10.0", "running"],
                    ["t3", "0.004", "0/6000", "0.900", "0.700", "0.500", "0.300", "10.0", "pending"]]
    console = Console(width=160, record=True, file=io.StringIO(), color_system=None)
    console.print(table(records, FLAGSHIP, elapsed=3600, best={"value": 0.9, "step": 6000, "trial_id": "t2"}))
    text = console.export_text()
    assert "sweep switch_time" in text and "elapsed 1:00:00" in text and "ETA " in text
    assert "1 running, 1 pending, 1 completed, 21 to sample" in text
    assert "best acc_3x 0.900 (t2, step 6000)" in text and "1500/6000" in text and "━" in text  # the bar
    assert "t2" not in text.split("best")[0]  # ended trials are not in the running table


# -- following status.json ---------------------------------------------------------------------


def _status(tmp_path, records, state="running", started=1000.0, updated=1145.0):
    (tmp_path / STATUS_FILE).write_text(json.dumps({
        "name": "switch_time", "metric": "acc_3x", "mode": "max", "num_samples": 24, "state": state,
        "started": started, "updated": updated, "driver": {"host": "elsewhere", "pid": 1},
        "trials": [r.to_dict() for r in records]}))


def test_the_view_prints_lines_away_from_a_terminal(tmp_path):
    _status(tmp_path, [rec(1, "running", 1000, 100.0)])
    out = io.StringIO()
    with LiveView(tmp_path, FLAGSHIP, "auto", every_s=3600, out=out) as view:
        assert view.view == "lines"  # a StringIO is not a terminal
    lines = out.getvalue().splitlines()
    assert lines and all(line.startswith("[switch_time ") and "ETA" in line for line in lines[:-1])
    assert lines[-1].endswith("more once resumed")  # the sweep stopped with trials unfinished


def test_watch_of_a_finished_sweep_draws_once_with_its_elapsed_time(tmp_path):
    (tmp_path / "space.yaml").write_text((ROOT / "search_spaces" / "switch_time.yaml").read_text())
    _status(tmp_path, [rec(1, "completed", 6000, 100.0)], state="finished")
    out = io.StringIO()
    assert LiveView.of_sweep(tmp_path, out=out).watch() == 0
    assert out.getvalue().startswith("[switch_time 0:02:25] 1 completed, 23 to sample")  # updated - started
    assert len(out.getvalue().splitlines()) == 1


def test_the_table_view_draws_when_asked_and_ends_with_the_last_state(tmp_path):
    _status(tmp_path, [rec(1, "running", 1000, 100.0)])
    out = io.StringIO()
    with LiveView(tmp_path, FLAGSHIP, "table", out=out):
        _status(tmp_path, [rec(1, "running", 2000, 200.0)])
    text = out.getvalue()
    assert "sweep switch_time" in text and "best acc_3x: none judged yet (t1 leads with 0.500 at step 2000)" in text
    # the driver's sweep stopped with a trial unfinished: its last frame says so, once
    assert "1 interrupted, 23 to sample" in text and text.count("sweep switch_time") == 1


@pytest.mark.parametrize("columns, width", [("0", 40), ("1", 40), ("39", 40), ("120", 120)])
def test_the_live_table_is_drawn_at_least_40_columns_wide_whatever_columns_says(monkeypatch, columns, width):
    from sweeper.live import table_console

    monkeypatch.setenv("COLUMNS", columns)
    assert table_console(io.StringIO()).width == width
