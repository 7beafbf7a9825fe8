"""A Mamba-style selective state-space mixer (Gu & Dao, 2023), in pure PyTorch, with three
families of state transition.

Structure, for input x (B, L, D) and inner width E = expand * D, state size N per channel::

    x ──in_proj──> (u, z)                     (B, L, E) each
    u ──causal depthwise conv (width d_conv)──> SiLU ──> u
    u ──x_proj──> (dt, B_t, C_t[, θ_t])       (B, L, R), (B, L, N), (B, L, N)[, (B, L, N/2)]
    Δ = softplus(dt_proj(dt))                 (B, L, E)   step size per channel and position
    A = -exp(A_log)                           (E, N) or (E, N/2) for rotation
    h_t = a_t ⊙ h_{t-1} + Δ_t B_t u_t         (B, E, N)   the selective scan
    y_t = C_t · h_t + D * u_t                 (B, L, E)
    y * SiLU(z) ──out_proj──> (B, L, D)

The transition a_t (`transition`, `model.ssm_transition`):

    decay     a_t = exp(Δ_t A)         in (0, 1]    Mamba-1. Positive and real: cannot track
              parity, let alone a sum mod m (Grazzi et al. 2024; Merrill et al. 2024).
    signed    a_t = 2 exp(Δ_t A) - 1   in (-1, 1]   Grazzi et al.'s negative-eigenvalue extension:
              a large step size flips the sign (parity); still real, so not Z_m for m > 2.
    rotation  a_t = exp(Δ_t A) R(θ_t)  |a_t| <= 1   the state is N/2 complex numbers (pairs
              (h_n, h_{n+N/2})), each scaled by exp(Δ A) and turned by an input-dependent angle
              θ_t (one per pair, shared by the channels, as in Mamba-3): R(2π d/m) for digit d
              represents Z_m for any m.

The rotation family runs on the decay scan (Mamba-3's data-dependent-RoPE identity): rotations
commute with the scalar decay, so with Φ_t = θ_1 + ... + θ_t the rotated state is R(Φ_t) h'_t, where
h'_t is the decay scan driven by R(-Φ_t) B_t and read out by R(-Φ_t) C_t. Only B and C turn; the
scan is the decay one.

The scan is the only sequential part; `selective_scan` has two implementations, each with its own
backward pass (a custom autograd function, so autograd never records the scan's many small ops):

    _StepScan     the CPU default: one step at a time, in place, the (b, N, E) state of a step in
                  cache, saved states in pooled buffers (the scan alone measured ~2.3x faster than the
                  chunked scan on one thread; docs/benchmarks.md, target 8).
    _ChunkedScan  log-depth (Hillis-Steele) parallel scan of the affine maps h -> a h + b within
                  chunks of SCAN_CHUNK steps, the last state carried between chunks; for CUDA without
                  the fused kernel, and for training batches whose saved states would pass KEEP_MAX
                  (it can keep only the chunk starts and recompute). Under no_grad only one chunk's
                  (b, chunk, E, N) tensors exist at a time. On one CPU thread chunks of 1-2 measured
                  fastest (larger chunks may pay on many threads or a GPU; not measured).

`selective_scan_reference` is the plain loop over time for every family (the rotation as an
explicit 2x2 turn of each pair, not the RoPE identity): the oracle of the tests.

On a CUDA device with the `mamba-ssm` package installed, its fused kernel (`selective_scan_fn`,
which computes exp(Δ A) itself) is used for `decay` and, through the RoPE identity, `rotation`;
`signed` has no fused kernel and always runs the PyTorch scan. The kernel is imported lazily and
never on the CPU. Checked on an H100 against the float64 reference (outputs and every gradient within
1e-4 relative, measured <= 1.8e-6: tests/test_ssm.py's GPU test, skipped without one, and bench/ssm_fused.py).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

TRANSITIONS = ("decay", "signed", "rotation")
FUSED_TRANSITIONS = ("decay", "rotation")  # those mamba_ssm's kernel computes (exp(Δ A) inside it)


def selective_scan_reference(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor,
                             transition: str = "decay", theta: Tensor | None = None) -> Tensor:
    """The scan as a loop over time, for every family. u, delta: (b, L, E); B, C: (b, L, N); D: (E,);
    A: (E, N), or (E, N/2) for rotation with theta (b, L, N/2) -> (b, L, E)."""
    b, L, E = u.shape
    N = B.shape[-1]
    h = u.new_zeros(b, E, N)  # (b, E, N); for rotation the pairs are (h[..., n], h[..., n + N/2])
    ys = []
    for t in range(L):
        z = delta[:, t, :, None] * A  # (b, E, N) or (b, E, N/2)
        x = (delta[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]  # (b, E, N)
        if transition == "decay":
            h = torch.exp(z) * h + x
        elif transition == "signed":
            h = (2 * torch.exp(z) - 1) * h + x
        elif transition == "rotation":
            r, c, s = torch.exp(z), torch.cos(theta[:, t, None, :]), torch.sin(theta[:, t, None, :])
            h1, h2 = h.chunk(2, dim=-1)  # (b, E, N/2) each
            h = torch.cat([r * (c * h1 - s * h2), r * (s * h1 + c * h2)], dim=-1) + x
        else:
            raise ValueError(f"transition must be one of {TRANSITIONS}, got {transition!r}")
        ys.append((h * C[:, t, None, :]).sum(-1))  # (b, E)
    return torch.stack(ys, dim=1) + u * D


SCAN_CHUNK = 2  # steps scanned in parallel at once; measured on one CPU thread (bench/ssm_speed.py)
KEEP_MAX = 2**26  # float elements (256 MB in float32) that training may keep per scan for the backward pass


def _affine_scan(a: Tensor, b: Tensor, reverse: bool = False) -> Tensor:
    """Inclusive scan of affine maps along dim 1 from h = 0, in ceil(log2 T) passes (Hillis-Steele).
    b: (b, T, ...); a: (b, T - 1, ...), the coefficients between neighbours:
    forward h_t = a_{t-1} h_{t-1} + b_t, reverse h_t = a_t h_{t+1} + b_t.
    After the pass with offset k, position t holds the composition of 2k consecutive maps;
    `a` holds the product of the k coefficients that link t to t -+ k, where still needed."""
    T, k = b.shape[1], 1
    while k < T:
        if reverse:  # compose each map with the one k steps later (applied first)
            b = torch.cat([torch.addcmul(b[:, :-k], a, b[:, k:]), b[:, -k:]], dim=1)
            if 2 * k < T:  # the last pass needs no products
                a = a[:, : T - 2 * k] * a[:, k : T - k]
        else:  # compose each map with the one k steps earlier (applied first)
            b = torch.cat([b[:, :k], torch.addcmul(b[:, k:], a, b[:, :-k])], dim=1)
            if 2 * k < T:
                a = a[:, k:] * a[:, : T - 2 * k]
        k *= 2
    return b


def _transition(delta: Tensor, A: Tensor, signed: bool) -> Tensor:
    """a_t for the real families: exp(Δ A), or 2 exp(Δ A) - 1 if signed. delta (b, T, E), A (E, N) -> (b, T, E, N)."""
    # exp(-80) < 2e-35: below that the state is forgotten either way, and clamping keeps exp and
    # the products after it clear of float32 denormals, which are 10-100x slower on a CPU
    a = torch.exp((delta.unsqueeze(-1) * A).clamp_(min=-80.0))
    return a.mul_(2).sub_(1) if signed else a


def _chunk_states(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, h0: Tensor, signed: bool) -> tuple[Tensor, Tensor]:
    """One chunk of the scan from state h0 (b, E, N). u, delta: (b, T, E); B: (b, T, N).
    Returns the transitions a and the states h, each (b, T, E, N)."""
    a = _transition(delta, A, signed)  # (b, T, E, N)
    x = (delta * u).unsqueeze(-1) * B.unsqueeze(2)  # (b, T, E, N)
    x[:, 0].addcmul_(a[:, 0], h0)  # the carried state enters at the first step
    return a, _affine_scan(a[:, 1:], x)


class _ChunkedScan(torch.autograd.Function):
    """The real selective scan (decay or signed) on the CPU: parallel within chunks of `chunk`
    steps, the state carried from chunk to chunk. The backward pass runs the adjoint recurrence
    g_t = a_{t+1} g_{t+1} + dL/dh_t as a reverse scan, chunk by chunk from the end; the
    transition's derivative is da/d(Δ A) = a (decay) or a + 1 (signed).

    Memory: evaluation (no gradients) holds one chunk, O(b * chunk * E * N), at any length.
    Training keeps each chunk's transitions and states for the backward pass while they total at
    most KEEP_MAX elements (recomputing them costs ~25% of the step); beyond that it keeps only
    the states at chunk starts and recomputes each chunk in the backward pass."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, chunk, grad, signed):
        # u, delta: (b, L, E); A: (E, N); B, C: (b, L, N); D: (E,) -> y (b, L, E)
        b, L, E = u.shape
        N = A.shape[1]
        keep = grad and 2 * b * L * E * N <= KEEP_MAX
        h = u.new_zeros(b, E, N)
        y, starts, kept = torch.empty_like(u), [], []
        for s in range(0, L, chunk):
            if grad:  # a copy: a view would hold on to the whole chunk
                starts.append(h if keep else h.clone())
            a, hs = _chunk_states(u[:, s : s + chunk], delta[:, s : s + chunk], A, B[:, s : s + chunk], h, signed)
            y[:, s : s + chunk] = (hs * C[:, s : s + chunk].unsqueeze(2)).sum(-1)  # (b, T, E)
            h = hs[:, -1]
            if keep:
                kept.append((a, hs))
        if grad:
            ctx.chunk, ctx.kept, ctx.signed = chunk, kept, signed
            ctx.save_for_backward(u, delta, A, B, C, D, torch.stack(starts, dim=1))  # starts: (b, L/chunk, E, N)
        return torch.addcmul(y, u, D)

    @staticmethod
    def backward(ctx, gy):
        # gy: (b, L, E) -> gradients of u, delta, A, B, C, D
        u, delta, A, B, C, D, starts = ctx.saved_tensors
        chunk, L, signed = ctx.chunk, u.shape[1], ctx.signed
        gu, gD = gy * D, (gy * u).sum((0, 1))
        gdelta, gB, gC, gA = torch.empty_like(delta), torch.empty_like(B), torch.empty_like(C), torch.zeros_like(A)
        carry = None  # a_{t+1} g_{t+1} from the chunk after this one, (b, E, N)
        for i, s in reversed(list(enumerate(range(0, L, chunk)))):
            sl = slice(s, s + chunk)
            uc, dc, Bc, Cc, gyc = u[:, sl], delta[:, sl], B[:, sl], C[:, sl], gy[:, sl]
            h0 = starts[:, i].unsqueeze(1)  # (b, 1, E, N)
            a, h = ctx.kept[i] if ctx.kept else _chunk_states(uc, dc, A, Bc, starts[:, i], signed)  # (b, T, E, N)
            gh = gyc.unsqueeze(-1) * Cc.unsqueeze(2)  # dL/dh_t through y_t only
            if carry is not None:
                gh[:, -1] += carry
            g = _affine_scan(a[:, 1:], gh, reverse=True)  # total dL/dh_t = gh_t + a_{t+1} g_{t+1}
            ag = a * g
            carry = ag[:, 0]
            h_prev = torch.cat([h0, h[:, :-1]], dim=1) if h.shape[1] > 1 else h0
            gz = (ag + g if signed else ag) * h_prev  # dL/d(Δ A) = g_t (da/dz) h_{t-1}
            gC[:, sl] = (h * gyc.unsqueeze(-1)).sum(2)
            gB[:, sl] = (g * (dc * uc).unsqueeze(-1)).sum(2)
            gdu = (g * Bc.unsqueeze(2)).sum(-1)  # dL/d(delta u), (b, T, E)
            gdelta[:, sl] = (gz * A).sum(-1) + gdu * uc
            gA += (gz * dc.unsqueeze(-1)).sum((0, 1))
            gu[:, sl] += gdu * dc
        ctx.kept = None
        return gu, gdelta, gA, gB, gC, gD, None, None, None


LOG2E = 1.4426950408889634  # exp(z) = exp2(z log2 e): torch's exp2 is ~3.5x faster than exp on one CPU thread
Z2_MIN = -115.0  # 2**-115 < 3e-35, the clamp of _transition in base 2 (clear of float32 denormals)


def _step_coef(delta_t: Tensor, A2: Tensor, signed: bool, out: Tensor) -> Tensor:
    """a_t into `out` (b, N, E): exp2(Δ_t A log2 e), or 2 exp(...) - 1 = exp2(... + 1) - 1 if signed.
    delta_t (b, E); A2 = A log2 e transposed, (N, E)."""
    torch.mul(delta_t.unsqueeze(1), A2, out=out).clamp_(min=Z2_MIN)
    if signed:
        return out.add_(1.0).exp2_().sub_(1.0)
    return out.exp2_()


_POOL: list[Tensor] = []  # flat buffers that finished backward passes handed back, for the next forward pass
POOL_SIZE = 8  # buffers kept at most (2 per SSM layer in training)


def _take(numel: int, like: Tensor) -> Tensor:
    """A flat buffer of at least `numel` elements of like's dtype and device: the smallest fitting one from
    the pool, else a new one. Reuse matters: writing into freshly allocated memory costs a page fault per
    4 KiB, which made storing the states several times slower than computing them (measured)."""
    fits = [i for i, t in enumerate(_POOL) if t.numel() >= numel and t.dtype == like.dtype and t.device == like.device]
    if fits:
        return _POOL.pop(min(fits, key=lambda i: _POOL[i].numel()))
    return like.new_empty(numel)


def _give_back(*bufs: Tensor) -> None:
    _POOL.extend(bufs)
    _POOL.sort(key=Tensor.numel, reverse=True)
    del _POOL[POOL_SIZE:]  # keep the largest


class _StepScan(torch.autograd.Function):
    """The real selective scan (decay or signed) on the CPU, one step at a time: the state (b, N, E) of one
    step stays in the L2 cache, and every operation works in place on it or on preallocated buffers.
    The scan alone measured ~2.3x faster than _ChunkedScan at the default sizes on one thread, whose
    whole-chunk tensors and temporaries go through main memory. The backward
    pass runs the adjoint recurrence g_t = a_{t+1} g_{t+1} + C_t gy_t step by step from the end.

    Internally time-major with the state as (N, E), so that y_t = C_t h_t and dL/du_t = B_t g_t are
    (1, N) @ (N, E) products. Training keeps every step's a_t and h_t, (L, b, N, E) each (the caller
    falls back to _ChunkedScan's recomputation beyond KEEP_MAX); evaluation keeps one state."""

    @staticmethod
    def forward(ctx, u, delta, A, B, C, D, grad, signed):
        # u, delta: (b, L, E); A: (E, N); B, C: (b, L, N); D: (E,) -> y (b, L, E)
        b, L, E = u.shape
        N = A.shape[1]
        A2 = (A * LOG2E).t().contiguous()  # (N, E)
        tm = lambda x: x.transpose(0, 1)  # noqa: E731  (b, L, .) -> (L, b, .), a view: step t's rows are contiguous
        dt, du, Bt, Ct = tm(delta), tm(delta * u), tm(B).contiguous(), tm(C).contiguous()  # (L, b, E) and (L, b, N)
        Y = u.new_empty(L, b, E)
        if grad:
            n = L * b * N * E
            bufs = _take(n, u), _take(n, u)
            H, As = (t[:n].view(L, b, N, E) for t in bufs)  # states and transitions, kept
        else:
            h, a = u.new_zeros(b, N, E), u.new_empty(b, N, E)
        for t in range(L):
            if grad:
                a, h = _step_coef(dt[t], A2, signed, As[t]), H[t]
                if t:
                    torch.mul(a, H[t - 1], out=h)
                else:
                    h.zero_()
            else:
                h.mul_(_step_coef(dt[t], A2, signed, a))
            h.addcmul_(Bt[t].unsqueeze(2), du[t].unsqueeze(1))  # + (Δ u)_t B_t
            torch.bmm(Ct[t].unsqueeze(1), h, out=Y[t].unsqueeze(1))  # y_t = C_t h_t, (b, 1, E)
        if grad:
            ctx.signed, ctx.H, ctx.As, ctx.bufs = signed, H, As, bufs
            ctx.save_for_backward(u, delta, A, D, dt, du, Bt, Ct)
        return torch.addcmul(Y.transpose(0, 1), u, D)

    @staticmethod
    def backward(ctx, gy):
        # gy: (b, L, E) -> gradients of u, delta, A, B, C, D
        u, delta, A, D, dt, du, Bt, Ct = ctx.saved_tensors
        H, As, signed = ctx.H, ctx.As, ctx.signed
        L, b, N, E = H.shape
        gyt = gy.transpose(0, 1)  # (L, b, E), a view
        At = A.t().contiguous()  # (N, E)
        g, w, gA = u.new_zeros(b, N, E), u.new_empty(b, N, E), u.new_zeros(b, N, E)  # gA: summed over b at the end
        gz_delta, gdu = u.new_empty(L, b, E), u.new_empty(L, b, E)  # dL/dΔ through a_t; dL/d(Δ u)
        gz_delta[0] = 0.0  # a_0 multiplies the zero state
        gB, gC = u.new_empty(L, b, N), u.new_empty(L, b, N)
        for t in reversed(range(L)):
            if t + 1 < L:
                g.mul_(As[t + 1])
            g.addcmul_(Ct[t].unsqueeze(2), gyt[t].unsqueeze(1))  # g_t = a_{t+1} g_{t+1} + C_t gy_t
            torch.sum(torch.mul(H[t], gyt[t].unsqueeze(1), out=w), -1, out=gC[t])  # Σ_e h_t gy_t
            torch.sum(torch.mul(g, du[t].unsqueeze(1), out=w), -1, out=gB[t])  # Σ_e g_t (Δ u)_t
            torch.bmm(Bt[t].unsqueeze(1), g, out=gdu[t].unsqueeze(1))  # B_t g_t, (b, 1, E)
            if t:  # dL/d(Δ A) = g_t (da/dz) h_{t-1}, da/dz = a (decay) or a + 1 (signed)
                torch.mul(g, H[t - 1], out=w)
                w.addcmul_(w, As[t]) if signed else w.mul_(As[t])
                gA.addcmul_(w, dt[t].unsqueeze(1))
                torch.sum(w.mul_(At), 1, out=gz_delta[t])
        _give_back(*ctx.bufs)
        ctx.H = ctx.As = ctx.bufs = None
        gdu = gdu.transpose(0, 1)  # (b, L, E)
        gu = torch.addcmul(gy * D, gdu, delta)
        gdelta = torch.addcmul(gz_delta.transpose(0, 1), gdu, u)
        return (gu, gdelta, gA.sum(0).t(), gB.transpose(0, 1), gC.transpose(0, 1), (gy * u).sum((0, 1)), None, None)


def turn(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """Each pair (x_n, x_{n+N/2}) of x (..., N) turned by the angle whose cos and sin (..., N/2) are given."""
    x1, x2 = x.chunk(2, dim=-1)
    return torch.cat([cos * x1 - sin * x2, sin * x1 + cos * x2], dim=-1)


def selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor, chunk: int | None = None,
                   transition: str = "decay", theta: Tensor | None = None, method: str = "auto") -> Tensor:
    """The scan (fused CUDA kernel where it applies). Shapes as the reference. `method`: auto, step
    (_StepScan, the CPU default), chunked (_ChunkedScan, parallel within chunks of `chunk` steps: the
    path on CUDA without the fused kernel, and on the CPU when _StepScan's saved tensors would pass KEEP_MAX)."""
    if transition not in TRANSITIONS:
        raise ValueError(f"transition must be one of {TRANSITIONS}, got {transition!r}")
    if transition == "rotation":  # the RoPE identity: turn B and C by -Φ_t, then the decay scan
        phi = theta.cumsum(1)  # (b, L, N/2), the total angle up to t
        cos, sin = torch.cos(phi), -torch.sin(phi)
        B, C, A = turn(B, cos, sin), turn(C, cos, sin), torch.cat([A, A], dim=-1)  # A: (E, N), a pair shares one
    if _fused_applies(u.is_cuda, transition, method):  # checked on a GPU: bench/ssm_fused.py
        t = lambda x: x.transpose(1, 2).contiguous()  # noqa: E731  (b, L, .) -> (b, ., L)
        return _fused_kernel()(t(u), t(delta), A.contiguous(), t(B), t(C), D.float()).transpose(1, 2)
    u, delta, B, C = (t.contiguous() for t in (u, delta, B, C))  # slices of strided inputs cost memory
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in (u, delta, A, B, C, D))  # False under no_grad
    signed = transition == "signed"
    if method == "auto":
        fits = not grad or 2 * u.shape[0] * u.shape[1] * u.shape[2] * A.shape[1] <= KEEP_MAX
        method = "step" if not u.is_cuda and fits else "chunked"
    if method == "step":
        return _StepScan.apply(u, delta, A, B, C, D, grad, signed)
    if method != "chunked":
        raise ValueError(f"method must be auto, step or chunked, got {method!r}")
    return _ChunkedScan.apply(u, delta, A, B, C, D, chunk or SCAN_CHUNK, grad, signed)


class _CausalConv(torch.autograd.Function):
    """Depthwise causal convolution in (B, L, E) layout: y_t = bias + sum_k w_k * x_{t-K+1+k}, the trimmed
    `nn.Conv1d(E, E, K, groups=E, padding=K-1)` of SSMMixer.conv without its (B, E, L) transposes; K
    shifted multiply-adds forward and backward (torch's depthwise conv backward measured ~2x slower)."""

    @staticmethod
    def forward(ctx, x, weight, bias):
        # x: (B, L, E); weight: (E, 1, K); bias: (E,) -> (B, L, E)
        L, K = x.shape[1], weight.shape[-1]
        w = weight[:, 0, :].t()  # (K, E)
        xp = F.pad(x, (0, 0, K - 1, 0))  # (B, L+K-1, E), zeros before the start
        y = torch.addcmul(bias, xp[:, :L], w[0])
        for k in range(1, K):
            y.addcmul_(xp[:, k : k + L], w[k])
        ctx.save_for_backward(xp, w)
        return y

    @staticmethod
    def backward(ctx, gy):
        xp, w = ctx.saved_tensors
        K, L = w.shape[0], gy.shape[1]
        gxp = gy.new_zeros(xp.shape)
        gw = gy.new_empty(K, gy.shape[-1])
        for k in range(K):
            gxp[:, k : k + L].addcmul_(gy, w[k])
            gw[k] = (xp[:, k : k + L] * gy).sum((0, 1))
        return gxp[:, K - 1 :], gw.t().unsqueeze(1), gy.sum((0, 1))


def causal_conv(x: Tensor, conv: nn.Conv1d) -> Tensor:
    """SSMMixer's depthwise causal convolution of x (B, L, E) -> (B, L, E) with conv's weight and bias."""
    return _CausalConv.apply(x, conv.weight, conv.bias)


def _fused_applies(is_cuda: bool, transition: str, method: str) -> bool:
    """Whether mamba_ssm's fused kernel runs the scan: on CUDA, for the families it computes, when installed."""
    return is_cuda and method == "auto" and transition in FUSED_TRANSITIONS and _fused_kernel() is not None


def _fused_kernel():
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except ImportError:
        return None
    return selective_scan_fn


class SSMMixer(nn.Module):
    """Selective SSM mixer: (B, L, D) -> (B, L, D), causal. `transition`: decay | signed | rotation."""

    def __init__(self, d_model: int, d_state: int = 16, d_conv: int = 4, expand: int = 2,
                 dt_min: float = 1e-3, dt_max: float = 1e-1, transition: str = "decay"):
        super().__init__()
        if transition not in TRANSITIONS:
            raise ValueError(f"transition must be one of {TRANSITIONS}, got {transition!r}")
        if transition == "rotation" and d_state % 2:
            raise ValueError(f"transition rotation turns pairs of state dims: d_state must be even, got {d_state}")
        E, N = expand * d_model, d_state
        R = math.ceil(d_model / 16)  # rank of the step-size projection, as in Mamba
        P = N // 2 if transition == "rotation" else 0  # angles: one per pair of state dims
        self.d_inner, self.d_state, self.dt_rank, self.n_angles, self.transition = E, N, R, P, transition
        self.scan_method = "auto"  # selective_scan's method; bench/ssm_speed.py sets "chunked" to time the old path
        self.in_proj = nn.Linear(d_model, 2 * E, bias=False)
        self.conv = nn.Conv1d(E, E, d_conv, groups=E, padding=d_conv - 1)  # trimmed to stay causal
        self.x_proj = nn.Linear(E, R + 2 * N + P, bias=False)
        self.dt_proj = nn.Linear(R, E)
        n_rates = P or N  # rotation: one decay rate per pair
        self.A_log = nn.Parameter(torch.log(torch.arange(1, n_rates + 1, dtype=torch.float32)).repeat(E, 1))  # (E, N|N/2)
        self.D = nn.Parameter(torch.ones(E))
        self.A_log._no_weight_decay = self.D._no_weight_decay = True  # Mamba's marker for optimizers
        self.out_proj = nn.Linear(E, d_model, bias=False)
        # Mamba's step-size init: softplus(dt_proj bias) log-uniform in [dt_min, dt_max]
        nn.init.uniform_(self.dt_proj.weight, -(R**-0.5), R**-0.5)
        dt = torch.exp(torch.rand(E) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, L, D) -> (B, L, D)
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (B, L, E) each
        u = F.silu(causal_conv(u, self.conv))  # (B, L, E), causal
        dt, B, C, theta = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state, self.n_angles], dim=-1)
        delta = F.softplus(self.dt_proj(dt))  # (B, L, E)
        y = selective_scan(u, delta, -torch.exp(self.A_log), B, C, self.D, transition=self.transition,
                           theta=theta if self.n_angles else None, method=self.scan_method)  # (B, L, E)
        return self.out_proj(y * F.silu(z))
