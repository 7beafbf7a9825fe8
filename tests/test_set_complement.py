"""The set complement task: targets equal the oracle; metrics are right on known predictors."""

import math

import pytest
import torch

from trainables.config import TaskConfig, TrialConfig, load_trial_config, with_overrides
from trainables.set_complement import (SetComplementTask, evaluate_set_complement, make_set_eval_sets,
                                       reference_set_targets, soft_cross_entropy)
from trainables.train import train

V = 12


def _task(min_len=1, max_len=5) -> SetComplementTask:
    return SetComplementTask(TaskConfig(name="set_complement", n_tokens=V, min_len=min_len, max_len=max_len))


@pytest.mark.parametrize("seed", range(4))
def test_targets_equal_the_reference_oracle(seed):
    batch = _task().sample_train(32, torch.Generator().manual_seed(seed))
    for row in range(32):
        n = int(batch.mask[row].sum())
        tokens = batch.tokens[row, :n].tolist()
        assert len(set(tokens)) == n and all(0 <= t < V for t in tokens)  # distinct set tokens
        assert (batch.tokens[row, n:] == V).all() and not batch.mask[row, n:].any()  # PAD after the end
        expected = torch.tensor(reference_set_targets(tokens, V))
        assert torch.allclose(batch.target[row, :n], expected)
        assert (batch.target[row, n:] == 0).all()


def test_target_rows_are_distributions_with_no_mass_on_seen_tokens_or_pad():
    batch = _task().sample(torch.tensor([5, 3, 1]), torch.Generator().manual_seed(0))
    sums = batch.target.sum(-1)
    assert torch.allclose(sums[batch.mask], torch.ones(int(batch.mask.sum())))
    assert (batch.target[..., V] == 0).all()
    assert batch.target[0, 4].gather(0, batch.tokens[0]).sum() == 0  # all 5 seen tokens get 0 at the end


def test_generation_is_deterministic_for_a_seed_and_eval_sets_have_exact_lengths():
    a = _task().sample_train(8, torch.Generator().manual_seed(3))
    b = _task().sample_train(8, torch.Generator().manual_seed(3))
    assert torch.equal(a.tokens, b.tokens)
    sets = make_set_eval_sets(_task(max_len=2), (1, 2, 5), 6, seed=0)
    assert {k: s.tokens.shape for k, s in sets.items()} == {1: (6, 2), 2: (6, 4), 5: (6, 10)}
    assert all(s.mask.all() for s in sets.values())


def test_a_length_that_leaves_nothing_unseen_is_refused():
    with pytest.raises(ValueError, match="no unseen token"):
        _task().sample(torch.tensor([V]), torch.Generator())
    with pytest.raises(ValueError, match="n_tokens"):
        TrialConfig.model_validate({"task": {"name": "set_complement", "n_tokens": 30, "max_len": 8}})


class _Fixed(torch.nn.Module):
    """A 'model' whose logits are a function of the batch it was built for."""

    def __init__(self, logits):
        super().__init__()
        self.logits = logits

    def forward(self, tokens):
        return self.logits[: tokens.shape[0]]


def test_metrics_of_a_perfect_and_of_a_uniform_predictor():
    batch = _task(max_len=4).sample(torch.full((3,), 4), torch.Generator().manual_seed(1))
    perfect = torch.where(batch.target > 0, batch.target.clamp(min=1e-30).log(), torch.full_like(batch.target, -1e4))
    m = evaluate_set_complement(_Fixed(perfect), {1: batch}, batch_size=8)
    assert m["seen_mass_1x"] < 1e-6 and m["tv_1x"] < 1e-6 and m["acc_1x"] == 1.0 and abs(m["loss_1x"]) < 1e-5
    # uniform over the v set tokens: at position t (t+1 seen), seen mass (t+1)/v and TV (t+1)/v
    uniform = torch.zeros_like(batch.target)
    uniform[..., V] = -1e4
    m = evaluate_set_complement(_Fixed(uniform), {1: batch}, batch_size=8)
    expected = sum((t + 1) / V for t in range(4)) / 4
    assert m["seen_mass_1x"] == pytest.approx(expected, abs=1e-6)
    assert m["tv_1x"] == pytest.approx(expected, abs=1e-6)
    expected_kl = sum(math.log(V / (V - t - 1)) for t in range(4)) / 4  # KL(target || uniform) = log(v / |unseen|)
    assert m["loss_1x"] == pytest.approx(expected_kl, abs=1e-5)


def test_soft_cross_entropy_equals_a_direct_computation():
    batch = _task().sample(torch.tensor([5, 2]), torch.Generator().manual_seed(2))
    logits = torch.randn(*batch.target.shape, generator=torch.Generator().manual_seed(0))
    direct = [-(batch.target[b, t] * logits[b, t].log_softmax(-1)).sum() for b in range(2) for t in range(5) if batch.mask[b, t]]
    assert soft_cross_entropy(logits, batch) == pytest.approx(float(torch.stack(direct).mean()), rel=1e-6)


def test_attention_only_model_learns_set_complement():
    cfg = with_overrides(load_trial_config("set_complement"), {"steps": 150, "eval.every": 150, "eval.n_sequences": 64})
    reports = []
    train(cfg, report=lambda m, c: reports.append(m))
    m = reports[-1]
    assert m["tv_1x"] < 0.5 and m["seen_mass_1x"] < 0.3, m
    assert {"tv_4x", "seen_mass_4x", "acc_4x", "loss_4x"} <= set(m)
