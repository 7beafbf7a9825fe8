"""The training loop: it learns, resumes bit-identically, and ends diverged runs cleanly."""

import dataclasses
import shutil

import pytest
import torch

from trainables.config import ConfigError, TrialConfig
from trainables.train import CHECKPOINT_FILE, train


def _cfg(steps: int, **kw) -> TrialConfig:
    base = {
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "dat": {"mode": "fixed", "switch_step": 15, "rewarmup_steps": 5},
        "optim": {"warmup_steps": 5, "batch_size": 16},
        "eval": {"every": 10, "n_sequences": 16},
        "steps": steps,
    }
    base.update(kw)
    return TrialConfig.model_validate(base)


def _final_state(cfg, resume_from=None, keep_at=None, tmp_path=None):
    """Run and return (final model state_dict, list of reports); optionally keep the checkpoint at a step."""
    reports, last = [], {}

    def report(metrics, ckpt):
        reports.append(metrics)
        state = torch.load(f"{ckpt}/{CHECKPOINT_FILE}", weights_only=False)
        last["model"] = state["model"]
        if keep_at is not None and metrics["step"] == keep_at:
            shutil.copytree(ckpt, tmp_path / "kept")

    train(cfg, report=report, resume_from=resume_from)
    return last["model"], reports


def test_resume_is_bit_identical_to_an_uninterrupted_run(tmp_path):
    # N=20 steps, checkpoint, 20 more == 40 straight; the DAT switch (15) and re-warmup straddle the cut
    straight, straight_reports = _final_state(_cfg(40))
    _final_state(_cfg(40), keep_at=20, tmp_path=tmp_path)
    resumed, resumed_reports = _final_state(_cfg(40), resume_from=tmp_path / "kept")
    assert straight.keys() == resumed.keys()
    for k in straight:
        assert torch.equal(straight[k], resumed[k]), k
    drop = ("steps_per_s",)
    tail = [{k: v for k, v in m.items() if k not in drop} for m in straight_reports[2:]]
    assert tail == [{k: v for k, v in m.items() if k not in drop} for m in resumed_reports]


def test_resume_before_the_switch_keeps_attention_held(tmp_path):
    straight, _ = _final_state(_cfg(40, dat={"mode": "fixed", "switch_step": 25}))
    _final_state(_cfg(40, dat={"mode": "fixed", "switch_step": 25}), keep_at=20, tmp_path=tmp_path)
    resumed, reports = _final_state(_cfg(40, dat={"mode": "fixed", "switch_step": 25}), resume_from=tmp_path / "kept")
    assert reports[-1]["switch_step"] == 25.0
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


@pytest.mark.parametrize("change", [{"seed": 1}, {"dat": {"mode": "fixed", "switch_step": 12, "rewarmup_steps": 5}}])
def test_a_checkpoint_of_another_config_is_refused_not_trained_on(tmp_path, change):
    _final_state(_cfg(40), keep_at=20, tmp_path=tmp_path)
    reports = []
    with pytest.raises(ConfigError, match=r"config.yaml: (seed|dat.switch_step): the checkpoint was trained with"):
        train(_cfg(40, **change), report=lambda m, c: reports.append(m), resume_from=tmp_path / "kept")
    assert reports == []
    resumed, _ = _final_state(_cfg(60), resume_from=tmp_path / "kept")  # `steps` alone may change
    assert resumed


def test_a_checkpoint_without_its_config_is_refused(tmp_path):
    _final_state(_cfg(40), keep_at=20, tmp_path=tmp_path)
    (tmp_path / "kept" / "config.yaml").unlink()
    with pytest.raises(ConfigError, match="config.yaml: no such file"):
        train(_cfg(40), resume_from=tmp_path / "kept")


@pytest.mark.slow
def test_a_short_cpu_run_lowers_the_loss():
    _, reports = _final_state(_cfg(150, eval={"every": 50, "n_sequences": 16}, optim={"lr": 3e-3, "batch_size": 32}))
    losses = [m["loss"] for m in reports]
    assert losses[-1] < 0.8 * losses[0]
    assert reports[-1]["train_acc"] > reports[0]["train_acc"]


def test_non_finite_loss_ends_the_run_as_diverged(tmp_path):
    _final_state(_cfg(20), keep_at=10, tmp_path=tmp_path)
    state = torch.load(tmp_path / "kept" / CHECKPOINT_FILE, weights_only=False)
    state["model"]["head.bias"][:] = float("nan")
    torch.save(state, tmp_path / "kept" / CHECKPOINT_FILE)
    reports = []
    result = train(_cfg(20), report=lambda m, c: reports.append((m, c)), resume_from=tmp_path / "kept")
    assert result.status == "diverged" and result.step == 10
    metrics, ckpt = reports[-1]
    assert metrics["diverged"] == 1.0 and metrics["acc_3x"] == 0.0 and ckpt is None
    assert metrics["state_acc_3x"] == 0.0 and metrics["recall_acc_3x"] == 0.0  # every length metric, at its worst


def test_a_diverged_set_complement_run_reports_the_worst_tv(tmp_path):
    from trainables.config import load_trial_config, with_overrides

    cfg = with_overrides(load_trial_config("set_complement"), {"steps": 20, "eval.every": 10, "eval.n_sequences": 8})
    kept = {}
    train(cfg, report=lambda m, c: kept.setdefault("ckpt", shutil.copytree(c, tmp_path / "kept")) if m["step"] == 10 else None)
    state = torch.load(tmp_path / "kept" / CHECKPOINT_FILE, weights_only=False)
    state["model"]["head.bias"][:] = float("nan")
    torch.save(state, tmp_path / "kept" / CHECKPOINT_FILE)
    reports = []
    train(cfg, report=lambda m, c: reports.append(m), resume_from=tmp_path / "kept")
    assert reports[-1]["diverged"] == 1.0 and reports[-1]["tv_3x"] == 1.0 and reports[-1]["seen_mass_4x"] == 1.0


def test_resuming_a_finished_run_reports_nothing_and_returns_its_final_metrics(tmp_path):
    # a finished run resumed has nothing new to say ; it returns its final report, which
    # the Ray adapter repeats itself when Ray restarts a trial from its final checkpoint
    _, first = _final_state(_cfg(20), keep_at=20, tmp_path=tmp_path)
    again = []
    result = train(_cfg(20), report=lambda m, c: again.append(m), resume_from=tmp_path / "kept")
    assert result.status == "completed" and result.step == 20
    assert again == [] and result.metrics == first[-1]


def test_report_carries_the_promised_metrics():
    _, reports = _final_state(_cfg(20))
    need = {"step", "loss", "train_acc", "acc_1x", "acc_2x", "acc_3x", "acc_4x", "state_acc_3x",
            "recall_acc_3x", "seq_acc_3x", "attention_active", "switch_step", "steps_per_s"}
    assert need <= reports[-1].keys()
    assert [m["step"] for m in reports] == [10, 20]
    assert reports[0]["switch_step"] == -1.0 and reports[1]["switch_step"] == 15.0


def test_fused_adamw_trains_like_the_reference_loop():
    # optim.fused rounds differently from torch's default loop; after 20 steps the weights agree closely
    fused, _ = _final_state(_cfg(20, optim={"warmup_steps": 5, "batch_size": 16, "fused": True}))
    loop, _ = _final_state(_cfg(20, optim={"warmup_steps": 5, "batch_size": 16, "fused": False}))
    for k in fused:
        assert torch.allclose(fused[k], loop[k], atol=1e-4), k


@pytest.mark.parametrize("batching", ["padded", "bucketed"])
def test_both_batchings_resume_bit_identically(tmp_path, batching):
    cfg = _cfg(40, task={"batching": batching})
    straight, _ = _final_state(cfg)
    _final_state(cfg, keep_at=20, tmp_path=tmp_path)
    resumed, _ = _final_state(cfg, resume_from=tmp_path / "kept")
    assert all(torch.equal(straight[k], resumed[k]) for k in straight)


def test_the_bucketed_loss_weighs_each_asked_position_by_the_pool_mean():
    # sum of per-position cross-entropy / the pool's mean count: the padded loss scaled by asked / mean
    from trainables.objectives import make_objective
    from trainables.tasks import RECALL, STATE

    objective = make_objective(_cfg(20))
    stream = objective.train_batches(16, torch.Generator().manual_seed(0))
    batch = stream.next()
    logits = torch.randn(*batch.tokens.shape, objective.vocab_size)
    for state_only in (False, True):
        out = objective.step(logits, batch, state_only)
        plain = objective.step(logits, dataclasses.replace(batch, asked_norm=None), state_only)
        norm = batch.asked_norm[STATE] + (0 if state_only else batch.asked_norm[RECALL])
        assert torch.allclose(out.loss, plain.loss * plain.asked / norm)
