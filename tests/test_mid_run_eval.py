"""Evaluations between the full ones use the first `eval.mid_run_sequences` of each set; the last step
and `eval.full_at` (ASHA's rungs, in a sweep) use the full sets; training never depends on which."""

import dataclasses

import pytest
import torch
from hypothesis import given, settings, strategies as st
from ray.tune.schedulers import ASHAScheduler

from sweeper.space import trial_config_for
from sweeper.space_file import load_space
from trainables.config import TrialConfig
from trainables.model import HybridLM
from trainables.objectives import make_objective
from trainables.train import CHECKPOINT_FILE, train
from conftest import ROOT


def _cfg(steps: int = 40, **eval_kw) -> TrialConfig:
    return TrialConfig.model_validate({
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "dat": {"mode": "fixed", "switch_step": 15},
        "optim": {"warmup_steps": 5, "batch_size": 16},
        "eval": {"every": 10, "n_sequences": 32, "mid_run_sequences": 8, **eval_kw},
        "steps": steps,
    })


def _run(cfg: TrialConfig) -> tuple[list[dict], list[dict]]:
    """(the reports, the model weights at each)."""
    reports, weights = [], []

    def report(metrics, ckpt):
        reports.append(metrics)
        weights.append(torch.load(f"{ckpt}/{CHECKPOINT_FILE}", weights_only=False)["model"])

    train(cfg, report=report)
    return reports, weights


def test_mid_run_reports_score_the_first_sequences_and_the_last_the_full_sets():
    cfg = _cfg()
    reports, weights = _run(cfg)
    assert [m["eval_sequences"] for m in reports] == [8, 8, 8, 32]
    objective = make_objective(cfg)
    full = objective.eval_sets(torch.device("cpu"))
    model = HybridLM(cfg.model, objective.vocab_size)
    for metrics, state, n in zip(reports, weights, [8, 8, 8, 32]):
        model.load_state_dict(state)
        model.attn_scale = metrics["attn_scale"]
        expected = objective.evaluate(model, {k: s.head(n) for k, s in full.items()})
        assert {k: metrics[k] for k in expected} == expected, metrics["step"]


def test_full_at_gives_the_full_sets_at_the_first_report_at_or_after_each_step():
    reports, _ = _run(_cfg(steps=50, full_at=(15,)))
    assert [(m["step"], m["eval_sequences"]) for m in reports] == [(10, 8), (20, 32), (30, 8), (40, 8), (50, 32)]


def test_evaluating_fewer_sequences_mid_run_changes_no_training():
    fewer, fewer_weights = _run(_cfg())
    every, every_weights = _run(_cfg(mid_run_sequences=32))
    assert all(torch.equal(fewer_weights[-1][k], every_weights[-1][k]) for k in every_weights[-1])
    same = lambda m: {k: v for k, v in m.items() if k != "steps_per_s"}  # noqa: E731
    assert same(fewer[-1]) == same(every[-1])  # the last report: full sets in both
    assert [m["loss"] for m in fewer] == [m["loss"] for m in every]


def test_mid_run_sequences_above_the_set_means_the_whole_set():
    reports, _ = _run(_cfg(mid_run_sequences=1000))
    assert {m["eval_sequences"] for m in reports} == {32}


@settings(max_examples=200, deadline=None)
@given(grace=st.integers(1, 500), span=st.integers(0, 5000), rf=st.one_of(st.integers(2, 6).map(float), st.floats(1.05, 10)))
def test_asha_rungs_are_the_steps_rays_asha_compares_at(tmp_path_factory, grace, span, rf):
    max_t = grace + span
    spec = load_space(ROOT / "search_spaces" / "smoke.yaml", n_samples=0)
    spec = spec.model_copy(update={"scheduler": spec.scheduler.model_copy(update={"grace_period": grace, "max_t": max_t,
                                                                                  "reduction_factor": rf})})
    bracket = ASHAScheduler(time_attr="step", metric="acc_3x", mode="max", grace_period=grace, max_t=max_t,
                            reduction_factor=rf)._brackets[0]
    milestones = [m for m, _ in bracket._rungs]
    rungs = spec.asha_rungs()
    # Ray records a trial at a rung with its first report at step >= the milestone
    assert set(rungs) == {min(s for s in range(1, max_t + 2) if s >= m) for m in milestones}


def test_a_sweep_trial_gets_ashas_rungs_and_a_fifo_one_none():
    spec = load_space(ROOT / "search_spaces" / "switch_time.yaml", n_samples=0)
    assert spec.scheduler.type == "asha" and spec.asha_rungs()
    assert trial_config_for(spec, {}).eval.full_at == spec.asha_rungs()
    fifo = spec.model_copy(update={"scheduler": spec.scheduler.model_copy(update={"type": "fifo"})})
    assert trial_config_for(fifo, {}).eval.full_at == ()


@pytest.mark.parametrize("field", ["tokens", "targets", "kinds", "step_index"])
def test_head_is_the_first_sequences_of_a_set(field):
    cfg = _cfg()
    full = make_objective(cfg).eval_sets(torch.device("cpu"))[3]
    assert torch.equal(getattr(full.head(5), field), getattr(full, field)[:5])
    assert dataclasses.fields(full.head(5)) == dataclasses.fields(full)
