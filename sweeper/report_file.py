"""Where `sweeper report --markdown FILE` may write: a file of the user's that is no other document."""

from __future__ import annotations

from pathlib import Path

from core.errors import ConfigError, cut, expand_user
from sweeper.fs import check_output_file

REPORT_START = b"# Sweep `"  # the first bytes of every report: what --markdown may replace


PSEUDO_FILE_SYSTEMS = (Path("/proc"), Path("/sys"))  # files there are the kernel's, not documents


def check_markdown(path: str) -> Path:
    """--markdown FILE: a regular file (or none yet) in an existing, writable folder, not a folder
    itself and not under /proc or /sys. Checked before anything is read or printed."""
    target = expand_user(path)
    try:
        resolved = target.resolve()
        target.is_dir()
    except OSError as err:  # a name too long for the file system, a loop of links
        raise ConfigError(f"--markdown {cut(path, 120)}: not a file name this file system takes ({err.strerror or err})") from None
    for root in PSEUDO_FILE_SYSTEMS:
        if resolved == root or root in resolved.parents:
            raise ConfigError(f"--markdown {cut(path, 120)}: under {root}, whose files are the kernel's; name a file in a folder of yours")
    if target.is_dir():
        raise ConfigError(f"--markdown {cut(path, 120)}: is a folder; name the report's file, e.g. {cut(path, 60).rstrip('/')}/report.md")
    if not target.parent.is_dir():
        raise ConfigError(f"--markdown {cut(path, 120)}: folder {cut(str(target.parent), 120)} does not exist")
    check_output_file(target, "--markdown")
    if target.is_file() and not is_report(target):  # a typo (mlflow.db for mlflow.md) must not replace a store
        raise ConfigError(f"--markdown {cut(path, 120)}: a file that is no report this command wrote is there; "
                          "name a new file, or move that one away")
    return target


def is_report(path: Path) -> bool:
    """Whether the file is empty or starts as the reports `build_report` writes."""
    with open(path, "rb") as f:
        head = f.read(len(REPORT_START))
    return head in (b"", REPORT_START)
