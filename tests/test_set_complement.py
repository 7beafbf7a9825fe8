"""The set complement task: targets equal the oracle; metrics are right on known predictors."""

import math

import pytest
import torch

from trainables.config import TaskConfig, TrialConfig, load_trial_config, with_overrides
from trainables.set_complement import (SetComplementTask, evaluate_set_complement, make_set_eval_sets,
                                       reference_set_targets, soft_cross_entropy)
from trainables.train import train

V = 12  # set tokens 0..11, PAD = 12


def _task(min_len=1, max_len=5) -> SetComplementTask:
    return SetComplementTask(TaskConfig(name="set_complement", n_tokens=V, min_len=min_len, max_len=max_len))


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_len, max_len", [(1, 5), (3, 9), (V - 1, V - 1)])  # the last leaves one token unseen
def test_targets_equal_the_reference_oracle(seed, min_len, max_len):
    batch = _task(min_len, max_len).sample_train(32, torch.Generator().manual_seed(seed))
    for tokens, target, mask in zip(batch.tokens.tolist(), batch.target, batch.mask):
        n = int(mask.sum())
        expected = torch.tensor(reference_set_targets(tokens[:n], V))
        assert torch.allclose(target[:n], expected)
        assert (target[n:] == 0).all()  # nothing asked after the end


def test_tokens_are_distinct_set_tokens_then_pad_and_the_mask_marks_the_sequence():
    lengths = torch.tensor([5, 1, 3, 5, 2])
    batch = _task().sample(lengths, torch.Generator().manual_seed(0))
    assert batch.tokens.shape == (5, 5) and batch.target.shape == (5, 5, V + 1)
    assert torch.equal(batch.mask.sum(1), lengths)
    assert torch.equal(batch.mask, torch.arange(5) < lengths[:, None])  # a prefix of each row
    assert (batch.tokens[~batch.mask] == V).all()  # PAD after the end
    for row, n in zip(batch.tokens.tolist(), lengths.tolist()):
        assert len(set(row[:n])) == n and all(0 <= t < V for t in row[:n])  # distinct, in range


def test_training_lengths_cover_min_len_to_max_len():
    lengths = _task(min_len=2, max_len=6).sample_train(400, torch.Generator().manual_seed(1)).mask.sum(1)
    assert set(lengths.tolist()) == {2, 3, 4, 5, 6}  # every length drawn, none outside


def test_target_rows_are_distributions_with_no_mass_on_seen_tokens_or_pad():
    batch = _task().sample(torch.tensor([5, 3, 1]), torch.Generator().manual_seed(0))
    sums = batch.target.sum(-1)
    assert torch.allclose(sums[batch.mask], torch.ones(int(batch.mask.sum())))
    assert (sums[~batch.mask] == 0).all()
    assert (batch.target[..., V] == 0).all()  # PAD
    seen_before_or_at = batch.tokens[:, None, :].expand(-1, 5, -1).masked_fill(torch.ones(5, 5).triu(1).bool(), V)
    assert (batch.target.gather(2, seen_before_or_at) == 0).all()  # [b, t, s]: token s <= t gets nothing at t


def test_same_seed_same_batch_and_different_seed_different_batch():
    a = _task().sample_train(8, torch.Generator().manual_seed(3))
    b = _task().sample_train(8, torch.Generator().manual_seed(3))
    c = _task().sample_train(8, torch.Generator().manual_seed(4))
    assert torch.equal(a.tokens, b.tokens) and torch.equal(a.target, b.target)
    assert not torch.equal(a.tokens, c.tokens)


def test_eval_sets_have_exactly_k_times_max_len_tokens_and_ignore_other_multipliers():
    sets = make_set_eval_sets(_task(max_len=2), (1, 2, 5), 6, seed=0)
    assert {k: s.tokens.shape for k, s in sets.items()} == {1: (6, 2), 2: (6, 4), 5: (6, 10)}
    assert all(s.mask.all() for s in sets.values())  # no padding: every row is full length
    again = make_set_eval_sets(_task(max_len=2), (5,), 6, seed=0)
    assert torch.equal(sets[5].tokens, again[5].tokens)


def test_a_length_that_leaves_nothing_unseen_is_refused():
    with pytest.raises(ValueError, match="`length < n_tokens` must hold.*got length 12 with n_tokens=12"):
        _task().sample(torch.tensor([3, V]), torch.Generator())
    with pytest.raises(ValueError, match="n_tokens"):  # the config refuses it before any run starts
        TrialConfig.model_validate({"task": {"name": "set_complement", "n_tokens": 30, "max_len": 8}})


class _Fixed(torch.nn.Module):
    """A 'model' that returns fixed logits for a known batch: each row is looked up by its tokens."""

    def __init__(self, logits, tokens):
        super().__init__()
        self.logits, self.tokens = logits, tokens

    def forward(self, tokens):
        row = (tokens[:, None, :] == self.tokens[None, :, :]).all(-1).int().argmax(1)  # (B,) index into self.tokens
        return self.logits[row]


@pytest.mark.parametrize("off", [-1e4, -math.inf])
def test_a_perfect_predictor_scores_zero_seen_mass_tv_and_kl(off):
    batch = _task(max_len=4).sample(torch.full((3,), 4), torch.Generator().manual_seed(1))
    perfect = torch.where(batch.target > 0, batch.target.clamp(min=1e-30).log(), torch.full_like(batch.target, off))
    model = _Fixed(perfect, batch.tokens).train()
    m = evaluate_set_complement(model, {1: batch}, batch_size=2)  # two chunks: 2 + 1 sequences
    assert m["seen_mass_1x"] < 1e-6 and m["tv_1x"] < 1e-6 and m["acc_1x"] == 1.0 and abs(m["loss_1x"]) < 1e-5
    assert model.training  # put back in training mode
    # its cross-entropy is the targets' mean entropy, log |unseen|, and finite even with -inf logits
    assert float(soft_cross_entropy(perfect, batch)) == pytest.approx(sum(math.log(V - t - 1) for t in range(4)) / 4, rel=1e-5)


def test_a_uniform_predictor_scores_the_analytic_seen_mass_tv_and_kl():
    batch = _task(max_len=4).sample(torch.full((3,), 4), torch.Generator().manual_seed(1))
    uniform = torch.zeros_like(batch.target)
    uniform[..., V] = -1e4  # uniform over the v set tokens, nothing on PAD
    m = evaluate_set_complement(_Fixed(uniform, batch.tokens), {1: batch}, batch_size=8)
    # at position t (t+1 tokens seen): mass (t+1)/v on seen tokens; TV = that mass, as the
    # unseen tokens each get 1/v < 1/(v-t-1) and the deficit equals the excess
    expected = sum((t + 1) / V for t in range(4)) / 4
    assert m["seen_mass_1x"] == pytest.approx(expected, abs=1e-6)
    assert m["tv_1x"] == pytest.approx(expected, abs=1e-6)
    expected_kl = sum(math.log(V / (V - t - 1)) for t in range(4)) / 4  # KL(target || uniform) = log(v / |unseen|)
    assert m["loss_1x"] == pytest.approx(expected_kl, abs=1e-5)


def test_argmax_on_a_seen_token_or_pad_is_a_miss():
    batch = _task(max_len=3).sample(torch.full((2,), 3), torch.Generator().manual_seed(5))
    logits = torch.zeros_like(batch.target)
    logits[0, torch.arange(3), batch.tokens[0]] = 5.0  # row 0: each position's own (seen) token wins
    logits[1, :, V] = 5.0  # row 1: PAD wins
    assert evaluate_set_complement(_Fixed(logits, batch.tokens), {1: batch}, batch_size=8)["acc_1x"] == 0.0


def test_soft_cross_entropy_equals_a_direct_computation():
    batch = _task().sample(torch.tensor([5, 2]), torch.Generator().manual_seed(2))
    logits = torch.randn(*batch.target.shape, generator=torch.Generator().manual_seed(0))
    direct = [-(batch.target[b, t] * logits[b, t].log_softmax(-1)).sum() for b in range(2) for t in range(5) if batch.mask[b, t]]
    assert len(direct) == 7  # PAD positions left out
    assert soft_cross_entropy(logits, batch) == pytest.approx(float(torch.stack(direct).mean()), rel=1e-6)


@pytest.fixture
def one_thread():
    """A tiny model on shared cores: one torch thread is several times faster than two fighting."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def test_attention_only_model_beats_the_uniform_predictor_after_100_steps(one_thread):
    cfg = with_overrides(load_trial_config("set_complement"), {"steps": 100, "eval.every": 100, "eval.n_sequences": 32})
    reports = []
    train(cfg, report=lambda m, c: reports.append(m))
    m = reports[-1]
    assert {f"{n}_{k}x" for n in ("tv", "seen_mass", "acc", "loss") for k in (1, 2, 3, 4)} <= set(m)
    # the baseline: all-zero logits (uniform over v + 1) on the same evaluation set
    sets = make_set_eval_sets(SetComplementTask(cfg.task), (1,), 32, cfg.eval.seed)
    base = evaluate_set_complement(_Fixed(torch.zeros_like(sets[1].target), sets[1].tokens), sets, batch_size=32)
    assert m["loss_1x"] < 0.9 * base["loss_1x"] and m["tv_1x"] < base["tv_1x"], (m, base)
