"""The SSM mixer: the parallel scan equals the sequential reference for every transition family,
each family can represent what it claims (parity, Z_m), and the mixer is causal."""

import math

import pytest
import torch

from trainables.config import ConfigError, ModelConfig, load_trial_config, with_overrides
from trainables import ssm
from trainables.model import HybridLM
from trainables.ssm import TRANSITIONS, SSMMixer, selective_scan, selective_scan_reference
from trainables.train import train


@pytest.fixture(autouse=True)
def one_thread():
    """Trials run on one CPU thread; several threads on a busy shared machine only add contention."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _scan_inputs(L: int, b=2, E=3, N=4, seed=0, transition="decay"):
    """Random float64 scan inputs (u, delta, A, B, C, D[, theta]) that require gradients."""
    g = torch.Generator().manual_seed(seed)
    r = lambda *s: torch.randn(*s, generator=g, dtype=torch.float64)  # noqa: E731
    u, B, C = r(b, L, E), r(b, L, N), r(b, L, N)
    delta = torch.nn.functional.softplus(r(b, L, E))  # positive step sizes, some large
    A = -torch.exp(r(E, N // 2 if transition == "rotation" else N))
    D = r(E)
    inputs = [u, delta, A, B, C, D] + ([2 * r(b, L, N // 2)] if transition == "rotation" else [])  # angles of a few rad
    return [t.requires_grad_() for t in inputs]


def _scan(inputs, transition, fast, chunk=None, method="chunked"):
    u, delta, A, B, C, D, *theta = inputs
    kw = dict(transition=transition, theta=theta[0] if theta else None)
    if fast:
        return selective_scan(u, delta, A, B, C, D, chunk=chunk, method=method, **kw)
    return selective_scan_reference(u, delta, A, B, C, D, **kw)


def _assert_same_outputs_and_gradients(inputs, fast, slow):
    assert torch.allclose(fast, slow, rtol=1e-10, atol=1e-10)
    weights = torch.randn_like(fast)  # a generic scalar function of the outputs
    g_fast = torch.autograd.grad((fast * weights).sum(), inputs, allow_unused=True)  # L=1 never uses A
    g_slow = torch.autograd.grad((slow * weights).sum(), inputs, allow_unused=True)
    for name, a, b, x in zip("u delta A B C D theta".split(), g_fast, g_slow, inputs):
        a = torch.zeros_like(x) if a is None else a
        b = torch.zeros_like(x) if b is None else b
        assert torch.allclose(a, b, rtol=1e-9, atol=1e-9), name


@pytest.mark.parametrize("transition", TRANSITIONS)
@pytest.mark.parametrize("recompute", [False, True], ids=["kept", "recomputed"])  # the backward's two sources
@pytest.mark.parametrize("chunk", [1, 4, 16, 128])  # 128: one chunk, the whole scan in parallel
@pytest.mark.parametrize("L", [1, 2, 7, 13, 64, 100])
def test_parallel_scan_equals_the_sequential_reference_in_outputs_and_gradients(L, chunk, recompute, transition, monkeypatch):
    if recompute:  # keep only the chunk-start states; the backward pass recomputes each chunk
        monkeypatch.setattr(ssm, "KEEP_MAX", 0)
    inputs = _scan_inputs(L, transition=transition)
    _assert_same_outputs_and_gradients(inputs, _scan(inputs, transition, True, chunk), _scan(inputs, transition, False))


@pytest.mark.parametrize("transition", TRANSITIONS)
@pytest.mark.parametrize("L", [1, 2, 7, 13, 64, 100])
def test_step_scan_equals_the_sequential_reference_in_outputs_and_gradients(L, transition):
    inputs = _scan_inputs(L, transition=transition)
    _assert_same_outputs_and_gradients(inputs, _scan(inputs, transition, True, method="step"), _scan(inputs, transition, False))


def test_step_scan_is_the_cpu_default_and_gives_way_to_the_chunked_scan_beyond_keep_max(monkeypatch):
    calls = []
    for name in ("_StepScan", "_ChunkedScan"):
        cls = getattr(ssm, name)
        monkeypatch.setattr(cls, "apply", lambda *a, _n=name, _f=cls.apply: calls.append(_n) or _f(*a))
    inputs = _scan_inputs(9)
    _scan(inputs, "decay", True, method="auto")
    monkeypatch.setattr(ssm, "KEEP_MAX", 0)
    _scan(inputs, "decay", True, method="auto")
    with torch.no_grad():  # evaluation keeps nothing: the step scan at any size
        _scan(inputs, "decay", True, method="auto")
    assert calls == ["_StepScan", "_ChunkedScan", "_StepScan"]


def test_step_scans_alive_at_once_never_share_saved_buffers():
    """Two layers' scans run forward before either runs backward; each keeps its own pooled buffers,
    and buffers handed back by one backward pass serve a later forward pass correctly."""
    for _ in range(2):  # the second round takes its buffers from the pool
        ins = [_scan_inputs(L, seed=s) for L, s in ((11, 1), (11, 2), (5, 3))]
        outs = [_scan(i, "decay", True, method="step") for i in ins]
        for i, out in zip(ins, outs):
            _assert_same_outputs_and_gradients(i, out, _scan(i, "decay", False))


def test_the_families_differ():
    """Same inputs, three families, three different outputs (a family flag that is ignored would pass the test above)."""
    inputs = _scan_inputs(20, transition="rotation")
    u, delta, A, B, C, D, theta = (t.detach() for t in inputs)
    A_full = torch.cat([A, A], -1)
    outs = [selective_scan(u, delta, A_full, B, C, D), selective_scan(u, delta, A_full, B, C, D, transition="signed"),
            selective_scan(u, delta, A, B, C, D, transition="rotation", theta=theta)]
    for i in range(3):
        for j in range(i):
            assert not torch.allclose(outs[i], outs[j], atol=1e-3)


def _counting_inputs(digits: torch.Tensor, N: int):
    """One channel (E = 1) whose state starts at (1, 0, ...) by a first input of 1 and then only turns or flips:
    u = 1 at t = 0, else 0 (the input only sets the start), delta = 1, B = e_0, C = e_0 and e_{N/2} read separately."""
    L = digits.numel()
    u = torch.zeros(1, L, 1, dtype=torch.float64)
    u[0, 0] = 1.0
    B = torch.zeros(1, L, N, dtype=torch.float64)
    B[..., 0] = 1.0
    return u, torch.ones(1, L, 1, dtype=torch.float64), B, torch.zeros(1, dtype=torch.float64)


@pytest.mark.parametrize("m", [2, 3, 7, 10])
def test_rotation_family_tracks_a_sum_mod_m_over_1000_steps(m):
    """With |a| = 1 (A = 0) and angle 2π d/m for digit d, the state's angle is 2π (sum mod m)/m at every step."""
    g = torch.Generator().manual_seed(m)
    digits = torch.randint(m, (1001,), generator=g)
    digits[0] = 0  # the first step only writes the start state
    N = 2
    u, delta, B, D = _counting_inputs(digits, N)
    theta = (2 * math.pi * digits / m).double().view(1, -1, 1)  # (1, L, 1)
    A = torch.zeros(1, 1, dtype=torch.float64)
    reads = []
    for k in range(N):  # read cos and sin of the state's angle
        C = torch.zeros(1, digits.numel(), N, dtype=torch.float64)
        C[..., k] = 1.0
        reads.append(selective_scan(u, delta, A, B, C, D, transition="rotation", theta=theta)[0, :, 0])
    angle = torch.atan2(reads[1], reads[0]) % (2 * math.pi)
    decoded = torch.round(angle * m / (2 * math.pi)).long() % m
    assert torch.equal(decoded, torch.cumsum(digits, 0) % m)


@pytest.mark.parametrize("transition,counts", [("signed", True), ("decay", False)])
def test_signed_family_tracks_parity_and_decay_cannot(transition, counts):
    """Parity of a bit stream: a large step size (delta A -> -inf) makes a_t = -1 in the signed family, a flip; in the
    decay family the same step size makes a_t = 0 (the state is forgotten), and no delta gives a negative a_t."""
    g = torch.Generator().manual_seed(0)
    bits = torch.randint(2, (1000,), generator=g)
    bits[0] = 0
    N = 1
    u, _, B, D = _counting_inputs(bits, N)
    delta = torch.where(bits.bool(), 1e3, 1e-12).double().view(1, -1, 1)  # a flip for 1, a keep for 0
    u = u / delta  # the first input writes exactly 1
    A = -torch.ones(1, N, dtype=torch.float64)
    y = selective_scan(u, delta, A, B, B.clone(), D, transition=transition)[0, :, 0]
    parity = torch.cumsum(bits, 0) % 2
    assert torch.equal((y < 0).long(), parity) == counts


def test_fused_kernel_is_used_only_for_the_families_it_computes(monkeypatch):
    """mamba_ssm's kernel computes exp(Δ A) itself: decay and rotation (through B and C) can use it, signed cannot;
    never on the CPU, never when it is not installed."""
    monkeypatch.setattr(ssm, "_fused_kernel", lambda: object())  # as if mamba_ssm were installed
    assert [t for t in TRANSITIONS if ssm._fused_applies(True, t, "auto")] == ["decay", "rotation"]
    assert not any(ssm._fused_applies(False, t, "auto") for t in TRANSITIONS)
    assert not ssm._fused_applies(True, "decay", "chunked")
    monkeypatch.setattr(ssm, "_fused_kernel", lambda: None)  # not installed
    assert not any(ssm._fused_applies(True, t, "auto") for t in TRANSITIONS)


@pytest.mark.skipif(not torch.cuda.is_available() or ssm._fused_kernel() is None,
                    reason="needs a CUDA device and mamba-ssm's kernel importable (docs/benchmarks.md, target 7: how it ran)")
@pytest.mark.parametrize("transition", ssm.FUSED_TRANSITIONS)
@pytest.mark.parametrize("L", [1, 45, 200])
def test_fused_kernel_equals_the_reference_in_outputs_and_gradients(transition, L):
    """mamba_ssm's float32 kernel against the float64 loop, through `selective_scan` as the mixer calls it."""
    ref_inputs = _scan_inputs(L, b=4, E=32, N=16, seed=L, transition=transition)
    inputs = [t.detach().float().cuda().requires_grad_() for t in ref_inputs]
    assert ssm._fused_applies(True, transition, "auto")
    fast, slow = _scan(inputs, transition, True, method="auto"), _scan(ref_inputs, transition, False)
    weights = torch.randn_like(slow)
    g_fast = torch.autograd.grad((fast * weights.float().cuda()).sum(), inputs, allow_unused=True)
    g_slow = torch.autograd.grad((slow * weights).sum(), ref_inputs, allow_unused=True)  # L=1 never uses A
    for name, a, b, x in zip("y u delta A B C D theta".split(), [fast, *g_fast], [slow, *g_slow], [slow, *ref_inputs]):
        a = torch.zeros_like(x) if a is None else a.detach().double().cpu()
        b = torch.zeros_like(x) if b is None else b.detach()
        assert torch.isfinite(a).all(), name
        # float32 with fast-math exponentials; a gradient that is zero in exact arithmetic (theta at L=1: the
        # turns of B and C cancel) is rounding noise on the outputs' scale
        assert (a - b).norm() <= 1e-4 * max(b.norm(), slow.detach().norm()), name


def test_rotation_needs_an_even_state_size():
    with pytest.raises(ValueError, match="ssm_d_state must be even, got 5"):
        ModelConfig(mixer="ssm", ssm_transition="rotation", ssm_d_state=5)
    with pytest.raises(ConfigError, match="ssm_transition"):
        with_overrides(load_trial_config("tiny"), {"model.ssm_transition": "complex"})


@pytest.mark.parametrize("method", ["step", "chunked"])
@pytest.mark.parametrize("transition", TRANSITIONS)
def test_fast_scans_are_stable_in_float32_over_long_sequences(transition, method):
    inputs = [t.detach().float() for t in _scan_inputs(400, seed=1, transition=transition)]
    fast, slow = _scan(inputs, transition, True, method=method), _scan(inputs, transition, False)
    assert torch.isfinite(fast).all()
    assert torch.allclose(fast, slow, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("L", [1, 3, 13])
def test_causal_conv_equals_the_trimmed_depthwise_conv1d_in_outputs_and_gradients(L):
    conv = torch.nn.Conv1d(6, 6, 4, groups=6, padding=3).double()
    x = torch.randn(3, L, 6, dtype=torch.float64, requires_grad=True)
    fast, slow = ssm.causal_conv(x, conv), conv(x.transpose(1, 2))[..., :L].transpose(1, 2)
    assert torch.allclose(fast, slow, rtol=1e-12, atol=1e-12)
    gy = torch.randn_like(fast)
    for a, b in zip(torch.autograd.grad(fast, [x, conv.weight, conv.bias], gy),
                    torch.autograd.grad(slow, [x, conv.weight, conv.bias], gy)):
        assert torch.allclose(a, b, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("transition", TRANSITIONS)
@pytest.mark.parametrize("t", [0, 5, 12])
def test_changing_input_t_never_changes_mixer_outputs_before_t(t, transition):
    torch.manual_seed(0)
    mixer = SSMMixer(8, d_state=4, d_conv=4, expand=2, transition=transition).eval()
    x = torch.randn(2, 13, 8)
    y = x.clone()
    y[:, t] += 1.0
    with torch.no_grad():
        a, b = mixer(x), mixer(y)
    assert torch.equal(a[:, :t], b[:, :t])
    assert not torch.allclose(a[:, t:], b[:, t:])


@pytest.mark.parametrize("transition", TRANSITIONS)
@pytest.mark.parametrize("attention", [True, False])
def test_hybrid_with_ssm_mixer_is_causal(attention, transition):
    torch.manual_seed(0)
    model = HybridLM(ModelConfig(d_model=16, n_layers=2, n_heads=2, mixer="ssm", attention=attention,
                                 attn_zero_init=False, ssm_d_state=4, ssm_transition=transition), 20).eval()
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


@pytest.mark.parametrize("transition", TRANSITIONS)
def test_hybrid_with_ssm_mixer_learns(transition):
    cfg = with_overrides(load_trial_config("tiny"), {"model.mixer": "ssm", "model.ssm_d_state": 8, "dat.mode": "none",
                                                      "model.ssm_transition": transition,
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
