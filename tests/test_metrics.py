"""The metric names a sweep can score by are exactly what the trainer reports."""

from __future__ import annotations

import typing

import pytest

from trainables.config import TaskConfig, TrialConfig
from trainables.metrics import direction, family_of, reported_metrics
from trainables.train import train

TASKS = typing.get_args(TaskConfig.model_fields["name"].annotation)


def _cfg(task: str, ema: float) -> TrialConfig:
    data = {
        "task": {"name": task},
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2},
        "dat": {"mode": "none"},
        "optim": {"batch_size": 4, "warmup_steps": 1},
        "eval": {"every": 2, "n_sequences": 4, "multipliers": [1, 2]},
        "ema": {"decay": ema},
        "steps": 2,
    }
    if task == "set_complement":
        data["task"].update({"n_tokens": 64, "max_len": 8, "min_len": 2})
        data["model"].update({"mixer": "none", "mlp_ratio": 0, "n_layers": 1, "positional": "none"})
    if task == "othello":
        data["task"].update({"max_len": 10, "min_len": 10})
        data["model"].update({"mixer": "none"})
    return TrialConfig.model_validate(data)


@pytest.mark.parametrize("ema", [0.0, 0.9])
@pytest.mark.parametrize("task", TASKS)
def test_reported_metrics_match_a_real_run(task, ema):
    cfg = _cfg(task, ema)
    reports = []
    train(cfg, report=lambda m, ckpt: reports.append(m))
    assert reports and set(reports[-1]) == reported_metrics(cfg)


@pytest.mark.parametrize("metric, expected", [
    ("acc_3x", "max"), ("raw_acc_3x", "max"), ("state_acc_12x", "max"), ("tv_3x", "min"), ("loss_2x", "min"),
    ("seen_mass_1x", "min"), ("loss", "min"), ("train_acc", "max"), ("lr", None), ("step", None),
])
def test_direction(metric, expected):
    assert direction(metric) == expected


def test_family_of():
    assert family_of("raw_recall_acc_3x") == "recall_acc" and family_of("tv_10x") == "tv" and family_of("loss") == "loss"


def test_beyond_range_metrics_exist_only_for_multipliers_above_one():
    cfg = _cfg("modsum_recall", 0.0)  # multipliers 1, 2
    names = reported_metrics(cfg)
    assert {"ood_acc_2x", "ood_state_acc_2x", "ood_recall_acc_2x"} <= names
    assert not any(n.startswith("ood_") and n.endswith("_1x") for n in names)
    assert direction("ood_acc_3x") == "max" and family_of("raw_ood_recall_acc_3x") == "ood_recall_acc"


def test_beyond_range_accuracy_counts_only_the_steps_beyond_max_len():
    """A fake model right on every in-range step and wrong on every later one: 1.0 at 1x, ood 0.0,
    and the pooled acc_3x is exactly the in-range share of the targets."""
    import torch

    from trainables.evaluate import evaluate
    from trainables.tasks import IGNORE, RECALL, STATE, SequenceTask, make_eval_sets

    task = SequenceTask(TaskConfig())
    sets = make_eval_sets(task, (1, 3), 16, seed=3)
    vocab = task.vocab_size

    class InRangeOracle(torch.nn.Module):
        def forward(self, tokens):  # (B, L) -> (B, L, V)
            full = next(b for b in sets.values() if b.tokens.shape == tokens.shape and torch.equal(b.tokens, tokens))
            answer = full.targets.clamp(min=0)
            answer = torch.where(full.step_index >= task.cfg.max_len, (answer + 1) % vocab, answer)  # wrong beyond
            return torch.nn.functional.one_hot(answer, vocab).float()

    m = evaluate(InRangeOracle(), sets, (STATE, RECALL), batch_size=16, max_len=task.cfg.max_len)
    assert m["acc_1x"] == 1.0 and "ood_acc_1x" not in m
    assert m["ood_acc_3x"] == 0.0 and m["ood_state_acc_3x"] == 0.0 and m["ood_recall_acc_3x"] == 0.0
    b3 = sets[3]
    asked = b3.targets != IGNORE
    in_range_share = float((asked & (b3.step_index < task.cfg.max_len)).sum() / asked.sum())
    assert m["acc_3x"] == pytest.approx(in_range_share)


def test_last_target_and_position_curve_match_a_per_sequence_loop():
    """A fake model wrong wherever a hash of the position says so: `last_acc_{k}x` and every point of
    the curve (`eval.curve_window`) equal what a plain Python loop over the sequences counts."""
    import torch

    from trainables.evaluate import evaluate
    from trainables.metrics import curve_names
    from trainables.tasks import IGNORE, RECALL, STATE, SequenceTask, make_eval_sets

    task = SequenceTask(TaskConfig())
    sets = make_eval_sets(task, (1, 2), 12, seed=5)
    vocab, window, max_len = task.vocab_size, 7, task.cfg.max_len

    def wrong_at(b, t):  # a fixed, irregular pattern of mistakes
        return (b * 31 + t * 17) % 5 == 0

    class Patchy(torch.nn.Module):
        def forward(self, tokens):
            full = next(s for s in sets.values() if s.tokens.shape == tokens.shape and torch.equal(s.tokens, tokens))
            answer = full.targets.clamp(min=0)
            b, t = torch.meshgrid(torch.arange(tokens.shape[0]), torch.arange(tokens.shape[1]), indexing="ij")
            answer = torch.where(wrong_at(b, t), (answer + 1) % vocab, answer)
            return torch.nn.functional.one_hot(answer, vocab).float()

    m = evaluate(Patchy(), sets, (STATE, RECALL), batch_size=64, max_len=max_len, curve_window=window)
    for k, s in sets.items():
        last_right = 0
        for b in range(s.tokens.shape[0]):
            asked = [t for t in range(s.tokens.shape[1]) if s.targets[b, t] != IGNORE]
            last_right += not wrong_at(b, asked[-1])
        assert m[f"last_acc_{k}x"] == pytest.approx(last_right / s.tokens.shape[0])
    s = sets[2]  # the curve comes from the longest set
    names = curve_names(max_len, (1, 2), window)
    assert names[0] == "curve_acc_s007" and len(names) == -(-2 * max_len // window)
    for i, name in enumerate(names):
        right = asked = 0
        for b in range(s.tokens.shape[0]):
            for t in range(s.tokens.shape[1]):
                if s.targets[b, t] != IGNORE and i * window <= s.step_index[b, t] < (i + 1) * window:
                    asked += 1
                    right += not wrong_at(b, t)
        assert asked and m[name] == pytest.approx(right / asked)
    assert not any(n.startswith("curve_") for n in evaluate(Patchy(), sets, (STATE, RECALL), 64, max_len))
