"""A sweep's status files and their lines: status.json read and written, summary.json, counts,
the best value, tables (the views that keep them current are in sweeper/views.py).

Files in the sweep directory (`sweeps/<name>/` by default):
    space.yaml     the search-space file the sweep was started from
    status.json    every trial's record, rewritten atomically while the sweep runs
    summary.json   at the end: the best trial, its config and score, all trial records
"""

from __future__ import annotations

import csv
import io
import json
import math
import os
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from sweeper.fs import read_json_limited
from sweeper.records import TrialRecord, is_per_length, length_metrics, ranked, score, shortest_names
from core.files import write_atomic
from core.errors import ConfigError, brief, cut

STATUS_FILE, SUMMARY_FILE = "status.json", "summary.json"
MAX_STATE_BYTES = 64 * 2**20  # status.json and summary.json: ~2 KB a trial, 30,000 trials
MAX_CELL = 40  # characters of a table cell: a name or value from a file never makes a line unbounded
ORDER = ("running", "pending", "interrupted", "completed", "stopped", "diverged", "failed")


def write_json_atomic(path: Path, data: dict, between: Callable[[], None] | None = None) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str), between)


def read_json(path: Path) -> dict:
    """A JSON state file, read under MAX_STATE_BYTES; unreadable, too large, nested too deep or cut
    (a kill mid-write of an older version) is one ConfigError line."""
    try:
        data = read_json_limited(path, "state file", MAX_STATE_BYTES, str(path))
    except ConfigError as err:
        raise ConfigError(f"{err}; move it away to rebuild it from the sweep") from None
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: not a sweep state file (a JSON object was expected)")
    return data


def counts_line(records: list[TrialRecord], num_samples: int) -> str:
    c = Counter(r.status for r in records)
    parts = [f"{c[s]} {s}" for s in ORDER if c[s]]
    not_started = max(0, num_samples - len(records))
    if not_started:
        parts.append(f"{not_started} to sample")
    return ", ".join(parts) or "no trials yet"


def best_line(records: list[TrialRecord], metric: str, mode: str, best: dict | None = None) -> str:
    """The best value judged so far (status.json's `best`: at a rung or at a trial's end, so it never
    goes down); before anything was judged, the leading trial's latest value, called that."""
    if isinstance(best, dict) and (value := finite(best.get("value"))) is not None:
        return (f"best {cut(metric, MAX_CELL)} {number(value)} ({_fmt(best.get('trial_id', '?'))}, "
                f"step {_fmt(best.get('step', '?'))})")
    top = ranked(records, metric, mode)
    if not top:
        return f"best {cut(metric, MAX_CELL)}: -"
    b = top[0]
    return (f"best {cut(metric, MAX_CELL)}: none judged yet ({_fmt(b.trial_id)} leads with {number(score(b, metric))} "
            f"at step {_fmt(b.step)})")


def mark_state(sweep_dir: Path, state: str) -> None:
    """Set the sweep-level state in status.json (finished, interrupted)."""
    path = Path(sweep_dir) / STATUS_FILE
    if path.exists():
        write_json_atomic(path, {**read_json(path), "state": state, "updated": time.time()})


STATES = ("running", "interrupted", "finished")
MAX_SAMPLES = 1_000_000  # trials a sweep can hold (as a space file allows)
HEAD = {"name": str, "metric": str, "mode": str, "state": str, "updated": (int, float), "num_samples": int,
        "trials": list}  # the fields of status.json a view reads, and their kinds


def load_records(sweep_dir: Path) -> tuple[dict, list[TrialRecord]]:
    """status.json, every field a view reads checked before use; one ConfigError line otherwise."""
    path = Path(sweep_dir) / STATUS_FILE
    data = read_json(path)
    try:
        for key, kind in HEAD.items():
            if key not in data:
                raise ValueError(f"{key}: missing")
            if not isinstance(data[key], kind) or isinstance(data[key], bool):
                raise ValueError(f"{key}: must be a {getattr(kind, '__name__', 'number')}, got {brief(data[key], 30)}")
        if not 0 <= data["num_samples"] <= MAX_SAMPLES:
            raise ValueError(f"num_samples: must be within [0, {MAX_SAMPLES:,}], got {brief(data['num_samples'], 30)}")
        if finite(data["updated"]) is None:
            raise ValueError(f"updated: must be a time in seconds, got {brief(data['updated'], 30)}")
        if data["state"] not in STATES or data["mode"] not in ("max", "min"):
            raise ValueError(f"state/mode: not one of {STATES} / (max, min)")
        check_driver(data.get("driver", {"host": ""}))
        records = [TrialRecord.from_dict(t) for t in data["trials"]]
        check_best(data.get("best"), records)
        return data, records
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ConfigError(f"{path}: not a sweep status file ({cut(str(err), 100)}); move it away to rebuild it") from None


def check_best(best, records: list[TrialRecord]) -> None:
    """status.json's `best`: None, or a value no finite number (left out by the views: none judged
    yet), or a finite value at a whole step of one of the file's trials, no further than that trial
    trained; a ValueError otherwise, never a best no trial reached shown as the sweep's."""
    if best is None:
        return
    if not isinstance(best, dict):
        raise ValueError(f"best: must be a mapping of trial_id, step and value, got {brief(best, 30)}")
    if finite(best.get("value")) is None:
        return
    trial = next((r for r in records if r.trial_id == best.get("trial_id")), None)
    if trial is None:
        raise ValueError(f"best.trial_id: {brief(best.get('trial_id'), 30)} is no trial of the file")
    step = best.get("step")
    if not (isinstance(step, int) and not isinstance(step, bool) and 0 <= step <= trial.step):
        raise ValueError(f"best.step: must be a step {trial.trial_id} reached (0 to {trial.step}), got {brief(step, 30)}")


def check_driver(driver) -> None:
    """status.json's `driver` (`driver_record`): a mapping of a host name, a pid and a start time
    (or none); a ValueError otherwise, never a record read as some other process."""
    if not isinstance(driver, dict) or not isinstance(driver.get("host"), str):
        raise ValueError(f"driver: must be a mapping with a host name, got {brief(driver, 30)}")
    pid, started = driver.get("pid"), driver.get("started")
    if driver["host"] and a_pid(pid) is None:
        raise ValueError(f"driver.pid: must be a process id, got {brief(pid, 30)}")
    if started is not None and finite(started) is None:
        raise ValueError(f"driver.started: must be a time in seconds, got {brief(started, 30)}")


def a_pid(value) -> int | None:
    """`value` if it can be a process id (any positive pid_t: what a file or an answer says a pid is),
    else None. A pid above the system's pid_max is well-formed and names no process."""
    return value if isinstance(value, int) and not isinstance(value, bool) and 0 < value < 2**31 else None


def launch_speed(status: dict) -> float | None:
    """The speed of one trial in the driver's launch (status.json's `trial_speed`), when it is a
    finite number (`eta.plausible` judges whether a trial could train at it)."""
    return finite(status.get("trial_speed"))


def finite(value) -> float | None:
    """A number read from a file as a float, when it is one and finite (an integer of 400 digits is not)."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    try:
        value = float(value)
    except OverflowError:
        return None
    return value if math.isfinite(value) else None


def driver_alive(status: dict) -> bool:
    """Whether the process that writes status.json still runs (only knowable on its host): its pid,
    and the start time recorded with it (`driver_record`), so a pid reused by another process is not it.
    A record without a start time (an older file): a process that started after the file's last
    write cannot have written it."""
    driver = status.get("driver")
    driver = driver if isinstance(driver, dict) else {}
    if driver.get("host") != socket.gethostname():
        return True
    import psutil

    try:
        started = psutil.Process(int(driver.get("pid", -1))).create_time()
    except (psutil.Error, ValueError, TypeError, OverflowError):
        return False
    recorded = driver.get("started")
    if isinstance(recorded, (int, float)):
        return abs(started - recorded) < 0.01
    updated = status.get("updated")
    return not isinstance(updated, (int, float)) or started <= updated


def driver_record() -> dict:
    """This process as status.json names its driver: host, pid and start time."""
    import psutil

    return {"host": socket.gethostname(), "pid": os.getpid(), "started": psutil.Process().create_time()}


def format_table(records: list[TrialRecord], metric: str, mode: str, top: int = 10, width: int | None = None) -> str:
    """The top trials: params, the scored metric at each length, steps used, status; at most `width`
    characters a line. When too wide it gives up, in this order, until it fits: parameter names
    shorten to their shortest distinct dotted tail; the accuracies at the other lengths (1x, 2x,
    4x); status; steps; the parameters, the last first. The trial and the scored metric always stay;
    a last line names what was hidden."""
    rows = ranked(records, metric, mode)[:top]
    if not rows:
        return "(no trial has reported yet)"
    lengths = length_metrics(metric)
    param_keys = sorted({k for r in rows for k in r.params})
    keys = ["trial", *(f"p:{k}" for k in param_keys), *lengths, "steps", "status"]
    labels = {"trial": "trial", **{f"p:{k}": _fmt(k) for k in param_keys}, **{m: m for m in lengths}, "steps": "steps",
              "status": "status"}
    cells = {"trial": [_fmt(r.trial_id) for r in rows], "steps": [_fmt(r.step) for r in rows],
             "status": [r.status for r in rows], **{m: [_fmt(r.metrics.get(m, "")) for r in rows] for m in lengths},
             **{f"p:{k}": [_fmt(r.params.get(k, "")) for r in rows] for k in param_keys}}
    drops = [*(m for m in lengths if m != metric), "status", "steps", *(f"p:{k}" for k in reversed(param_keys))]
    hidden: list[str] = []

    def column(k: str) -> int:
        return max(len(labels[k]), *(len(c) for c in cells[k]))

    total = sum(map(column, keys)) + 2 * (len(keys) - 1)  # kept as columns go, so fitting is linear in their number
    shown = set(keys)
    if width is not None and total > width:
        labels.update(zip((f"p:{k}" for k in param_keys), (cut(n, MAX_CELL) for n in shortest_names(param_keys))))
        total = sum(map(column, keys)) + 2 * (len(keys) - 1)
        for key in drops:
            if total <= width:
                break
            shown.discard(key)
            hidden.append(labels[key])
            total -= column(key) + 2
    shown = [k for k in keys if k in shown]
    widths = [column(k) for k in shown]
    line = lambda row: "  ".join(c.ljust(w) for c, w in zip(row, widths)).rstrip()  # noqa: E731
    out = [line([labels[k] for k in shown]), line(["-" * w for w in widths])]
    out += [line([cells[k][i] for k in shown]) for i in range(len(rows))]
    if hidden:
        out.append(cut(f"hidden to fit {width} columns: {', '.join(hidden)}", width))
    return "\n".join(out)


def number(value) -> str:
    """A value read from a file, in at most ~12 characters: 3 decimals, or 4 significant digits
    when very small or large (a float of 1e308 has 309 digits before its point); "-" for no number."""
    if (v := finite(value)) is None:
        return "-"
    return f"{v:.4g}" if (abs(v) < 1e-2 and v != 0) or abs(v) >= 1e6 else f"{v:.3f}"


def _fmt(v) -> str:
    if isinstance(v, float):
        return number(v)
    return cut(v, MAX_CELL) if isinstance(v, str) else brief(v, MAX_CELL)


def write_summary(sweep_dir: Path, name: str, metric: str, mode: str, records: list[TrialRecord], best: dict | None,
                  best_config: dict | None, between: Callable[[], None] | None = None) -> dict:
    """summary.json. `best`: the sweep's best judged value (sweeper.views.SweepViews.best: at a rung
    or at a trial's end), the one every view shows; its trial's latest value and step beside it."""
    trial = next((r for r in records if isinstance(best, dict) and r.trial_id == best.get("trial_id")), None)
    summary = {
        "name": name, "metric": metric, "mode": mode,
        "best": None if trial is None else {
            "trial_id": trial.trial_id, "score": best["value"], "step": best["step"], "params": trial.params,
            "status": trial.status, "latest": score(trial, metric), "latest_step": trial.step, "config": best_config,
        },
        "counts": dict(Counter(r.status for r in records)),
        "trials": [r.to_dict() for r in records],
    }
    write_json_atomic(Path(sweep_dir) / SUMMARY_FILE, summary, between)
    return summary


def summary_csv(records: list[TrialRecord]) -> str:
    """Every trial as one CSV row: id, status, step, its parameters and its per-length metrics."""
    params = sorted({k for r in records for k in r.params})
    metrics = sorted({k for r in records for k in r.metrics if is_per_length(k)})
    buf = io.StringIO()
    writer = csv.writer(buf)
    writer.writerow(["trial_id", "status", "step", *params, *metrics])
    for r in records:
        writer.writerow([r.trial_id, r.status, r.step, *(r.params.get(p, "") for p in params), *(r.metrics.get(m, "") for m in metrics)])
    return buf.getvalue()
