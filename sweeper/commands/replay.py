"""`sweeper replay FILE --curves SWEEP_OR_RECORD ...`: a space's search and early stopping, tried on
learning curves already recorded, before any compute is spent on it.

The space as written (its sampler, baselines, early stopping, num_samples and max_concurrent) runs
`--replays` times on the curves (sweeper/replay.py: a simulated clock, the sweep's own ledger and
stopping rule), and two variants of it run on the same replay seeds:

    as written        the space's own sampler, baselines and early stopping
    as written, FIFO  the same without early stopping (every trial to the end): what the stopping buys
    random + FIFO     random search, no baselines, every trial to the end: the reference

A point the space draws that no curve holds trains on the nearest recorded one, each parameter
measured in the space's own scale (sweeper/curves.py). Per method:

    to best     training steps, all trials, until the sweep's best-so-far point is within
                `--tolerance` of the best recorded point (its curves' final value, averaged):
                median [IQR]; a replay that never gets there counts as infinite compute
    speed-up    random + FIFO's median to-best / the method's, with a 95% bootstrap interval
    top-k cut   trials at one of the `--top` best recorded points that the early stopping ended
"""

from __future__ import annotations

import sys
from dataclasses import dataclass

from core.errors import cut, short_path, visible


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper replay`."""

    file: str
    curves: list[str]
    storage: str | None
    replays: int
    tolerance: float
    top: int


def run(options: Options) -> int:
    from sweeper.curves import load_curves
    from sweeper.space_file import load_space

    spec = load_space(options.file)
    curves = load_curves(options.curves, spec, options.storage)
    print(visible("\n".join(header(options, spec, curves)), keep="\n"), flush=True)  # what runs, before it runs
    rows = compare(spec, curves.grid, options.replays, options.tolerance, options.top, progress=sys.stderr.isatty())
    print(visible("\n".join(table(options, spec, curves, rows)), keep="\n"))  # names from files others may write
    return 0


def without_stopping(spec):
    """The same space with every trial trained to the end: what its early stopping buys."""
    return spec.model_copy(update={"scheduler": spec.scheduler.model_copy(update={"type": "fifo"})})


def reference_of(spec):
    """Random search on the same space, no baselines, every trial to the end."""
    searcher = spec.searcher.model_copy(update={"sampler": "random", "baseline": [], "startup_trials": None})
    return without_stopping(spec).model_copy(update={"searcher": searcher})


REFERENCE = "random + FIFO"
METHODS = {"as written": lambda spec: spec, "as written, FIFO": without_stopping, REFERENCE: reference_of}


def compare(spec, grid, replays: int, tolerance: float, top: int, progress: bool = False) -> dict[str, list[dict]]:
    """Each method's replays at seeds 0..replays-1 (the same seeds for every method); with
    `progress`, a bar on stderr (a terminal's) counts them."""
    from sweeper.replay import outcome

    def each(done=lambda: None) -> dict[str, list[dict]]:
        rows = {}
        for name, variant in METHODS.items():
            rows[name] = []
            for seed in range(replays):
                rows[name].append(outcome(variant(spec), grid, seed, tolerance=tolerance, top=top))
                done()
        return rows

    if not progress:
        return each()
    from rich.console import Console
    from rich.progress import Progress

    with Progress(console=Console(stderr=True), transient=True) as bar:
        task = bar.add_task("replaying", total=replays * len(METHODS))
        return each(lambda: bar.advance(task))


def header(options: Options, spec, curves) -> list[str]:
    """What is replayed, on what: said before the replays run (a large space takes minutes)."""
    grid = curves.grid
    s = spec.scheduler
    written = f"{spec.searcher.sampler} + " + (f"ASHA (grace {spec.asha_limits()[0]}"
                                               + (", phase-aware" if s.phase_aware else "")
                                               + (f", before the switch by {s.pre_phase_metric}" if s.pre_phase_metric else "")
                                               + ")" if s.type == "asha" else "FIFO")
    best = grid.ranked()[: options.top]
    lines = [f"replay of {short_path(options.file, 120)} ({written}, {spec.budget.num_samples} trials, {spec.budget.max_concurrent} at "
             f"once) on {curves.complete} curves at {len(grid.runs)} points"
             + (f" ({curves.left_out} left out: cut short, without {spec.metric} or at no point of the space)" if curves.left_out else "")
             + f"; {options.replays} replays each",
             f"best recorded point: {_point(grid, best[0])}: {spec.metric} {grid.final(best[0]):.3f}"]
    return lines


def table(options: Options, spec, curves, rows: dict[str, list[dict]]) -> list[str]:
    """Each method's compute to the best, speed-up and top-k stops, after the replays."""
    from sweeper.replay_stats import summarize

    lines = ["",
             f"{'method':<16} {'to within ' + format(options.tolerance, 'g') + ' of the best: median [IQR]':<44} "
             f"{'never':>7}  {'speed-up vs random + FIFO [95% CI]':<36} top-{options.top} stopped"]
    reference = [r["to_best"] for r in rows[REFERENCE]]
    for name, rs in rows.items():
        m = summarize(rs, reference)
        q = m.quartiles
        shown = f"{q[1]:,.0f} [{q[0]:,.0f}-{q[2]:,.0f}] steps" if q else "never"
        speed = f"{m.speedup.value:.2f}x [{m.speedup.low:.2f}, {m.speedup.high:.2f}]"
        cut = f"{m.top_stopped}/{m.top_trials} ({m.top_stopped / m.top_trials:.0%})" if m.top_trials else "no trial there"
        lines.append(f"{name:<16} {shown:<44} {m.not_reached:>7}  {speed:<36} {cut}")
    lines += ["", "A point the space draws that no curve holds trains on the nearest recorded one; a replay's "
              "compute is training steps summed over its trials (sweeper/replay.py)."]
    return lines


def _point(grid, key: tuple) -> str:
    return ", ".join(f"{cut(axis, 60)} {value:g}" if isinstance(value, float) else f"{cut(axis, 60)} {cut(str(value), 60)}"
                     for axis, value in zip(grid.axes, key))
