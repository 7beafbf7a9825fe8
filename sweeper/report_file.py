"""Where `sweeper report --markdown FILE` may write: a file of the user's that is no other document."""

from __future__ import annotations

import os
from pathlib import Path

from core.errors import ConfigError, cut, expand_user, short_path
from sweeper.fs import check_output_file

REPORT_START = b"# Sweep `"  # the first bytes of every report: what --markdown may replace


PSEUDO_FILE_SYSTEMS = (Path("/proc"), Path("/sys"))  # files there are the kernel's, not documents


def check_markdown(path: str, sweep_dir: Path | None = None) -> Path:
    """--markdown FILE: a regular file (or none yet) in an existing, writable folder, not a folder
    itself and not under /proc or /sys; not named as a lock (`.lock`: the sweeper's, a store's and the
    service's locks are empty files, which would pass for a report to replace), nor in the sweep
    service's folder, nor in a sweep's (`sweep_dir`, the report's, or any other's: its files are the
    sweep's own). Checked before anything is read or printed."""
    if path == "-":  # stdout, by the usual convention: it holds the report's tables already
        raise ConfigError("--markdown -: the report is printed on stdout already; name a file for the Markdown, "
                          "e.g. --markdown report.md")
    target = expand_user(path)
    try:
        resolved = target.resolve()
        target.is_dir()
    except OSError as err:  # a name too long for the file system, a loop of links
        raise ConfigError(f"--markdown {cut(path, 120)}: not a file name this file system takes ({err.strerror or err})") from None
    for root in PSEUDO_FILE_SYSTEMS:
        if resolved == root or root in resolved.parents:
            raise ConfigError(f"--markdown {cut(path, 120)}: under {root}, whose files are the kernel's; name a file in a folder of yours")
    check_own_place(path, target, resolved, sweep_dir)
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


def check_own_place(path: str, target: Path, resolved: Path, sweep_dir: Path | None) -> None:
    """A report file is no lock file and lies outside the service's folder and every sweep's folder
    (realpath-resolved: a link or `..` leads nowhere else)."""
    from sweeper.service_folder import service_dir
    from sweeper.sweep_dir import check_not_in_sweep

    if target.name.endswith(".lock") or resolved.name.endswith(".lock"):
        raise ConfigError(f"--markdown {cut(path, 120)}: a lock file's name (the sweeper's locks, a store's and the "
                          "service's end in .lock); name the report's file, e.g. report.md")
    try:
        service = Path(os.path.realpath(service_dir()))
    except ConfigError:
        service = None  # an unusable SWEEPER_SERVICE_DIR is said where the service is looked for
    if service is not None and (resolved == service or service in resolved.parents):
        raise ConfigError(f"--markdown {cut(path, 120)}: inside the sweep service's own folder ({short_path(service, 80)}), "
                          "which holds its socket, lock and log; name a file elsewhere")
    own = Path(os.path.realpath(sweep_dir)) if sweep_dir is not None else None
    if own is not None and (resolved == own or own in resolved.parents):
        raise ConfigError(f"--markdown {cut(path, 120)}: inside the folder of sweep `{cut(own.name, 60)}` "
                          f"({short_path(own, 80)}), which holds that sweep's files only; name a file outside it")
    check_not_in_sweep(resolved, "--markdown")
