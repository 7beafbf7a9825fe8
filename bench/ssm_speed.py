"""Forward+backward time of one training step of the hybrid, SSM mixer versus LSTM, side by side.

    python bench/ssm_speed.py [--threads 1] [--repeats 10] [--chunks 1 2 4 8 16 45]

HybridLM(d_model 64, 2 layers, 4 heads), a training batch of 64 x 45 tokens, vocabulary 100,
one thread. Prints ms per step (forward, backward, AdamW step) for the LSTM, for the SSM mixer
at its defaults (d_state 16, expand 2) with each scan chunk size (the default marked *), and for
a small SSM (d_state 8, expand 1); each with its ratio to the LSTM. The models take turns,
step by step, so that drift on a shared machine hits them alike; the median step counts,
in CPU time of this process (wall time on a busy machine also counts the other processes).
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

from trainables import ssm
from trainables.config import ModelConfig
from trainables.model import HybridLM


def make_step(model: HybridLM, tokens: torch.Tensor, chunk: int | None):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> float:
        ssm.SCAN_CHUNK = chunk or ssm.SCAN_CHUNK
        start = time.process_time()
        loss = model(tokens).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.process_time() - start

    return step


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--chunks", type=int, nargs="+", default=[1, 2, 4, 8, 16, 45])
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tokens = torch.randint(100, (64, 45), generator=torch.Generator().manual_seed(0))  # a training batch
    default = ssm.SCAN_CHUNK
    setups = {"lstm": (dict(mixer="lstm"), None)}
    for c in args.chunks:
        setups[f"ssm chunk={c}{'*' if c == default else ''}"] = (dict(mixer="ssm"), c)
    setups[f"ssm d_state=8 expand=1 chunk={default}"] = (dict(mixer="ssm", ssm_d_state=8, ssm_expand=1), default)
    steps = {}
    for name, (kw, chunk) in setups.items():
        torch.manual_seed(0)
        steps[name] = make_step(HybridLM(ModelConfig(d_model=64, n_layers=2, n_heads=4, **kw), 100), tokens, chunk)
    times = {name: [] for name in setups}
    for i in range(args.repeats + 2):  # 2 warm-up rounds
        for name, step in steps.items():
            t = step()
            if i >= 2:
                times[name].append(t)
    ssm.SCAN_CHUNK = default
    ms = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    print(f"threads={args.threads}  batch 64 x 45 tokens  median CPU time of {args.repeats} steps")
    for name, m in ms.items():
        print(f"{name:34s} {m:8.1f} ms/step   ratio to lstm {m / ms['lstm']:.2f}")


if __name__ == "__main__":
    main()
