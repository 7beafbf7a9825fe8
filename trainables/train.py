"""The training loop: one function, `train`, readable top to bottom.

It knows nothing of Ray, Optuna or MLflow. It talks to the outside world through one
callback, `report(metrics, checkpoint_dir)`, called every `eval.every` steps (and at the
end) with the evaluation metrics and a directory holding a checkpoint of the run. The
caller copies what it needs out of that directory before returning; the directory is
deleted afterwards. `train(cfg, resume_from=dir)` continues from such a checkpoint (one taken
under the same config but for `steps`: another run's is refused), and a resumed run is
bit-identical to one that never stopped (same device and thread count).

Reported metrics (all floats): step, loss, train_acc, the task's evaluation metrics for
each length multiplier k (acc_{k}x, state_acc_{k}x, recall_acc_{k}x, seq_acc_{k}x for the
sequence tasks; acc_{k}x, seen_mass_{k}x, tv_{k}x, loss_{k}x for set_complement; see
trainables/objectives.py), attention_active, attn_scale, switch_step (-1 before the
switch), lr, steps_per_s (of the interval, its evaluation included), diverged (0 or 1), and
eval_sequences: how many sequences per length the evaluation used (`eval.n_sequences` at the last
step and at `eval.full_at`, the first `eval.mid_run_sequences` of them in between). With `ema.decay > 0` the evaluation metrics
are those of the averaged weights, and the live weights' appear again prefixed `raw_`.
"""

from __future__ import annotations

import math
import pickle
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Literal, Mapping, Optional

import torch
import yaml
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from trainables.config import ConfigError, EMAConfig, OptimConfig, TrialConfig, config_difference, load_trial_config
from core.errors import brief, cut, short_path, why_absent
from trainables.dat import DATSchedule, curriculum_state_only, enable_attention, hold_attention, release_attention
from trainables.memory import release_free_memory
from trainables.model import HybridLM
from trainables.objectives import make_objective
from trainables.run_dir import CHECKPOINT as CHECKPOINT_DIR, CONFIG
from trainables.state_checks import check_dat_switch, check_optimizer
from trainables.switch import Signals

ReportFn = Callable[[dict, Optional[str]], None]
CHECKPOINT_FILE = "state.pt"


@dataclass
class TrainResult:
    status: Literal["completed", "diverged"]
    step: int  # training steps done
    metrics: dict = field(default_factory=dict)  # the last report


# --------------------------------------------------------------------------- helpers


def resolve_device(name: str, source: str = "<config>") -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"{source}: device: cuda was asked for, but this machine has no CUDA device; use cpu or auto")
    return torch.device(name)


def build_optimizer(model: HybridLM, cfg: OptimConfig) -> torch.optim.AdamW:
    """AdamW with four groups: (core | attention) x (decayed matrices | biases, norms, embeddings,
    and parameters marked `_no_weight_decay`, such as the SSM's A_log and D, as in Mamba)."""
    attention = {id(p) for p in model.attention_parameters()}
    groups: dict[tuple[bool, bool], list] = {(a, d): [] for a in (False, True) for d in (True, False)}
    for name, p in model.named_parameters():
        decay = p.dim() >= 2 and not name.startswith("embed") and not getattr(p, "_no_weight_decay", False)
        groups[(id(p) in attention, decay)].append(p)
    param_groups = [
        {"params": ps, "weight_decay": cfg.weight_decay if decay else 0.0, "attention": is_attn}
        for (is_attn, decay), ps in groups.items()
        if ps
    ]
    return torch.optim.AdamW(param_groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), fused=cfg.fused or None)


def lr_factor(step: int, cfg: OptimConfig, total_steps: int) -> float:
    """Linear warmup, then constant or cosine decay to `min_lr_ratio`."""
    if step < cfg.warmup_steps:
        return (step + 1) / cfg.warmup_steps
    if cfg.schedule == "constant":
        return 1.0
    progress = (step - cfg.warmup_steps) / max(1, total_steps - cfg.warmup_steps)
    return cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * min(1.0, progress)))


def make_ema(model: HybridLM, cfg: EMAConfig) -> AveragedModel | None:
    """torch's AveragedModel as an EMA of `model` (None when `decay` is 0).

    AveragedModel copies the weights at the first update, then averages with weight `decay`
    on the average. `bias_correction` instead uses the Adam-style corrected average of an EMA
    started at zero, i.e. the weight decay * (1 - decay^n) / (1 - decay^(n+1)) after n updates,
    which gives recent weights their fair share early in training.
    """
    if cfg.decay == 0.0:
        return None
    if not cfg.bias_correction:
        return AveragedModel(model, multi_avg_fn=get_ema_multi_avg_fn(cfg.decay))
    decay = cfg.decay

    def corrected(averaged: list[torch.Tensor], current: list[torch.Tensor], n: torch.Tensor) -> None:
        w = decay * (1 - decay ** int(n)) / (1 - decay ** (int(n) + 1))  # weight on the average
        for a, c in zip(averaged, current):
            a.lerp_(c, 1 - w)

    return AveragedModel(model, multi_avg_fn=corrected)


def save_checkpoint(directory: str | Path, cfg: TrialConfig, step: int, model, optimizer, dat: DATSchedule, data_gen,
                    ema=None, metrics: dict | None = None) -> None:
    directory = Path(directory)
    state = {
        "step": step,
        "metrics": metrics or {},  # the report this checkpoint was taken with
        "model": model.state_dict(),
        "ema": ema.state_dict() if ema is not None else None,
        "optimizer": optimizer.state_dict(),
        "dat": dat.state_dict(),
        "data_gen": data_gen.get_state(),
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else None,
    }
    torch.save(state, directory / CHECKPOINT_FILE)
    (directory / CONFIG).write_text(yaml.safe_dump(cfg.model_dump(mode="json"), sort_keys=False))


CHECKPOINT_SLACK = 16 * 2**20  # a checkpoint's bytes beyond its tensors: RNG states, the data stream, pickle framing


def checkpoint_limit(cfg: TrialConfig) -> int:
    """The most bytes a checkpoint of `cfg` can take: the weights, the EMA's copy and AdamW's two
    moments (float32, 4 x the parameters) with room to spare, plus the small states."""
    from trainables.footprint import n_parameters

    return 6 * 4 * n_parameters(cfg) + CHECKPOINT_SLACK


def read_checkpoint(directory: str | Path, max_bytes: int | None = None) -> dict:
    """The state `save_checkpoint` wrote, read with `weights_only=True`: tensors and plain values
    only. A checkpoint may sit on shared storage (a cluster volume, a bucket); a pickled object in
    it would run code in every trial that resumes, so one is refused with a one-line ConfigError,
    as is a link or a file that is not a regular one, one over `max_bytes`, and a `step` that is not a whole
    number >= 0."""
    path = Path(directory) / CHECKPOINT_FILE
    if path.is_symlink():  # a planted link would load a file from outside the run
        raise ConfigError(f"{path}: a link; a checkpoint holds its {CHECKPOINT_FILE} as a regular file")
    if not path.is_file():  # a FIFO would block torch.load forever
        raise ConfigError(f"{path}: {why_absent(path)}")
    size = path.stat().st_size
    if max_bytes is not None and size > max_bytes:
        raise ConfigError(f"{path}: {size:,} bytes; a checkpoint of this config takes at most {max_bytes:,}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as err:
        first = (str(err).strip().splitlines() or ["?"])[0]
        raise ConfigError(f"{path}: refused: holds more than tensors and plain values (read with weights_only=True): "
                          f"{cut(first, 120)}") from None
    except (RuntimeError, EOFError, OSError, ValueError) as err:
        raise ConfigError(f"{path}: not a readable checkpoint: {cut(str(err), 120)}") from None
    if not isinstance(state, dict) or "step" not in state:
        raise ConfigError(f"{path}: not a checkpoint of this trainer (no `step`)")
    step = state["step"]
    if not isinstance(step, int) or isinstance(step, bool) or step < 0:
        raise ConfigError(f"{path}: step: must be a whole number >= 0, got {brief(step)}")
    metrics = state.get("metrics", {})
    if not isinstance(metrics, dict):
        raise ConfigError(f"{path}: metrics: must be a mapping, got {brief(metrics)}")
    if "step" in metrics and metrics["step"] != step:
        raise ConfigError(f"{path}: step: the checkpoint says {step}, the report it was taken with {brief(metrics['step'])}")
    return state


def checkpoint_step(directory: str | Path) -> int:
    """The training step a checkpoint was taken at."""
    return int(read_checkpoint(directory)["step"])


def load_checkpoint(directory: str | Path, model, optimizer, dat: DATSchedule, data_gen, ema=None,
                    max_bytes: int | None = None) -> tuple[int, dict]:
    """Restore everything `save_checkpoint` wrote; returns the step to continue from and the
    metrics reported with the checkpoint. A checkpoint that does not fit these objects (another
    model size, a missing part, a value of the wrong kind) is one ConfigError line."""
    state = read_checkpoint(directory, max_bytes)
    if ema is not None and state.get("ema") is None:
        raise ConfigError(f"{directory}: ema.decay: the checkpoint has no EMA weights to resume (it was trained with ema.decay 0)")
    try:
        model.load_state_dict(state["model"])
        if ema is not None:
            ema.load_state_dict(state["ema"])
        fresh_groups = [dict(group) for group in optimizer.param_groups]
        optimizer.load_state_dict(state["optimizer"])
        check_optimizer(optimizer, fresh_groups)  # a moment of another shape crashes AdamW's fused step
        dat.load_state_dict(state["dat"])
        check_dat_switch(dat.cfg, dat.has_attention, dat.state.switch_step, state["step"])
        data_gen.set_state(state["data_gen"])
        torch.set_rng_state(state["torch_rng"])
        if state["cuda_rng"] is not None and torch.cuda.is_available():
            torch.cuda.set_rng_state_all(state["cuda_rng"])
    except (KeyError, TypeError, ValueError, RuntimeError, IndexError, AttributeError) as err:
        what = f"no `{err.args[0]}`" if isinstance(err, KeyError) and err.args else cut(str(err), 120)
        raise ConfigError(f"{Path(directory) / CHECKPOINT_FILE}: does not fit this config: {what}") from None
    return int(state["step"]), state.get("metrics", {})


def check_resume(cfg: TrialConfig, directory: str | Path, reports_file: str | None = None,
                 reports: Mapping[int, dict] | None = None) -> int:
    """Everything `train(cfg, resume_from=directory)` would load, loaded into throwaway objects on
    the CPU, so that a checkpoint that cannot be resumed is refused before the caller writes
    anything: the config it was taken with (its config.yaml) must be `cfg` but for `steps`, its
    step must lie in [0, cfg.steps] (and be its folder's, `checkpoint-STEP`), and with
    `reports_file` (the run's metrics.jsonl, shown so; `reports`: its reports by step, None when
    it is absent) the report it was taken with must be the run's (`check_own_report`). Returns that step."""
    path = Path(directory) / CHECKPOINT_FILE
    check_saved_config(cfg, directory)
    state = read_checkpoint(directory, checkpoint_limit(cfg))
    step = int(state["step"])
    if step > cfg.steps:
        raise ConfigError(f"{path}: step: must be within [0, steps={cfg.steps}], got {brief(step, 40)}; "
                          f"a resumed run continues to a budget at or past its checkpoint")
    if reports_file is not None:
        check_own_report(path, state, reports_file, reports)
    name = Path(directory).name
    if name.startswith(f"{CHECKPOINT_DIR}-") and name != f"{CHECKPOINT_DIR}-{step}":
        raise ConfigError(f"{short_path(Path(directory), 100)}: holds a checkpoint of step {step}; a run's "
                          "checkpoint-STEP folder holds the checkpoint of that step")
    rng = torch.get_rng_state()
    try:
        objective = make_objective(cfg)
        model = HybridLM(cfg.model, objective.vocab_size)
        batches = objective.train_batches(cfg.optim.batch_size, torch.Generator().manual_seed(cfg.seed))
        load_checkpoint(directory, model, build_optimizer(model, cfg.optim),
                        DATSchedule(cfg.dat, has_attention=cfg.model.attention), batches, make_ema(model, cfg.ema),
                        max_bytes=checkpoint_limit(cfg))
    finally:
        torch.set_rng_state(rng)
    return step


def check_own_report(path: Path, state: dict, reports_file: str, reports: Mapping[int, dict] | None) -> None:
    """A checkpoint is the run's own: every one is kept after its report is written to the run's
    metrics.jsonl, and holds that report (`save_checkpoint`'s `metrics`), so metrics.jsonl holds a
    report at the checkpoint's step, and it is the same report, to the last digit of every metric
    (a trial's steps_per_s alone differs between any two runs). A checkpoint of another trial or
    run copied or linked in (its config.yaml left as it was) is refused, not resumed on the other's
    weights, optimizer and switch. A checkpoint that holds no report (`metrics` empty) is compared
    by its step only."""
    step, recorded = int(state["step"]), state.get("metrics") or {}
    shown = short_path(path, 70)
    if reports is None or step not in reports:
        held = "is missing" if reports is None else f"holds no report at that step ({len(reports)} report{'s' * (len(reports) != 1)})"
        raise ConfigError(f"{shown}: the checkpoint is at step {step}, but {reports_file} {held}; the run's reports "
                          "were lost, or the checkpoint is another run's: refused (resuming would leave them out)")
    logged = reports[step]
    for key in [*recorded, *(k for k in logged if k not in recorded)] if recorded else []:
        if not _same_value(recorded.get(key), logged.get(key)):
            raise ConfigError(f"{shown}: another run's checkpoint: the report it was taken with has {cut(key, 40)} "
                              f"{brief(recorded.get(key, 'none'), 24)} at step {step}, {reports_file} "
                              f"{brief(logged.get(key, 'none'), 24)}")


def _same_value(a, b) -> bool:
    """Two metric values of one report, as written and read back (NaN is NaN)."""
    return a == b or (isinstance(a, float) and isinstance(b, float) and math.isnan(a) and math.isnan(b))


def check_saved_config(cfg: TrialConfig, directory: str | Path) -> None:
    """A checkpoint continues the run it was taken in: its config.yaml (which `save_checkpoint`
    writes beside every state.pt) is a regular file holding `cfg`, but for `steps`."""
    saved = Path(directory) / CONFIG
    shown = short_path(saved, 100)
    if saved.is_symlink() or not saved.is_file():
        what = "a link" if saved.is_symlink() else "not a regular file" if saved.exists() else "no such file"
        raise ConfigError(f"{shown}: {what}; every checkpoint holds the config it was taken with")
    differs = config_difference(load_trial_config(saved), cfg)
    if differs:
        key, was, asked = differs
        raise ConfigError(f"{shown}: {key}: the checkpoint was trained with {brief(was, 40)}, the run asks "
                          f"{brief(asked, 40)}; a resumed run may change only `steps`")


# --------------------------------------------------------------------------- the loop


def train(cfg: TrialConfig, report: ReportFn | None = None, resume_from: str | Path | None = None) -> TrainResult:
    device = resolve_device(cfg.device)
    torch.manual_seed(cfg.seed)
    objective = make_objective(cfg)
    model = HybridLM(cfg.model, objective.vocab_size).to(device)
    ema = make_ema(model, cfg.ema)
    optimizer = build_optimizer(model, cfg.optim)
    dat = DATSchedule(cfg.dat, has_attention=cfg.model.attention)
    data_gen = torch.Generator().manual_seed(cfg.seed)  # training batches, drawn on the CPU
    batches = objective.train_batches(cfg.optim.batch_size, data_gen)  # padded or bucketed (task.batching)
    eval_sets = objective.eval_sets(device)  # {length multiplier: the full set}
    mid_run = min(cfg.eval.mid_run_sequences, cfg.eval.n_sequences)
    mid_run_sets = {k: s.head(mid_run) for k, s in eval_sets.items()}  # their first sequences, between full ones

    report = report or (lambda metrics, checkpoint_dir: None)
    step, metrics = 0, {}
    if resume_from is not None:
        check_saved_config(cfg, resume_from)  # never another run's weights under this config's name
        step, metrics = load_checkpoint(resume_from, model, optimizer, dat, batches, ema, max_bytes=checkpoint_limit(cfg))
        if step >= cfg.steps and metrics:  # resumed from the final checkpoint: the run is done, nothing new
            return TrainResult("completed", step, metrics)  # to report (Ray's adapter repeats the last report itself)
    if dat.active:  # resumed after the switch: the checkpoint holds attention's optimizer state
        enable_attention(model)
    else:
        hold_attention(model, cfg.dat.hold)

    loss_sum = torch.zeros((), device=device)  # over the current report interval
    hits = torch.zeros((), device=device, dtype=torch.long)
    asked = torch.zeros((), device=device, dtype=torch.long)
    interval_start, interval_step0 = time.perf_counter(), step
    model.train()
    while step < cfg.steps:
        # -- DAT: switch attention on when the schedule says so; ramp its output in
        if dat.advance(step):
            release_attention(model, optimizer)
        if dat.active:
            model.attn_scale = dat.attn_scale(step)

        # -- learning rate for this step
        base = cfg.optim.lr * lr_factor(step, cfg.optim, cfg.steps)
        for group in optimizer.param_groups:
            group["lr"] = base * (dat.attention_lr_factor(step) if group["attention"] else 1.0)

        # -- one optimisation step
        batch = batches.next().to(device)
        logits = model(batch.tokens)  # (B, L, V)
        out = objective.step(logits, batch, state_only=curriculum_state_only(cfg.curriculum, step, dat.holding))
        if not torch.isfinite(out.loss):
            return _diverged(cfg, step, report, objective.worst_metrics())
        optimizer.zero_grad(set_to_none=True)
        out.loss.backward()
        signals = _signals(dat.needs, out.loss, objective, logits, batch, model)  # before clipping
        if cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
        if ema is not None:
            ema.update_parameters(model)
        if signals is not None:
            dat.observe(signals)
        step += 1

        loss_sum += out.loss.detach()
        hits += out.hits
        asked += out.asked

        # -- evaluate, report, checkpoint
        if step % cfg.eval.every == 0 or step == cfg.steps:
            n = step - interval_step0
            full = cfg.eval.is_full(step, cfg.steps, interval_step0)
            metrics = {
                "step": step,
                "loss": float(loss_sum) / n,
                "train_acc": float(hits) / max(1, int(asked)),
                **_evaluate(objective, model, ema, eval_sets if full else mid_run_sets),
                "eval_sequences": float(cfg.eval.n_sequences if full else mid_run),
                "attention_active": float(dat.active),
                "attn_scale": float(model.attn_scale if dat.active else 0.0),
                "switch_step": float(dat.state.switch_step if dat.active else -1),
                "lr": base,
                "diverged": 0.0,
            }
            metrics["steps_per_s"] = n / (time.perf_counter() - interval_start)
            with tempfile.TemporaryDirectory(prefix="dat-ckpt-") as ckpt:
                save_checkpoint(ckpt, cfg, step, model, optimizer, dat, batches, ema, metrics)
                report(metrics, ckpt)
            release_free_memory()  # what the evaluation and checkpoint freed goes back to the OS: RSS stays flat
            loss_sum.zero_(), hits.zero_(), asked.zero_()
            interval_start, interval_step0 = time.perf_counter(), step

    return TrainResult("completed", step, metrics)


def _signals(needs: str | None, loss: torch.Tensor, objective, logits, batch, model: HybridLM) -> Signals | None:
    """The adaptive switch's signals for this step; None when no criterion is listening.
    Only the signal the criterion reads is measured (each costs a host sync)."""
    if needs is None:
        return None
    if needs == "state_acc":
        return Signals(loss=float(loss.detach()), state_acc=objective.state_accuracy(logits.detach(), batch))
    if needs == "mixer_grad_norm":
        grads = [p.grad for p in model.mixer_parameters() if p.grad is not None]
        return Signals(loss=float(loss.detach()), mixer_grad_norm=float(torch.nn.utils.get_total_norm(grads)))
    return Signals(loss=float(loss.detach()))


def _evaluate(objective, model: HybridLM, ema: AveragedModel | None, eval_sets: dict) -> dict[str, float]:
    """The evaluation metrics: of the EMA weights when there are any (plus the live weights'
    as raw_*), else of the live weights."""
    if ema is None:
        return objective.evaluate(model, eval_sets)
    ema.module.attn_scale = model.attn_scale  # a plain attribute: AveragedModel's copy does not follow it
    raw = objective.evaluate(model, eval_sets)
    return {**objective.evaluate(ema.module, eval_sets), **{f"raw_{k}": v for k, v in raw.items()}}


def _diverged(cfg: TrialConfig, step: int, report: ReportFn, worst: dict[str, float]) -> TrainResult:
    """Non-finite loss: report the worst score of every length metric with `diverged=1`, no
    checkpoint (a sweep scored by any of them ranks the run last instead of missing it)."""
    metrics = {"step": step, "loss": float("nan"), "train_acc": 0.0, "diverged": 1.0, **worst}
    report(metrics, None)
    return TrainResult("diverged", step, metrics)
