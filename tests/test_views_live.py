"""The live view at a glance: the table fits the terminal's width without cutting a header or a
value, elapsed and the ETA move with the clock between two reports, elapsed counts the whole
sweep across launches, `best` is status.json's judged best, and a Ctrl-C's last frame says
interrupted, once."""

import io
import re
import json

import pytest
from rich.cells import cell_len
from rich.console import Console

from sweeper.eta import Plan
from sweeper.live import LiveView
from sweeper.live_table import BAR_NARROW, BAR_WIDE, layout, running_rows, table
from sweeper.records import shortest_names
from sweeper.records import TrialRecord
from sweeper.status import STATUS_FILE

PLAN = Plan("switch_time", "acc_3x", "max", num_samples=24, max_concurrent=3, max_steps=6000, rungs=(3000,), reduction_factor=2.0)
PARAMS = {"dat.switch_step": 1500, "optim.lr": 0.00123, "model.dropout": 0.1, "regularization.ema_decay": 0.999,
          "attention.dropout": 0.05}
ORDER = ["budget", "steps/s", "acc_1x", "acc_2x", "acc_4x", "status", *sorted(PARAMS, reverse=True)]  # the docstring's order


def rec(i, status, step, seconds=None, acc3=0.5, **params):
    metrics = {"step": step, "acc_1x": 0.9, "acc_2x": 0.7, "acc_3x": acc3, "acc_4x": 0.3, "steps_per_s": 10.0}
    if seconds is not None:
        metrics["time_total_s"] = seconds
    return TrialRecord(f"t{i:04d}", params or dict(PARAMS), status, step, metrics)


RECORDS = [rec(1, "running", 1500, 150.0), rec(2, "running", 250, 25.0), rec(3, "pending", 0), rec(4, "completed", 6000, 600.0, acc3=0.8)]


def render(renderable, width: int) -> list[str]:
    console = Console(width=width, record=True, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text().splitlines()


# -- the width ---------------------------------------------------------------------------------


@pytest.mark.parametrize("width", [80, 120, 200])
def test_the_table_fits_the_terminal_and_cuts_no_header_or_value(width):
    lines = render(table(RECORDS, PLAN, 3600.0, width=width), width)
    assert all(cell_len(line) <= width for line in lines), [line for line in lines if cell_len(line) > width]
    text = "\n".join(lines)
    assert "…" not in text and "..." not in text  # nothing cut to an ellipsis
    header, rows = running_rows(RECORDS, PLAN)
    fit = layout(header, rows, PLAN.metric, width, cell_len)
    head = next(line for line in lines if line.split()[:1] == ["trial"])  # the header: one line, every header whole
    assert head.split() == [fit.labels[h] for h in fit.columns][:fit.columns.index("step") + 1] + (
        ["budget"] if fit.bar else []) + [fit.labels[h] for h in fit.columns][fit.columns.index("step") + 1:]
    for row in rows:  # every value shown whole, on its trial's line
        line = next(line for line in lines if line.startswith(row[0]))
        assert all(row[header.index(h)] in line.split() for h in fit.columns)
    assert {"trial", "step", "acc_3x"} <= set(fit.columns)  # the trial, its step and the score always stay


def test_wide_terminals_show_every_column_and_narrow_ones_say_what_is_hidden():
    wide = "\n".join(render(table(RECORDS, PLAN, 3600.0, width=200), 200))
    assert "hidden" not in wide and "dat.switch_step" in wide and "steps/s" in wide and "━" in wide
    narrow = "\n".join(render(table(RECORDS, PLAN, 3600.0, width=80), 80))
    note = narrow.split("hidden to fit 80 columns: ")[1].split("\nbest ")[0]  # the note may wrap
    hidden = [name.strip() for name in note.replace("\n", " ").split(", ")]
    assert hidden == ORDER[:len(hidden)] and "budget" in hidden


def test_columns_are_given_up_in_the_stated_order():
    header, rows = running_rows(RECORDS, PLAN)
    natural = layout(header, rows, PLAN.metric, None).width
    seen = []
    for width in range(natural, 20, -1):
        fit = layout(header, rows, PLAN.metric, width)
        assert fit.hidden == ORDER[:len(fit.hidden)]  # always a prefix of the stated order
        assert fit.bar == (BAR_WIDE if width >= natural else BAR_NARROW if "budget" not in fit.hidden else 0)
        assert fit.width <= width or fit.columns == ["trial", "step", "acc_3x"]
        seen.append(tuple(fit.hidden))
    assert seen[-1] == tuple(ORDER)  # at the narrowest, only trial, step and the score are left
    # narrowed headers are the shortest distinct dotted tails
    assert shortest_names(["dat.switch_step", "model.dropout", "attention.dropout", "optim.lr", "a|b=c"]) == [
        "switch_step", "model.dropout", "attention.dropout", "lr", "a|b=c"]


def test_the_score_column_stays_for_another_metric_family():
    plan = Plan("sc", "tv_2x", "min", 4, 2, 100)
    records = [TrialRecord("t1", {"optim.lr": 0.1}, "running", 10, {"tv_1x": 0.1, "tv_2x": 0.2, "tv_3x": 0.3, "tv_4x": 0.4})]
    header, rows = running_rows(records, plan)
    fit = layout(header, rows, plan.metric, 10)
    assert fit.columns == ["trial", "step", "tv_2x"] and fit.hidden[2:5] == ["tv_1x", "tv_4x", "tv_3x"]


# -- the clock ---------------------------------------------------------------------------------


class FakeClock:
    def __init__(self, now: float):
        self.now = now

    def __call__(self) -> float:
        return self.now


def write_status(folder, records, **head):
    data = {"name": "switch_time", "metric": "acc_3x", "mode": "max", "num_samples": 24, "state": "running",
            "started": 1000.0, "updated": 10_000.0, "driver": {"host": "elsewhere", "pid": 1}, **head,
            "trials": [r.to_dict() for r in records]}
    (folder / STATUS_FILE).write_text(json.dumps(data))


def frame_text(view: LiveView, width: int = 200) -> str:
    return "\n".join(render(view.frame(width), width))


def test_elapsed_and_eta_move_with_the_clock_between_two_reports(tmp_path):
    write_status(tmp_path, RECORDS, launched=9_900.0, elapsed_before_s=500.0)
    clock = FakeClock(10_001.0)
    view = LiveView(tmp_path, PLAN, "none", clock=clock)
    view.reload()
    first, line1 = frame_text(view), view.line()
    clock.now += 5  # no new report: status.json is untouched
    view.reload()
    second, line2 = frame_text(view), view.line()
    # elapsed: the earlier launches' 500 s + this launch's 101 s, then 106 s
    assert "elapsed 0:10:01" in first and "elapsed 0:10:06" in second and "since resume" not in first
    eta1, eta2 = (text.split("ETA ")[1].split()[0] for text in (first, second))
    to_s = lambda c: sum(int(x) * 60 ** i for i, x in enumerate(reversed(c.split(":"))))  # noqa: E731
    assert to_s(eta1) - to_s(eta2) == 5  # counted down by the wall clock
    assert line1.startswith("[switch_time 0:10:01]") and line2.startswith("[switch_time 0:10:06]")
    assert line1.split("ETA ")[1] == eta1 and line2.split("ETA ")[1] == eta2


def test_elapsed_without_the_earlier_launches_says_since_resume(tmp_path):
    write_status(tmp_path, RECORDS, launched=9_900.0)  # a status.json that does not know the earlier launches
    view = LiveView(tmp_path, PLAN, "none", clock=FakeClock(10_000.0))
    view.reload()
    assert "elapsed 0:01:40 since resume" in frame_text(view)  # trials had trained before this launch
    write_status(tmp_path, [rec(1, "running", 0), rec(2, "pending", 0)], launched=9_900.0)
    fresh = LiveView(tmp_path, PLAN, "none", clock=FakeClock(10_000.0))
    fresh.reload()
    assert "elapsed 0:01:40" in frame_text(fresh) and "since resume" not in frame_text(fresh)


def test_best_is_the_judged_best_of_status_json_when_it_has_one(tmp_path):
    write_status(tmp_path, RECORDS, best={"value": 0.91, "step": 3000, "trial_id": "t0004"})  # at a rung it passed
    view = LiveView(tmp_path, PLAN, "none", clock=FakeClock(10_000.0))
    view.reload()
    assert "best acc_3x 0.910 (t0004, step 3000)" in frame_text(view) and "best acc_3x 0.910 (t0004" in view.line()
    write_status(tmp_path, RECORDS)  # nothing judged yet: the leader's latest value, called that
    view.reload()
    assert "best acc_3x: none judged yet (t0004 leads with 0.800 at step 6000)" in frame_text(view)


# -- the last frame ----------------------------------------------------------------------------


@pytest.mark.parametrize("state", ["running", "finished"])
def test_a_ctrl_c_last_frame_says_interrupted_once(tmp_path, state):
    write_status(tmp_path, RECORDS, state=state, launched=9_900.0, elapsed_before_s=0.0)
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        with LiveView(tmp_path, PLAN, "table", out=out, clock=FakeClock(10_000.0)):
            raise KeyboardInterrupt
    text = out.getvalue()
    assert text.count("sweep switch_time") == 1  # drawn once
    title = text.splitlines()[0]
    assert "interrupted" in title and "finished" not in text and " running," not in text
    assert "3 interrupted, 1 completed, 20 to sample" in text  # the trials nothing trains any more
    assert "ETA" not in text and "~0:59:35 more once resumed" in title


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_a_resize_redraws_on_a_clean_screen_and_every_frame_fits(tmp_path):
    write_status(tmp_path, RECORDS, launched=9_900.0, elapsed_before_s=0.0)
    out = Tty()
    view = LiveView(tmp_path, PLAN, "table", out=out, clock=FakeClock(10_000.0))
    with view:
        view._live.console.width = 120
        view.tick()
        view.tick()
        assert "\x1b[2J" not in out.getvalue()  # the same width: the frame is redrawn in place
        view._live.console.width = 80
        view.tick()
        drawn = out.getvalue()
        assert drawn.count("\x1b[2J") == 1  # narrower: the old frame's rewrapped lines do not stay behind
        last = drawn.split("\x1b[2J")[-1]
    plain = re.sub(r"\x1b\[[0-9;?]*[A-Za-z]", "", last)
    assert plain.strip() and max(len(line) for line in plain.splitlines()) <= 80


def test_a_sweep_that_ran_every_trial_ends_finished(tmp_path):
    done = [rec(i, "completed", 6000, 600.0) for i in range(24)]
    write_status(tmp_path, done, launched=9_900.0, elapsed_before_s=0.0)
    out = io.StringIO()
    with LiveView(tmp_path, PLAN, "lines", out=out, every_s=3600, clock=FakeClock(10_000.0)):
        pass
    lines = out.getvalue().splitlines()
    assert len(lines) == 1 and lines[0].startswith("[switch_time 0:01:40] 24 completed |")


def test_a_ctrl_c_in_a_log_ends_with_one_interrupted_line(tmp_path):
    write_status(tmp_path, RECORDS, launched=9_900.0, elapsed_before_s=0.0)
    out = io.StringIO()
    with pytest.raises(KeyboardInterrupt):
        with LiveView(tmp_path, PLAN, "lines", out=out, every_s=3600, clock=FakeClock(10_000.0)):
            raise KeyboardInterrupt
    (line,) = out.getvalue().splitlines()  # one line, not one from the loop and one from the exit
    assert "3 interrupted, 1 completed, 20 to sample" in line and line.endswith("more once resumed")


def test_watching_a_sweep_whose_driver_is_gone_ends_with_interrupted(tmp_path):
    import socket

    from tests.conftest import ROOT

    (tmp_path / "space.yaml").write_text((ROOT / "search_spaces" / "switch_time.yaml").read_text())
    write_status(tmp_path, RECORDS, launched=9_900.0, elapsed_before_s=0.0,
                 driver={"host": socket.gethostname(), "pid": 2 ** 22 + 1})  # above pid_max: no such process
    out = io.StringIO()
    assert LiveView.of_sweep(tmp_path, out=out, clock=FakeClock(10_000.0)).watch() == 0
    (line,) = out.getvalue().splitlines()
    assert "2 running" not in line and "3 interrupted" in line and line.startswith("[switch_time 0:01:40]")  # up to its last write


def test_a_status_file_damaged_while_watched_ends_the_watch_with_its_one_line(tmp_path):
    from core.errors import ConfigError
    from tests.conftest import ROOT

    (tmp_path / "space.yaml").write_text((ROOT / "search_spaces" / "switch_time.yaml").read_text())
    write_status(tmp_path, RECORDS)  # a driver on another host: watched until the sweep ends

    class Damaging(io.StringIO):  # the first line drawn, then the file damaged under the watch
        def write(self, text):
            (tmp_path / STATUS_FILE).write_text('{"name": "switch_time"}')
            return super().write(text)

    out = Damaging()
    with pytest.raises(ConfigError, match=r"status\.json: not a sweep status file \(metric: missing\)"):
        LiveView.of_sweep(tmp_path, out=out, clock=FakeClock(10_000.0)).watch()
    assert "switch_time" in out.getvalue()  # it had drawn the sweep before
