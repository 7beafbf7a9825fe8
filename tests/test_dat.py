"""Delayed Attention Training: attention held back, then switched on with clean optimizer state."""

import torch
import torch.nn.functional as F

from trainables.config import DATConfig, TrialConfig
from trainables.dat import DATSchedule, hold_attention
from trainables.model import HybridLM
from trainables.tasks import IGNORE, SequenceTask
from trainables.train import build_optimizer, train


def _cfg(**dat) -> TrialConfig:
    return TrialConfig.model_validate({
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "attn_zero_init": False},
        "dat": {"mode": "fixed", **dat},
        "optim": {"warmup_steps": 0},
        "eval": {"every": 10, "n_sequences": 8},
        "steps": 30,
    })


def _attention_snapshots(cfg: TrialConfig) -> dict[int, dict]:
    """Attention parameters at every report, read back from the checkpoints."""
    snaps = {}

    def report(metrics, ckpt):
        state = torch.load(f"{ckpt}/state.pt", weights_only=False)
        snaps[int(metrics["step"])] = {
            "attn": {k: v for k, v in state["model"].items() if ".attn" in k},
            "optim_ids": set(state["optimizer"]["state"]),
            "active": metrics["attention_active"],
        }

    train(cfg, report=report)
    return snaps


def test_gate_keeps_attention_untouched_before_the_switch_and_trains_it_after():
    snaps = _attention_snapshots(_cfg(switch_step=20, hold="gate"))
    at_10, at_20, at_30 = snaps[10], snaps[20], snaps[30]
    for k in at_10["attn"]:
        assert torch.equal(at_10["attn"][k], at_20["attn"][k]), k  # steps 10..19: still gated
    assert at_10["active"] == 0.0 and at_20["active"] == 0.0 and at_30["active"] == 1.0
    changed = [k for k in at_20["attn"] if not torch.equal(at_20["attn"][k], at_30["attn"][k])]
    assert changed == list(at_20["attn"])  # every attention tensor trains after the switch
    # the optimizer holds state only for the parameters that trained
    assert len(at_30["optim_ids"]) > len(at_20["optim_ids"])


def test_freeze_runs_attention_but_does_not_train_it():
    snaps = _attention_snapshots(_cfg(switch_step=20, hold="freeze"))
    for k in snaps[10]["attn"]:
        assert torch.equal(snaps[10]["attn"][k], snaps[20]["attn"][k])
    assert any(not torch.equal(snaps[20]["attn"][k], snaps[30]["attn"][k]) for k in snaps[20]["attn"])


def test_gated_phase_trains_exactly_like_the_attention_free_model():
    cfg = _cfg(switch_step=30)
    task = SequenceTask(cfg.task)
    torch.manual_seed(0)
    hybrid = HybridLM(cfg.model, task.vocab_size)
    plain = HybridLM(cfg.model.model_copy(update={"attention": False}), task.vocab_size)
    plain.load_state_dict(hybrid.state_dict(), strict=False)
    attn_before = [p.clone() for p in hybrid.attention_parameters()]
    hold_attention(hybrid, "gate")
    opts = [build_optimizer(m, cfg.optim) for m in (hybrid, plain)]
    gen = torch.Generator().manual_seed(1)
    for _ in range(5):
        batch = task.sample_train(16, gen)
        losses = []
        for model, opt in zip((hybrid, plain), opts):
            logits = model(batch.tokens)
            loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE)
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        assert losses[0] == losses[1]
    with torch.no_grad():
        assert torch.equal(hybrid(batch.tokens), plain(batch.tokens))
    for before, after in zip(attn_before, hybrid.attention_parameters()):
        assert torch.equal(before, after)  # no update, no weight decay


def test_schedule_switches_once_at_the_fixed_step():
    s = DATSchedule(DATConfig(mode="fixed", switch_step=5), has_attention=True)
    fired = [step for step in range(10) if s.advance(step)]
    assert fired == [5] and s.active and s.state.switch_step == 5


def test_mode_none_is_active_from_step_zero():
    s = DATSchedule(DATConfig(mode="none"), has_attention=True)
    assert s.advance(0) and s.state.switch_step == 0 and s.attention_lr_factor(0) == 1.0


def test_rewarmup_ramps_the_attention_learning_rate():
    s = DATSchedule(DATConfig(mode="fixed", switch_step=10, rewarmup_steps=4), has_attention=True)
    for step in range(10):
        s.advance(step)
        assert s.attention_lr_factor(step) == 0.0
    s.advance(10)
    assert [s.attention_lr_factor(t) for t in range(10, 15)] == [0.25, 0.5, 0.75, 1.0, 1.0]


def test_schedule_state_round_trips():
    s = DATSchedule(DATConfig(mode="fixed", switch_step=3), has_attention=True)
    for step in range(5):
        s.advance(step)
    t = DATSchedule(DATConfig(mode="fixed", switch_step=3), has_attention=True)
    t.load_state_dict(s.state_dict())
    assert t.active and t.state.switch_step == 3 and not t.advance(6)


def test_state_only_phase1_applies_only_while_attention_is_held():
    # a model without attention is never "before the switch": it trains on every target
    losses = {}
    for targets in ("state", "all"):
        cfg = TrialConfig.model_validate({
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "attention": False},
            "dat": {"mode": "none", "phase1_targets": targets},
            "eval": {"every": 10, "n_sequences": 8}, "steps": 20,
        })
        losses[targets] = []
        train(cfg, report=lambda m, c, t=targets: losses[t].append(m["loss"]))
    assert losses["state"] == losses["all"]
    assert not DATSchedule(DATConfig(), has_attention=False).holding


def test_state_only_phase1_masks_recall_before_the_switch():
    losses = {}
    for targets in ("state", "all"):
        losses[targets] = []
        train(_cfg(switch_step=30, phase1_targets=targets), report=lambda m, c, t=targets: losses[t].append(m["loss"]))
    assert losses["state"][0] != losses["all"][0]
