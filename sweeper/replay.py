"""Replay a sweep on recorded learning curves: a simulated clock instead of training.

A grid of real runs (experiments/switch_grid.py: every report of every run, several training
seeds per point) stands in for the trainer. The replay runs the sweep's own search and early
stopping on it, the same objects a real sweep runs (Syne Tune's simulated backend is the model):

    the ledger     sweeper/adapters/optuna_ledger.py, on an in-memory Optuna storage: the
                   space's sampler draws each point, baselines first, duplicates told at once
    the stopping   sweeper/stopping.py's RungStopper (ASHA, phase-aware or not, ranking trials
                   before their phase change by a signal of it or not), asked at each report
                   exactly as the Ray Tune scheduler asks it; or another stopper of its family
                   passed in (sweeper/pasha.py's progressive ASHA)
    the clock      `max_concurrent` workers; a trial takes one time unit per training step;
                   reports are handled in the order of their simulated time

A trial at a point trains on one of that point's recorded runs, chosen by the replay's seed.
Only Ray is left out: it would add scheduling jitter, not decisions. Deterministic for a seed.
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import heapq
import math
import random
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from core import json_text
from core.errors import ConfigError, cut, short_path
from sweeper.adapters.optuna_ledger import MEMORY, Ledger
from sweeper.nearest import Nearest, Scale, distance
from sweeper.space import SearchSpace
from sweeper.pasha import PAUSED_AT
from sweeper.stopping import RungStopper, stopper_for

StopperFor = Callable[[SearchSpace, Ledger], RungStopper]  # a space and its ledger -> the early stopping


@dataclass(frozen=True)
class Grid:
    """Recorded runs by point: {point key: [reports of one run, ...]} (one run per training seed).
    With `scales`, a point that was not recorded stands in for the nearest one that was."""

    axes: tuple[str, ...]  # the searched parameters, in key order
    runs: dict[tuple, list[list[dict]]]
    metric: str
    mode: str
    max_steps: int
    scales: tuple[Scale, ...] | None = None  # per axis; None: only recorded points may be drawn

    def key(self, params: dict[str, Any]) -> tuple:
        return point_key(self.axes, params)

    def point(self, params: dict[str, Any]) -> tuple:
        """The recorded point a trial at `params` trains on: its own, else the nearest (with scales)."""
        key = self.key(params)
        if key in self.runs or self.scales is None:
            return key
        return self._nearest.point(key)

    def distance(self, a: tuple, b: tuple) -> float:
        return distance(a, b, self.scales or ())

    @functools.cached_property
    def _nearest(self) -> Nearest:
        return Nearest(list(self.runs), self.scales or ())

    def with_scales_of(self, spec: SearchSpace) -> "Grid":
        """This grid, drawn from by `spec`'s own search: every point the space draws trains on the
        nearest recorded one (a nearest-neighbour surrogate of the recorded curves)."""
        from sweeper.adapters.optuna_search import walk
        from sweeper.space import CategoricalParam, param_names

        params = {name: p for _, p, name, _ in walk(spec.space, param_names(spec.space))}
        scales = tuple(("cat",) if isinstance(params.get(a), (CategoricalParam, type(None)))
                       else ("num", params[a].low, params[a].high, bool(getattr(params[a], "log", False))) for a in self.axes)
        return dataclasses.replace(self, scales=scales)

    def final(self, key: tuple) -> float:
        """The point's value: its runs' final metric, averaged over training seeds."""
        values = [run[-1][self.metric] for run in self.runs[key]]
        return sum(values) / len(values)

    def best(self) -> float:
        pick = max if self.mode == "max" else min
        return pick(self.final(k) for k in self.runs)

    def ranked(self) -> list[tuple]:
        """Points, best first."""
        return sorted(self.runs, key=self.final, reverse=self.mode == "max")


def point_key(axes: tuple[str, ...], params: dict[str, Any]) -> tuple:
    """A point's key in a grid of `axes`: its value on each (None where it has none)."""
    return tuple(_norm(params.get(a)) for a in axes)


def _norm(value: Any) -> Any:
    return float(value) if isinstance(value, float) else value


def load_grid(path: str | Path, axes: tuple[str, ...], seed_axis: str = "seed") -> Grid:
    """A data file of experiments/switch_grid.py: runs of equal points (all but `seed_axis`) grouped;
    one ConfigError line for a file that is not one (a FIFO is not opened: it would block)."""
    path = Path(path)
    if not path.is_file():
        raise ConfigError(f"{short_path(path, 120)}: " + ("not a regular file (a FIFO, a device, a folder?)"
                                                          if path.exists() else "no such grid record"))
    try:
        opener = gzip.open if path.suffix == ".gz" else open
        with opener(path, "rt", encoding="utf-8") as f:
            data = json_text.loads(f.read())  # nesting past the parser's stack: a ValueError
        grid = data["grid"]
        runs: dict[tuple, list[list[dict]]] = {}
        for run in sorted(data["runs"], key=lambda r: r["params"][seed_axis]):
            runs.setdefault(tuple(_norm(run["params"][a]) for a in axes), []).append(run["reports"])
        return Grid(axes, runs, grid["metric"], grid["mode"], grid["max_steps"])
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError) as err:
        what = f"no key {err}" if isinstance(err, KeyError) else f"{type(err).__name__}: {cut(str(err), 80)}"
        raise ConfigError(f"{short_path(path, 120)}: not a record of a learning-curve grid ({what})") from None


@dataclass
class Trace:
    """What one replay did: each ended trial in order, and the compute spent so far."""

    ended: list[dict] = field(default_factory=list)  # {number, key, status, steps, compute, value}
    compute: int = 0  # training steps, all trials

    def incumbents(self, grid: Grid) -> list[tuple[int, float]]:
        """(compute, the true value of the sweep's best point so far) after each completed (or
        paused) trial: the sweep picks by the values it saw, among the trials that trained furthest
        (a completed trial outranks a paused one); the truth is the point's mean over seeds."""
        out, best, best_key = [], None, None
        sign = 1.0 if grid.mode == "max" else -1.0
        for e in self.ended:
            if e["status"] not in ("completed", "paused"):
                continue
            rank = (math.inf if e["status"] == "completed" else e["steps"], sign * e["value"])
            if best is None or rank > best:
                best, best_key = rank, e["key"]
            out.append((e["compute"], grid.final(best_key)))
        return out

    def compute_to_reach(self, grid: Grid, tolerance: float) -> int | None:
        """Compute until the incumbent's true value is within `tolerance` of the grid's best; None: never."""
        target = grid.best()
        for compute, value in self.incumbents(grid):
            if abs(target - value) <= tolerance:
                return compute
        return None


def replay(spec: SearchSpace, grid: Grid, seed: int, stopping: StopperFor | None = None) -> Trace:
    """One sweep of `spec` on the grid's curves. `seed` seeds the sampler and the choice of runs;
    `stopping` replaces the space's own early stopping (`stopper_for`, when it names ASHA)."""
    spec = spec.model_copy(update={"searcher": spec.searcher.model_copy(update={"seed": seed})})
    ledger = Ledger(MEMORY, spec, create=True)
    if stopping is None and spec.scheduler.type == "asha":
        stopping = stopper_for
    stopper = stopping(spec, ledger) if stopping is not None else None
    pick = random.Random(seed)
    trace = Trace()
    events: list[tuple[int, int, int, int]] = []  # (time, worker, trial number, report index)
    chosen: dict[int, list[dict]] = {}

    def start(worker: int, now: int) -> None:
        while ledger.counted() < spec.budget.num_samples:
            number = ledger.new_trial()
            entry = ledger.trials[number]
            if entry.state.name != "RUNNING":  # a draw of a point that already ran: told its outcome at once
                continue
            runs = grid.runs[grid.point(entry.params)]
            chosen[number] = runs[pick.randrange(len(runs))]
            first = chosen[number][0]
            heapq.heappush(events, (now + int(first["step"]), worker, number, 0))
            return

    for worker in range(spec.budget.max_concurrent):
        start(worker, 0)
    while events:
        now, worker, number, i = heapq.heappop(events)
        report = chosen[number][i]
        step = int(report["step"])
        trace.compute += step - (int(chosen[number][i - 1]["step"]) if i else 0)
        value = report.get(spec.metric)
        ledger.report(number, step, float(value))
        stop = stopper is not None and stopper.on_report(number, report)
        last = i == len(chosen[number]) - 1 or step >= spec.budget.max_steps
        if stop or last:
            # a recorded run that ends before max_steps without diverging was stopped where it was
            # recorded (a real sweep's stopped trial, replayed): it stops there here too
            cut_short = step < spec.budget.max_steps and not report.get("diverged")
            status = "stopped" if stop or cut_short else "completed"
            ledger.end(number, status, float(value))
            if PAUSED_AT in ledger.trials[number].attrs:
                status = "paused"  # at a progressive ASHA's current max: stopped there, not cut by a rung
            trace.ended.append({"number": number, "key": grid.point(ledger.trials[number].params), "status": status,
                                "steps": step, "compute": trace.compute, "value": float(value)})
            start(worker, now)
        else:
            nxt = chosen[number][i + 1]
            heapq.heappush(events, (now + int(nxt["step"]) - step, worker, number, i + 1))
    return trace


def outcome(spec: SearchSpace, grid: Grid, seed: int, stopping: StopperFor | None = None,
            tolerance: float = 0.01, top: int = 3) -> dict:
    """What one replay gives a comparison: compute until within `tolerance` of the grid's best (None:
    never), how the trials at the grid's `top` best points ended, and the best-so-far curve."""
    trace = replay(spec, grid, seed, stopping)
    best = set(grid.ranked()[:top])
    at_top = [e for e in trace.ended if e["key"] in best]
    incumbents = trace.incumbents(grid)
    return {"to_best": trace.compute_to_reach(grid, tolerance), "top_trials": len(at_top),
            "top_stopped": sum(e["status"] == "stopped" for e in at_top),
            "top_paused": sum(e["status"] == "paused" for e in at_top),
            "paused": sum(e["status"] == "paused" for e in trace.ended),
            "final": incumbents[-1][1] if incumbents else None, "curve": incumbents}


def grid_of_sweep(sweep_dir: str | Path, spec: SearchSpace) -> Grid:
    """The runs of a real sweep's folder as a grid (one run per point): to replay that sweep."""
    from sweeper.status import load_records
    from trainables.run_dir import RunDir

    _, records = load_records(Path(sweep_dir))
    axes = tuple(sorted({k for r in records for k in r.params}))
    runs = {}
    for r in records:
        reports = RunDir(Path(sweep_dir) / "trials" / r.trial_id, spec.budget.max_steps).reports()
        if reports and set(r.params) == set(axes):
            runs[point_key(axes, r.params)] = [reports]
    return Grid(axes, runs, spec.metric, spec.mode, spec.budget.max_steps)


def kendall_tau(xs: list[float], ys: list[float]) -> float:
    """Kendall's tau-b of two equally long lists (NaN for fewer than two pairs or no variation)."""
    from scipy.stats import kendalltau

    if len(xs) < 2:
        return math.nan
    return float(kendalltau(xs, ys).statistic)
