"""Ctrl-C latency: seconds from a SIGINT to `sweeper launch` exiting with the sweep's state saved.

Starts `sweeper launch` on N fixed trials long enough to be running (bench/fixed_trials.py), waits
for the first report in status.json, sends SIGINT (what Ctrl-C sends to the foreground process)
and times the exit. Each round checks that the launch exited 130, that status.json says
`interrupted` and that the running trials are marked interrupted, so a fast exit that lost the
state does not count. Prints each round and the median (target: <= 3 s).

`--baseline REV` alternates each round with a launch on an older commit's code (a `git worktree`
beside this checkout, bench/worktree.py) and prints both medians.

    python bench/interrupt_latency.py [--rounds 3] [--trials 2] [--baseline REV]
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path (the tests)
from fixed_trials import ROOT, space_file, start_launch  # noqa: E402
from worktree import baseline_tree  # noqa: E402
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import positive_int

TARGET_S = 3.0


def one_round(workdir: Path, trials: int, root: Path = ROOT) -> tuple[float, str]:
    """(seconds from SIGINT to exit, what status.json said); raises if the state was not saved."""
    path = space_file(workdir, "interrupt", trials, 20_000, concurrent=trials, eval_every=50, resources={"cpu": 1},
                      fixed={"eval": {"n_sequences": 64}}, description="bench/interrupt_latency.py")
    status = workdir / "sweeps" / "interrupt" / "status.json"
    proc = start_launch(path, workdir, root, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.monotonic() + 600
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            if any(t["step"] > 0 for t in json.loads(status.read_text())["trials"]):
                break
        except (OSError, ValueError, KeyError):
            pass
        time.sleep(0.2)
    else:
        proc.kill()
        raise SystemExit(f"no report within 600 s (exit {proc.poll()}): {proc.stderr.read()[-1500:]}")
    sent = time.perf_counter()
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=300)
    latency = time.perf_counter() - sent
    data = json.loads(status.read_text())
    states = sorted(t["status"] for t in data["trials"])
    if proc.returncode != 130 or data.get("state") != "interrupted" or "interrupted" not in states:
        raise SystemExit(f"the interrupt did not save the sweep's state: exit {proc.returncode}, state "
                         f"{data.get('state')}, trials {states}: {proc.stderr.read()[-1500:]}")
    return latency, f"exit 130, state interrupted, trials {', '.join(states)}"


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=positive_int, default=3)
    parser.add_argument("--trials", type=positive_int, default=2)
    parser.add_argument("--baseline", metavar="REV", help="alternate each round with this commit's launch")
    args = parser.parse_args()
    trees = {"this tree": ROOT} | ({args.baseline: baseline_tree(args.baseline)} if args.baseline else {})
    latencies: dict[str, list[float]] = {name: [] for name in trees}
    for k in range(args.rounds):
        for name, root in trees.items():
            with tempfile.TemporaryDirectory(prefix="interrupt-latency-") as tmp:
                latency, saved = one_round(Path(tmp), args.trials, root)
            latencies[name].append(latency)
            print(f"round {k + 1}, {name}: SIGINT to exit {latency:.2f} s ({saved})", flush=True)
    for name, xs in latencies.items():
        print(f"Ctrl-C to exit, {name}: median {statistics.median(xs):.2f} s, range {min(xs):.2f}-{max(xs):.2f} s "
              f"over {args.rounds} rounds of {args.trials} running trials (target <= {TARGET_S:.0f} s)")


if __name__ == "__main__":
    run_tool(main)
