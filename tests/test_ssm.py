"""The SSM mixer: the parallel scan equals the sequential reference, and the mixer is causal."""

import pytest
import torch

from trainables.config import ModelConfig, load_trial_config, with_overrides
from trainables import ssm
from trainables.model import HybridLM
from trainables.ssm import SSMMixer, selective_scan, selective_scan_reference
from trainables.train import train


@pytest.fixture(autouse=True)
def one_thread():
    """Trials run on one CPU thread; several threads on a busy shared machine only add contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _scan_inputs(L: int, b=2, E=3, N=4, seed=0):
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    u, B, C = r(b, L, E), r(b, L, N), r(b, L, N)
    delta = torch.nn.functional.softplus(r(b, L, E))  # positive step sizes, some large
    A = -torch.exp(r(E, N))
    D = r(E)
    return [t.requires_grad_() for t in (u, delta, A, B, C, D)]


@pytest.mark.parametrize("recompute", [False, True], ids=["kept", "recomputed"])  # the backward's two sources
@pytest.mark.parametrize("chunk", [1, 4, 16, 128])  # 128: one chunk, the whole scan in parallel
@pytest.mark.parametrize("L", [1, 2, 7, 13, 64, 100])
def test_parallel_scan_equals_the_sequential_reference_in_outputs_and_gradients(L, chunk, recompute, monkeypatch):
    if recompute:  # keep only the chunk-start states; the backward pass recomputes each chunk
        monkeypatch.setattr(ssm, "KEEP_MAX", 0)
    inputs = _scan_inputs(L)
    fast, slow = selective_scan(*inputs, chunk=chunk), selective_scan_reference(*inputs)
    assert torch.allclose(fast, slow, rtol=1e-10, atol=1e-10)
    weights = torch.randn_like(fast)  # a generic scalar function of the outputs
    g_fast = torch.autograd.grad((fast * weights).sum(), inputs, allow_unused=True)  # L=1 never uses A
    g_slow = torch.autograd.grad((slow * weights).sum(), inputs)
    for name, a, b, x in zip("u delta A B C D".split(), g_fast, g_slow, inputs):
        a = torch.zeros_like(x) if a is None else a
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-9), name


def test_parallel_scan_is_stable_in_float32_over_long_sequences():
    inputs = [t.detach().float() for t in _scan_inputs(400, seed=1)]
    fast, slow = selective_scan(*inputs), selective_scan_reference(*inputs)
    assert torch.isfinite(fast).all()
    assert torch.allclose(fast, slow, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("t", [0, 5, 12])
def test_changing_input_t_never_changes_mixer_outputs_before_t(t):
    torch.manual_seed(0)
    mixer = SSMMixer(8, d_state=4, d_conv=4, expand=2).eval()
    x = torch.randn(2, 13, 8)
    y = x.clone()
    y[:, t] += 1.0
    with torch.no_grad():
        a, b = mixer(x), mixer(y)
    assert torch.equal(a[:, :t], b[:, :t])
    assert not torch.allclose(a[:, t:], b[:, t:])


@pytest.mark.parametrize("attention", [True, False])
def test_hybrid_with_ssm_mixer_is_causal(attention):
    torch.manual_seed(0)
    model = HybridLM(ModelConfig(d_model=16, n_layers=2, n_heads=2, mixer="ssm", attention=attention,
                                 attn_zero_init=False, ssm_d_state=4), 20).eval()
    x = torch.randint(20, (3, 16), generator=torch.Generator().manual_seed(1))
    for t in (0, 9, 15):
        y = x.clone()
        y[:, t] = (y[:, t] + 1) % 20
        with torch.no_grad():
            a, b = model(x), model(y)
        assert torch.equal(a[:, :t], b[:, :t]) and not torch.allclose(a[:, t:], b[:, t:])


def test_step_sizes_start_in_the_mamba_range():
    torch.manual_seed(0)
    mixer = SSMMixer(64, expand=2)
    dt = torch.nn.functional.softplus(mixer.dt_proj.bias)
    assert dt.min() >= 1e-3 * 0.999 and dt.max() <= 1e-1 * 1.001
    assert dt.max() / dt.min() > 10  # spread over the range, not one value
    assert torch.allclose(torch.exp(mixer.A_log[0]), torch.arange(1, 17, dtype=torch.float32))  # S4D-real


def test_hybrid_with_ssm_mixer_learns():
    cfg = with_overrides(load_trial_config("tiny"), {"model.mixer": "ssm", "model.ssm_d_state": 8, "dat.mode": "none",
                                                      "task.name": "modsum", "steps": 80, "eval.every": 40})
    losses = []
    train(cfg, report=lambda m, c: losses.append(m["loss"]))
    assert losses[-1] < 0.8 * losses[0], losses


def test_ssm_decay_rates_get_no_weight_decay():
    from trainables.train import build_optimizer
    from trainables.config import OptimConfig

    model = HybridLM(ModelConfig(d_model=16, n_layers=1, n_heads=2, mixer="ssm"), 20)
    opt = build_optimizer(model, OptimConfig(weight_decay=0.1))
    decayed = {id(p) for g in opt.param_groups if g["weight_decay"] > 0 for p in g["params"]}
    mixer = model.blocks[0].mixer
    assert id(mixer.A_log) not in decayed and id(mixer.D) not in decayed
    assert id(mixer.in_proj.weight) in decayed
