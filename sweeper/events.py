"""What a sweep says while it runs, as events its caller shows as it sees fit.

A sweep (sweeper/sweep.py) never prints: each thing it has to say is an event handed to the sink
its caller passed. `sweeper launch` in its own process shows them on the terminal
(sweeper/live_events.py); the resident service sends them to the attached launch, which shows them
the same way. Stdlib only.

    Say(text, level)     a line: `info` to stdout; `note` and `warning` to stderr
    Running(sweep_dir)   the trials start: the live view draws from the sweep's folder from now on
    Fitted()             the trials have stopped: the live view ends; the summary follows
    TopTrials(sweep_dir) the final table of the best trials: drawn from the sweep's status.json at
                         the width of whatever shows it
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Literal, Union

Level = Literal["info", "note", "warning"]


@dataclass(frozen=True)
class Say:
    text: str
    level: Level = "info"


@dataclass(frozen=True)
class Running:
    sweep_dir: Path


@dataclass(frozen=True)
class Fitted:
    pass


@dataclass(frozen=True)
class TopTrials:
    sweep_dir: Path


Event = Union[Say, Running, Fitted, TopTrials]
Sink = Callable[[Event], None]


class Speaker:
    """A sweep's voice: `info`, `note` and `warning` lines to its sink (from any of its threads)."""

    def __init__(self, sink: Sink):
        self.sink = sink

    def __call__(self, event: Event) -> None:
        self.sink(event)

    def __reduce__(self):  # Ray Tune pickles its searcher and callbacks, which hold the views: a copy is silent
        return (Speaker, (discard,))

    def info(self, text: str) -> None:
        self.sink(Say(text, "info"))

    def note(self, text: str) -> None:
        self.sink(Say(text, "note"))

    def warning(self, text: str) -> None:
        self.sink(Say(text, "warning"))


def discard(event: Event) -> None:
    """A sink that shows nothing (a library caller that reads the sweep's folder instead)."""
