"""Large sweeps checkpoint less often: Ray snapshots every trial each time one checkpoints (target 6)."""

from __future__ import annotations

import pytest

from sweeper.adapters.ray_trainable import CheckpointGate
from sweeper.adapters.ray_tune import CHECKPOINT_PERIOD_MAX_S, SNAPSHOT_EVERY_S_UP_TO, checkpoint_period_s
from sweeper.space import SearchSpace


def _spec(num_samples: int, max_concurrent: int) -> SearchSpace:
    return SearchSpace.model_validate({
        "name": "scale", "metric": "acc_3x", "mode": "max",
        "space": {"optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
        "budget": {"num_samples": num_samples, "max_concurrent": max_concurrent, "max_steps": 100, "eval_every": 10},
    })


def test_small_sweeps_checkpoint_at_every_report_and_large_ones_less_as_they_grow():
    assert checkpoint_period_s(_spec(SNAPSHOT_EVERY_S_UP_TO, 8)) == 0.0
    periods = [checkpoint_period_s(_spec(n, 2)) for n in (SNAPSHOT_EVERY_S_UP_TO + 1, 500, 5000)]
    assert 0 < periods[0] < periods[1] < periods[2]
    assert periods[1] == 0.02 * 500 * 2
    assert checkpoint_period_s(_spec(10_000, 16)) == CHECKPOINT_PERIOD_MAX_S  # a bounded loss on resume
    assert checkpoint_period_s(_spec(100, 100_000)) == checkpoint_period_s(_spec(100, 100))  # no more at once than trials


def test_the_gate_lets_a_checkpoint_through_once_per_period():
    now = [0.0]
    gate = CheckpointGate(10.0, clock=lambda: now[0])
    due = []
    for t in (1, 5, 10, 12, 19.9, 20.5, 40):
        now[0] = t
        due.append(gate())
    assert due == [False, False, True, False, False, True, True]
    every = CheckpointGate(0.0, clock=lambda: 0.0)
    assert all(every() for _ in range(3))  # small sweeps: every report


def _tiny_spec(num_samples: int) -> SearchSpace:
    """A space of seconds-long trials (the `tiny` preset's sizes: 60 steps, a report every 20) whose size sets the period."""
    return SearchSpace.model_validate({
        "name": "gate", "metric": "acc_3x", "mode": "max",
        "fixed": {"model": {"d_model": 16, "n_layers": 1, "n_heads": 2}, "dat": {"switch_step": 20}, "eval": {"n_sequences": 32}},
        "space": {"optim.lr": {"type": "float", "low": 1e-3, "high": 1e-2, "log": True}},
        "budget": {"num_samples": num_samples, "max_concurrent": num_samples, "max_steps": 60, "eval_every": 20},
    })


def _checkpoints_of_one_trial(spec: SearchSpace, storage) -> tuple[int, int]:
    """(reports, reports that carried a checkpoint) of one trial of the sweep's own trainable, run by Ray Tune."""
    from ray import tune

    from sweeper.adapters import ray_tune

    tuner = tune.Tuner(
        ray_tune._resourced_trainable(spec, storage / spec.name),
        param_space={"optim.lr": 3e-3},
        tune_config=tune.TuneConfig(num_samples=1),
        run_config=tune.RunConfig(name=spec.name, storage_path=str(storage), verbose=0,
                                  checkpoint_config=tune.CheckpointConfig(num_to_keep=None)))  # keep every one
    result = tuner.fit()[0]
    return len(result.metrics_dataframe), len(result.best_checkpoints)


@pytest.mark.integration
def test_the_sweeps_trainable_checkpoints_every_report_in_small_sweeps_and_not_before_the_period_in_large_ones(tmp_path):
    """The wiring, end to end with a real Ray: spec size -> checkpoint_period_s -> the trainable's gate -> Ray."""
    import ray

    ray.init(num_cpus=1, num_gpus=0, include_dashboard=False, log_to_driver=False, logging_level="ERROR")
    try:
        small = _tiny_spec(SNAPSHOT_EVERY_S_UP_TO)  # period 0
        large = _tiny_spec(400)  # period 0.02 x 400 x 400 s, capped at 5 minutes: far longer than the trial
        assert checkpoint_period_s(small) == 0 and checkpoint_period_s(large) == CHECKPOINT_PERIOD_MAX_S
        assert _checkpoints_of_one_trial(small, tmp_path / "small") == (3, 3)
        assert _checkpoints_of_one_trial(large, tmp_path / "large") == (3, 0)
    finally:
        ray.shutdown()
