"""The set complement task (seed 002): predict the uniform distribution over tokens not yet seen.

A sequence is `length` distinct tokens drawn uniformly without replacement from a vocabulary
of v set tokens (`task.n_tokens`); PAD (= v) fills the rest of the row. At every position t the
target is the uniform distribution over the set tokens absent from x_0..x_t (the current token
counts as seen). Worked example, v = 5 (tokens 0..4, PAD = 5), one sequence of length 3 in a
batch padded to 4::

    position   0                1              2            3
    tokens     3                0              4            PAD
    target     1/4 on {0,1,2,4}  1/3 on {1,2,4}  1/2 on {1,2}  all 0 (not asked)
    mask       1                1              1            0

Targets are rows of length V = v + 1 (the model's vocabulary); PAD never gets mass.

Training lengths are uniform in [min_len, max_len]; evaluation sets hold sequences of exactly
k x max_len tokens, so k x max_len < v must hold (something is always missing). The loss is
the soft-target cross-entropy. Metrics at each length multiplier k:

    seen_mass_{k}x   probability the model puts on tokens already seen (0 is right)
    tv_{k}x          total-variation distance to the target, 0.5 * sum |p - target|
    acc_{k}x         share of positions whose most likely token is a valid (unseen) one
    loss_{k}x        soft cross-entropy minus the target's entropy: the KL to the target

Why this task: a single attention layer must spread its output evenly over what is missing.
As more tokens are attended to, softmax compresses the logit displacements that separate
seen from unseen tokens, so precision erodes beyond the training lengths; and with many valid
next tokens the updates are noisy. Dropout and an EMA of the weights are the remedies the
paper tests (search_spaces/set_complement.yaml).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainables.config import TaskConfig


@dataclass(frozen=True)
class SetBatch:
    tokens: Tensor  # (B, T) int64; PAD after each sequence's end
    target: Tensor  # (B, T, V) float32: uniform over unseen set tokens at asked positions, 0 elsewhere
    mask: Tensor  # (B, T) bool: asked positions (inside the sequence)

    def head(self, n: int) -> "SetBatch":
        """The first `n` sequences (a view)."""
        return SetBatch(self.tokens[:n], self.target[:n], self.mask[:n])

    def to(self, device: torch.device | str) -> "SetBatch":
        return SetBatch(self.tokens.to(device), self.target.to(device), self.mask.to(device))


class SetComplementTask:
    """Samples padded batches of distinct set tokens with their soft targets."""

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        self.n_tokens = cfg.n_tokens
        self.pad = cfg.n_tokens

    @property
    def vocab_size(self) -> int:
        return self.n_tokens + 1

    def sample_train(self, batch_size: int, gen: torch.Generator) -> SetBatch:
        """A training batch: lengths uniform in [min_len, max_len] tokens."""
        lengths = torch.randint(self.cfg.min_len, self.cfg.max_len + 1, (batch_size,), generator=gen)
        return self.sample(lengths, gen)

    def sample(self, lengths: Tensor, gen: torch.Generator) -> SetBatch:
        """Sequences of the given lengths (B,), padded to the longest."""
        T, v = int(lengths.max()), self.n_tokens
        if T >= v:
            raise ValueError(
                f"set_complement: `length < n_tokens` must hold (a length-{v} sequence leaves no unseen token), "
                f"got length {T} with n_tokens={v}"
            )
        order = torch.rand(len(lengths), v, generator=gen).argsort(dim=1)[:, :T]  # (B, T) distinct tokens
        mask = torch.arange(T)[None, :] < lengths[:, None]  # (B, T)
        tokens = order.masked_fill(~mask, self.pad)
        seen = torch.zeros(len(lengths), T, v)  # (B, T, v): 1 where token was seen at or before t
        seen.scatter_(2, order[:, :, None], 1.0)
        seen = seen.cumsum(dim=1).clamp(max=1.0)
        unseen = (1.0 - seen) * mask[:, :, None]
        target = unseen / unseen.sum(-1, keepdim=True).clamp(min=1.0)
        target = F.pad(target, (0, 1))  # PAD never gets mass: (B, T, V)
        return SetBatch(tokens, target, mask)


def make_set_eval_sets(task: SetComplementTask, multipliers: tuple[int, ...], n_sequences: int, seed: int) -> dict[int, SetBatch]:
    """For each k: `n_sequences` sequences of exactly k * max_len tokens, from their own seed."""
    sets = {}
    for k in multipliers:
        gen = torch.Generator().manual_seed(seed + k)
        sets[k] = task.sample(torch.full((n_sequences,), k * task.cfg.max_len), gen)
    return sets


def soft_cross_entropy(logits: Tensor, batch: SetBatch) -> Tensor:
    """Mean over asked positions of -sum_v target * log_softmax(logits)."""
    # logits, batch.target: (B, T, V)
    per_position = -_target_times(batch.target, F.log_softmax(logits, dim=-1)).sum(-1)  # (B, T)
    return per_position[batch.mask].mean()


def argmax_unseen(scores: Tensor, target: Tensor) -> Tensor:
    """(B, T) bool: the highest-scoring token is one not yet seen (target mass > 0)."""
    # scores: logits or probabilities (B, T, V); target: (B, T, V)
    return target.gather(-1, scores.argmax(-1, keepdim=True)).squeeze(-1) > 0


def _target_times(target: Tensor, logp: Tensor) -> Tensor:
    """target * logp with 0 where the target is 0, so a -inf logit on a seen token costs nothing (not NaN)."""
    return torch.where(target > 0, target * logp, 0.0)


@torch.no_grad()
def evaluate_set_complement(model: nn.Module, eval_sets: dict[int, SetBatch], batch_size: int) -> dict[str, float]:
    """seen_mass/tv/acc/loss_{k}x (see the module docstring), each a mean over asked positions."""
    was_training = model.training
    model.eval()
    metrics: dict[str, float] = {}
    for k, full in eval_sets.items():
        sums = torch.zeros(4, dtype=torch.float64)  # seen_mass, tv, hits, kl
        n = 0
        for i in range(0, full.tokens.shape[0], batch_size):
            batch = SetBatch(full.tokens[i : i + batch_size], full.target[i : i + batch_size], full.mask[i : i + batch_size])
            logp = F.log_softmax(model(batch.tokens).float(), dim=-1)  # (B, T, V)
            p, target, m = logp.exp(), batch.target, batch.mask
            valid = target > 0  # (B, T, V): unseen set tokens
            seen_mass = (p * ~valid)[..., :-1].sum(-1)  # mass on seen set tokens (PAD excluded)
            tv = 0.5 * (p - target).abs().sum(-1)
            hit = argmax_unseen(logp, target).float()
            entropy = -_target_times(target, target.clamp(min=1e-30).log()).sum(-1)
            kl = -_target_times(target, logp).sum(-1) - entropy
            for j, x in enumerate((seen_mass, tv, hit, kl)):
                sums[j] += x[m].double().sum().cpu()
            n += int(m.sum())
        seen_mass, tv, acc, kl = (float(s) / max(1, n) for s in sums)
        metrics.update({f"seen_mass_{k}x": seen_mass, f"tv_{k}x": tv, f"acc_{k}x": acc, f"loss_{k}x": kl})
    model.train(was_training)
    return metrics


def reference_set_targets(tokens: list[int], v: int) -> list[list[float]]:
    """Per-sequence oracle: the target rows (length v + 1) for a list of distinct tokens."""
    rows, seen = [], set()
    for x in tokens:
        seen.add(x)
        missing = [t for t in range(v) if t not in seen]
        rows.append([1.0 / len(missing) if t in missing else 0.0 for t in range(v)] + [0.0])
    return rows
