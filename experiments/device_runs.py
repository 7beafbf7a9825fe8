"""Train a folder of trial configs on a machine where the sweep service does not run, and pack the runs.

For a lent accelerator box that has torch but not Ray, Optuna or MLflow: each config is one
`python -m sweeper trial` (the trainer alone, pydantic and PyYAML its only other needs), all
started at once. Configs are grouped by the part of their file name before the first `_` (an
experiment names them `s5115_confirm-0.yaml`, `s5115_confirm-1.yaml`, ...: one group per seed).

Two ways to meet a deadline (the machine's time is short):

- finish (the default): once the runs have reported for a while, if the slowest one would not
  finish in time, the last groups are stopped at once, as many as it takes for the first ones to
  fit (each run's rate is taken to grow as (n/k)**0.4 when k of n runs go on, below what was
  measured); again after each check while they would still miss. What is stopped is lost, so
  when the deadline is short, start only the groups that fit (`--groups`).
- `--checkpoints`: every run trains until the deadline and is paused there; the pack carries the
  unfinished runs' newest checkpoints (ckpt-N.tar beside it, each under 15 MiB), and `--restore`
  with that folder on the next call resumes them where they paused (the same accelerator and
  torch, else refused), bit for bit as if never stopped.

    python -m experiments.device_runs train CONFIGS RUNS --deadline 480 --groups 2 --pack OUT/runs.tar.gz
    python -m experiments.device_runs train CONFIGS RUNS --deadline 540 --checkpoints --pack OUT/runs.tar.gz \
        [--restore PACKS]

How many to start: the runs share the accelerator by time slices and each is bound by its own
kernel launches, so more runs at once train more steps in all but each one slower. Measured on an
NVIDIA H200 with 16 cores (the 4-block LSTM hybrid of experiments/dat_paper_depth.py, batch 64):
15 runs at once, 25-33 steps/s each (about 450 together); 9 at once, 42-50; 3 at once, 58-67
(about 200 together); with the curriculum configs, 9 at once 33-42, 3 at once 50-58, 2 at once 67; the 2-layer
transformer, 8 at once, 50-70. To finish runs within one call, start only the groups that can
(`--groups`); to train the most steps, start them all with `--checkpoints`.

The pack (runs.tar.gz) holds each run's config.yaml, metrics.jsonl, result.json, times.json and
log, and machine.json (accelerator, torch, the commit the configs were written from); an
experiment imports the finished runs from it.
"""

from __future__ import annotations

import io
import json
import os
import re
import shutil
import stat
import subprocess
import sys
import tarfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from trainables.config import ConfigError
from trainables.run_dir import RunDir, parse_reports
from trainables.safe_yaml import MAX_BYTES as MAX_CONFIG_BYTES, load_yaml_text, read_yaml
from core import json_text
from core.errors import cut, error_line
from core.tool_cli import Parser, run_tool, summary as doc_summary
from sweeper.cli_types import positive_int, positive_number
from sweeper.fs import check_output_file, read_json_limited

MACHINE = "machine.json"
PROVENANCE = "provenance.json"  # beside the configs: {"commit": the code they were written from}
KEPT = ("config.yaml", "metrics.jsonl", "result.json", "times.json")
CHECKPOINT_TAR_BYTES = 15 * 2**20  # each ckpt-N.tar: a file that comes back from the machine is at most 16 MiB
CHECKPOINT_BYTES = 52 * 2**20  # all of them: what comes back, and what travels there again, is at most 64 MiB
MAX_SMALL_FILE = 2**20  # bytes of machine.json or provenance.json read
RUN_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._-]{0,199}")  # a run's folder in a pack: a config's stem, nothing above


class DeviceRunsError(Exception):
    """A mistake in the call or its inputs: one line."""


@dataclass
class Run:
    config: Path
    out: Path
    steps: int
    process: subprocess.Popen | None = None
    stopped_at: float | None = None  # seconds from the start, when the deadline stopped it

    @property
    def group(self) -> str:
        return self.config.stem.split("_")[0]

    def last_report(self) -> dict:
        """The newest whole report ({} before the first)."""
        return RunDir(self.out).last_report() or {}

    def step(self) -> int:
        """The step of the newest report (0 before the first)."""
        return int(self.last_report().get("step", 0))

    def live(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def finished(self) -> bool:
        return self.step() >= self.steps


def cuda_here() -> bool:
    import torch

    return torch.cuda.is_available()


def machine() -> dict:
    import torch

    cuda = torch.cuda.is_available()
    return {"accelerator": torch.cuda.get_device_name(0) if cuda else "cpu", "torch": torch.__version__,
            "cuda": torch.version.cuda if cuda else None}


def restore(packs: Path, runs_dir: Path) -> tuple[list[str], list[str]]:
    """Unpack a previous call's pack into `runs_dir`: each run that finished or whose checkpoint came
    back (the others start afresh). Returns the runs restored and a line for each run or checkpoint
    file that could not be (those runs start afresh too). Refused (DeviceRunsError) when the pack
    itself cannot be read, or was trained on another accelerator or torch: a resumed run must train
    on one."""
    notes = []
    if why := not_a_file(packs / "runs.tar.gz"):
        raise DeviceRunsError(f"--restore {cut(str(packs), 120)}: runs.tar.gz {why}")
    try:
        with tarfile.open(packs / "runs.tar.gz", "r:gz") as tar:
            was = json_text.loads(tar.extractfile(MACHINE).read(MAX_SMALL_FILE))
            if not isinstance(was, dict):
                raise ValueError(f"{MACHINE} is not a JSON object")
            now = machine()
            if (was.get("accelerator"), was.get("torch")) != (now["accelerator"], now["torch"]):
                raise DeviceRunsError(f"--restore {packs}: trained on {was.get('accelerator')} with torch "
                                      f"{was.get('torch')}, this is {now['accelerator']} with torch {now['torch']}")
            checkpoints = was.get("checkpoints", [])
            if not isinstance(checkpoints, list) or not all(isinstance(n, str) for n in checkpoints):
                raise ValueError("machine.json: checkpoints is not a list of file names")
            runs_dir.mkdir(parents=True, exist_ok=True)
            paused = set()
            for name in checkpoints:  # this pack's own, not a stale one beside it
                paused |= unpack_checkpoints(packs / Path(name).name, runs_dir, notes)
            kept = []
            names = set(tar.getnames())
            for run in sorted({n.split("/")[0] for n in names if n.count("/") == 1}):
                if not RUN_NAME.fullmatch(run) or run in (".", ".."):  # `../config.yaml`: a run named `..`
                    notes.append(f"{cut(ascii(run), 60)}: not a run's name (a config file's stem); left out")
                    continue
                if f"{run}/config.yaml" not in names or f"{run}/metrics.jsonl" not in names:
                    continue  # it never started (its log says why)
                try:
                    text = tar.extractfile(f"{run}/config.yaml").read(MAX_CONFIG_BYTES + 1)
                    if len(text) > MAX_CONFIG_BYTES:
                        raise ValueError("config.yaml too large")
                    config = load_yaml_text(text.decode("utf-8"), f"{run}/config.yaml")
                    reports = parse_reports(tar.extractfile(f"{run}/metrics.jsonl").read())
                    finished = bool(reports) and reports[-1]["step"] == config.get("steps")
                except (OSError, EOFError, zlib.error, tarfile.TarError, ConfigError, ValueError, AttributeError) as err:
                    notes.append(f"{run}: unreadable in the pack ({type(err).__name__}); it starts afresh")
                    shutil.rmtree(runs_dir / run, ignore_errors=True)
                    continue
                if run in paused or finished:
                    kept.append(run)
                    tar.extractall(runs_dir, members=[tar.getmember(f"{run}/{f}") for f in ("config.yaml", "metrics.jsonl")],
                                   filter="data")
    except (OSError, EOFError, zlib.error, KeyError, ValueError, TypeError, AttributeError, tarfile.TarError) as err:
        first_line = str(err).splitlines()[0] if str(err) else ""
        raise DeviceRunsError(f"--restore {packs}: not a pack of this tool ({type(err).__name__}: {first_line})") from None
    return kept, notes


def unpack_checkpoints(path: Path, runs_dir: Path, notes: list[str]) -> set[str]:
    """The runs of one ckpt-N.tar, unpacked whole into `runs_dir` (or, if the file is missing or
    damaged, none: a line in `notes`, and its runs start afresh)."""
    if os.path.exists(path) and not os.path.isfile(path):  # a FIFO would block the read for ever
        notes.append(f"{path.name}: not a regular file; its runs start afresh")
        return set()
    staging = runs_dir / f".unpacking-{path.name}"
    shutil.rmtree(staging, ignore_errors=True)
    try:
        with tarfile.open(path, "r:") as ckpt:
            ckpt.extractall(staging, filter="data")
    except (OSError, EOFError, tarfile.TarError) as err:
        notes.append(f"{path.name}: unreadable ({type(err).__name__}); its runs start afresh")
        shutil.rmtree(staging, ignore_errors=True)
        return set()
    runs = set()
    for run in sorted(staging.iterdir() if staging.is_dir() else []):
        if (runs_dir / run.name).exists():
            notes.append(f"{path.name}: {run.name} is already in {runs_dir}; its checkpoint is left out")
            continue
        os.replace(run, runs_dir / run.name)
        runs.add(run.name)
    shutil.rmtree(staging, ignore_errors=True)
    return runs


def not_a_file(path: Path) -> str | None:
    """Why `path` cannot be read as a file (a FIFO would block the read for ever), or None."""
    try:
        mode = os.stat(path).st_mode
    except OSError as err:
        return f"cannot be read ({err.strerror or err})"
    return None if stat.S_ISREG(mode) else "is not a regular file"


def plan_runs(configs: Path, runs_dir: Path, groups: int | None = None) -> list[Run]:
    """The runs of the configs of the first `groups` groups (all by default); read only. A config
    that is no trial config with whole-number steps, or a run folder of another config, is refused."""
    runs = []
    if not configs.is_dir():
        raise DeviceRunsError(f"{cut(str(configs), 120)}: not a folder of trial configs")
    for c in sorted(configs.glob("*.yaml")):
        try:
            config = read_yaml(c)
        except ConfigError as err:
            raise DeviceRunsError(f"{cut(str(c), 120)}: not a trial config ({cut(str(err), 120)})") from None
        steps = config.get("steps")
        if not isinstance(steps, int) or isinstance(steps, bool) or steps < 1:
            raise DeviceRunsError(f"{cut(str(c), 120)}: not a trial config with steps (a whole number >= 1)")
        if (device := config.get("device")) == "cuda" and not cuda_here():  # each run would fail at once
            raise DeviceRunsError(f"{cut(str(c), 120)}: device {device}, and this machine has no CUDA device; write "
                                  "the configs with --device cpu, or train them where there is one")
        runs.append(Run(c, runs_dir / c.stem, steps))
    if not runs:
        raise DeviceRunsError(f"{cut(str(configs), 120)}: no trial configs (*.yaml) there")
    kept = sorted({r.group for r in runs})[:groups]
    runs = [r for r in runs if r.group in kept]
    for r in runs:
        check_same_config(r)
    return runs


def train(configs: Path, runs_dir: Path, deadline_s: float, groups: int | None = None, finish: bool = True,
          check_every: float = 30.0, warmup_s: float = 90.0, margin_s: float = 30.0,
          runs: list[Run] | None = None) -> list[Run]:
    """Start the configs of the first `groups` groups (all by default) at once, resuming a run whose
    folder holds a checkpoint; with `finish`, stop the last group while the slowest run would miss
    the deadline; stop every run at the deadline. `runs`: the `plan_runs` of these, when made already."""
    runs = plan_runs(configs, runs_dir, groups) if runs is None else runs
    runs_dir.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    for r in runs:
        if r.finished():
            continue
        resume = ["--resume"] if os.path.isdir(r.out / "checkpoint") else []
        with open(runs_dir / f"{r.config.stem}.log", "ab") as log:
            r.process = subprocess.Popen([sys.executable, "-m", "sweeper", "trial", str(r.config), "--out", str(r.out),
                                          "--threads", "1", *resume], stdout=log, stderr=subprocess.STDOUT)
    before = {r.config.stem: r.step() for r in runs}
    last_check, last_cut = start, start
    while any(r.live() for r in runs):
        time.sleep(max(0.0, min(check_every, deadline_s - (time.monotonic() - start))))
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
            stop(live, now - start)
            break
        measured = all(rates[r.config.stem] > 0 for r in live)  # every run has reported within the check
        if (finish and measured and now - start >= warmup_s and now - last_cut >= 2 * check_every
                and need > left - margin_s and len(groups) > 1):
            by_group = [[(r.steps - steps[r.config.stem], rates[r.config.stem]) for r in live if r.group == g]
                        for g in groups]
            keep = groups_that_fit(by_group, left - margin_s)
            print(f"  stopping group{'s' if len(groups) - keep > 1 else ''} {' '.join(groups[keep:])}: "
                  "the slowest run would miss the deadline", flush=True)
            stop([r for r in live if r.group in groups[keep:]], now - start)
            last_cut = now
    for r in runs:
        if r.process is not None:
            r.process.wait()
    return runs


def groups_that_fit(groups: list[list[tuple[int, float]]], left_s: float, speedup: float = 0.4) -> int:
    """How many of the first `groups` (each a list of its runs' (steps to go, steps/s)) can finish
    in `left_s`, if only they go on: with k of n runs going on, each one's rate is taken to be
    (n/k)**speedup times its own (measured on an H200: about 0.5). At least 1."""
    n = sum(len(g) for g in groups)
    for keep in range(len(groups), 1, -1):
        k = sum(len(g) for g in groups[:keep])
        factor = (n / k) ** speedup
        if all(to_go <= rate * factor * left_s for g in groups[:keep] for to_go, rate in g):
            return keep
    return 1


def check_same_config(run: Run) -> None:
    """A run folder that already holds a config must hold this one: else it is another run's (an
    earlier call's config of the same file name), and resuming or skipping it would be wrong."""
    from trainables.config import ConfigError, load_trial_config

    if not (run.out / "config.yaml").is_file():
        return
    try:
        same = load_trial_config(run.out / "config.yaml") == load_trial_config(run.config)
    except ConfigError:
        same = False
    if not same:
        raise DeviceRunsError(f"{run.config}: {run.out} holds a run of another config; give this call its own "
                              "runs folder, or the configs its runs were made from")


def stop(runs: list[Run], at: float, grace_s: float = 20.0) -> None:
    """Ask every run to pause (each checkpoints as it stops), then wait; kill one still running after `grace_s`."""
    for run in runs:
        run.stopped_at = at
        run.process.terminate()
    until = time.monotonic() + grace_s
    for run in runs:
        try:
            run.process.wait(timeout=max(0.0, until - time.monotonic()))
        except subprocess.TimeoutExpired:
            run.process.kill()
            run.process.wait()


def _add_bytes(tar: tarfile.TarFile, name: str, data: bytes) -> None:
    info = tarfile.TarInfo(name)
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def written_from(configs: Path) -> str | None:
    """The commit the configs were written from (their provenance.json), or None without one; a
    provenance.json that is not {"commit": TEXT or null} is refused, before anything trains."""
    path = configs / PROVENANCE
    if not os.path.lexists(path):
        return None
    try:
        data = read_json_limited(path, PROVENANCE, MAX_SMALL_FILE, cut(str(path), 120))
    except ConfigError as err:  # a FIFO, too large, not JSON
        raise DeviceRunsError(str(err)) from None
    commit = data.get("commit") if isinstance(data, dict) else False
    if commit is not None and not isinstance(commit, str):
        raise DeviceRunsError(f"{cut(str(path), 120)}: must be a JSON object whose commit is text or null")
    return commit


def pack(runs: list[Run], path: Path, checkpoints: bool = False, commit: str | None = None) -> list[str]:
    """The runs' kept files and machine.json in one tar.gz at `path`; with `checkpoints`, each
    unfinished run's newest checkpoint too, in ckpt-N.tar files beside it (whole runs, in order,
    while they fit CHECKPOINT_BYTES), named in machine.json. Returns a line for each unfinished
    run left without one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    left_out, total, part_bytes, parts = [], 0, 0, []  # parts: one list of (run, checkpoint folder) per ckpt-N.tar
    for r in runs if checkpoints else []:
        link = r.out / "checkpoint"
        if r.finished() or not link.is_dir():
            continue
        folder = link.resolve()
        size = sum(f.stat().st_size for f in folder.iterdir())
        if size > CHECKPOINT_TAR_BYTES:
            left_out.append(f"{r.config.stem}: its checkpoint is larger than the {CHECKPOINT_TAR_BYTES >> 20} MiB a file "
                            "may be to come back")
            continue
        if total + size > CHECKPOINT_BYTES:
            left_out.append(f"{r.config.stem}: its checkpoint does not fit the {CHECKPOINT_BYTES >> 20} MiB that comes back")
            continue
        total += size
        if not parts or part_bytes + size > CHECKPOINT_TAR_BYTES:
            parts.append([])
            part_bytes = 0
        parts[-1].append((r, folder))
        part_bytes += size
    names = [f"ckpt-{n}.tar" for n in range(len(parts))]
    for name, part in zip(names, parts):
        with tarfile.open(path.parent / name, "w") as tar:
            for r, folder in part:
                tar.add(folder, arcname=f"{r.config.stem}/{folder.name}")
                tar.add(r.out / "checkpoint", arcname=f"{r.config.stem}/checkpoint")  # the link itself
    partial = path.with_name(path.name + ".partial")  # a call killed while packing leaves no cut pack
    with tarfile.open(partial, "w:gz") as tar:
        _add_bytes(tar, MACHINE, json.dumps({**machine(), "checkpoints": names, "commit": commit}, indent=1).encode())
        for r in runs:
            for name in KEPT:
                if (r.out / name).is_file():
                    tar.add(r.out / name, arcname=f"{r.config.stem}/{name}")
            if (log := r.out.parent / f"{r.config.stem}.log").is_file():
                tar.add(log, arcname=f"{r.config.stem}/log.txt")
    os.replace(partial, path)
    return left_out


def summary(runs: list[Run]) -> str:
    lines = [f"{'run':24} {'steps':>13} {'steps/s':>8}  ended"]
    for r in runs:
        last = r.last_report()
        ended = (f"stopped at {r.stopped_at:.0f} s (deadline)" if r.stopped_at is not None
                 else "finished before" if r.process is None else f"exit {r.process.returncode}")
        lines.append(f"{r.config.stem:24} {r.step():>6}/{r.steps:<6} {last.get('steps_per_s', 0):8.1f}  {ended}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = Parser(prog="python -m experiments.device_runs", description=doc_summary(__doc__))
    sub = parser.add_subparsers(dest="verb", required=True)
    t = sub.add_parser("train", help="train every config of a folder at once, against a deadline")
    t.add_argument("configs", type=Path, help="a folder of trial configs (*.yaml), grouped by the name before its first _")
    t.add_argument("runs", type=Path, help="where the run folders go")
    t.add_argument("--deadline", type=positive_number, required=True, help="seconds from the start")
    t.add_argument("--groups", type=positive_int, default=None, help="start only the first N groups (default: all)")
    t.add_argument("--pack", type=Path, required=True, help="tar.gz of the runs' reports")
    t.add_argument("--checkpoints", action="store_true",
                   help="pause every run at the deadline and pack the unfinished runs' checkpoints beside the pack")
    t.add_argument("--restore", type=Path, help="a folder holding a previous call's pack and checkpoints, to resume")
    args = parser.parse_args(argv)
    try:  # every input checked before anything is written or trained, and before the first line on stdout
        check_output_file(args.pack, "--pack")
        commit = written_from(args.configs)
        plan_runs(args.configs, args.runs, args.groups)
        restored, notes = restore(args.restore, args.runs) if args.restore is not None else ([], [])
        runs = plan_runs(args.configs, args.runs, args.groups)  # the restored run folders against the configs
    except (DeviceRunsError, ConfigError) as err:
        print(error_line(f"device_runs: {err}"), file=sys.stderr)
        return 2
    print(json.dumps(machine()), flush=True)
    for line in notes:
        print(f"not restored: {line}", flush=True)
    if args.restore is not None:
        print(f"restored {len(restored)} runs from {args.restore}", flush=True)
    runs = train(args.configs, args.runs, args.deadline, args.groups, finish=not args.checkpoints, runs=runs)
    if args.restore is not None and (orphans := sorted(set(restored) - {r.config.stem for r in runs})):
        print(f"restored but not in this call (no config, or a group left out), so neither trained nor packed: "
              f"{', '.join(orphans)}", flush=True)
    for line in pack(runs, args.pack, args.checkpoints, commit):
        print(f"left without a checkpoint: {line}", flush=True)
    print(summary(runs), flush=True)
    return 0


if __name__ == "__main__":
    run_tool(main)
