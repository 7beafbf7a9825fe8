"""When a trial's training changes phase: the step after which its curve is the curve of its final system.

A DAT trial trains without attention until its switch, and its accuracy beyond the training
length can jump after it; the target curriculum leaves recall out of the loss for its first steps.
An early-stopping rule that compares trials before such a change compares systems the trial is
not going to be. `last_phase_change` says from which step on a trial is in its last phase:

    DAT, fixed       dat.switch_step (+ dat.ramp_steps while attention's output ramps in);
                     a switch at or after the last step never happens: the trial never gets there
    DAT, adaptive    the switch the trainer reported (`switch_step`, -1 before it) + ramp;
                     unknown (None) until the trial has switched
    joint / no attention   0
    curriculum       state_only_steps, or the switch with state_only_until_switch

The latest of these counts. No torch here: the sweep's driver asks it.
"""

from __future__ import annotations

from trainables.config import TrialConfig


def last_phase_change(cfg: TrialConfig, reported_switch: float | None = None) -> int | None:
    """The first step of the trial's last training phase; None while that step is not known yet
    (an adaptive switch that has not fired) or never comes (a fixed switch at or after `steps`)."""
    switch = attention_switch(cfg, reported_switch)
    if switch is None:
        return None
    curriculum = cfg.curriculum.state_only_steps if not cfg.curriculum.state_only_until_switch else switch
    return max(switch, curriculum)


def attention_switch(cfg: TrialConfig, reported_switch: float | None = None) -> int | None:
    """The step attention is fully on (switch + ramp); 0 without DAT; None if unknown or never."""
    dat = cfg.dat
    if not cfg.model.attention or dat.mode == "none":
        return 0
    if dat.mode == "fixed":
        return dat.switch_step + dat.ramp_steps if dat.switch_step < cfg.steps else None
    if reported_switch is None or reported_switch < 0:
        return None
    return int(reported_switch) + dat.ramp_steps


def planned_phase_change(cfg: TrialConfig) -> int:
    """`last_phase_change` as planned before the trial runs: an adaptive switch at its latest
    (`dat.max_step`), a switch that never comes at `steps`. For estimates, not for decisions."""
    if cfg.model.attention and cfg.dat.mode == "adaptive":
        switch = min(cfg.dat.max_step, cfg.steps) + cfg.dat.ramp_steps
        curriculum = cfg.curriculum.state_only_steps if not cfg.curriculum.state_only_until_switch else switch
        return max(switch, curriculum)
    step = last_phase_change(cfg)
    return cfg.steps if step is None else step
