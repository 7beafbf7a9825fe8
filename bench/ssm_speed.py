"""Forward+backward time of one training step of the hybrid, SSM mixer versus LSTM, side by side.

    python bench/ssm_speed.py [--threads 1] [--repeats 20]

Prints the mean milliseconds per step of each and the ratio SSM / LSTM (same batch, one thread),
for the default SSM sizes (Mamba's: d_state 16, expand 2) and a small one (d_state 8, expand 1).
"""

from __future__ import annotations

import argparse
import time

import torch

from trainables.config import ModelConfig
from trainables.model import HybridLM


def step_ms(model: HybridLM, tokens: torch.Tensor, repeats: int) -> float:
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    for i in range(repeats + 3):  # 3 warm-up steps
        if i == 3:
            start = time.perf_counter()
        loss = model(tokens).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
    return (time.perf_counter() - start) / repeats * 1e3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=20)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tokens = torch.randint(100, (64, 45), generator=torch.Generator().manual_seed(0))  # a training batch
    results = {}
    for name, kw in {"lstm": {}, "ssm d_state=16 expand=2": dict(ssm_d_state=16, ssm_expand=2),
                     "ssm d_state=8 expand=1": dict(ssm_d_state=8, ssm_expand=1)}.items():
        torch.manual_seed(0)
        mixer = "lstm" if name == "lstm" else "ssm"
        model = HybridLM(ModelConfig(d_model=64, n_layers=2, n_heads=4, mixer=mixer, **kw), 100)
        results[name] = step_ms(model, tokens, args.repeats)
    for name, ms in results.items():
        print(f"{name:24s} {ms:8.1f} ms/step   ratio to lstm {ms / results['lstm']:.2f}")


if __name__ == "__main__":
    main()
