"""Delayed Attention Training: when attention is active, and how it is held back before.

`DATSchedule` decides, step by step, whether attention is active; the trainer asks it
once per step (`advance`) and applies its answer with `hold_attention` /
`release_attention`.

Modes:
    none      attention trains jointly from step 0 (the control).
    fixed     attention is switched on at `switch_step` (training steps count from 0).
    adaptive  a criterion on the training signals decides (trainables/switch.py): the trainer
              feeds it each step's `Signals` through `observe`; attention switches on before
              the first step >= `min_step` after the criterion is ready, at `max_step` at the latest.

`ramp_steps` (fixed and adaptive) scales the attention sublayers' output from 0 up to 1
linearly over that many steps after the switch (`attn_scale`), instead of all at once.

Two ways to hold attention back before the switch (`dat.hold`):
    gate    (default) the attention sublayers are skipped: they contribute exactly
            nothing to the residual stream and get no gradient, so the recurrent path
            learns alone; the model before the switch *is* the attention-off model.
    freeze  attention runs with its initial weights, frozen. The recurrent path then
            learns around a fixed random mixing of the past, which is not the system the
            paper describes, and with `model.attn_zero_init` it is the same as `gate`
            (a zero output projection). Kept as an ablation.
In both, the attention parameters have `requires_grad=False` before the switch, so the
optimizer neither moves them nor builds state for them (no weight decay either). At the
switch their optimizer state is cleared, so they start like freshly added parameters;
`rewarmup_steps` ramps their learning rate up linearly from there (see `attention_lr_factor`).

DAT trains every target from step 0, as the paper does. Training only the state-tracking
targets first is a separate setting, the target curriculum (`curriculum`, see
`curriculum_state_only`), which applies to joint training as well: `state_only_steps: N` for
the first N steps, or `state_only_until_switch` while DAT holds attention back (what
`dat.phase1_targets: state` did in earlier versions, and what older configs still load as).

The schedule's state (switched yet, and at which step) is part of the checkpoint.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from trainables.config import CurriculumConfig, DATConfig
from trainables.model import HybridLM
from trainables.state_checks import whole_number
from trainables.switch import Criterion, Signals, make_criterion


@dataclass
class DATState:
    switch_step: int | None = None  # the step at which attention became active; None: not yet


class DATSchedule:
    def __init__(self, cfg: DATConfig, has_attention: bool):
        self.cfg = cfg
        self.has_attention = has_attention
        self.state = DATState()
        self.criterion: Criterion | None = make_criterion(cfg) if cfg.mode == "adaptive" and has_attention else None

    @property
    def active(self) -> bool:
        return self.has_attention and self.state.switch_step is not None

    @property
    def holding(self) -> bool:
        """Attention exists and is still held back (phase 1 of DAT)."""
        return self.has_attention and self.state.switch_step is None

    @property
    def needs(self) -> str | None:
        """The signal the adaptive criterion reads while holding (None: nothing to measure)."""
        return self.criterion.signal if self.criterion is not None and self.holding else None

    def observe(self, signals: Signals) -> None:
        """After a training step while holding: feed the adaptive criterion."""
        if self.criterion is not None and self.holding:
            self.criterion.observe(signals)

    def advance(self, step: int) -> bool:
        """Called before training step `step`; True exactly when attention switches on now."""
        if not self.holding:
            return False
        if self._switch_now(step):
            self.state.switch_step = step
            return True
        return False

    def _switch_now(self, step: int) -> bool:
        if self.cfg.mode == "none":
            return True
        if self.cfg.mode == "fixed":
            return step >= self.cfg.switch_step
        return step >= self.cfg.max_step or (step >= self.cfg.min_step and self.criterion.ready)

    def attn_scale(self, step: int) -> float:
        """The attention sublayers' output scale at `step` once active: 1, or the linear ramp."""
        if self.cfg.ramp_steps == 0 or self.cfg.mode == "none":
            return 1.0
        return min(1.0, (step - self.state.switch_step + 1) / self.cfg.ramp_steps)

    def attention_lr_factor(self, step: int) -> float:
        """Multiplier on the attention parameters' learning rate: 0 before the switch, then re-warmup."""
        if not self.active:
            return 0.0
        if self.cfg.rewarmup_steps == 0 or self.cfg.mode == "none":
            return 1.0
        return min(1.0, (step - self.state.switch_step + 1) / self.cfg.rewarmup_steps)

    def state_dict(self) -> dict:
        state = {"switch_step": self.state.switch_step}
        if self.criterion is not None:
            state["criterion"] = self.criterion.state_dict()
        return state

    def load_state_dict(self, state: dict) -> None:
        switch = state["switch_step"]
        self.state = DATState(switch_step=None if switch is None else whole_number(switch, "dat.switch_step"))
        if self.criterion is not None:
            self.criterion.load_state_dict(state["criterion"])


def curriculum_state_only(cfg: CurriculumConfig, step: int, holding: bool) -> bool:
    """Whether training step `step` trains the state-tracking targets only (recall masked out)."""
    return step < cfg.state_only_steps or (cfg.state_only_until_switch and holding)


def hold_attention(model: HybridLM, how: str) -> None:
    """Before the switch: attention gated off (`gate`) or running frozen (`freeze`)."""
    model.attn_scale = 0.0 if how == "gate" else 1.0
    for p in model.attention_parameters():
        p.requires_grad_(False)


def enable_attention(model: HybridLM) -> None:
    """Attention active and trainable; optimizer state untouched (also used when resuming)."""
    model.attn_scale = 1.0
    for p in model.attention_parameters():
        p.requires_grad_(True)


def release_attention(model: HybridLM, optimizer: torch.optim.Optimizer) -> None:
    """At the switch: attention on, trainable, with clean optimizer state."""
    enable_attention(model)
    for p in model.attention_parameters():
        optimizer.state.pop(p, None)
