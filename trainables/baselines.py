"""What a model scores without learning the task, on the same evaluation sets as the models.

Every results table of the sequence tasks shows these next to the trained systems, so that a
number like `acc_3x = 0.71` can be read against what costs nothing:

    chance     a uniform guess among the possible answers: 1/m for a state target (a sum mod m),
               1/V for a recall target (one of V values)
    recency    the simple heuristic: recall answers the most recently stored value (whatever its
               key; the right one whenever the asked key was the last stored), state answers the
               most frequent state answer of the set (the best constant answer, measured on the
               set itself, so a little optimistic)
    in_range   an oracle that is perfect on the steps inside the training range and plays the
               recency baseline beyond: what a model that learned nothing that generalises
               scores on the pooled `acc_{k}x` (its `ood_*` scores are the recency baseline's)

`reference_scores(batch, vocab, max_len)` is a pure function of one evaluation set (no model);
it returns the same metric names the trainer reports (`acc`, `state_acc`, `recall_acc` and
their `ood_` halves, without the `_{k}x` suffix), one dict per baseline.
"""

from __future__ import annotations

import torch
from torch import Tensor

from trainables.config import TaskConfig
from trainables.evaluate import KIND_METRIC, OOD
from trainables.tasks import RECALL, STATE, Batch, Vocab, make_eval_sets, make_task

BASELINES = ("chance", "recency", "in_range")


def recency_predictions(batch: Batch, vocab: Vocab) -> Tensor:
    """(B, T) the recency baseline's answer at every position: the latest value token strictly
    before it for recall, the set's most frequent state answer for state; -1 where it has none."""
    tokens, targets, kinds = batch.tokens, batch.targets, batch.kinds
    B, T = tokens.shape
    pos = torch.arange(T).expand(B, T)
    is_value = (tokens >= vocab.value0) & (tokens < vocab.query)
    last_value_at = torch.where(is_value, pos, -1).cummax(dim=1).values  # (B, T) latest value token at or before t
    recall_guess = torch.where(last_value_at >= 0, tokens.gather(1, last_value_at.clamp(min=0)), -1)  # a query's key
    # token is never a value, so "at or before" is "before" there
    state_targets = targets[kinds == STATE]
    majority = int(state_targets.mode().values) if state_targets.numel() else -1
    pred = torch.full_like(tokens, -1)
    pred = torch.where(kinds == RECALL, recall_guess, pred)
    return torch.where(kinds == STATE, torch.full_like(tokens, majority), pred)


def reference_scores(batch: Batch, vocab: Vocab, max_len: int) -> dict[str, dict[str, float]]:
    """baseline -> metric -> accuracy on this evaluation set (module docstring).

    Metrics: acc, state_acc, recall_acc over every target, and with `ood_` over the targets
    whose step lies beyond `max_len` (only when the set has any); kinds the set lacks are left out.
    """
    kinds, targets = batch.kinds, batch.targets
    beyond = batch.step_index >= max_len  # (B, T)
    recency_hit = recency_predictions(batch, vocab) == targets
    hit = {
        "chance": {STATE: 1.0 / vocab.modulus, RECALL: 1.0 / vocab.n_values},  # expected, per target
        "recency": recency_hit.double(),
        "in_range": torch.where(beyond, recency_hit.double(), torch.ones_like(recency_hit, dtype=torch.double)),
    }
    scopes = [("", torch.ones_like(beyond))] + ([(OOD, beyond)] if bool(beyond.any()) else [])
    out: dict[str, dict[str, float]] = {}
    for name in BASELINES:
        scores: dict[str, float] = {}
        for prefix, scope in scopes:
            total_hits, total_n = 0.0, 0
            for kind in (STATE, RECALL):
                mask = (kinds == kind) & scope
                n = int(mask.sum())
                if n == 0:
                    continue
                h = hit[name][kind] * n if name == "chance" else float(hit[name][mask].sum())
                scores[f"{prefix}{KIND_METRIC[kind]}"] = h / n
                total_hits, total_n = total_hits + h, total_n + n
            if total_n:
                scores[f"{prefix}acc"] = total_hits / total_n
        out[name] = scores
    return out


def baseline_table(task: TaskConfig, multipliers: tuple[int, ...], n_sequences: int, seed: int) -> dict[str, dict[str, float]]:
    """baseline -> `{metric}_{k}x` -> accuracy, on the evaluation sets a trial with these settings uses."""
    seq_task = make_task(task)
    sets = make_eval_sets(seq_task, multipliers, n_sequences, seed)
    table: dict[str, dict[str, float]] = {name: {} for name in BASELINES}
    for k, batch in sets.items():
        for name, scores in reference_scores(batch, seq_task.vocab, task.max_len).items():
            table[name].update({f"{metric}_{k}x": v for metric, v in scores.items()})
    return table
