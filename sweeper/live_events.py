"""A sweep's events on this process's terminal (sweeper/events.py).

Lines go to stdout (`info`) or stderr (`note`, `warning`) as they come; between `Running` and
`Fitted` the live view (sweeper/live.py) draws the sweep from its folder. `sweeper launch` uses it
for a sweep in its own process, and for one on the service, whose events reach it over the socket.
"""

from __future__ import annotations

import sys
from typing import TextIO

from sweeper.events import Event, Fitted, Running, Say


class Terminal:
    """The sink of a sweep whose progress this terminal shows (`progress`: auto, table, lines or none)."""

    def __init__(self, progress: str = "auto", every_s: float = 30.0, out: TextIO | None = None,
                 err: TextIO | None = None):
        self.progress, self.every_s = progress, every_s
        self.out, self.err = out or sys.stdout, err or sys.stderr
        self.view = None

    def __call__(self, event: Event) -> None:
        if isinstance(event, Say):
            print(event.text, file=self.out if event.level == "info" else self.err, flush=True)
        elif isinstance(event, Running) and self.view is None and self.progress != "none":
            from sweeper import live

            self.view = live.LiveView(event.sweep_dir, live.plan_of(event.sweep_dir), self.progress, self.every_s, self.out)
            self.view.__enter__()
        elif isinstance(event, Fitted):
            self.close()

    def close(self) -> None:
        """The live view ends (its last frame drawn); lines after it print below."""
        if self.view is not None:
            view, self.view = self.view, None
            view.__exit__(None, None, None)

    def __enter__(self) -> "Terminal":
        return self

    def __exit__(self, *exc) -> None:
        self.close()
