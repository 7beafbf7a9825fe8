"""Delayed Attention Training: attention held back, then switched on with clean optimizer state."""

import pytest
import torch
import torch.nn.functional as F

from trainables.config import ConfigError, CurriculumConfig, DATConfig, TrialConfig, trial_config_from_dict
from trainables.dat import DATSchedule, curriculum_state_only, hold_attention
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


@pytest.mark.parametrize("cur, step, holding, expected", [
    ({}, 0, True, False),  # no curriculum: DAT trains every target while it holds attention back
    ({"state_only_steps": 5}, 4, False, True), ({"state_only_steps": 5}, 5, False, False),
    ({"state_only_until_switch": True}, 100, True, True), ({"state_only_until_switch": True}, 0, False, False),
])
def test_curriculum_state_only_phase(cur, step, holding, expected):
    assert curriculum_state_only(CurriculumConfig(**cur), step, holding) is expected


def test_the_curriculum_applies_to_joint_training_too():
    losses = {}
    for name, cur in (("none", {}), ("curriculum", {"state_only_steps": 10})):
        cfg = TrialConfig.model_validate({
            "model": {"d_model": 16, "n_layers": 1, "n_heads": 2}, "dat": {"mode": "none"}, "curriculum": cur,
            "eval": {"every": 10, "n_sequences": 8}, "steps": 20,
        })
        losses[name] = []
        train(cfg, report=lambda m, c, n=name: losses[n].append(m["loss"]))
    assert losses["curriculum"][0] != losses["none"][0]  # recall masked out for steps [0, 10)


def test_until_switch_is_state_only_steps_at_a_fixed_switch():
    """The two spellings of DAT + curriculum train bit-identically; plain DAT does not."""
    losses = {}
    for name, cur in (("until", {"state_only_until_switch": True}), ("steps", {"state_only_steps": 20}), ("plain", {})):
        cfg = _cfg(switch_step=20).model_copy(update={"curriculum": CurriculumConfig(**cur)})
        losses[name] = []
        train(cfg, report=lambda m, c, n=name: losses[n].append(m["loss"]))
    assert losses["until"] == losses["steps"]
    assert losses["plain"][0] != losses["until"][0]


@pytest.mark.parametrize("extra, curriculum", [
    ({"dat": {"mode": "fixed", "phase1_targets": "state"}}, {"state_only_until_switch": True}),
    ({"dat": {"mode": "fixed", "phase1_targets": "all"}}, {}),
    ({"dat": {"mode": "none", "phase1_targets": "state"}}, {}),  # it never applied to joint runs
    ({"dat": {"mode": "fixed", "switch_step": 10, "phase1_targets": "state"}, "task": {"name": "modsum"}, "steps": 20}, {}),
])
def test_old_phase1_targets_loads_as_the_curriculum_it_was(extra, curriculum):
    cfg = TrialConfig.model_validate(extra)
    assert cfg.curriculum == CurriculumConfig(**curriculum)


@pytest.mark.parametrize("data, words", [
    ({"dat": {"phase1_targets": "some"}}, "must be all or state"),
    ({"dat": {"mode": "none"}, "curriculum": {"state_only_until_switch": True}}, "needs dat.mode fixed or adaptive"),
    ({"task": {"name": "recall"}, "dat": {"mode": "none"}, "curriculum": {"state_only_steps": 10}}, "needs task modsum_recall"),
    ({"curriculum": {"state_only_steps": 7000}}, "`curriculum.state_only_steps <= steps`"),
    ({"curriculum": {"state_only_steps": 5, "state_only_until_switch": True}}, "not both"),
    ({"dat": {"phase1_targets": "state"}, "curriculum": {"state_only_steps": 5}}, "cannot both be given"),
])
def test_bad_curriculum_is_one_line_naming_the_rule(data, words):
    with pytest.raises(ConfigError) as err:
        trial_config_from_dict(data, "x.yaml")
    assert words in str(err.value) and "\n" not in str(err.value) and str(err.value).startswith("x.yaml: ")
