"""Faults on cue: the sweep's driver kills itself at a named point, deterministically.

    SWEEPER_FAULT=EVENT:COUNT:SIGNAL      e.g. SWEEPER_FAULT=report:3:KILL

On the COUNT-th time this process passes `fault_point(EVENT)` it sends itself SIGNAL (KILL,
INT or TERM), as a user's Ctrl-C, a `kill`, or the OOM killer would. Unset, a fault point costs
one dict lookup. The events, where the driver calls them:

    verdict     ASHA decided to stop a trial at a rung and saved it (asha.pkl); Ray has not acted on
                it, the study, MLflow and status.json have not heard of it  (ray_tune.ResumableASHA)
    report      a trial's report reached the driver: the scheduler and the study have it,
                our listener (MLflow, status.json) not yet            (ray_tune.SweepMonitor)
    logged      the report is logged to MLflow, status.json not yet written    (SweepMonitor)
    checkpoint  a trial's checkpoint reached the driver, before Ray records it in the
                experiment snapshot                                             (SweepMonitor)
    state_write inside a write of a state file (status.json, mlflow_runs.json, summary.json):
                the new content is on disk beside the old, not yet in place (status.write_json_atomic)
    stop        the scheduler stopped a trial: the study has PRUNED, nothing else yet (SweepMonitor)
    end         a trial ended otherwise (completed, diverged, failed), nothing recorded yet (SweepMonitor)
    finish      the sweep's end: summary.json written, the MLflow parent not yet closed (launch)

tests/faults/ runs each with each signal and relaunches the same command; docs/reliability.md
lists what that found.
"""

from __future__ import annotations

import os
import signal

ENV = "SWEEPER_FAULT"
EVENTS = ("verdict", "report", "logged", "checkpoint", "state_write", "stop", "end", "finish")
SIGNALS = {"KILL": signal.SIGKILL, "INT": signal.SIGINT, "TERM": signal.SIGTERM}


def parse(value: str) -> dict[str, tuple[int, signal.Signals]]:
    """`EVENT:COUNT:SIGNAL` -> {event: (count, signal)}; a bad value is one ValueError line."""
    parts = value.split(":")
    rule = f"${ENV} must be EVENT:COUNT:SIGNAL with EVENT in {', '.join(EVENTS)}, COUNT >= 1, SIGNAL in KILL, INT, TERM"
    if len(parts) != 3 or parts[0] not in EVENTS or not parts[1].isdigit() or int(parts[1]) < 1 or parts[2] not in SIGNALS:
        raise ValueError(f"{rule}, but got {value[:60]!r}")
    return {parts[0]: (int(parts[1]), SIGNALS[parts[2]])}


_cues: dict[str, tuple[int, signal.Signals]] = {}
_hits: dict[str, int] = {}


def arm() -> None:
    """Read $SWEEPER_FAULT (the driver calls this once, at launch); a bad value raises ConfigError."""
    from trainables.errors import ConfigError

    _cues.clear()
    _hits.clear()
    value = os.environ.get(ENV)
    if value:
        try:
            _cues.update(parse(value))
        except ValueError as err:
            raise ConfigError(str(err)) from None


def fault_point(event: str) -> None:
    """Send the cued signal to this process on the cued pass of `event`; otherwise nothing."""
    cue = _cues.get(event)
    if cue is None:
        return
    _hits[event] = _hits.get(event, 0) + 1
    if _hits[event] == cue[0]:
        os.kill(os.getpid(), cue[1])
