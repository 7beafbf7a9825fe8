"""The training loop: one function, `train`, readable top to bottom.

It knows nothing of Ray, Optuna or MLflow. It talks to the outside world through one
callback, `report(metrics, checkpoint_dir)`, called every `eval.every` steps (and at the
end) with the evaluation metrics and a directory holding a checkpoint of the run. The
caller copies what it needs out of that directory before returning; the directory is
deleted afterwards. `train(cfg, resume_from=dir)` continues from such a checkpoint, and a
resumed run is bit-identical to one that never stopped (same device and thread count).

Reported metrics (all floats): step, loss, train_acc, acc_{k}x, state_acc_{k}x,
recall_acc_{k}x, seq_acc_{k}x for each evaluation multiplier k, attention_active,
switch_step (-1 before the switch), lr, steps_per_s, diverged (0 or 1).
"""

from __future__ import annotations

import math
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Optional

import torch
import torch.nn.functional as F
import yaml

from trainables.config import OptimConfig, TrialConfig
from trainables.dat import DATSchedule, enable_attention, hold_attention, release_attention
from trainables.evaluate import evaluate
from trainables.model import HybridLM
from trainables.tasks import IGNORE, RECALL, make_eval_sets, make_task

ReportFn = Callable[[dict, Optional[str]], None]
CHECKPOINT_FILE = "state.pt"


@dataclass
class TrainResult:
    status: Literal["completed", "diverged"]
    step: int  # training steps done
    metrics: dict = field(default_factory=dict)  # the last report


# --------------------------------------------------------------------------- helpers


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("device=cuda was asked for, but CUDA is not available")
    return torch.device(name)


def build_optimizer(model: HybridLM, cfg: OptimConfig) -> torch.optim.AdamW:
    """AdamW with four groups: (core | attention) x (decayed matrices | biases, norms, embeddings)."""
    attention = {id(p) for p in model.attention_parameters()}
    groups: dict[tuple[bool, bool], list] = {(a, d): [] for a in (False, True) for d in (True, False)}
    for name, p in model.named_parameters():
        decay = p.dim() >= 2 and not name.startswith("embed")
        groups[(id(p) in attention, decay)].append(p)
    param_groups = [
        {"params": ps, "weight_decay": cfg.weight_decay if decay else 0.0, "attention": is_attn}
        for (is_attn, decay), ps in groups.items()
        if ps
    ]
    return torch.optim.AdamW(param_groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2))


def lr_factor(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """Linear warmup, then constant or cosine decay to `min_lr_ratio`."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def save_checkpoint(directory: str | Path, cfg: TrialConfig, step: int, model, optimizer, dat: DATSchedule, data_gen) -> None:
    directory = Path(directory)
    state = {
        "step": step,
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "dat": dat.state_dict(),
        "data_gen": data_gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    torch.save(state, directory / CHECKPOINT_FILE)
    (directory / "config.yaml").write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


def checkpoint_step(directory: str | Path) -> int:
    """The training step a checkpoint was taken at."""
    return int(torch.load(Path(directory) / CHECKPOINT_FILE, map_location="cpu", weights_only=False)["step"])


def load_checkpoint(directory: str | Path, model, optimizer, dat: DATSchedule, data_gen) -> int:
    """Restore everything `save_checkpoint` wrote; returns the step to continue from."""
    state = torch.load(Path(directory) / CHECKPOINT_FILE, map_location="cpu", weights_only=False)
    model.load_state_dict(state["model"])
    optimizer.load_state_dict(state["optimizer"])
    dat.load_state_dict(state["dat"])
    data_gen.set_state(state["data_gen"])
    torch.set_rng_state(state["torch_rng"])
    if state["cuda_rng"] is not None and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda_rng"])
    return int(state["step"])


# --------------------------------------------------------------------------- the loop


def train(cfg: TrialConfig, report: ReportFn | None = None, resume_from: str | Path | None = None) -> TrainResult:
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    task = make_task(cfg.task)
    model = HybridLM(cfg.model, task.vocab_size).to(device)
    optimizer = build_optimizer(model, cfg.optim)
    dat = DATSchedule(cfg.dat, has_attention=cfg.model.attention)
    data_gen = torch.Generator().manual_seed(cfg.seed)  # training batches, drawn on the CPU
    eval_sets = {k: b.to(device) for k, b in make_eval_sets(task, cfg.eval.multipliers, cfg.eval.n_sequences, cfg.eval.seed).items()}

    step = 0
    if resume_from is not None:
        step = load_checkpoint(resume_from, model, optimizer, dat, data_gen)
    if dat.active:  # resumed after the switch: the checkpoint holds attention's optimizer state
        enable_attention(model)
    else:
        hold_attention(model, cfg.dat.hold)

    report = report or (lambda metrics, checkpoint_dir: None)
    loss_sum = torch.zeros((), device=device)  # over the current report interval
    hits = torch.zeros((), device=device, dtype=torch.long)
    asked = torch.zeros((), device=device, dtype=torch.long)
    interval_start, interval_step0 = time.perf_counter(), step
    metrics: dict = {}
    model.train()
    while step < cfg.steps:
        # -- DAT: switch attention on when the schedule says so
        if dat.advance(step):
            release_attention(model, optimizer)

        # -- learning rate for this step
        base = cfg.optim.lr * lr_factor(step, cfg.optim, cfg.steps)
        for group in optimizer.param_groups:
            group["lr"] = base * (dat.attention_lr_factor(step) if group["attention"] else 1.0)

        # -- one optimisation step
        batch = task.sample_train(cfg.optim.batch_size, data_gen).to(device)
        targets = batch.targets  # (B, L)
        if cfg.dat.phase1_targets == "state" and dat.holding:  # recall is left for attention to learn
            targets = targets.masked_fill(batch.kinds == RECALL, IGNORE)
        logits = model(batch.tokens)  # (B, L, V)
        loss = F.cross_entropy(logits.flatten(0, 1), targets.flatten(), ignore_index=IGNORE)
        if not torch.isfinite(loss):
            return _diverged(cfg, step, report)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        step += 1

        with torch.no_grad():
            is_asked = targets != IGNORE
            loss_sum += loss.detach()
            hits += ((logits.argmax(-1) == targets) & is_asked).sum()
            asked += is_asked.sum()

        # -- evaluate, report, checkpoint
        if step % cfg.eval.every == 0 or step == cfg.steps:
            n = step - interval_step0
            metrics = {
                "step": step,
                "loss": float(loss_sum) / n,
                "train_acc": float(hits) / max(1, int(asked)),
                **evaluate(model, eval_sets, task.kinds_present, cfg.eval.batch_size),
                "attention_active": float(dat.active),
                "switch_step": float(dat.state.switch_step if dat.active else -1),
                "lr": base,
                "diverged": 0.0,
            }
            metrics["steps_per_s"] = n / (time.perf_counter() - interval_start)
            with tempfile.TemporaryDirectory(prefix="dat-ckpt-") as ckpt:
                save_checkpoint(ckpt, cfg, step, model, optimizer, dat, data_gen)
                report(metrics, ckpt)
            loss_sum.zero_(), hits.zero_(), asked.zero_()
            interval_start, interval_step0 = time.perf_counter(), step

    return TrainResult("completed", step, metrics)


def _diverged(cfg: TrialConfig, step: int, report: ReportFn) -> TrainResult:
    """Non-finite loss: report a final zero score with `diverged=1`, no checkpoint."""
    metrics = {"step": step, "loss": float("nan"), "train_acc": 0.0, "diverged": 1.0}
    metrics.update({f"acc_{k}x": 0.0 for k in cfg.eval.multipliers})
    report(metrics, None)
    return TrainResult("diverged", step, metrics)
