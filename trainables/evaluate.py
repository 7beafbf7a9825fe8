"""Exact-match evaluation on the fixed evaluation sets, at each length multiplier.

For every multiplier k (sequences of k x max_len steps) it reports

    acc_{k}x          per-target-token accuracy over all asked positions
    state_acc_{k}x    the same over ADD positions (state tracking), if the task has them
    recall_acc_{k}x   the same over QUERY positions (associative recall), if the task has them
    seq_acc_{k}x      share of sequences whose every asked position is right
    last_acc_{k}x     accuracy of each sequence's last asked position (its final step, k x max_len)

and, for k > 1, the same three accuracies over the targets *beyond the training range* only
(steps max_len+1 .. k x max_len, i.e. 0-based step index >= max_len):

    ood_acc_{k}x, ood_state_acc_{k}x, ood_recall_acc_{k}x

At k = 1 every step lies inside the training range, so there is no `ood_*_1x` (it would be
an empty average). `acc_{k}x` pools both: at 3x, a third of the steps lie inside the range.

With `curve_window` w > 0 it also reports the accuracy against the position in the sequence, on
the longest evaluation set (a causal model's answer at a step depends only on the steps before
it, so one set gives the curve at every length up to its own): `curve_acc_s{e}` over the
targets of steps e-w+1 .. e (1-based), for e = w, 2w, ... up to the set's length in steps.
"""

from __future__ import annotations

import torch
from torch import nn

from trainables.metrics import curve_names
from trainables.tasks import IGNORE, RECALL, STATE, Batch

KIND_METRIC = {STATE: "state_acc", RECALL: "recall_acc"}  # the metric name of each kind of target
OOD = "ood_"  # prefix of the beyond-the-training-range metrics


@torch.no_grad()
def evaluate(model: nn.Module, eval_sets: dict[int, Batch], kinds_present: tuple[int, ...], batch_size: int,
             max_len: int, curve_window: int = 0) -> dict[str, float]:
    was_training = model.training
    model.eval()
    metrics: dict[str, float] = {}
    longest = max(eval_sets)
    for k, full in eval_sets.items():
        correct = torch.zeros(2, 3, dtype=torch.long)  # [all | beyond max_len, kind]; kind 0 unused
        asked = torch.zeros(2, 3, dtype=torch.long)
        seq_right = last_right = 0
        n_bins = -(-k * max_len // curve_window) if curve_window and k == longest else 0
        bin_right, bin_asked = torch.zeros(n_bins), torch.zeros(n_bins)
        for i in range(0, full.tokens.shape[0], batch_size):
            tokens, targets, kinds, steps = (t[i : i + batch_size] for t in (full.tokens, full.targets, full.kinds, full.step_index))
            pred = model(tokens).argmax(-1)  # (B, L)
            is_asked = targets != IGNORE
            hit = (pred == targets) & is_asked
            beyond = steps >= max_len  # (B, L): the step lies beyond the training range
            for kind in kinds_present:
                of_kind = kinds == kind
                for scope, mask in ((0, of_kind), (1, of_kind & beyond)):
                    correct[scope, kind] += (hit & mask).sum().cpu()
                    asked[scope, kind] += mask.sum().cpu()
            seq_right += int(((hit == is_asked).all(dim=1)).sum())
            positions = torch.arange(targets.shape[1], device=targets.device)
            last = torch.where(is_asked, positions, -1).argmax(dim=1, keepdim=True)  # each row's last asked
            last_right += int(hit.gather(1, last).sum())
            if n_bins:
                bins = (steps[is_asked] // curve_window).cpu()
                bin_right += torch.bincount(bins, weights=hit[is_asked].float().cpu(), minlength=n_bins)
                bin_asked += torch.bincount(bins, minlength=n_bins).float()
        for scope, prefix in ((0, ""), (1, OOD)):
            if scope == 1 and k == 1:
                continue  # nothing lies beyond the range at 1x
            metrics[f"{prefix}acc_{k}x"] = float(correct[scope].sum() / asked[scope].sum().clamp(min=1))
            for kind in kinds_present:
                metrics[f"{prefix}{KIND_METRIC[kind]}_{k}x"] = float(correct[scope, kind] / asked[scope, kind].clamp(min=1))
        metrics[f"seq_acc_{k}x"] = seq_right / full.tokens.shape[0]
        metrics[f"last_acc_{k}x"] = last_right / full.tokens.shape[0]
        for name, right, n in zip(curve_names(max_len, (k,), curve_window) if n_bins else (), bin_right, bin_asked):
            metrics[name] = float(right / n) if n else 0.0
    model.train(was_training)
    return metrics
