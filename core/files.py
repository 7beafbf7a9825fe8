"""A file written whole or not at all: a temporary file beside it, then a rename.

Every file a sweep or a trial rewrites (status.json, summary.json, a trial's reports when a resume
drops some, the service's state, the record of a local Ray) goes through `write_atomic`, so a
kill at any moment leaves the old content or the new one, never a part.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from pathlib import Path
from typing import Callable


def write_atomic(path: str | Path, data: str | bytes, between: Callable[[], None] | None = None,
                 fsync: bool = False) -> None:
    """`path` holds `data` whole, or is as it was. The temporary file beside it is made afresh, never
    opened as found (a link, FIFO or file planted at its name is removed; past a folder there, a name
    of its own is taken); `between` is called with both files on disk (a fault point); `fsync` puts
    the data on the disk before the rename."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp")
    if os.path.lexists(tmp) and not (os.path.isdir(tmp) and not os.path.islink(tmp)):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
    try:
        fd = os.open(tmp, flags, 0o644)
    except FileExistsError:  # a folder at the name (or another writer's file, made meanwhile)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.{uuid.uuid4().hex[:8]}.tmp")
        fd = os.open(tmp, flags, 0o644)
    try:
        os.write(fd, data.encode() if isinstance(data, str) else data)
        if fsync:
            os.fsync(fd)
    finally:
        os.close(fd)
    if between is not None:
        between()
    os.replace(tmp, path)



def check_output(path: str | Path, what: str, ours: Callable[[Path], bool] | None = None, kind: str = "") -> None:
    """A file a command is about to write (or replace): absent, or a regular file of one name (a
    symbolic or hard link would carry the write to another file), and with `ours`, one that `ours`
    takes for this command's earlier output (`kind` names it). One ConfigError line otherwise,
    before anything is written; the folder's writability is `sweeper.fs.check_output_file`'s."""
    import stat

    from core.errors import ConfigError, short_path

    p = Path(path).expanduser()
    shown = f"{what} {short_path(path, 120)}"
    try:
        st = os.lstat(p)
    except (FileNotFoundError, NotADirectoryError):
        return
    except OSError as err:
        raise ConfigError(f"{shown}: cannot be checked ({err.strerror or err})") from None
    if stat.S_ISDIR(st.st_mode):
        raise ConfigError(f"{shown}: is a folder; a file is written there")
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{shown}: not a regular file (a link, a device or a FIFO)")
    if st.st_nlink > 1:
        raise ConfigError(f"{shown}: hard-linked with another file (writing it would change that one too)")
    if ours is not None and not ours(p):
        raise ConfigError(f"{shown}: not {kind}, which is all it is written over; name a new file or an earlier one")
