"""Ray Tune adapter: the trainer as a function trainable (the trial side of Ray).

`make_trainable(to_config, threads)` returns the function Ray runs once per trial. It
turns the sampled parameters into a validated TrialConfig, pins torch's CPU threads to
the trial's CPUs, resumes from Ray's checkpoint when the trial is restored (after a
failure or a resumed sweep), and forwards each `report` of the trainer to
`ray.tune.report` with its checkpoint. ASHA reads the `step` metric, so its time unit is
the training step, not the report count.
"""

from __future__ import annotations

import json
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from ray import tune

from trainables.config import TrialConfig

# torch and the trainer are imported in the trial's process, when it runs: the driver, which imports
# this module to build the trainable, never trains (torch was ~1.3 s of its start-up and ~180 MiB).

ENDED_FILE = "ended.json"  # in a trial's dir: its last report (trainer's keys only), written on resume for a trial that had ended


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


class CheckpointGate:
    """Whether a report carries its checkpoint: yes once `every_s` seconds have passed since the
    last one that did (or since the trial started); every report when `every_s` is 0."""

    def __init__(self, every_s: float, clock: Callable[[], float] = time.monotonic):
        self.every_s, self.clock = every_s, clock
        self.last = clock()

    def __call__(self) -> bool:
        now = self.clock()
        if now - self.last < self.every_s:
            return False
        self.last = now
        return True


def make_trainable(to_config: Callable[[dict[str, Any]], TrialConfig], threads: int, experiment_dir: str | None = None,
                   checkpoint_every_s: float = 0.0) -> Callable[[dict], None]:
    """`to_config` maps Ray's trial config (the sampled parameters) to a TrialConfig; it must pickle.
    `experiment_dir`: the sweep's experiment folder on local or shared storage, where `ENDED_FILE`s are
    written (a trial's own folder, `get_trial_dir()`, is Ray's staging copy on the driver's machine).
    `checkpoint_every_s`: a report carries the trainer's checkpoint only if at least this many seconds
    of the trial have passed since its last one (or its start); 0: every report does."""

    def trainable(params: dict) -> None:
        import torch

        from trainables.train import train

        trial_dir = Path(tune.get_context().get_trial_dir())
        ended = (Path(experiment_dir) / trial_dir.name if experiment_dir else trial_dir) / ENDED_FILE
        if ended.exists():  # it ended before a kill that Ray's last snapshot predates: say so again, train no more
            tune.report(json.loads(ended.read_text()))
            return
        torch.set_num_threads(max(1, threads))
        cfg = to_config(params)
        checkpoint = tune.get_checkpoint()
        with tempfile.TemporaryDirectory(prefix="dat-restore-") as restore_dir:
            resume_from = None
            if checkpoint is not None:
                checkpoint.to_directory(restore_dir)
                resume_from = restore_dir

            reported = []
            checkpoint_due = CheckpointGate(checkpoint_every_s)
            system = SystemMetrics()

            def report(metrics: dict, checkpoint_dir: str | None) -> None:
                ckpt = tune.Checkpoint.from_directory(checkpoint_dir) if checkpoint_dir and checkpoint_due() else None
                tune.report({**metrics, **system.sample()}, checkpoint=ckpt)
                reported.append(metrics["step"])

            result = train(cfg, report=report, resume_from=resume_from)
            if not reported and result.metrics:  # restored from its final checkpoint: the trainer had nothing
                tune.report(result.metrics, checkpoint=checkpoint)  # new to say; a Ray trial must end with a report

    return trainable
