"""ASHA's rungs survive the driver: a resumed sweep stops trials as an uninterrupted one would.

Ray snapshots the searcher, not the scheduler; `Tuner.restore` unpickles the scheduler from
tuner.pkl, written before any trial ran. These tests pickle the scheduler at that moment, feed
it results, and unpickle it as a resume does.
"""

import pickle
from types import SimpleNamespace

from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from sweeper.adapters.ray_tune import ASHA_STATE, ResumableASHA

LIMITS = dict(time_attr="step", metric="acc", mode="max", max_t=800, grace_period=100, reduction_factor=2)


def feed(scheduler, trial_id: str, accs: dict[int, float]) -> list[str]:
    trial = SimpleNamespace(trial_id=trial_id)
    scheduler.on_trial_add(None, trial)
    decisions = []
    for step, acc in sorted(accs.items()):
        decisions.append(scheduler.on_trial_result(None, trial, {"step": step, "acc": acc}))
        if decisions[-1] == TrialScheduler.STOP:
            break
    return decisions


STRONG = {100: 0.9, 200: 0.9, 400: 0.9}
WEAK = {100: 0.1, 200: 0.1, 400: 0.1}


def test_a_resumed_scheduler_keeps_its_rungs_and_stops_what_it_would_have(tmp_path):
    scheduler = ResumableASHA(**LIMITS, state_file=str(tmp_path / ASHA_STATE))
    as_in_tuner_pkl = pickle.dumps(scheduler)  # before any trial ran
    for i in range(3):
        feed(scheduler, f"strong{i}", STRONG)
    uninterrupted = feed(scheduler, "weak", WEAK)
    assert uninterrupted == [TrialScheduler.STOP]  # below the rung's cut-off at its first rung

    resumed = pickle.loads(as_in_tuner_pkl)  # the driver died; Tuner.restore unpickles tuner.pkl
    assert feed(resumed, "weak_after_resume", WEAK) == uninterrupted


def test_without_the_state_ray_s_asha_forgets_its_rungs(tmp_path):
    """What the test above guards against: Ray's scheduler, restored the same way, lets the weak trial on."""
    plain = ASHAScheduler(**LIMITS)
    as_in_tuner_pkl = pickle.dumps(plain)
    for i in range(3):
        feed(plain, f"strong{i}", STRONG)
    assert feed(plain, "weak", WEAK) == [TrialScheduler.STOP]
    assert TrialScheduler.STOP not in feed(pickle.loads(as_in_tuner_pkl), "weak_after_resume", WEAK)


def test_a_damaged_or_missing_state_file_starts_the_rungs_afresh(tmp_path):
    scheduler = ResumableASHA(**LIMITS, state_file=str(tmp_path / ASHA_STATE))
    as_in_tuner_pkl = pickle.dumps(scheduler)
    feed(scheduler, "strong0", STRONG)
    (tmp_path / ASHA_STATE).write_bytes(b"cut by a kill")
    resumed = pickle.loads(as_in_tuner_pkl)
    assert TrialScheduler.STOP not in feed(resumed, "weak", WEAK)  # empty rungs, as Ray's own
    assert not list(tmp_path.glob("*.tmp"))


def test_on_remote_storage_it_schedules_as_ray_s_asha_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scheduler = ResumableASHA(**LIMITS, state_file=None)
    for i in range(3):
        feed(scheduler, f"strong{i}", STRONG)
    assert feed(scheduler, "weak", WEAK) == [TrialScheduler.STOP]
    assert not list(tmp_path.iterdir())
