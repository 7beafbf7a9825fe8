"""`sweeper launch`: run (or resume) a sweep of a search-space file on Ray Tune.

    validate the file  ->  the sweep's folder (new, resume, or --restart)  ->  open the ledger
    (its Optuna study)  ->  start or join Ray  ->  a Tuner whose searcher and scheduler work on
    the ledger  ->  table + summary.json

A sweep whose folder holds its study is resumed: finished trials are kept, unended ones continue
from their own folder's checkpoint, then new ones are drawn until num_samples. Ctrl-C or SIGTERM
stop it cleanly for a later resume; so does a SIGKILL, with at most a report's training repeated.
With this user's resident service running (`sweeper serve`), a local launch checks its input, then
attaches to it (sweeper/attach.py); the service runs `run_sweep` with a `SweepHost`.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import signal
import socket
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from sweeper import faults, live, orphans
from sweeper.adapters.mlflow_store import store_lock
from sweeper.adapters.optuna_ledger import Ledger, check_ledger
from sweeper.adapters.optuna_search import baseline_points
from sweeper.eta import Plan
from sweeper.live_table import plan_line
from sweeper.fs import check_writable
from sweeper.lock import hold_sweep_lock, release_sweep_lock
from sweeper.records import FINAL
from sweeper.space import SearchSpace, SpaceError
from sweeper.space_file import load_space
from sweeper.status import SPACE_FILE, format_table, write_summary
from sweeper.views import SweepViews
from sweeper.sweep_dir import OPTUNA_DB, folder_kind, is_uri, sweep_dir_for
from sweeper.tracking_uri import hide_password, preflight, resolve_uri, store_failure, uri_source
from trainables.errors import ConfigError, cut

TRIALS_DIR = "trials"  # in the sweep's folder: one folder per trial, the trainer's own (trainables/run_dir.py)

def space_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def prepare_sweep_dir(spec: SearchSpace, space_file: str, sweep_dir: Path, restart: bool) -> bool:
    """Create or check the sweep's folder. Returns True when the sweep resumes. A folder is deleted
    only on --restart and only when it is a sweep's; anything else at the path is refused."""
    kind = folder_kind(sweep_dir)
    if kind == "foreign":
        raise SpaceError(f"{sweep_dir}: holds files that are not a sweep's; nothing there was touched. Choose another "
                         "`name` or --storage, or move that folder away")
    if restart and kind in ("sweep", "started", "lost"):
        print(f"--restart: removing {sweep_dir}")
        shutil.rmtree(sweep_dir)
    elif kind == "lost":
        raise SpaceError(f"{sweep_dir / OPTUNA_DB}: missing: the sweep's study (its ledger: every trial's point, "
                         "reports and end) is gone; put it back, or pass --restart to start the sweep over")
    elif kind == "sweep":
        saved = sweep_dir / SPACE_FILE
        if saved.exists() and space_digest(saved) != space_digest(space_file):
            raise SpaceError(
                f"{space_file}: differs from the file sweep `{spec.name}` was started with ({saved}); "
                f"pass --restart to start over, or change `name` to keep both"
            )
        return True
    sweep_dir.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(space_file, sweep_dir / SPACE_FILE)
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
        raise SpaceError(f"--address {cut(address, 80)}: not a Ray address; use auto, ray://HOST:10001 (the head's "
                         "Ray client server) or HOST:6379 (its GCS)")
    host, port = match["host"].strip("[]"), int(match["port"] or RAY_CLIENT_PORT)
    try:
        socket.create_connection((host, port), timeout=5.0).close()
    except OSError as err:
        raise SpaceError(f"--address {cut(address, 80)}: nothing answers at {cut(host, 60)}:{port} "
                         f"({err.strerror or err}); is the cluster up, and is that its Ray client or GCS port?") from None


def check_same_store(sweep_dir: Path, uri: str, source: str, started_with: str | None) -> None:
    """A resumed sweep logs to the store it started with: its parent and child runs are there."""
    if started_with and hide_password(started_with) != hide_password(uri):  # kept without its password
        shown, theirs = hide_password(uri), hide_password(started_with)
        raise SpaceError(f"{source} {shown}: sweep `{sweep_dir.name}` logs to {theirs} (its runs are there); "
                         f"resume with --tracking-uri {theirs}, or pass --restart to start over")


LOOPBACK_ENV = "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER"


def loopback_only() -> None:
    """A local sweep's Ray listens on 127.0.0.1 only. Ray binds its servers (GCS, raylet, workers,
    agents) to the node IP; with this setting, read when ray is imported and inherited by every
    Ray process, the node IP of a single-machine instance is loopback. Call before importing ray."""
    if "ray" in sys.modules and os.environ.get(LOOPBACK_ENV) != "0":
        print("note: ray was imported before the loopback setting; the local Ray may listen beyond 127.0.0.1",
              file=sys.stderr)
    os.environ.setdefault(LOOPBACK_ENV, "0")


def _graceful_sigterm() -> None:
    """Ray Tune stops gracefully (saving state for a resume) on SIGINT and SIGUSR1, but ray.init
    makes SIGTERM exit at once; route SIGTERM to the graceful path. Call after ray.init."""
    signal.signal(signal.SIGTERM, lambda *_: os.kill(os.getpid(), signal.SIGUSR1))


@dataclass(frozen=True)
class SweepHost:
    """What the resident service (sweeper/service_host.py) gives a sweep it runs: its Ray is up,
    `stop` ends the sweep when set, trials train on the warm `workers`, `announce` tells the
    attached launch where the sweep's folder is (it draws the progress from there) and `fitted` when
    its trials have stopped."""

    stop: threading.Event
    workers: list
    announce: Callable[[Path], None]
    fitted: Callable[[], None]  # the trials have stopped: the attached launch's progress view ends


def run(args: argparse.Namespace, host: SweepHost | None = None) -> int:
    """`sweeper launch`: attached to this user's running service if there is one (and the sweep is
    local), else the sweep in this process. `host`: the service running it."""
    if host is None and args.address is None and not getattr(args, "in_process", False):
        from sweeper.attach import attach

        code = attach(args)
        if code is not None:
            return code
    return run_sweep(args, host)


def check_launch(args: argparse.Namespace) -> tuple[SearchSpace, str, Path, str]:
    """Every check of a launch's input, before anything starts or is written (also run by a launch
    attached to the service, in its own folder and environment): (the space, the storage folder of
    its trials, the sweep's folder, the tracking URI)."""
    spec = load_space(args.file)  # every user mistake surfaces here, before Ray starts
    experiment_dir, sweep_dir = sweep_dir_for(spec.name, args.storage)
    if is_uri(experiment_dir):
        raise SpaceError(f"--storage {args.storage}: trials keep their checkpoints in folders of their own, so the "
                         "storage must be a path every node sees (a local folder, NFS, a shared volume)")
    check_writable(sweep_dir, "--storage" if args.storage else "the sweep directory")
    if args.address is None:
        check_local_resources(spec, args.file)
    else:
        check_address(args.address)
    uri = resolve_uri(args.tracking_uri)
    preflight(uri, source=uri_source(args.tracking_uri))
    return spec, experiment_dir, sweep_dir, uri


def run_sweep(args: argparse.Namespace, host: SweepHost | None = None) -> int:
    spec, experiment_dir, sweep_dir, uri = check_launch(args)
    if host is None:
        faults.arm()  # $SWEEPER_FAULT: the driver kills itself on cue (tests/faults/); the service arms its own
    if args.address is not None:
        from sweeper.adapters import ray_tune

        ray_tune.join_cluster(args.address)  # before anything is written: a cluster that never answers is one line
    if args.address and not args.shared_storage:
        print(f"note: --address {args.address} with the storage path {experiment_dir}: on a multi-node cluster every "
              "node must see it (NFS, a shared volume; pass --shared-storage to confirm it is shared)", file=sys.stderr)

    lock = hold_sweep_lock(sweep_dir, spec.name)  # one driver per sweep, until this process (or sweep on the service) ends
    try:
        return _run_locked(args, spec, experiment_dir, sweep_dir, uri, host)
    finally:
        if host is not None:
            release_sweep_lock(lock)


def _run_locked(args: argparse.Namespace, spec: SearchSpace, experiment_dir: str, sweep_dir: Path, uri: str,
                host: SweepHost | None) -> int:
    from sweeper.adapters import mlflow_tracking as tracking

    if ended_procs := orphans.end_orphans(sweep_dir):  # a SIGKILLed driver's local Ray: ours to end
        print(f"ended {len(ended_procs)} processes of this sweep's earlier local Ray ({', '.join(sorted(set(ended_procs)))})",
              file=sys.stderr)
    resuming = prepare_sweep_dir(spec, args.file, sweep_dir, args.restart)
    study_url = f"sqlite:///{sweep_dir / OPTUNA_DB}"
    if resuming:
        check_ledger(study_url, spec, str(sweep_dir / OPTUNA_DB))  # one line for a damaged or foreign study
    ledger = Ledger(study_url, spec, create=not resuming)
    check_same_store(sweep_dir, uri, uri_source(args.tracking_uri), ledger.attr("sweeper.tracking_uri"))
    ledger.set_attr("sweeper.tracking_uri", hide_password(uri))  # a password never goes into the study
    if closed := ledger.close_decided():
        print(f"ended {len(closed)} trials whose end the study held before the last driver stopped", file=sys.stderr)
    trials_root = str(Path(experiment_dir) / TRIALS_DIR)
    tracker = tracking.SweepTracker(uri, spec, sweep_dir, args.experiment, ledger=ledger)
    views = SweepViews(sweep_dir, spec, ledger, trials_root, tracker=tracker)
    records = views.records()
    plan = Plan.from_space(spec)
    line = plan_line(plan, records)  # trials, steps, concurrency, the estimate (sweeper/live_table.py)
    if host is not None:
        line = line.replace("Ctrl-C stops;", f"On the service (pid {os.getpid()}, {len(host.workers)} warm workers): "
                                             "Ctrl-C stops this sweep;")
    print(line, flush=True)

    def start_tracking() -> int:
        try:
            with store_lock(uri):  # an embedded store is created (schema migrations) by one process at a time
                tracker.start(sweep_dir / SPACE_FILE)
            # what the ledger and the trial folders hold that MLflow lacks (a kill cut the last driver's log short)
            return tracker.reconcile(records) if records else 0
        except ConfigError:
            raise
        except Exception as err:  # noqa: BLE001 - a store that passed the preflight and then failed: one line
            raise store_failure(uri, uri_source(args.tracking_uri), err) from None

    if args.address is None:
        loopback_only()
    from sweeper.adapters import ray_tune  # heavy: imported only once the input is known to be good

    with ThreadPoolExecutor(1) as pool:  # MLflow's start-up (imports, store, parent run) while Ray starts
        tracking_started = pool.submit(start_tracking)
        ray_tune.init_ray(args.address)
        if made := tracking_started.result():
            print(f"MLflow: {made} reports and trial ends the last run of this sweep did not log, logged now")
    print(f"tracking: {hide_password(uri)} (experiment {tracker.experiment}); `sweeper ui` opens it")
    if args.address is None:
        orphans.record(sweep_dir)  # so that a next launch can end them if this driver (or the service) is SIGKILLed
    if args.address is not None and (note := ray_tune.cluster_fit_note(spec.resources.cpu, spec.resources.gpu)):
        print(note, file=sys.stderr)
    if resuming:
        print(f"resuming sweep {spec.name} from {sweep_dir}: {len(ledger.unfinished())} trials continue")
    else:
        print(f"sweep {spec.name}: {spec.budget.num_samples} trials, {spec.budget.max_concurrent} at once -> {sweep_dir}")
    views.write("running")
    scratch = ray_tune.scratch_dir(spec.name)
    tuner = ray_tune.build_tuner(spec, ledger, views, trials_root, scratch, stop=host.stop if host else None,
                                 workers=host.workers if host else None)
    if host is None:
        _graceful_sigterm()
    else:
        host.announce(sweep_dir)  # the attached launch draws the progress from the sweep's folder
    try:
        with live.LiveView(sweep_dir, plan, getattr(args, "progress", "auto"), getattr(args, "progress_every", 30.0)):
            tuner.fit()
    finally:
        ray_tune.remove_scratch(scratch)
        if host is not None:
            host.fitted()
    if host is None:
        for sig in (signal.SIGINT, signal.SIGTERM):  # Ray's handlers outlive fit() and ignore both: during the finish
            signal.signal(sig, signal.default_int_handler)  # they interrupt it (exit 130; the same command finishes it)

    left = ledger.mark_interrupted()
    interrupted = bool(left) or ledger.counted() < spec.budget.num_samples
    records = views.records()
    views.write("interrupted" if interrupted else "finished")  # its elapsed_before_s: the earlier launches' alone
    ledger.set_attr("sweeper.elapsed_s", float(ledger.attr("sweeper.elapsed_s", 0.0)) + time.time() - views.launched)
    write_summary(sweep_dir, spec.name, spec.metric, spec.mode, records, _best_config(spec, records))
    faults.fault_point("finish")
    unlogged = tracking.drain_all()  # the reports still queued for MLflow
    if unlogged:
        print(tracking.describe_unlogged(unlogged), file=sys.stderr)
    try:
        from sweeper.adapters.mlflow_summary import finish

        finish(tracker, records, baseline_points(spec), interrupted)
    except Exception as err:  # noqa: BLE001 - the sweep's results are safe on disk; only MLflow's view is behind
        print(f"warning: could not finish the sweep's MLflow run ({type(err).__name__}: {str(err)[:160]}); "
              "run the same command again to finish it", file=sys.stderr)
    print(format_table(records, spec.metric, spec.mode))
    if interrupted:
        print(f"sweep {spec.name} interrupted with {sum(r.status in FINAL for r in records)} of {spec.budget.num_samples} "
              f"trials finished; run the same command to resume", file=sys.stderr)
        if host is None and not getattr(args, "exit_at_once", False):  # the CLI ends its local Ray faster (cli.exit_at_once)
            ray_tune.shutdown_ray()  # after the state is written: a Ctrl-C during the shutdown loses nothing
        return 130
    print(f"summary: {sweep_dir / 'summary.json'}")
    if host is None and not getattr(args, "exit_at_once", False):
        ray_tune.shutdown_ray()  # the service's Ray serves its next sweep
    return 0


def _best_config(spec: SearchSpace, records) -> dict | None:
    from sweeper.records import ranked
    from sweeper.space import trial_config_for

    top = ranked(records, spec.metric, spec.mode)
    return trial_config_for(spec, top[0].params).model_dump(mode="json") if top else None
