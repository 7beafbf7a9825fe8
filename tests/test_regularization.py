"""Seed 002's regularisers: dropout (attention, residual) and an EMA of the weights."""

import pytest
import torch

from trainables.config import ModelConfig, TrialConfig
from trainables.model import HybridLM
from trainables.train import CHECKPOINT_FILE, train

VOCAB = 20


def _cfg(steps=20, every=1, **kw) -> TrialConfig:
    base = {
        "model": {"d_model": 16, "n_layers": 1, "n_heads": 2, "attn_zero_init": False},
        "dat": {"mode": "none"},
        "optim": {"warmup_steps": 2, "batch_size": 8},
        "eval": {"every": every, "n_sequences": 8},
        "steps": steps,
    }
    for k, v in kw.items():
        base[k] = {**base.get(k, {}), **v} if isinstance(v, dict) else v
    return TrialConfig.model_validate(base)


def _states(cfg: TrialConfig) -> list[dict]:
    """The checkpoint at every report (every step with every=1)."""
    out = []
    train(cfg, report=lambda m, ckpt: out.append({"metrics": m, **torch.load(f"{ckpt}/{CHECKPOINT_FILE}", weights_only=False)}))
    return out


@pytest.mark.parametrize("bias_correction", [False, True])
def test_ema_weights_follow_the_exponential_average_of_the_live_weights(bias_correction):
    decay = 0.8
    states = _states(_cfg(ema={"decay": decay, "bias_correction": bias_correction}))
    name = "blocks.0.mlp.0.weight"
    live = [s["model"][name] for s in states]
    if bias_correction:  # Adam-style: EMA from zero, divided by 1 - decay^t
        m = torch.zeros_like(live[0])
        for t, w in enumerate(live, start=1):
            m = decay * m + (1 - decay) * w
        expected = m / (1 - decay ** len(live))
    else:  # AveragedModel: copy at the first update, then EMA
        expected = live[0]
        for w in live[1:]:
            expected = decay * expected + (1 - decay) * w
    got = states[-1]["ema"][f"module.{name}"]
    assert torch.allclose(got, expected, atol=1e-6)
    assert not torch.allclose(got, live[-1], atol=1e-4)  # and it is not just the live weights


def test_evaluation_reports_the_ema_weights_and_the_live_ones_as_raw():
    last = _states(_cfg(steps=30, every=30, ema={"decay": 0.9}))[-1]
    m = last["metrics"]
    assert {"acc_1x", "raw_acc_1x", "raw_state_acc_3x"} <= set(m)
    cfg = _cfg(steps=30, every=30, ema={"decay": 0.9})
    from trainables.objectives import make_objective

    objective = make_objective(cfg)
    for key, prefix in (("model", "raw_"), ("ema", "")):
        model = HybridLM(cfg.model, objective.vocab_size)
        weights = last[key] if key == "model" else {k.removeprefix("module."): v for k, v in last[key].items() if k != "n_averaged"}
        model.load_state_dict(weights)
        got = objective.evaluate(model, objective.eval_sets(torch.device("cpu")))
        assert got["acc_2x"] == m[f"{prefix}acc_2x"], key


def test_no_ema_means_no_raw_metrics_and_no_ema_state():
    last = _states(_cfg(steps=10, every=10))[-1]
    assert last["ema"] is None and not any(k.startswith("raw_") for k in last["metrics"])


def test_resume_with_ema_dropout_and_an_adaptive_switch_is_bit_identical(tmp_path):
    kw = dict(
        model={"attn_dropout": 0.1, "resid_dropout": 0.1},
        dat={"mode": "adaptive", "criterion": "loss_plateau", "min_step": 4, "max_step": 30, "patience": 3, "ramp_steps": 5},
        ema={"decay": 0.9, "bias_correction": True},
    )
    cfg = _cfg(steps=40, every=10, **kw)
    straight = _states(cfg)
    kept = {}

    def keep(m, ckpt):
        if m["step"] == 20:
            import shutil

            shutil.copytree(ckpt, tmp_path / "at20")
            kept["m"] = m

    train(cfg, report=keep)
    resumed = []
    train(cfg, report=lambda m, ckpt: resumed.append(torch.load(f"{ckpt}/{CHECKPOINT_FILE}", weights_only=False)), resume_from=tmp_path / "at20")
    for part in ("model", "ema"):
        for k, v in straight[-1][part].items():
            assert torch.equal(v, resumed[-1][part][k]), (part, k)
    assert straight[-1]["dat"] == resumed[-1]["dat"]


def _model(**kw) -> HybridLM:
    torch.manual_seed(0)
    return HybridLM(ModelConfig(d_model=16, n_layers=1, n_heads=2, attn_zero_init=False, **kw), VOCAB)


@pytest.mark.parametrize("kw", [{"attn_dropout": 0.3}, {"resid_dropout": 0.3}], ids=["attention", "residual"])
def test_dropout_is_random_in_training_and_off_in_evaluation(kw):
    model = _model(mixer="none", **kw)
    x = torch.randint(VOCAB, (4, 12), generator=torch.Generator().manual_seed(0))
    model.train()
    assert not torch.allclose(model(x), model(x))
    model.eval()
    assert torch.equal(model(x), model(x))
    model.eval()
    plain = _model(mixer="none").eval()
    assert torch.equal(model(x), plain(x))  # in evaluation the model is the dropout-free one


def test_attention_dropout_leaves_an_attention_free_model_deterministic():
    model = _model(mixer="lstm", attention=False, attn_dropout=0.5).train()
    x = torch.randint(VOCAB, (4, 12), generator=torch.Generator().manual_seed(0))
    assert torch.equal(model(x), model(x))


def test_attention_only_model_has_no_mlp_and_no_mixer():
    model = _model(mixer="none", mlp_ratio=0)
    assert model.blocks[0].mlp is None and model.blocks[0].mixer is None
    names = {n.split(".")[2] for n, _ in model.named_parameters() if n.startswith("blocks.")}
    assert names == {"attn", "attn_norm"}
