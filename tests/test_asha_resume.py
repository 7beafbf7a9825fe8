"""The sweep's ASHA: Ray's rule, decision for decision, with its rungs in the ledger (the Optuna
study), so that a resumed sweep stops trials as an uninterrupted one would."""

from types import SimpleNamespace

from hypothesis import given, settings
from hypothesis import strategies as st
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from sweeper.adapters.optuna_ledger import Ledger
from sweeper.adapters.ray_search import LedgerASHA
from sweeper.space import SearchSpace
from sweeper.stopping import stopper_for

LIMITS = dict(max_t=800, grace_period=100, reduction_factor=2)
SPACE = {
    "name": "asha", "metric": "acc", "mode": "max",
    "space": {"optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
    "budget": {"num_samples": 50, "max_concurrent": 2, "max_steps": 800, "eval_every": 100},
    "scheduler": {"type": "asha", "grace_period": 100, "reduction_factor": 2, "phase_aware": False},  # Ray's rule exactly
}


def ledger_at(path, create: bool = True) -> Ledger:
    return Ledger(f"sqlite:///{path}/optuna.db", SearchSpace.model_validate(SPACE), create=create)


def ours(ledger: Ledger) -> LedgerASHA:
    return LedgerASHA(stopper_for(ledger.spec, ledger))


def feed(scheduler, trial, accs: dict[int, float]) -> list[str]:
    scheduler.on_trial_add(None, trial)
    decisions = []
    for step, acc in sorted(accs.items()):
        decisions.append(scheduler.on_trial_result(None, trial, {"step": step, "acc": acc}))
        if decisions[-1] == TrialScheduler.STOP:
            break
    return decisions


def new_trial(ledger: Ledger) -> SimpleNamespace:
    number = ledger.new_trial()
    return SimpleNamespace(trial_id=f"ray{number}", config={"number": number})


STRONG = {100: 0.9, 200: 0.9, 400: 0.9}
WEAK = {100: 0.1, 200: 0.1, 400: 0.1}


def test_a_resumed_scheduler_keeps_its_rungs_and_stops_what_it_would_have(tmp_path):
    ledger = ledger_at(tmp_path)
    scheduler = ours(ledger)
    for _ in range(3):
        feed(scheduler, new_trial(ledger), STRONG)
    uninterrupted = feed(scheduler, new_trial(ledger), WEAK)
    assert uninterrupted == [TrialScheduler.STOP]  # below the rung's cut-off at its first rung

    reopened = ledger_at(tmp_path, create=False)  # the driver died; the next launch opens the study
    assert feed(ours(reopened), new_trial(reopened), WEAK) == uninterrupted


def test_a_stop_decided_before_a_kill_is_carried_out_on_resume(tmp_path):
    ledger = ledger_at(tmp_path)
    scheduler = ours(ledger)
    for _ in range(3):
        feed(scheduler, new_trial(ledger), STRONG)
    weak = new_trial(ledger)
    assert feed(scheduler, weak, WEAK) == [TrialScheduler.STOP]  # the kill comes before Ray acts on it
    reopened = ledger_at(tmp_path, create=False)
    assert reopened.close_decided() == [weak.config["number"]]
    assert reopened.trials[weak.config["number"]].status == "stopped"
    assert reopened.trials[weak.config["number"]].last_step == 100


curves = st.lists(st.dictionaries(st.sampled_from([100, 200, 300, 400, 600, 700]),
                                   st.floats(0, 1, allow_nan=False), min_size=1, max_size=5), min_size=1, max_size=8)


@settings(max_examples=15, deadline=None)
@given(curves=curves)
def test_the_same_decisions_as_ray_s_asha(tmp_path_factory, curves):
    """Trial by trial, report by report, LedgerASHA stops exactly where Ray's ASHAScheduler does (below
    max_t; at max_steps a trial ends as completed, where Ray's says STOP to the same effect)."""
    ledger = ledger_at(tmp_path_factory.mktemp("asha"))
    mine, rays = ours(ledger), ASHAScheduler(time_attr="step", **LIMITS)
    assert rays.set_search_properties("acc", "max")
    for accs in curves:
        trial = new_trial(ledger)
        assert feed(mine, trial, accs) == feed(rays, trial, accs)


def test_the_last_report_ends_a_trial_as_completed_not_stopped(tmp_path):
    ledger = ledger_at(tmp_path)
    scheduler = ours(ledger)
    for _ in range(3):
        feed(scheduler, new_trial(ledger), {800: 0.9})
    last = new_trial(ledger)
    assert feed(scheduler, last, {800: 0.1}) == [TrialScheduler.CONTINUE]
    assert "stopped_at" not in ledger.trials[last.config["number"]].attrs


@settings(max_examples=6, deadline=None)
@given(sampler=st.sampled_from(["tpe", "random", "cmaes"]), before=st.integers(1, 5), after=st.integers(1, 5))
def test_a_resumed_sweep_draws_new_points_not_the_first_launch_s_again(tmp_path_factory, sampler, before, after):
    """A relaunch opens the study with a sampler of its own; seeded afresh it would draw the first
    launch's points again, each a duplicate that takes a trial number (and, beside a trial still
    training, a FAIL on the dashboard)."""
    path = tmp_path_factory.mktemp("ledger")
    space = {**SPACE, "space": {"optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True},
                                "dat.switch_step": {"type": "int", "low": 0, "high": 1000}},
             "searcher": {"sampler": sampler, "seed": 7}}
    first = Ledger(f"sqlite:///{path}/optuna.db", SearchSpace.model_validate(space), create=True)
    drawn = [first.new_trial() for _ in range(before)]  # the first launch, interrupted with these training
    again = Ledger(f"sqlite:///{path}/optuna.db", SearchSpace.model_validate(space), create=True)
    drawn += [again.new_trial() for _ in range(after)]
    assert drawn == list(range(before + after))  # no number taken by a redraw
    assert not [n for n, t in again.trials.items() if t.duplicate]
