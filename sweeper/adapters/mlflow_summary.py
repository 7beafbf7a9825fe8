"""The end of a sweep in MLflow, on its parent run: the best trial (tags, score, config), the
summary tables, the sweep's plots, and the trials an interrupt cut off marked as such. Run once
per launch, after the mirror (`mlflow_tracking.py`) has drained; a resumed sweep runs it again
over the same runs.
"""

from __future__ import annotations

import time
from pathlib import Path

import yaml
from mlflow.entities import Metric, RunTag

from sweeper.adapters.mlflow_store import retrying
from sweeper.adapters.mlflow_tracking import DRAIN_S, SweepTracker
from sweeper.records import TrialRecord
from sweeper.space import trial_config_for
from sweeper.status import format_table, summary_csv


def finish(tracker: SweepTracker, records: list[TrialRecord], pictures: list[Path], interrupted: bool,
           best: dict | None, timeout_s: float = DRAIN_S) -> None:
    """Best-trial tags (`best`: the sweep's best judged value, as every view shows it), summary tables
    and the sweep's plots (`pictures`, drawn already) on the parent run. Retried while the store is
    unreachable, for at most `timeout_s`."""
    retrying(lambda: _finish(tracker, records, pictures, interrupted, best), time.monotonic() + timeout_s,
                    "finishing the sweep's run", tracker.say)


def _finish(tracker: SweepTracker, records: list[TrialRecord], pictures: list[Path], interrupted: bool,
            best: dict | None) -> None:
    tracker.sync_all(records)  # every trial as its folder and the ledger have it (a second sync writes nothing)
    client, spec, parent = tracker.client, tracker.spec, tracker.state["parent_run_id"]
    trials = tracker.state.get("trials", {})
    top = next((r for r in records if best is not None and r.trial_id == best["trial_id"]), None)
    for r in records:
        if r.trial_id in trials:
            client.set_tag(trials[r.trial_id]["run_id"], "best", "true" if r is top else "false")
    if top is not None:
        cfg = trial_config_for(spec, top.params).model_dump(mode="json")
        # the best point as tags, not params: params are immutable in MLflow, and a resumed sweep's
        # best trial may differ from the one an interrupted run wrote
        key, value, step = f"best_{spec.metric}", float(best["value"]), int(best["step"])
        logged = any(m.step == step and m.value == value for m in client.get_metric_history(parent, key))
        # a finish run again (a resumed sweep, an interrupt) adds the best to its history once, not per finish
        metrics = [] if logged else [Metric(key, value, int(time.time() * 1000), step)]
        client.log_batch(parent, metrics=metrics, tags=[RunTag(f"best.{k}", str(v)) for k, v in top.params.items()])
        client.set_tag(parent, "best_trial", top.trial_id)
        client.log_text(parent, yaml.safe_dump(cfg, sort_keys=False), "best_config.yaml")
    client.log_text(parent, summary_csv(records), "summary.csv")
    client.log_text(parent, "```\n" + format_table(records, spec.metric, spec.mode, top=len(records)) + "\n```\n", "summary.md")
    for png in pictures:
        client.log_artifact(parent, str(png), "plots")
    for r in records:  # trials an interrupt cut off: say so; a resume continues the same run
        if r.status == "interrupted" and r.trial_id in trials:
            client.set_tag(trials[r.trial_id]["run_id"], "status", "interrupted")
            client.set_terminated(trials[r.trial_id]["run_id"], "KILLED")
            trials[r.trial_id].update(status="interrupted", open=False)
    client.set_terminated(parent, "KILLED" if interrupted else "FINISHED")
