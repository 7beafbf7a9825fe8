"""Ray Tune adapter on the driver: ray.init, and a Tuner that runs the ledger's trials.

The driver-side twin of `sweeper/adapters/ray_trainable.py`; with `ray_search.py` (the searcher
and the scheduler) they are the only modules that import ray, and they use its public API only.
Ray Tune runs trials; it keeps no state the sweep needs: each launch builds a fresh Tuner whose
searcher continues what the ledger holds (sweeper/adapters/optuna_ledger.py), and Ray's own
experiment files go to a scratch folder that is removed at the end.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import sys
import tempfile
import threading
import uuid
import warnings
from typing import Any

# Defaults a user can still override from the environment:
os.environ.setdefault("RAY_AIR_NEW_OUTPUT", "0")  # with verbose=0: our own progress line, not Ray's tables
os.environ.setdefault("TUNE_WARN_EXCESSIVE_EXPERIMENT_CHECKPOINT_SYNC_THRESHOLD_S", "0")  # ...without nagging
os.environ.setdefault("RAY_CHDIR_TO_TRIAL_DIR", "0")  # trials keep the launch directory as their cwd
# Ray's node processes log at warning and above: at info its runtime-env agent writes each trial's
# environment variables to its log file, and Ray Tune hands trials the driver's AWS credentials there
os.environ.setdefault("RAY_LOGGER_LEVEL", "warning")

import ray  # noqa: E402
from ray import tune  # noqa: E402
from ray.tune.schedulers import FIFOScheduler  # noqa: E402

from sweeper.adapters.optuna_ledger import Ledger  # noqa: E402
from sweeper.adapters.ray_search import LedgerASHA, LedgerSearcher  # noqa: E402
from sweeper.adapters.ray_trainable import make_trainable  # noqa: E402
from sweeper.space import SearchSpace, trial_config_for  # noqa: E402
from sweeper.stopping import stopper_for  # noqa: E402
from core.errors import ConfigError, cut, error_line  # noqa: E402
from core.uri_secrets import reason, shown as shown_uri  # noqa: E402


def init_ray(address: str | None, quiet: bool = True) -> None:
    """A local Ray instance on this machine (address None), or an existing cluster."""
    if ray.is_initialized():
        return
    kwargs: dict[str, Any] = {"log_to_driver": not quiet, "logging_level": "ERROR" if quiet else "INFO"}
    if address is None:  # a private instance, even if some other Ray runs on this machine,
        # reachable from this machine only: every Ray server binds the node IP, here loopback
        # (with LOOPBACK_ENV set before ray was imported, see `loopback_only`), and its session
        # files lie in a folder only this user can enter (`private_temp_dir`)
        from sweeper.local_ray import private_temp_dir

        private_temp_dir()
        address, kwargs["include_dashboard"] = "local", False
    ray.init(address=address, **kwargs)


JOIN_TIMEOUT_S = 60.0  # to join an existing cluster; Ray retries one that never answers for many minutes


def join_cluster(address: str, timeout_s: float = JOIN_TIMEOUT_S) -> None:
    """Join an existing Ray cluster (its address checked by `launch.check_address`), or refuse in one
    line: no cluster for `auto`, an error from Ray. Call before the sweep writes anything: a join still
    waiting after `timeout_s` ends the process (exit 2), as nothing else stops Ray's retries. Ray's
    client logs each retry on stderr: kept aside during the join, shown only if it succeeds."""
    shown = shown_uri(address, 80)
    if address == "auto" and (owners := private_instances()):
        raise ConfigError(f"--address auto: the only Ray here is another process's own ({owners[0]}); start a "
                          "cluster with `ray start --head`, or leave --address out")
    with _stderr_aside() as (stderr_fd, aside):
        watchdog = threading.Timer(timeout_s, _no_answer, (shown, timeout_s, stderr_fd))
        watchdog.daemon = True
        watchdog.start()
        try:
            with warnings.catch_warnings():  # Ray's client warns before it raises: the error line says it
                warnings.simplefilter("ignore")
                init_ray(address)
        except Exception as err:  # noqa: BLE001 - whatever Ray raises on a join: one line
            raise ConfigError(f"--address {shown}: cannot join the Ray cluster ({cut(reason(err, address), 120)})") from None
        finally:
            watchdog.cancel()
        aside.seek(0)
        os.write(stderr_fd, aside.read(1 << 16))


def private_instances() -> list[str] | None:
    """What `--address auto` would find on this machine, before joining it: None if a cluster runs
    here (or nothing does: Ray's own error says so), else the processes whose private Ray runs here
    ("pid N, command"). A driver's `ray.init()` starts its GCS server as a child of that (Python)
    process; a cluster's is a child of `ray start`, or of an init process once that has exited."""
    import psutil

    owners = []
    for proc in psutil.process_iter(["name"]):
        try:
            if proc.info["name"] != "gcs_server":
                continue
            parent = proc.parent()
            if parent is None or parent.pid == 1:
                return None
            command = parent.cmdline()
            ray_start = any(os.path.basename(part) == "ray" for part in command[:3]) and "start" in command
            if ray_start or not os.path.basename(parent.exe()).startswith("python"):
                return None
            if "sweeper.service_host" in command:  # the sweep service: its pid is no one's to signal
                owners.append("the sweep service's: `sweeper serve --status` says how it stands")
            else:
                owners.append(f"pid {parent.pid}, {cut(' '.join(os.path.basename(c) for c in command[:4]), 50)}")
        except (psutil.Error, OSError):
            continue
    return owners or None


@contextlib.contextmanager
def _stderr_aside():
    """File descriptor 2 into a temporary file for the block; yields the real stderr's descriptor and the file."""
    sys.stderr.flush()
    real = os.dup(2)
    with tempfile.TemporaryFile() as aside:
        os.dup2(aside.fileno(), 2)
        try:
            yield real, aside
        finally:
            os.dup2(real, 2)
            os.close(real)


def _no_answer(shown: str, timeout_s: float, stderr_fd: int) -> None:
    line = (f"--address {shown}: the Ray cluster did not let this driver join within {timeout_s:.0f} s (another "
            "service on that port, another Ray version, or token auth without a token); nothing was written")
    os.write(stderr_fd, f"{error_line(line)}\n".encode())
    os._exit(2)


def shutdown_ray() -> None:
    """Stop this driver's local Ray (or leave the cluster) now, once the sweep's state is written: at
    interpreter exit Ray first sleeps 0.5 s for late log lines (~2.1 s from the end of the work to the
    exit, against ~1.6 s)."""
    ray.shutdown()


def cluster_fit_note(cpu: float, gpu: float) -> str | None:
    """On an existing cluster: a line when no node that is up now could hold one trial (an
    autoscaling cluster may add one later, so this warns instead of refusing); None if one can."""
    nodes = [n.get("Resources", {}) for n in ray.nodes() if n.get("Alive")]
    if any(r.get("CPU", 0) >= cpu and r.get("GPU", 0) >= gpu for r in nodes):
        return None
    biggest = max(nodes, key=lambda r: (r.get("GPU", 0), r.get("CPU", 0)), default={})
    return (f"note: a trial asks for {cpu:g} CPU and {gpu:g} GPU, but no node of the cluster has that now (largest: "
            f"{biggest.get('CPU', 0):g} CPU, {biggest.get('GPU', 0):g} GPU); trials wait until the autoscaler adds "
            "one, or forever on a fixed cluster (lower resources.* then)")


class ViewsCallback(tune.Callback):
    """Keeps the views current between events: status.json at most a second behind a report."""

    def __init__(self, views):
        self.views = views

    def on_step_end(self, iteration, trials, **info):
        self.views.flush()

    def on_trial_error(self, iteration, trials, trial, **info):
        """A trial that failed even after its retries: the last line of its error, for the ledger."""
        lines = []
        if trial.error_file and os.path.isfile(trial.error_file):
            with open(trial.error_file, errors="replace") as f:
                lines = [line.strip() for line in f.read(1 << 20).splitlines() if line.strip()]
        self.views.on_error(trial.config.get("number"), lines[-1] if lines else "no error message")


def _trial_config(spec: SearchSpace, params: dict):
    return trial_config_for(spec, params, source=f"trial {params}")


class EventStopper(tune.Stopper):
    """Stops the whole sweep once `event` is set (a launch attached to the service was interrupted);
    its running trials end unfinished, to be resumed, as after a Ctrl-C."""

    def __init__(self, event: threading.Event | None = None):
        self.event = event or threading.Event()

    def __call__(self, trial_id: str, result: dict) -> bool:
        return False

    def stop_all(self) -> bool:
        return self.event.is_set()

    def __reduce__(self):  # Tune saves its run config; an event does not pickle (a copy never fires)
        return (EventStopper, ())


def registry_name(sweep: str) -> str:
    """The name this launch's trainable is registered under in Ray Tune's registry, which is the
    Ray cluster's (a key-value table of its GCS): the function's name unless set. Two sweeps on one
    Ray (the service's, or a cluster) each register their own, so neither runs the other's."""
    return f"sweeper-{sweep[:60]}-{uuid.uuid4().hex[:12]}"


def build_tuner(spec: SearchSpace, ledger: Ledger, views, trials_root: str, scratch: str,
                stop: threading.Event | None = None, workers: list | None = None) -> tune.Tuner:
    """A Tuner that runs `spec`'s trials from the ledger: those a resumed sweep left unended, then new
    ones until num_samples. Ray's experiment files go to `scratch` (nothing reads them back). On the
    resident service: `stop` ends the sweep when set, and trials train on the warm `workers`. The
    trainable's name is this launch's own (`registry_name`)."""
    budget, sch = spec.budget, spec.scheduler
    searcher = LedgerSearcher(ledger, views, budget.num_samples, budget.max_steps, spec.metric, spec.mode, views.faults)
    if sch.type == "asha":
        scheduler = LedgerASHA(stopper_for(spec, ledger), views.faults)
    else:
        scheduler = FIFOScheduler()
    threads = max(1, int(spec.resources.cpu))
    to_config = functools.partial(_trial_config, spec)
    if workers and spec.resources.gpu == 0:
        from sweeper.adapters.ray_warm import make_warm_trainable

        trainable = make_warm_trainable(workers, to_config, threads, trials_root)
    else:
        trainable = make_trainable(to_config, threads, trials_root)
    trainable.__name__ = trainable.__qualname__ = registry_name(spec.name)
    return tune.Tuner(
        tune.with_resources(trainable, {"cpu": spec.resources.cpu, "gpu": spec.resources.gpu}),
        tune_config=tune.TuneConfig(
            metric=spec.metric,
            mode=spec.mode,
            search_alg=searcher,
            scheduler=scheduler,
            num_samples=-1,  # the searcher says when the sweep has all its trials
            max_concurrent_trials=budget.max_concurrent,
            # a finished trial's worker (torch imported) takes the next; on the service always: its trials are
            # thin (the warm workers hold torch), and a new trial process would cost ~2 s of its start
            reuse_actors=spec.resources.reuse_workers or bool(workers),
        ),
        run_config=tune.RunConfig(
            name=spec.name,
            storage_path=scratch,
            failure_config=tune.FailureConfig(max_failures=2),  # a retry continues from the trial's folder
            callbacks=[ViewsCallback(views)],
            stop=EventStopper(stop) if stop is not None else None,
            verbose=0,
        ),
    )


def scratch_dir(name: str) -> str:
    """A folder for Ray's own experiment files during one launch."""
    return tempfile.mkdtemp(prefix=f"sweeper-{name[:40]}-ray-")


def remove_scratch(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
