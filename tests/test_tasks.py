"""The vectorised task generators against the brute-force per-sequence reference."""

import pytest
import torch

from trainables.config import TaskConfig
from trainables.tasks import (IGNORE, NO_TARGET, RECALL, STATE, BucketedBatches, SequenceTask, make_eval_sets,
                              reference_targets, train_batches)

TASKS = ["modsum_recall", "modsum", "recall"]


@pytest.mark.parametrize("name", TASKS)
@pytest.mark.parametrize("seed", range(5))
def test_generator_matches_reference(name, seed):
    task = SequenceTask(TaskConfig(name=name, n_keys=4, min_len=1, max_len=30))  # few keys: many overwrites
    batch = task.sample_train(200, torch.Generator().manual_seed(seed))
    for tokens, targets, kinds in zip(batch.tokens.tolist(), batch.targets.tolist(), batch.kinds.tolist()):
        ref_targets, ref_kinds = reference_targets(tokens, task.vocab)
        assert targets == ref_targets
        assert kinds == ref_kinds


@pytest.mark.parametrize("name", TASKS)
def test_lengths_in_steps_stay_in_the_training_range(name):
    cfg = TaskConfig(name=name, min_len=5, max_len=12)
    task = SequenceTask(cfg)
    batch = task.sample_train(500, torch.Generator().manual_seed(1))
    # each step is one ADD token or two STORE/QUERY tokens; count steps from the stream
    is_pad = batch.tokens == task.vocab.pad
    n_tokens = (~is_pad).sum(1)
    second_tokens = ((batch.tokens >= task.vocab.value0) & (batch.tokens < task.vocab.query)).sum(1) + (
        (batch.tokens[:, :-1] == task.vocab.query).sum(1)
    )
    n_steps = n_tokens - second_tokens
    assert n_steps.min() == 5 and n_steps.max() == 12  # both ends of the range are drawn


def test_only_target_positions_are_supervised():
    task = SequenceTask(TaskConfig())
    b = task.sample_train(300, torch.Generator().manual_seed(2))
    assert torch.equal(b.targets == IGNORE, b.kinds == NO_TARGET)
    # state answers are digits, recall answers are values
    assert (b.targets[b.kinds == STATE] < task.vocab.modulus).all()
    recall = b.targets[b.kinds == RECALL]
    assert ((recall >= task.vocab.value0) & (recall < task.vocab.query)).all()


def test_step_shares_follow_the_config():
    task = SequenceTask(TaskConfig(p_store=0.3, p_query=0.2, min_len=50, max_len=50))
    b = task.sample_train(400, torch.Generator().manual_seed(3))
    n_add = (b.kinds == STATE).sum().item()
    n_query = (b.kinds == RECALL).sum().item()
    total = 400 * 50
    # queries before the first store fall back to ADD, so ADD is slightly above 0.5
    assert 0.49 < n_add / total < 0.56
    assert 0.17 < n_query / total < 0.21


def test_same_seed_same_batch_and_different_seed_different_batch():
    task = SequenceTask(TaskConfig())
    a = task.sample_train(64, torch.Generator().manual_seed(7))
    b = task.sample_train(64, torch.Generator().manual_seed(7))
    c = task.sample_train(64, torch.Generator().manual_seed(8))
    assert torch.equal(a.tokens, b.tokens)
    assert not torch.equal(a.tokens[:, :10], c.tokens[:, :10])


def test_eval_sets_have_exact_lengths_and_ignore_the_training_seed():
    task = SequenceTask(TaskConfig(max_len=10))
    sets = make_eval_sets(task, (1, 3), n_sequences=20, seed=5)
    again = make_eval_sets(task, (3,), n_sequences=20, seed=5)
    assert torch.equal(sets[3].tokens, again[3].tokens)  # independent of the other multipliers
    for k, batch in sets.items():
        for tokens in batch.tokens.tolist():
            targets, kinds = reference_targets(tokens, task.vocab)
            n_pad = tokens.count(task.vocab.pad)
            n_two_token_steps = sum(1 for t in tokens if t == task.vocab.query or task.vocab.value0 <= t < task.vocab.query)
            assert len(tokens) - n_pad - n_two_token_steps == 10 * k


def test_reference_rejects_a_query_of_an_unstored_key():
    vocab = SequenceTask(TaskConfig()).vocab
    with pytest.raises(AssertionError):
        reference_targets([vocab.query, vocab.key0 + 3], vocab)


# --------------------------------------------------------------------------- bucketed training batches


def _rows(batch, pad):
    """Each sequence of a batch as a tuple of (token, target, kind) triples, PAD stripped."""
    out = []
    for tok, tgt, kind in zip(batch.tokens.tolist(), batch.targets.tolist(), batch.kinds.tolist()):
        n = sum(t != pad for t in tok)
        out.append(tuple(zip(tok[:n], tgt[:n], kind[:n])))
    return out


def test_a_bucketed_pool_serves_exactly_the_sequences_of_one_padded_draw():
    # the same generator state: the pool's batches hold, between them, the rows of one padded draw of
    # pool x batch_size sequences, each once, so lengths and content follow the padded sampler's distribution
    task = SequenceTask(TaskConfig())
    stream = BucketedBatches(task, batch_size=8, gen=torch.Generator().manual_seed(4), pool=5)
    served = [stream.next() for _ in range(5)]
    draw = task.sample_train(40, torch.Generator().manual_seed(4))
    assert sorted(r for b in served for r in _rows(b, task.vocab.pad)) == sorted(_rows(draw, task.vocab.pad))


def test_bucketed_batches_group_neighbouring_lengths_and_carry_no_pad_column():
    task = SequenceTask(TaskConfig())
    stream = BucketedBatches(task, batch_size=16, gen=torch.Generator().manual_seed(1), pool=8)
    spans = []
    for _ in range(8):
        b = stream.next()
        length = (b.tokens != task.vocab.pad).sum(1)
        assert int(length.max()) == b.tokens.shape[1]  # trimmed to its own longest
        spans.append((int(length.min()), int(length.max())))
    spans.sort()
    assert all(hi <= lo_next for (_, hi), (lo_next, _) in zip(spans, spans[1:]))  # sorted pools do not overlap


def test_bucketed_norm_is_the_pool_mean_of_asked_positions_by_kind():
    task = SequenceTask(TaskConfig())
    stream = BucketedBatches(task, batch_size=8, gen=torch.Generator().manual_seed(2), pool=4)
    batches = [stream.next() for _ in range(4)]
    for kind in (STATE, RECALL):
        mean = sum(int((b.kinds == kind).sum()) for b in batches) / 4
        assert all(float(b.asked_norm[kind]) == pytest.approx(mean) for b in batches)


@pytest.mark.parametrize("cut", [0, 3, 5, 7])
def test_a_bucketed_stream_restored_mid_pool_continues_identically(cut):
    task = SequenceTask(TaskConfig())
    a = BucketedBatches(task, batch_size=8, gen=torch.Generator().manual_seed(3), pool=5)
    for _ in range(cut):
        a.next()
    state = a.get_state()
    b = BucketedBatches(task, batch_size=8, gen=torch.Generator().manual_seed(99), pool=5)
    b.set_state(state)
    for _ in range(8):  # across the next pool's draw too
        x, y = a.next(), b.next()
        assert torch.equal(x.tokens, y.tokens) and torch.equal(x.targets, y.targets)


def test_padded_stream_is_the_old_sampler_with_the_old_checkpoint_state():
    task = SequenceTask(TaskConfig())
    gen = torch.Generator().manual_seed(5)
    stream = train_batches(task, "padded", 16, gen)
    assert isinstance(stream.get_state(), torch.Tensor)  # the generator state, as checkpoints always held it
    assert torch.equal(stream.next().tokens, task.sample_train(16, torch.Generator().manual_seed(5)).tokens)


def _reference_step_index(tokens: list[int], vocab) -> list[int]:
    """Brute force: the 0-based step of each token (an ADD is one token, a STORE or QUERY two), -1 at PAD."""
    out, step, i = [], 0, 0
    while i < len(tokens) and tokens[i] != vocab.pad:
        width = 1 if tokens[i] < vocab.key0 else 2
        out += [step] * width
        step, i = step + 1, i + width
    return out + [-1] * (len(tokens) - i)


@pytest.mark.parametrize("name", TASKS)
def test_step_index_matches_a_parse_of_the_stream(name):
    task = SequenceTask(TaskConfig(name=name, n_keys=4, min_len=1, max_len=30))
    batch = task.sample_train(100, torch.Generator().manual_seed(4))
    for tokens, steps in zip(batch.tokens.tolist(), batch.step_index.tolist()):
        assert steps == _reference_step_index(tokens, task.vocab)
    # an evaluation set of k x max_len steps has exactly (k - 1) x max_len steps beyond max_len
    sets = make_eval_sets(task, (3,), 8, seed=5)
    assert (sets[3].step_index.max(1).values == 89).all()
