"""A run's own folder: its reports and its newest checkpoint, which a resumed run continues from.

    <run>/config.yaml        the trial config (written by the checkpoint)
    <run>/metrics.jsonl      every report, one JSON object per line, in step order
    <run>/checkpoint         a link to checkpoint-STEP, the newest checkpoint (swapped atomically)

A kill at any point leaves `checkpoint` naming a whole checkpoint; reports after it are dropped
when the run resumes (it trains those steps again). Files read back are read under a size limit.
"""

from __future__ import annotations

import json
import math
import os
import shutil
from pathlib import Path

REPORTS = "metrics.jsonl"
CHECKPOINT = "checkpoint"
MAX_REPORTS_BYTES = 64 * 2**20  # metrics.jsonl read back: a larger file is not a run's reports


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

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
            return parse_reports(f.read(MAX_REPORTS_BYTES))

    def last_report(self) -> dict | None:
        reports = self.reports()
        return reports[-1] if reports else None

    def append(self, metrics: dict) -> None:
        """Add a report, unless the run already holds one at or after its step."""
        last = self.last_report()
        if last is not None and metrics["step"] <= last["step"]:
            return
        self.path.mkdir(parents=True, exist_ok=True)
        with open(self.path / REPORTS, "a") as f:
            f.write(json.dumps(metrics) + "\n")

    def drop_reports_after(self, step: int) -> None:
        """A run killed between a report and its checkpoint logged reports the resume trains again."""
        path = self.path / REPORTS
        reports = self.reports()
        kept = [r for r in reports if r["step"] <= step]
        if len(kept) != len(reports) and path.is_file():
            tmp = path.with_suffix(".tmp")
            tmp.write_text("".join(json.dumps(r) + "\n" for r in kept))
            os.replace(tmp, path)

    def keep_checkpoint(self, checkpoint_dir: str | Path, step: int) -> None:
        """Make `checkpoint` the newest checkpoint, atomically: its files are copied to their own
        folder `checkpoint-STEP` first, then the link is swapped to it (rename(2) replaces a link
        at once), then older folders go."""
        target = self.path / f"{CHECKPOINT}-{step}"
        if Path(checkpoint_dir).resolve() == target.resolve():  # the resumed final checkpoint, reported again
            return
        self.path.mkdir(parents=True, exist_ok=True)
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(checkpoint_dir, target)
        link = self.path / CHECKPOINT
        if link.is_dir() and not link.is_symlink():  # a run folder of an older version: a plain folder
            link.rename(self.path / f"{CHECKPOINT}-previous")
        tmp = self.path / f"{CHECKPOINT}.swap"
        tmp.unlink(missing_ok=True)
        tmp.symlink_to(target.name)
        os.replace(tmp, link)
        for old in self.path.glob(f"{CHECKPOINT}-*"):
            if old != target:
                shutil.rmtree(old, ignore_errors=True)


def parse_reports(data: bytes) -> list[dict]:
    """The reports in the bytes of a metrics.jsonl (a line cut by a kill, or not a report, is skipped)."""
    out = []
    for line in data.decode("utf-8", errors="replace").splitlines():
        try:
            report = json.loads(line)
        except ValueError:
            continue
        step = report.get("step") if isinstance(report, dict) else None
        if is_number(step) and step >= 0:
            out.append(report)
    return out


def is_number(value) -> bool:
    """A finite int or float (not a bool): what a report's metric must be."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
