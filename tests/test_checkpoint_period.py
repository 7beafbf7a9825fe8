"""Large sweeps checkpoint less often: Ray snapshots every trial each time one checkpoints (target 6)."""

from __future__ import annotations

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
