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
