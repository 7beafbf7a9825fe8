"""An experiment's unfinished sweeps carried across machines that keep only the repository.

`park` packs every stopped sweep of the experiment whose runs the record does not all hold (its
sweep file, its commit file and its folder: ledger, space, trials with their newest checkpoint)
into one gzipped tarball, to be committed; `unpark` puts each back where no sweep of its name is,
and the sweep's next launch resumes its trials from those checkpoints. MLflow is left out: it is
a view, rebuilt by the resumed launch from the trials' folders.
"""

from __future__ import annotations

import os
import shutil
import tarfile
import tempfile
import zlib
from pathlib import Path
from typing import Callable

from core.errors import ConfigError, cut, short_path

LEFT_OUT = ("ray_processes.json",)  # the driver's processes on the machine that parked it
MAX_BYTES = 4 * 2**30  # what a parked tarball may unpack to


def park(folder: Path, prefix: str, unfinished: Callable[[Path], bool], dest: Path) -> list[str]:
    """Pack the sweeps `prefix*` in `folder` that are `unfinished` into `dest` (removed when there
    is none); the names packed. A sweep whose driver runs is a ConfigError: stop it first."""
    from sweeper.lock import lock_held, sweep_lock_path

    sweeps = [p for p in sorted(folder.glob(f"{prefix}*")) if p.is_dir() and not p.is_symlink() and unfinished(p)]
    for sweep in sweeps:
        if lock_held(sweep_lock_path(sweep)):
            raise ConfigError(f"{short_path(sweep, 100)}: its sweep runs; stop it (kill -INT the experiment's "
                              "runner) and park it then")
    if not sweeps:
        dest.unlink(missing_ok=True)
        return []
    dest.parent.mkdir(parents=True, exist_ok=True)
    partial = dest.with_name(f".{dest.name}.partial")
    with tarfile.open(partial, "w:gz") as tar:
        for sweep in sweeps:
            for beside in sorted(folder.glob(f"{sweep.name}.*")):  # its sweep file and commit file
                tar.add(beside, arcname=beside.name)
            tar.add(sweep, arcname=sweep.name, filter=_newest_checkpoints_only(sweep))
    os.replace(partial, dest)
    return [s.name for s in sweeps]


def _newest_checkpoints_only(sweep: Path) -> Callable[[tarfile.TarInfo], tarfile.TarInfo | None]:
    """A tar filter that leaves out the driver's own files and every trial's older checkpoints."""
    older = set()
    for trial in (sweep / "trials").glob("t*"):
        newest = os.readlink(trial / "checkpoint") if (trial / "checkpoint").is_symlink() else None
        older |= {f"{sweep.name}/trials/{trial.name}/{c.name}" for c in trial.glob("checkpoint-*") if c.name != newest}

    def keep(info: tarfile.TarInfo) -> tarfile.TarInfo | None:
        return None if info.name in older or Path(info.name).name in LEFT_OUT else info
    return keep


def unpark(dest: Path, folder: Path, prefix: str) -> list[str]:
    """Put the sweeps parked in `dest` back into `folder`, each only where nothing of its name is
    (a sweep there is the same one, or newer); the sweep folders put back. A damaged tarball, or a
    member outside the experiment's own sweeps, is one ConfigError line and puts nothing back."""
    if not dest.exists():
        return []
    advice = f"restore it with `git checkout -- {dest.name}`, or remove it to train those runs afresh"
    folder.mkdir(parents=True, exist_ok=True)
    scratch = Path(tempfile.mkdtemp(dir=folder, prefix=".unpark-"))  # whole, then moved into place
    try:
        with tarfile.open(dest, "r:gz") as tar:
            members = tar.getmembers()
            tops = sorted({m.name.split("/", 1)[0] for m in members})
            stranger = next((t for t in tops if not t.startswith(prefix) or t in (".", "..")), None)
            if stranger is not None:
                raise ConfigError(f"{short_path(dest, 100)}: holds `{cut(stranger, 60)}`, not a sweep of this "
                                  f"experiment ({prefix}*); {advice}")
            if (size := sum(m.size for m in members)) > MAX_BYTES:
                raise ConfigError(f"{short_path(dest, 100)}: unpacks to {size} bytes, more than the {MAX_BYTES} a "
                                  f"parked sweep may; {advice}")
            tar.extractall(scratch, filter="data")  # no absolute path, `..`, device or link out of it
        put_back = [t for t in tops if not os.path.lexists(folder / t)]
        for top in put_back:
            os.rename(scratch / top, folder / top)
    except (tarfile.TarError, EOFError, OSError, zlib.error) as err:
        raise ConfigError(f"{short_path(dest, 100)}: not a readable parked sweep ({cut(str(err), 80)}); {advice}") from None
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return [t for t in put_back if (folder / t).is_dir()]
