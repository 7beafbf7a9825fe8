"""What the training loop optimises and measures, per task family.

The loop (trainables/train.py) is the same for every task; an objective supplies the parts
that differ:

    sample_train(batch_size, gen)      a training batch, drawn on the CPU
    train_batches(batch_size, gen)     the stream of training batches (padded, or bucketed by length)
    eval_sets(device)                  the fixed evaluation sets, one per length multiplier
    step(logits, batch, state_only)    loss, and hits/asked for train_acc
    state_accuracy(logits, batch)      accuracy on state-tracking positions (adaptive switch signal)
    evaluate(model, eval_sets)         the reported metrics at every length
    worst_metrics()                    the same metrics at their worst (a diverged run)

    SequenceObjective       modsum_recall / modsum / recall (trainables/tasks.py): hard targets,
                            cross-entropy on asked positions, exact-match accuracy
    SetComplementObjective  set_complement (trainables/set_complement.py): soft targets, soft
                            cross-entropy, seen-mass and total-variation metrics
    OthelloObjective        othello (trainables/othello.py): set complement's soft targets, loss and
                            metrics on random Othello games, scored per ply range
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainables.config import TrialConfig
from trainables.evaluate import KIND_METRIC, OOD, evaluate
from trainables.metrics import curve_names
from trainables.tasks import IGNORE, RECALL, STATE, PaddedBatches, make_eval_sets, make_task, train_batches


@dataclass
class StepOutput:
    loss: Tensor  # scalar, with grad
    hits: Tensor  # scalar int: asked positions predicted right
    asked: Tensor  # scalar int: asked positions


class SequenceObjective:
    def __init__(self, cfg: TrialConfig):
        self.cfg = cfg
        self.task = make_task(cfg.task)
        self.vocab_size = self.task.vocab_size

    def sample_train(self, batch_size: int, gen: torch.Generator):
        return self.task.sample_train(batch_size, gen)

    def train_batches(self, batch_size: int, gen: torch.Generator):
        """The training stream for `task.batching` (padded or bucketed; trainables/tasks.py)."""
        return train_batches(self.task, self.cfg.task.batching, batch_size, gen)

    def eval_sets(self, device: torch.device) -> dict:
        e = self.cfg.eval
        return {k: b.to(device) for k, b in make_eval_sets(self.task, e.multipliers, e.n_sequences, e.seed).items()}

    def step(self, logits: Tensor, batch, state_only: bool) -> StepOutput:
        # logits: (B, L, V); batch.targets, batch.kinds: (B, L)
        targets = batch.targets
        if state_only:  # the curriculum's state-only phase (trainables/dat.py): recall is not trained yet
            targets = targets.masked_fill(batch.kinds == RECALL, IGNORE)
        if batch.asked_norm is None:  # padded: the mean over this batch's asked positions
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        else:  # bucketed: the sum over them, divided by the pool's mean count of the kinds trained
            norm = batch.asked_norm[STATE] + (0.0 if state_only else batch.asked_norm[RECALL])
            loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE, reduction="sum") / norm
        with torch.no_grad():
            is_asked = targets != IGNORE
            right = logits.argmax(-1) == targets
            hits, asked = (right & is_asked).sum(), is_asked.sum()
        return StepOutput(loss, hits, asked)

    def state_accuracy(self, logits: Tensor, batch) -> float:
        """Accuracy on the batch's state-tracking positions (a host sync: only asked for when needed)."""
        is_state = batch.kinds == STATE
        n = int(is_state.sum())
        return float(((logits.argmax(-1) == batch.targets) & is_state).sum()) / n if n else math.nan

    def evaluate(self, model: nn.Module, eval_sets: dict) -> dict[str, float]:
        e = self.cfg.eval
        return evaluate(model, eval_sets, self.task.kinds_present, e.batch_size, self.cfg.task.max_len, e.curve_window)

    def worst_metrics(self) -> dict[str, float]:
        """Every length metric at its worst: what a diverged run reports."""
        accs = ["acc"] + [KIND_METRIC[k] for k in self.task.kinds_present]
        e = self.cfg.eval
        worst = {f"{n}_{k}x": 0.0 for n in [*accs, "seq_acc", "last_acc"] for k in e.multipliers}
        worst.update({name: 0.0 for name in curve_names(self.cfg.task.max_len, e.multipliers, e.curve_window)})
        worst.update({f"{OOD}{n}_{k}x": 0.0 for n in accs for k in self.cfg.eval.multipliers if k > 1})
        return worst


class SetComplementObjective:
    def __init__(self, cfg: TrialConfig):
        from trainables import set_complement as sc

        self.cfg = cfg
        self.sc = sc
        self.task = sc.SetComplementTask(cfg.task)
        self.vocab_size = self.task.vocab_size

    def sample_train(self, batch_size: int, gen: torch.Generator):
        return self.task.sample_train(batch_size, gen)

    def train_batches(self, batch_size: int, gen: torch.Generator) -> PaddedBatches:
        """One padded draw per step (bucketing is for the sequence tasks only)."""
        return PaddedBatches(self.task.sample_train, batch_size, gen)

    def eval_sets(self, device: torch.device) -> dict:
        e = self.cfg.eval
        return {k: b.to(device) for k, b in self.sc.make_set_eval_sets(self.task, e.multipliers, e.n_sequences, e.seed).items()}

    def step(self, logits: Tensor, batch, state_only: bool) -> StepOutput:
        # logits: (B, L, V); batch.target: (B, L, V) soft; batch.mask: (B, L)
        loss = self.sc.soft_cross_entropy(logits, batch)
        with torch.no_grad():
            hits, asked = (self.sc.argmax_unseen(logits, batch.target) & batch.mask).sum(), batch.mask.sum()
        return StepOutput(loss, hits, asked)

    def state_accuracy(self, logits: Tensor, batch) -> float:
        return math.nan

    def evaluate(self, model: nn.Module, eval_sets: dict) -> dict[str, float]:
        return self.sc.evaluate_set_complement(model, eval_sets, self.cfg.eval.batch_size)

    def worst_metrics(self) -> dict[str, float]:
        worst = {"acc": 0.0, "seen_mass": 1.0, "tv": 1.0}
        return {f"{n}_{k}x": v for n, v in worst.items() for k in self.cfg.eval.multipliers}


class OthelloObjective(SetComplementObjective):
    """Set complement's step (soft cross-entropy, argmax-is-valid accuracy) on Othello games. Every
    target is a state-tracking one (legality needs the board), so DAT's state-only phase 1 trains them all."""

    def __init__(self, cfg: TrialConfig):
        from trainables import othello, set_complement as sc

        self.cfg = cfg
        self.sc = sc
        self.othello = othello
        self.task = othello.OthelloTask(cfg.task)
        self.vocab_size = self.task.vocab_size

    def eval_sets(self, device: torch.device) -> dict:
        e = self.cfg.eval
        sets = self.othello.make_othello_eval_sets(self.cfg.task, e.multipliers, e.n_sequences, e.seed)
        return {k: b.to(device) for k, b in sets.items()}

    def evaluate(self, model: nn.Module, eval_sets: dict) -> dict[str, float]:
        return self.othello.evaluate_othello(model, eval_sets, self.cfg.eval.batch_size)

    def worst_metrics(self) -> dict[str, float]:
        worst = {"acc": 0.0, "illegal_mass": 1.0, "tv": 1.0}
        return {f"{n}_{k}x": v for n, v in worst.items() for k in self.cfg.eval.multipliers}


def make_objective(cfg: TrialConfig) -> SequenceObjective | SetComplementObjective:
    if cfg.task.name == "othello":
        return OthelloObjective(cfg)
    if cfg.task.name == "set_complement":
        return SetComplementObjective(cfg)
    return SequenceObjective(cfg)
