"""The live view of a sweep: a table on a terminal, plain lines anywhere else, with an ETA.

    trial records (from the running sweep's status.json, or `sweeper status NAME --watch`)
      + Plan (the budget and ASHA's rungs, from the search space) + the wall clock
      -> Progress: steps trained, expected steps left, measured speed, ETA   (pure arithmetic)
      -> plain_line(...): one line, for CI, a log file, `ray job logs`
      -> table(...):      a rich renderable for a terminal (rich is imported only to draw it)

The estimate: sweeper/eta.py (docs/usage.md, "How long will it take?").

Time: elapsed is the whole sweep's, across launches (status.json's `elapsed_before_s` plus this
launch's time); a status.json without it gives only the time since the launch, and where the sweep
is known to have run before (trials that trained before this launch, or longer than it has run)
the view says "since resume". Both are recomputed from the clock at every redraw (every second).

Best: status.json's `best` (the best value ASHA judged, at a rung or a trial's end: it never goes
down) when present, else the best trial's latest value.

Width: the table fits the terminal. When it is too wide it gives up, in this order, until it fits:
  1. the budget bar narrows from 20 to 10 characters;
  2. parameter headers shorten to their shortest distinct dotted tail (optim.lr -> lr);
  3. the budget bar goes (the step column says the same);
  4. steps/s;
  5. the accuracies at 1x, 2x, 4x, then 3x, the scored one excepted;
  6. status;
  7. the parameters, the last first.
The trial, its step and the scored metric always stay. A header or a value is never cut (no `…`),
a header never wraps, and a line under the table names what was hidden.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TextIO

from sweeper.eta import Plan, Progress, clock, progress
from sweeper.records import TrialRecord, length_family
from sweeper.status import best_line, counts_line, load_records
from trainables.errors import ConfigError

MULTIPLIERS = (1, 2, 3, 4)


# -- text ------------------------------------------------------------------------------------


def _eta(p: Progress, age: float = 0.0, state: str = "running") -> str:
    """The ETA, counted down by `age`: seconds since the records were written (the trials trained on);
    for a sweep that is not running, the time it needs once resumed."""
    if p.left == 0:
        return "nothing left to train"
    if p.eta_s is None:
        return "ETA after the first report"
    return f"ETA {clock(max(0.0, p.eta_s - age))}" if state == "running" else f"~{clock(p.eta_s)} more once resumed"


def _speed(p: Progress) -> str:
    return "" if p.speed is None else f" | {p.speed:.1f} steps/s per trial"


def _elapsed(elapsed: float | None, since_resume: bool) -> str:
    return clock(elapsed) + (" since resume" if since_resume and elapsed is not None else "")


def plan_line(plan: Plan, records: list[TrialRecord] = ()) -> str:
    """The line `sweeper launch` starts with: what will run and, from earlier reports (a resume), how long."""
    each = plan.expected_steps(0)
    phases = ", each trial judged only after its switch" if plan.not_before_of is not None else ""
    stopping = (f"ASHA (rungs {', '.join(map(str, plan.rungs))}, eta {plan.reduction_factor:g}{phases}) "
                f"expects ~{each:,.0f} steps a trial" if plan.rungs else "every trial runs its full budget")
    p = progress(list(records), plan)
    left = "" if not records else f", ~{p.left:,.0f} left"
    return (f"plan: {plan.num_samples} trials of up to {plan.max_steps:,} steps, {plan.max_concurrent} at a time; "
            f"{stopping}, ~{plan.num_samples * each:,.0f} steps in all{left}; {_eta(p)}{_speed(p)}. "
            "Ctrl-C stops; the same command resumes.")


def plain_line(records: list[TrialRecord], plan: Plan, elapsed: float | None, *, best: dict | None = None,
               age: float = 0.0, since_resume: bool = False, state: str = "running") -> str:
    """One progress line: `[name elapsed] counts | best | steps | speed | ETA`."""
    p = progress(records, plan)
    return (f"[{plan.name} {_elapsed(elapsed, since_resume)}] {counts_line(records, plan.num_samples)} | "
            f"{best_line(records, plan.metric, plan.mode, best)} | {p.done:,} steps done, ~{p.left:,.0f} to go"
            f"{_speed(p)} | {_eta(p, age, state)}")


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


# -- fitting the table to the terminal ---------------------------------------------------------

BAR_WIDE, BAR_NARROW = 20, 10  # the budget bar's characters, and when the terminal is narrow
GAP = 2  # characters between two columns (rich's padding of one on each side; none at the edges)


def shortest_names(names: list[str]) -> list[str]:
    """Each parameter's shortest dotted tail that is no other parameter's tail: optim.lr -> lr,
    while model.dropout and attn.dropout keep their first part. A name with a condition
    (`path|parent=value`) stays whole."""
    short = []
    for name in names:
        parts = name.split(".")
        if "|" in name or len(parts) == 1:
            short.append(name)
            continue
        for k in range(1, len(parts) + 1):
            tail = ".".join(parts[-k:])
            if not any(other != name and (other == tail or other.endswith("." + tail)) for other in names):
                break
        short.append(tail)
    return short


@dataclass(frozen=True)
class Layout:
    """The columns of the running table that fit: in order, with their headers, and the bar's width (0: none)."""

    columns: list[str]  # keys of running_rows' header that stay
    labels: dict[str, str]  # key -> the header drawn
    widths: dict[str, int]  # key -> characters
    bar: int
    hidden: list[str]  # what was given up, in the order of giving it up

    @property
    def width(self) -> int:
        parts = [*self.widths.values(), *([self.bar] if self.bar else [])]
        return sum(parts) + GAP * (len(parts) - 1)


def layout(header: list[str], rows: list[list[str]], metric: str, width: int | None, measure=len) -> Layout:
    """The running table at `width` characters (None: no limit), giving up columns in the order of
    the module's docstring until it fits. `measure`: a string's width in terminal cells."""
    params = header[1:header.index("step")]
    lengths = [h for h in header if h not in ("trial", "step", "steps/s", "status") and h not in params]
    lengths = [lengths[i] for i in (0, 1, 3, 2) if i < len(lengths) and lengths[i] != metric]  # 1x, 2x, 4x, 3x
    steps = [("narrow", "budget"), ("shorten", None), ("hide", "budget"), ("hide", "steps/s"),
             *(("hide", h) for h in lengths), ("hide", "status"), *(("hide", p) for p in reversed(params))]
    labels, bar, hidden = {h: h for h in header}, BAR_WIDE, []

    def current() -> Layout:
        shown = [h for h in header if h not in hidden]
        widths = {h: max([measure(labels[h]), *(measure(r[header.index(h)]) for r in rows)]) for h in shown}
        return Layout(shown, dict(labels), widths, bar, list(hidden))

    for action, name in steps:
        if width is None or current().width <= width:
            break
        if action == "narrow":
            bar = BAR_NARROW
        elif action == "shorten":
            labels.update(zip(params, shortest_names(params)))
        else:
            hidden.append(name)
            bar = 0 if name == "budget" else bar
    return current()


def table(records: list[TrialRecord], plan: Plan, elapsed: float | None, state: str = "running", *,
          best: dict | None = None, age: float = 0.0, since_resume: bool = False, width: int | None = None):
    """The terminal view (a rich renderable): a title line, one row per running trial with a bar
    for the step of its budget, the best trial so far, steps and the ETA; at most `width` wide."""
    from rich.cells import cell_len
    from rich.console import Group
    from rich.progress_bar import ProgressBar
    from rich.table import Table
    from rich.text import Text

    p = progress(records, plan)
    parts = [Text(f"sweep {plan.name}", "bold"), Text(state), Text(f"elapsed {_elapsed(elapsed, since_resume)}"),
             Text(_eta(p, age, state), "bold cyan"), *([Text(f"{p.speed:.1f} steps/s per trial")] if p.speed is not None else [])]
    title = [parts[0]]  # the title's parts on as few lines as `width` allows, each part whole
    for part in parts[1:]:
        if width is None or cell_len(title[-1].plain) + 2 + cell_len(part.plain) <= width:
            title[-1] = Text.assemble(title[-1], "  ", part)
        else:
            title.append(part)
    header, rows = running_rows(records, plan)
    fit = layout(header, rows, plan.metric, width, cell_len)
    grid = Table(box=None, pad_edge=False, header_style="bold")
    for h in fit.columns:
        right = h not in ("trial", *header[1:header.index("step")])  # names left, numbers right
        grid.add_column(fit.labels[h], justify="right" if right else "left", width=fit.widths[h], no_wrap=True, overflow="fold")
        if h == "step" and fit.bar:
            grid.add_column("budget", width=fit.bar, no_wrap=True)
    steps = {r.trial_id: r.step for r in records}
    for row in rows:
        cells = []
        for h in fit.columns:
            cells.append(row[header.index(h)])
            if h == "step" and fit.bar:
                cells.append(ProgressBar(total=plan.max_steps, completed=steps[row[0]], width=fit.bar))
        grid.add_row(*cells)
    lines = [*title, Text(f"trials: {counts_line(records, plan.num_samples)}"),
             grid if rows else Text("(no trial running)")]
    if rows and fit.hidden:
        lines.append(Text(f"hidden to fit {width} columns: {', '.join(fit.hidden)}", style="dim"))
    lines += [Text(best_line(records, plan.metric, plan.mode, best)),
              Text(f"steps: {p.done:,} done, ~{p.left:,.0f} expected to go "
                   f"(ASHA rungs {', '.join(map(str, plan.rungs)) or 'none'}, 1/{plan.reduction_factor:g} pass each)")]
    return Group(*lines)


# -- following a sweep's status.json ----------------------------------------------------------


def plan_of(sweep_dir: Path) -> Plan:
    """The plan of a sweep from its directory (its space.yaml)."""
    from sweeper.space_file import load_space
    from sweeper.status import SPACE_FILE

    return Plan.from_space(load_space(Path(sweep_dir) / SPACE_FILE, n_samples=0))


def choose_view(view: str, out: TextIO) -> str:
    """auto: the table on a terminal, lines anywhere else."""
    if view != "auto":
        return view
    return "table" if getattr(out, "isatty", lambda: False)() else "lines"


def _number(value) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


@dataclass(frozen=True)
class Times:
    elapsed: float | None  # seconds the sweep has run (None: unknown)
    since_resume: bool  # elapsed counts only this launch, and the sweep ran before it
    age: float  # seconds since status.json was written, while the sweep runs (the ETA counts them down)


class LiveView:
    """Redraws the view of a sweep from its status.json: the table (redrawn every second) or a
    plain line every `every_s` seconds and whenever a trial starts or ends. A context manager
    around the sweep (`sweeper launch`: `driver=True`, its end is the sweep's end) or a loop of its
    own (`sweeper status --watch`). `clock` gives the wall-clock time (injectable for tests)."""

    def __init__(self, sweep_dir: Path, plan: Plan, view: str = "auto", every_s: float = 30.0,
                 out: TextIO | None = None, started: float | None = None, clock: Callable[[], float] = time.time,
                 driver: bool = True):
        self.sweep_dir, self.plan, self.every_s = Path(sweep_dir), plan, every_s
        self.out = out or sys.stdout
        self.view = choose_view(view, self.out)
        self.clock, self.driver = clock, driver
        self.started: float | None = clock() if started is None else started
        self.records: list[TrialRecord] = []
        self.status: dict = {}
        self.state = "running"
        self.final: str | None = None  # the state the last frame shows, once the sweep (or its driver) stopped
        self._resumed: bool | None = None  # whether trials had trained when this view first read status.json
        self._last_line, self._last_counts = 0.0, None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._live = None

    @classmethod
    def of_sweep(cls, sweep_dir: Path, every_s: float = 30.0, out: TextIO | None = None,
                 clock: Callable[[], float] = time.time) -> "LiveView":
        """`sweeper status --watch`: the view of a sweep from its directory alone."""
        view = cls(sweep_dir, plan_of(sweep_dir), "auto", every_s, out, clock=clock, driver=False)
        view.reload()
        view.started = _number(view.status.get("started"))  # None (unknown) in a status.json of an older version
        return view

    # -- what to draw --------------------------------------------------------------------------

    def times(self) -> Times:
        """Elapsed (the whole sweep's where status.json knows the earlier launches' time) and the
        age of the records, both from the clock now."""
        now, st = self.clock(), self.status
        updated = _number(st.get("updated"))
        running = self.state == "running" and self.final is None
        age = max(0.0, now - updated) if running and updated is not None else 0.0
        start = _number(st.get("launched"))
        start = self.started if start is None else start
        if start is None:
            return Times(None, False, age)
        ticking = running or (self.state == "running" and self.driver)  # the driver's last frame: up to now
        ran = max(0.0, (now if ticking or updated is None else updated) - start)
        before = _number(st.get("elapsed_before_s"))
        if before is not None:
            return Times(before + ran, False, age)
        trained_longer = any((_number(r.metrics.get("time_total_s")) or 0.0) > ran + 1.0 for r in self.records)
        return Times(ran, bool(self._resumed) or trained_longer, age)

    def elapsed(self) -> float | None:
        return self.times().elapsed

    def shown(self) -> tuple[str, list[TrialRecord]]:
        """The state and the records to draw. Once the driver's sweep stopped short, trials still
        marked running or pending are drawn as interrupted (nothing trains them any more)."""
        if self.final is None or self.final == "finished":
            return self.final or self.state, self.records
        return self.final, [replace(r, status="interrupted") if r.status in ("running", "pending") else r for r in self.records]

    def frame(self, width: int | None = None):
        """The table as drawn now (a rich renderable)."""
        t = self.times()
        state, records = self.shown()
        return table(records, self.plan, t.elapsed, state, best=self.status.get("best"), age=t.age,
                     since_resume=t.since_resume, width=width)

    def line(self) -> str:
        t = self.times()
        state, records = self.shown()
        return plain_line(records, self.plan, t.elapsed, best=self.status.get("best"), age=t.age, since_resume=t.since_resume,
                          state=state)

    # -- drawing -------------------------------------------------------------------------------

    def reload(self) -> None:
        try:
            self.status, self.records = load_records(self.sweep_dir)
            self.state = self.status.get("state", "running")
        except (ConfigError, OSError):  # not written yet
            return
        if self._resumed is None:
            self._resumed = self.driver and any(r.step > 0 for r in self.records)

    def tick(self, force: bool = False) -> None:
        """Reload the records and draw: the table always, a line when due."""
        self.reload()
        if self.view == "table" and self._live is not None:
            self._live.update(self.frame(self._live.console.width), refresh=True)
        elif self.view == "lines":
            counts = counts_line(self.records, self.plan.num_samples)
            now = self.clock()
            if force or counts != self._last_counts or now - self._last_line >= self.every_s:
                print(self.line(), file=self.out, flush=True)
                self._last_line, self._last_counts = now, counts

    def _loop(self) -> None:
        while not self._stop.wait(1.0):
            try:
                self.tick()
            except Exception as err:  # noqa: BLE001 - the view must never stop the sweep
                print(f"warning: live view stopped ({type(err).__name__}: {str(err)[:200]})", file=sys.stderr)
                return

    def _final_state(self, exc_type) -> str:
        """How the driver's sweep ended: finished only when every trial it asked for has ended."""
        from sweeper.records import FINAL

        if exc_type is not None and not issubclass(exc_type, (KeyboardInterrupt, SystemExit)):
            return "stopped by an error"
        done = len(self.records) >= self.plan.num_samples and all(r.status in FINAL for r in self.records)
        return "finished" if done and exc_type is None else "interrupted"

    def __enter__(self) -> "LiveView":
        self.reload()
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

    def __exit__(self, exc_type, *_) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if self.view == "none":
            return
        self.reload()
        if self.driver:
            self.final = self._final_state(exc_type)
        if self._live is not None:  # the last frame, drawn once: by stop()
            self._live.update(self.frame(self._live.console.width), refresh=False)
            self._live.stop()
        elif self.view == "lines":
            print(self.line(), file=self.out, flush=True)

    def watch(self) -> int:
        """`sweeper status --watch`: redraw until the sweep is no longer running (or Ctrl-C)."""
        from sweeper.status import driver_alive

        with self:
            try:
                while self.state == "running" and driver_alive(self.status) and not self._stop.wait(1.0):
                    pass
                if self.state == "running" and not driver_alive(self.status):
                    self.final = "interrupted (its driver is gone)"
            except KeyboardInterrupt:
                pass
        return 0
