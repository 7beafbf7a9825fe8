"""Sequence mixers: the recurrent sublayer of a hybrid block.

A mixer maps (B, L, D) -> (B, L, D) causally: output t depends on inputs <= t only.
`make_mixer` is the one place that knows the kinds; the block only sees the interface,
so another recurrent core (an SSM) plugs in here without touching the block.
"""

from __future__ import annotations

from torch import Tensor, nn


class LSTMMixer(nn.Module):
    """A single-layer LSTM with hidden size D (cuDNN on GPU)."""

    def __init__(self, d_model: int):
        super().__init__()
        self.lstm = nn.LSTM(d_model, d_model, batch_first=True)

    def forward(self, x: Tensor) -> Tensor:
        # x: (B, L, D) -> (B, L, D)
        out, _ = self.lstm(x)
        return out


def make_mixer(kind: str, d_model: int) -> nn.Module | None:
    """The mixer for `model.mixer`; None for `none` (the block has no recurrent sublayer)."""
    if kind == "lstm":
        return LSTMMixer(d_model)
    if kind == "none":
        return None
    raise ValueError(f"unknown mixer {kind!r}")
