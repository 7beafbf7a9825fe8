"""A Mamba-style selective state-space mixer (Gu & Dao, 2023), in pure PyTorch.

Structure, for input x (B, L, D) and inner width E = expand * D, state size N per channel::

    x ──in_proj──> (u, z)                     (B, L, E) each
    u ──causal depthwise conv (width d_conv)──> SiLU ──> u
    u ──x_proj──> (dt, B_t, C_t)              (B, L, R), (B, L, N), (B, L, N)   input-dependent
    Δ = softplus(dt_proj(dt))                 (B, L, E)   step size per channel and position
    A = -exp(A_log)                           (E, N)      fixed decay rates (S4D-real init)
    h_t = exp(Δ_t A) * h_{t-1} + Δ_t B_t u_t  (B, E, N)   the selective scan
    y_t = C_t · h_t + D * u_t                 (B, L, E)
    y * SiLU(z) ──out_proj──> (B, L, D)

The scan is the only sequential part. `selective_scan` computes it with a log-depth
(Hillis-Steele) parallel scan over time: after the pass with offset k, position t holds the
composition of the affine maps h -> a h + b of steps t-2k+1..t, so ceil(log2 L) passes of
whole-tensor operations replace L small ones. Any length works (no power-of-two padding).
The scan runs in chunks of SCAN_CHUNK steps, parallel inside a chunk, the state carried
from one chunk to the next: the log-depth scan does O(L log L) work, which on a CPU costs
more than it saves for long chunks (bench/ssm_speed.py). `selective_scan_reference` is the
plain loop over time, the oracle of the tests.

On a CUDA device with the `mamba-ssm` package installed, its fused kernel
(`selective_scan_fn`) is used instead; it is imported lazily and never on the CPU. That path
is not exercised on this project's CPU-only CI.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def selective_scan_reference(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor) -> Tensor:
    """The scan as a loop over time. u, delta: (b, L, E); A: (E, N); B, C: (b, L, N); D: (E,) -> (b, L, E)."""
    b, L, E = u.shape
    h = u.new_zeros(b, E, A.shape[1])  # (b, E, N)
    ys = []
    for t in range(L):
        decay = torch.exp(delta[:, t, :, None] * A)  # (b, E, N)
        h = decay * h + (delta[:, t] * u[:, t])[:, :, None] * B[:, t, None, :]
        ys.append((h * C[:, t, None, :]).sum(-1))  # (b, E)
    return torch.stack(ys, dim=1) + u * D


def _parallel_affine_scan(a: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """Inclusive scan of the affine maps h -> a_t h + b_t along dim 1, in ceil(log2 L) passes.
    Returns (A_t, H_t): the product of a up to t, and h_t from h_{-1} = 0."""
    L, k = a.shape[1], 1
    while k < L:
        # compose each position's map with the one k steps earlier (applied first)
        b = torch.cat([b[:, :k], a[:, k:] * b[:, :-k] + b[:, k:]], dim=1)
        a = torch.cat([a[:, :k], a[:, k:] * a[:, :-k]], dim=1)
        k *= 2
    return a, b


def _chunked_scan(a: Tensor, b: Tensor, chunk: int) -> Tensor:
    """h_t = a_t h_{t-1} + b_t (h_{-1} = 0): parallel within chunks of `chunk` steps, carried
    across them. a, b: (B, L, E, N) -> h (B, L, E, N)."""
    out, h = [], None
    for start in range(0, a.shape[1], chunk):
        prod, local = _parallel_affine_scan(a[:, start : start + chunk], b[:, start : start + chunk])
        if h is not None:
            local = local + prod * h.unsqueeze(1)  # the carry, decayed through the chunk
        out.append(local)
        h = local[:, -1]
    return torch.cat(out, dim=1)


def selective_scan(u: Tensor, delta: Tensor, A: Tensor, B: Tensor, C: Tensor, D: Tensor) -> Tensor:
    """The scan, parallel over time (fused CUDA kernel when available). Shapes as the reference."""
    if u.is_cuda:
        fused = _fused_kernel()
        if fused is not None:
            t = lambda x: x.transpose(1, 2).contiguous()  # noqa: E731  (b, L, .) -> (b, ., L)
            return fused(t(u), t(delta), A.contiguous(), t(B), t(C), D.float()).transpose(1, 2)
    decay = torch.exp(delta.unsqueeze(-1) * A)  # (b, L, E, N), in (0, 1]
    drive = (delta * u).unsqueeze(-1) * B.unsqueeze(2)  # (b, L, E, N)
    h = _chunked_scan(decay, drive, SCAN_CHUNK)  # (b, L, E, N)
    return (h * C.unsqueeze(2)).sum(-1) + u * D  # (b, L, E)


SCAN_CHUNK = 8  # steps scanned in parallel at once; see bench/ssm_speed.py


def _fused_kernel():
    try:
        from mamba_ssm.ops.selective_scan_interface import selective_scan_fn
    except ImportError:
        return None
    return selective_scan_fn


class SSMMixer(nn.Module):
    """Selective SSM mixer: (B, L, D) -> (B, L, D), causal."""

    def __init__(self, d_model: int, d_state: int = 16, d_conv: int = 4, expand: int = 2,
                 dt_min: float = 1e-3, dt_max: float = 1e-1):
        super().__init__()
        E, N = expand * d_model, d_state
        R = math.ceil(d_model / 16)  # rank of the step-size projection, as in Mamba
        self.d_inner, self.d_state, self.dt_rank = E, N, R
        self.in_proj = nn.Linear(d_model, 2 * E, bias=False)
        self.conv = nn.Conv1d(E, E, d_conv, groups=E, padding=d_conv - 1)  # trimmed to stay causal
        self.x_proj = nn.Linear(E, R + 2 * N, bias=False)
        self.dt_proj = nn.Linear(R, E)
        self.A_log = nn.Parameter(torch.log(torch.arange(1, N + 1, dtype=torch.float32)).repeat(E, 1))  # (E, N)
        self.D = nn.Parameter(torch.ones(E))
        self.out_proj = nn.Linear(E, d_model, bias=False)
        # Mamba's step-size init: softplus(dt_proj bias) log-uniform in [dt_min, dt_max]
        nn.init.uniform_(self.dt_proj.weight, -(R**-0.5), R**-0.5)
        dt = torch.exp(torch.rand(E) * (math.log(dt_max) - math.log(dt_min)) + math.log(dt_min))
        with torch.no_grad():
            self.dt_proj.bias.copy_(dt + torch.log(-torch.expm1(-dt)))  # inverse softplus

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, L, D) -> (B, L, D)
        L = x.shape[1]
        u, z = self.in_proj(x).chunk(2, dim=-1)  # (B, L, E) each
        u = F.silu(self.conv(u.transpose(1, 2))[..., :L].transpose(1, 2))  # (B, L, E), causal
        dt, B, C = self.x_proj(u).split([self.dt_rank, self.d_state, self.d_state], dim=-1)
        delta = F.softplus(self.dt_proj(dt))  # (B, L, E)
        y = selective_scan(u, delta, -torch.exp(self.A_log), B, C, self.D)  # (B, L, E)
        return self.out_proj(y * F.silu(z))
