"""Time of one training step of the hybrid with each SSM transition family against the LSTM, side by side.

    python bench/ssm_speed.py [--threads 1] [--repeats 10] [--layers 2] [--profile]

HybridLM(d_model 64, 2 layers (`--layers`), 4 heads, attention on), a training batch of 64 x 45 tokens (the
default hybrid's longest training sequences), vocabulary 100, one thread. Prints ms per step (forward,
backward, AdamW step) for the LSTM, for the SSM mixer at its defaults (d_state 16, expand 2) with each
transition family (`decay`, `signed`, `rotation`; CPU scan: _StepScan), for `decay` on the old chunked
parallel scan (`_ChunkedScan`, chunk 2: the earlier path), and for a small SSM (d_state 8,
expand 1); each with its ratio to the LSTM. The models take turns, step by step, so that drift on a
shared machine hits them alike; the median step counts, in CPU time of this process (wall time on a
busy machine also counts the other processes). `--profile` prints torch.profiler's top operators of
the default `decay` SSM step instead.
"""

from __future__ import annotations

import statistics
import time

import torch

from trainables.config import ModelConfig
from trainables.model import HybridLM
from trainables.ssm import TRANSITIONS, SSMMixer
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import cpus, positive_int


def make_step(model: HybridLM, tokens: torch.Tensor):
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)

    def step() -> float:
        start = time.process_time()
        loss = model(tokens).logsumexp(-1).mean()
        opt.zero_grad()
        loss.backward()
        opt.step()
        return time.process_time() - start

    return step


def layer_count(text: str) -> int:
    """A number of hybrid blocks within what the model's config takes."""
    import argparse

    most = next(m.le for m in ModelConfig.model_fields["n_layers"].metadata if hasattr(m, "le"))
    if (value := positive_int(text)) > most:
        raise argparse.ArgumentTypeError(f"must be at most {most}, got {value}")
    return value


def build(kw: dict, method: str = "auto", layers: int = 2) -> HybridLM:
    torch.manual_seed(0)
    model = HybridLM(ModelConfig(d_model=64, n_layers=layers, n_heads=4, **kw), 100)
    for m in model.modules():
        if isinstance(m, SSMMixer):
            m.scan_method = method
    return model


def main() -> None:
    ap = Parser(description=__doc__.split("\n")[0])
    ap.add_argument("--threads", type=cpus, default=1)
    ap.add_argument("--repeats", type=positive_int, default=10)
    ap.add_argument("--layers", type=layer_count, default=2, help="hybrid blocks (4: the paper-depth experiments)")
    ap.add_argument("--profile", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    tokens = torch.randint(100, (64, 45), generator=torch.Generator().manual_seed(0))  # a training batch
    if args.profile:
        from torch.profiler import ProfilerActivity, profile

        step = make_step(build(dict(mixer="ssm"), layers=args.layers), tokens)
        for _ in range(3):
            step()
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            for _ in range(args.repeats):
                step()
        print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=20))
        return
    setups = {"lstm": (dict(mixer="lstm"), "auto")}
    for tr in TRANSITIONS:
        setups[f"ssm {tr}"] = (dict(mixer="ssm", ssm_transition=tr), "auto")
    setups["ssm decay, chunked scan (old path)"] = (dict(mixer="ssm"), "chunked")
    setups["ssm decay d_state=8 expand=1"] = (dict(mixer="ssm", ssm_d_state=8, ssm_expand=1), "auto")
    steps = {name: make_step(build(kw, method, args.layers), tokens) for name, (kw, method) in setups.items()}
    times = {name: [] for name in setups}
    for i in range(args.repeats + 2):  # 2 warm-up rounds
        for name, step in steps.items():
            t = step()
            if i >= 2:
                times[name].append(t)
    ms = {name: statistics.median(ts) * 1e3 for name, ts in times.items()}
    print(f"threads={args.threads}  layers={args.layers}  batch 64 x 45 tokens  median CPU time of {args.repeats} steps")
    for name, m in ms.items():
        print(f"{name:36s} {m:8.1f} ms/step   ratio to lstm {m / ms['lstm']:.2f}")


if __name__ == "__main__":
    run_tool(main)
