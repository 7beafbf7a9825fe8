"""experiments/ssm_runs.py reuses a reproduction run only where the configuration is the same."""

import json

import pytest

from experiments import ssm_runs


@pytest.fixture
def reproduction(tmp_path, monkeypatch):
    runs = [{"arm": "joint", "seed": 2027, "metrics": {"ood_acc_3x": 0.6, "time_total_s": 300.0}},
            {"arm": "DAT + curriculum", "seed": 2027, "metrics": {"ood_acc_3x": 0.9, "time_total_s": 280.0}}]
    path = tmp_path / "dat_reproduction_runs.json"
    path.write_text(json.dumps({"progress": {}, "runs": runs}))
    monkeypatch.setattr(ssm_runs, "REPRODUCTION_RUNS", path)
    monkeypatch.setattr(ssm_runs, "ROOT", tmp_path)
    return path


def test_the_lstm_arms_of_the_dat_plan_reuse_the_reproduction_s_runs(reproduction):
    plan = ssm_runs.plan("dat")
    kept = ssm_runs.reused_run(*plan["lstm hybrid_joint seed=2027"])
    assert kept["metrics"]["ood_acc_3x"] == 0.6 and kept["wall_s"] == 300.0 and kept["status"] == "completed"
    assert ssm_runs.reused_run(*plan["lstm hybrid_dat_curriculum seed=2027"])["metrics"]["ood_acc_3x"] == 0.9


def test_nothing_else_is_reused(reproduction):
    plan = ssm_runs.plan("dat")
    assert ssm_runs.reused_run(*plan["lstm hybrid_dat seed=2027"]) is None  # no such run in the file
    assert ssm_runs.reused_run(*plan["lstm hybrid_joint seed=2028"]) is None  # another seed
    assert ssm_runs.reused_run(*plan["rotation hybrid_joint seed=2027"]) is None  # another mixer
    preset, overrides = plan["lstm hybrid_joint seed=2027"]
    assert ssm_runs.reused_run(preset, {**overrides, "eval.seed": 7}) is None  # another evaluation set
    assert ssm_runs.reused_run(preset, {**overrides, "optim.lr": 1e-3}) is None  # any other setting
