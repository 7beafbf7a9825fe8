"""The no-learning reference scores (chance, recency, in-range oracle) against a brute-force reading."""

import pytest
import torch

from trainables.baselines import baseline_table, recency_predictions, reference_scores
from trainables.config import TaskConfig
from trainables.tasks import RECALL, STATE, SequenceTask


def _brute_recency(tokens: list[int], targets: list[int], kinds: list[int], vocab, majority: int) -> list[int]:
    """Walk the stream: a recall target is answered by the last value token seen before it."""
    out, last_value = [], -1
    for tok, kind in zip(tokens, kinds):
        out.append(last_value if kind == RECALL else majority if kind == STATE else -1)
        if vocab.value0 <= tok < vocab.query:
            last_value = tok
    return out


@pytest.mark.parametrize("name", ["modsum_recall", "recall"])
def test_recency_predictions_match_a_walk_of_the_stream(name):
    task = SequenceTask(TaskConfig(name=name, n_keys=4, min_len=3, max_len=20))
    b = task.sample_train(64, torch.Generator().manual_seed(0))
    state = b.targets[b.kinds == STATE]
    majority = int(state.mode().values) if state.numel() else -1
    pred = recency_predictions(b, task.vocab)
    for row in range(64):
        ref = _brute_recency(b.tokens[row].tolist(), b.targets[row].tolist(), b.kinds[row].tolist(), task.vocab, majority)
        assert pred[row].tolist() == ref


def test_recency_is_right_when_the_asked_key_was_the_last_stored():
    # the docstring example of trainables/tasks.py: ADD 3 | STORE k2 v7 | ADD 9 | QUERY k2 | STORE k2 v1 | ADD 4 | QUERY k2
    task = SequenceTask(TaskConfig(modulus=10, n_keys=16, n_values=10))
    v = task.vocab
    b = task.sample(torch.tensor([7]), torch.Generator().manual_seed(0))  # only for the Batch layout
    tokens = torch.tensor([[3, v.key0 + 2, v.value0 + 7, 9, v.query, v.key0 + 2, v.key0 + 2, v.value0 + 1, 4, v.query, v.key0 + 2]])
    targets = torch.tensor([[3, -100, -100, 2, -100, v.value0 + 7, -100, -100, 6, -100, v.value0 + 1]])
    kinds = torch.tensor([[STATE, 0, 0, STATE, 0, RECALL, 0, 0, STATE, 0, RECALL]])
    steps = torch.tensor([[0, 1, 1, 2, 3, 3, 4, 4, 5, 6, 6]])
    b = type(b)(tokens, targets, kinds, step_index=steps)
    scores = reference_scores(b, v, max_len=3)  # steps 3.. (0-based) lie beyond the range
    assert scores["recency"]["recall_acc"] == 1.0  # both queries ask the key stored last
    assert scores["chance"]["state_acc"] == pytest.approx(0.1)
    # in range (steps 0-2): two state targets, both right for the oracle; beyond: 1 state (6), 2 recalls
    assert scores["in_range"]["ood_recall_acc"] == 1.0
    majority = int(targets[kinds == STATE].mode().values)  # the best constant state answer of this set
    assert scores["in_range"]["acc"] == pytest.approx((2 + 2 + float(majority == 6)) / 5)


def test_baseline_table_names_match_the_trainers_metrics():
    from trainables.metrics import reported_metrics
    from trainables.config import TrialConfig

    cfg = TrialConfig()
    table = baseline_table(cfg.task, cfg.eval.multipliers, 32, cfg.eval.seed)
    names = reported_metrics(cfg)
    for scores in table.values():
        assert "ood_acc_3x" in scores and "ood_acc_1x" not in scores
        assert set(scores) <= names  # every baseline number has a trained counterpart to sit next to


def test_recency_beats_chance_on_recall_and_falls_with_length():
    cfg = TaskConfig()
    table = baseline_table(cfg, (1, 3), 128, seed=7)
    rec = table["recency"]
    assert rec["recall_acc_1x"] > table["chance"]["recall_acc_1x"]
    assert rec["ood_recall_acc_3x"] < rec["recall_acc_1x"]  # more stores in between: the last one is less often right
    # the in-range oracle is perfect at 1x and scores the recency baseline beyond the range
    assert table["in_range"]["acc_1x"] == 1.0
    assert table["in_range"]["ood_acc_3x"] == pytest.approx(rec["ood_acc_3x"])
