"""An experiment's unfinished sweeps carried across machines that keep only the repository.

`park` packs every stopped sweep of the experiment whose runs the record does not all hold (its
sweep file, its commit file and its folder: ledger, space, trials with their newest checkpoint)
into one gzipped tarball, to be committed; `unpark` puts each back where no sweep of its name is,
and the sweep's next launch resumes its trials from those checkpoints. MLflow is left out: it is
a view, rebuilt by the resumed launch from the trials' folders.

What a tarball may hold is narrow, and `park` writes nothing `unpark` would refuse: plain names,
folders and regular files, and links to a sibling by its bare name (a trial's `checkpoint`).
Callers hold the experiment's lock, so one park or unpark runs at a time, and what one killed
midway left (a partial tarball, a scratch folder) is cleared by the next.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Callable

from core.errors import ConfigError, cut, one_line, short_path
from experiments.record import git_restore

LEFT_OUT = ("ray_processes.json", "status.json", "summary.json")  # the driver's processes, and views the
VIEW_SUFFIX = ".png"  # resumed launch writes again (its plots too)
MAX_BYTES = 4 * 2**30  # what a parked tarball may hold, packed or unpacked
MAX_MEMBERS = 100_000  # files, folders and links in it (a sweep of 1,000 trials holds about 10,000)
NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")  # every part of a member's name
BESIDE = (".yaml", ".commit")  # a sweep's files beside its folder
SCRATCH = ".unpark-"  # where a tarball is unpacked whole before its sweeps are moved into place
BAD_TAR = (tarfile.TarError, EOFError, OSError, zlib.error, ValueError, OverflowError, KeyError)


def park(folder: Path, prefix: str, unfinished: Callable[[Path], bool], dest: Path) -> list[str]:
    """Pack the sweeps `prefix*` in `folder` that are `unfinished` into `dest` (removed when there
    is none); the names packed. What `dest` holds and `folder` lacks is put back first, so nothing
    parked is lost. A sweep whose driver runs, or anything a tarball may not hold, is a ConfigError."""
    from sweeper.lock import lock_held, sweep_lock_path

    check_places(dest, folder)
    unpark(dest, folder, prefix)
    _clear_leftovers(dest.parent, f".{dest.name}.")
    sweeps = []
    for entry in sorted(folder.glob(f"{prefix}*")) if folder.is_dir() else []:
        if entry.is_symlink() or (not entry.is_dir() and not entry.is_file()):
            raise ConfigError(f"{short_path(entry, 100)}: not a sweep's folder or file (a link, or neither); move it away")
        if entry.is_dir() and unfinished(entry):
            if lock_held(sweep_lock_path(entry)):
                raise ConfigError(f"{short_path(entry, 100)}: its sweep runs; stop it (kill -INT the experiment's "
                                  "runner) and park it then")
            sweeps.append(entry)
    if not sweeps:
        dest.unlink(missing_ok=True)
        return []
    dest.parent.mkdir(parents=True, exist_ok=True)
    fd, partial = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.")  # a new file, never through a link
    try:
        held = _Held()
        with os.fdopen(fd, "wb") as f, tarfile.open(fileobj=f, mode="w:gz") as tar:
            for sweep in sweeps:
                for suffix in BESIDE:
                    if (beside := folder / f"{sweep.name}{suffix}").is_file() and not beside.is_symlink():
                        tar.add(beside, arcname=beside.name, filter=held.count)
                tar.add(sweep, arcname=sweep.name, filter=held.through(_packed(sweep)))
        if os.stat(partial).st_size > MAX_BYTES:
            raise held.too_much(f"{os.stat(partial).st_size:,} bytes packed")
        os.chmod(partial, 0o644)
        os.replace(partial, dest)
    finally:
        if os.path.lexists(partial):
            os.unlink(partial)
    return [s.name for s in sweeps]


class _Held:
    """What a tarball being packed holds so far, within what `unpark` takes (MAX_MEMBERS, MAX_BYTES):
    `park` never writes a tarball the next `unpark` would refuse."""

    def __init__(self):
        self.members, self.bytes = 0, 0

    def count(self, info: tarfile.TarInfo | None) -> tarfile.TarInfo | None:
        if info is not None:
            self.members, self.bytes = self.members + 1, self.bytes + info.size
            if self.members > MAX_MEMBERS:
                raise self.too_much(f"more than {MAX_MEMBERS:,} files, folders and links")
            if self.bytes > MAX_BYTES:
                raise self.too_much(f"more than {MAX_BYTES:,} bytes")
        return info

    def through(self, keep: Callable[[tarfile.TarInfo], tarfile.TarInfo | None]) -> Callable[[tarfile.TarInfo], tarfile.TarInfo | None]:
        """The tar filter `keep`, counted."""
        return lambda info: self.count(keep(info))

    @staticmethod
    def too_much(what: str) -> ConfigError:
        return ConfigError(f"the stopped sweeps hold {what}, more than a parked tarball may (it could not be put back); "
                           "nothing was parked: finish or remove some of them, and park again")


def _packed(sweep: Path) -> Callable[[tarfile.TarInfo], tarfile.TarInfo | None]:
    """A tar filter: the driver's own files and each trial's older checkpoints left out; anything
    `unpark` would refuse a ConfigError naming it."""
    older = set()
    for trial in (sweep / "trials").glob("t*"):
        newest = os.readlink(trial / "checkpoint") if (trial / "checkpoint").is_symlink() else None
        older |= {f"{sweep.name}/trials/{trial.name}/{c.name}" for c in trial.glob("checkpoint-*") if c.name != newest}

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        if info.name in older or (info.name.count("/") == 1 and (info.name.split("/")[1] in LEFT_OUT
                                                                  or info.name.endswith(VIEW_SUFFIX))):
            return None
        if (why := _refused(info, sweep.name)) is not None:
            raise ConfigError(f"{short_path(sweep.parent / info.name, 100)}: {why}; a parked sweep holds none, "
                              "move it away and park again")
        return info
    return keep


def _refused(info: tarfile.TarInfo, top: str | None = None) -> str | None:
    """Why a member may not be in a parked tarball (below its sweep `top`, when given), or None."""
    parts = info.name.split("/")
    if not all(NAME.fullmatch(p) for p in parts) or (top is not None and parts[0] != top):
        return "a name other than plain letters, digits and ._-"
    if info.isdir() or info.isreg():
        return None
    if info.issym() and len(parts) > 1 and NAME.fullmatch(info.linkname):
        return None  # a link to a sibling by its bare name, as a trial's `checkpoint`
    return "a link to a path" if info.issym() else "neither a folder, a regular file nor a link to a sibling"


def check_places(dest: Path, folder: Path) -> None:
    """The parked tarball `dest` absent, or a regular file of a size a parked tarball may have; the
    sweeps' `folder` absent, or a folder (or a link to one)."""
    if os.path.lexists(folder) and not folder.is_dir():
        raise ConfigError(f"{short_path(folder, 100)}: not a folder (a file, or a link to none), where the experiment's "
                          "sweeps go; move it away")
    try:
        st = os.lstat(dest)
    except FileNotFoundError:
        return
    except OSError as err:
        raise ConfigError(f"{short_path(dest, 100)}: cannot be read ({err.strerror or err})") from None
    if not stat.S_ISREG(st.st_mode):
        raise ConfigError(f"{short_path(dest, 100)}: not a regular file (a link, folder or FIFO), where the parked "
                          "sweeps are kept; move it away")
    if st.st_size > MAX_BYTES:
        raise ConfigError(f"{short_path(dest, 100)}: {st.st_size:,} bytes, more than a parked tarball may hold")


def unpark(dest: Path, folder: Path, prefix: str) -> list[str]:
    """Put the sweeps parked in `dest` back into `folder`, each (with its files beside it) only where
    nothing of its name is (a sweep there is the same one, or newer); the sweeps put back. A damaged
    tarball, or a member it may not hold, is one ConfigError line and puts nothing back."""
    check_places(dest, folder)
    _clear_leftovers(folder, SCRATCH)
    if not os.path.lexists(dest):
        return []
    advice = f"restore it with {git_restore(dest)}, or remove it to train those runs afresh"
    top = re.compile(rf"{re.escape(prefix)}[A-Za-z0-9_-]+")
    scratch = None
    try:
        with open(dest, "rb") as f, tarfile.open(fileobj=f, mode="r:gz") as tar:
            members = []
            for m in tar:  # headers read one by one, so a tarball of a million members stops at the bound
                if len(members) == MAX_MEMBERS:
                    raise ConfigError(f"{short_path(dest, 100)}: holds more than {MAX_MEMBERS:,} members, more than a "
                                      f"parked sweep may; {advice}")
                members.append(m)
            for m in members:
                sweep = _sweep_of(m.name)
                why = _refused(m) or (None if top.fullmatch(sweep) else f"not a sweep of this experiment ({prefix}*)")
                if why is None and "/" not in m.name and not (m.isdir() if m.name == sweep else m.isreg()):
                    why = "a sweep's folder or file of another kind"
                if why is not None:
                    raise ConfigError(f"{short_path(dest, 100)}: holds `{cut(m.name, 60)}`: {why}; {advice}")
            if len(names := {m.name for m in members}) != len(members):
                raise ConfigError(f"{short_path(dest, 100)}: names a member twice; {advice}")
            links = {m.name for m in members if m.issym()}
            if under := next((m.name for m in members if any(m.name.startswith(f"{link}/") for link in links)), None):
                raise ConfigError(f"{short_path(dest, 100)}: holds `{cut(under, 60)}` under a link; {advice}")
            if bare := sorted(m.name for m in members if m.isdir() and "/" not in m.name and f"{m.name}.yaml" not in names):
                raise ConfigError(f"{short_path(dest, 100)}: holds sweep {cut(bare[0], 60)} without its sweep file "
                                  f"{cut(bare[0], 60)}.yaml; {advice}")
            if (size := sum(m.size for m in members)) > MAX_BYTES:
                raise ConfigError(f"{short_path(dest, 100)}: unpacks to {size:,} bytes, more than a parked sweep may; {advice}")
            missing = sorted({m.name for m in members if m.isdir() and "/" not in m.name
                              and not os.path.lexists(folder / m.name)})
            wanted = [m for m in members if _sweep_of(m.name) in missing]
            made = not os.path.lexists(folder)
            folder.mkdir(parents=True, exist_ok=True)
            scratch = Path(tempfile.mkdtemp(dir=folder, prefix=SCRATCH))  # whole, then moved into place
            tar.extractall(scratch, members=wanted, filter="data")
        for m in wanted:  # each sweep file read before any sweep is put back: a damaged one puts back nothing
            if m.name.endswith(".yaml") and "/" not in m.name:
                _check_sweep_file(scratch / m.name, m.name, dest, advice)
        for m in wanted:
            if "/" not in m.name and not os.path.lexists(folder / m.name):
                os.rename(scratch / m.name, folder / m.name)
    except ConfigError:
        raise
    except BAD_TAR as err:
        # the system's error (a full disk) carries an errno and names no tarball; gzip's own (a bad CRC) carry none
        if isinstance(err, OSError) and err.errno is not None and err.filename != str(dest):
            raise ConfigError(f"{short_path(folder, 100)}: cannot put the parked sweeps back ({err.strerror}); "
                              f"{short_path(dest, 100)} is kept") from None
        raise ConfigError(f"{short_path(dest, 100)}: not a readable parked sweep ({cut(str(err), 80)}); {advice}") from None
    finally:
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)
            if made and not any(folder.iterdir()):  # a refusal leaves no folder it made
                folder.rmdir()
    return missing


def _check_sweep_file(path: Path, name: str, dest: Path, advice: str) -> None:
    """A parked sweep file is a YAML mapping naming its own sweep; one ConfigError line otherwise."""
    from trainables.safe_yaml import read_yaml

    try:
        space = read_yaml(path, shown=name)
    except ConfigError as err:
        raise ConfigError(f"{short_path(dest, 60)}: holds a damaged sweep file ({one_line(str(err), 70)}); {advice}") from None
    if space.get("name") != name.removesuffix(".yaml"):
        raise ConfigError(f"{short_path(dest, 60)}: holds sweep file {cut(name, 40)} naming another sweep; {advice}")


def _clear_leftovers(folder: Path, prefix: str) -> None:
    """Remove what a park or unpark killed midway left in `folder`, named `prefix*` (none is in use:
    the caller holds the experiment's lock); a link is removed, never followed."""
    for left in folder.glob(glob.escape(prefix) + "*") if folder.is_dir() else []:
        if left.is_dir() and not left.is_symlink():
            shutil.rmtree(left, ignore_errors=True)
        else:
            left.unlink(missing_ok=True)


def _sweep_of(member: str) -> str:
    """The sweep a member belongs to: its first part, without the suffix of a file beside the folder."""
    return member.split("/", 1)[0].removesuffix(".yaml").removesuffix(".commit")
