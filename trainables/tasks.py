"""Synthetic tasks: state tracking (modular sum), associative recall, and both at once.

A sequence is a stream of *steps*; each step is one or two tokens::

    ADD d       `d`      target at `d`: running sum of all ADD digits so far, mod m   (state)
    STORE k v   `k v`    no target
    QUERY k     `? k`    target at `k`: the value most recently stored under k      (recall)

Vocabulary (size m + K + V + 2), for modulus m, K keys and V values::

    [0, m)            digits; also the answers of ADD steps
    [m, m+K)          keys
    [m+K, m+K+V)      values; also the answers of QUERY steps
    m+K+V             `?`, the query marker
    m+K+V+1           PAD (after the end of a sequence)

Worked example, m=10, K=16, V=10 (keys k0..k15 are tokens 10..25, values v0..v9 are 26..35)::

    steps    ADD 3 | STORE k2 v7 | ADD 9 | QUERY k2 | STORE k2 v1 | ADD 4 | QUERY k2
    tokens   3       k2 v7         9       ?  k2      k2 v1         4       ?  k2
    targets  3       .  .          2       .  v7      .  .          6       .  v1
    kinds    S       .  .          S       .  R       .  .          S       .  R

Positions marked `.` are ignored by the loss (target IGNORE = -100). A QUERY only asks
for a key that was stored earlier in the same sequence: it picks one of the earlier
STORE steps uniformly. Lengths are counted in steps: training lengths are uniform in
[min_len, max_len]; evaluation at k x max_len steps. The running sum persists across
STORE and QUERY steps, so the state must be carried over arbitrarily long gaps.

Tasks:
    modsum_recall   ADD/STORE/QUERY with shares 1-p_store-p_query / p_store / p_query
    modsum          ADD only (the state-tracking half)
    recall          STORE/QUERY only, in the ratio p_store : p_query (the recall half)

Generators are pure, vectorised torch code driven by an explicit torch.Generator (no
Python loop over tokens); `reference_targets` is the per-sequence Python oracle the
tests hold them to.

Training batches (`task.batching`, read by the trainer through `train_batches`):

    padded    each step draws `batch_size` sequences, lengths uniform in [min_len, max_len],
              right-padded to the longest (~45% of a default batch's positions are PAD).
    bucketed  (default) every `BUCKET_POOL` steps, one draw of BUCKET_POOL x batch_size sequences,
              exactly as `padded` draws each of its batches (every sequence independent, lengths
              uniform); they are sorted by token length, cut into BUCKET_POOL batches of
              neighbouring lengths, each trimmed to its own longest, and served in a random order
              (~3% PAD). Each sequence is used once, so the distribution of training sequences
              (lengths, content) and the share of each length in the stream are exactly those of
              `padded`. What changes: a batch holds sequences of similar token length instead of
              a uniform mix, and the draws of a seed are different ones. The loss still weighs
              every asked position alike: it is the sum over the batch's asked positions divided by
              the mean number of asked positions per batch in its pool (`Batch.asked_norm`), where
              `padded` divides by the batch's own count; both give each position ~1/720 of a
              step's loss (the pool's mean is the expectation of a batch's count, which varies
              by +-3% between padded batches), so a batch of short sequences moves the weights
              less than one of long ones, in proportion to the targets it holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import Tensor

from trainables.config import TaskConfig
from trainables.state_checks import whole_number

IGNORE = -100  # target of positions that are not asked anything
NO_TARGET, STATE, RECALL = 0, 1, 2  # values of Batch.kinds
ADD, STORE, QUERY = 0, 1, 2  # step types


@dataclass(frozen=True)
class Batch:
    tokens: Tensor  # (B, T) int64, PAD after each sequence's end
    targets: Tensor  # (B, T) int64, IGNORE where nothing is asked
    kinds: Tensor  # (B, T) int64: NO_TARGET, STATE or RECALL
    # bucketed batches: mean asked positions per batch of the pool, by kind (3,) float; the loss
    # divides its sum by the kinds it trains. None: the loss is the mean over the batch's own.
    asked_norm: Tensor | None = None
    # (B, T) int64: the 0-based index of the step each token belongs to, -1 at PAD; set by `sample`
    # (evaluation sets keep it: a target whose step index is >= max_len lies beyond the training range)
    step_index: Tensor | None = None

    def head(self, n: int) -> "Batch":
        """The first `n` sequences (a view; the pool's `asked_norm`, if any, is kept as it is)."""
        steps = self.step_index[:n] if self.step_index is not None else None
        return Batch(self.tokens[:n], self.targets[:n], self.kinds[:n], self.asked_norm, steps)

    def to(self, device: torch.device | str) -> "Batch":
        norm = self.asked_norm.to(device) if self.asked_norm is not None else None
        steps = self.step_index.to(device) if self.step_index is not None else None
        return Batch(self.tokens.to(device), self.targets.to(device), self.kinds.to(device), norm, steps)


@dataclass(frozen=True)
class Vocab:
    modulus: int
    n_keys: int
    n_values: int

    @property
    def key0(self) -> int:
        return self.modulus

    @property
    def value0(self) -> int:
        return self.modulus + self.n_keys

    @property
    def query(self) -> int:
        return self.value0 + self.n_values

    @property
    def pad(self) -> int:
        return self.query + 1

    @property
    def size(self) -> int:
        return self.pad + 1


class SequenceTask:
    """One of modsum_recall / modsum / recall; samples padded batches of token streams."""

    def __init__(self, cfg: TaskConfig):
        self.cfg = cfg
        self.vocab = Vocab(cfg.modulus, cfg.n_keys, cfg.n_values)
        if cfg.name == "modsum":
            self.p_store, self.p_query = 0.0, 0.0
        elif cfg.name == "recall":
            total = cfg.p_store + cfg.p_query
            self.p_store, self.p_query = cfg.p_store / total, cfg.p_query / total
        else:
            self.p_store, self.p_query = cfg.p_store, cfg.p_query
        self.p_add = 1.0 - self.p_store - self.p_query

    @property
    def vocab_size(self) -> int:
        return self.vocab.size

    @property
    def kinds_present(self) -> tuple[int, ...]:
        """Which target kinds this task asks for (STATE, RECALL or both)."""
        return tuple(k for k, on in ((STATE, self.p_add > 0), (RECALL, self.p_query > 0)) if on)

    def sample_train(self, batch_size: int, gen: torch.Generator) -> Batch:
        """A training batch: lengths uniform in [min_len, max_len] steps."""
        n_steps = torch.randint(self.cfg.min_len, self.cfg.max_len + 1, (batch_size,), generator=gen)
        return self.sample(n_steps, gen)

    def sample(self, n_steps: Tensor, gen: torch.Generator) -> Batch:
        """One sequence per entry of `n_steps` (B,), right-padded to the longest."""
        m, v = self.cfg.modulus, self.vocab
        B, S = n_steps.numel(), int(n_steps.max())
        present = torch.arange(S) < n_steps[:, None]  # (B, S)

        # -- draw every random quantity up front, in a fixed order
        u = torch.rand(B, S, generator=gen)
        digits = torch.randint(m, (B, S), generator=gen)
        keys = torch.randint(self.cfg.n_keys, (B, S), generator=gen)
        values = torch.randint(self.cfg.n_values, (B, S), generator=gen)
        pick = torch.rand(B, S, generator=gen)

        # -- step types; a QUERY before any STORE becomes the fallback type
        step = torch.full((B, S), QUERY)
        step[u < self.p_add + self.p_store] = STORE
        step[u < self.p_add] = ADD
        is_store = (step == STORE) & present
        orphan = (step == QUERY) & (_exclusive_cumsum(is_store) == 0)
        step[orphan] = ADD if self.p_add > 0 else STORE
        is_add, is_store, is_query = ((step == t) & present for t in (ADD, STORE, QUERY))

        # -- a QUERY asks the key of an earlier STORE, chosen uniformly
        n_prev = _exclusive_cumsum(is_store)  # (B, S) stores strictly before each step
        chosen = (pick * n_prev).long().clamp(max=(n_prev - 1).clamp(min=0))  # rank of the chosen store
        store_rank = torch.cumsum(is_store, 1) - 1  # (B, S) rank of each store
        match = is_store[:, None, :] & (store_rank[:, None, :] == chosen[:, :, None])  # (B, S_q, S_s)
        keys = torch.where(is_query, keys.gather(1, match.int().argmax(-1)), keys)

        # -- its answer: the value of the latest earlier STORE of that key
        earlier = torch.ones(S, S, dtype=torch.bool).tril(-1)  # [s, t]: t < s
        same_key = is_store[:, None, :] & (keys[:, None, :] == keys[:, :, None]) & earlier  # (B, S, S)
        latest = (same_key * torch.arange(1, S + 1)).argmax(-1)  # (B, S)
        answers = values.gather(1, latest)

        # -- lay the steps out as tokens: each step writes a first and maybe a second token
        running_sum = torch.cumsum(digits * is_add, 1) % m
        width = is_add.long() + 2 * (is_store | is_query).long()  # (B, S): 1, 2 or 0 when absent
        offset = _exclusive_cumsum(width)  # (B, S) token position of each step's first token
        T = int(width.sum(1).max())
        first_tok = torch.where(is_add, digits, torch.where(is_store, v.key0 + keys, v.query))
        second_tok = torch.where(is_store, v.value0 + values, v.key0 + keys)
        first_tgt = torch.where(is_add, running_sum, IGNORE)
        second_tgt = torch.where(is_query, v.value0 + answers, IGNORE)
        first_kind = torch.where(is_add, STATE, NO_TARGET)
        second_kind = torch.where(is_query, RECALL, NO_TARGET)

        step_no = torch.arange(S).expand(B, S)  # (B, S) each step's 0-based index

        dump = T  # scatter absent slots into an extra column, dropped below
        pos1 = torch.where(present, offset, dump)
        pos2 = torch.where(width == 2, offset + 1, dump)
        out = []
        for fill, a, b in ((v.pad, first_tok, second_tok), (IGNORE, first_tgt, second_tgt), (NO_TARGET, first_kind, second_kind),
                           (-1, step_no, step_no)):
            buf = torch.full((B, T + 1), fill, dtype=torch.long)
            buf.scatter_(1, pos1, a)
            buf.scatter_(1, pos2, b)  # a step's second token never collides with another's first
            out.append(buf[:, :T])
        tokens, targets, kinds, step_index = out
        return Batch(tokens, targets, kinds, step_index=step_index)


BUCKET_POOL = 32  # batches drawn at once and sorted by length: ~3% PAD (4: ~18%, 8: ~10%, 16: ~5%)


class PaddedBatches:
    """`task.batching: padded`: one fresh draw per step. Its state is the generator's, as it always was."""

    def __init__(self, sample_train, batch_size: int, gen: torch.Generator):
        self.sample_train, self.batch_size, self.gen = sample_train, batch_size, gen

    def next(self):
        return self.sample_train(self.batch_size, self.gen)

    def get_state(self) -> Tensor:
        return self.gen.get_state()

    def set_state(self, state: Tensor) -> None:
        self.gen.set_state(state)


class BucketedBatches:
    """`task.batching: bucketed`: pools of `pool` batches, sorted by token length (module docstring).

    State: the generator's state before the current pool's draw and how many of its batches
    were served; restoring it redraws the same pool, so a resumed run is bit-identical.
    """

    def __init__(self, task: "SequenceTask", batch_size: int, gen: torch.Generator, pool: int = BUCKET_POOL):
        self.task, self.batch_size, self.gen, self.pool = task, batch_size, gen, pool
        self.batches: list[Batch] = []
        self.served = 0
        self.pool_start = gen.get_state()

    def next(self) -> Batch:
        if self.served == len(self.batches):
            self._draw()
        self.served += 1
        return self.batches[self.served - 1]

    def _draw(self) -> None:
        self.pool_start = self.gen.get_state()
        full = self.task.sample_train(self.pool * self.batch_size, self.gen)  # (P*B, T)
        length = (full.tokens != self.task.vocab.pad).sum(1)  # (P*B,) tokens of each sequence
        rows = length.argsort(stable=True).view(self.pool, self.batch_size)  # (P, B): neighbours in length
        rows = rows[torch.randperm(self.pool, generator=self.gen)]  # the pool's batches in a random order
        norm = torch.stack([(full.kinds == k).sum() for k in range(3)]).float() / self.pool  # (3,)
        self.batches = []
        for r in rows:
            T = int(length[r].max())
            self.batches.append(Batch(full.tokens[r, :T], full.targets[r, :T], full.kinds[r, :T], norm))
        self.served = 0

    def get_state(self) -> dict:
        return {"pool_start": self.pool_start, "served": self.served}

    def set_state(self, state: dict) -> None:
        self.gen.set_state(state["pool_start"])
        self._draw()
        self.served = whole_number(state["served"], "data_gen.served", 0, len(self.batches))


def train_batches(task: "SequenceTask", batching: str, batch_size: int, gen: torch.Generator):
    """The stream of training batches for `task.batching` (padded or bucketed)."""
    if batching == "padded":
        return PaddedBatches(task.sample_train, batch_size, gen)
    return BucketedBatches(task, batch_size, gen)


def _exclusive_cumsum(x: Tensor) -> Tensor:
    """Cumulative sum along dim 1 that excludes the current entry, as int64."""
    x = x.long()
    return torch.cumsum(x, 1) - x


def make_task(cfg: TaskConfig) -> SequenceTask:
    return SequenceTask(cfg)


def make_eval_sets(task: SequenceTask, multipliers: tuple[int, ...], n_sequences: int, seed: int) -> dict[int, Batch]:
    """Fixed evaluation sets: for each k, `n_sequences` sequences of exactly k x max_len steps.

    Each length has its own generator seeded from (seed, k), independent of the training
    stream, so the sets never change with the training seed or the set of multipliers.
    """
    sets = {}
    for k in multipliers:
        gen = torch.Generator().manual_seed(seed * 1000 + k)
        n_steps = torch.full((n_sequences,), k * task.cfg.max_len)
        sets[k] = task.sample(n_steps, gen)
    return sets


# --------------------------------------------------------------------------- reference


def reference_targets(tokens: list[int], vocab: Vocab) -> tuple[list[int], list[int]]:
    """Brute force: parse one token sequence step by step and return (targets, kinds).

    The oracle for `SequenceTask.sample`; raises AssertionError on a malformed stream
    (a value without a key, a query of a key never stored, a token out of range).
    """
    targets, kinds = [], []
    total, memory, i = 0, {}, 0
    while i < len(tokens) and tokens[i] != vocab.pad:
        t = tokens[i]
        if t < vocab.key0:  # ADD d
            total = (total + t) % vocab.modulus
            targets.append(total)
            kinds.append(STATE)
            i += 1
        elif t < vocab.value0:  # STORE k v
            value = tokens[i + 1]
            assert vocab.value0 <= value < vocab.query, f"STORE without a value at {i}"
            memory[t] = value
            targets += [IGNORE, IGNORE]
            kinds += [NO_TARGET, NO_TARGET]
            i += 2
        elif t == vocab.query:  # QUERY k
            key = tokens[i + 1]
            assert key in memory, f"query of a key never stored at {i}"
            targets += [IGNORE, memory[key]]
            kinds += [NO_TARGET, RECALL]
            i += 2
        else:
            raise AssertionError(f"token {t} cannot start a step (at {i})")
    assert all(t == vocab.pad for t in tokens[i:]), "non-PAD token after the end"
    pad = len(tokens) - i
    return targets + [IGNORE] * pad, kinds + [NO_TARGET] * pad
