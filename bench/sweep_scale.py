"""Sweep scale: does the driver's cost per trial stay flat as a sweep grows?

Runs `sweeper launch` on sweeps of N trials (default 10, 100, 500) of the smallest trial the
trainer allows (d_model 8, one block, 4 steps, a report each step, 8 evaluation sequences),
FIFO and ASHA, random sampler, 2 at a time, an embedded SQLite MLflow store, and prints for each:

    wall        launch to exit
    ideal       the trials' own run time (Ray's time_total_s, summed) / concurrency
    overhead    wall / ideal
    driver CPU  the `sweeper launch` process's user+system CPU seconds (sampled until it exits),
                per trial and per report
    state       bytes of status.json, optuna.db, mlflow_runs.json and Ray's experiment state

and the ratio of driver CPU per trial at the largest N to that at the smallest (target <= 1.5),
then the marginal driver CPU per trial between sizes (the fixed start-up, ~10 s of imports and
ray.init, flatters the ratio; the marginal cost is what must not grow).
Anchor: Ray Tune's own bookkeeping test runs 10,000 one-second trials on 16 CPUs in 715 s
against a 625 s ideal (14% over).

`--baseline REV` runs every size on this checkout's code and on an older commit's (a `git worktree`
beside it, bench/worktree.py), one after the other, and prints the driver CPU per trial of both.

    python bench/sweep_scale.py [--sizes 10 100 500] [--schedulers fifo asha] [--profile DIR] [--baseline REV]

`--profile DIR` also samples the driver with py-spy (`pip install py-spy`; 100 samples a second,
its raw stacks kept in DIR) and prints, per function, the driver's sampled CPU per trial at each
size, the functions whose per-trial cost grows most between the smallest and the largest N first:
where an O(N) cost per event lives.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

sys.path.insert(0, str(Path(__file__).resolve().parent))
from worktree import baseline_tree  # noqa: E402
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import Distinct, positive_int
from sweeper.fs import check_output_file

ROOT = Path(__file__).resolve().parent.parent
STEPS = 4
PROFILE_RATE = 100  # py-spy samples per second


def space(n: int, scheduler: str) -> dict:
    return {
        "name": f"scale{n}{scheduler}",
        "description": "bench/sweep_scale.py: the smallest trials, many of them",
        "fixed": {"model": {"d_model": 8, "n_layers": 1, "n_heads": 1, "mlp_ratio": 1},
                  "eval": {"n_sequences": 8, "batch_size": 8},
                  "optim": {"batch_size": 4, "warmup_steps": 0}, "dat": {"switch_step": 2}},
        "space": {"optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "budget": {"num_samples": n, "max_concurrent": 2, "max_steps": STEPS, "eval_every": 1},
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 2} if scheduler == "asha" else {"type": "fifo"},
        "searcher": {"sampler": "random", "seed": 0},
        "resources": {"cpu": 1},
    }


def run(n: int, scheduler: str, workdir: Path, profile_dir: Path | None = None, root: Path = ROOT) -> dict:
    spec = space(n, scheduler)
    workdir.mkdir(parents=True, exist_ok=True)
    path = workdir / f"{spec['name']}.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    env = {**os.environ, "PYTHONPATH": str(root)}
    env.pop("MLFLOW_TRACKING_URI", None)
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", "sweeper.cli", "launch", str(path), "--progress", "lines",
                             "--progress-every", "60"], cwd=workdir, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)
    driver, cpu = psutil.Process(proc.pid), 0.0
    spy = None
    if profile_dir is not None:  # attach to the driver alone (not its Ray workers); it ends when the driver does
        spy = subprocess.Popen([py_spy(), "record", "--pid", str(proc.pid), "--rate", str(PROFILE_RATE), "--format", "raw",
                                "--nonblocking", "--output", str(profile_dir / f"{spec['name']}.txt")],
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    while proc.poll() is None:
        try:
            t = driver.cpu_times()
            cpu = t.user + t.system
        except psutil.Error:
            pass
        time.sleep(0.2)
    wall = time.perf_counter() - start
    if spy is not None:
        spy.wait(timeout=120)
    err = proc.stderr.read()
    if proc.returncode != 0:
        raise SystemExit(f"{spec['name']}: sweeper launch exited {proc.returncode}: {err[-1000:]}")
    sweep_dir = workdir / "sweeps" / spec["name"]
    trial_time, reports = 0.0, 0
    report_files = list(sweep_dir.glob("trials/*/metrics.jsonl")) or list(sweep_dir.rglob("result.json"))  # older trees: Ray's
    for reports_file in report_files:  # each trial's own reports
        reports += sum(1 for x in reports_file.read_text().splitlines() if x.strip())
    for trial in json.loads((sweep_dir / "status.json").read_text())["trials"]:  # Ray's time_total_s of its last report
        trial_time += float(trial["metrics"].get("time_total_s", 0.0))
    sizes = {f: (sweep_dir / f).stat().st_size for f in ("status.json", "optuna.db") if (sweep_dir / f).exists()}
    ideal = trial_time / spec["budget"]["max_concurrent"]
    return {"n": n, "scheduler": scheduler, "wall_s": wall, "ideal_s": ideal, "overhead": wall / ideal if ideal else float("nan"),
            "driver_cpu_s": cpu, "cpu_per_trial_s": cpu / n, "cpu_per_report_ms": 1000 * cpu / max(reports, 1),
            "reports": reports, "sizes": sizes}


def py_spy() -> str:
    beside = Path(sys.executable).with_name("py-spy")  # installed in this Python's environment, or on PATH
    found = str(beside) if beside.exists() else shutil.which("py-spy")
    if not found:
        raise SystemExit("--profile needs py-spy: pip install py-spy")
    return found


def function_samples(raw: Path) -> dict[str, int]:
    """Inclusive samples per function (a function counted once per stack it is on) from py-spy's raw
    output: one line per distinct stack, `frame;frame;...;frame count`, a frame `name (file:line)`."""
    totals: dict[str, int] = {}
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            continue
        names = {frame.split(":")[0] + ")" if " (" in frame else frame for frame in stack.split(";")}
        for name in names:
            totals[name] = totals.get(name, 0) + int(count)
    return totals


def print_growth(rows: list[dict], profile_dir: Path, top: int = 25) -> None:
    """Per function: sampled driver CPU seconds per trial at each size, sorted by growth."""
    small, large = rows[0], rows[-1]
    per_trial = {r["n"]: {f: c / PROFILE_RATE / r["n"] for f, c in function_samples(profile_dir / f"scale{r['n']}{r['scheduler']}.txt").items()}
                 for r in rows}
    growth = sorted(per_trial[large["n"]], key=lambda f: per_trial[large["n"]][f] - per_trial[small["n"]].get(f, 0.0), reverse=True)
    print(f"{small['scheduler']}: sampled driver CPU s per trial, by function (inclusive), most grown from N={small['n']} to N={large['n']} first:")
    print("  " + "  ".join(f"N={r['n']:<5}" for r in rows) + "  function")
    for f in growth[:top]:
        print("  " + "  ".join(f"{per_trial[r['n']].get(f, 0.0):7.3f}" for r in rows) + f"  {f}")


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", type=positive_int, nargs="+", default=[10, 100, 500], action=Distinct)
    parser.add_argument("--schedulers", nargs="+", default=["fifo", "asha"], choices=["fifo", "asha"], action=Distinct)
    parser.add_argument("--json", help="also write the rows here")
    parser.add_argument("--profile", type=Path, help="sample the driver with py-spy; keep its stacks in this folder")
    parser.add_argument("--baseline", metavar="REV", help="also run every size on this commit's code, side by side")
    args = parser.parse_args()
    if args.json:  # before any sweep runs: a refusal after them would lose the rows
        check_output_file(args.json, "--json")
    old_root = baseline_tree(args.baseline) if args.baseline else None
    if args.profile:
        py_spy()  # before any sweep runs
        args.profile.mkdir(parents=True, exist_ok=True)
    rows = []
    with tempfile.TemporaryDirectory(prefix="sweep-scale-") as tmp:
        for scheduler in args.schedulers:
            for n in args.sizes:
                row = run(n, scheduler, Path(tmp) / "new", args.profile)
                rows.append(row)
                if old_root is not None:
                    old = run(n, scheduler, Path(tmp) / "old", None, old_root)
                    print(f"{scheduler:>4} N={n:<4} {args.baseline}: wall {old['wall_s']:7.1f} s  overhead {old['overhead']:5.2f}x  "
                          f"driver CPU {old['cpu_per_trial_s']:.3f} s/trial; this tree / {args.baseline}: driver CPU per trial "
                          f"{row['cpu_per_trial_s'] / old['cpu_per_trial_s']:.2f}, wall {row['wall_s'] / old['wall_s']:.2f}", flush=True)
                s = row["sizes"]
                print(f"{scheduler:>4} N={n:<4} wall {row['wall_s']:7.1f} s  ideal {row['ideal_s']:7.1f} s  overhead "
                      f"{row['overhead']:5.2f}x  driver CPU {row['driver_cpu_s']:7.1f} s = {row['cpu_per_trial_s']:.3f} s/trial, "
                      f"{row['cpu_per_report_ms']:.1f} ms/report ({row['reports']} reports)  state: status.json "
                      f"{s.get('status.json', 0) / 1024:.0f} KiB, optuna.db {s.get('optuna.db', 0) / 1024:.0f} KiB", flush=True)
    for scheduler in args.schedulers:
        mine = [r for r in rows if r["scheduler"] == scheduler]
        if len(mine) > 1:
            small, large = mine[0], mine[-1]
            print(f"{scheduler}: driver CPU per trial at N={large['n']} / at N={small['n']}: "
                  f"{large['cpu_per_trial_s'] / small['cpu_per_trial_s']:.2f} (target <= 1.5; includes the fixed start-up)")
            for a, b in zip(mine, mine[1:]):  # without the fixed cost: what each further trial adds
                print(f"{scheduler}: marginal driver CPU per trial from N={a['n']} to N={b['n']}: "
                      f"{(b['driver_cpu_s'] - a['driver_cpu_s']) / (b['n'] - a['n']):.3f} s")
            if args.profile:
                print_growth(mine, args.profile)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    run_tool(main)
