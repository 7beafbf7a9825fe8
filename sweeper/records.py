"""Plain records of a sweep's trials, shared by the progress view, status files and tracking."""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from trainables.config import MAX_STEPS

Status = Literal["pending", "running", "interrupted", "completed", "stopped", "diverged", "failed"]
FINAL = ("completed", "stopped", "diverged", "failed")  # never trained again; everything else resumes
STATUSES = ("pending", "running", "interrupted", *FINAL)


@dataclass
class TrialRecord:
    trial_id: str
    params: dict[str, Any]  # the sampled parameters, by Optuna name
    status: Status
    step: int  # training steps reported so far
    metrics: dict[str, float] = field(default_factory=dict)  # the last report
    path: str = ""  # the trial's directory in the sweep's storage

    def to_dict(self) -> dict:  # not dataclasses.asdict: its deep copy was a third of the driver's status writes
        return {"trial_id": self.trial_id, "params": dict(self.params), "status": self.status, "step": self.step,
                "metrics": dict(self.metrics), "path": self.path}

    @classmethod
    def from_dict(cls, data: dict) -> "TrialRecord":
        """A record as a status file holds it; a field of the wrong kind is a ValueError naming it."""
        if not isinstance(data, dict):
            raise ValueError(f"a trial must be a mapping, got {type(data).__name__}")
        record = cls(**data)
        numbers = all(_finite_number(v) for v in record.metrics.values()) if isinstance(record.metrics, dict) else False
        checks = {"trial_id": isinstance(record.trial_id, str), "params": isinstance(record.params, dict),
                  "status": record.status in STATUSES, "step": isinstance(record.step, int) and not isinstance(record.step, bool) and 0 <= record.step <= MAX_STEPS,
                  "metrics": numbers, "path": isinstance(record.path, str)}
        if wrong := [k for k, ok in checks.items() if not ok]:
            raise ValueError(f"trial field {wrong[0]}: not a {wrong[0]} of a trial")
        return record


def _finite_number(value) -> bool:
    """A number as a report holds one: not a bool; an integer within a float's range (a float may be
    NaN: a diverged trial reports one)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return False
    try:
        float(value)
    except OverflowError:
        return False
    return True


_PER_LENGTH = re.compile(r"(.+)_(\d+)x")  # acc_3x, state_acc_1x, raw_tv_4x: a metric at k x max_len
MULTIPLIERS = (1, 2, 3, 4)  # the evaluation lengths every view shows, in multiples of the training length


RAY_KEYS = {"timestamp", "training_iteration", "time_this_iter_s", "time_total_s", "time_since_restore",
            "iterations_since_restore", "pid", "done", "date", "hostname", "node_ip", "trial_id", "checkpoint_dir_name",
            "should_checkpoint", "experiment_tag", "config"}  # what Ray adds to every report


def trainer_metrics(metrics: dict) -> dict:
    """A report as the trainer made it: without the keys Ray adds."""
    return {k: v for k, v in metrics.items() if k not in RAY_KEYS}


def length_family(metric: str) -> str:
    """The per-length metric family a score belongs to: `tv_3x` -> `tv`; `acc` if it has none."""
    match = _PER_LENGTH.fullmatch(metric)
    return match.group(1) if match else "acc"


def length_metrics(metric: str) -> list[str]:
    """The metrics of `metric`'s family at every length the views show: `tv_3x` -> tv_1x .. tv_4x."""
    family = length_family(metric)
    return [f"{family}_{k}x" for k in MULTIPLIERS]


def is_per_length(metric: str) -> bool:
    """Whether `metric` is measured at one evaluation length (`acc_3x`), not over training (`loss`)."""
    return _PER_LENGTH.fullmatch(metric) is not None


def score(record: TrialRecord, metric: str) -> float | None:
    """The trial's score: its last reported value of `metric` (None if it never reported)."""
    value = record.metrics.get(metric)
    return None if value is None else float(value)


def ranked(records: list[TrialRecord], metric: str, mode: str) -> list[TrialRecord]:
    """Trials with a score, best first."""
    scored = [r for r in records if score(r, metric) is not None]
    return sorted(scored, key=lambda r: score(r, metric), reverse=(mode == "max"))


def shortest_names(names: list[str]) -> list[str]:
    """Each parameter's shortest dotted tail that is no other parameter's tail: optim.lr -> lr,
    while model.dropout and attn.dropout keep their first part. A name with a condition
    (`path|parent=value`) stays whole."""
    tails = Counter(t for name in set(names) for t in _tails(name))  # how many names end in each tail
    short = []
    for name in names:
        if "|" in name or "." not in name:
            short.append(name)
            continue
        short.append(next((t for t in _tails(name) if tails[t] == 1), name))
    return short


def _tails(name: str) -> list[str]:
    """A dotted name's tails, the shortest first: a.b.c -> c, b.c, a.b.c."""
    parts = name.split(".")
    return [".".join(parts[-k:]) for k in range(1, len(parts) + 1)]


TRIAL_NAME = re.compile(r"t\d{4,}")  # what trial_name gives


def trial_name(number: int) -> str:
    """A trial's name in every view (status, MLflow, the trial's folder): stable across launches."""
    return f"t{number:04d}"


def check_report_names(trials_root: Path, max_step: int, read: dict[Path, bytes] | None = None) -> None:
    """Every trial folder's reports, as the resume's MLflow sync reads them (`RunDir.reports`): a
    metric name MLflow refuses (`lo*ss`, 600 characters, a lone surrogate) or a step past the
    budget `max_step` is one line naming the file, the line and the key before anything is
    written, not the tracking store's failure once the sweep's runs were half logged, nor a trial's
    newest value at a step it never trained (the trainer writes neither: someone else did).
    `read`: the bytes of the trial folders' files already read, by folder (not read again)."""
    from core.errors import cut, short_path
    from trainables.config import ConfigError
    from trainables.run_dir import MAX_REPORTS_BYTES, REPORTS, check_reports

    if not trials_root.is_dir():
        return
    for folder in sorted(trials_root.iterdir()):
        path = folder / REPORTS
        if not TRIAL_NAME.fullmatch(folder.name) or not path.is_file():  # what RunDir.reports reads
            continue
        try:
            data = (read or {}).get(folder)
            if data is None:
                with open(path, "rb") as f:
                    data = f.read(MAX_REPORTS_BYTES)
        except OSError as err:
            raise ConfigError(f"{short_path(path, 100)}: cannot be read ({err.strerror or err}); move "
                              f"{short_path(folder, 80)} away") from None
        try:
            check_reports(data, short_path(path, 100), max_step)
        except ConfigError as err:
            raise ConfigError(f"{cut(str(err), 220)}; mend that line, or move {short_path(folder, 80)} away") from None
