"""The plain-switch experiment's rules (experiments/dat_plain_switch.py) on hand-made records: the
plan's phases, the registered selection rule, the abruptness measure, and a device pack's runs
recorded with their provenance."""

from __future__ import annotations

import json

import pytest
import yaml

from core.errors import ConfigError
from experiments import dat_plain_switch as dps
from experiments import dat_plain_switch_report as rep
from experiments import packs
from tests.test_dat_paper_depth import final, pack_of


def record(c: dict, **final_kw) -> dict:
    budget = dps.JOINT_CURRICULUM_BUDGET if dps.arm_of(c) == dps.JOINT_CURRICULUM else dps.BUDGET
    return {"budget": budget, "params": c, "reports": [{**final(**final_kw), "step": budget}]}


def explored(ood: dict[tuple, float] | None = None, failing: frozenset = frozenset()) -> list[dict]:
    """Every exploration cell on both seeds; `ood[(arm, lr, switch)]` its ood_acc_3x (default 0.5),
    the cells in `failing` missing the in-range check (recall 0.80)."""
    ood = ood or {}
    runs = []
    for lr in dps.LRS:
        for c in dps.explore_cells(lr):
            cell = (dps.arm_of(c), c["optim.lr"], c["dat.switch_step"])
            runs.append(record(c, ood3=ood.get(cell, 0.5), recall1=0.8 if cell in failing else 0.99))
    return runs


def test_an_empty_record_asks_for_the_first_learning_rate_s_grid_on_the_exploration_seeds():
    p = dps.plan({"runs": []})
    assert p.phase == "explore-lr0.001" and p.budget == dps.BUDGET and p.switch is None
    assert {(dps.arm_of(c), c["dat.switch_step"], c["seed"], c["eval.seed"]) for c in p.todo} == {
        (arm, sw, s, dps.EXPLORE_EVAL_SEED) for s in dps.EXPLORE_SEEDS
        for arm, sw in (("joint", dps.BUDGET), *(("DAT", sw) for sw in dps.SWITCHES))}
    assert all(c["optim.lr"] == 1e-3 for c in p.todo)


def test_the_best_passing_cell_is_chosen_and_a_better_failing_one_is_not():
    ood = {("DAT", 3e-3, 18_000): 0.95, ("DAT", 1e-3, 6_000): 0.9, ("joint", 3e-3, dps.BUDGET): 0.8}
    p = dps.plan({"runs": explored(ood, failing=frozenset({("DAT", 3e-3, 18_000)}))})
    assert p.phase == "confirm" and p.switch == 6_000
    dat = [c for c in p.todo if dps.arm_of(c) == "DAT"]
    joint = [c for c in p.todo if dps.arm_of(c) == "joint"]
    assert {(c["optim.lr"], c["dat.switch_step"]) for c in dat} == {(1e-3, 6_000)}
    assert {c["optim.lr"] for c in joint} == {3e-3}
    assert {c["seed"] for c in p.todo} == set(dps.SEEDS) and {c["eval.seed"] for c in p.todo} == {dps.EVAL_SEED}


def test_ties_go_to_the_lower_learning_rate_then_the_earlier_switch():
    (lr, switch), _ = dps.select(dps.runs_of({"runs": explored()}), "DAT")
    assert (lr, switch) == (1e-3, 3_000)


def test_when_no_cell_passes_the_best_of_all_is_chosen_and_called_undertrained():
    every = frozenset((arm, lr, sw) for lr in dps.LRS for arm, sw in (("joint", dps.BUDGET), *(("DAT", s) for s in dps.SWITCHES)))
    (lr, _), note = dps.select(dps.runs_of({"runs": explored({("joint", 3e-3, dps.BUDGET): 0.7}, every)}), "joint")
    assert lr == 3e-3 and "undertrained" in note


def test_after_the_confirmation_the_nope_transformer_then_joint_with_the_curriculum_at_its_longer_budget():
    runs = explored()
    p = dps.plan({"runs": runs})
    runs += [record(c) for c in p.todo]
    p = dps.plan({"runs": runs})
    assert p.phase == "nope" and {(c["model.mixer"], c["model.n_layers"], c["model.positional"], c["optim.lr"])
                                  for c in p.todo} == {("none", 4, "none", 3e-3)}
    runs += [record(c) for c in p.todo]
    p = dps.plan({"runs": runs})
    assert p.phase == "joint-curriculum" and p.budget == dps.JOINT_CURRICULUM_BUDGET
    assert {c["curriculum.state_only_steps"] for c in p.todo} == {dps.STATE_ONLY}
    runs += [record(c) for c in p.todo]
    assert dps.plan({"runs": runs}).phase == "done"


def curve_final(values: dict[int, float]) -> dict:
    return {f"curve_acc_s{e:03d}": values.get(e, 0.5) for e in range(5, 105, 5)}


@pytest.mark.parametrize("c15, c25, c35, expected", [
    (1.0, 1.0, 0.4, 0.3),    # flat in range, then 0.6 lost in two windows: a cliff
    (1.0, 0.9, 0.8, 0.0),    # the same slope either side of the range's end: no edge at all
    (0.95, 0.9, 0.8, 0.025),  # falling a little faster past the range: under the bar
])
def test_abruptness_is_the_drop_past_the_range_beyond_the_in_range_trend(c15, c25, c35, expected):
    assert rep.abruptness(curve_final({15: c15, 25: c25, 35: c35})) == pytest.approx(expected)


def test_the_shape_is_worded_by_the_interval_against_the_bar():
    assert rep.shape_words(0.06, 0.2) == "a cliff"
    assert rep.shape_words(-0.01, 0.049) == "gradual"
    assert rep.shape_words(0.01, 0.08) == "not resolved"


def test_holm_adjusts_the_smaller_p_by_the_number_of_tests_and_keeps_the_order():
    assert rep.holm([0.04, 0.01]) == pytest.approx([0.04, 0.02])
    assert rep.holm([0.03, 0.02]) == pytest.approx([0.04, 0.04])


def pack(tmp_path, runs: dict[str, dict], commit: str | None) -> object:
    """A device pack of these configs (each trained to its end, with its times.json) from `commit`."""
    times = json.dumps({"started_utc": "2026-11-27T18:01:56Z", "ended_utc": "2026-11-27T18:12:46Z"}).encode()
    return pack_of(tmp_path, {name: (config, config["steps"]) for name, config in runs.items()},
                   {f"{name}/times.json": times for name in runs},
                   {"accelerator": "NVIDIA H100", "torch": "2.11.0+cu130", "commit": commit})


def test_a_pack_s_runs_are_recorded_with_when_they_trained_the_commit_and_their_config_s_hash(tmp_path, monkeypatch):
    from experiments.record import config_hash

    monkeypatch.setattr(dps, "DATA", tmp_path / "record.json.gz")
    exp = dps.experiment()
    p = dps.plan(dps.load())
    seed0 = [c for c in p.todo if c["seed"] == 0]
    configs = {f"s0_{n}": packs.trial_config(exp.chunks, p, c, "cuda") for n, c in enumerate(seed0)}
    added, skipped = packs.import_pack(exp, pack(tmp_path, configs, "dac7cf7"))
    assert added == len(seed0) == 5, skipped
    runs = dps.load()["runs"]
    assert {r["commit"] for r in runs} == {"dac7cf7"}
    assert {(r["started_utc"], r["ended_utc"]) for r in runs} == {("2026-11-27T18:01:56Z", "2026-11-27T18:12:46Z")}
    assert sorted(r["config_hash"] for r in runs) == sorted(config_hash(c) for c in configs.values())
    assert dps.plan(dps.load()).todo == [c for c in p.todo if c["seed"] == 1]


def test_every_phase_s_sweep_file_passes_the_sweeper_s_own_validation():
    from sweeper.space import SearchSpace

    runs = explored()
    chunks = dps.chunks()
    while (p := dps.plan({"runs": runs})).phase != "done":
        _, space = chunks.space_for(p.phase, p.budget, dps.depth.chunk(p))
        SearchSpace.model_validate(space)
        runs += [record(c) for c in p.todo]


def test_a_finished_sweep_run_is_exported_with_its_times_the_launch_commit_and_its_config_hash(tmp_path, monkeypatch):
    from experiments.record import config_hash
    from experiments.sweep_chunks import COMMIT_SUFFIX
    from trainables.run_dir import RunDir

    monkeypatch.setattr(dps, "DATA", tmp_path / "record.json.gz")
    monkeypatch.setattr(dps, "SWEEPS", tmp_path / "sweeps")
    chunks = dps.chunks()
    p = dps.plan(chunks.load())
    config = packs.trial_config(chunks, p, p.todo[0])
    trial = tmp_path / "sweeps" / "dat_plain_x" / "trials" / "t0000"
    run = RunDir(trial)
    run.note_started()
    started = run.times()["started_utc"]
    for step in range(250, config["steps"] + 1, 250):
        run.append({**final(), "step": step})
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "config.yaml").write_text(yaml.safe_dump(config))
    run.keep_checkpoint(tmp_path / "ckpt", config["steps"])
    run.note_started()  # a resumed run keeps its first start
    run.note_ended()
    commit_file = tmp_path / "sweeps" / f"dat_plain_x{COMMIT_SUFFIX}"
    for damaged in ("\x1b[2J\nline2\n", "abc123\n"):  # escapes, or no commit: refused, the record not written
        commit_file.write_text(damaged)
        with pytest.raises(ConfigError, match="not a commit"):
            chunks.export()
        assert not dps.DATA.exists()
    commit = "0123456789abcdef0123456789abcdef01234567-dirty"
    commit_file.write_text(commit + "\n")
    assert chunks.export() == 1
    (recorded,) = chunks.load()["runs"]
    assert recorded["started_utc"] == started and recorded["ended_utc"] >= started
    assert recorded["commit"] == commit and recorded["config_hash"] == config_hash(config)


@pytest.mark.parametrize("planted, said", [("fifo", "not a regular file"), ("link", "a link"), ("bytes", "not a commit"),
                                           ("long", "not a commit"), ("empty", None), ("missing", None)])
def test_a_sweep_s_commit_file_is_read_bounded_and_checked(tmp_path, planted, said):
    import os

    from experiments.record import read_commit

    path = tmp_path / "s.commit"
    {"fifo": lambda: os.mkfifo(path), "link": lambda: path.symlink_to("/dev/zero"),
     "bytes": lambda: path.write_bytes(b"\xe9\xff\n"), "long": lambda: path.write_text("a" * 10_000_000),
     "empty": lambda: path.write_text(""), "missing": lambda: None}[planted]()
    if said is None:
        assert read_commit(path) is None
    else:
        with pytest.raises(ConfigError, match=said) as err:
            read_commit(path)
        assert "\n" not in str(err.value) and len(str(err.value)) < 300


def test_a_higher_abruptness_is_worded_as_a_steeper_fall_not_a_win():
    from experiments.dat_plain_switch_report import abruptness_wording

    assert abruptness_wording("NoPE", "joint", 0.017, 0.004, 0.029) == \
        "NoPE falls more abruptly than joint, by 0.017 [0.004, 0.029]"
    assert abruptness_wording("DAT", "joint", -0.02, -0.03, -0.01).startswith("joint falls more abruptly than DAT")
    assert "beats" not in abruptness_wording("DAT", "joint", 0.0, -0.003, 0.002)
