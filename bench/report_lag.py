"""Report lag: how soon status.json and MLflow hold a trial's report after the trial wrote it.

Runs `sweeper launch` on N fixed trials (bench/fixed_trials.py) against a real `mlflow server`
(SQLite behind it) and polls, every 50 ms: each trial's own `metrics.jsonl` (the trainer appends a
report there before Ray hands it to the driver), `status.json`, and MLflow's `acc_3x` history of
each trial's run. For every report it records when each of the three first showed it, and prints
the lag of status.json and of MLflow behind the trial's folder: median, 95th percentile and maximum
(target: each trial's latest report in both within one second). The polling itself adds up to
~50 ms to each figure (and an MLflow query's own time to the MLflow one).

    python bench/report_lag.py [--trials 4] [--steps 600]
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # run as a script or loaded by path
from fixed_trials import ROOT, space_file, start_launch  # noqa: E402

sys.path.insert(0, str(ROOT / "tests"))
from conftest import start_mlflow_server, stop  # noqa: E402  the tests' real MLflow server
from core.tool_cli import Parser, run_tool
from sweeper.cli_types import positive_int

POLL_S = 0.05


def steps_in_folders(sweep: Path) -> dict[str, set[int]]:
    out = {}
    for reports in (sweep / "trials").glob("t*/metrics.jsonl"):
        try:
            out[reports.parent.name] = {int(json.loads(x)["step"]) for x in reports.read_text().splitlines() if x.strip()}
        except (OSError, ValueError, KeyError):
            pass
    return out


def steps_in_status(sweep: Path) -> dict[str, int]:
    try:
        return {t["trial_id"]: int(t["step"]) for t in json.loads((sweep / "status.json").read_text())["trials"]}
    except (OSError, ValueError, KeyError):
        return {}


def steps_in_mlflow(client, experiment: str) -> dict[str, int]:
    exp = client.get_experiment_by_name(experiment)
    if exp is None:
        return {}
    runs = client.search_runs([exp.experiment_id], filter_string="tags.role = 'trial'")
    return {r.data.tags["trial_id"]: max((m.step for m in client.get_metric_history(r.info.run_id, "acc_3x")), default=-1)
            for r in runs}



def mark(seen: dict[tuple[str, int], float], latest: dict[str, int], written: dict[tuple[str, int], float]) -> None:
    """Stamp now each written report a view holds: its latest step of a trial covers every earlier one."""
    now = time.monotonic()
    for trial, step in written:
        if step <= latest.get(trial, -1):
            seen.setdefault((trial, step), now)


def percentile(xs: list[float], q: float) -> float:
    return sorted(xs)[min(len(xs) - 1, int(q * len(xs)))]


def main() -> None:
    parser = Parser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=positive_int, default=4)
    parser.add_argument("--steps", type=positive_int, default=600)
    args = parser.parse_args()
    from mlflow import MlflowClient

    with tempfile.TemporaryDirectory(prefix="report-lag-") as tmp:
        tmp = Path(tmp)
        (tmp / "mlflow").mkdir()
        url, server = start_mlflow_server(tmp / "mlflow", f"sqlite:///{tmp / 'mlflow' / 'mlflow.db'}")
        try:
            path = space_file(tmp, "lag", args.trials, args.steps, concurrent=2, eval_every=max(1, args.steps // 20),
                              resources={"cpu": 1}, fixed={"eval": {"n_sequences": 64}}, description="bench/report_lag.py")
            os.environ["MLFLOW_TRACKING_URI"] = url  # the launch logs to the server
            proc = start_launch(path, tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            client, sweep = MlflowClient(url), tmp / "sweeps" / "lag"
            written: dict[tuple[str, int], float] = {}
            in_status: dict[tuple[str, int], float] = {}
            in_mlflow: dict[tuple[str, int], float] = {}
            while proc.poll() is None:
                now = time.monotonic()
                for trial, steps in steps_in_folders(sweep).items():
                    for step in steps:
                        written.setdefault((trial, step), now)
                mark(in_status, steps_in_status(sweep), written)
                mark(in_mlflow, steps_in_mlflow(client, "lag"), written)
                time.sleep(POLL_S)
            if proc.returncode != 0:
                raise SystemExit(f"sweeper launch exited {proc.returncode}")
        finally:
            stop(server)
    for name, seen in (("status.json", in_status), ("MLflow", in_mlflow)):
        lags = [seen[k] - written[k] for k in written if k in seen]
        if not lags:
            print(f"{name}: none of the {len(written)} reports seen")
            continue
        missing = len(written) - len(lags)
        print(f"{name}: {len(lags)} reports, lag behind the trial's folder median {statistics.median(lags):.2f} s, "
              f"p95 {percentile(lags, 0.95):.2f} s, max {max(lags):.2f} s"
              + (f"; {missing} not seen before the sweep ended" if missing else "") + " (target <= 1 s)")


if __name__ == "__main__":
    run_tool(main)
