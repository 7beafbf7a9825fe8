"""ASHA's rungs survive the driver: a resumed sweep stops trials as an uninterrupted one would.

Ray snapshots the searcher, not the scheduler; `Tuner.restore` unpickles the scheduler from
tuner.pkl, written before any trial ran. These tests pickle the scheduler at that moment, feed
it results, and unpickle it as a resume does.
"""

import pickle
from types import SimpleNamespace

import torch
from ray.tune.schedulers import ASHAScheduler, TrialScheduler

from sweeper.adapters.ray_tune import ASHA_STATE, ResumableASHA, drop_restored_copies, ended_by_scheduler
from sweeper.records import TrialRecord
from trainables.train import CHECKPOINT_FILE

LIMITS = dict(time_attr="step", max_t=800, grace_period=100, reduction_factor=2)  # metric and mode: from the Tuner


def make(cls=ResumableASHA, **kwargs):
    """A scheduler as the Tuner has it: pickled into tuner.pkl before `set_search_properties`."""
    scheduler = cls(**LIMITS, **kwargs)
    as_in_tuner_pkl = pickle.dumps(scheduler)
    assert scheduler.set_search_properties("acc", "max")
    return scheduler, as_in_tuner_pkl


def restore(as_in_tuner_pkl: bytes):
    """What `Tuner.restore` does with the scheduler: unpickle it, then set the Tuner's metric and mode,
    which Ray refuses (a ValueError from tune.run) if the scheduler comes back with its own."""
    scheduler = pickle.loads(as_in_tuner_pkl)
    assert scheduler.set_search_properties("acc", "max"), "the scheduler came back with a metric and mode"
    return scheduler


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
    scheduler, as_in_tuner_pkl = make(state_file=str(tmp_path / ASHA_STATE))
    for i in range(3):
        feed(scheduler, f"strong{i}", STRONG)
    uninterrupted = feed(scheduler, "weak", WEAK)
    assert uninterrupted == [TrialScheduler.STOP]  # below the rung's cut-off at its first rung

    resumed = restore(as_in_tuner_pkl)  # the driver died; Tuner.restore unpickles tuner.pkl
    assert feed(resumed, "weak_after_resume", WEAK) == uninterrupted


def test_without_the_state_ray_s_asha_forgets_its_rungs(tmp_path):
    """What the test above guards against: Ray's scheduler, restored the same way, lets the weak trial on."""
    plain, as_in_tuner_pkl = make(ASHAScheduler)
    for i in range(3):
        feed(plain, f"strong{i}", STRONG)
    assert feed(plain, "weak", WEAK) == [TrialScheduler.STOP]
    assert TrialScheduler.STOP not in feed(restore(as_in_tuner_pkl), "weak_after_resume", WEAK)


def test_a_damaged_or_missing_state_file_starts_the_rungs_afresh(tmp_path):
    scheduler, as_in_tuner_pkl = make(state_file=str(tmp_path / ASHA_STATE))
    feed(scheduler, "strong0", STRONG)
    (tmp_path / ASHA_STATE).write_bytes(b"cut by a kill")
    resumed = restore(as_in_tuner_pkl)
    assert TrialScheduler.STOP not in feed(resumed, "weak", WEAK)  # empty rungs, as Ray's own
    assert not list(tmp_path.glob("*.tmp"))
    (tmp_path / ASHA_STATE).unlink()
    assert TrialScheduler.STOP not in feed(restore(as_in_tuner_pkl), "weak", WEAK)


def test_a_resumed_ray_does_not_put_the_old_rungs_back(tmp_path):
    """On restore Ray copies every .json and .pkl of the sweep folder into its staging folder and uploads
    that folder back over the sweep folder at every snapshot: a copy of asha.pkl there would revert the
    live rungs to the resume's, again and again. The copies of our files go; Ray's own stay."""
    ours = ["status.json", "mlflow_runs.json", ASHA_STATE]
    rays = ["experiment_state-2026-11-23_01-00-00.json", "tuner.pkl", "searcher-state-2026-11-23_01-00-00.pkl"]
    for name in ours + rays:
        (tmp_path / name).write_text("x")
    assert sorted(p.name for p in drop_restored_copies(tmp_path)) == sorted(ours)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(rays)


def test_a_failed_save_is_one_warning_and_the_sweep_goes_on(tmp_path, capsys):
    scheduler, _ = make(state_file=str(tmp_path / ASHA_STATE))
    (tmp_path / f"{ASHA_STATE}.tmp").mkdir()  # where the save writes first: it cannot (as on a full disk)
    for i in range(3):
        feed(scheduler, f"strong{i}", STRONG)
    assert feed(scheduler, "weak", WEAK) == [TrialScheduler.STOP]  # the rungs in memory still decide
    err = capsys.readouterr().err
    assert err.count("warning: could not save ASHA's rungs") == 1, err
    assert not (tmp_path / ASHA_STATE).exists()


def test_on_remote_storage_it_schedules_as_ray_s_asha_and_writes_nothing(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    scheduler, _ = make(state_file=None)
    for i in range(3):
        feed(scheduler, f"strong{i}", STRONG)
    assert feed(scheduler, "weak", WEAK) == [TrialScheduler.STOP]
    assert not list(tmp_path.iterdir())


def test_its_stops_are_saved_with_the_rungs_and_survive_the_resume(tmp_path):
    scheduler, as_in_tuner_pkl = make(state_file=str(tmp_path / ASHA_STATE))
    for i in range(3):
        feed(scheduler, f"strong{i}", STRONG)
    feed(scheduler, "weak", WEAK)
    assert ResumableASHA.saved_stops(tmp_path / ASHA_STATE) == {"weak": 100}  # STRONG trials were never stopped
    resumed = restore(as_in_tuner_pkl)
    assert resumed.stops == {"weak": 100}
    # Ray never acted on the stop (a kill), and the trial resumed from an older checkpoint: it is
    # stopped again at its rung, though its value is already on the rung (Ray's ASHA would go on)
    assert feed(resumed, "weak", {50: 0.1, 100: 0.1}) == [TrialScheduler.CONTINUE, TrialScheduler.STOP]
    (tmp_path / ASHA_STATE).write_bytes(b"cut by a kill")
    assert ResumableASHA.saved_stops(tmp_path / ASHA_STATE) == {}
    assert ResumableASHA.saved_stops(tmp_path / "missing.pkl") == {}


def _trial(tmp_path, trial_id: str, status: str, step: int, checkpoint_step: int | None = None) -> TrialRecord:
    path = tmp_path / trial_id
    path.mkdir()
    if checkpoint_step is not None:  # the newest checkpoint, with the report it was taken with
        (path / "checkpoint_000001").mkdir()
        torch.save({"step": checkpoint_step, "metrics": {"step": checkpoint_step, "acc": 0.1}},
                   path / "checkpoint_000001" / CHECKPOINT_FILE)
    return TrialRecord(trial_id, {"lr": 1.0}, status, step, {"step": step, "acc": 0.1}, str(path))


def test_a_stop_cut_off_before_ray_acted_ends_the_trial_at_its_rung_on_resume(tmp_path):
    """A kill after ASHA decided and saved a stop, before Ray acted on it (found by report-TERM of the
    fault matrix; its own cue is now `verdict`): status.json holds the trial running, and a resume would
    train it past its rung."""
    scheduler, _ = make(state_file=str(tmp_path / ASHA_STATE))
    for i in range(3):
        feed(scheduler, f"strong{i}", STRONG)
    for trial_id in ("logged", "unlogged", "older_checkpoint", "ended"):
        assert feed(scheduler, trial_id, WEAK) == [TrialScheduler.STOP]  # at step 100
    records = [
        _trial(tmp_path, "logged", "running", 100),  # status.json has the stop's report
        _trial(tmp_path, "unlogged", "running", 0, checkpoint_step=100),  # only its checkpoint has it
        _trial(tmp_path, "older_checkpoint", "running", 0, checkpoint_step=50),  # no report of step 100 anywhere
        _trial(tmp_path, "ended", "stopped", 100),  # already final
        _trial(tmp_path, "strong0", "running", 400),  # never stopped
    ]
    ended = {r.trial_id: r for r in ended_by_scheduler(records, tmp_path, max_steps=800)}
    assert sorted(ended) == ["logged", "unlogged"]
    assert all(r.status == "stopped" and r.step == 100 and r.metrics["step"] == 100 for r in ended.values())

