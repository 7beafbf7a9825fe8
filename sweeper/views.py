"""The views of a sweep, rebuilt from its ledger (the Optuna study) and its trials' folders:
status.json (which the live view, sweeper/live.py, draws from), the MLflow mirror, and
`sweeper status`, which rebuilds a missing status.json when no driver runs.
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

from sweeper.events import Speaker, discard
from sweeper.faults import Faults
from sweeper.records import TrialRecord, trainer_metrics
from sweeper.sweep_dir import OPTUNA_DB, SPACE_FILE
from sweeper.status import (STATUS_FILE, best_line, counts_line, driver_alive, driver_record, format_table,
                            launch_speed, load_records)
from core.files import write_atomic
from core.errors import ConfigError, cut

STATUS_EVERY_S = 0.5  # status.json after a report: at most this often (it holds every trial: O(N) to write)


class SweepViews:
    """The views of a running sweep, rebuilt from the ledger and the trials' reports: status.json
    (which the live view, sweeper/live.py, draws from) and the MLflow mirror (`tracker`). The
    ledger tells it of each start, report and end; nothing here is read back by the sweep."""

    def __init__(self, sweep_dir: Path, spec, ledger, trials_root: str, tracker=None, clock=time.monotonic,
                 say: Speaker | None = None, faults: Faults | None = None):
        self.sweep_dir, self.spec, self.ledger, self.trials_root = Path(sweep_dir), spec, ledger, trials_root
        self.clock = clock
        self.say = say or Speaker(discard)  # where the sweep's warnings go (its caller's sink)
        self.faults = faults or Faults()
        self.tracker = tracker  # SweepTracker or None
        self.tracking_failed = False
        self.launched = time.time()
        self.driver = driver_record()  # host, pid, start time: a pid reused later is not taken for this driver
        self._metrics: dict[int, dict] = {}  # trial number -> its last report (this launch's, or its folder's)
        self._json: dict[int, tuple] = {}  # trial number -> (its record's key, its JSON): made once per change
        self._written, self._dirty = 0.0, False
        from sweeper.eta import LaunchSpeed

        self.speed = LaunchSpeed(spec.budget.eval_every)  # this launch's reports alone: steady after a resume

    # -- records -------------------------------------------------------------------------------

    def _dir(self, number: int) -> str:
        from sweeper.records import trial_name

        return str(Path(self.trials_root) / trial_name(number))

    def last_metrics(self, number: int) -> dict:
        if number not in self._metrics:
            from trainables.run_dir import RunDir

            last = RunDir(self._dir(number), self.spec.budget.max_steps).last_report() or {}
            self._metrics[number] = _numbers(last)
        return self._metrics[number]

    def record(self, number: int) -> TrialRecord:
        t = self.ledger.trials[number]
        metrics = self.last_metrics(number)
        if int(metrics.get("step", -1)) < t.last_step and t.last_step in t.values:  # the folder lost reports the ledger has
            metrics = {"step": t.last_step, self.spec.metric: t.values[t.last_step]}
        return TrialRecord(trial_id=t.name, params=dict(t.params), status=t.status,
                           step=int(metrics.get("step", t.last_step)), metrics=metrics, path=self._dir(number))

    def records(self) -> list[TrialRecord]:
        return [self.record(n) for n in sorted(self.ledger.trials) if not self.ledger.trials[n].duplicate]

    def best(self) -> dict | None:
        """The best judged value any trial reached: at a rung, or at its end. It never goes down."""
        best = None
        sign = 1 if self.spec.mode == "max" else -1
        for t in self.ledger.trials.values():
            if t.duplicate:
                continue
            judged = dict(t.rungs())
            if t.status in ("completed", "diverged", "stopped") and t.values:
                judged[t.last_step] = t.values[t.last_step]
            for step, value in judged.items():
                if not math.isfinite(value):  # no value a trial reports (the study checks say so on a resume)
                    continue
                if best is None or sign * value > sign * best["value"]:
                    best = {"value": value, "step": step, "trial_id": t.name}
        return best

    def catch_up(self, numbers: list[int]) -> None:
        """Reports these trials' folders hold that never reached the driver (a trial writes its report,
        then the sweep stops before Ray delivers it): into the ledger and this view, so that the
        ledger, status.json, summary.json and MLflow all show the trial's newest step."""
        from trainables.run_dir import RunDir

        for number in numbers:
            reports = RunDir(self._dir(number), self.spec.budget.max_steps).reports()
            for report in reports:
                value = report.get(self.spec.metric)
                if isinstance(value, (int, float)) and not isinstance(value, bool):
                    self.ledger.report(number, int(report["step"]), float(value))
            if reports and int(reports[-1]["step"]) > int(self.last_metrics(number).get("step", -1)):
                self._metrics[number] = _numbers(reports[-1])

    # -- events from the ledger's writer --------------------------------------------------------

    def on_start(self, number: int) -> None:
        self.write("running")

    def on_report(self, number: int, result: dict) -> None:
        self._metrics[number] = {**_numbers(trainer_metrics(result)), **_numbers({"time_total_s": result.get("time_total_s")})}
        self.speed.add(number, int(self._metrics[number].get("step", 0)), self._metrics[number].get("steps_per_s"))
        self._track(self.record(number))
        self.faults.point("logged")
        self._dirty = True
        self.flush()

    def on_end(self, number: int) -> None:
        self._track(self.record(number))
        self.write("running")

    def on_error(self, number: int | None, message: str) -> None:
        """A trial failed after its retries: the error's last line goes to the ledger and the terminal."""
        if number is None or number not in self.ledger.trials:
            return
        if self.ledger.trials[number].status != "failed":  # the study takes no attribute of an ended trial
            self.ledger.set_trial_attr(number, "error", message[:500])
        self.say.warning(f"warning: trial {self.ledger.trials[number].name} failed after its retries: {message[:300]}")

    def flush(self) -> None:
        if self._dirty and self.clock() - self._written >= STATUS_EVERY_S:
            self.write("running")

    def _track(self, record: TrialRecord) -> None:
        """Tracking trouble (a server gone mid-sweep) is reported, never allowed to stop the sweep."""
        if self.tracker is None:
            return
        try:
            self.tracker.sync(record)
        except Exception as err:  # noqa: BLE001
            if not self.tracking_failed:
                self.say.warning(f"warning: MLflow tracking failed ({type(err).__name__}: {str(err)[:200]}); "
                                 "the sweep goes on, status.json stays current")
            self.tracking_failed = True

    def write(self, state: str, updated: float | None = None) -> None:
        """status.json, atomically, `updated` now (or when the sweep last wrote, for a view rebuilt
        later). Each trial's JSON is made once per change of its record."""
        self._written, self._dirty = self.clock(), False
        head = json.dumps({
            "name": self.spec.name, "metric": self.spec.metric, "mode": self.spec.mode,
            "num_samples": self.spec.budget.num_samples, "state": state,
            "started": self.ledger.attr("sweeper.started", self.launched), "updated": time.time() if updated is None else updated,
            "elapsed_before_s": float(self.ledger.attr("sweeper.elapsed_s", 0.0)), "launched": self.launched,
            "best": self.best(), "trial_speed": self.speed.value(), "driver": self.driver,
        }, indent=2, default=str)
        trials = []
        for number in sorted(self.ledger.trials):
            if self.ledger.trials[number].duplicate:
                continue
            r = self.record(number)
            key = (r.status, r.step, len(r.metrics))
            hit = self._json.get(number)
            if hit is None or hit[0] != key:
                hit = self._json[number] = (key, json.dumps(r.to_dict(), default=str))
            trials.append(hit[1])
        write_atomic(self.sweep_dir / STATUS_FILE, head[:-2] + ',\n  "trials": [' + ", ".join(trials) + "]\n}",
                          lambda: self.faults.point("state_write"))


def _numbers(metrics: dict) -> dict:
    return {k: v for k, v in metrics.items() if isinstance(v, (int, float)) and not isinstance(v, bool)}


def driver_running(sweep_dir: Path) -> bool:
    """Whether a driver holds the sweep's lock now (the kernel drops it when the driver ends)."""
    from sweeper.lock import lock_held, sweep_lock_path

    return lock_held(sweep_lock_path(sweep_dir))


def ensure_status(sweep_dir: Path) -> bool:
    """status.json is a view: when it is gone and no driver runs, rebuild it from the ledger and the
    trials' folders. Returns True if it was rebuilt."""
    sweep_dir = Path(sweep_dir)
    if (sweep_dir / STATUS_FILE).is_symlink():  # a link planted where the view goes: never written through
        raise ConfigError(f"{sweep_dir / STATUS_FILE}: a link, not the sweep's view; move it away to rebuild it")
    if (sweep_dir / STATUS_FILE).exists() or not (sweep_dir / OPTUNA_DB).is_file() or driver_running(sweep_dir):
        return False
    from sweeper.adapters.optuna_ledger import Ledger
    from sweeper.fs import sqlite_read_only_url
    from sweeper.space_file import load_saved_space

    from sweeper.adapters.optuna_study import check_ledger

    spec = load_saved_space(sweep_dir)
    db = sweep_dir / OPTUNA_DB
    check_ledger(db, spec, where=str(db))  # a damaged, empty or foreign study: one line, before anything is written
    ledger = Ledger(sqlite_read_only_url(db), spec, create=False)
    views = SweepViews(sweep_dir, spec, ledger, str(sweep_dir / "trials"))
    done = ledger.counted() >= spec.budget.num_samples and not ledger.unfinished()
    views.write("finished" if done else "interrupted", updated=_last_written(sweep_dir))
    return True


def _last_written(sweep_dir: Path) -> float:
    """When the sweep last wrote (its study, a trial's reports): what a rebuilt view was last updated
    by, not the moment it was rebuilt."""
    paths = [sweep_dir / OPTUNA_DB, *(sweep_dir / "trials").glob("t*/metrics.jsonl")]
    return max((p.stat().st_mtime for p in paths if p.is_file() and not p.is_symlink()), default=time.time())


TABLE_WIDTH = 1000  # characters of a line of the status table off a terminal


def status_lines(sweep_dir: Path, width: int = TABLE_WIDTH) -> list[str]:
    """What `sweeper status NAME` shows: state, counts, best, progress, the table (at most `width`
    characters a line: a damaged status.json may hold thousands of parameters)."""
    data, records = load_records(sweep_dir)
    state = data["state"]
    if state == "running" and not driver_alive(data):
        state = "interrupted (driver gone; run `sweeper launch` with the same file to resume)"
    age = time.time() - data["updated"]
    updated = f"updated {age:.0f}s ago" if -60 < age < 1e10 else "updated at a time that is none (a damaged status.json?)"
    lines = [f"sweep {cut(data['name'], 80)}: {state}, {updated}", f"trials: {counts_line(records, data['num_samples'])}",
             best_line(records, data["metric"], data["mode"], data.get("best"))]
    if data["state"] == "running" or any(r.status in ("running", "pending", "interrupted") for r in records):
        lines.append(_progress_line(sweep_dir, data, records, running=state == "running"))
    return lines + [format_table(records, data["metric"], data["mode"], width=width)]


def _progress_line(sweep_dir: Path, data: dict, records: list[TrialRecord], running: bool) -> str:
    """Steps done and to go, speed, ETA (sweeper/eta.py), from the plan in the sweep's space.yaml."""
    from sweeper import live
    from sweeper.eta import clock, progress

    try:
        plan = live.plan_of(sweep_dir)
    except ConfigError as err:
        return f"progress: - ({cut(str(err), 120)})"
    p = progress(records, plan, launch_speed(data))
    speed = "" if p.speed is None else f", {p.speed:.1f} steps/s per trial"
    eta = "-" if p.eta_s is None else clock(p.eta_s)
    return (f"progress: {p.done:,} steps done, ~{p.left:,.0f} expected to go{speed}; "
            + (f"ETA {eta}" if running else f"~{eta} more once resumed"))


MAX_LISTED = 200  # sweeps one `sweeper status` lists


def sweep_list_lines(storage: Path) -> list[str]:
    """What `sweeper status` without a name shows of a storage folder: one line per sweep in it
    (name, state, counts, best), newest first; a damaged sweep is one line saying so."""
    found = []
    try:
        for entry in storage.iterdir():
            if entry.is_dir() and not entry.is_symlink() and ((entry / STATUS_FILE).is_file() or (entry / SPACE_FILE).is_file()):
                found.append(entry)
    except OSError:
        return []
    found.sort(key=lambda d: _mtime(d / STATUS_FILE), reverse=True)
    lines = []
    for sweep_dir in found[:MAX_LISTED]:
        name = cut(sweep_dir.name, 40)
        if not (sweep_dir / STATUS_FILE).is_file():
            lines.append(f"  {name}: starting (no report yet)")
            continue
        try:
            data, records = load_records(sweep_dir)
        except ConfigError as err:
            lines.append(f"  {name}: unreadable ({cut(str(err), 120)})")
            continue
        state = data["state"] if data["state"] != "running" or driver_alive(data) else "interrupted (driver gone)"
        lines.append(f"  {name}: {state}; {counts_line(records, data['num_samples'])}; "
                     f"{best_line(records, data['metric'], data['mode'], data.get('best'))}")
    if len(found) > MAX_LISTED:
        lines.append(f"  ... and {len(found) - MAX_LISTED} more")
    return lines


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0
