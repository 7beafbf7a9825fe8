"""CLI start-up: whole-process wall time of `sweeper --help` and `sweeper validate search_spaces/switch_time.yaml`.

    python bench/cli_startup.py [--baseline REV] [--rounds 5]

Each command runs as a fresh `python -m sweeper.cli ...` process (interpreter start, imports, parsing and,
for `validate`, the 200 sampled configurations), from this tree and, with `--baseline`, from a git worktree
of REV (`bench/worktree.py`), alternating old and new after one warm-up run of each (the file cache).
Prints the median of `--rounds` runs per tree, the ratio new / old, and the target: <= 1 s each.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path
from worktree import ROOT, baseline_tree  # noqa: E402
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import positive_int

COMMANDS = {"sweeper --help": ["--help"],
            "sweeper validate search_spaces/switch_time.yaml": ["validate", "search_spaces/switch_time.yaml"]}
TARGET_S = 1.0


def wall_s(tree: Path, args: list[str]) -> float:
    """Seconds from starting the process to its exit, which must be 0."""
    env = {**os.environ, "PYTHONPATH": str(tree)}
    start = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "sweeper.cli", *args], cwd=tree, env=env, capture_output=True, text=True)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"sweeper {' '.join(args)} in {tree} failed (exit {proc.returncode}): {proc.stderr[-1500:]}")
    return took


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--baseline", help="git revision to compare with")
    parser.add_argument("--rounds", type=positive_int, default=5)
    args = parser.parse_args()
    trees = {"new": ROOT} | ({"old": baseline_tree(args.baseline)} if args.baseline else {})
    times: dict[tuple[str, str], list[float]] = {}
    for name, cmd in COMMANDS.items():
        for tree in trees.values():
            wall_s(tree, cmd)  # warm-up
        for r in range(args.rounds):
            order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))  # new old, old new, ...
            for label, tree in order:
                times.setdefault((name, label), []).append(wall_s(tree, cmd))
    print(f"medians of {args.rounds} runs{f'; old = {args.baseline}' if args.baseline else ''}")
    for name in COMMANDS:
        new = statistics.median(times[(name, "new")])
        line = f"{name:52s} new {new:5.2f} s"
        if args.baseline:
            old = statistics.median(times[(name, "old")])
            line += f"   old {old:5.2f} s   new/old {new / old:5.3f}"
        print(f"{line}   target <= {TARGET_S:g} s: {'met' if new <= TARGET_S else 'MISSED'}")


if __name__ == "__main__":
    run_tool(main)
