"""Exact-match evaluation on the fixed evaluation sets, at each length multiplier.

For every multiplier k (sequences of k x max_len steps) it reports

    acc_{k}x          per-target-token accuracy over all asked positions
    state_acc_{k}x    the same over ADD positions (state tracking), if the task has them
    recall_acc_{k}x   the same over QUERY positions (associative recall), if the task has them
    seq_acc_{k}x      share of sequences whose every asked position is right
"""

from __future__ import annotations

import torch
from torch import nn

from trainables.tasks import IGNORE, RECALL, STATE, Batch

KIND_METRIC = {STATE: "state_acc", RECALL: "recall_acc"}  # the metric name of each kind of target


@torch.no_grad()
def evaluate(model: nn.Module, eval_sets: dict[int, Batch], kinds_present: tuple[int, ...], batch_size: int) -> dict[str, float]:
    was_training = model.training
    model.eval()
    metrics: dict[str, float] = {}
    for k, full in eval_sets.items():
        correct = torch.zeros(3, dtype=torch.long)  # indexed by kind; index 0 unused
        asked = torch.zeros(3, dtype=torch.long)
        seq_right = 0
        for i in range(0, full.tokens.shape[0], batch_size):
            tokens, targets, kinds = (t[i : i + batch_size] for t in (full.tokens, full.targets, full.kinds))
            pred = model(tokens).argmax(-1)  # (B, L)
            is_asked = targets != IGNORE
            hit = (pred == targets) & is_asked
            for kind in kinds_present:
                correct[kind] += (hit & (kinds == kind)).sum().cpu()
                asked[kind] += (kinds == kind).sum().cpu()
            seq_right += int(((hit == is_asked).all(dim=1)).sum())
        metrics[f"acc_{k}x"] = float(correct.sum() / asked.sum().clamp(min=1))
        for kind in kinds_present:
            metrics[f"{KIND_METRIC[kind]}_{k}x"] = float(correct[kind] / asked[kind].clamp(min=1))
        metrics[f"seq_acc_{k}x"] = seq_right / full.tokens.shape[0]
    model.train(was_training)
    return metrics
