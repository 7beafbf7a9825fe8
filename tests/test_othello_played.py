"""The Othello played-target experiment's record and report (experiments/othello_played.py) on
hand-made sweep folders: only finished played-target runs are recorded, once, and the registered
paired test and its wording follow the numbers."""

from __future__ import annotations

import pytest
import yaml

from experiments import othello_played as op
from trainables.run_dir import RunDir

STEPS = op.space()["budget"]["max_steps"]


def fake_run(sweep, name, seed, decay, acc1, acc3, last_step=STEPS, targets="played", raw3=None):
    run = RunDir(sweep / "trials" / name)
    for step in range(250, last_step + 1, 250):
        m = {"step": step, "acc_1x": acc1, "acc_2x": (acc1 + acc3) / 2, "acc_3x": acc3}
        if decay:
            m["raw_acc_3x"] = acc3 if raw3 is None else raw3
        run.append(m)
    ckpt = sweep / f"ckpt-{name}"
    ckpt.mkdir(parents=True)
    (ckpt / "config.yaml").write_text(yaml.safe_dump({
        "steps": STEPS, "seed": seed, "ema": {"decay": decay}, "task": {"name": "othello", "othello_targets": targets}}))
    run.keep_checkpoint(ckpt, last_step)


@pytest.fixture
def where(tmp_path, monkeypatch):
    monkeypatch.setattr(op, "DATA", tmp_path / "runs.json.gz")
    monkeypatch.setattr(op, "SWEEPS", tmp_path / "sweeps")
    monkeypatch.setattr(op, "LEGAL", tmp_path / "absent.json")
    results = tmp_path / "othello.md"
    results.write_text("# Othello\n\nearlier text\n")
    monkeypatch.setattr(op, "RESULTS", results)
    return tmp_path / "sweeps" / op.space()["name"]


def test_only_finished_played_target_runs_are_recorded_and_only_once(where):
    fake_run(where, "t0000", 7201, 0.0, 0.95, 0.60)
    fake_run(where, "t0001", 7201, 0.999, 0.95, 0.65)
    fake_run(where, "t0002", 7202, 0.0, 0.95, 0.60, last_step=2500)  # interrupted: left out
    fake_run(where, "t0003", 7203, 0.0, 0.95, 0.60, targets="legal")  # not this experiment: left out
    assert op.export() == 2
    assert op.export() == 0
    assert sorted(op.key(r["params"]) for r in op.load()["runs"]) == [(7201, 0.0), (7201, 0.999)]
    assert "needs two seeds" in op.report(op.load())


def test_ema_ahead_at_3x_on_every_seed_but_not_more_than_at_1x_is_worded_as_not_specific(where):
    for i, seed in enumerate(op.space()["space"]["seed"]["choices"]):
        bump = 0.02 + 0.005 * i
        fake_run(where, f"t{2 * i:04d}", seed, 0.0, 0.90, 0.60 + 0.01 * i)
        fake_run(where, f"t{2 * i + 1:04d}", seed, 0.999, 0.90 + bump, 0.60 + 0.01 * i + bump, raw3=0.60 + 0.01 * i)
    assert op.export() == 10
    body = op.write_report(op.load())
    assert "EMA helps, not specifically beyond the training length" in body
    assert "5 of 5" in body and "largest |Δ acc_3x| 0.0000" in body
    text = op.RESULTS.read_text()
    assert text.startswith("# Othello\n\nearlier text\n") and text.count(op.BEGIN) == 1
    op.write_report(op.load())  # rebuilt in place, not appended twice
    assert op.RESULTS.read_text().count(op.BEGIN) == 1


@pytest.mark.parametrize(("gain3", "gain1", "expected"), [
    ((0.03, 0.04, 0.05, 0.035, 0.045), (0.0, 0.001, -0.001, 0.0, 0.002), "EMA helps length generalisation"),
    ((0.03, -0.04, 0.01, -0.02, 0.005), (0.0,) * 5, "no effect detected"),
    ((-0.03, -0.04, -0.05, -0.035, -0.045), (0.0,) * 5, "EMA hurts at 3x"),
])
def test_the_registered_wording_follows_the_intervals(where, gain3, gain1, expected):
    for i, seed in enumerate(op.space()["space"]["seed"]["choices"]):
        fake_run(where, f"t{2 * i:04d}", seed, 0.0, 0.90, 0.60)
        fake_run(where, f"t{2 * i + 1:04d}", seed, 0.999, 0.90 + gain1[i], 0.60 + gain3[i])
    op.export()
    assert expected in op.report(op.load())


@pytest.mark.parametrize("damage", [op.BEGIN + "\nno end\n", op.END + "\n" + op.BEGIN + "\n", 2 * (op.BEGIN + op.END)])
def test_a_damaged_section_is_one_line_and_the_page_is_left_as_it_was(where, damage, capsys):
    page = "# Othello\n" + damage
    op.RESULTS.write_text(page)
    with pytest.raises(SystemExit) as e:
        op.write_report(op.load())
    assert e.value.code == 2 and "damaged" in capsys.readouterr().err
    assert op.RESULTS.read_text() == page


GOOD = {"params": {"seed": 7201, "ema.decay": 0.0}, "reports": [{"step": 250, "acc_1x": 0.5, "acc_2x": 0.4, "acc_3x": 0.3}]}


@pytest.mark.parametrize("run, said", [
    ({**GOOD, "params": {"ema.decay": 0.0}}, "a whole seed"),
    ({**GOOD, "params": {"seed": "abc", "ema.decay": 0.0}}, "a whole seed"),
    ({**GOOD, "params": [1]}, "not a recorded run"),
    ({**GOOD, "reports": []}, "not a recorded run"),
    ({**GOOD, "reports": [{"step": 250, "acc_1x": 0.5, "acc_2x": 0.4}]}, "lacks acc_3x"),
    ({**GOOD, "reports": [{"step": 250, "acc_1x": 0.5, "acc_2x": 0.4, "acc_3x": 7.0}]}, "lacks acc_3x as an accuracy"),
    ({**GOOD, "reports": [{"step": 500}, {**GOOD["reports"][0]}]}, "the steps rising"),
    ({**GOOD, "reports": [{**GOOD["reports"][0], "raw_acc_3x": "x"}]}, "raw_acc_3x, not as an accuracy"),
], ids=["seed-missing", "seed-text", "params-a-list", "no-reports", "acc3-missing", "acc3-7", "steps-back", "raw-text"])
def test_a_recorded_run_of_another_kind_is_one_line_for_export_and_report(where, run, said):
    import gzip
    import json

    from core.errors import ConfigError

    op.DATA.write_bytes(gzip.compress(json.dumps({"space": op.space(), "runs": [GOOD, run]}).encode(), mtime=0))
    before = (op.DATA.read_bytes(), op.RESULTS.read_bytes())
    for verb in ("export", "report"):
        with pytest.raises(ConfigError, match=f"run 1: .*{said}") as refused:
            op.main([verb])
        assert "\n" not in str(refused.value) and len(str(refused.value)) <= 300
    assert (op.DATA.read_bytes(), op.RESULTS.read_bytes()) == before


def test_a_run_recorded_twice_is_one_line(where):
    import gzip
    import json

    from core.errors import ConfigError

    op.DATA.write_bytes(gzip.compress(json.dumps({"space": op.space(), "runs": [GOOD, GOOD]}).encode(), mtime=0))
    with pytest.raises(ConfigError, match="run 1: the same run as run 0"):
        op.load()


@pytest.mark.parametrize("damage, said", [("acc-7", "not a played-target run"), ("no-task", "lacks 'task'")])
def test_export_adds_a_finished_trial_only_if_the_record_s_reader_takes_it(where, damage, said):
    # `export` appended a run `load` then refused (every verb after advised restoring the record), or a config
    # without `task` was a KeyError traceback
    from core.errors import ConfigError

    fake_run(where, "t0000", 7201, 0.5, 0.90, 7.0 if damage == "acc-7" else 0.6)
    if damage == "no-task":
        config = where / "trials" / "t0000" / "checkpoint" / "config.yaml"
        config.write_text(yaml.safe_dump({k: v for k, v in yaml.safe_load(config.read_text()).items() if k != "task"}))
    with pytest.raises(ConfigError, match=said) as refused:
        op.export()
    assert "\n" not in str(refused.value) and len(str(refused.value)) <= 300
    assert not op.DATA.exists()


@pytest.mark.parametrize("final", [{}, {"acc_3x": "0.5"}], ids=["acc3-missing", "acc3-text"])
def test_a_legal_target_row_without_an_accuracy_is_one_line_not_a_traceback(where, final):
    import json

    from core.errors import ConfigError

    for i, seed in enumerate(op.space()["space"]["seed"]["choices"]):
        fake_run(where, f"t{2 * i:04d}", seed, 0.0, 0.90, 0.60)
        fake_run(where, f"t{2 * i + 1:04d}", seed, 0.999, 0.90, 0.62)
    op.export()
    op.LEGAL.write_text(json.dumps({"long_gpt_ema0.0_drop0.0_s7101": {"final": final},
                                    "long_gpt_ema0.999_drop0.0_s7101": {"final": {"acc_3x": 0.5}}}))
    with pytest.raises(ConfigError, match="not an accuracy") as refused:
        op.report(op.load())
    assert "\n" not in str(refused.value)
