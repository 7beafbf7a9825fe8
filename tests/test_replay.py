"""The search replay: a sweep's own ledger and early stopping on recorded curves, on a simulated clock."""

import gzip
import json

import pytest

from sweeper.replay import Grid, Trace, kendall_tau, load_grid, replay
from sweeper.space import SearchSpace

SWITCHES = (0, 100, 200, 300, 400)
LRS = (1e-3, 3e-3)
STEPS = 400


def curve(switch: int, lr: float, seed: int) -> list[dict]:
    """A DAT-like curve: flat at 0.2 while attention is off, then rising; late switches end best
    (up to 300), a switch at the last step never switches. The seed shifts it a little."""
    final = {0: 0.5, 100: 0.6, 200: 0.7, 300: 0.8, 400: 0.25}[switch] + (0.05 if lr == 3e-3 else 0.0) + 0.01 * seed
    out = []
    for step in range(50, STEPS + 1, 50):
        on = switch < STEPS and step > switch
        value = 0.2 + (final - 0.2) * (step - switch) / (STEPS - switch) if on else 0.2 + 0.0001 * step
        out.append({"step": step, "acc_3x": value, "switch_step": float(switch if on else -1)})
    return out


def grid() -> Grid:
    runs = {(s, lr): [curve(s, lr, seed) for seed in (0, 1)] for s in SWITCHES for lr in LRS}
    return Grid(("dat.switch_step", "optim.lr"), runs, "acc_3x", "max", STEPS)


def space(scheduler: dict, sampler: str = "random", num_samples: int = 10) -> SearchSpace:
    return SearchSpace.model_validate({
        "name": "replay", "metric": "acc_3x", "mode": "max",
        "fixed": {"dat": {"mode": "fixed"}},
        "space": {"dat.switch_step": {"type": "int", "low": 0, "high": 400, "step": 100},
                  "optim.lr": {"type": "categorical", "choices": list(LRS)}},
        "budget": {"num_samples": num_samples, "max_concurrent": 2, "max_steps": STEPS, "eval_every": 50},
        "scheduler": scheduler, "searcher": {"sampler": sampler, "seed": 0},
    })


FIFO = {"type": "fifo"}
ASHA = {"type": "asha", "grace_period": 50, "reduction_factor": 2, "phase_aware": False}
PHASED = {"type": "asha", "grace_period": 50, "reduction_factor": 2, "phase_margin": 50}


def test_without_early_stopping_every_trial_trains_its_whole_budget():
    trace = replay(space(FIFO), grid(), seed=3)
    assert len(trace.ended) == 10 and all(e["status"] == "completed" and e["steps"] == STEPS for e in trace.ended)
    assert trace.compute == 10 * STEPS
    assert len({e["key"] for e in trace.ended}) == 10  # every grid point once: a duplicate draw trains nothing


def test_a_replay_is_a_function_of_its_seed():
    g = grid()
    a, b, c = (replay(space(PHASED), g, seed=s) for s in (5, 5, 6))
    assert a.ended == b.ended and a.compute == b.compute
    assert [e["key"] for e in a.ended] != [e["key"] for e in c.ended]


def test_plain_asha_stops_late_switches_before_they_switch_and_the_phase_rule_does_not():
    g = grid()
    plain = [e for s in range(5) for e in replay(space(ASHA), g, seed=s).ended]
    phased = [e for s in range(5) for e in replay(space(PHASED), g, seed=s).ended]
    before = [e for e in plain if e["status"] == "stopped" and e["steps"] <= e["key"][0]]
    assert before, "plain ASHA never stopped a trial before its switch on these curves"
    for e in phased:
        if e["status"] == "stopped":
            assert e["steps"] >= e["key"][0] + 50, e  # judged from the switch + the margin on
    assert not any(e["status"] == "stopped" and e["key"][0] >= STEPS for e in phased)  # a switch never made: never judged


def test_compute_to_reach_reads_the_true_value_of_the_incumbent():
    g = grid()  # the best point: switch 300, lr 3e-3, mean final 0.855
    trace = Trace(ended=[
        {"status": "completed", "key": (0, 3e-3), "value": 0.56, "compute": 400},
        {"status": "stopped", "key": (300, 3e-3), "value": 0.3, "compute": 600},  # stopped: never the incumbent
        {"status": "completed", "key": (300, 1e-3), "value": 0.81, "compute": 1000},
        {"status": "completed", "key": (300, 3e-3), "value": 0.86, "compute": 1400},
    ], compute=1400)
    assert g.best() == pytest.approx(0.855)
    assert [round(v, 3) for _, v in trace.incumbents(g)] == [0.555, 0.805, 0.855]
    assert trace.compute_to_reach(g, 0.01) == 1400
    assert trace.compute_to_reach(g, 0.06) == 1000
    assert Trace(ended=trace.ended[:2]).compute_to_reach(g, 0.01) is None


def test_the_data_file_groups_runs_of_a_point_by_seed(tmp_path):
    data = {"grid": {"metric": "acc_3x", "mode": "max", "max_steps": STEPS},
            "runs": [{"params": {"dat.switch_step": s, "optim.lr": lr, "seed": seed}, "reports": curve(s, lr, seed)}
                     for seed in (1, 0) for s in SWITCHES for lr in LRS]}
    path = tmp_path / "grid.json.gz"
    with gzip.open(path, "wt") as f:
        json.dump(data, f)
    loaded = load_grid(path, ("dat.switch_step", "optim.lr"))
    assert loaded.runs == grid().runs  # seed 0's run first, whatever the file's order


def test_kendall_tau():
    assert kendall_tau([1, 2, 3, 4], [10, 20, 30, 40]) == pytest.approx(1.0)
    assert kendall_tau([1, 2, 3, 4], [4, 3, 2, 1]) == pytest.approx(-1.0)
