"""An interrupted sweep tells the truth: Ctrl-C mid-training leaves its trials `interrupted`
(never `stopped`, never PRUNED in the study), and the same command then finishes them from
their checkpoints, with one MLflow run per trial and no step logged twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess

import optuna
import pytest

from tests.conftest import sweeper_cmd, sweeper_env, tiny_space

pytestmark = pytest.mark.integration
ENV = sweeper_env()

# The Ctrl-C comes from the driver itself on its 6th report (SWEEPER_FAULT=report:6:INT, the fault
# cue of sweeper/faults.py): with reports every 20 steps, no trial can be past step 120 then, far
# below ASHA's first rung, whatever the machine's speed.
MAX_STEPS, RUNG = 400, 200
SPACE = tiny_space("intr", switch_high=200, switch_step=50, samples=3, max_steps=MAX_STEPS, eval_every=20,
                   scheduler=f"{{type: asha, grace_period: {RUNG}, reduction_factor: 2}}", seed=3)


def _status(tmp_path) -> dict:
    return json.loads((tmp_path / "sweeps" / "intr" / "status.json").read_text())


def _study(tmp_path):
    return optuna.load_study(study_name="intr", storage=f"sqlite:///{tmp_path / 'sweeps' / 'intr' / 'optuna.db'}")



def _note(tmp_path, number: int) -> str:
    """The trial's note as optuna-dashboard shows it."""
    from optuna_dashboard import get_note

    storage = optuna.storages.RDBStorage(f"sqlite:///{tmp_path / 'sweeps' / 'intr' / 'optuna.db'}")
    study = optuna.load_study(study_name="intr", storage=storage)
    trial_id = storage.get_trial_id_from_study_id_trial_number(storage.get_study_id_from_name("intr"), number)
    return get_note(optuna.Trial(study, trial_id))


class Payload:
    """Pickles to a call that creates a file: proof that loading ran code."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import pathlib

        return (pathlib.Path.touch, (self.marker,))


class Planted:
    def __init__(self, path, original: bytes):
        self.path, self.original = path, original

    def restore(self) -> None:
        self.path.write_bytes(self.original)


def _plant_pickle(tmp_path, numbers: list[int]) -> Planted | None:
    """A pickled object in the newest checkpoint of the first interrupted trial that has one."""
    import torch

    from trainables.run_dir import RunDir
    from trainables.train import CHECKPOINT_FILE

    for number in numbers:
        checkpoint = RunDir(tmp_path / "sweeps" / "intr" / "trials" / f"t{number:04d}").checkpoint()
        if checkpoint is not None:
            path = checkpoint / CHECKPOINT_FILE
            planted = Planted(path, path.read_bytes())
            state = torch.load(path, weights_only=True)
            state["metrics"] = {"note": Payload(tmp_path / "pwned")}
            torch.save(state, path)
            return planted
    return None


def test_ctrl_c_mid_training_is_interrupted_not_stopped_and_resumes(tmp_path, mlflow_server):
    space = tmp_path / "intr.yaml"
    space.write_text(SPACE)
    cmd = sweeper_cmd("launch", space, "--tracking-uri", mlflow_server, "--progress", "lines")
    proc = subprocess.Popen(cmd, cwd=tmp_path, env={**ENV, "SWEEPER_FAULT": "report:6:INT"}, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert proc.returncode == 130, err[-3000:]
    assert "run the same command to resume" in err
    said = err.index("interrupting: stopping the trials")  # the word comes at once, before the sweep's last lines
    assert said < err.index("run the same command to resume"), err[-3000:]
    assert out.count("interrupted") >= 1 and "Traceback" not in err, out[-2000:] + err[-2000:]

    status = _status(tmp_path)
    assert status["state"] == "interrupted"
    cut_off = {t["trial_id"]: t for t in status["trials"] if t["status"] not in ("completed", "stopped", "diverged", "failed")}
    assert cut_off and all(t["status"] == "interrupted" for t in cut_off.values()), status["trials"]
    assert not any(t["status"] == "stopped" and t["step"] < RUNG for t in status["trials"])  # below grace: never ASHA
    study = _study(tmp_path).trials
    for t in study:  # one record of a report: the view, the ledger and the trial's folder end at the same step
        folder = tmp_path / "sweeps" / "intr" / "trials" / f"t{t.number:04d}" / "metrics.jsonl"
        if t.state.name == "RUNNING" and folder.exists():
            last = json.loads(folder.read_text().splitlines()[-1])["step"]
            shown = next(r["step"] for r in status["trials"] if r["trial_id"] == f"t{t.number:04d}")
            assert shown == last == max(t.intermediate_values), (shown, last, t.intermediate_values)
    states = {t.number: t.state.name for t in study}
    assert "RUNNING" in states.values(), states  # the cut-off trials stay open in the study, for the resume
    for number in (n for n, state in states.items() if state == "RUNNING"):  # and say why where the dashboard shows it
        assert _note(tmp_path, number).startswith("**Interrupted** at step"), _note(tmp_path, number)
    # a trial ASHA stopped at its rung before the Ctrl-C (a fast machine gets there first) is PRUNED; the Ctrl-C prunes none
    assert all(max(t.intermediate_values) >= RUNG for t in study if t.state.name == "PRUNED"), states

    # a checkpoint planted in an interrupted trial's folder: the resume refuses it in one line, before Ray,
    # runs nothing of it and changes nothing; put back, the resume goes on
    planted = _plant_pickle(tmp_path, [n for n, state in states.items() if state == "RUNNING"])
    assert planted is not None  # 6 reports of 2 trials at a time: an interrupted one has checkpointed
    before = (_status(tmp_path), [(t.state.name, t.intermediate_values) for t in _study(tmp_path).trials])
    bad = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=300)
    assert bad.returncode == 2 and bad.stderr.count("\n") == 1 and "Traceback" not in bad.stderr, bad.stderr[-2000:]
    assert "refused" in bad.stderr and "weights_only" in bad.stderr and len(bad.stderr) < 400, bad.stderr
    assert not (tmp_path / "pwned").exists()
    assert (_status(tmp_path), [(t.state.name, t.intermediate_values) for t in _study(tmp_path).trials]) == before
    planted.restore()

    # the same command finishes the sweep; the interrupted trials continue from their checkpoints
    r = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    final = {t["trial_id"]: t for t in _status(tmp_path)["trials"]}
    assert len(final) == 3 and all(t["status"] in ("completed", "stopped") for t in final.values()), final
    for trial_id, before in cut_off.items():  # each continued from its checkpoint, except one the Ctrl-C cut off
        # after its last report (a quiet machine trains to max_steps during Ray's graceful stop): it ends there
        assert final[trial_id]["step"] > before["step"] or before["step"] == final[trial_id]["step"] == MAX_STEPS, (before, final)
    pruned = [t for t in _study(tmp_path).trials if t.state.name == "PRUNED"]
    assert all(max(t.intermediate_values) >= RUNG for t in pruned)  # ASHA's verdicts come at rungs only
    ran = [t for t in _study(tmp_path).trials if "duplicate_of" not in t.user_attrs]  # (a redraw of a point that ran: aside)
    assert len(ran) == 3 and all(t.state.name in ("COMPLETE", "PRUNED") for t in ran), [t.state.name for t in ran]

    from mlflow import MlflowClient

    c = MlflowClient(tracking_uri=mlflow_server)
    exp = c.get_experiment_by_name("intr")
    runs = c.search_runs([exp.experiment_id])
    children = [x for x in runs if x.data.tags.get("role") == "trial"]
    parents = [x for x in runs if x.data.tags.get("role") == "sweep"]
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert len(children) == 3 and {x.data.tags["trial_id"] for x in children} == set(final)
    for x in children:
        assert x.info.status == "FINISHED" and x.data.tags["status"] == final[x.data.tags["trial_id"]]["status"]
        steps = [m.step for m in c.get_metric_history(x.info.run_id, "acc_3x")]
        assert steps == sorted(set(steps)) and steps[-1] == final[x.data.tags["trial_id"]]["step"], steps
