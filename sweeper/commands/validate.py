"""`sweeper validate`: check a search-space file, print the compiled space and a few samples."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import cut, visible
from sweeper.space_file import N_VALIDATION_SAMPLES, load_space


MAX_LINE = 1000  # characters of one line printed (a baseline point or sample of many parameters)


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper validate`."""

    file: str
    samples: int


def run(options: Options) -> int:
    from sweeper.adapters.optuna_search import baseline_points, describe_space, sample_configs

    spec = load_space(options.file)
    b, s = spec.budget, spec.scheduler
    if spec.searcher.sampler == "grid":
        lines = [f"{options.file}: valid (a grid of {b.num_samples} points, every point checked)"]
    else:
        lines = [f"{options.file}: valid ({N_VALIDATION_SAMPLES} sampled configs, every range end and every choice checked)"]
    lines.append(f"name: {spec.name}   metric: {spec.metric} ({spec.mode})")
    lines.append(f"budget: {b.num_samples} trials, {b.max_concurrent} at once, {b.max_steps} steps each, report every {b.eval_every}")
    grace, max_t = spec.asha_limits()
    margin = spec.phase_margin()
    phases = ("" if margin is None else f", phase-aware: margin {margin}"
              + (f", before the phase change by {s.pre_phase_metric}" if s.pre_phase_metric else ", judged only after it"))
    sched = f"asha (grace {grace}, max_t {max_t}, reduction {s.reduction_factor}{phases})" if s.type == "asha" else "fifo"
    lines.append(f"scheduler: {sched}   searcher: {spec.searcher.sampler} (seed {spec.searcher.seed})")
    lines.append(f"resources per trial: cpu {spec.resources.cpu}, gpu {spec.resources.gpu}")
    lines += ["space:", *describe_space(spec)]
    for i, point in enumerate(baseline_points(spec, options.file)):
        lines.append(f"baseline {i}: {point}")
    lines.append(f"{options.samples} sampled configs:")
    for params in sample_configs(spec, options.file, options.samples)[-options.samples:] if options.samples else []:
        lines.append(f"  {params}")
    print("\n".join(cut(line, MAX_LINE) if len(line) > MAX_LINE else visible(line) for line in lines))  # a terminal escape in a name or choice
    return 0
