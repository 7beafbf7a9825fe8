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
import os
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Callable

from sweeper.fs import read_json_limited
from sweeper.records import TrialRecord, is_per_length, length_metrics, ranked, score
from core.files import write_atomic
from core.errors import ConfigError, brief, cut

STATUS_FILE, SUMMARY_FILE, SPACE_FILE = "status.json", "summary.json", "space.yaml"
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
    """The best judged value (status.json's `best`: at a rung or an end, never going down) when
    known, else the best trial's latest value."""
    if isinstance(best, dict) and isinstance(best.get("value"), (int, float)):
        return (f"best {cut(metric, MAX_CELL)} {best['value']:.3f} ({_fmt(best.get('trial_id', '?'))}, "
                f"step {_fmt(best.get('step', '?'))})")
    top = ranked(records, metric, mode)
    if not top:
        return f"best {cut(metric, MAX_CELL)}: -"
    b = top[0]
    return f"best {cut(metric, MAX_CELL)} {score(b, metric):.3f} ({_fmt(b.trial_id)}, step {_fmt(b.step)})"


def mark_state(sweep_dir: Path, state: str) -> None:
    """Set the sweep-level state in status.json (finished, interrupted)."""
    path = Path(sweep_dir) / STATUS_FILE
    if path.exists():
        write_json_atomic(path, {**read_json(path), "state": state, "updated": time.time()})


STATES = ("running", "interrupted", "finished")
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
        if data["state"] not in STATES or data["mode"] not in ("max", "min"):
            raise ValueError(f"state/mode: not one of {STATES} / (max, min)")
        return data, [TrialRecord.from_dict(t) for t in data["trials"]]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ConfigError(f"{path}: not a sweep status file ({cut(str(err), 100)}); move it away to rebuild it") from None


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


def format_table(records: list[TrialRecord], metric: str, mode: str, top: int = 10) -> str:
    """The top trials: params, the scored metric at each length, steps used, status."""
    rows = ranked(records, metric, mode)[:top]
    if not rows:
        return "(no trial has reported yet)"
    lengths = length_metrics(metric)
    param_keys = sorted({k for r in rows for k in r.params})
    header = ["trial", *(_fmt(k) for k in param_keys), *lengths, "steps", "status"]
    body = []
    for r in rows:
        params = [_fmt(r.params.get(k, "")) for k in param_keys]
        accs = [_fmt(r.metrics.get(m, "")) for m in lengths]
        body.append([_fmt(r.trial_id), *params, *accs, _fmt(r.step), r.status])
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e-2 and v != 0 else f"{v:.3f}"
    return cut(v, MAX_CELL) if isinstance(v, str) else brief(v, MAX_CELL)


def write_summary(sweep_dir: Path, name: str, metric: str, mode: str, records: list[TrialRecord], best_config: dict | None,
                  between: Callable[[], None] | None = None) -> dict:
    top = ranked(records, metric, mode)
    best = top[0] if top else None
    summary = {
        "name": name, "metric": metric, "mode": mode,
        "best": None if best is None else {
            "trial_id": best.trial_id, "score": score(best, metric), "params": best.params,
            "status": best.status, "step": best.step, "config": best_config,
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
