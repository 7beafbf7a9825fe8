"""Train a folder of trial configs on a machine where the sweep service does not run, and pack the runs.

For a lent accelerator box that has torch but not Ray, Optuna or MLflow: each config is one
`python -m sweeper trial` (the trainer alone, pydantic and PyYAML its only other needs), all
started at once. Configs are grouped by the part of their file name before the first `_` (an
experiment names them `s5115_joint.yaml`, `s5115_dat.yaml`, ...: one group per seed, so that
the arms of a seed finish together or not at all). Against a deadline: once the runs have
reported for a while, if the slowest one would not finish in time, the last group is stopped,
which frees the accelerator for the others; again after each check until the rest fit.

    python -m experiments.device_runs train CONFIGS RUNS --deadline 480 --pack OUT/runs.tar.gz

The pack holds each run's config.yaml, metrics.jsonl and result.json (no checkpoints) and
machine.json (accelerator, torch); an experiment imports the finished runs from it.
"""

from __future__ import annotations

import argparse
import io
import json
import subprocess
import sys
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

MACHINE = "machine.json"
KEPT = ("config.yaml", "metrics.jsonl", "result.json")


@dataclass
class Run:
    config: Path
    out: Path
    steps: int
    process: subprocess.Popen | None = None
    stopped: bool = False  # stopped by the deadline rule

    @property
    def group(self) -> str:
        return self.config.stem.split("_")[0]

    def step(self) -> int:
        """The step of the newest report (0 before the first)."""
        try:
            lines = (self.out / "metrics.jsonl").read_bytes().splitlines()
            return int(json.loads(lines[-1])["step"]) if lines else 0
        except (OSError, ValueError, KeyError, IndexError):
            return 0

    def live(self) -> bool:
        return self.process is not None and self.process.poll() is None


def machine() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    return {"accelerator": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
            "cuda": torch.version.cuda if cuda else None}


def train(configs: Path, runs_dir: Path, deadline_s: float, check_every: float = 30.0, warmup_s: float = 90.0,
          margin_s: float = 30.0) -> list[Run]:
    """Start every config at once; stop the last group while the slowest run would miss the deadline."""
    import yaml

    runs = [Run(c, runs_dir / c.stem, int(yaml.safe_load(c.read_text())["steps"])) for c in sorted(configs.glob("*.yaml"))]
    runs_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    for r in runs:
        log = open(runs_dir / f"{r.config.stem}.log", "wb")
        r.process = subprocess.Popen([sys.executable, "-m", "sweeper", "trial", str(r.config), "--out", str(r.out),
                                      "--threads", "1"], stdout=log, stderr=subprocess.STDOUT)
    before = {r.config.stem: 0 for r in runs}
    last_check, last_cut = start, start
    while any(r.live() for r in runs):
        time.sleep(check_every)
        now = time.monotonic()
        left = deadline_s - (now - start)
        live = [r for r in runs if r.live()]
        steps = {r.config.stem: r.step() for r in runs}
        rates = {r.config.stem: (steps[r.config.stem] - before[r.config.stem]) / (now - last_check) for r in live}
        before, last_check = steps, now
        groups = sorted({r.group for r in live})
        need = max(((r.steps - steps[r.config.stem]) / max(rates[r.config.stem], 1e-9) for r in live), default=0.0)
        print(f"[{now - start:5.0f} s] {len(live)} running in {len(groups)} groups; "
              + " ".join(f"{r.config.stem}:{steps[r.config.stem]}@{rates[r.config.stem]:.0f}/s" for r in live)
              + f" | slowest needs {need:.0f} s, {left:.0f} s left", flush=True)
        if left <= 0:
            for r in live:
                stop(r)
            break
        if now - start >= warmup_s and now - last_cut >= 2 * check_every and need > left - margin_s and len(groups) > 1:
            print(f"  stopping group {groups[-1]}: the slowest run would miss the deadline", flush=True)
            for r in live:
                if r.group == groups[-1]:
                    stop(r)
            last_cut = now
    for r in runs:
        if r.process is not None:
            r.process.wait()
    return runs


def stop(run: Run) -> None:
    run.stopped = True
    run.process.terminate()
    try:
        run.process.wait(timeout=20)
    except subprocess.TimeoutExpired:
        run.process.kill()


def pack(runs: list[Run], path: Path) -> None:
    """The runs' kept files and machine.json, in one tar.gz."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(path, "w:gz") as tar:
        data = json.dumps(machine(), indent=1).encode()
        info = tarfile.TarInfo(MACHINE)
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
        for r in runs:
            for name in KEPT:
                if (r.out / name).is_file():
                    tar.add(r.out / name, arcname=f"{r.config.stem}/{name}")
            if (log := r.out.parent / f"{r.config.stem}.log").is_file():
                tar.add(log, arcname=f"{r.config.stem}/log.txt")


def summary(runs: list[Run]) -> str:
    lines = [f"{'run':24} {'steps':>13} {'steps/s':>8}  ended"]
    for r in runs:
        try:
            last = json.loads((r.out / "metrics.jsonl").read_bytes().splitlines()[-1])
        except (OSError, ValueError, IndexError):
            last = {}
        ended = "stopped (deadline)" if r.stopped else f"exit {r.process.returncode}"
        lines.append(f"{r.config.stem:24} {r.step():>6}/{r.steps:<6} {last.get('steps_per_s', 0):8.1f}  {ended}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m experiments.device_runs", description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="verb", required=True)
    t = sub.add_parser("train", help="train every config of a folder at once, against a deadline")
    t.add_argument("configs", type=Path)
    t.add_argument("runs", type=Path, help="where the run folders go")
    t.add_argument("--deadline", type=float, required=True, help="seconds from the start")
    t.add_argument("--pack", type=Path, required=True, help="tar.gz of the runs' reports")
    args = parser.parse_args(argv)
    print(json.dumps(machine()), flush=True)
    runs = train(args.configs, args.runs, args.deadline)
    pack(runs, args.pack)
    print(summary(runs), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
