"""Sweep overhead: the same N fixed trials through `sweeper launch` and run directly.

    sweep   `sweeper launch` on a generated search space whose N trials are all baseline
            points (seeds 0..N-1 of one config), FIFO scheduler, `--concurrent` at a time.
    direct  the trainer on the same N configs in N plain processes, `--concurrent` at a time.

Prints both wall times and the ratio (target: sweep <= 1.10 x direct), the time from starting
`sweeper launch` to the first trial's first report (target: <= 10 s), and where the driver's
seconds go, from the launch's own output lines stamped as they arrive and status.json:

    start-up    process start, imports, validation, the sweep's lock       (until the plan line)
    Ray+MLflow  ray.init, and beside it the tracking store and parent run   (until `tracking:`)
    to report   Tuner, trial actors, torch in them, the first `eval_every`  (until the first report;
                steps and an evaluation; the direct run's own time to its    the direct run's is printed
                first report is the training part of it)                     beside it)
    tail        after the last trial ended: summary, MLflow, Ray shutdown    (until exit)

and the first reporting trial's side of "to report", from its process (`pid` in its report; psutil's
start time) and Ray's `time_total_s` (from the driver's first `train()` call on its actor to the report):

    worker up   when the trial's process started (a local Ray starts an idle worker per CPU as it comes up)
    actor       from then until Ray called the trainable: Ray's and Tune's imports in it, the actor, the
                Tuner's own start on the driver (whichever is later)
    trial       from that call to the first report: torch and the trainer imported, the evaluation sets
                built, the first `eval_every` steps and an evaluation (what a plain process does from its
                start, printed beside it, imports included)

`--service` also runs the sweep attached to a resident service (`sweeper serve`, started and warmed
before the clock starts, as a user's would be), beside the launch in its own process, both against the
same direct time; it measures the idle service's CPU (percent of one core over 30 s) and memory, and
ends with one line `service: sweep/direct R, first report F s, plain process first report P s`
(targets: R <= 1.05, F <= 0.8 x P).

`--baseline REV` also runs the sweep on the code of an older commit (a `git worktree` of it beside
this checkout, bench/worktree.py), the two launches one after the other in the same run, against the
same direct time, and prints both ratios and first-report times.

    python bench/sweep_overhead.py [--trials 4] [--steps 500] [--concurrent 2] [--baseline REV] [--service]
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path (the tests)
from fixed_trials import ROOT, space_file, start_launch  # noqa: E402
from worktree import baseline_tree  # noqa: E402
from core import worker_pool
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import positive_int

TRIALS = [4]  # trials in the sweep (set by main)


def overhead_space_file(directory: Path, trials: int, steps: int, concurrent: int) -> Path:
    return space_file(directory, "overhead", trials, steps, concurrent=concurrent, eval_every=max(1, steps // 4),
                      resources={"cpu": 1}, fixed={"eval": {"n_sequences": 128}},
                      description="bench/sweep_overhead.py: N fixed trials")


def _direct_job(args: tuple) -> float:
    """Train one config; returns seconds from this process's start to its first report."""
    path, seed = args
    import psutil
    import torch

    from sweeper.space import trial_config_for
    from sweeper.space_file import load_space
    from trainables.train import train

    born = psutil.Process().create_time()
    first: list[float] = []
    torch.set_num_threads(1)
    spec = load_space(path, n_samples=0)
    train(trial_config_for(spec, {"seed": seed}), report=lambda m, c: first.append(time.time() - born) if not first else None)
    return first[0]


def run_direct(path: Path, trials: int, concurrent: int) -> tuple[float, float]:
    """(wall time, the first trial process's seconds to its first report)."""
    start = time.perf_counter()
    with worker_pool.pool(concurrent) as pool:
        firsts = pool.map(_direct_job, [(path, i) for i in range(trials)])
    return time.perf_counter() - start, min(firsts)


def first_trial_marks(trial: dict, launched_epoch: float, first_report: float) -> dict[str, float]:
    """Seconds after the launch at which the first reporting trial's process started (`worker`) and Ray
    first called its trainable (`trainable`), from its report's `pid` (the process must still be running)
    and `time_total_s`. Empty if either is missing."""
    import psutil

    metrics = trial.get("metrics", {})
    try:
        born = psutil.Process(int(metrics["pid"])).create_time() - launched_epoch
        return {"worker": born, "trainable": first_report - float(metrics["time_total_s"])}
    except (KeyError, ValueError, psutil.Error):
        return {}


def tree_cpu_s(pid: int) -> float:
    """CPU seconds (user + system) used so far by process `pid`, every process below it that is still
    running (the launch's Ray: GCS, raylet, agents, the trials' workers) and the children they have waited for."""
    import psutil

    total = 0.0
    try:
        root = psutil.Process(pid)
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return float("nan")
    for p in procs:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def run_sweep(path: Path, workdir: Path, root: Path = ROOT,
              extra_env: dict[str, str] | None = None) -> tuple[float, float | None, dict[str, float], dict[str, float]]:
    """(wall time, seconds from start to the first trial's first report, phase marks in seconds, the first
    reporting trial's marks (`first_trial_marks`) and `cpu`: `tree_cpu_s` of the launch at that report)."""
    import threading

    status = workdir / "sweeps" / "overhead" / "status.json"
    launched_epoch, start = time.time(), time.perf_counter()
    proc = start_launch(path, workdir, root, extra_env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    marks: dict[str, float] = {}
    first_trial: dict[str, float] = {}

    def stamp() -> None:  # the launch's lines, timed as they arrive
        for line in proc.stdout:
            for key, prefix in (("plan", "plan:"), ("tracking", "tracking:"), ("ray", "sweep overhead:")):
                if line.startswith(prefix) and key not in marks:
                    marks[key] = time.perf_counter() - start

    reader = threading.Thread(target=stamp, daemon=True)
    reader.start()
    first_report = None
    while proc.poll() is None:
        time.sleep(0.1)
        if status.exists() and ("ended" not in marks or first_report is None):
            try:
                trials = json.loads(status.read_text())["trials"]
            except (json.JSONDecodeError, KeyError, OSError):
                continue
            reported = [t for t in trials if t["step"] > 0]
            if first_report is None and reported:
                first_report = time.perf_counter() - start
                first_trial = {"cpu": tree_cpu_s(proc.pid), **first_trial_marks(reported[0], launched_epoch, first_report)}
            if len(trials) == TRIALS[0] and all(t["status"] in ("completed", "stopped", "diverged", "failed") for t in trials):
                marks["ended"] = time.perf_counter() - start
    wall = time.perf_counter() - start
    reader.join(timeout=5)
    if proc.returncode != 0:
        raise SystemExit(f"sweeper launch failed ({proc.returncode}): {proc.stderr.read()[-2000:]}")
    return wall, first_report, marks, first_trial


def start_service(directory: Path) -> int:
    """A detached sweep service in `directory`, answering; its pid."""
    env = {**os.environ, "SWEEPER_SERVICE_DIR": str(directory),
           "PYTHONPATH": os.pathsep.join(p for p in [str(ROOT), os.environ.get("PYTHONPATH", "")] if p)}
    done = subprocess.run([sys.executable, "-m", "sweeper.cli", "serve", "--detach"], env=env, capture_output=True,
                          text=True, timeout=400)
    if done.returncode != 0:
        raise SystemExit(f"sweeper serve --detach failed: {done.stderr[-2000:]}")
    return int(json.loads((directory / "service.json").read_text())["pid"])


def stop_service(directory: Path) -> None:
    env = {**os.environ, "SWEEPER_SERVICE_DIR": str(directory), "PYTHONPATH": str(ROOT)}
    subprocess.run([sys.executable, "-m", "sweeper.cli", "serve", "--stop"], env=env, capture_output=True, timeout=300)


def idle_use(pid: int, seconds: float = 30.0) -> tuple[float, float]:
    """(percent of one core the process tree used over `seconds`, its resident memory in MiB)."""
    import psutil

    def tree() -> list:
        root = psutil.Process(pid)
        return [root, *root.children(recursive=True)]

    def cpu() -> float:
        total = 0.0
        for p in tree():
            try:
                t = p.cpu_times()
                total += t.user + t.system
            except psutil.Error:
                pass
        return total

    before, start = cpu(), time.perf_counter()
    time.sleep(seconds)
    used = (cpu() - before) / (time.perf_counter() - start)
    rss = 0.0
    for p in tree():
        try:
            rss += p.memory_info().rss / 2**20
        except psutil.Error:
            pass
    return 100 * used, rss


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=positive_int, default=4)
    parser.add_argument("--steps", type=positive_int, default=500)
    parser.add_argument("--concurrent", type=positive_int, default=2)
    parser.add_argument("--baseline", metavar="REV", help="also launch the sweep on this commit's code, side by side")
    parser.add_argument("--service", action="store_true", help="also launch it attached to a running sweep service")
    args = parser.parse_args()
    TRIALS[0] = args.trials
    old_root = baseline_tree(args.baseline) if args.baseline else None
    with tempfile.TemporaryDirectory(prefix="sweep-overhead-") as tmp:
        tmp = Path(tmp)
        path = overhead_space_file(tmp, args.trials, args.steps, args.concurrent)
        direct, direct_first = run_direct(path, args.trials, args.concurrent)
        (tmp / "new").mkdir()
        no_service = {"SWEEPER_SERVICE_DIR": str(tmp / "no-service")}  # a folder where no service runs
        sweep, first, marks, first_trial = run_sweep(path, tmp / "new", extra_env=no_service)
        if args.service:
            service_dir = Path(tempfile.mkdtemp(prefix="sv", dir="/tmp"))
            try:
                pid = start_service(service_dir)
                idle_cpu, rss = idle_use(pid)
                (tmp / "attached").mkdir()
                served, served_first, _, _ = run_sweep(path, tmp / "attached", extra_env={"SWEEPER_SERVICE_DIR": str(service_dir)})
            finally:
                stop_service(service_dir)
        if old_root is not None:
            (tmp / "old").mkdir()
            old_sweep, old_first, _, _ = run_sweep(path, tmp / "old", old_root)
    print(f"{args.trials} trials of the default hybrid, {args.steps} steps each, {args.concurrent} at a time")
    print(f"direct  {direct:7.1f} s  (plain processes)")
    print(f"sweep   {sweep:7.1f} s  (sweeper launch: Ray, Optuna, checkpoints)")
    print(f"ratio   {sweep / direct:7.3f}  (target <= 1.10)")
    print(f"first report after {first:.1f} s (target <= 10 s); a plain process reaches its first report "
          f"{direct_first:.1f} s after it starts" if first is not None else "first report: not seen")
    names = {"plan": "start-up", "tracking": "Ray and MLflow (side by side)", "ray": "restore", "first": "to the first report",
             "ended": "trials", "exit": "tail"}  # each: the seconds since the previous mark
    points = sorted((at, key) for key, at in {**marks, "first": first, "exit": sweep}.items() if at is not None)
    last, parts = 0.0, []
    for at, key in points:
        parts.append(f"{names[key]} {at - last:.1f} s")
        last = at
    print("where the sweep's seconds go: " + ", ".join(parts))
    if "worker" in first_trial:
        print(f"the first trial: its process up at {first_trial['worker']:.1f} s, its trainable called at "
              f"{first_trial['trainable']:.1f} s, then {first - first_trial['trainable']:.1f} s to its first report (torch, "
              f"the trainer, the steps; a plain process: {direct_first:.1f} s from its start)")
    if "cpu" in first_trial:
        cores = os.cpu_count() or 1
        print(f"CPU used by the launch's processes until the first report: {first_trial['cpu']:.1f} s on {cores} cores "
              f"(so the first report cannot come before {first_trial['cpu'] / cores:.1f} s of that work)")
    if old_root is not None:
        print(f"side by side: this tree sweep/direct {sweep / direct:.3f}, first report {first or float('nan'):.1f} s; "
              f"{args.baseline} sweep/direct {old_sweep / direct:.3f}, first report {old_first or float('nan'):.1f} s; "
              f"sweep wall this tree / {args.baseline} {sweep / old_sweep:.3f}")
    if args.service:
        print(f"the idle service (Ray, {os.cpu_count()} warm workers): {idle_cpu:.2f}% of one core over 30 s (target <= 1%), "
              f"{rss:.0f} MiB resident (its processes together)")
        print(f"attached to the service: {served:.1f} s, sweep/direct {served / direct:.3f} (target <= 1.05); in its own "
              f"process {sweep / direct:.3f}")
        print(f"service: sweep/direct {served / direct:.3f}, first report {served_first or float('nan'):.1f} s, "
              f"plain process first report {direct_first:.1f} s")


if __name__ == "__main__":
    run_tool(main)
