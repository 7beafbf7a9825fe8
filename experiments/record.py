"""A committed record of runs: one gzipped JSON file, written so that the same runs give the same bytes."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import gzip
import json
import math
import os
import re
import stat
import time
from pathlib import Path
from typing import Callable, Iterable, Iterator

from core.errors import ConfigError, brief, cut, short_path


MAX_PACKED, MAX_TEXT = 256 * 2**20, 2**30  # a record's bytes on disk, and as JSON text


def git_restore(path: Path) -> str:
    """The command that puts a committed file back, run from the repository's root (where the
    experiments run): its path from there, or as given when it lies elsewhere."""
    root = Path(__file__).resolve().parent.parent
    try:
        shown = cut(str(Path(path).resolve().relative_to(root)), 120)
    except ValueError:
        shown = short_path(path, 40)
    return f"`git checkout -- {shown}`"


def read_record(path: Path, empty: Callable[[], dict]) -> dict:
    """The record at `path`, or `empty()` where there is none yet; a record that is not a regular
    file of gzipped JSON holding an object (its `runs`, where there are, a list of objects) is one
    ConfigError line."""
    import io
    import zlib

    from core import json_text
    from sweeper.curves import MAX_RECORD_VALUES
    from sweeper.fs import read_limited

    if not os.path.lexists(path):
        return empty()
    raw = read_limited(path, "record", MAX_PACKED)
    advice = f"restore it with {git_restore(path)}"
    try:
        with gzip.GzipFile(fileobj=io.BytesIO(raw)) as f:
            text = f.read(MAX_TEXT + 1)
        if len(text) > MAX_TEXT:
            raise ConfigError(f"{short_path(path, 100)}: unpacks to more than {MAX_TEXT:,} bytes; {advice}")
        if (values := text.count(b",")) > MAX_RECORD_VALUES:  # parsed, tiny values take ~25x their text
            raise ConfigError(f"{short_path(path, 100)}: about {values:,} values, more than a record holds "
                              f"({MAX_RECORD_VALUES:,}); {advice}")
        data = json_text.loads(text)
    except (OSError, EOFError, zlib.error, ValueError) as err:  # not gzip, cut short, not JSON (or too deep)
        if isinstance(err, ConfigError):
            raise
        raise ConfigError(f"{short_path(path, 100)}: not a readable record ({cut(str(err), 80)}); {advice}") from None
    runs = data.get("runs", []) if isinstance(data, dict) else None
    if not isinstance(runs, list) or not all(isinstance(r, dict) for r in runs):
        raise ConfigError(f"{short_path(path, 100)}: not a record (an object whose `runs` is a list of objects); {advice}")
    return data


MAX_JSON_RECORD = 64 * 2**20  # a committed plain-JSON results file (the earlier experiments')


def read_json_rows(path: Path, keys: dict[str, type | tuple[type, ...]], *, keyed: bool = False,
                   under: str | None = None) -> dict | list:
    """A committed plain-JSON results file: an object of rows by name (`keyed`) or a list of rows
    (`under`: the list is that key of an object), each an object holding `keys` of those types;
    where there is none yet, an empty one (keyed) or []. Anything
    else (a merge's conflict markers, a cut file, JSON nested past the parser, a row of another
    shape) is one ConfigError line with the command that restores it."""
    from core import json_text
    from sweeper.fs import read_limited

    if not os.path.lexists(path):
        return {} if keyed else []
    advice = f"restore it with {git_restore(path)}"
    raw = read_limited(path, "results file", MAX_JSON_RECORD)  # a FIFO, a folder, too large: its own line
    try:
        data = json_text.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as err:
        raise ConfigError(f"{short_path(path, 100)}: not JSON ({cut(str(err), 60)}); {advice}") from None
    if under is not None:
        data = data.get(under) if isinstance(data, dict) else None
    rows = data.values() if keyed and isinstance(data, dict) else data if not keyed and isinstance(data, list) else None
    shape = (f"{'an object of rows by name' if keyed else 'a list of rows'}{f' under {under}' if under else ''}, "
             f"each an object with {', '.join(keys)}")
    if rows is None or not all(isinstance(r, dict) and all(_of(r.get(k), t) for k, t in keys.items()) for r in rows):
        raise ConfigError(f"{short_path(path, 100)}: not a results file of this tool ({shape}); {advice}")
    return data


def _of(value, kind: type | tuple[type, ...]) -> bool:
    """`value` is of `kind`; a number also finite and no bool (JSON's NaN and true are no results)."""
    if isinstance(value, bool) and bool not in (kind if isinstance(kind, tuple) else (kind,)):
        return False
    return isinstance(value, kind) and (not isinstance(value, float) or math.isfinite(value))


class RecordBusy(Exception):
    """The record's lock was not free within the wait asked for."""


@contextlib.contextmanager
def record_lock(path: Path, wait_s: float | None = None) -> Iterator[None]:
    """Hold the lock of the record's folder for one read-change-write, so that two writers (a
    running experiment's export, an import by hand) do not drop each other's runs. The lock is the
    folder itself (flock on its descriptor): nothing is made beside the record, so a refused verb
    leaves the folder as it was. With `wait_s`, RecordBusy when another writer holds it longer."""
    folder = path.parent
    try:
        fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as err:
        raise ConfigError(f"{short_path(folder, 100)}: the record's folder cannot be opened "
                          f"({err.strerror or err})") from None
    try:
        deadline = None if wait_s is None else time.monotonic() + wait_s
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (fcntl.LOCK_NB if deadline is not None else 0))
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    raise RecordBusy(f"{path.name} is being written by another process for over {wait_s:.0f} s") from None
                time.sleep(0.2)
        yield  # the kernel drops the lock when the descriptor closes
    finally:
        os.close(fd)


def write_record(path: Path, data: dict) -> None:
    """Replace the record at `path` atomically (mtime 0 and sorted keys: the same runs, the same bytes)."""
    import tempfile

    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")  # a new file, never through a link
    try:
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(path.with_suffix(".tmp").name, "wb", fileobj=raw, mtime=0) as f:
            f.write(json.dumps(data, separators=(",", ":"), sort_keys=True).encode())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    finally:
        if os.path.lexists(tmp):
            os.unlink(tmp)


def append_new(runs: list[dict], have: set, found: Iterable[tuple[tuple, dict]]) -> int:
    """Append to a record's `runs` each run of `found` (key, run) whose key is not in `have` (which
    grows with them); the number appended."""
    added = 0
    for key, run in found:
        if key not in have:
            runs.append(run)
            have.add(key)
            added += 1
    return added


def config_hash(config: dict) -> str:
    """SHA-256 of a trial config as canonical JSON (sorted keys, no spaces): the same config, the same hash."""
    import hashlib

    return hashlib.sha256(json.dumps(config, separators=(",", ":"), sort_keys=True).encode()).hexdigest()


def head_commit(root: Path) -> str | None:
    """The commit checked out at `root` (with "-dirty" when tracked files differ from it), or None outside git."""
    import subprocess

    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True, cwd=root).stdout.strip()
        dirty = subprocess.run(["git", "diff", "--quiet", "HEAD", "--"], cwd=root).returncode != 0
    except (OSError, subprocess.CalledProcessError):
        return None
    return commit + ("-dirty" if dirty else "")


def read_commit(path: Path) -> str | None:
    """The commit a sweep was first launched from, as `head_commit` wrote it beside the sweep; None
    where there is no such file or it is empty (launched outside git). Anything else (a link, a FIFO,
    a device, a long file, or text that is no commit) is a ConfigError line: a record keeps no
    provenance it cannot vouch for."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        return None
    except OSError as err:
        why = "a link, not a regular file" if err.errno == errno.ELOOP else f"cannot read it ({err.strerror or err})"
        raise ConfigError(f"{short_path(path, 120)}: {why} (the sweep's commit); move it away") from None
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise ConfigError(f"{short_path(path, 120)}: not a regular file (the sweep's commit); move it away")
        raw = f.read(200).strip()
    if not raw:
        return None
    if not re.fullmatch(rb"[0-9a-f]{40}(?:[0-9a-f]{24})?(?:-dirty)?", raw):
        raise ConfigError(f"{short_path(path, 120)}: not a commit (40 hex digits, perhaps -dirty), got "
                          f"{cut(ascii(raw[:60])[2:-1], 60)}; move it away")
    return raw.decode()


def provenance(config: dict, times: dict, commit: str | None) -> dict:
    """What a recorded run carries about its making: when it trained, from which code, which config."""
    return {"started_utc": times.get("started_utc"), "ended_utc": times.get("ended_utc"), "commit": commit,
            "config_hash": config_hash(config)}


UTC_TIME = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ")  # as `provenance` takes it from times.json
PROVENANCE_FORMS = {"started_utc": UTC_TIME, "ended_utc": UTC_TIME, "commit": re.compile(r"[0-9a-f]{7,40}(-dirty)?"),
                    "config_hash": re.compile(r"[0-9a-f]{64}")}
MACHINE_TEXT = re.compile(r"[A-Za-z0-9 .,:+()/_-]{1,120}")  # `trained_on`: "CPU", "NVIDIA H200, torch 2.11.0+cu130"


def provenance_problem(run: dict) -> str | None:
    """Why a recorded run's provenance fields (each optional) are not what `provenance` and a pack
    write, or None: the pages print them, so text of another form would reach them as it is."""
    for key, form in PROVENANCE_FORMS.items():
        if (value := run.get(key)) is not None and not (isinstance(value, str) and form.fullmatch(value)):
            return f"{key}: {brief(value, 30)} is not of the form the record writes"
    if "trained_on" in run and not (isinstance(run["trained_on"], str) and MACHINE_TEXT.fullmatch(run["trained_on"])):
        return f"trained_on: {brief(run['trained_on'], 30)} is not a machine's name"
    return None


def finished_trials(sweep: Path) -> Iterator[tuple[dict, list[dict], dict]]:
    """(config, reports, times) of each trial in a sweep folder that trained its every configured step."""
    from trainables.run_dir import RunDir
    from trainables.safe_yaml import read_yaml

    for trial in sorted((sweep / "trials").glob("t*")):
        run = RunDir(trial)
        reports, checkpoint = run.reports(), run.checkpoint()
        if not reports or checkpoint is None:
            continue
        try:
            config = read_yaml(checkpoint / "config.yaml")  # a regular file of bounded size and depth
        except ConfigError:
            continue
        if isinstance(config, dict) and reports[-1].get("step") == config.get("steps"):
            yield config, reports, run.times()
