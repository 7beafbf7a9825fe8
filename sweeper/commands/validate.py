"""`sweeper validate`: check a search-space file, print the compiled space and a few samples."""

from __future__ import annotations

import argparse

from sweeper.space_file import N_VALIDATION_SAMPLES, load_space


def run(args: argparse.Namespace) -> int:
    from sweeper.adapters.optuna_search import baseline_points, describe_space, sample_configs

    spec = load_space(args.file)
    b, s = spec.budget, spec.scheduler
    if spec.searcher.sampler == "grid":
        print(f"{args.file}: valid (a grid of {b.num_samples} points, every point checked)")
    else:
        print(f"{args.file}: valid ({N_VALIDATION_SAMPLES} sampled configs, every range end and every choice checked)")
    print(f"name: {spec.name}   metric: {spec.metric} ({spec.mode})")
    print(f"budget: {b.num_samples} trials, {b.max_concurrent} at once, {b.max_steps} steps each, report every {b.eval_every}")
    grace, max_t = spec.asha_limits()
    sched = f"asha (grace {grace}, max_t {max_t}, reduction {s.reduction_factor})" if s.type == "asha" else "fifo"
    print(f"scheduler: {sched}   searcher: {spec.searcher.sampler} (seed {spec.searcher.seed})")
    print(f"resources per trial: cpu {spec.resources.cpu}, gpu {spec.resources.gpu}")
    print("space:")
    print("\n".join(describe_space(spec)))
    for i, point in enumerate(baseline_points(spec, args.file)):
        print(f"baseline {i}: {point}")
    print(f"{args.samples} sampled configs:")
    for params in sample_configs(spec, args.file, args.samples)[-args.samples:] if args.samples else []:
        print(f"  {params}")
    return 0
