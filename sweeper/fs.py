"""Can we write there? Asked before anything starts, without leaving anything behind."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from trainables.errors import ConfigError, cut


def check_writable(path: str | Path, what: str) -> None:
    """Raise a one-line ConfigError unless `path` (a folder, existing or not) could be created and
    written: a temporary file is made and removed in the nearest existing ancestor. Permission
    bits alone do not tell (root ignores them; a read-only mount does not), so this writes."""
    target = Path(path).expanduser()
    try:
        target = target.resolve()
        probe_dir = target
        while not probe_dir.exists():
            probe_dir = probe_dir.parent
        if not probe_dir.is_dir():
            raise ConfigError(f"{what} {cut(str(path), 120)}: {probe_dir} is a file, not a folder")
        fd, name = tempfile.mkstemp(prefix=".sweeper-probe-", dir=probe_dir)
        os.close(fd)
        os.unlink(name)
    except OSError as err:
        raise ConfigError(f"{what} {cut(str(path), 120)}: cannot write there ({err.strerror or err})") from None
    if len(str(target)) > 3000 or any(len(part.encode()) > 255 for part in target.parts):
        raise ConfigError(f"{what} {cut(str(path), 120)}: path too long for the file system")
