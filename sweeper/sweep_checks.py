"""Every check of a sweep's request before anything starts or is written, and its folder.

`check_request` runs in the caller's own process (also a launch that then attaches to the service)
and again where the sweep runs; each refusal is one ConfigError line (file, key, rule, value).
`prepare_sweep_dir` creates a new sweep's folder or checks a resumed one. Stdlib and the space
only: no Ray, Optuna or MLflow is imported here."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sweeper.fs import check_beside, check_writable
from sweeper.local_ray import check_ray_temp
from sweeper.lock import check_lock_file, sweep_lock_path
from sweeper.orphans import key_path
from sweeper.request import SweepRequest
from sweeper.space import SearchSpace, SpaceError
from sweeper.space_file import load_space
from sweeper.sweep_dir import DEFAULT_STORAGE, OPTUNA_DB, SPACE_FILE, check_no_sweep_inside, check_not_in_sweep, folder_kind, sweep_dir_for
from sweeper.tracking_uri import artifacts_folder, hide_password, preflight, sqlite_path
from core.errors import ConfigError, check_folder_variable, check_warnings_are_warnings, cut, short_path
from core.uri_secrets import shown as shown_uri
from trainables.safe_yaml import MAX_BYTES as MAX_SPACE_BYTES


@dataclass(frozen=True)
class Checked:
    """A request that passed every check: its space and where the sweep lives."""

    spec: SearchSpace
    sweep_dir: Path  # also the storage folder of its trials


def check_request(request: SweepRequest) -> Checked:
    """Every check of the request's input, before anything starts or is written."""
    spec = load_space(request.file, shown=shown_path(request.file, request.cwd))  # every mistake in the file, before Ray
    sweep_dir = sweep_dir_for(spec.name, request.storage)  # any `://` refused: never a folder of the service's own
    default = request.storage == os.path.join(request.cwd, DEFAULT_STORAGE)
    check_outside_service(sweep_dir, f"{'the sweep directory' if default else '--storage'} {short_path(sweep_dir.parent, 100)}")
    check_not_in_sweep(sweep_dir.parent, "the sweep directory" if default else "--storage")
    if request.restart:  # and again under the sweep's lock, just before the folder is removed
        check_no_sweep_inside(sweep_dir)
    check_writable(sweep_dir, "the sweep directory" if default else "--storage")
    check_folder_variable("XDG_STATE_HOME")
    check_writable(key_path().parent, "the sweeper's state folder" + (" ($XDG_STATE_HOME)" if os.path.isabs(os.environ.get("XDG_STATE_HOME", "")) else ""))
    check_warnings_are_warnings("the sweep")  # this process drives Ray, MLflow and Optuna
    if request.address is None:
        check_local_resources(spec, shown_path(request.file, request.cwd))
        check_ray_temp()  # the local Ray's session folders
    else:
        check_address(request.address)
    preflight(request.tracking_uri, source=request.tracking_source)
    check_lock_file(sweep_lock_path(sweep_dir))  # what the launch would refuse later, once it had changed things
    if (store := sqlite_path(request.tracking_uri)) is not None:
        shown = f"{request.tracking_source} {short_path(store, 100)}"
        if store.name.endswith(".lock"):  # the sweep's own lock, the service's, a store's: never a database
            raise SpaceError(f"{shown}: a lock file's name (the sweeper's locks end in .lock, and a store's lock is made "
                             "beside it); name the store's database, sqlite:///PATH/mlflow.db")
        check_outside_service(store, shown)
        check_lock_file(Path(f"{store}.lock"))
        check_beside(store, "the tracking store")
    if (artifacts := artifacts_folder(request.tracking_uri, request.cwd)) is not None:
        check_outside_service(artifacts, f"the tracking store's artifacts {short_path(artifacts, 100)}")
        check_artifacts_folder(artifacts)
    from sweeper.adapters.mlflow_store import check_store

    check_store(request.tracking_uri, request.tracking_source, request.experiment or spec.name)  # not another program's database
    return Checked(spec, sweep_dir)


def check_outside_service(path: Path, what: str) -> None:
    """Nothing of a sweep (its folder, its tracking store and artifacts) lives in the sweep service's
    own folder (its socket, lock, log and records). `what` names the place as the user gave it."""
    from sweeper.service_folder import service_dir

    try:
        service = service_dir()
    except ConfigError:
        return  # an unusable SWEEPER_SERVICE_DIR is said where the service is looked for
    path, service = Path(os.path.realpath(path)), Path(os.path.realpath(service))  # a link or `..` leads nowhere else
    if path == service or service in path.parents:
        raise SpaceError(f"{what}: inside the sweep service's own folder ({short_path(service, 80)}); keep sweeps and "
                         "their stores elsewhere (the defaults are ./sweeps and ./mlflow.db)")


def shown_path(path: str, cwd: str) -> str:
    """`path` as its user most likely typed it: relative to their folder when it lies inside it."""
    relative = os.path.relpath(path, cwd)
    return path if relative.startswith("..") else relative


def space_digest(path: str | Path) -> str | None:
    """The file's digest; None for a file larger than a space file may be (read no further)."""
    with open(path, "rb") as f:
        data = f.read(MAX_SPACE_BYTES + 1)
    return None if len(data) > MAX_SPACE_BYTES else hashlib.sha256(data).hexdigest()


def prepare_sweep_dir(spec: SearchSpace, space_file: str, sweep_dir: Path, restart: bool,
                      say: Callable[[str], None]) -> bool:
    """Create or check the sweep's folder. Returns True when the sweep resumes. A folder is deleted
    only on --restart and only when it is a sweep's (`say` hears of it); anything else is refused."""
    if restart and folder_kind(sweep_dir) in ("sweep", "started", "lost"):
        check_no_sweep_inside(sweep_dir)
        say(f"--restart: removing {sweep_dir}")
        shutil.rmtree(sweep_dir)
    elif check_sweep_dir(spec, space_file, sweep_dir, restart):
        return True
    sweep_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(space_file, sweep_dir / SPACE_FILE)
    return False


def check_sweep_dir(spec: SearchSpace, space_file: str, sweep_dir: Path, restart: bool) -> bool:
    """Read-only: whether the sweep's folder resumes (True), or is new (False); a folder that is
    not a sweep's, lost its study, or was started from another file is one SpaceError line."""
    kind = folder_kind(sweep_dir)
    if kind == "link":
        target = os.readlink(sweep_dir)
        dangling = "" if os.path.exists(sweep_dir) else ", which does not exist"
        raise SpaceError(f"{short_path(sweep_dir, 100)}: a link (to {short_path(target, 80)}{dangling}), not the sweep's "
                         "own folder; a sweep's folder is never reached through a link. Remove the link, or choose "
                         "another `name` or --storage")
    if kind == "foreign":
        raise SpaceError(f"{sweep_dir}: holds files that are not a sweep's; nothing there was touched. Choose another "
                         "`name` or --storage, or move that folder away")
    if restart:
        return False
    if kind == "lost":
        raise SpaceError(f"{sweep_dir / OPTUNA_DB}: missing: the sweep's study (its ledger: every trial's point, "
                         "reports and end) is gone; put it back, or pass --restart to start the sweep over")
    if kind == "sweep":
        saved = sweep_dir / SPACE_FILE
        for path in (saved, sweep_dir / OPTUNA_DB):
            if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):  # a FIFO would block the read
                raise SpaceError(f"{path}: not a regular file (a link, a FIFO, a folder); put the sweep's own back, "
                                 "or pass --restart to start the sweep over")
        if not os.path.lexists(saved):  # written before the study: a study without it lost its space
            raise SpaceError(f"{saved}: missing: the space file sweep `{spec.name}` was started with is gone; put it "
                             f"back (a copy of {space_file}, if that is the one), or pass --restart to start over")
        if (digest := space_digest(saved)) is None or saved.stat().st_size == 0:  # no copy of a file that loaded
            raise SpaceError(f"{saved}: {'empty' if digest else 'larger than a space file may be'}: the saved copy of "
                             f"the file sweep `{spec.name}` was started with is damaged; put it back (a copy of "
                             f"{space_file}, if that is the one), or pass --restart to start over")
        if digest != space_digest(space_file):
            raise SpaceError(
                f"{space_file}: differs from the file sweep `{spec.name}` was started with ({saved}); "
                f"pass --restart to start over, or change `name` to keep both"
            )
        return True
    return False


def local_gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def check_local_resources(spec: SearchSpace, source: str) -> None:
    """A local sweep whose trial asks for more than this machine has would wait forever: refuse it."""
    cpus = os.cpu_count() or 1
    if spec.resources.cpu > cpus:
        raise SpaceError(f"{source}: resources.cpu: a trial asks for {spec.resources.cpu:g} CPUs, this machine has {cpus} "
                         "(no trial could ever start); lower it, or run on a cluster with --address")
    if spec.resources.gpu > 0:
        gpus = local_gpu_count()
        if spec.resources.gpu > gpus:
            raise SpaceError(f"{source}: resources.gpu: a trial asks for {spec.resources.gpu:g} GPUs, this machine has {gpus} "
                             "(no trial could ever start); set it to 0, or run on a cluster with --address")


RAY_ADDRESS = re.compile(r"(?P<client>ray://)?(?P<host>[A-Za-z0-9.-]+|\[[0-9A-Fa-f:]+\])(:(?P<port>[0-9]{1,5}))?")
RAY_CLIENT_PORT = 10001  # of ray://HOST with no port


def check_address(address: str) -> None:
    """--address: `auto`, or a host and port in a form Ray reads where something accepts a connection."""
    if address == "auto":
        return
    match = RAY_ADDRESS.fullmatch(address)
    if match is None or not (match["port"] or match["client"]) or not 0 < int(match["port"] or RAY_CLIENT_PORT) < 65536:
        raise SpaceError(f"--address {shown_uri(address, 80)}: not a Ray address; use auto, ray://HOST:10001 (the head's "
                         "Ray client server) or HOST:6379 (its GCS)")
    host, port = match["host"].strip("[]"), int(match["port"] or RAY_CLIENT_PORT)
    try:
        socket.create_connection((host, port), timeout=5.0).close()
    except UnicodeError:  # the idna codec: a label of over 63 characters, or empty
        raise SpaceError(f"--address {shown_uri(address, 80)}: {cut(host, 60)} is no host name (a label empty or "
                         "over 63 characters)") from None
    except OSError as err:
        raise SpaceError(f"--address {shown_uri(address, 80)}: nothing answers at {cut(host, 60)}:{port} "
                         f"({err.strerror or err}); is the cluster up, and is that its Ray client or GCS port?") from None


def check_resume(sweep_dir: Path, spec, uri: str, source: str) -> None:
    """Everything a resume needs of the folder, read without a write: the study is this project's
    ledger of `spec`, the checkpoints its unfinished trials continue from are sound, and the
    tracking store is the one the sweep started with."""
    from sweeper.adapters.optuna_study import check_ledger

    db = Path(sweep_dir) / OPTUNA_DB
    check_layout(Path(sweep_dir))
    unfinished, started_with = check_ledger(db, spec, str(db))  # one line for a damaged or foreign study
    check_checkpoints(spec, unfinished, Path(sweep_dir) / "trials")
    check_same_store(Path(sweep_dir), uri, source, started_with)


def check_artifacts_folder(folder: Path) -> None:
    """An embedded store's artifacts go to `mlartifacts` beside it: a folder there (a link to one
    is the user's choice), or nothing (it is made). A dangling link (MLflow would make its target,
    wherever it points), a file or a FIFO is one line before anything is written."""
    if os.path.lexists(folder) and not folder.is_dir():
        kind = ("a dangling link" if folder.is_symlink() and not folder.exists() else "a link to a file"
                if folder.is_symlink() else "a file" if folder.is_file() else "not a folder")
        raise SpaceError(f"{short_path(folder, 120)}: {kind}, where the tracking store keeps its artifacts (a folder); "
                         "move it away, or name another store with --tracking-uri")


def check_layout(sweep_dir: Path) -> None:
    """The sweep's views are plain files and its trials folders, where they exist: anything else in
    their place is one line before a resume starts Ray, not a failure when it is first written."""
    from sweeper.records import TRIAL_NAME
    from sweeper.status import STATUS_FILE, SUMMARY_FILE

    def kind(path: Path) -> str:
        return ("a link" if path.is_symlink() else "a folder" if path.is_dir() else "a file" if path.is_file()
                else "not a plain file")

    check_beside(sweep_dir / OPTUNA_DB, "the sweep's study")  # the resume writes to it
    for view in (STATUS_FILE, SUMMARY_FILE):
        path = sweep_dir / view
        if os.path.lexists(path) and (path.is_symlink() or not path.is_file()):
            raise SpaceError(f"{path}: {kind(path)}, not the sweep's view; move it away (the resume rebuilds it)")
    trials = sweep_dir / "trials"
    if not os.path.lexists(trials):
        return
    if trials.is_symlink() or not trials.is_dir():
        raise SpaceError(f"{trials}: {kind(trials)}, not the folder of the sweep's "
                         "trials; put that folder back, or pass --restart to start the sweep over")
    for entry in trials.iterdir():
        if TRIAL_NAME.fullmatch(entry.name) and (entry.is_symlink() or not entry.is_dir()):
            raise SpaceError(f"{entry}: {kind(entry)}, not the trial's folder; put "
                             "that folder back, or pass --restart to start the sweep over")


def check_same_store(sweep_dir: Path, uri: str, source: str, started_with: str | None) -> None:
    """A resumed sweep logs to the store it started with: its parent and child runs are there."""
    if started_with and hide_password(started_with) != hide_password(uri):  # kept without its password
        shown, theirs = hide_password(uri), hide_password(started_with)
        raise SpaceError(f"{source} {shown}: sweep `{sweep_dir.name}` logs to {theirs} (its runs are there); "
                         f"resume with --tracking-uri {theirs}, or pass --restart to start over")


def check_checkpoints(spec, unfinished: dict[int, dict], trials_root: Path) -> None:
    """The files of each trial a resume continues (regular files of its own or absent), and its newest
    checkpoint, checked as the trial will load it: tensors and plain values only, taken with the
    config the trial's drawn parameters make and with the report metrics.jsonl holds at its step
    (a checkpoint of another trial or run, its state copied or linked in, is refused, not
    trained on), and loading into that config's model. A damaged or planted one is one ConfigError
    line now, before Ray starts, not a trial failing after its retries, nor one silently continuing
    someone else's weights. Then every trial's reports, which the resume logs to MLflow from the
    trials' folders, must be ones MLflow takes, within the budget (`check_report_names`)."""
    from sweeper.fs import read_limited
    from sweeper.records import check_report_names, trial_name
    from sweeper.space import trial_config_for
    from trainables.config import ConfigError
    from trainables.run_dir import CHECKPOINT, MAX_REPORTS_BYTES, REPORTS, RunDir, check_run_files, strict_reports
    from trainables.train import check_resume

    read: dict[Path, bytes] = {}  # each metrics.jsonl read here, checked for names from the same bytes
    for number, params in unfinished.items():
        folder = Path(trials_root) / trial_name(number)
        try:
            check_run_files(folder, f"trial {number}:")
        except ConfigError as err:
            raise ConfigError(f"{cut(str(err), 220)}; move {short_path(folder, 80)} away to train that trial afresh") from None
        checkpoint = RunDir(folder).checkpoint()
        if checkpoint is None:
            if os.path.lexists(link := folder / CHECKPOINT):  # a link to nothing, or to itself: the run is lost
                raise ConfigError(f"{short_path(link, 100)}: names no checkpoint folder; move {short_path(folder, 80)} "
                                  "away to train that trial afresh")
            continue
        try:
            reports = None
            if os.path.lexists(folder / REPORTS):  # a regular file of its own (check_run_files)
                data = read[folder] = read_limited(folder / REPORTS, f"trial {number}:", MAX_REPORTS_BYTES)
                reports = {r.step: r.metrics for r in strict_reports(data, short_path(folder / REPORTS, 100))[0]}
            check_resume(trial_config_for(spec, params, f"trial {number}"), checkpoint, REPORTS, reports)
        except ConfigError as err:
            raise ConfigError(f"{cut(str(err), 220)}; move {short_path(folder, 80)} away to train that trial afresh") from None
    check_report_names(Path(trials_root), spec.budget.max_steps, read)  # sweeper.records

