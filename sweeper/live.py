"""The live view of a sweep: a table on a terminal, plain lines anywhere else, with an ETA.

    trial records (from the running sweep's status.json, or `sweeper status NAME --watch`)
      + Plan (the budget and ASHA's rungs, from the search space) + elapsed seconds
      -> Progress: steps trained, expected steps left, measured speed, ETA   (pure arithmetic)
      -> plain_line(...): one line, for CI, a log file, `ray job logs`
      -> table(...):      a rich renderable for a terminal (rich is imported only to draw it)

The estimate (docs/usage.md, "How long will it take?"):
  * ASHA decides at its rungs r_0 < r_1 < ... (grace_period x eta^k, at the first report at or
    after each, below max_steps) and lets about 1/eta of the trials through each. A trial at step
    s has passed the rungs below s; each later segment of its budget counts with the chance of
    getting there: expected steps left = sum over segments [a, b] above s of (b - max(a, s)) / eta^j,
    j the rungs still ahead of s before that segment. From step 0 this is the expected length E of
    a new trial (FIFO: E = max_steps).
  * Speed v: steps per second of one trial, measured over all trials that reported
    (sum of steps / sum of Ray's time_total_s: training, evaluation and checkpoints).
  * ETA: the running trials' expected steps left, then E for every trial not yet started, dealt
    out in turn to the max_concurrent slots, each training at v; the last slot to finish is the ETA.
"""

from __future__ import annotations

import heapq
import math
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from sweeper.records import TrialRecord, length_family
from sweeper.status import best_line, counts_line, load_records
from trainables.errors import ConfigError

MULTIPLIERS = (1, 2, 3, 4)


def asha_rungs(grace_period: int, max_t: int, reduction_factor: float, eval_every: int, max_steps: int) -> tuple[int, ...]:
    """The steps where Ray's ASHA (one bracket) can stop a trial: its milestones grace x eta^k
    (k < int(log(max_t / grace) / log(eta) + 1), as ray.tune.schedulers.async_hyperband computes
    them), each moved to the first report at or after it; a rung at max_steps stops nothing."""
    n = int(math.log(max_t / grace_period) / math.log(reduction_factor) + 1)
    rungs = set()
    for k in range(max(n, 0)):
        at = math.ceil(grace_period * reduction_factor ** k / eval_every) * eval_every  # trials report every eval_every
        if at < max_steps:
            rungs.add(at)
    return tuple(sorted(rungs))


@dataclass(frozen=True)
class Plan:
    """What a sweep will train: the budget and where ASHA decides."""

    name: str
    metric: str
    mode: str
    num_samples: int
    max_concurrent: int
    max_steps: int
    rungs: tuple[int, ...] = ()  # ASHA's decision steps below max_steps; () without early stopping
    reduction_factor: float = 1.0  # ASHA's eta; 1 without early stopping

    @classmethod
    def from_space(cls, spec) -> "Plan":
        """From a validated sweeper.space.SearchSpace."""
        b, s = spec.budget, spec.scheduler
        rungs, eta = (), 1.0
        if s.type == "asha":
            grace, max_t = spec.asha_limits()
            rungs, eta = asha_rungs(grace, max_t, s.reduction_factor, b.eval_every, b.max_steps), s.reduction_factor
        return cls(spec.name, spec.metric, spec.mode, b.num_samples, b.max_concurrent, b.max_steps, rungs, eta)

    def expected_steps(self, step: int = 0) -> float:
        """Expected steps a trial at `step` still trains, with ASHA letting 1/eta through each rung."""
        bounds = (0, *self.rungs, self.max_steps)
        passed = sum(r < step for r in self.rungs)  # a trial reporting at a rung is still to be judged there
        left = 0.0
        for k in range(len(bounds) - 1):
            span = bounds[k + 1] - max(bounds[k], step)
            if span > 0:
                left += span / self.reduction_factor ** (k - passed)
        return left


@dataclass(frozen=True)
class Progress:
    done: int  # steps trained so far, all trials
    left: float  # expected steps still to train
    speed: float | None  # steps/s of one trial (None before the first report)
    eta_s: float | None  # seconds to the end of the sweep (None while the speed is unknown)


def trial_speed(records: list[TrialRecord]) -> float | None:
    """Steps per second of one trial: steps over Ray's time_total_s, summed over every trial that reported."""
    steps = seconds = 0.0
    for r in records:
        t = r.metrics.get("time_total_s")
        if r.step > 0 and t and t > 0:
            steps, seconds = steps + r.step, seconds + float(t)
    return steps / seconds if seconds > 0 else None


def progress(records: list[TrialRecord], plan: Plan) -> Progress:
    running = [plan.expected_steps(r.step) for r in records if r.status == "running"]
    waiting = [plan.expected_steps(r.step) for r in records if r.status in ("pending", "interrupted")]
    waiting += [plan.expected_steps(0)] * max(0, plan.num_samples - len(records))
    speed = trial_speed(records)
    eta = None if speed is None else makespan(running, waiting, plan.max_concurrent) / speed
    return Progress(sum(r.step for r in records), sum(running) + sum(waiting), speed, eta)


def makespan(running: list[float], waiting: list[float], slots: int) -> float:
    """Steps until the last slot is free: running trials hold slots; waiting ones take the first free slot in turn."""
    busy = sorted(running) + [0.0] * max(0, slots - len(running))
    heapq.heapify(busy)
    for steps in waiting:
        heapq.heappush(busy, heapq.heappop(busy) + steps)
    return max(busy, default=0.0)


# -- text ------------------------------------------------------------------------------------


def clock(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    seconds = int(round(seconds))
    days, rest = divmod(seconds, 86400)
    h, rest = divmod(rest, 3600)
    m, s = divmod(rest, 60)
    return (f"{days}d " if days else "") + f"{h}:{m:02d}:{s:02d}"


def _eta(p: Progress) -> str:
    if p.left == 0:
        return "nothing left to train"
    return "ETA after the first report" if p.eta_s is None else f"ETA {clock(p.eta_s)}"


def _speed(p: Progress) -> str:
    return "" if p.speed is None else f" | {p.speed:.1f} steps/s per trial"


def plan_line(plan: Plan, records: list[TrialRecord] = ()) -> str:
    """The line `sweeper launch` starts with: what will run and, from earlier reports (a resume), how long."""
    each = plan.expected_steps(0)
    stopping = (f"ASHA (rungs {', '.join(map(str, plan.rungs))}, eta {plan.reduction_factor:g}) expects ~{each:,.0f} steps a trial"
                if plan.rungs else "every trial runs its full budget")
    p = progress(list(records), plan)
    left = "" if not records else f", ~{p.left:,.0f} left"
    return (f"plan: {plan.num_samples} trials of up to {plan.max_steps:,} steps, {plan.max_concurrent} at a time; "
            f"{stopping}, ~{plan.num_samples * each:,.0f} steps in all{left}; {_eta(p)}{_speed(p)}. "
            "Ctrl-C stops; the same command resumes.")


def plain_line(records: list[TrialRecord], plan: Plan, elapsed: float | None) -> str:
    """One progress line: `[name elapsed] counts | best | steps | speed | ETA`."""
    p = progress(records, plan)
    return (f"[{plan.name} {clock(elapsed)}] {counts_line(records, plan.num_samples)} | "
            f"{best_line(records, plan.metric, plan.mode)} | {p.done:,} steps done, ~{p.left:,.0f} to go"
            f"{_speed(p)} | {_eta(p)}")


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.3g}" if abs(v) < 1e-2 and v != 0 else f"{v:.3f}" if abs(v) < 10 else f"{v:.4g}"
    return "" if v is None else str(v)


def running_rows(records: list[TrialRecord], plan: Plan) -> tuple[list[str], list[list[str]]]:
    """(header, rows) of the running and waiting trials: params, step of the budget, acc at 1x-4x, speed."""
    live = [r for r in records if r.status in ("running", "pending")]
    keys = sorted({k for r in live for k in r.params})
    family = length_family(plan.metric)
    header = ["trial", *keys, "step", *(f"{family}_{k}x" for k in MULTIPLIERS), "steps/s", "status"]
    rows = []
    for r in sorted(live, key=lambda r: (r.status != "running", -r.step, r.trial_id)):
        rate = r.metrics.get("steps_per_s")
        rows.append([r.trial_id, *(_fmt(r.params.get(k)) for k in keys), f"{r.step}/{plan.max_steps}",
                     *(_fmt(r.metrics.get(f"{family}_{k}x")) for k in MULTIPLIERS), "" if rate is None else f"{rate:.1f}", r.status])
    return header, rows


def table(records: list[TrialRecord], plan: Plan, elapsed: float | None, state: str = "running"):
    """The terminal view (a rich renderable): a title line, one row per running trial with a bar
    for the step of its budget, the best trial so far, steps and the ETA."""
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    p = progress(records, plan)
    title = Text.assemble((f"sweep {plan.name}", "bold"), f"  {state}  elapsed {clock(elapsed)}  ",
                          (_eta(p), "bold cyan"), _speed(p).replace(" | ", "  "))
    header, rows = running_rows(records, plan)
    grid = Table(box=None, pad_edge=False, header_style="bold")
    step_col = header.index("step")
    for i, name in enumerate(header):
        grid.add_column(name, justify="right" if i > step_col or name == "step" else "left")
        if i == step_col:
            grid.add_column("budget", width=22)
    steps = {r.trial_id: r.step for r in records}
    for row in rows:
        bar = ProgressBar(total=plan.max_steps, completed=steps[row[0]], width=20)
        grid.add_row(*row[:step_col + 1], bar, *row[step_col + 1:])
    lines = [title, Text(f"trials: {counts_line(records, plan.num_samples)}"),
             grid if rows else Text("(no trial running)"),
             Text(best_line(records, plan.metric, plan.mode)),
             Text(f"steps: {p.done:,} done, ~{p.left:,.0f} expected to go "
                  f"(ASHA rungs {', '.join(map(str, plan.rungs)) or 'none'}, 1/{plan.reduction_factor:g} pass each)")]
    return Group(*lines)


# -- following a sweep's status.json ----------------------------------------------------------


def plan_of(sweep_dir: Path) -> Plan:
    """The plan of a sweep from its directory (its space.yaml)."""
    from sweeper.space import load_space
    from sweeper.status import SPACE_FILE

    return Plan.from_space(load_space(Path(sweep_dir) / SPACE_FILE, n_samples=0))


def choose_view(view: str, out: TextIO) -> str:
    """auto: the table on a terminal, lines anywhere else."""
    if view != "auto":
        return view
    return "table" if getattr(out, "isatty", lambda: False)() else "lines"


class LiveView:
    """Redraws the view of a sweep from its status.json: the table (redrawn every second) or a
    plain line every `every_s` seconds and whenever a trial starts or ends. A context manager
    around the sweep (`sweeper launch`) or a loop of its own (`sweeper status --watch`)."""

    def __init__(self, sweep_dir: Path, plan: Plan, view: str = "auto", every_s: float = 30.0,
                 out: TextIO | None = None, started: float | None = None):
        self.sweep_dir, self.plan, self.every_s = Path(sweep_dir), plan, every_s
        self.out = out or sys.stdout
        self.view = choose_view(view, self.out)
        self.started: float | None = time.time() if started is None else started
        self.records: list[TrialRecord] = []
        self.status: dict = {}
        self.state = "running"
        self._last_line, self._last_counts = 0.0, None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live = None

    @classmethod
    def of_sweep(cls, sweep_dir: Path, every_s: float = 30.0, out: TextIO | None = None) -> "LiveView":
        """`sweeper status --watch`: the view of a sweep from its directory alone."""
        view = cls(sweep_dir, plan_of(sweep_dir), "auto", every_s, out)
        view.reload()
        view.started = view.status.get("started")  # None (unknown) in a status.json of an older version
        return view

    def elapsed(self) -> float | None:
        """Seconds since the sweep (or its resume) started; up to the last update once it is not running."""
        if self.started is None:
            return None
        end = time.time() if self.state == "running" else self.status.get("updated", time.time())
        return max(0.0, end - self.started)

    def reload(self) -> None:
        try:
            self.status, self.records = load_records(self.sweep_dir)
            self.state = self.status.get("state", "running")
        except (ConfigError, OSError):  # not written yet
            pass

    def tick(self, force: bool = False) -> None:
        """Reload the records and draw: the table always, a line when due."""
        self.reload()
        if self.view == "table" and self._live is not None:
            self._live.update(table(self.records, self.plan, self.elapsed(), self.state), refresh=True)
        elif self.view == "lines":
            counts = counts_line(self.records, self.plan.num_samples)
            now = time.time()
            if force or counts != self._last_counts or now - self._last_line >= self.every_s:
                print(plain_line(self.records, self.plan, self.elapsed()), file=self.out, flush=True)
                self._last_line, self._last_counts = now, counts

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.tick()
            except Exception as err:  # noqa: BLE001 - the view must never stop the sweep
                print(f"warning: live view stopped ({type(err).__name__}: {str(err)[:200]})", file=sys.stderr)
                return

    def __enter__(self) -> "LiveView":
        if self.view == "table":
            from rich.console import Console
            from rich.live import Live

            self._live = Live(console=Console(file=self.out), auto_refresh=False, transient=False,
                              redirect_stdout=True, redirect_stderr=True)
            self._live.start()
        if self.view != "none":
            self._thread = threading.Thread(target=self._loop, name="sweeper-live-view", daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.view != "none":
            self.tick(force=True)  # the last state, drawn once more
        if self._live is not None:
            self._live.stop()

    def watch(self) -> int:
        """`sweeper status --watch`: redraw until the sweep is no longer running (or Ctrl-C)."""
        from sweeper.status import driver_alive

        with self:
            try:
                while self.state == "running" and driver_alive(self.status) and not self._stop.wait(1.0):
                    pass
            except KeyboardInterrupt:
                pass
        return 0
