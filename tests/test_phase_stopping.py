"""Phase-aware early stopping: a trial is judged only from its last training phase on (a DAT
switch, the end of a curriculum) plus a margin, and compared only with trials judged there too."""

from types import SimpleNamespace

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from sweeper.adapters.optuna_ledger import Ledger
from sweeper.adapters.ray_search import LedgerASHA
from sweeper.space import SearchSpace
from sweeper.stopping import stopper_for
from trainables.config import trial_config_from_dict
from trainables.phases import last_phase_change, planned_phase_change

SPACE = {
    "name": "phases", "metric": "acc", "mode": "max",
    "fixed": {"dat": {"mode": "fixed"}},
    "space": {"dat.switch_step": {"type": "int", "low": 0, "high": 800, "step": 100},
              "optim.lr": {"type": "float", "low": 1e-4, "high": 1e-2, "log": True}},
    "budget": {"num_samples": 200, "max_concurrent": 2, "max_steps": 800, "eval_every": 100},
    "scheduler": {"type": "asha", "grace_period": 100, "reduction_factor": 2, "phase_margin": 100},
}
RUNGS = (100, 200, 400)


def cfg(**over):
    data = {"steps": 6000, "model": {"attention": True}, "dat": {"mode": "fixed", "switch_step": 1500}}
    for path, value in over.items():
        head, _, key = path.partition("__")
        data.setdefault(head, {})[key] = value
    return trial_config_from_dict(data, "test")


@pytest.mark.parametrize("over, reported, expected", [
    ({}, None, 1500),                                                   # fixed switch: from the config
    ({"dat__ramp_steps": 300}, None, 1800),                             # ... fully on once the ramp is done
    ({"dat__switch_step": 6000}, None, None),                           # a switch at the last step never comes
    ({"dat__mode": "none"}, None, 0),                                   # joint training: one phase
    ({"model__attention": False, "dat__mode": "none"}, None, 0),        # no attention: nothing switches
    ({"dat__mode": "none", "curriculum__state_only_steps": 1500}, None, 1500),  # the curriculum's end counts
    ({"dat__switch_step": 500, "curriculum__state_only_steps": 1500}, None, 1500),  # the later of the two
    ({"dat__mode": "adaptive"}, -1.0, None),                            # adaptive, before its switch: unknown
    ({"dat__mode": "adaptive"}, None, None),
    ({"dat__mode": "adaptive"}, 1234.0, 1234),                          # ... after: the step it reported
    ({"dat__mode": "adaptive", "curriculum__state_only_until_switch": True}, 900.0, 900),
])
def test_the_last_phase_change_of_a_trial(over, reported, expected):
    assert last_phase_change(cfg(**over), reported) == expected


def test_the_planned_phase_change_takes_an_adaptive_switch_at_its_latest():
    assert planned_phase_change(cfg(dat__mode="adaptive", dat__max_step=3000)) == 3000
    assert planned_phase_change(cfg(dat__switch_step=6000)) == 6000
    assert planned_phase_change(cfg()) == 1500


def ledger_at(path, **scheduler) -> Ledger:
    spec = SearchSpace.model_validate({**SPACE, "scheduler": {**SPACE["scheduler"], **scheduler}})
    return Ledger(f"sqlite:///{path}/optuna.db", spec, create=True)


def trial_at(ledger: Ledger, switch: int) -> SimpleNamespace:
    """A trial of the ledger at a given switch step (a baseline point, so the sampler draws nothing)."""
    number = ledger.new_trial()
    ledger.trials[number].params["dat.switch_step"] = switch
    return SimpleNamespace(trial_id=f"ray{number}", config={"number": number})


def feed(scheduler, trial, accs: dict[int, float], switch: int | None = None) -> list[str]:
    scheduler.on_trial_add(None, trial)
    out = []
    for step, acc in sorted(accs.items()):
        report = {"step": step, "acc": acc, "switch_step": float(switch if switch is not None and step >= switch else -1)}
        out.append(scheduler.on_trial_result(None, trial, report))
        if out[-1] == TrialScheduler.STOP:
            break
    return out


def test_a_trial_before_its_switch_passes_every_rung_unjudged(tmp_path):
    ledger = ledger_at(tmp_path)
    scheduler = LedgerASHA(stopper_for(ledger.spec, ledger))
    for _ in range(3):  # strong trials that switched at 0 fill every rung
        feed(scheduler, trial_at(ledger, 0), {s: 0.9 for s in range(100, 801, 100)})
    late = trial_at(ledger, 300)  # weak before and after its switch at 300: judged first at 400 (300 + margin 100)
    decisions = feed(scheduler, late, {s: 0.1 for s in range(100, 801, 100)})
    assert decisions == [TrialScheduler.CONTINUE] * 3 + [TrialScheduler.STOP]
    entry = ledger.trials[late.config["number"]]
    assert entry.attrs["stopped_at"] == 400 and entry.rungs() == {400: 0.1}  # no value left at 100 or 200


def test_plain_asha_when_the_space_turns_the_phases_off(tmp_path):
    ledger = ledger_at(tmp_path, phase_aware=False)
    scheduler = LedgerASHA(stopper_for(ledger.spec, ledger))
    for _ in range(3):
        feed(scheduler, trial_at(ledger, 0), {s: 0.9 for s in range(100, 801, 100)})
    assert feed(scheduler, trial_at(ledger, 300), {100: 0.1, 200: 0.1}) == [TrialScheduler.STOP]


def curves(last: int = 800):
    """Trials as (switch step, {step: value}), reports at multiples of 100 up to `last`."""
    return st.lists(st.tuples(st.sampled_from(range(0, 801, 100)),
                              st.dictionaries(st.sampled_from(range(100, last + 1, 100)), st.floats(0, 1, allow_nan=False),
                                              min_size=1, max_size=8)),
                    min_size=1, max_size=8)


@settings(max_examples=20, deadline=None)
@given(curves=curves(), margin=st.sampled_from([0, 100, 300]))
def test_no_trial_is_judged_or_stopped_before_its_switch_and_margin(tmp_path_factory, curves, margin):
    ledger = ledger_at(tmp_path_factory.mktemp("phase"), phase_margin=margin)
    scheduler = LedgerASHA(stopper_for(ledger.spec, ledger))
    for switch, accs in curves:
        trial = trial_at(ledger, switch)
        feed(scheduler, trial, accs, switch)
        entry = ledger.trials[trial.config["number"]]
        assert all(rung >= switch + margin for rung in entry.rungs()), (switch, entry.rungs())
        if "stopped_at" in entry.attrs:
            assert entry.attrs["stopped_at"] >= switch + margin
            assert min(entry.rungs()) >= switch + margin


@settings(max_examples=10, deadline=None)
@given(curves=curves(last=700))
def test_trials_that_switch_at_step_0_with_no_margin_get_ray_s_decisions(tmp_path_factory, curves):
    """With every trial in its last phase from the start, the rule is Ray's ASHAScheduler's (below
    max_steps: at its last report a trial ends as completed, where Ray's says STOP to the same effect)."""
    ledger = ledger_at(tmp_path_factory.mktemp("phase0"), phase_margin=0)
    mine = LedgerASHA(stopper_for(ledger.spec, ledger))
    rays = ASHAScheduler(time_attr="step", max_t=800, grace_period=100, reduction_factor=2)
    assert rays.set_search_properties("acc", "max")
    for _, accs in curves:
        trial = trial_at(ledger, 0)
        assert feed(mine, trial, accs, 0) == feed(rays, trial, accs, 0)


def test_the_plan_expects_full_runs_of_trials_judged_after_their_switch():
    """The plan line's estimate follows the rule: a trial that switches after the last rung runs its
    whole budget; one that switches before it is halved at the rungs after its switch only."""
    from sweeper import eta

    spec = SearchSpace.model_validate(SPACE)  # rungs 100, 200, 400; margin 100
    plan = eta.Plan.from_space(spec)
    assert plan.rungs == RUNGS
    assert plan.expected_steps(0, {"dat.switch_step": 400, "optim.lr": 1e-3}) == 800  # judged from 500: never
    assert plan.expected_steps(0, {"dat.switch_step": 100, "optim.lr": 1e-3}) == 200 + 200 / 2 + 400 / 4  # at 200, 400
    assert plan.expected_steps(0, {"dat.switch_step": 0, "optim.lr": 1e-3}) == 100 + 100 / 2 + 200 / 4 + 400 / 8
    fresh = plan.expected_steps(0)  # any point: between the two ends
    assert 100 + 100 / 2 + 200 / 4 + 400 / 8 < fresh < 800
    off = eta.Plan.from_space(SearchSpace.model_validate({**SPACE, "scheduler": {**SPACE["scheduler"], "phase_aware": False}}))
    assert off.expected_steps(0, {"dat.switch_step": 400, "optim.lr": 1e-3}) == 100 + 100 / 2 + 200 / 4 + 400 / 8


def test_the_plan_of_a_rule_that_judges_before_the_switch_expects_every_rung_and_says_so():
    """With `pre_phase_metric`, a trial is judged at every rung (by that metric before its switch), so
    the estimate is plain ASHA's for every point, and the plan line and `validate` name the metric."""
    from sweeper import eta
    from sweeper.live_table import plan_line

    spec = SearchSpace.model_validate({**SPACE, "scheduler": {**SPACE["scheduler"], "pre_phase_metric": "state_acc_1x"}})
    plan = eta.Plan.from_space(spec)
    every_rung = 100 + 100 / 2 + 200 / 4 + 400 / 8
    assert plan.expected_steps(0, {"dat.switch_step": 400, "optim.lr": 1e-3}) == every_rung  # not 800: judged before it
    assert plan.expected_steps(0) == every_rung
    assert "each trial judged by state_acc_1x before its switch" in plan_line(plan)


def test_validate_names_how_the_phases_are_judged(tmp_path, capsys):
    import yaml

    from sweeper.commands import validate

    for scheduler, said in (({}, "phase-aware: margin 100, judged only after it"),
                            ({"pre_phase_metric": "state_acc_1x"}, "phase-aware: margin 100, before the phase change by state_acc_1x"),
                            ({"phase_aware": False}, "reduction 2.0)")):
        path = tmp_path / "space.yaml"
        path.write_text(yaml.safe_dump({**SPACE, "metric": "acc_3x", "scheduler": {**SPACE["scheduler"], **scheduler},
                                        "resources": {"cpu": 1, "gpu": 0}}))
        assert validate.run(validate.Options(str(path), 0)) == 0
        assert said in capsys.readouterr().out


def test_a_step_reported_again_after_a_kill_is_judged_by_the_value_the_ledger_recorded(tmp_path):
    # a kill between the ledger's record of a report and the rung's: the step trains again, its value may differ
    ledger = ledger_at(tmp_path, phase_aware=False)
    stopper = stopper_for(ledger.spec, ledger)
    number = trial_at(ledger, 0).config["number"]
    ledger.report(number, 100, 0.25)  # recorded, then the driver was killed before the rung
    stopper.on_report(number, {"step": 100, "acc": 0.75, "switch_step": 0.0})
    assert ledger.trials[number].rungs() == {100: 0.25} and ledger.trials[number].values == {100: 0.25}
