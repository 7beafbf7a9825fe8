"""Trainer overhead: the real training loop against a bare loop of the same model on the same batches.

    real  trainables.train.train on the default hybrid config: the batch stream drawn as it goes,
          evaluation + checkpoint + report at the default interval.
    bare  the same model's forward + loss + backward + clip + AdamW step, nothing else, on the
          same stream of batches (the config's `task.batching`) drawn beforehand, with the same loss
          (`objective.step`): what the real loop would cost if training were all it did.

Both run here, side by side, for the same number of steps (bare first, then real, then
bare again, to even out drift on a shared machine); prints steps/s of each and the ratio.
Target: real / bare >= 0.85.

    python bench/trainer_overhead.py [--steps 500] [--threads N]
"""

from __future__ import annotations

import time

import torch

from trainables.config import TrialConfig
from trainables.model import HybridLM
from trainables.objectives import make_objective
from trainables.train import build_optimizer, train
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import cpus, positive_int


def bare_loop(cfg: TrialConfig, steps: int) -> float:
    torch.manual_seed(cfg.seed)  # as train() does: the same initial weights
    objective = make_objective(cfg)
    model = HybridLM(cfg.model, objective.vocab_size)
    optimizer = build_optimizer(model, cfg.optim)
    stream = objective.train_batches(cfg.optim.batch_size, torch.Generator().manual_seed(cfg.seed))
    batches = [stream.next() for _ in range(steps)]  # the batches train() draws, in its order
    model.train()
    start = time.perf_counter()
    for batch in batches:
        loss = objective.step(model(batch.tokens), batch, state_only=False).loss
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if cfg.optim.grad_clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.optim.grad_clip)
        optimizer.step()
    return steps / (time.perf_counter() - start)


def real_loop(cfg: TrialConfig) -> float:
    start = time.perf_counter()
    train(cfg, report=lambda metrics, checkpoint_dir: None)
    return cfg.steps / (time.perf_counter() - start)


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=positive_int, default=500, help="steps per loop (a multiple of eval.every)")
    parser.add_argument("--threads", type=cpus, default=None)
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
          f"eval every {cfg.eval.every} steps on {len(cfg.eval.multipliers)}x{cfg.eval.mid_run_sequences} sequences "
          f"({cfg.eval.n_sequences} at the last step), batching {cfg.task.batching}, "
          f"{torch.get_num_threads()} threads, {args.steps} steps")
    print(f"bare loop  {bare:8.1f} steps/s  (runs: {bare_a:.1f}, {bare_b:.1f})")
    print(f"real loop  {real:8.1f} steps/s")
    print(f"ratio      {real / bare:8.3f}  (target >= 0.85)")


if __name__ == "__main__":
    run_tool(main)
