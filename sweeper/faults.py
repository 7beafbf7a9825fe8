"""Faults on cue: the sweep's driver kills itself at a named point, deterministically.

    SWEEPER_FAULT=EVENT:COUNT:SIGNAL      e.g. SWEEPER_FAULT=report:3:KILL

On the COUNT-th time a sweep passes `Faults.point(EVENT)` it sends itself SIGNAL (KILL,
INT or TERM), as a user's Ctrl-C, a `kill`, or the OOM killer would; STOP freezes it there
(a driver that holds its sweep's lock and does nothing, for tests of what runs beside it). Unset, a fault point costs
one dict lookup. The events, where the driver calls them:

    verdict     ASHA decided to stop a trial at a rung (the ledger has `stopped_at`); Ray has not
                acted on it, the views have not heard of it        (ray_search.LedgerASHA)
    report      a trial's report reached the driver: the ledger has it, the views (MLflow,
                status.json) not yet                                (ray_search.LedgerSearcher)
    logged      the report is queued for MLflow, status.json not yet written   (status.SweepViews)
    state_write inside a write of a view file (status.json, summary.json): the new content is
                on disk beside the old, not yet in place          (core/files.write_atomic)
    stop        the scheduler stopped a trial: the ledger has it PRUNED, nothing else yet
    end         a trial ended otherwise (completed, diverged, failed): the ledger has it, the
                views not yet                                       (ray_search.LedgerSearcher)
    finish      the sweep's end: summary.json written, the MLflow parent not yet closed (launch)

tests/faults/ runs each with each signal and relaunches the same command; docs/reliability.md
lists what that found.
"""

from __future__ import annotations

import os
import signal
from typing import Mapping

ENV = "SWEEPER_FAULT"
EVENTS = ("verdict", "report", "logged", "state_write", "stop", "end", "finish")
SIGNALS = {"KILL": signal.SIGKILL, "INT": signal.SIGINT, "TERM": signal.SIGTERM, "STOP": signal.SIGSTOP}


def parse(value: str) -> dict[str, tuple[int, signal.Signals]]:
    """`EVENT:COUNT:SIGNAL` -> {event: (count, signal)}; a bad value is one ValueError line."""
    parts = value.split(":")
    rule = f"${ENV} must be EVENT:COUNT:SIGNAL with EVENT in {', '.join(EVENTS)}, COUNT >= 1, SIGNAL in {', '.join(SIGNALS)}"
    count = parts[1] if len(parts) == 3 else ""
    whole = count.isascii() and count.isdigit() and len(count) <= 9  # int() would take other scripts' digits
    if len(parts) != 3 or parts[0] not in EVENTS or not whole or int(count) < 1 or parts[2] not in SIGNALS:
        raise ValueError(f"{rule}, but got {value[:60]!r}")
    return {parts[0]: (int(parts[1]), SIGNALS[parts[2]])}


class Faults:
    """One sweep's cues and how often each point was passed (a sweep of its own: the service arms
    one per sweep, from its own environment)."""

    def __init__(self, cues: dict[str, tuple[int, signal.Signals]] | None = None):
        self.cues = dict(cues or {})
        self.hits: dict[str, int] = {}

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> "Faults":
        """The cues of $SWEEPER_FAULT (none when unset); a bad value raises ConfigError."""
        from core.errors import ConfigError

        value = (os.environ if environ is None else environ).get(ENV)
        try:
            return cls(parse(value) if value else None)
        except ValueError as err:
            raise ConfigError(str(err)) from None

    def point(self, event: str) -> None:
        """Send the cued signal to this process on the cued pass of `event`; otherwise nothing."""
        cue = self.cues.get(event)
        if cue is None:
            return
        self.hits[event] = self.hits.get(event, 0) + 1
        if self.hits[event] == cue[0]:
            os.kill(os.getpid(), cue[1])
