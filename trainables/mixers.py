"""Sequence mixers: the recurrent sublayer of a hybrid block.

A mixer maps (B, L, D) -> (B, L, D) causally: output t depends on inputs <= t only.
`make_mixer` is the one place that knows the kinds; the block only sees the interface.

    lstm   a single-layer LSTM (below)
    ssm    a Mamba-style selective state-space mixer (trainables/ssm.py), transition decay | signed | rotation
    none   no recurrent sublayer (pure Transformer)
"""

from __future__ import annotations

from torch import Tensor, nn

from trainables.config import ModelConfig


class LSTMMixer(nn.Module):
    """A single-layer LSTM with hidden size D (cuDNN on GPU)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, L, D) -> (B, L, D)
        out, _ = self.lstm(x)
        return out


def make_mixer(cfg: ModelConfig) -> nn.Module | None:
    """The mixer for `cfg.mixer`; None for `none` (the block has no recurrent sublayer)."""
    if cfg.mixer == "lstm":
        return LSTMMixer(cfg.d_model)
    if cfg.mixer == "ssm":
        from trainables.ssm import SSMMixer

        return SSMMixer(cfg.d_model, d_state=cfg.ssm_d_state, d_conv=cfg.ssm_d_conv, expand=cfg.ssm_expand,
                        transition=cfg.ssm_transition)
    if cfg.mixer == "none":
        return None
    raise ValueError(f"unknown mixer {cfg.mixer!r}")
