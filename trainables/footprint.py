"""What a trial config will ask of memory, estimated from the config alone (no torch, no allocation).

`check_fits` refuses a config whose estimate exceeds the memory this machine has available,
naming the key that drives the largest part, before anything is allocated:

    model             weights, gradients, AdamW's two moments, the EMA copy      model.d_model
    training step     activations kept for the backward pass of one batch        optim.batch_size
    evaluation sets   the fixed sets at every length, kept for the whole run     eval.n_sequences
    evaluation batch  one forward pass at the longest evaluation length          eval.batch_size

The estimate is deliberately generous (an upper bound within a small factor: float32,
attention scores materialised, soft targets dense), so a config it accepts runs, and one it
refuses would need at least about that much.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from core.errors import ConfigError

FLOAT = 4  # bytes of a float32
LONG = 8  # bytes of an int64 token
TOKENS_PER_STEP = {"modsum_recall": 3, "modsum": 1, "recall": 3, "set_complement": 1}  # at most


@dataclass(frozen=True)
class Part:
    name: str
    key: str  # the config key that scales it most directly
    bytes: int


def vocab_upper_bound(cfg) -> int:
    t = cfg.task
    if t.name == "set_complement":
        return t.n_tokens + 2
    return max(t.modulus + t.n_keys + t.n_values + 8, 72)  # 72: a 64-square board + specials


def n_parameters(cfg) -> int:
    """Parameters of the HybridLM, within a few per cent."""
    m, D = cfg.model, cfg.model.d_model
    V = vocab_upper_bound(cfg)
    per_block = 4 * D  # two norms
    if m.mixer == "lstm":
        per_block += 4 * (2 * D * D + 2 * D)
    elif m.mixer == "ssm":
        E, N = m.ssm_expand * D, m.ssm_d_state
        rank = max(1, -(-D // 16))
        per_block += D * 2 * E + E * m.ssm_d_conv + E * (rank + 2 * N) + rank * E + 2 * E * N + E * D
    if m.attention:
        per_block += 4 * D * D + 4 * D
    if m.mlp_ratio:
        per_block += 2 * m.mlp_ratio * D * D + m.mlp_ratio * D + D
    return m.n_layers * per_block + 2 * V * D + V + 2 * D  # embedding, head (+ bias), final norm


def parts(cfg) -> list[Part]:
    m, D, L_layers = cfg.model, cfg.model.d_model, cfg.model.n_layers
    V = vocab_upper_bound(cfg)
    per_step = TOKENS_PER_STEP.get(cfg.task.name, 1)
    heads = m.n_heads if m.attention else 0
    soft = V if cfg.task.name not in TOKENS_PER_STEP or cfg.task.name == "set_complement" else 0  # dense targets

    def activations(batch: int, length: int, backward: bool) -> int:
        # per token and layer: mixer states/gates, norms, MLP hidden; attention scores per head
        width = D * (24 + 4 * m.mlp_ratio + (8 * m.ssm_expand * m.ssm_d_state if m.mixer == "ssm" else 0))
        per_layer = batch * length * width + batch * heads * length * length * (2 if backward else 1)
        layers = L_layers if backward else 1  # evaluation keeps one layer's tensors at a time
        return FLOAT * (layers * per_layer + 3 * batch * length * (V + soft))

    train_len = cfg.task.max_len * per_step + 1
    eval_lens = [k * cfg.task.max_len * per_step + 1 for k in cfg.eval.multipliers]
    eval_store = sum(cfg.eval.n_sequences * n * (3 * LONG + FLOAT * soft) for n in eval_lens)
    copies = 4 + (1 if cfg.ema.decay > 0 else 0)  # weights, grads, two moments, EMA
    return [
        Part("model", "model.d_model", FLOAT * copies * n_parameters(cfg)),
        Part("training step", "optim.batch_size", activations(cfg.optim.batch_size, train_len, backward=True)),
        Part("evaluation sets", "eval.n_sequences", eval_store),
        Part("evaluation batch", "eval.batch_size",
             activations(min(cfg.eval.batch_size, cfg.eval.n_sequences), max(eval_lens), backward=False)),
    ]


def estimate_bytes(cfg) -> int:
    p = {x.name: x.bytes for x in parts(cfg)}
    return p["model"] + p["evaluation sets"] + max(p["training step"], p["evaluation batch"])


def available_bytes() -> int:
    """Memory available to a new process here: MemAvailable on Linux, else physical memory."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (ValueError, OSError, AttributeError):
        return 1 << 62


def check_fits(cfg, source: str, available: int | None = None) -> None:
    """Raise a one-line ConfigError if the config cannot fit in `available` bytes (default: now)."""
    available = available_bytes() if available is None else available
    need = estimate_bytes(cfg)
    if need <= available:
        return
    worst = max(parts(cfg), key=lambda p: p.bytes)
    raise ConfigError(f"{source}: {worst.key}: this config needs about {_gb(need)} of memory ({worst.name}: "
                      f"{_gb(worst.bytes)}); this machine has {_gb(available)} available")


def _gb(n: int) -> str:
    return f"{n / 2**30:,.1f} GB" if n < 2**50 else f"{n / 2**40:,.0f} TB"
