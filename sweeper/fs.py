"""Can we write there, read that? Asked before anything starts, without leaving anything behind.

Permission bits alone do not tell (root ignores them; a read-only mount or a full disk does not
show in them), so `check_writable` writes: PROBE_BYTES of real data, flushed to the disk with
fsync, in an unnamed probe file (O_TMPFILE: the folder is not changed) or, where the file system
has none, a hidden one it then removes. An empty probe file would pass on a full disk (making a
file needs an inode, not a block). Every refusal is one ConfigError line naming the flag and the
path.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
import urllib.parse
from pathlib import Path
from typing import Callable

from core import json_text
from core.files import check_output
from core.errors import ConfigError, cut, expand_user

PROBE_BYTES = 64 * 1024  # more than a file system's reserve of a few blocks; what a first report needs


def nearest_existing(path: Path) -> Path:
    """`path` or its nearest ancestor that stands on the disk (a dangling link counts: it stands)."""
    while not os.path.lexists(path) and path != path.parent:
        path = path.parent
    return path


def check_writable(path: str | Path, what: str) -> None:
    """Raise a one-line ConfigError unless `path` (a folder, existing or not) could be created and
    written: PROBE_BYTES are written, fsynced and removed in the nearest existing ancestor."""
    target = expand_user(path)
    try:
        target = target.resolve()
        if len(str(target)) > 3000 or any(len(part.encode()) > 255 for part in target.parts):
            raise ConfigError(f"{what} {cut(str(path), 120)}: path too long for the file system")
        probe_dir = nearest_existing(target)
        if not probe_dir.is_dir():
            raise ConfigError(f"{what} {cut(str(path), 120)}: {cut(str(probe_dir), 80)} is a file, not a folder")
        fd, name = _probe_file(probe_dir)
        try:
            block = b"\0" * PROBE_BYTES
            written = 0
            while written < PROBE_BYTES:
                written += os.write(fd, block[written:])
            os.fsync(fd)
        finally:
            os.close(fd)
            if name is not None:
                os.unlink(name)
    except OSError as err:
        raise ConfigError(f"{what} {cut(str(path), 120)}: cannot write there ({err.strerror or err})") from None


def _probe_file(folder: Path) -> tuple[int, str | None]:
    """A file to probe `folder` with, open for writing, and its name (None: it has none). An unnamed
    one (O_TMPFILE) where the file system makes it: the folder is left as it was, its time
    included, and a kill leaves nothing behind; else a hidden file there, removed after."""
    try:
        return os.open(folder, os.O_TMPFILE | os.O_WRONLY, 0o600), None
    except OSError as err:
        if err.errno not in (errno.EOPNOTSUPP, errno.EISDIR, errno.EINVAL):  # EISDIR: a kernel without O_TMPFILE
            raise
    return tempfile.mkstemp(prefix=".sweeper-probe-", dir=folder)


def check_output_file(path: str | Path, what: str, ours: Callable[[Path], bool] | None = None, kind: str = "") -> None:
    """A file this command will write (or replace): `core.files.check_output` (absent, or a regular
    file of one name, `ours` with it), and its folder writable (`check_writable`)."""
    check_output(path, what, ours, kind)
    check_writable(expand_user(path).parent, what)


def read_limited(path: str | Path, what: str, max_bytes: int) -> bytes:
    """The bytes of a regular file of at most `max_bytes`, or one ConfigError line: no such file,
    a folder, a FIFO or device (which would block or never end), too large, unreadable."""
    p = expand_user(path)
    try:
        fd = os.open(p, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise ConfigError(f"{what} {cut(str(path), 120)}: no such file") from None
    except IsADirectoryError:
        raise ConfigError(f"{what} {cut(str(path), 120)}: is a folder; a file is expected") from None
    except OSError as err:
        raise ConfigError(f"{what} {cut(str(path), 120)}: cannot be read ({err.strerror or err})") from None
    try:
        st = os.fstat(fd)
        if stat.S_ISDIR(st.st_mode):
            raise ConfigError(f"{what} {cut(str(path), 120)}: is a folder; a file is expected")
        if not stat.S_ISREG(st.st_mode):
            raise ConfigError(f"{what} {cut(str(path), 120)}: not a regular file")
        if st.st_size > max_bytes:
            raise ConfigError(f"{what} {cut(str(path), 120)}: {st.st_size:,} bytes; at most {max_bytes:,} are read")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(max_bytes + 1)
    except OSError as err:
        raise ConfigError(f"{what} {cut(str(path), 120)}: cannot be read ({err.strerror or err})") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise ConfigError(f"{what} {cut(str(path), 120)}: more than {max_bytes:,} bytes; at most that many are read")
    return data


def read_json_limited(path: str | Path, what: str, max_bytes: int, where: str):
    """The JSON document of a file read under `read_limited`; one ConfigError line naming `where`
    if it is not JSON (or nested too deep to parse)."""
    raw = read_limited(path, what, max_bytes)
    try:
        return json_text.loads(raw.decode("utf-8"))
    except RecursionError:
        raise ConfigError(f"{where}: not JSON this command reads: nested too deep") from None
    except (UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{where}: not JSON: {cut(str(err), 80)}") from None


def first_missing(path: str | Path) -> Path | None:
    """The outermost folder of `path` that does not exist yet (what creating it would make), or None."""
    path, missing = Path(path), None
    while not path.exists() and not path.is_symlink() and path != path.parent:
        path, missing = path.parent, path
    return missing


def narrow_modes(paths: list[Path], umask: int) -> None:
    """Take away, from each path and everything under it, the permission bits `umask` denies: what a
    process with another umask (the resident service) made for a caller follows the caller's. Links
    are not followed; a path that vanished meanwhile is skipped. The owner's own bits are kept."""
    umask &= 0o077
    if not umask:
        return
    for name in (path for top in paths for path in _tree(top)):
        try:
            st = os.lstat(name)
            if not stat.S_ISLNK(st.st_mode) and stat.S_IMODE(st.st_mode) & umask:
                os.chmod(name, stat.S_IMODE(st.st_mode) & ~umask)
        except OSError:
            continue


def _tree(top: str | Path):
    """`top` and, for a folder (not a link to one), every path under it, each once."""
    yield top
    if os.path.isdir(top) and not os.path.islink(top):
        for root, dirs, files in os.walk(top):  # links to folders are not followed
            yield from (os.path.join(root, name) for name in dirs + files)


WAL_MAGIC = (b"\x37\x7f\x06\x82", b"\x37\x7f\x06\x83")  # a write-ahead log's first 4 bytes, then format 3007000
WAL_VERSION = (3007000).to_bytes(4, "big")
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")  # a rollback journal's first 8 bytes


def sqlite_immutable(path: str | Path) -> bool:
    """Whether an SQLite file read read-only may be opened `immutable=1`: all of its data is in
    itself, and SQLite would otherwise leave a -wal and -shm file beside it. So for a database in
    WAL mode (header bytes 18-19) without a -wal file, for any database beside a -wal that holds no
    log (SQLite ignores it but still makes a -shm to read it), and for any beside a foreign -journal
    (a read-only open fails on it; a killed writer's journal is refused by the caller, not skipped),
    but never for one beside a log: that holds committed data."""
    header = _head(Path(path), 20)
    if header[:16] != b"SQLite format 3\x00":
        return False
    wal = beside(path, "-wal")
    if wal == "log":  # committed data SQLite must read, whatever else stands beside it
        return False
    if beside(path, "-journal") == "foreign":
        return True
    return header[18:20] == b"\x02\x02" if wal == "none" else True


def sqlite_url(path: str | Path) -> str:
    """SQLAlchemy's URL of an SQLite database file (made when missing): the path quoted, as SQLAlchemy
    unquotes it, so a folder named with ?, % or braces names the file it says (Optuna fills
    braces in; MLflow does not unquote: an MLflow store's path takes no quoting, see `tracking_uri`)."""
    return "sqlite:///" + urllib.parse.quote(str(path), safe="/")


def sqlite_read_only_uri(path: str | Path) -> str:
    """SQLite's own URI (for `sqlite3.connect(uri=True)`) of a database opened read-only, never
    created: the resolved path quoted (spaces, #, ?, %), and never a -wal or -shm file left beside
    it (`sqlite_immutable`)."""
    path = Path(path).resolve()
    return f"file:{urllib.parse.quote(str(path), safe='/')}?mode=ro{'&immutable=1' * sqlite_immutable(path)}"


def sqlite_read_only_url(path: str | Path) -> str:
    """SQLAlchemy's URL of the same (`sqlite_read_only_uri`): its path quoted once more, as
    SQLAlchemy unquotes it before handing it to SQLite."""
    location, query = sqlite_read_only_uri(path).split("?", 1)
    return f"sqlite+pysqlite:///{urllib.parse.quote(location, safe='/:')}?{query}&uri=true"


def beside(path: str | Path, suffix: str) -> str:
    """What stands beside an SQLite database under the name of its `suffix` file ("-journal" or
    "-wal"): "none"; "log" (a rollback journal's or a write-ahead log's header: data SQLite reads);
    "spent" (what SQLite leaves holding nothing: an empty file, or a journal whose first byte is 0,
    which SQLite does not treat as hot); or "foreign" (anything else: not a regular file, a header of
    neither kind, one this process cannot read; a read-write open deletes it as its own)."""
    name = Path(f"{path}{suffix}")
    try:  # one open, then its descriptor: a journal SQLite deletes or truncates meanwhile is never read as foreign
        fd = os.open(name, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW)
    except OSError as err:  # gone; or a link, or one this process cannot read
        return "none" if isinstance(err, FileNotFoundError) else "foreign"
    try:
        head = os.read(fd, 8) if stat.S_ISREG(os.fstat(fd).st_mode) else None
    except OSError:
        head = None
    finally:
        os.close(fd)
    if not head:
        return "foreign" if head is None else "spent"
    if suffix == "-journal":
        return "log" if head == JOURNAL_MAGIC else "spent" if head[:1] == b"\0" else "foreign"
    return "log" if (head[:4] in WAL_MAGIC and head[4:] == WAL_VERSION) else "foreign"


def foreign_beside(path: str | Path) -> Path | None:
    """The -journal or -wal beside an SQLite database that SQLite did not write (`beside`); None
    where there is none."""
    return next((Path(f"{path}{suffix}") for suffix in ("-journal", "-wal") if beside(path, suffix) == "foreign"),
                None)


def check_beside(path: str | Path, what: str) -> None:
    """One line when a file SQLite did not write stands under a -journal or -wal name beside the
    database at `path` (`what`); a read-write open of the database would delete it as its own."""
    if (stray := foreign_beside(path)) is not None:
        raise ConfigError(f"{cut(str(stray), 120)}: not a file SQLite wrote beside {what}; move it away (a write to "
                          f"{what} would delete it as SQLite's own)")


def why_unreadable(path: str | Path, err: BaseException) -> str:
    """What is wrong with an SQLite file a read failed on, in a few words: the file's own state where
    it shows (empty, not SQLite), else the innermost cause's first line (a library's wrapper, such
    as Optuna's, says only that a commit failed)."""
    head = _head(Path(path), 16)
    if head == b"" and os.path.isfile(path):
        return "an empty file"
    if head and head != b"SQLite format 3\x00":
        return "not an SQLite database"
    while err.__cause__ is not None or (err.__context__ is not None and not err.__suppress_context__):
        err = err.__cause__ or err.__context__
    first = (str(err).strip().splitlines() or [""])[0]
    return f"{type(err).__name__}: {cut(first, 100)}"


def journal_left(path: str | Path) -> bool:
    """Whether a rollback journal stands beside an SQLite database (a live writer's, or a killed
    one's that the next writer rolls back)."""
    return beside(path, "-journal") == "log"


def half_done(where: str, rolled_back_by: str) -> ConfigError:
    """The line a read gives for a database beside a journal a killed writer left (`journal_left`)."""
    return ConfigError(f"{where}: a write a killed driver left half-done (its -journal); {rolled_back_by} rolls it "
                       "back, a read cannot")


def roll_back(path: str | Path) -> bool:
    """What a killed writer left half-done in an SQLite database rolled back, as the next writer
    would (SQLite does it on a read-write open; a live writer's journal is waited on, not touched).
    True when there was a rollback."""
    if not journal_left(path):
        return False
    import sqlite3

    with contextlib.closing(sqlite3.connect(path, timeout=30)) as db:
        db.execute("pragma schema_version").fetchone()  # a read: SQLite rolls a hot journal back first
    return not journal_left(path)


def _head(path: Path, n: int) -> bytes:
    """The first `n` bytes of a regular file (fewer if it is shorter); b"" for anything else."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO in its place never blocks the read
    except OSError:
        return b""
    try:
        return os.read(fd, n) if stat.S_ISREG(os.fstat(fd).st_mode) else b""
    except OSError:
        return b""
    finally:
        os.close(fd)
