"""A run's own folder: its reports and its newest checkpoint, which a resumed run continues from.

    <run>/config.yaml        the trial config (written by the checkpoint)
    <run>/metrics.jsonl      every report, one JSON object per line, in step order
    <run>/checkpoint         a link to checkpoint-STEP, the newest checkpoint (swapped atomically)
    <run>/times.json         when its training first began and when its last step was reported (UTC)

A kill at any point leaves `checkpoint` naming a whole checkpoint; reports after it are dropped
when the run resumes (it trains those steps again). Files read back are read under a size limit.
"""

from __future__ import annotations

import json
import math
import os
import posixpath
import re
import shutil
import stat
from dataclasses import dataclass
from pathlib import Path

from core import json_text
from core.errors import ConfigError, brief, cut, short_path
from core.files import write_atomic
from trainables.config import MAX_STEPS

CONFIG, REPORTS, CHECKPOINT, TIMES = "config.yaml", "metrics.jsonl", "checkpoint", "times.json"
SWAP = f"{CHECKPOINT}.swap"  # the new link, made beside `checkpoint` and renamed over it
UTC = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # a run's start or end, as `utc_now` writes it
MAX_REPORTS_BYTES = 64 * 2**20  # metrics.jsonl read back: ~30,000 reports of ~2 KB; a larger file is not a run's


class RunDir:
    """One run's folder, the only code that reads or writes its format (the trainer through a sweep's
    trial, `sweeper trial --out`, the sweep's views)."""

    def __init__(self, path: str | Path, max_step: int | None = None):
        """`max_step`: the run's budget, where the reader knows it; a report past it is no report
        of this run (the trainer stops at its budget: someone else wrote it)."""
        self.path = Path(path)
        self.max_step = max_step
        self._last_step: int | None = None  # the newest report's step, once read (appends keep it)

    def checkpoint(self) -> Path | None:
        """The newest whole checkpoint, or None."""
        link = self.path / CHECKPOINT
        return link.resolve() if link.is_dir() else None

    def reports(self) -> list[dict]:
        """Every report this run made (a line cut by a kill, or not a report, is skipped)."""
        path = self.path / REPORTS
        if not path.is_file():
            return []
        with open(path, "rb") as f:
            return parse_reports(f.read(MAX_REPORTS_BYTES), self.max_step)

    def last_report(self) -> dict | None:
        reports = self.reports()
        return reports[-1] if reports else None

    def append(self, metrics: dict) -> None:
        """Add a report, unless the run already holds one at or after its step (a resumed finished
        run reports its end again). The file is read once, not at every report; a link planted in
        its place is not followed."""
        if self._last_step is None:
            last = self.last_report()
            self._last_step = int(last["step"]) if last is not None else -1
        if metrics["step"] <= self._last_step:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.path / REPORTS, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, 0o644)
        try:
            os.write(fd, (json.dumps(metrics) + "\n").encode())
        finally:
            os.close(fd)
        self._last_step = int(metrics["step"])

    def times(self) -> dict:
        """{"started_utc", "ended_utc"} as far as they are known ({} before the run began, or when
        what stands there is not a regular file: it is never waited on); a value not a time as
        `utc_now` writes it is not known."""
        try:
            fd = os.open(self.path / TIMES, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
        except OSError:
            return {}
        try:
            times = json_text.loads(os.read(fd, 4096)) if stat.S_ISREG(os.fstat(fd).st_mode) else {}
        except (OSError, ValueError):
            return {}
        finally:
            os.close(fd)
        return {k: v for k, v in times.items() if k in ("started_utc", "ended_utc") and isinstance(v, str) and UTC.fullmatch(v)} \
            if isinstance(times, dict) else {}  # a time the run's record can vouch for, or none

    def note_started(self) -> None:
        """Record when training began, unless an earlier start is recorded (a resumed run keeps its first)."""
        if "started_utc" not in self.times():
            self.path.mkdir(parents=True, exist_ok=True)
            write_atomic(self.path / TIMES, json.dumps({"started_utc": utc_now()}))

    def note_ended(self) -> None:
        """Record when the run's last step was reported."""
        self.path.mkdir(parents=True, exist_ok=True)
        write_atomic(self.path / TIMES, json.dumps({**self.times(), "ended_utc": utc_now()}))

    def drop_reports_after(self, step: int) -> None:
        """A run killed between a report and its checkpoint logged reports the resume trains again."""
        path = self.path / REPORTS
        reports = self.reports()
        kept = [r for r in reports if r["step"] <= step]
        if len(kept) != len(reports) and path.is_file():
            write_atomic(path, "".join(json.dumps(r) + "\n" for r in kept))
        self._last_step = None

    def keep_checkpoint(self, checkpoint_dir: str | Path, step: int) -> None:
        """Make `checkpoint` the newest checkpoint, atomically: its files are copied to their own
        folder `checkpoint-STEP` first, then the link is swapped to it (rename(2) replaces a link
        at once), then older folders go."""
        target = self.path / f"{CHECKPOINT}-{step}"
        if Path(checkpoint_dir).resolve() == target.resolve():  # the resumed final checkpoint, reported again
            return
        self.path.mkdir(parents=True, exist_ok=True)
        _remove(target)
        shutil.copytree(checkpoint_dir, target)
        link = self.path / CHECKPOINT
        if link.is_dir() and not link.is_symlink():  # a run folder of an older version: a plain folder
            link.rename(self.path / f"{CHECKPOINT}-previous")
        tmp = self.path / SWAP
        _remove(tmp)
        tmp.symlink_to(target.name)
        os.replace(tmp, link)
        for old in self.path.glob(f"{CHECKPOINT}-*"):
            if old != target:
                _remove(old)


def _remove(path: Path) -> None:
    """A run folder's entry gone, whatever stands there: a folder's tree (links in it not followed),
    or a file, link or FIFO (rmtree would open a FIFO, and wait for a writer forever)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)


RUN_FILES = (CONFIG, REPORTS, TIMES, "result.json")  # what a run folder holds besides its checkpoints


def regular_or_absent(path: Path, what: str) -> bool:
    """True for a regular file of its own, False when absent; a link, folder, FIFO or device is
    refused, and so is a file hard-linked with another (another trial's or run's file: both would
    append to it, or one resume from the other's)."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return False
    if stat.S_ISREG(st.st_mode):
        own_file(path, st, what)
        return True
    kind = "a link" if stat.S_ISLNK(st.st_mode) else "a folder" if stat.S_ISDIR(st.st_mode) else "not a regular file"
    raise ConfigError(f"{what} {short_path(path, 120)}: {kind}; a run folder holds regular files there")


def own_file(path: Path, st: os.stat_result, what: str) -> None:
    """A run's regular file is its own: nothing in the sweeper hard-links one (checkpoints are
    copied, reports appended, the rest replaced whole), so a second name for it is someone else's."""
    if st.st_nlink > 1:
        raise ConfigError(f"{what} {short_path(path, 120)}: hard-linked with another file ({st.st_nlink} links); "
                          "a run's files are its own")


def check_run_files(folder: Path, what: str) -> None:
    """A run folder a resume writes to again: each of its files a regular file or absent (a FIFO
    there would block the run, a link would be written through, a folder would fail it), each
    checkpoint-* a folder of its own (a link could name another run's checkpoint as this one's) and
    the swap name a link (what a kill between its making and its rename leaves). Nothing else is a
    run's: refused before any step, not removed after the training."""
    for name in RUN_FILES:
        regular_or_absent(Path(folder) / name, what)
    for path in checkpoint_entries(folder):
        kind = os.lstat(path).st_mode
        if path.name == SWAP and not stat.S_ISLNK(kind):  # a kill between its making and its rename leaves a link
            raise ConfigError(f"{what} {short_path(path, 120)}: not a link; a run folder holds the checkpoint's new link there")
        if path.name != SWAP and (stat.S_ISLNK(kind) or not stat.S_ISDIR(kind)):
            raise ConfigError(f"{what} {short_path(path, 120)}: {'a link' if stat.S_ISLNK(kind) else 'not a folder'}; "
                              "a run folder holds its checkpoint folders there")
        if path.name != SWAP:
            try:
                entries = [(entry, os.lstat(entry)) for entry in sorted(path.iterdir())]
            except OSError as err:
                raise ConfigError(f"{what} {short_path(path, 120)}: cannot be read ({err.strerror or err})") from None
            for entry, st in entries:  # state.pt, config.yaml: another run's, linked in, would be resumed
                if stat.S_ISREG(st.st_mode):
                    own_file(entry, st, what)


def checkpoint_entries(folder: str | Path) -> list[Path]:
    """What stands in a run folder under a checkpoint folder's name (checkpoint-*) or the swap link's."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.iterdir() if p.name == SWAP or p.name.startswith(f"{CHECKPOINT}-"))


def utc_now() -> str:
    from datetime import datetime, timezone

    return datetime.now(timezone.utc).isoformat(timespec="seconds").replace("+00:00", "Z")


def trial_reports(trial_dir: str | Path) -> list[tuple[int, dict]]:
    """(step, numeric metrics) of every report in a run's folder; [] where there is none."""
    if not trial_dir:
        return []
    return [(int(r["step"]), {k: v for k, v in r.items() if isinstance(v, (int, float)) and not isinstance(v, bool)})
            for r in RunDir(trial_dir).reports()]


def parse_reports(data: bytes, max_step: int | None = None) -> list[dict]:
    """The reports in the bytes of a metrics.jsonl (a line cut by a kill, or not a report, is
    skipped; so is one with a metric name MLflow refuses, a value NaN or infinite but the loss
    of a divergence report, or a step past `max_step`: none of which the trainer writes)."""
    return [report for _, report, bad in _lenient_reports(data)
            if bad is None and (max_step is None or report["step"] <= max_step)]


def _lenient_reports(data: bytes):
    """(line number, report, its first metric name MLflow refuses or None) of each line that is a
    JSON object with a step >= 0 and measurements only (`_measured`)."""
    for number, line in enumerate(data.decode("utf-8", errors="replace").splitlines(), 1):
        try:
            report = json_text.loads(line)
        except ValueError:
            continue
        step = report.get("step") if isinstance(report, dict) else None
        if is_number(step) and step >= 0 and _measured(report):
            yield number, report, next((k for k in report if metric_name_problem(k)), None)


def _measured(report: dict) -> bool:
    """Every number one a float holds and finite, but for the loss of the trainer's divergence
    report (`diverged` 1): a NaN, an infinite metric or 10**400 is no measurement, and JSON's
    strict readers refuse the first two."""
    return not any(beyond_float(v) or (isinstance(v, float) and not math.isfinite(v)
                                       and not (k == "loss" and report.get("diverged") == 1))
                   for k, v in report.items())


def check_reports(data: bytes, source: str, max_step: int) -> None:
    """The first report the lenient reader would take (and a sweep would log to MLflow) with a
    metric name MLflow refuses, or past the run's budget `max_step`, as one ConfigError line
    naming the line and the key."""
    for number, report, bad in _lenient_reports(data):
        if bad is not None:
            raise ConfigError(f"{source} line {number}: {cut(bad, 40)}: {metric_name_problem(bad)}")
        if report["step"] > max_step:
            raise ConfigError(f"{source} line {number}: step: {brief(report['step'], 30)} is past the sweep's "
                              f"budget of {max_step:,} steps (max_steps); the trainer reports no step past it")


MAX_METRIC_NAME = 250  # MLflow's MAX_ENTITY_KEY_LENGTH
_METRIC_CHARACTERS = re.compile(r"[/\w.\- :]*")  # what MLflow's validate_param_and_metric_name takes (POSIX)


def metric_name_problem(name: str) -> str | None:
    """Why MLflow would refuse `name` as a metric's name, or None (the rule of its
    mlflow/utils/validation.py, mirrored: at most 250 characters of letters, digits, `_ - . : /`
    and spaces, and a plain relative path: not empty, no `.`/`..` parts, no doubled or leading or
    trailing `/`). Every name the trainer reports passes (trainables/metrics.py)."""
    if len(name) > MAX_METRIC_NAME:
        return f"a metric name of {len(name):,} characters; MLflow takes at most {MAX_METRIC_NAME}"
    if not _METRIC_CHARACTERS.fullmatch(name):
        return "not a metric name MLflow takes (letters, digits, `_ - . : /` and spaces only)"
    normal = posixpath.normpath(name)
    if normal != name or normal == "." or normal.startswith("..") or normal.startswith("/"):
        return "not a metric name MLflow takes (a plain relative path: no empty, `.` or `..` parts)"
    return None


def is_number(value) -> bool:
    """A finite int or float (not a bool) that a float holds: what a report's metric must be."""
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return False
    try:
        return math.isfinite(value)
    except OverflowError:  # a whole number of hundreds of digits (JSON reads it): no float holds it
        return False


def beyond_float(value) -> bool:
    """A whole number JSON reads that no float holds (10**400): a line with one is no report."""
    return isinstance(value, int) and not isinstance(value, bool) and not is_number(value)


@dataclass(frozen=True)
class Report:
    """One line of metrics.jsonl: its step, its metrics, and its bytes as they were written."""

    step: int
    metrics: dict[str, float]
    line: bytes


def strict_reports(data: bytes, source: str) -> tuple[list[Report], bool]:
    """metrics.jsonl as typed records, and whether a last line was cut short (the reader of a run a
    user asks to continue, `sweeper trial --resume`; `RunDir.reports` is the lenient one). A last line
    without its newline that does not parse is a write a kill cut short, and is left out; any
    other line that is not a report is refused."""
    lines = data.split(b"\n")
    last = lines.pop()  # b"" when the file ends with a newline
    reports: list[Report] = []
    for number, raw in enumerate(lines, 1):
        reports.append(_report(raw, f"{source} line {number}", reports[-1].step if reports else -1))
    if last:
        try:  # whole but without its newline: kept (and written again with one)
            reports.append(_report(last, f"{source} line {len(lines) + 1}", reports[-1].step if reports else -1))
        except ConfigError:
            return reports, True  # cut short by a kill: not a report
    return reports, False


def _report(raw: bytes, where: str, previous: int) -> Report:
    try:
        obj = json_text.loads(raw)
    except json_text.DuplicateKey as err:
        raise ConfigError(f"{where}: not a report the trainer writes: {err}") from None
    except ValueError:
        raise ConfigError(f"{where}: not a JSON report: {brief(raw.decode('utf-8', 'replace'), 40)}") from None
    if not isinstance(obj, dict) or not obj:
        raise ConfigError(f"{where}: a report must be a JSON object of metrics, got {brief(obj, 40)}")
    step = obj.get("step")
    if isinstance(step, float) and math.isfinite(step) and step == int(step):
        step = int(step)
    if not isinstance(step, int) or isinstance(step, bool):
        raise ConfigError(f"{where}: step: must be a whole number, got {brief(step, 40)}")
    for key, value in obj.items():
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise ConfigError(f"{where}: {cut(key, 40)}: a metric must be a number, got {brief(value, 40)}")
        if beyond_float(value):
            raise ConfigError(f"{where}: {cut(key, 40)}: a number no float holds, got {brief(value, 40)}")
        if (problem := metric_name_problem(key)) is not None:  # MLflow would refuse it once the run is logged
            raise ConfigError(f"{where}: {cut(key, 40)}: {problem}")
    if not 0 <= step <= MAX_STEPS:
        raise ConfigError(f"{where}: step: must be within [0, {MAX_STEPS:,}], got {brief(step, 40)}")
    if step <= previous:
        raise ConfigError(f"{where}: step: must be above the line before's {previous}, got {step}")
    return Report(step, obj, raw + b"\n")
