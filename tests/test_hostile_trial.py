"""`sweeper trial --out DIR --resume` on a run folder someone damaged or planted: one line, exit 2,
and the folder exactly as it was (config.yaml, metrics.jsonl, the checkpoint: nothing rewritten,
nothing dropped). What a kill can leave (a report after the checkpoint, a line cut short) resumes.

The run folder is made once, in this process, by the real command (tiny preset, 40 steps: reports
and checkpoints at 20 and 40); each case copies it and runs `sweeper` on the copy, in a process of its own
(tests/hostile.py).
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sweeper.cli import main as sweeper_main
from sweeper.cli_types import usable_cpus
from sweeper.commands.trial import check_resume
from trainables.run_dir import strict_reports
from tests.hostile import assert_refused, snapshot, sweeper
from trainables.config import load_trial_config, with_overrides
from core.errors import MAX_LINE, ConfigError

RESUME = ("trial", "tiny", "--steps", "60", "--out", "run", "--resume", "--threads", "1")


@pytest.fixture(scope="module")
def finished_run(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("made")
    threads = torch.get_num_threads()
    try:
        assert sweeper_main(["trial", "tiny", "--steps", "40", "--out", str(root / "run"), "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    return root / "run"


@pytest.fixture
def run_dir(finished_run, tmp_path) -> Path:
    """A copy of the finished run in tmp_path/run (the command runs in tmp_path)."""
    shutil.copytree(finished_run, tmp_path / "run", symlinks=True)
    return tmp_path / "run"


def edit_checkpoint(run: Path, change) -> None:
    path = run / "checkpoint" / "state.pt"
    state = torch.load(path, weights_only=True)
    change(state)
    torch.save(state, path)


def refused(tmp_path: Path, *expect: str, args=RESUME) -> str:
    before = snapshot(tmp_path)
    return assert_refused(sweeper(*args, cwd=tmp_path), *expect, root=tmp_path, before=before)


# --------------------------------------------------------------------------- the saved config


def test_a_resume_with_another_model_keeps_config_yaml_byte_identical(run_dir, tmp_path):
    refused(tmp_path, "model.d_model", "16", "32", "only `steps`",
            args=(*RESUME, "--set", "model.d_model=32"))


def test_a_resume_with_another_seed_is_refused(run_dir, tmp_path):
    refused(tmp_path, "seed", args=(*RESUME, "--set", "seed=7"))


def test_a_damaged_saved_config_is_refused(run_dir, tmp_path):
    (run_dir / "config.yaml").write_text("model: [\n")
    refused(tmp_path, "config.yaml", "invalid YAML")


def test_a_saved_config_that_is_a_link_is_refused_and_its_target_untouched(run_dir, tmp_path):
    target = tmp_path / "elsewhere.yaml"
    shutil.copy(run_dir / "config.yaml", target)
    (run_dir / "config.yaml").unlink()
    (run_dir / "config.yaml").symlink_to(target)
    refused(tmp_path, "config.yaml", "a link")


# --------------------------------------------------------------------------- the checkpoint


def test_a_negative_checkpoint_step_is_refused_and_metrics_jsonl_kept(run_dir, tmp_path):
    edit_checkpoint(run_dir, lambda s: s.update(step=-5, metrics={}))
    refused(tmp_path, "state.pt", "step", "-5")
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 2  # both reports still there


@pytest.mark.parametrize("step, expect", [(400, "[0, steps=60]"), (True, "whole number"), (2.5, "whole number"),
                                          ("40", "whole number"), (20, "checkpoint of step 20")])
def test_a_checkpoint_step_out_of_range_or_of_another_kind_is_refused(run_dir, tmp_path, step, expect):
    edit_checkpoint(run_dir, lambda s: s.update(step=step, metrics={}))
    refused(tmp_path, "step", expect)


def test_steps_below_the_checkpoint_are_refused(run_dir, tmp_path):
    refused(tmp_path, "[0, steps=30]", "40", args=("trial", "tiny", "--steps", "30", "--out", "run", "--resume"))


def test_a_checkpoint_that_does_not_fit_the_model_is_refused(run_dir, tmp_path):
    def shrink(state):
        name = next(iter(state["model"]))
        state["model"][name] = torch.zeros(3)
    edit_checkpoint(run_dir, shrink)
    refused(tmp_path, "state.pt", "does not fit this config")


def test_a_checkpoint_missing_a_part_is_refused(run_dir, tmp_path):
    edit_checkpoint(run_dir, lambda s: s.pop("optimizer"))
    refused(tmp_path, "state.pt", "no `optimizer`")


def _first_moment(state, value):
    (first, *_) = state["optimizer"]["state"].values()
    first["exp_avg"] = value


def _group(state, **change):
    state["optimizer"]["param_groups"][0].update(change)


@pytest.mark.parametrize("damage, expect", [
    (lambda s: _first_moment(s, torch.zeros(1)), "exp_avg: must have its parameter's shape"),  # crashed AdamW's fused step
    (lambda s: _first_moment(s, "x"), "exp_avg: must have its parameter's shape"),
    (lambda s: _group(s, lr="abc"), "param_groups[0].lr"),
    (lambda s: _group(s, lr=float("nan")), "param_groups[0].lr"),
    (lambda s: _group(s, betas=(0.9,)), "param_groups[0].betas"),
    (lambda s: s["data_gen"].update(served=10**6), "data_gen.served"),  # an IndexError once training
    (lambda s: s["data_gen"].update(served=-3), "data_gen.served"),
    (lambda s: s["dat"].update(switch_step="abc"), "dat.switch_step"),  # a ValueError once training
    (lambda s: s["dat"].update(switch_step=-10**9), "dat.switch_step"),  # trained on, "attention on@-1000000000"
    (lambda s: s["dat"].update(switch_step=10**6), "after the checkpoint's step"),
    # another run's switch: tiny switches at 20 (fixed), so at step 40 attention is on from step 20
    (lambda s: s["dat"].update(switch_step=0), "attention on from step 0 at its step 40"),
    (lambda s: s["dat"].update(switch_step=None), "attention off at its step 40"),
], ids=["moment-shape", "moment-text", "lr-text", "lr-nan", "betas", "served-past-pool", "served-negative",
        "switch-text", "switch-negative", "switch-later", "switch-of-another-run", "switch-not-yet"])
def test_a_checkpoint_s_optimizer_schedule_or_data_state_of_the_wrong_kind_is_refused(run_dir, tmp_path, damage, expect):
    edit_checkpoint(run_dir, damage)
    refused(tmp_path, "state.pt", "does not fit this config", expect)


def test_a_checkpoint_whose_optimizer_lacks_a_setting_of_this_torch_resumes_with_the_fresh_value(run_dir, tmp_path):
    """A checkpoint saved by a torch whose AdamW had fewer settings (`maximize`, `foreach` and the
    like were added over versions) resumes: torch gives them their defaults as it loads, before the
    settings' kinds are checked."""
    edit_checkpoint(run_dir, lambda s: [s["optimizer"]["param_groups"][0].pop(key) for key in ("maximize", "foreach")])
    r = sweeper(*RESUME, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    assert json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])["step"] == 60


def test_a_truncated_checkpoint_is_refused(run_dir, tmp_path):
    path = run_dir / "checkpoint" / "state.pt"
    path.write_bytes(path.read_bytes()[:5000])
    refused(tmp_path, "state.pt", "not a readable checkpoint")


def test_a_checkpoint_far_larger_than_its_config_allows_is_refused_unread(run_dir, tmp_path):
    os.truncate(run_dir / "checkpoint" / "state.pt", 2**40)  # sparse: 1 TiB that takes no disk
    refused(tmp_path, "state.pt", "at most")


def test_a_checkpoint_that_is_a_fifo_is_refused_without_blocking(run_dir, tmp_path):
    path = run_dir / "checkpoint" / "state.pt"
    path.unlink()
    os.mkfifo(path)
    refused(tmp_path, "state.pt", "not a regular file")


def test_a_checkpoint_link_out_of_the_run_folder_is_refused(run_dir, tmp_path):
    shutil.copytree(run_dir / "checkpoint-40", tmp_path / "planted")
    (run_dir / "checkpoint").unlink()
    (run_dir / "checkpoint").symlink_to(tmp_path / "planted")
    refused(tmp_path, "checkpoint-STEP folder of this run")


@pytest.mark.parametrize("name, make, expect", [
    ("checkpoint-99", os.mkfifo, "not a folder"),  # removed as an old checkpoint: rmtree would open it and wait
    ("checkpoint-60", lambda p: p.write_text("x"), "not a folder"),  # the new checkpoint's own name
    ("checkpoint-60", lambda p: p.symlink_to("checkpoint-40"), "a link"),
    ("checkpoint.swap", os.mkdir, "not a link")])
def test_what_stands_at_a_checkpoint_s_name_is_refused_before_training(run_dir, tmp_path, name, make, expect):
    make(run_dir / name)
    refused(tmp_path, name, expect)


def test_a_fresh_run_refuses_a_folder_with_checkpoints_in_it(tmp_path):
    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / "checkpoint-5")
    refused(tmp_path, "already holds a run", args=("trial", "tiny", "--steps", "30", "--out", "run", "--threads", "1"))


def test_a_stale_swap_link_and_a_fifo_among_old_checkpoints_are_replaced_not_waited_on(tmp_path):
    from trainables.run_dir import RunDir

    run = RunDir(tmp_path / "run")
    (tmp_path / "new").mkdir()
    (tmp_path / "new" / "state.pt").write_bytes(b"weights")
    (tmp_path / "run").mkdir()
    os.mkfifo(tmp_path / "run" / "checkpoint-7")
    (tmp_path / "run" / "checkpoint.swap").symlink_to("checkpoint-7")  # a kill between the link's making and its rename
    run.keep_checkpoint(tmp_path / "new", 9)
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["checkpoint", "checkpoint-9"]
    assert (tmp_path / "run" / "checkpoint" / "state.pt").read_bytes() == b"weights"


@pytest.fixture(scope="module")
def other_run(tmp_path_factory) -> Path:
    """Another run of the same preset (another seed), as a trial beside it in a sweep would be."""
    root = tmp_path_factory.mktemp("other")
    threads = torch.get_num_threads()
    try:
        assert sweeper_main(["trial", "tiny", "--steps", "40", "--set", "seed=7", "--out", str(root / "run"),
                             "--threads", "1"]) == 0
    finally:
        torch.set_num_threads(threads)
    return root / "run"


def test_a_checkpoint_state_of_another_run_copied_in_is_refused(run_dir, other_run, tmp_path):
    # its config.yaml left as it was: only the report the state was taken with tells it is another run's
    shutil.copy(other_run / "checkpoint-40" / "state.pt", run_dir / "checkpoint-40" / "state.pt")
    refused(tmp_path, "checkpoint-40/state.pt: another run's checkpoint", "at step 40", "metrics.jsonl")


@pytest.mark.parametrize("name", ["metrics.jsonl", "config.yaml", "times.json", "checkpoint-40/state.pt",
                                  "checkpoint-40/config.yaml"])
def test_a_run_file_hard_linked_with_another_run_s_is_refused(run_dir, other_run, tmp_path, name):
    # both runs would append to one metrics.jsonl, or one resume from the other's state
    shutil.copytree(other_run, tmp_path / "other", symlinks=True)
    (run_dir / name).unlink()
    os.link(tmp_path / "other" / name, run_dir / name)
    refused(tmp_path, name, "hard-linked with another file (2 links)")


# --------------------------------------------------------------------------- metrics.jsonl


def test_a_line_that_is_not_a_report_is_refused(run_dir, tmp_path):
    lines = (run_dir / "metrics.jsonl").read_text().splitlines()
    (run_dir / "metrics.jsonl").write_text(lines[0] + "\nnot json\n" + lines[1] + "\n")
    refused(tmp_path, "metrics.jsonl line 2", "not a JSON report")


@pytest.mark.parametrize("line, expect", [('{"step": "20"}', "whole number"), ('{"step": 10}', "above the line before"),
                                          ('[1, 2]', "JSON object"), ('{"step": 60, "loss": "low"}', "loss"),
                                          ('{"step": 60, "loss": 1' + "0" * 400 + '}', "loss: a number no float holds")])
def test_a_report_of_the_wrong_kind_is_refused(run_dir, tmp_path, line, expect):
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(line + "\n")
    refused(tmp_path, "metrics.jsonl line 3", expect)


@pytest.mark.parametrize("name, expect", [("lo*ss", "lo*ss: not a metric name MLflow takes"),
                                          ("l" * 600, "600 characters; MLflow takes at most 250"),
                                          ("\\ud800", "\\ud800: not a metric name MLflow takes"),
                                          ("a//b", "a//b: not a metric name MLflow takes")])
def test_a_metric_name_mlflow_refuses_is_refused_before_anything_is_logged_or_trained(run_dir, tmp_path, name, expect):
    reports = run_dir / "metrics.jsonl"
    reports.write_text(reports.read_text().replace('"loss"', f'"{name}"', 1))  # a JSON escape for the surrogate
    refused(tmp_path, "metrics.jsonl line 1", expect)


def test_the_lenient_reader_leaves_out_a_line_whose_number_no_float_holds():
    """What the views and the MLflow sync read: float() of 10**400 was an OverflowError there."""
    from trainables.run_dir import parse_reports

    data = b'{"step": 1, "loss": 0.5}\n{"step": 2, "loss": 1' + b"0" * 400 + b'}\n{"step": 1' + b"0" * 400 + b'}\n'
    assert parse_reports(data) == [{"step": 1, "loss": 0.5}]


def test_every_metric_name_a_trial_reports_is_one_mlflow_takes():
    from trainables.metrics import reported_metrics
    from trainables.run_dir import metric_name_problem

    presets = sorted(p.stem for p in (Path(__file__).parents[1] / "trainables" / "presets").glob("*.yaml"))
    for preset in presets:
        cfg = load_trial_config(preset)
        curve = {"eval.curve_window": 5} if cfg.task.name not in ("set_complement", "othello") else {}
        for cfg in (cfg, with_overrides(cfg, {"ema.decay": 0.9, **curve})):  # raw_* and the position curve too
            assert not [n for n in reported_metrics(cfg) if metric_name_problem(n)], preset
    assert len(presets) > 5


def test_reports_far_past_the_checkpoint_are_not_dropped(run_dir, tmp_path):
    # two reports after the checkpoint: a run's checkpoint is at most one report behind
    last = json.loads((run_dir / "metrics.jsonl").read_text().splitlines()[-1])
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write(json.dumps({**last, "step": 50}) + "\n" + json.dumps({**last, "step": 60}) + "\n")
    refused(tmp_path, "checkpoint is at step 40", "would drop reports")


@pytest.mark.parametrize("damage", ["removed", "emptied", "first report only"])
def test_reports_lost_before_the_checkpoint_are_refused_not_resumed_without_them(run_dir, tmp_path, damage):
    reports = run_dir / "metrics.jsonl"
    if damage == "removed":
        reports.unlink()
    else:
        reports.write_text("" if damage == "emptied" else reports.read_text().splitlines()[0] + "\n")
    line = refused(tmp_path, "checkpoint is at step 40", "metrics.jsonl", "reports were lost")
    assert ("is missing" in line) == (damage == "removed"), line


def test_a_metrics_file_over_the_limit_is_refused_unread(run_dir, tmp_path):
    os.truncate(run_dir / "metrics.jsonl", 2**36)  # sparse
    refused(tmp_path, "metrics.jsonl", "at most")


def test_a_metrics_file_that_is_a_link_is_refused_and_its_target_untouched(run_dir, tmp_path):
    target = tmp_path / "precious.txt"
    target.write_text("not a run's\n")
    (run_dir / "metrics.jsonl").unlink()
    (run_dir / "metrics.jsonl").symlink_to(target)
    refused(tmp_path, "metrics.jsonl", "a link")
    assert target.read_text() == "not a run's\n"


# --------------------------------------------------------------------------- --threads, --out


def test_more_threads_than_cpus_are_refused(tmp_path):
    n = usable_cpus() + 1
    refused(tmp_path, "--threads", f"got {n}", args=("trial", "tiny", "--threads", str(n)))


def test_an_out_that_is_a_file_is_refused(tmp_path):
    (tmp_path / "run").write_text("a file\n")
    refused(tmp_path, "--out", args=("trial", "tiny", "--steps", "40", "--out", "run"))


# --------------------------------------------------------------------------- what a kill leaves resumes


@pytest.mark.integration  # trains 20-40 steps in a subprocess
def test_a_report_after_the_checkpoint_is_trained_again(run_dir, tmp_path):
    # a kill between report 40 and its checkpoint: the link still names checkpoint-20
    (run_dir / "checkpoint").unlink()
    shutil.copytree(run_dir / "checkpoint-40", run_dir / "checkpoint-20")
    (run_dir / "checkpoint").symlink_to("checkpoint-20")
    shutil.rmtree(run_dir / "checkpoint-40")
    edit_checkpoint(run_dir, lambda s: s.update(step=20, metrics={}, dat={"switch_step": None}))  # at 20: not yet on
    r = sweeper(*RESUME, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [20, 40, 60]


@pytest.mark.integration  # trains 20-40 steps in a subprocess
def test_a_report_cut_short_by_a_kill_is_left_out(run_dir, tmp_path):
    with open(run_dir / "metrics.jsonl", "ab") as f:
        f.write(b'{"step": 6')
    r = sweeper(*RESUME, cwd=tmp_path)
    assert r.returncode == 0, r.stderr[-2000:]
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == [20, 40, 60]


# --------------------------------------------------------------------------- properties


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.binary(max_size=40), st.builds(lambda s: json.dumps({"step": s}).encode(),
                                                                 st.one_of(st.integers(-5, 100), st.floats(), st.text(max_size=3)))),
                max_size=8))
def test_metrics_lines_parse_into_increasing_whole_steps_or_one_line(lines):
    data = b"\n".join(lines)
    try:
        reports, _ = strict_reports(data, "metrics.jsonl")
    except ConfigError as err:
        assert "\n" not in str(err) and len(str(err)) <= MAX_LINE
        return
    steps = [r.step for r in reports]
    assert all(isinstance(s, int) and s >= 0 for s in steps) and steps == sorted(set(steps))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(step=st.one_of(st.integers(-2**70, 2**70), st.floats(), st.none(), st.text(max_size=5), st.booleans()))
def test_any_checkpoint_step_resumes_only_at_its_own_report(finished_run, tmp_path, step):
    run = tmp_path / f"run{abs(hash(repr(step))) % 10**9}"
    if run.exists():
        shutil.rmtree(run)
    shutil.copytree(finished_run, run, symlinks=True)
    edit_checkpoint(run, lambda s: s.update(step=step, metrics={}))
    before = snapshot(run)
    cfg = with_overrides(load_trial_config("tiny"), {"steps": 60})
    try:
        resume = check_resume(run, cfg)
    except ConfigError as err:
        assert "\n" not in str(err)
    else:
        assert resume.step == 40 and step == 40
    assert snapshot(run) == before
    shutil.rmtree(run)


@pytest.mark.parametrize("override", [{"seed": True}, {"steps": False}, {"optim.lr": True}])
def test_a_flag_where_a_number_belongs_is_said_once(override):
    with pytest.raises(ConfigError) as caught:
        with_overrides(load_trial_config("tiny"), override, "--set")
    line = str(caught.value)
    assert "must be a number" in line and line.count("got ") == 1 and "mapping" not in line, line


@pytest.mark.parametrize("text", ["\n", "{}\n", "~\n", "# nothing\n", " " * 5000])
def test_an_emptied_saved_config_is_named_as_empty_not_as_a_config_of_defaults(run_dir, tmp_path, text):
    (run_dir / "config.yaml").write_text(text)
    refused(tmp_path, "config.yaml: an empty document")


def test_a_checkpoint_s_state_linked_out_of_the_run_is_refused(run_dir, tmp_path):
    # every other run file as a link was refused; state.pt was loaded from wherever it pointed
    path = run_dir / "checkpoint" / "state.pt"
    moved = tmp_path / "state_moved.pt"
    path.rename(moved)
    path.symlink_to(moved)
    refused(tmp_path, "state.pt", "a link")


@pytest.mark.parametrize("line, taken", [
    ('{"step": 60, "acc_3x": 0.5, "loss": 0.1, "diverged": 0.0}', True),
    ('{"step": 60, "acc_3x": NaN, "loss": 0.1, "diverged": 0.0}', False),  # relaunch logged it and wrote NaN into status.json
    ('{"step": 60, "acc_3x": 0.5, "loss": Infinity, "diverged": 0.0}', False),  # MLflow stored 1.8e308
    ('{"step": 60, "acc_3x": 0.0, "loss": NaN, "diverged": 1.0}', True),  # the trainer's own divergence report
    ('{"step": 60, "acc_3x": NaN, "loss": NaN, "diverged": 1.0}', False),
])
def test_a_report_with_a_value_no_measurement_has_is_not_read_as_one(line, taken):
    from trainables.run_dir import parse_reports

    first = '{"step": 50, "acc_3x": 0.4, "loss": 0.2, "diverged": 0.0}\n'
    assert [r["step"] for r in parse_reports((first + line + "\n").encode())] == ([50, 60] if taken else [50])


def test_a_report_past_the_run_s_budget_is_not_read_as_its_newest(tmp_path):
    from trainables.run_dir import RunDir

    (tmp_path / "metrics.jsonl").write_text('{"step": 50, "acc_3x": 0.4}\n{"step": 100, "acc_3x": 0.5}\n'
                                            '{"step": 9000, "acc_3x": 1.0}\n')  # no trainer of a 100-step budget wrote it
    assert RunDir(tmp_path, max_step=100).last_report() == {"step": 100, "acc_3x": 0.5}
    assert RunDir(tmp_path).last_report()["step"] == 9000  # a reader that knows no budget takes every report


@pytest.mark.parametrize("times", ['{"started_utc": 5, "ended_utc": ["x"]}', '{"started_utc": "yesterday"}',
                                   '["2026-11-27T18:01:56Z"]', '{"started_utc": "2026-11-27T18:01:56Z; rm -rf /"}'])
def test_a_run_s_times_of_the_wrong_form_are_not_known(tmp_path, times):
    # a run's record carries these as its provenance: a time the file's damage made is none
    from trainables.run_dir import RunDir

    (tmp_path / "times.json").write_text(times)
    assert RunDir(tmp_path).times() == {}
    (tmp_path / "times.json").write_text('{"started_utc": "2026-11-27T18:01:56Z", "ended_utc": 7}')
    assert RunDir(tmp_path).times() == {"started_utc": "2026-11-27T18:01:56Z"}
