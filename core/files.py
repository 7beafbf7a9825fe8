"""A file written whole or not at all: a temporary file beside it, then a rename.

Every file a sweep or a trial rewrites (status.json, summary.json, a trial's reports when a resume
drops some, the service's state, the record of a local Ray) goes through `write_atomic`, so a
kill at any moment leaves the old content or the new one, never a part.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Callable


def write_atomic(path: str | Path, data: str | bytes, between: Callable[[], None] | None = None,
                 fsync: bool = False) -> None:
    """`path` holds `data` whole, or is as it was. The temporary file beside it is made afresh (a link
    planted at its name is removed, never written through); `between` is called with both files on
    disk (a fault point); `fsync` puts the data on the disk before the rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    if os.path.islink(tmp):
        os.unlink(tmp)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644)
    try:
        os.write(fd, data.encode() if isinstance(data, str) else data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if between is not None:
        between()
    os.replace(tmp, path)
