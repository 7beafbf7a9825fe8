"""HybridLM: a stack of recurrent + attention blocks over a token stream.

    tokens (B, L)
      -> embedding (+ sinusoidal positions, optional)       (B, L, D)
         (or rotary positions on attention's queries and keys: positional=rope, the default)
      -> N x HybridBlock                                     (B, L, D)
           x = x + drop(mixer(LN(x)))                recurrent sublayer (LSTM or SSM; absent for mixer=none)
           x = x + attn_scale * drop(attn(LN(x)))    causal multi-head attention (absent if attention=false)
           x = x + drop(mlp(LN(x)))                  (absent if mlp_ratio=0: attention-only)
      -> LayerNorm -> linear head                            (B, L, V)

`drop` is residual dropout (`model.resid_dropout`); attention-probability dropout is
`model.attn_dropout`. Both are active in training mode only.

The four systems of the DAT paper are settings of this one class:
pure LSTM (attention=false), pure Transformer (mixer=none, usually with sinusoidal
positions), hybrid (dat.mode=none), hybrid with DAT. `attn_scale` is the knob DAT
turns: 0 skips the attention sublayers entirely (their output is exactly zero),
1 is the normal model, values in between ramp attention in.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from trainables.config import ModelConfig
from trainables.mixers import make_mixer


def rotate(x: Tensor) -> Tensor:
    """Rotary position embedding (RoPE, Su et al. 2021) on the last dim of (B, nh, L, hs): pairs
    (x_i, x_{i+hs/2}) turned by angle pos * 10000^(-2i/hs), so q.k depends on position differences only."""
    L, hs = x.shape[-2], x.shape[-1]
    freq = torch.exp(torch.arange(0, hs, 2, device=x.device, dtype=torch.float32) * (-math.log(10000.0) / hs))  # (hs/2,)
    angle = torch.arange(L, device=x.device, dtype=torch.float32)[:, None] * freq  # (L, hs/2)
    cos, sin = angle.cos().to(x.dtype), angle.sin().to(x.dtype)
    x1, x2 = x.chunk(2, dim=-1)  # 2 x (B, nh, L, hs/2)
    return torch.cat((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1)


class RotaryTables:
    """`rotate`'s cos and sin, computed once per (length, head size, device) and grown as needed, laid out
    for `rotate_half`: cos (L, 1, hs) and sin (L, 1, hs) with the first half negated. The same float32
    arithmetic as `rotate`, so the rotation is bit-identical to it."""

    def __init__(self):
        self.cos: Tensor | None = None
        self.sin: Tensor | None = None

    def get(self, L: int, hs: int, like: Tensor) -> tuple[Tensor, Tensor]:
        if self.cos is None or self.cos.shape[0] < L or self.cos.shape[-1] != hs or self.cos.device != like.device:
            n = max(L, 2 * self.cos.shape[0] if self.cos is not None else 64)
            freq = torch.exp(torch.arange(0, hs, 2, device=like.device, dtype=torch.float32) * (-math.log(10000.0) / hs))
            angle = torch.arange(n, device=like.device, dtype=torch.float32)[:, None] * freq  # (n, hs/2)
            cos, sin = angle.cos(), angle.sin()
            self.cos = torch.cat((cos, cos), -1)[:, None, :]  # (n, 1, hs)
            self.sin = torch.cat((-sin, sin), -1)[:, None, :]
        return self.cos[:L].to(like.dtype), self.sin[:L].to(like.dtype)


def rotate_half(x: Tensor, cos: Tensor, sin: Tensor) -> Tensor:
    """`rotate` on (B, L, n, hs) with RotaryTables' cos and sin: x * cos + (x2, x1) * (-sin, sin), which
    is x1 cos - x2 sin, x2 cos + x1 sin term for term (the fast path; `rotate` is its reference)."""
    x1, x2 = x.chunk(2, dim=-1)
    return x * cos + torch.cat((x2, x1), dim=-1) * sin


class CausalSelfAttention(nn.Module):
    def __init__(self, d_model: int, n_heads: int, zero_init_out: bool, dropout: float = 0.0, rope: bool = False):
        super().__init__()
        self.n_heads = n_heads
        self.dropout = dropout
        self.rope = rope
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.out = nn.Linear(d_model, d_model)
        self.tables = RotaryTables()
        if zero_init_out:  # the sublayer starts as the identity of the residual stream
            nn.init.zeros_(self.out.weight)
            nn.init.zeros_(self.out.bias)

    def forward(self, x: Tensor) -> Tensor:
        B, L, D = x.shape
        nh, hs = self.n_heads, D // self.n_heads
        qkv = self.qkv(x)  # (B, L, 3D)
        if self.rope:  # q and k rotated in one go, in (B, L, 2nh, hs) layout: contiguous and cheap on a CPU
            cos, sin = self.tables.get(L, hs, x)
            qk = rotate_half(qkv[..., : 2 * D].view(B, L, 2 * nh, hs), cos, sin)  # (B, L, 2nh, hs)
            q, k = qk.transpose(1, 2).split(nh, dim=1)  # 2 x (B, nh, L, hs)
        else:
            q, k = (t.view(B, L, nh, hs).transpose(1, 2) for t in qkv[..., : 2 * D].split(D, dim=-1))
        v = qkv[..., 2 * D :].view(B, L, nh, hs).transpose(1, 2)  # (B, nh, L, hs)
        p = self.dropout if self.training else 0.0
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True, dropout_p=p)  # (B, nh, L, hs)
        return self.out(y.transpose(1, 2).reshape(B, L, D))


class HybridBlock(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        D = cfg.d_model
        self.mixer = make_mixer(cfg)
        self.mixer_norm = nn.LayerNorm(D) if self.mixer is not None else None
        self.attn = CausalSelfAttention(D, cfg.n_heads, cfg.attn_zero_init, cfg.attn_dropout,
                                        rope=cfg.positional == "rope") if cfg.attention else None
        self.attn_norm = nn.LayerNorm(D) if cfg.attention else None
        H = cfg.mlp_ratio * D
        self.mlp = nn.Sequential(nn.Linear(D, H), nn.GELU(), nn.Linear(H, D)) if H else None
        self.mlp_norm = nn.LayerNorm(D) if H else None
        self.drop = nn.Dropout(cfg.resid_dropout)

    def forward(self, x: Tensor, attn_scale: float) -> Tensor:
        # x: (B, L, D) -> (B, L, D)
        if self.mixer is not None:
            x = x + self.drop(self.mixer(self.mixer_norm(x)))
        if self.attn is not None and attn_scale != 0.0:
            y = self.drop(self.attn(self.attn_norm(x)))
            x = x + (y if attn_scale == 1.0 else attn_scale * y)  # 1.0 * y is y: skip the product and its backward
        if self.mlp is not None:
            x = x + self.drop(self.mlp(self.mlp_norm(x)))
        return x


def sinusoidal_positions(length: int, d_model: int, device: torch.device) -> Tensor:
    """The Transformer's fixed sin/cos position table, (L, D)."""
    pos = torch.arange(length, device=device, dtype=torch.float32)[:, None]
    freq = torch.exp(torch.arange(0, d_model, 2, device=device, dtype=torch.float32) * (-math.log(10000.0) / d_model))
    table = torch.zeros(length, d_model, device=device)
    table[:, 0::2] = torch.sin(pos * freq)
    table[:, 1::2] = torch.cos(pos * freq)[:, : d_model // 2]
    return table


class HybridLM(nn.Module):
    def __init__(self, cfg: ModelConfig, vocab_size: int):
        super().__init__()
        self.cfg = cfg
        self.embed = nn.Embedding(vocab_size, cfg.d_model)
        self.blocks = nn.ModuleList(HybridBlock(cfg) for _ in range(cfg.n_layers))
        self.norm = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, vocab_size)
        self.attn_scale = 1.0  # set by the DAT schedule; 0 skips every attention sublayer

    def forward(self, tokens: Tensor) -> Tensor:
        # tokens: (B, L) int64 -> logits (B, L, V)
        x = self.embed(tokens)  # (B, L, D)
        if self.cfg.positional == "sinusoidal":
            x = x + sinusoidal_positions(tokens.shape[1], self.cfg.d_model, tokens.device)
        for block in self.blocks:
            x = block(x, self.attn_scale)
        return self.head(self.norm(x))

    def mixer_parameters(self) -> list[nn.Parameter]:
        """Parameters of the recurrent sublayers (their norms included): the path DAT trains first."""
        return [p for b in self.blocks if b.mixer is not None for m in (b.mixer_norm, b.mixer) for p in m.parameters()]

    def attention_parameters(self) -> list[nn.Parameter]:
        """Parameters of the attention sublayers (their norms included): what DAT holds back."""
        return [p for b in self.blocks if b.attn is not None for m in (b.attn_norm, b.attn) for p in m.parameters()]
