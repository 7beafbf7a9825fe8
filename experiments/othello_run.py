"""Run the Othello trials of docs/results/othello.md: one process per trial, one torch thread each.

    python experiments/othello_run.py RUNS.json OUT_DIR [--jobs 16]

RUNS.json is a list of {"name": ..., "set": {dotted.key: value, ...}}: each run is the `othello`
preset with those overrides (a `seed` among them). Every report goes to OUT_DIR/NAME.jsonl, the
final one also to OUT_DIR/NAME.json; a run whose .json exists is skipped (rerun to resume a
cut-off batch). No Ray, no MLflow: the trainer alone, as `sweeper trial othello --threads 1` runs it.
"""

from __future__ import annotations

import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path
from core.errors import ConfigError, control_character, cut, short_path
from core.files import check_output, write_atomic
from core.tool_cli import Parser, run_tool, summary
from sweeper.cli_types import cpus

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def run_one(name: str, overrides: dict, out_dir: str) -> str:
    import torch

    from trainables.config import load_trial_config, with_overrides
    from trainables.train import train

    torch.set_num_threads(1)
    cfg = with_overrides(load_trial_config("othello"), overrides, source=name)
    out = Path(out_dir)
    log = os.fdopen(os.open(out / f"{name}.jsonl", os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o644), "w")
    start = time.perf_counter()

    def report(metrics: dict, checkpoint_dir) -> None:
        log.write(json.dumps({**metrics, "wall_s": time.perf_counter() - start}) + "\n")
        log.flush()

    result = train(cfg, report=report)
    final = {"name": name, "set": overrides, "status": result.status, "wall_s": time.perf_counter() - start,
             "metrics": result.metrics}
    write_atomic(out / f"{name}.json", json.dumps(final, indent=1))
    return f"{name}: {result.status} in {final['wall_s']:.0f} s, acc_3x {result.metrics.get('acc_3x', float('nan')):.3f}"


MAX_RUNS_FILE = 2**20
MAX_NAME_BYTES = 200  # NAME.jsonl and NAME.json fit a file name's 255 bytes


def read_runs(path: Path) -> list[dict]:
    """The runs file: a list of {"name": a file name, "set": {dotted.key: value}}, names unique, every
    run's overrides a valid `othello` config; one ConfigError line otherwise, before anything is made."""
    from sweeper.fs import read_json_limited
    from trainables.config import load_trial_config, with_overrides

    shown = short_path(path, 120)
    runs = read_json_limited(path, "runs file", MAX_RUNS_FILE, shown)  # a FIFO, too large, not JSON: its own line
    if not isinstance(runs, list) or not all(isinstance(r, dict) and isinstance(r.get("set"), dict) for r in runs):
        raise ConfigError(f"{shown}: not a list of runs, each an object with a name and a set of overrides")
    names = [r.get("name") for r in runs]
    if len(set(map(str, names))) != len(names) or not all(isinstance(n, str) and n not in ("", ".", "..")
                                                          and "/" not in n and control_character(n) is None
                                                          and len(n.encode()) <= MAX_NAME_BYTES for n in names):
        raise ConfigError(f"{shown}: run names must be unique file names of at most {MAX_NAME_BYTES} bytes, "
                          "without `/` or a control character")
    base = load_trial_config("othello")
    for r in runs:
        with_overrides(base, r["set"], source=f"{shown}: {cut(r['name'], 60)}")  # a bad key or value: its one line
    return runs


def check_out(out: Path, names: list[str]) -> None:
    """OUT_DIR a folder (or none yet) whose runs' files are regular files of one name or absent: a
    link at NAME.jsonl or NAME.json would carry a run's reports into another file. One line otherwise."""
    from sweeper.fs import check_writable

    if os.path.lexists(out) and not out.is_dir():  # a link to a folder is one
        raise ConfigError(f"OUT_DIR {short_path(out, 120)}: not a folder; name the folder the runs' reports go to")
    for name in names:
        for path in (out / f"{name}.jsonl", out / f"{name}.json"):
            check_output(path, "a run's report")
    check_writable(out, "OUT_DIR")


def main() -> int:
    parser = Parser(description=summary(__doc__))
    parser.add_argument("runs", type=Path)
    parser.add_argument("out", type=Path)
    parser.add_argument("--jobs", type=cpus, default=1)
    args = parser.parse_args()
    runs = read_runs(args.runs)
    check_out(args.out, [r["name"] for r in runs])
    args.out.mkdir(parents=True, exist_ok=True)
    todo = [r for r in runs if not (args.out / f"{r['name']}.json").exists()]
    with ProcessPoolExecutor(args.jobs) as pool:
        for line in pool.map(run_one, [r["name"] for r in todo], [r["set"] for r in todo], [str(args.out)] * len(todo)):
            print(line, flush=True)
    return 0


if __name__ == "__main__":
    run_tool(main)
