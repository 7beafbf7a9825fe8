"""experiments/dat_paper_depth.py end to end, shrunk: every phase through a real `sweeper launch`
(local Ray, Optuna, an embedded MLflow store), the record, the report and the preset."""

from __future__ import annotations

import pytest

from experiments import dat_paper_depth as dpd
from experiments import dat_paper_depth_report as rep
from trainables.config import load_trial_config

pytestmark = [pytest.mark.slow, pytest.mark.integration, pytest.mark.long]  # `make test-long`; its pieces have unit tests


def test_every_phase_trains_through_the_sweeper_and_the_record_rebuilds_the_page(tmp_path, monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", f"sqlite:///{tmp_path}/mlflow.db")
    monkeypatch.setattr(dpd, "DATA", tmp_path / "runs.json.gz")
    monkeypatch.setattr(dpd, "SWEEPS", tmp_path / "sweeps")
    monkeypatch.setattr(dpd, "PRESET", tmp_path / "hybrid_dat_paper.yaml")
    monkeypatch.setattr(dpd, "BUDGETS", (40,))
    monkeypatch.setattr(dpd, "EVAL_EVERY", 10)
    monkeypatch.setattr(dpd, "SEEDS", (5101,))
    monkeypatch.setattr(rep, "SEEDS", (5101,))
    monkeypatch.setattr(dpd, "IN_RANGE", (("acc_1x", 0.0), ("recall_acc_1x", 0.0)))  # every tiny run passes
    monkeypatch.setattr(dpd, "TRANSFORMER_CANDIDATES", ((1, "rope", 3e-3), (1, "none", 3e-3)))
    small = {"d_model": 16, "n_layers": 1, "n_heads": 2, "mixer": "lstm", "attention": True, "positional": "rope"}
    monkeypatch.setattr(dpd, "FIXED", {**dpd.FIXED, "model": small, "eval": {**dpd.FIXED["eval"], "n_sequences": 16}})

    assert dpd.run() == 0
    data = dpd.load()
    arms = sorted(dpd.arm_of(r["params"], r["budget"]) for r in data["runs"])
    # explore: joint and attention off, then DAT and DAT + curriculum, on both seeds; confirm: the
    # three arms on the one seed; the two Transformer candidates, then the chosen one confirmed
    assert arms == sorted(["joint", dpd.OFF, "DAT", "DAT + curriculum"] * 2 + list(dpd.ARMS) + [dpd.JOINT_CURRICULUM]
                          + [dpd.TRANSFORMER] * 3)
    assert all(r["reports"][-1]["step"] == 40 for r in data["runs"])
    assert dpd.plan(data).phase == "done"
    assert dpd.run() == 0 and len(dpd.load()["runs"]) == len(data["runs"])  # nothing trains twice

    import yaml  # the configs `configs` writes for elsewhere are the ones the sweeps trained, device aside

    trained = [yaml.safe_load(f.read_text()) for f in sorted((tmp_path / "sweeps").glob("*/trials/*/checkpoint/config.yaml"))]
    assert len(trained) == len(data["runs"])
    for config in trained:
        assert dpd.trial_config(dpd.plan(data), dpd.params_of(config), "cpu") == config

    page = tmp_path / "page.md"
    page.write_text("# title\n\n## Results\n")
    section = rep.report(data, dpd.plan(data), page)
    assert "| joint | 1 | pass" in section and "### The pure Transformer's candidates" in section
    assert "| joint + curriculum | 1 | pass" in section and "| DAT + curriculum - joint + curriculum | `ood_acc_3x` | 1 |" in section
    assert dpd.main(["preset"]) == 0
    preset = load_trial_config(dpd.PRESET)
    assert preset.steps == 40 and preset.model.n_layers == 1 and preset.dat.mode == "fixed"
