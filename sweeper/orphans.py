"""The processes of a sweep's local Ray, written down so that none outlives its driver.

`ray.init()` on a laptop starts a GCS server, a raylet, agents and workers as children of the
driver. A driver that exits normally stops them; one killed with SIGKILL cannot, and some (the
dashboard and runtime-env agents) run on forever. `record` writes the driver's descendants (pid and
start time) to `<sweep dir>/ray_processes.json`, signed with a key of this user's that never lives
in a sweep folder (`key_path`, mode 0600); `end_orphans`, called by the next launch of the sweep
while it holds the sweep's lock, ends every recorded process still running with its recorded start
time, and their children, unless the recorded driver itself still runs (a resident service, whose
Ray serves its other sweeps: its processes are nobody's orphans). A record whose signature does
not check (planted, edited, or another user's) ends nothing.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import json
import os
import re
import secrets
import tempfile
from pathlib import Path

import psutil

from core import json_text
from core.errors import MAX_LINE, ConfigError, cut, short_path
from core.files import write_atomic

PROCESSES_FILE = "ray_processes.json"
MAX_FILE_BYTES = 1 << 20


def key_path() -> Path:
    state = os.environ.get("XDG_STATE_HOME", "")
    state = state if os.path.isabs(state) else str(Path.home() / ".local" / "state")  # a relative one is ignored (XDG)
    return Path(state) / "dat-sweeper" / "process-record.key"


def _key() -> bytes:
    """This user's signing key, made on first use (readable by this user only). A key file that is
    not the 64 hex digits this writes (emptied by a kill or a full disk between its creation and its
    write: a key anyone knows) is replaced by a fresh one, so records signed under it end nothing."""
    path = key_path()
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    check_places(None)
    if (key := _read_key(path)) is not None:
        return key
    fd, tmp = tempfile.mkstemp(prefix=".process-record.key.", dir=path.parent)  # mode 0600, written whole first
    try:
        with os.fdopen(fd, "w") as f:
            f.write(secrets.token_hex(32))
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)  # the first key, whole at once
        except FileExistsError:  # another process's key made at this moment (kept), or a damaged one (replaced)
            if _read_key(path) is None:
                os.replace(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
    if (key := _read_key(path)) is None:  # another writer's half-made key at this moment: sign nothing we can trust
        raise ConfigError(f"{short_path(path, 160)}: the signing key of local Ray records is not 64 hex digits; remove it")
    return key


def _read_key(path: Path) -> bytes | None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as f:
        key = f.read(256).strip()
    return key if re.fullmatch(rb"[0-9a-f]{64}", key) else None


def check_places(sweep_dir: Path | None) -> None:
    """Read-only, before a launch takes the sweep's lock: the record of its local Ray and this
    user's signing key are regular files where they exist (a FIFO would block, a folder fail)."""
    places = [(key_path(), "the signing key of local Ray records")]
    places += [(Path(sweep_dir) / PROCESSES_FILE, "the record of the sweep's local Ray")] if sweep_dir is not None else []
    for path, what in places:
        if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):
            raise ConfigError(f"{short_path(path, 160)}: not a file this sweeper wrote ({what}) but a folder, a link or "
                              "a FIFO; move it away")


def _signature(processes: list[dict]) -> str:
    body = json.dumps(processes, sort_keys=True).encode()
    return hmac.new(_key(), body, hashlib.sha256).hexdigest()


def record(sweep_dir: Path) -> int:
    """Write this driver's descendants (its local Ray), signed. Returns how many."""
    procs = []
    for p in psutil.Process().children(recursive=True):
        try:
            procs.append({"pid": p.pid, "started": p.create_time(), "name": p.name()})
        except psutil.Error:
            continue
    driver = {"pid": os.getpid(), "started": psutil.Process().create_time()}
    write_atomic(Path(sweep_dir) / PROCESSES_FILE, json.dumps({
        "driver": os.getpid(), "driver_started": driver["started"], "processes": procs,
        "signature": _signature([driver, *procs])}))
    return len(procs)


def _recorded(path: Path) -> tuple[tuple[int, float] | None, list[tuple[int, float]]]:
    """(the driver's (pid, start time), its processes' (pid, start time)) of a record whose
    signature checks; (None, []) for anything else."""
    try:
        if path.is_symlink() or not path.is_file():
            return None, []
        with open(path, "rb") as f:
            data = json_text.loads(f.read(MAX_FILE_BYTES))
        procs = data["processes"]
        driver = {"pid": data["driver"], "started": data["driver_started"]}
        if not key_path().is_file():  # no key yet: no record of this user's can be signed (none is made to check)
            return None, []
        if not hmac.compare_digest(str(data.get("signature", "")), _signature([driver, *procs])):
            return None, []
        return (int(driver["pid"]), float(driver["started"])), [(int(p["pid"]), float(p["started"])) for p in procs]
    except (OSError, ValueError, KeyError, TypeError, AttributeError, OverflowError):
        return None, []  # cut by a kill, or not a record of ours: nothing we can safely call ours


def still_there(recorded: list[tuple[int, float]]) -> list[psutil.Process]:
    """The recorded processes, (pid, start time), that still exist, zombies included; a pid now of
    another process (its start time differs) and this process itself are left out."""
    found = []
    for pid, started in recorded:
        try:
            proc = psutil.Process(pid)
            if abs(proc.create_time() - started) < 0.01 and pid != os.getpid():
                found.append(proc)
        except psutil.Error:
            continue
    return found


def _runs(process: tuple[int, float]) -> bool:
    """Whether the process (pid, start time) still runs: this one, or another that is not a zombie."""
    if process[0] == os.getpid():
        return True
    try:
        return any(p.status() != psutil.STATUS_ZOMBIE for p in still_there([process]))
    except psutil.Error:
        return False


def end_orphans(sweep_dir: Path, grace_s: float = 5.0) -> list[str]:
    """End the recorded processes of an earlier driver of this sweep that still run (SIGTERM, then
    SIGKILL after `grace_s`). Call only while holding the sweep's lock. Returns their names."""
    path = Path(sweep_dir) / PROCESSES_FILE
    check_places(sweep_dir)  # this driver could not write its own record there
    driver, recorded = _recorded(path)
    if driver is not None and _runs(driver):
        return []  # the driver runs on (a resident service): its Ray is not orphaned
    alive = still_there(recorded)
    family = {p.pid: p for p in alive}
    for proc in alive:  # workers a recorded raylet started after the record was written
        try:
            family.update({c.pid: c for c in proc.children(recursive=True)})
        except psutil.Error:
            continue
    names = []
    for proc in family.values():
        try:
            names.append(proc.name())
            proc.terminate()
        except psutil.Error:
            continue
    _, left = psutil.wait_procs(list(family.values()), timeout=grace_s)
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            continue
    psutil.wait_procs(left, timeout=grace_s)  # "ended" means gone: their ports and files are free when this returns
    return names  # the record stays: its processes are gone (a pid and start time match no one), and the next Ray's replaces it


def ended_note(ended: list[str]) -> str:
    """The line that says which leftover processes a launch ended."""
    return f"ended {len(ended)} processes of this sweep's earlier local Ray ({', '.join(sorted(set(ended)))})"


@contextlib.contextmanager
def told_in_refusal(ended: list[str]):
    """A refusal raised inside names the leftover processes ended before it, in its one line (a
    refused resume prints nothing else)."""
    try:
        yield
    except ConfigError as err:
        if not ended:
            raise
        told = f" [ended first: {len(ended)} leftover Ray processes of its killed driver]"
        raise ConfigError(cut(str(err), MAX_LINE - len(told) - len("error: ")) + told) from None
