"""Checks of what a checkpoint restores beyond the weights: AdamW's state and the plain values of the
schedules and the data stream. A value of the wrong kind or shape is a ValueError naming it, raised
while the checkpoint loads, not a crash (or a run trained on it) later."""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

import torch

if TYPE_CHECKING:
    from trainables.config import DATConfig

ADAM_STATE = frozenset({"step", "exp_avg", "exp_avg_sq"})  # AdamW's per-parameter state (amsgrad adds one)


def whole_number(value, name: str, low: int = 0, high: int | None = None) -> int:
    """`value` if it is an int (not a bool) within [low, high]; a ValueError naming `name` otherwise."""
    if not isinstance(value, int) or isinstance(value, bool) or value < low or (high is not None and value > high):
        bound = f"[{low}, {high}]" if high is not None else f">= {low}"
        raise ValueError(f"{name}: must be a whole number {bound}, got {str(value)[:40]!r}")
    return value


def finite_number(value, name: str) -> float:
    """`value` as a float if it is a finite int or float (not a bool); a ValueError otherwise."""
    if not isinstance(value, (int, float)) or isinstance(value, bool) or not math.isfinite(value):
        raise ValueError(f"{name}: must be a finite number, got {str(value)[:40]!r}")
    return float(value)


def check_optimizer(optimizer: torch.optim.Optimizer, fresh_groups: list[dict]) -> None:
    """AdamW's state after `load_state_dict` (which checks only the groups' sizes): every group's
    settings of the kinds a fresh optimizer has, and every parameter's moments of its shape."""
    for i, (group, fresh) in enumerate(zip(optimizer.param_groups, fresh_groups)):
        for key, expected in fresh.items():
            if key == "params":
                continue
            value = group.get(key)
            if expected is None:  # a switch torch leaves unset (foreach, fused)
                ok = value is None or isinstance(value, bool)
            elif isinstance(expected, bool):
                ok = isinstance(value, bool)
            elif isinstance(expected, (int, float)):
                ok = isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            elif isinstance(expected, tuple):
                ok = (isinstance(value, (tuple, list)) and len(value) == len(expected)
                      and all(isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value))
            else:
                ok = type(value) is type(expected)
            if not ok:
                raise ValueError(f"optimizer.param_groups[{i}].{key}: must be like {expected!r}, got {str(value)[:40]!r}")
        expected_keys = ADAM_STATE | ({"max_exp_avg_sq"} if group.get("amsgrad") else set())
        for j, p in enumerate(group["params"]):
            state = optimizer.state.get(p)
            if not state:
                continue
            where = f"optimizer.state[{i}.{j}]"
            if set(state) != expected_keys:
                raise ValueError(f"{where}: must hold {sorted(expected_keys)}, holds {sorted(map(str, state))[:6]}")
            step = state["step"]
            if not torch.is_tensor(step) or step.numel() != 1 or not math.isfinite(float(step)) or float(step) < 0:
                raise ValueError(f"{where}.step: must be one finite count >= 0")
            for key in expected_keys - {"step"}:
                if not torch.is_tensor(state[key]) or state[key].shape != p.shape:
                    got = tuple(state[key].shape) if torch.is_tensor(state[key]) else type(state[key]).__name__
                    raise ValueError(f"{where}.{key}: must have its parameter's shape {tuple(p.shape)}, got {got}")


def check_dat_switch(cfg: DATConfig, has_attention: bool, switch_step: int | None, step: int) -> None:
    """The DAT switch a checkpoint of step `step` holds must be the one a run of `cfg`
    reaches there. The trainer asks the schedule before each of the steps 0 .. step-1
    and takes the checkpoint after the last, so attention is on from step s < `step` or still off:
    without attention never on; `mode: none` on from 0; `fixed` on from `switch_step` once that is
    below `step`, off before; `adaptive` on from a step in [min_step, max_step], and on by then
    once `max_step` is below `step`. Another run's switch (a state copied in) is a ValueError."""
    if switch_step is not None and switch_step >= step:
        raise ValueError(f"dat.switch_step: {switch_step}: the switch comes after the checkpoint's step {step}")
    got = "off" if switch_step is None else f"on from step {switch_step}"
    if not has_attention:
        ok, rule = switch_step is None, "a model without attention"
    elif cfg.mode == "none":
        ok, rule = switch_step == (0 if step > 0 else None), "dat.mode none: on from step 0"
    elif cfg.mode == "fixed":
        ok, rule = switch_step == (cfg.switch_step if cfg.switch_step < step else None), \
            f"dat.mode fixed: on from step {cfg.switch_step}"
    else:
        ok = (cfg.min_step <= switch_step <= cfg.max_step) if switch_step is not None else step <= cfg.max_step
        rule = f"dat.mode adaptive: on from a step in [{cfg.min_step}, {cfg.max_step}]"
    if not ok:
        raise ValueError(f"dat.switch_step: the checkpoint has attention {got} at its step {step}, which this "
                         f"config never gives ({rule}): another run's switch")
