"""Trainer overhead: the real training loop against a bare loop of the same model.

    real  trainables.train.train on the default hybrid config: data generation every step,
          evaluation + checkpoint + report at the default interval.
    bare  the same model's forward + backward + clip + AdamW step on batches made beforehand.

Both run here, side by side, for the same number of steps (bare first, then real, then
bare again, to even out drift on a shared machine); prints steps/s of each and the ratio.
Target: real / bare >= 0.85.

    python bench/trainer_overhead.py [--steps 500] [--threads N]
"""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from trainables.config import TrialConfig
from trainables.model import HybridLM
from trainables.tasks import IGNORE, make_task
from trainables.train import build_optimizer, train


def bare_loop(cfg: TrialConfig, steps: int) -> float:
    task = make_task(cfg.task)
    torch.manual_seed(cfg.seed)
    model = HybridLM(cfg.model, task.vocab_size)
    optimizer = build_optimizer(model, cfg.optim)
    gen = torch.Generator().manual_seed(cfg.seed)
    batches = [task.sample_train(cfg.optim.batch_size, gen) for _ in range(steps)]
    start = time.perf_counter()
    for batch in batches:
        logits = model(batch.tokens)
        loss = F.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
    return steps / (time.perf_counter() - start)


def real_loop(cfg: TrialConfig) -> float:
    start = time.perf_counter()
    train(cfg, report=lambda metrics, checkpoint_dir: None)
    return cfg.steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500, help="steps per loop (a multiple of eval.every)")
    parser.add_argument("--threads", type=int, default=None)
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    # default hybrid, attention active throughout: the slower, representative phase
    cfg = TrialConfig.model_validate({"steps": args.steps, "dat": {"mode": "none"}, "device": "cpu"})
    bare_a = bare_loop(cfg, args.steps)
    real = real_loop(cfg)
    bare_b = bare_loop(cfg, args.steps)
    bare = (bare_a + bare_b) / 2
    print(f"config: default hybrid (d_model={cfg.model.d_model}, n_layers={cfg.model.n_layers}, batch={cfg.optim.batch_size}), "
          f"eval every {cfg.eval.every} steps on {len(cfg.eval.multipliers)}x{cfg.eval.n_sequences} sequences, "
          f"{torch.get_num_threads()} threads, {args.steps} steps")
    print(f"bare loop  {bare:8.1f} steps/s  (runs: {bare_a:.1f}, {bare_b:.1f})")
    print(f"real loop  {real:8.1f} steps/s")
    print(f"ratio      {real / bare:8.3f}  (target >= 0.85)")


if __name__ == "__main__":
    main()
