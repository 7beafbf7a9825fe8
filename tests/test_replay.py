"""The search replay: a sweep's own ledger and early stopping on recorded curves, on a simulated clock;
the statistics of its replays; the phase-state rule and progressive ASHA it compares."""

import gzip
import json
import math

import pytest

from sweeper.adapters.optuna_ledger import MEMORY, Ledger
from sweeper.pasha import PAUSED_AT, progressive_for, soft_ranks_differ
from sweeper.replay import Grid, Trace, kendall_tau, load_grid, replay
from sweeper.replay_stats import Interval, paired, speedup, speedup_interval
from sweeper.space import SearchSpace
from sweeper.stopping import RungStopper, pre_rungs, stopper_for

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


# --------------------------------------------------------------------------- statistics of replays


def test_the_speedup_is_the_ratio_of_medians_and_a_never_counts_as_infinite_compute():
    assert speedup([4, 4, 6], [2, 2, 9]) == pytest.approx(2.0)
    assert speedup([4, 4, 4], [2, None, None]) == 0.0  # the method's median replay never got there
    assert speedup([None, None, 4], [2, 2, 2]) == math.inf
    assert speedup([None], [None]) == 1.0


def test_the_bootstrap_interval_on_a_known_tiny_input():
    # no spread: every resample gives the same ratio, so the interval is the point
    assert speedup_interval([4, 4, 4, 4], [2, 2, 2, 2], n_boot=200) == Interval(2.0, 2.0, 2.0)
    # reference {1, 3} (2 replays) against a method at 1: a resample's median is 1, 2 or 3 with
    # probabilities 1/4, 1/2, 1/4, so the 2.5% and 97.5% percentiles are 1 and 3
    i = speedup_interval([1, 3], [1, 1], n_boot=4000, seed=1)
    assert (i.value, i.low, i.high) == (2.0, 1.0, 3.0)
    # the interval is seeded: the same call, the same interval
    assert speedup_interval([1, 5, 9, 2], [3, 4, None, 1], n_boot=500, seed=3) == \
        speedup_interval([1, 5, 9, 2], [3, 4, None, 1], n_boot=500, seed=3)


def test_the_paired_comparison_ratios_seed_by_seed_and_counts_wins():
    # per seed baseline / method: 2, 1 (tie), 0.5, inf (the baseline never got there), 1 (neither did)
    p = paired([4, 3, 1, None, None], [2, 3, 2, 5, None], n_boot=1000)
    assert (p.wins, p.ties, p.losses) == (2, 2, 1)
    assert p.median_ratio.value == 1.0
    assert p.median_ratio.low <= 1.0 <= p.median_ratio.high
    same = paired([4, 6, 8], [2, 3, 4], n_boot=200)  # twice as fast on every seed: no spread
    assert same.median_ratio == Interval(2.0, 2.0, 2.0) and (same.wins, same.ties, same.losses) == (3, 0, 0)
    with pytest.raises(ValueError, match="same seeds"):
        paired([1, 2], [1])


# --------------------------------------------------------------------------- the phase-state rule


def state_curve(switch: int, state: float, final: float) -> list[dict]:
    """State accuracy `state` from the first report on; acc_3x flat at 0.2 before the switch, then
    rising linearly to `final`."""
    out = []
    for step in range(50, STEPS + 1, 50):
        on = step > switch
        acc = 0.2 + (final - 0.2) * (step - switch) / (STEPS - switch) if on else 0.2
        out.append({"step": step, "acc_3x": acc, "state_acc_1x": state, "switch_step": float(switch if on else -1)})
    return out


def phase_state_ledger(switch_steps: list[int]) -> tuple[Ledger, RungStopper]:
    spec = space({**PHASED, "pre_phase_metric": "state_acc_1x"}, num_samples=len(switch_steps))
    ledger = Ledger(MEMORY, spec, create=True)
    for switch in switch_steps:
        number = ledger.new_trial()
        ledger.trials[number].params.update({"dat.switch_step": switch, "optim.lr": 3e-3})
    return ledger, stopper_for(spec, ledger)


def drive(stopper: RungStopper, number: int, reports: list[dict]) -> int | None:
    """Feed the reports in order; the step the trial is stopped at, None if it never is."""
    for report in reports:
        if stopper.on_report(number, report):
            return report["step"]
    return None


def test_the_phase_state_rule_stops_the_lower_state_accuracy_trial_before_its_switch():
    ledger, stopper = phase_state_ledger([300, 300])  # both judged by state accuracy up to step 350
    assert drive(stopper, 0, state_curve(300, state=0.9, final=0.5)) is None
    assert drive(stopper, 1, state_curve(300, state=0.4, final=0.9)) == 50  # lower state accuracy: out at the first rung
    assert pre_rungs(ledger.trials[0].attrs) == {50: 0.9, 100: 0.9, 200: 0.9}  # judged by the signal before 350
    assert set(ledger.trials[0].rungs()) == {400}  # ... and by acc_3x after
    assert ledger.trials[1].attrs["stopped_at"] == 50


def test_the_phase_state_rule_ranks_by_acc_3x_after_the_switch():
    ledger, stopper = phase_state_ledger([0, 0])  # joint training: in the last phase from step 50 (margin 50)
    assert drive(stopper, 0, state_curve(0, state=0.2, final=0.9)) is None
    # a far higher state accuracy does not save it: after its switch only acc_3x counts
    assert drive(stopper, 1, state_curve(0, state=0.99, final=0.5)) == 50
    assert not pre_rungs(ledger.trials[0].attrs) and not pre_rungs(ledger.trials[1].attrs)


def test_without_the_signal_key_a_trial_passes_the_rungs_before_its_switch_unjudged():
    spec = space(PHASED, num_samples=2)
    ledger = Ledger(MEMORY, spec, create=True)
    for _ in range(2):
        ledger.trials[ledger.new_trial()].params.update({"dat.switch_step": 300, "optim.lr": 3e-3})
    stopper = stopper_for(spec, ledger)
    assert drive(stopper, 0, state_curve(300, state=0.9, final=0.5)) is None
    assert drive(stopper, 1, state_curve(300, state=0.4, final=0.9)) is None  # today's rule: nothing judged before 350
    assert not pre_rungs(ledger.trials[1].attrs)


def test_the_phase_state_rule_through_the_ray_tune_scheduler():
    from types import SimpleNamespace

    from ray.tune.schedulers import TrialScheduler

    from sweeper.adapters.ray_search import LedgerASHA

    ledger, stopper = phase_state_ledger([300, 300])
    scheduler = LedgerASHA(stopper)
    decisions = []
    for number, state in ((0, 0.9), (1, 0.4)):
        trial = SimpleNamespace(trial_id=f"ray{number}", config={"number": number})
        scheduler.on_trial_add(None, trial)
        for report in state_curve(300, state=state, final=0.8):
            decisions.append(scheduler.on_trial_result(None, trial, report))
            if decisions[-1] == TrialScheduler.STOP:
                break
    assert decisions.count(TrialScheduler.STOP) == 1 and decisions[-1] == TrialScheduler.STOP
    assert len(decisions) == STEPS // 50 + 1  # trial 0 ran to the end, trial 1 stopped at its first report


def test_a_replay_with_the_phase_state_rule_stops_weak_trials_before_their_switch():
    g = grid()  # every curve's state accuracy: its final acc_3x, so the signal ranks like the end
    for runs in g.runs.values():
        for reports in runs:
            for r in reports:
                r["state_acc_1x"] = reports[-1]["acc_3x"]
    rule = {**PHASED, "pre_phase_metric": "state_acc_1x"}
    ended = [e for s in range(5) for e in replay(space(rule), g, seed=s).ended]
    assert any(e["status"] == "stopped" and e["steps"] < e["key"][0] + 50 for e in ended)
    phased = [e for s in range(5) for e in replay(space(PHASED), g, seed=s).ended]
    assert not any(e["status"] == "stopped" and e["steps"] < e["key"][0] + 50 for e in phased)


# --------------------------------------------------------------------------- progressive ASHA


def test_soft_ranking_tells_a_reordering_from_noise():
    assert not soft_ranks_differ([0.9, 0.8, 0.7], [0.6, 0.5, 0.4], "max", 0.0)  # same order
    assert soft_ranks_differ([0.9, 0.8, 0.7], [0.5, 0.6, 0.4], "max", 0.0)  # the top two swapped
    assert not soft_ranks_differ([0.9, 0.8, 0.7], [0.5, 0.505, 0.4], "max", 0.01)  # ... within epsilon: a tie
    assert not soft_ranks_differ([0.1, 0.2], [0.3, 0.4], "min", 0.0)


def test_pasha_pauses_trials_at_its_current_max_and_grows_it_when_the_top_rungs_disagree():
    plain = {"type": "asha", "grace_period": 50, "reduction_factor": 2, "phase_aware": False}
    spec = space(plain, num_samples=3)
    ledger = Ledger(MEMORY, spec, create=True)
    for _ in range(3):
        ledger.trials[ledger.new_trial()].params.update({"dat.switch_step": 0, "optim.lr": 3e-3})
    pasha = progressive_for(spec, ledger)
    assert pasha.levels == (50, 100, 200, 400) and pasha.current_max() == 100  # starts at the second level

    def run(number: int, values: dict[int, float]) -> int | None:
        return drive(pasha, number, [{"step": s, "acc_3x": v} for s, v in values.items()])

    assert run(0, {50: 0.6, 100: 0.6, 150: 0.6}) == 100  # paused at the current max, not stopped
    assert ledger.trials[0].attrs[PAUSED_AT] == 100 and "stopped_at" not in ledger.trials[0].attrs
    assert run(1, {50: 0.7, 100: 0.5}) == 100  # ahead at 50, behind at 100: ASHA stops it, and the order flipped
    assert pasha.current_max() == 200  # ... so the max grows one level
    assert run(2, {50: 0.8, 100: 0.8, 150: 0.8, 200: 0.8, 250: 0.8}) == 200


def test_a_pasha_replay_picks_among_the_trials_that_trained_furthest():
    g = grid()
    plain = {"type": "asha", "grace_period": 50, "reduction_factor": 2, "phase_aware": False}
    trace = replay(space(plain), g, seed=0, stopping=progressive_for)
    paused = [e for e in trace.ended if e["status"] == "paused"]
    assert paused and min(e["steps"] for e in paused) == 100  # the second level, where the max starts
    assert len(trace.incumbents(g)) == len(paused) + sum(e["status"] == "completed" for e in trace.ended)
    ranked = Trace(ended=[  # a completed trial outranks a paused one whatever their values
        {"status": "paused", "key": (300, 3e-3), "value": 0.9, "compute": 100, "steps": 100},
        {"status": "completed", "key": (0, 1e-3), "value": 0.5, "compute": 500, "steps": STEPS},
        {"status": "paused", "key": (300, 1e-3), "value": 0.95, "compute": 600, "steps": 100},
    ])
    assert [round(v, 3) for _, v in ranked.incumbents(g)] == [0.855, 0.505, 0.505]
