"""What the tests of hostile input share: run the real entry point, and check that a refusal
cost one short line, exit code 2, no traceback, and nothing written or deleted.

A folder's snapshot is every path under it (links not followed) with its kind, size and bytes'
hash, so a file rewritten with the same size, a link turned into a file, or a file left behind
all show as a difference.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import stat
import subprocess
import sys
import tempfile
from pathlib import Path

from tests.conftest import ROOT, sweeper_env
from tests.forked_cli import ForkedCli
from core.errors import MAX_LINE

SWEEPER = Path(sys.executable).with_name("sweeper")  # the installed entry point, as a user runs it
ENV = sweeper_env()
_forked: ForkedCli | None = None


def _warm() -> ForkedCli:
    """The warm interpreter the commands fork from, one per test process."""
    global _forked
    if _forked is None:
        _forked = ForkedCli(ENV, preload=("trainables.train",))
        atexit.register(_forked.close)
    return _forked


def sweeper(*args, cwd: Path, timeout: float = 120, env: dict | None = None) -> subprocess.CompletedProcess:
    """`sweeper ARGS` in a process of its own: a fork of a warm interpreter (tests/forked_cli.py), or,
    with variables of its own in `env` (read at import), the installed entry point started afresh."""
    if env:
        cmd = [str(SWEEPER)] if SWEEPER.exists() else [sys.executable, "-m", "sweeper.cli"]
        return subprocess.run([*cmd, *map(str, args)], cwd=cwd, env={**ENV, **env}, capture_output=True,
                              text=True, timeout=timeout)
    return _warm().run(*args, cwd=cwd, timeout=timeout)


def sweeper_watching_ray(*args, cwd: Path, env: dict | None = None,
                         timeout: float = 200) -> tuple[subprocess.CompletedProcess, bool]:
    """`sweeper ARGS` afresh, and whether it started a Ray node here (Ray keeps its sessions under $RAY_TMPDIR/ray)."""
    with tempfile.TemporaryDirectory() as ray_tmp:
        r = sweeper(*args, cwd=cwd, env={**(env or {}), "RAY_TMPDIR": ray_tmp}, timeout=timeout)
        return r, any(Path(ray_tmp).glob("ray/session_*"))


def module(name: str, *args, cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    """`python -m NAME ARGS` of this checkout, in a process of its own (as `sweeper` above)."""
    return _warm().run(*args, cwd=cwd, timeout=timeout, module=name)


def _digest(path: Path, size: int, whole: int = 64 * 2**20) -> str:
    """sha256 of the file's bytes; of its first and last MiB beyond `whole` (a sparse file of a
    TiB stands for a huge one in the tests)."""
    h = hashlib.sha256()
    with open(path, "rb") as f:
        if size <= whole:
            h.update(f.read())
        else:
            h.update(f.read(2**20))
            f.seek(size - 2**20)
            h.update(f.read())
    return h.hexdigest()


def snapshot(root: Path) -> dict[str, tuple]:
    """Every path under `root` -> (kind, size, mtime, digest of its bytes) or a link's target."""
    out: dict[str, tuple] = {}
    for dirpath, dirnames, filenames in os.walk(root):
        for name in dirnames + filenames:
            path = Path(dirpath) / name
            st = os.lstat(path)
            rel = str(path.relative_to(root))
            if stat.S_ISLNK(st.st_mode):
                out[rel] = ("link", os.readlink(path))
            elif stat.S_ISREG(st.st_mode):
                out[rel] = ("file", st.st_size, st.st_mtime_ns, _digest(path, st.st_size))
            else:
                out[rel] = ("dir" if stat.S_ISDIR(st.st_mode) else "other",)
    return out


def assert_refused(r: subprocess.CompletedProcess, *must_contain: str, root: Path | None = None,
                   before: dict | None = None) -> str:
    """Exit 2, one line of at most MAX_LINE characters on stderr (`error: ` included) holding every
    `must_contain`, no traceback, and `root` as it was in `before`. Returns the line."""
    err = r.stderr.strip()
    assert r.returncode == 2, (r.returncode, r.stdout[-1000:], r.stderr[-3000:])
    assert "Traceback" not in r.stderr, r.stderr[-3000:]
    assert err and "\n" not in err, err[:3000]
    assert len(err) <= MAX_LINE, (len(err), err)
    for text in must_contain:
        assert text in err, (text, err)
    if root is not None:
        assert snapshot(root) == before, "a refusal wrote or deleted something"
    return err


__all__ = ["ROOT", "ENV", "SWEEPER", "sweeper", "module", "snapshot", "assert_refused"]


HALF_DONE = """
import os, signal, sqlite3, sys
db = sqlite3.connect(sys.argv[1], isolation_level=None)
db.execute("pragma cache_size = 1")  # the write spills into the file, its old pages into the journal
db.execute("begin")
db.execute("create table half_done (x)")
db.executemany("insert into half_done values (?)", [(i,) for i in range(50000)])
os.kill(os.getpid(), signal.SIGKILL)
"""
JOURNAL_MAGIC = bytes.fromhex("d9d505f920a163d7")


def kill_mid_write(db: Path) -> None:
    """An SQLite writer SIGKILLed inside a transaction: a hot journal left beside `db`."""
    subprocess.run([sys.executable, "-c", HALF_DONE, str(db)], check=False)
    assert Path(f"{db}-journal").read_bytes()[:8] == JOURNAL_MAGIC
