"""A sweep's state on disk and on the terminal: status.json, summary.json, progress, tables.

Files in the sweep directory (`sweeps/<name>/` by default):
    space.yaml     the search-space file the sweep was started from
    status.json    every trial's record, rewritten atomically while the sweep runs
    summary.json   at the end: the best trial, its config and score, all trial records
"""

from __future__ import annotations

import json
import os
import socket
import sys
import time
from collections import Counter
from pathlib import Path
from typing import TextIO

from sweeper.faults import fault_point
from sweeper.records import TrialRecord, length_family, ranked, score
from trainables.errors import ConfigError, cut

STATUS_FILE, SUMMARY_FILE, SPACE_FILE = "status.json", "summary.json", "space.yaml"
ORDER = ("running", "pending", "interrupted", "completed", "stopped", "diverged", "failed")


def write_json_atomic(path: Path, data: dict) -> None:
    write_text_atomic(path, json.dumps(data, indent=2, default=str))


def write_text_atomic(path: Path, text: str) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    fault_point("state_write")
    os.replace(tmp, path)


def read_json(path: Path) -> dict:
    """A JSON state file; unreadable or cut (a kill mid-write of an older version) is one ConfigError line."""
    try:
        data = json.loads(Path(path).read_text())
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise ConfigError(f"{path}: unreadable ({cut(str(err), 100)}); move it away to rebuild it from the sweep") from None
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


def best_line(records: list[TrialRecord], metric: str, mode: str) -> str:
    top = ranked(records, metric, mode)
    if not top:
        return f"best {metric}: -"
    b = top[0]
    return f"best {metric} {score(b, metric):.3f} ({b.trial_id}, step {b.step})"


class SweepListener:
    """Receives trial records from the driver: keeps status.json current (which the live view,
    sweeper/live.py, draws from) and hands each report to the tracker.
    Picklable: Ray stores it with the experiment and brings it back on resume."""

    def __init__(self, sweep_dir: Path, name: str, metric: str, mode: str, num_samples: int, tracker=None):
        self.sweep_dir, self.name, self.metric, self.mode = Path(sweep_dir), name, metric, mode
        self.num_samples = num_samples
        self.tracker = tracker  # SweepTracker or None
        self.reset()

    def __getstate__(self) -> dict:  # Ray pickles the listener with the experiment: not the JSON cache
        return {k: v for k, v in self.__dict__.items() if k != "_json"}

    def on_result(self, record: TrialRecord) -> None:
        self._track("on_result", record)

    def on_end(self, record: TrialRecord) -> None:
        self._track("on_end", record)

    def _track(self, method: str, record: TrialRecord) -> None:
        """Tracking trouble (a server gone mid-sweep) is reported, never allowed to stop the sweep."""
        if self.tracker is None:
            return
        try:
            getattr(self.tracker, method)(record)
        except Exception as err:  # noqa: BLE001
            if not self.tracking_failed:
                print(f"warning: MLflow tracking failed ({type(err).__name__}: {str(err)[:200]}); "
                      "the sweep goes on, status.json stays current", file=sys.stderr, flush=True)
            self.tracking_failed = True

    def reset(self) -> None:
        """At the start of the sweep, and again on each resume."""
        self.started = time.time()
        self.records: list[TrialRecord] = []
        self.tracking_failed = False

    def final_statuses(self) -> dict[str, str]:
        """Trials an earlier run of this sweep saw end (status.json), by id: they stay ended."""
        from sweeper.records import FINAL

        try:
            _, records = load_records(self.sweep_dir)
        except (ConfigError, OSError):
            return {}
        return {r.trial_id: r.status for r in records if r.status in FINAL}

    def __call__(self, records: list[TrialRecord], final: bool) -> None:
        self.records = records
        self.write_status("finished" if final else "running")

    def write_status(self, state: str) -> None:
        """status.json, atomically. Each trial's JSON is made once per change of its record (a
        sweep of N trials rewrites N entries per event otherwise), then joined."""
        head = json.dumps({
            "name": self.name, "metric": self.metric, "mode": self.mode, "num_samples": self.num_samples,
            "state": state, "started": self.started, "updated": time.time(),
            "driver": {"host": socket.gethostname(), "pid": os.getpid()},
        }, indent=2, default=str)
        cache = self.__dict__.setdefault("_json", {})
        trials = []
        for r in self.records:
            key = (r.status, r.step, r.path, len(r.metrics))
            hit = cache.get(r.trial_id)
            if hit is None or hit[0] != key:
                hit = cache[r.trial_id] = (key, json.dumps(r.to_dict(), default=str))
            trials.append(hit[1])
        write_text_atomic(self.sweep_dir / STATUS_FILE, head[:-2] + ',\n  "trials": [' + ", ".join(trials) + "]\n}")


def mark_state(sweep_dir: Path, state: str) -> None:
    """Set the sweep-level state in status.json (finished, interrupted)."""
    path = Path(sweep_dir) / STATUS_FILE
    if path.exists():
        write_json_atomic(path, {**read_json(path), "state": state, "updated": time.time()})


def load_records(sweep_dir: Path) -> tuple[dict, list[TrialRecord]]:
    path = Path(sweep_dir) / STATUS_FILE
    data = read_json(path)
    try:
        return data, [TrialRecord.from_dict(t) for t in data["trials"]]
    except (KeyError, TypeError, ValueError, AttributeError) as err:
        raise ConfigError(f"{path}: not a sweep status file ({cut(repr(err), 80)}); move it away to rebuild it") from None


def driver_alive(status: dict) -> bool:
    """Whether the process that writes status.json still runs (only knowable on its host)."""
    driver = status.get("driver", {})
    if driver.get("host") != socket.gethostname():
        return True
    try:
        os.kill(int(driver.get("pid", -1)), 0)
    except (OSError, ValueError):
        return False
    return True


def format_table(records: list[TrialRecord], metric: str, mode: str, top: int = 10, multipliers=(1, 2, 3, 4)) -> str:
    """The top trials: params, the scored metric at each length, steps used, status."""
    rows = ranked(records, metric, mode)[:top]
    if not rows:
        return "(no trial has reported yet)"
    family = length_family(metric)
    param_keys = sorted({k for r in rows for k in r.params})
    header = ["trial", *param_keys, *(f"{family}_{k}x" for k in multipliers), "steps", "status"]
    body = []
    for r in rows:
        params = [_fmt(r.params.get(k, "")) for k in param_keys]
        accs = [_fmt(r.metrics.get(f"{family}_{k}x", "")) for k in multipliers]
        body.append([r.trial_id, *params, *accs, str(r.step), r.status])
    widths = [max(len(h), *(len(row[i]) for row in body)) for i, h in enumerate(header)]
    line = lambda cells: "  ".join(c.ljust(w) for c, w in zip(cells, widths))  # noqa: E731
    return "\n".join([line(header), line(["-" * w for w in widths]), *map(line, body)])


def _fmt(v) -> str:
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e-2 and v != 0 else f"{v:.3f}"
    return str(v)


def write_summary(sweep_dir: Path, name: str, metric: str, mode: str, records: list[TrialRecord], best_config: dict | None) -> dict:
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
    write_json_atomic(Path(sweep_dir) / SUMMARY_FILE, summary)
    return summary


def print_status(sweep_dir: Path, out: TextIO = sys.stdout) -> None:
    data, records = load_records(sweep_dir)
    state = data["state"]
    if state == "running" and not driver_alive(data):
        state = "interrupted (driver gone; run `sweeper launch` with the same file to resume)"
    age = time.time() - data["updated"]
    print(f"sweep {data['name']}: {state}, updated {age:.0f}s ago", file=out)
    print(f"trials: {counts_line(records, data['num_samples'])}", file=out)
    print(best_line(records, data["metric"], data["mode"]), file=out)
    if data["state"] == "running" or any(r.status in ("running", "pending", "interrupted") for r in records):
        print(_progress_line(sweep_dir, records, running=state == "running"), file=out)
    print(format_table(records, data["metric"], data["mode"]), file=out)


def _progress_line(sweep_dir: Path, records: list[TrialRecord], running: bool) -> str:
    """Steps done and to go, speed, ETA (sweeper/live.py), from the plan in the sweep's space.yaml."""
    from sweeper import live

    try:
        plan = live.plan_of(sweep_dir)
    except ConfigError as err:
        return f"progress: - ({cut(str(err), 120)})"
    p = live.progress(records, plan)
    speed = "" if p.speed is None else f", {p.speed:.1f} steps/s per trial"
    eta = "-" if p.eta_s is None else live.clock(p.eta_s)
    return (f"progress: {p.done:,} steps done, ~{p.left:,.0f} expected to go{speed}; "
            + (f"ETA {eta}" if running else f"~{eta} more once resumed"))
