"""The live view of a sweep: follows its status.json and redraws the table (live_table.py) on a
terminal, or a plain line anywhere else, with an ETA.

    trial records (from the running sweep's status.json, or `sweeper status NAME --watch`)
      + Plan (the budget and ASHA's rungs, from the search space) + the wall clock
      -> Progress (sweeper/eta.py)  ->  plain_line / table (sweeper/live_table.py)

Time: elapsed is the whole sweep's, across launches (status.json's `elapsed_before_s` plus this
launch's time); a status.json without it gives only the time since the launch, and where the sweep
is known to have run before (trials that trained before this launch, or longer than it has run)
the view says "since resume". Both are recomputed from the clock at every redraw (every second).

Best: status.json's `best` (the best value ASHA judged, at a rung or a trial's end: it never goes
down) when present, else the best trial's latest value.
"""

from __future__ import annotations

import sys
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, TextIO

from sweeper.eta import Plan
from sweeper.live_table import plain_line, table
from sweeper.records import TrialRecord
from sweeper.status import STATUS_FILE, counts_line, finite, launch_speed, load_records
from core.errors import ConfigError


# -- following a sweep's status.json ----------------------------------------------------------


def plan_of(sweep_dir: Path) -> Plan:
    """The plan of a sweep from its directory (its space.yaml)."""
    from sweeper.space_file import load_saved_space

    return Plan.from_space(load_saved_space(sweep_dir, n_samples=0))


def choose_view(view: str, out: TextIO) -> str:
    """auto: the table on a terminal, lines anywhere else."""
    if view != "auto":
        return view
    return "table" if getattr(out, "isatty", lambda: False)() else "lines"


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
        self._width: int | None = None  # the terminal's columns at the last frame
        self.damaged: ConfigError | None = None  # why the last read of an existing status.json failed

    @classmethod
    def of_sweep(cls, sweep_dir: Path, every_s: float = 30.0, out: TextIO | None = None,
                 clock: Callable[[], float] = time.time) -> "LiveView":
        """`sweeper status --watch`: the view of a sweep from its directory alone."""
        view = cls(sweep_dir, plan_of(sweep_dir), "auto", every_s, out, clock=clock, driver=False)
        view.reload()
        view.started = finite(view.status.get("started"))  # None (unknown) in a status.json of an older version
        return view

    # -- what to draw --------------------------------------------------------------------------

    def times(self) -> Times:
        """Elapsed (the whole sweep's where status.json knows the earlier launches' time) and the
        age of the records, both from the clock now."""
        now, st = self.clock(), self.status
        updated = finite(st.get("updated"))
        running = self.state == "running" and self.final is None
        age = max(0.0, now - updated) if running and updated is not None else 0.0
        start = finite(st.get("launched"))
        start = self.started if start is None else start
        if start is None:
            return Times(None, False, age)
        ticking = running or (self.state == "running" and self.driver)  # the driver's last frame: up to now
        ran = max(0.0, (now if ticking or updated is None else updated) - start)
        before = finite(st.get("elapsed_before_s"))
        if before is not None:
            return Times(before + ran, False, age)
        trained_longer = any((finite(r.metrics.get("time_total_s")) or 0.0) > ran + 1.0 for r in self.records)
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
        return table(records, self.plan, t.elapsed, state, best=self.status.get("best"), speed=launch_speed(self.status),
                     age=t.age, since_resume=t.since_resume, width=width)

    def line(self) -> str:
        t = self.times()
        state, records = self.shown()
        return plain_line(records, self.plan, t.elapsed, best=self.status.get("best"), speed=launch_speed(self.status),
                          age=t.age, since_resume=t.since_resume, state=state)

    # -- drawing -------------------------------------------------------------------------------

    def reload(self) -> None:
        try:
            self.status, self.records = load_records(self.sweep_dir)
            self.state = self.status.get("state", "running")
        except (ConfigError, OSError) as err:  # not written yet, or (a file written whole, atomically) damaged
            self.damaged = err if isinstance(err, ConfigError) and (self.sweep_dir / STATUS_FILE).exists() else None
            return
        self.damaged = None
        if self._resumed is None:
            self._resumed = self.driver and any(r.step > 0 for r in self.records)

    def tick(self, force: bool = False) -> None:
        """Reload the records and draw: the table always, a line when due."""
        self.reload()
        if self.view == "table" and self._live is not None:
            width = self._live.console.width
            if self._width is not None and width != self._width:
                self._live.console.clear()  # a resize rewraps the frame drawn: redraw on a clean screen, no stale piece
            self._width = width
            self._live.update(self.frame(width), refresh=True)
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
            from rich.live import Live

            self._live = Live(console=table_console(self.out), auto_refresh=False, transient=False,
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
                while (self.state == "running" and self.damaged is None and driver_alive(self.status)
                       and not self._stop.wait(1.0)):
                    pass
                if self.state == "running" and self.damaged is None and not driver_alive(self.status):
                    self.final = "interrupted (its driver is gone)"
            except KeyboardInterrupt:
                pass
        if self.damaged is not None:  # damaged while watched: said as a watch's start says it, not redrawn for ever
            raise self.damaged
        return 0


def table_console(out):
    """rich's console on `out`, at least 40 columns wide, as `sweeper status` draws (COLUMNS=0 drew
    nothing, COLUMNS=1 a character a line)."""
    from rich.console import Console

    console = Console(file=out)
    return console if console.width >= 40 else Console(file=out, width=40)
