"""What one evaluation costs, and how much of it is the metrics beyond the model's forward pass.

    python bench/eval_cost.py [--preset hybrid_dat] [--repeats 15]

On the preset's model and full evaluation sets (one CPU thread), three timings, interleaved (each
in every place of the order in turn) and each the median of `--repeats`:

    forward      the model's forward pass over every evaluation batch, nothing else
    metrics      `trainables.evaluate.evaluate` as a trial runs it (accuracies per kind and beyond
                 the range, seq_acc, last_acc), with the preset's `eval.curve_window`
    + curve      the same with the position curve on (`curve_window` 5), as the paper-depth runs use

The metrics' own cost is `metrics - forward` (and `+ curve - forward`), per evaluation and as a
share of it; a trial evaluates every `eval.every` steps, so beside it the evaluation's share of a
report interval of training at the measured ms/step.
"""

from __future__ import annotations

import statistics
import time

import torch
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import positive_int


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="hybrid_dat")
    parser.add_argument("--repeats", type=positive_int, default=15)
    args = parser.parse_args()

    from trainables.config import load_trial_config
    from trainables.evaluate import evaluate
    from trainables.model import HybridLM
    from trainables.objectives import make_objective

    torch.set_num_threads(1)
    cfg = load_trial_config(args.preset)
    objective = make_objective(cfg)
    torch.manual_seed(cfg.seed)
    model = HybridLM(cfg.model, objective.vocab_size)
    model.eval()
    sets = objective.eval_sets(torch.device("cpu"))
    kinds, e, max_len = objective.task.kinds_present, cfg.eval, cfg.task.max_len

    @torch.no_grad()
    def forward_only() -> None:
        for full in sets.values():
            for i in range(0, full.tokens.shape[0], e.batch_size):
                model(full.tokens[i : i + e.batch_size]).argmax(-1)

    runs = {"forward": forward_only,
            "metrics": lambda: evaluate(model, sets, kinds, e.batch_size, max_len, e.curve_window),
            "+ curve": lambda: evaluate(model, sets, kinds, e.batch_size, max_len, 5)}
    times: dict[str, list[float]] = {name: [] for name in runs}
    for name, run in runs.items():  # warm-up
        run()
    names = list(runs)
    for repeat in range(args.repeats):  # each in every position of the order in turn: no place is favoured
        for name in names[repeat % len(names):] + names[:repeat % len(names)]:
            start = time.perf_counter()
            runs[name]()
            times[name].append(time.perf_counter() - start)
    median = {name: statistics.median(ts) for name, ts in times.items()}
    print(f"{args.preset}: {sum(s.tokens.shape[0] for s in sets.values())} sequences in {len(sets)} sets, "
          f"batch {e.batch_size}, one thread, medians of {args.repeats}")
    for name in runs:
        extra = median[name] - median["forward"]
        print(f"  {name:8} {median[name] * 1e3:8.1f} ms" + ("" if name == "forward" else
              f"   metrics beyond the forward: {extra * 1e3:+.1f} ms ({extra / median[name]:+.1%} of the evaluation)"))


if __name__ == "__main__":
    run_tool(main)
