"""Ray Tune adapter: the trainer as a function trainable (the trial side of Ray).

`make_trainable(to_config, threads, trials_root)` returns the function Ray runs once per trial.
Ray hands it `{"number": N, "params": {...}}` (the ledger's trial and its point); it trains in the
trial's own folder, `<trials_root>/tNNNN` (trainables/run_dir.py: reports and the newest
checkpoint), continuing from that folder's checkpoint when there is one (a retry after a failure,
or a resumed sweep), and forwards each report to `ray.tune.report`. Ray keeps no checkpoint: the
trial's folder is its state. ASHA reads the `step` metric, so its time unit is the training step.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

from ray import tune

from trainables.config import TrialConfig
from trainables.run_dir import RunDir

# torch and the trainer are imported in the trial's process, when it runs: the driver, which imports
# this module to build the trainable, never trains (torch was ~1.3 s of its start-up and ~180 MiB).


class SystemMetrics:
    """The trial's own machine use, added to each report under MLflow's system-metric names (the
    run's "System metrics" tab draws them): this process's CPU (percent of one core, since the last
    report) and memory, the node's memory, and the GPU's memory where the trial trains on one."""

    def __init__(self):
        import psutil
        import torch

        self.process = psutil.Process()
        self.process.cpu_percent(None)  # starts the interval
        self.psutil, self.torch = psutil, torch

    def sample(self) -> dict[str, float]:
        torch = self.torch
        node = self.psutil.virtual_memory()
        out = {
            "system/cpu_utilization_percentage": self.process.cpu_percent(None),
            "system/process_memory_rss_megabytes": self.process.memory_info().rss / 2**20,
            "system/system_memory_usage_megabytes": node.used / 2**20,
            "system/system_memory_usage_percentage": node.percent,
        }
        if torch.cuda.is_available() and torch.cuda.is_initialized():
            out["system/gpu_0_memory_usage_megabytes"] = torch.cuda.memory_allocated() / 2**20
            out["system/gpu_0_max_memory_usage_megabytes"] = torch.cuda.max_memory_allocated() / 2**20
        return out


def trial_dir(trials_root: str | Path, number: int) -> Path:
    from sweeper.records import trial_name

    return Path(trials_root) / trial_name(number)


def run_trial(config: dict, to_config: Callable[[dict[str, Any]], TrialConfig], threads: int, trials_root: str,
              report_to: Callable[[dict], None]) -> None:
    """Train the trial `config` names in its own folder, handing each report to `report_to`."""
    import torch

    from trainables.train import read_checkpoint, train

    run = RunDir(trial_dir(trials_root, int(config["number"])))
    torch.set_num_threads(max(1, threads))
    cfg = to_config(config["params"])
    resume_from = run.checkpoint()
    if resume_from is not None:  # continue where the trial's folder left off; say that report again first:
        state = read_checkpoint(resume_from)  # the ledger may not have heard of it
        run.drop_reports_after(int(state["step"]))
        if state.get("metrics"):
            report_to(state["metrics"])
    system = SystemMetrics()
    reported = []
    run.note_started()

    def report(metrics: dict, checkpoint_dir: str | None) -> None:
        run.append(metrics)
        if checkpoint_dir:
            run.keep_checkpoint(checkpoint_dir, int(metrics["step"]))
        report_to({**metrics, **system.sample()})
        reported.append(metrics["step"])

    result = train(cfg, report=report, resume_from=resume_from)
    if result.status == "completed":
        run.note_ended()
    if not reported and result.metrics and resume_from is None:  # a Ray trial must end with a report
        report_to(result.metrics)


def make_trainable(to_config: Callable[[dict[str, Any]], TrialConfig], threads: int, trials_root: str) -> Callable[[dict], None]:
    """`to_config` maps a trial's sampled parameters to a TrialConfig; it must pickle. `trials_root`:
    the folder of the sweep's trial folders, on storage every node of the cluster sees."""

    def trainable(config: dict) -> None:
        run_trial(config, to_config, threads, trials_root, tune.report)

    return trainable
