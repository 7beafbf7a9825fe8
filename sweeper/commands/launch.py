"""`sweeper launch`: run (or resume) a sweep of a search-space file on Ray Tune.

    validate the file  ->  pick the sweep directory (new, resume, or --restart)
    ->  start or join Ray  ->  Tuner(OptunaSearch + ASHA).fit()  ->  table + summary.json

A sweep whose directory already holds a restorable experiment is resumed: finished
trials are kept, unfinished ones continue from their last checkpoint, and the Optuna
study comes back from its SQLite file. Ctrl-C or SIGTERM stop it cleanly for a later resume.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import signal
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from sweeper import faults, live, orphans
from sweeper.fs import check_writable
from sweeper.records import FINAL
from sweeper.lock import hold_sweep_lock
from sweeper.space import SearchSpace, SpaceError, load_space
from sweeper.sweep_dir import DEFAULT_STORAGE, OPTUNA_DB, check_not_moved, check_study, is_uri, mend_cut_ray_state, sweep_dir_for
from sweeper.status import SPACE_FILE, STATUS_FILE, SweepListener, format_table, load_records, mark_state, write_summary

def space_digest(path: str | Path) -> str:
    return hashlib.sha256(Path(path).read_bytes()).hexdigest()


def prepare_sweep_dir(spec: SearchSpace, space_file: str, sweep_dir: Path, restorable: bool, restart: bool) -> bool:
    """Create, clear or check the sweep directory. Returns True when the sweep resumes."""
    if restart and sweep_dir.exists():
        print(f"--restart: removing {sweep_dir}")
        shutil.rmtree(sweep_dir)
    elif restorable:
        saved = sweep_dir / SPACE_FILE
        if saved.exists() and space_digest(saved) != space_digest(space_file):
            raise SpaceError(
                f"{space_file}: differs from the file sweep `{spec.name}` was started with ({saved}); "
                f"pass --restart to start over, or change `name` to keep both"
            )
        return True
    elif sweep_dir.exists():  # a directory without a restorable experiment holds nothing to keep
        shutil.rmtree(sweep_dir)
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


def check_same_store(sweep_dir: Path, uri: str, source: str, runs: dict) -> None:
    """A resumed sweep logs to the store it started with: its parent and child runs are there."""
    started_with = runs.get("tracking_uri")
    if started_with and started_with != uri:
        raise SpaceError(f"{source} {uri}: sweep `{sweep_dir.name}` logs to {started_with} (its runs are there); "
                         f"resume with --tracking-uri {started_with}, or pass --restart to start over")


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


def run(args: argparse.Namespace) -> int:
    from sweeper.adapters import mlflow_tracking as tracking
    from sweeper.adapters.optuna_search import baseline_points

    spec = load_space(args.file)  # every user mistake surfaces here, before Ray starts
    faults.arm()  # $SWEEPER_FAULT: the driver kills itself on cue (tests/faults/)
    experiment_dir, sweep_dir = sweep_dir_for(spec.name, args.storage)
    if not is_uri(args.storage or DEFAULT_STORAGE):
        check_writable(sweep_dir, "--storage" if args.storage else "the sweep directory")
    if args.address is None:
        check_local_resources(spec, args.file)
    uri = tracking.resolve_uri(args.tracking_uri)
    tracking.preflight(uri, source=tracking.uri_source(args.tracking_uri))
    if args.address and not is_uri(args.storage or DEFAULT_STORAGE) and not args.shared_storage:
        print(f"note: --address {args.address} with a local storage path ({experiment_dir}): on a multi-node "
              "cluster every node must see it (NFS, a shared volume); otherwise use --storage s3://... "
              "(pass --shared-storage to confirm the path is shared)", file=sys.stderr)

    if args.address is None:
        loopback_only()
    from sweeper.adapters import ray_tune  # heavy: imported only once the input is known to be good

    hold_sweep_lock(sweep_dir, spec.name)  # one driver per sweep, until this process ends
    if ended_procs := orphans.end_orphans(sweep_dir):  # a SIGKILLed driver's local Ray: ours to end
        print(f"ended {len(ended_procs)} processes of this sweep's earlier local Ray ({', '.join(sorted(set(ended_procs)))})",
              file=sys.stderr)
    restorable = ray_tune.can_restore(experiment_dir)
    resuming = prepare_sweep_dir(spec, args.file, sweep_dir, restorable, args.restart)
    records = load_records(sweep_dir)[1] if resuming and (sweep_dir / STATUS_FILE).exists() else []  # before Ray: a bad file is one line
    if resuming:
        check_same_store(sweep_dir, uri, tracking.uri_source(args.tracking_uri), tracking.load_runs(sweep_dir))
        check_study(sweep_dir, spec.name)
        if not is_uri(experiment_dir):  # Ray's files and status.json's trial folders are here
            check_not_moved(records, Path(experiment_dir))
            if mended := mend_cut_ray_state(Path(experiment_dir), spec.name):
                print(f"mended Ray's snapshot, cut short by the kill, from its whole copy: {', '.join(p.name for p in mended)}",
                      file=sys.stderr)
    plan = live.Plan.from_space(spec)
    print(live.plan_line(plan, records), flush=True)  # trials, steps, concurrency, the estimate (sweeper/live.py)
    if period := ray_tune.checkpoint_period_s(spec):
        print(f"note: {spec.budget.num_samples} trials: each checkpoints at most once every {period:.0f} s of its training, "
              "not at every report (Ray snapshots every trial at each checkpoint); a resumed trial repeats up to that much")
    tracker = tracking.SweepTracker(uri, spec, sweep_dir, args.experiment)

    def start_tracking() -> int:
        with tracking.store_lock(uri):  # an embedded store is created (schema migrations) by one process at a time
            tracker.start(sweep_dir / SPACE_FILE, resuming=resuming)
        # what a kill of the last driver kept from MLflow, from the ledger and the result files
        return tracker.reconcile(records) if resuming and records else 0

    with ThreadPoolExecutor(1) as pool:  # MLflow's start-up (imports, store, parent run) while Ray starts
        tracking_started = pool.submit(start_tracking)
        ray_tune.init_ray(args.address)
        if made := tracking_started.result():
            print(f"MLflow: {made} reports and trial ends the last run of this sweep did not log, logged now")
    print(f"tracking: {uri} (experiment {tracker.experiment}); `sweeper ui` opens it")
    if args.address is None:
        orphans.record(sweep_dir)  # so that a next launch can end them if this driver is SIGKILLed
    if args.address is not None and (note := ray_tune.cluster_fit_note(spec.resources.cpu, spec.resources.gpu)):
        print(note, file=sys.stderr)
    if resuming:  # the monitor, its listener and tracker come back with the experiment
        print(f"resuming sweep {spec.name} from {experiment_dir}")
        max_steps = spec.budget.max_steps
        ray_tune.mark_ended_trials(records + ray_tune.ended_in_study(records, f"sqlite:///{sweep_dir / OPTUNA_DB}", spec.name, max_steps)
                                   + ray_tune.ended_by_scheduler(records, experiment_dir, max_steps))
        tuner = ray_tune.restore_tuner(spec, experiment_dir)
    else:
        print(f"sweep {spec.name}: {spec.budget.num_samples} trials, {spec.budget.max_concurrent} at once -> {experiment_dir}")
        listener = SweepListener(sweep_dir, spec.name, spec.metric, spec.mode, spec.budget.num_samples, tracker=tracker)
        monitor = ray_tune.SweepMonitor(listener, spec.budget.max_steps)
        tuner = ray_tune.build_tuner(spec, experiment_dir, monitor, f"sqlite:///{sweep_dir / OPTUNA_DB}")
    _graceful_sigterm()
    with live.LiveView(sweep_dir, plan, getattr(args, "progress", "auto"), getattr(args, "progress_every", 30.0)):
        tuner.fit()
    for sig in (signal.SIGINT, signal.SIGTERM):  # Ray's handlers outlive fit() and ignore both: during the finish
        signal.signal(sig, signal.default_int_handler)  # they interrupt it (exit 130; the same command finishes it)

    # the final records come from status.json, which the monitor keeps current
    _, records = load_records(sweep_dir)
    unfinished = [r for r in records if r.status not in FINAL]  # pending, running, interrupted
    interrupted = bool(unfinished) or len(records) < spec.budget.num_samples
    write_summary(sweep_dir, spec.name, spec.metric, spec.mode, records, _best_config(spec, records))
    faults.fault_point("finish")
    unlogged = tracking.drain_all()  # the reports still queued for MLflow (the callback's tracker saves the mapping)
    if unlogged:
        print(tracking.describe_unlogged(unlogged, sweep_dir), file=sys.stderr)
    try:  # a fresh tracker: it reads the run mapping the callback's copy saved
        tracking.SweepTracker(uri, spec, sweep_dir, args.experiment).finish(records, baseline_points(spec), interrupted)
    except Exception as err:  # noqa: BLE001 - the sweep's results are safe on disk; only MLflow's view is behind
        print(f"warning: could not finish the sweep's MLflow run ({type(err).__name__}: {str(err)[:160]}); "
              "run the same command again to finish it", file=sys.stderr)
    print(format_table(records, spec.metric, spec.mode))
    if interrupted:
        mark_state(sweep_dir, "interrupted")
        print(f"sweep {spec.name} interrupted with {len(records) - len(unfinished)} of {spec.budget.num_samples} "
              f"trials finished; run the same command to resume", file=sys.stderr)
        ray_tune.shutdown_ray()  # after the state is marked: a Ctrl-C during the shutdown loses nothing
        return 130
    mark_state(sweep_dir, "finished")
    print(f"summary: {sweep_dir / 'summary.json'}")
    ray_tune.shutdown_ray()
    return 0


def _best_config(spec: SearchSpace, records) -> dict | None:
    from sweeper.records import ranked
    from sweeper.space import trial_config_for

    top = ranked(records, spec.metric, spec.mode)
    return trial_config_for(spec, top[0].params).model_dump(mode="json") if top else None
