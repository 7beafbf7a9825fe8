"""`sweeper launch` on a real local Ray instance, a real Optuna study and a real MLflow server."""

import json
import os
import signal
import subprocess
import time

import pytest
from mlflow import MlflowClient

from conftest import ROOT, free_port, ray_left_running, sweeper_cmd
from tests.hostile import sweeper_watching_ray
from sweeper.fs import sqlite_url

SMOKE = ROOT / "search_spaces" / "smoke.yaml"
pytestmark = pytest.mark.integration
ENV = {**os.environ, "PYTHONPATH": str(ROOT)}
STORE_FOLDER = "odd #{x} name"  # ODD_FOLDER without the ? and % an MLflow store's path may not hold


def _summary(workdir, name="smoke"):
    return json.loads((workdir / "sweeps" / name / "summary.json").read_text())


def _study(workdir, name="smoke"):
    import optuna

    return optuna.load_study(study_name=name, storage=sqlite_url(workdir / "sweeps" / name / "optuna.db"))


def _reports_of(workdir, trial_id, name="smoke") -> list[float]:
    """The scored metric of every report a trial's folder holds."""
    from trainables.run_dir import RunDir

    return [r["acc_3x"] for r in RunDir(workdir / "sweeps" / name / "trials" / trial_id).reports()]


def _optuna_states(workdir, name="smoke"):
    """The states of the study's trials, draws of a point that had already run (duplicate_of) aside."""
    return [t.state.name for t in _study(workdir, name).trials if "duplicate_of" not in t.user_attrs]


def _ended_in_study(workdir, name="smoke") -> dict[str, dict]:
    """The trials the ledger holds ended, with their folder's last report: {name: {status, step, steps_per_s}}."""
    import optuna

    sweep_dir = workdir / "sweeps" / name
    study = optuna.load_study(study_name=name, storage=sqlite_url(workdir / "sweeps" / name / "optuna.db"))
    out = {}
    for t in study.trials:
        if t.state.name in ("COMPLETE", "PRUNED") and "duplicate_of" not in t.user_attrs:
            last = json.loads((sweep_dir / "trials" / f"t{t.number:04d}" / "metrics.jsonl").read_text().splitlines()[-1])
            out[f"t{t.number:04d}"] = {"status": "stopped" if t.state.name == "PRUNED" else "completed",
                                       "step": last["step"], "steps_per_s": last["steps_per_s"]}
    return out


def _kill_session(sid: int) -> None:
    """SIGKILL every process of a session (a killed driver's Ray and its workers stay in it)."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.getsid(int(entry)) == sid:
                    os.kill(int(entry), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                continue


def _children(url, experiment):
    c = MlflowClient(url)
    exp = c.get_experiment_by_name(experiment)
    runs = c.search_runs([exp.experiment_id], max_results=1000)
    parents = [r for r in runs if r.data.tags.get("role") == "sweep"]
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    return c, exp, parents, children


def test_smoke_sweep_runs_end_to_end_with_asha_stopping_trials(smoke_sweep):
    workdir, r = smoke_sweep
    summary = _summary(workdir)
    trials = summary["trials"]
    assert len(trials) == 6 and len({t["trial_id"] for t in trials}) == 6
    statuses = [t["status"] for t in trials]
    assert "stopped" in statuses, statuses  # ASHA stopped at least one trial early
    assert "completed" in statuses
    for t in trials:
        assert (t["step"] < 60) if t["status"] == "stopped" else (t["step"] == 60)
    # the baseline (joint training) was evaluated first
    assert any(t["params"] == {"dat.switch_step": 0, "optim.lr": 0.003} for t in trials)
    best = summary["best"]  # the best judged value: at a rung, or at a trial's end
    judged = [v for t in _study(workdir).trials for k, v in t.user_attrs.items() if k.startswith("rung.")]
    judged += [t["metrics"]["acc_3x"] for t in trials if t["status"] in ("completed", "stopped")]
    assert best["score"] == max(judged) and best["score"] in _reports_of(workdir, best["trial_id"])
    assert best["config"]["steps"] == 60 and best["config"]["dat"]["switch_step"] == best["params"]["dat.switch_step"]
    # the Optuna study on disk knows which trials were pruned by ASHA
    states = _optuna_states(workdir)
    assert len(states) == 6 and "PRUNED" in states and "COMPLETE" in states
    # phase-aware ASHA: no trial was judged, let alone stopped, before its switch + the margin (10)
    for t in _study(workdir).trials:
        switch = t.params["dat.switch_step"]
        assert all(int(k.removeprefix("rung.")) >= switch + 10 for k in t.user_attrs if k.startswith("rung.")), t.user_attrs
        assert t.user_attrs.get("stopped_at", switch + 10) >= switch + 10, (switch, t.user_attrs)
    # the live view printed a progress line, the end a table; `sweeper status` reads the directory
    assert "[smoke" in r.stdout and "acc_3x" in r.stdout
    s = subprocess.run(sweeper_cmd("status", "smoke"), cwd=workdir, env=ENV, capture_output=True, text=True)
    assert s.returncode == 0 and "sweep smoke: finished" in s.stdout


def test_a_replay_of_the_sweep_on_its_own_curves_runs_what_it_ran(smoke_sweep):
    """The search replay (sweeper/replay.py) against the real sweep it replays: the same number of
    trials, and training steps within 10% (the order of two concurrent trials' reports may differ)."""
    from sweeper.replay import grid_of_sweep, replay
    from sweeper.space_file import load_space

    workdir, _ = smoke_sweep
    spec = load_space(SMOKE, n_samples=0)
    real = _ended_in_study(workdir)
    grid = grid_of_sweep(workdir / "sweeps" / "smoke", spec)
    trace = replay(spec, grid, seed=spec.searcher.seed)
    assert len(trace.ended) == len(real) == 6
    real_steps = sum(t["step"] for t in real.values())
    assert abs(trace.compute - real_steps) <= 0.1 * real_steps, (trace.compute, real_steps, trace.ended, real)


def test_mlflow_holds_one_parent_and_a_nested_child_per_trial(smoke_sweep, mlflow_server):
    workdir, _ = smoke_sweep
    c, exp, parents, children = _children(mlflow_server, "smoke")
    assert len(parents) == 1 and len(children) == 6
    parent = parents[0]
    assert all(ch.data.tags["mlflow.parentRunId"] == parent.info.run_id for ch in children)
    trials = {t["trial_id"]: t for t in _summary(workdir)["trials"]}
    assert {ch.data.tags["trial_id"] for ch in children} == set(trials)
    for ch in children:
        t = trials[ch.data.tags["trial_id"]]
        assert ch.data.tags["status"] == t["status"]  # completed / stopped, as the sweep saw it
        assert ch.info.status == "FINISHED"
        assert ch.data.params["dat.switch_step"] == str(t["params"]["dat.switch_step"])
        assert ch.data.params["steps"] == "60" and "model.d_model" in ch.data.params
        history = c.get_metric_history(ch.info.run_id, "acc_3x")
        assert [m.step for m in history] == list(range(10, t["step"] + 1, 10))  # every report, at its step
        assert history[-1].value == pytest.approx(t["metrics"]["acc_3x"])
        assert {a.path for a in c.list_artifacts(ch.info.run_id)} >= {"config.yaml", "accuracy_vs_length.png"}
        rss = c.get_metric_history(ch.info.run_id, "system/process_memory_rss_megabytes")  # the trial's own
        assert [m.step for m in rss] == [m.step for m in history] and all(100 < m.value < 10_000 for m in rss)
        assert all(0 <= m.value for m in c.get_metric_history(ch.info.run_id, "system/cpu_utilization_percentage"))
    best = [ch for ch in children if ch.data.tags.get("best") == "true"]
    assert len(best) == 1 and best[0].data.tags["trial_id"] == _summary(workdir)["best"]["trial_id"]
    assert parent.data.metrics["best_acc_3x"] == pytest.approx(_summary(workdir)["best"]["score"])
    parent_artifacts = {a.path for a in c.list_artifacts(parent.info.run_id)}
    assert {"space.yaml", "summary.csv", "summary.md", "best_config.yaml", "plots"} <= parent_artifacts
    plots = {a.path for a in c.list_artifacts(parent.info.run_id, "plots")}
    assert plots == {"plots/acc_3x_vs_params.png", "plots/top_trials_vs_length.png", "plots/learning_curves.png"}
    assert parent.data.params["space.dat.switch_step"].startswith("IntDistribution")


def test_report_compares_the_trials_from_mlflow(smoke_sweep, tmp_path):
    workdir, _ = smoke_sweep
    md = tmp_path / "report.md"
    r = subprocess.run(sweeper_cmd("report", "smoke", "--markdown", md), cwd=workdir, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    text = md.read_text()
    assert "## Top" in text and "(best)" in text and "`dat.switch_step`" in text and "`optim.lr`" in text
    assert "Parameter importance" in text


def test_bad_space_exits_2_before_ray_starts_and_writes_nothing(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text(SMOKE.read_text().replace("low: 0, high: 60", "low: 60, high: 0"))
    r, ray_started = sweeper_watching_ray("launch", bad, cwd=tmp_path)
    assert r.returncode == 2 and not ray_started
    assert r.stderr.strip().count("\n") == 0 and "space.dat.switch_step: `low < high` must hold" in r.stderr
    assert not (tmp_path / "sweeps").exists() and not (tmp_path / "mlflow.db").exists()


def test_unreachable_tracking_server_fails_fast_before_ray(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    r, ray_started = sweeper_watching_ray("launch", SMOKE, "--tracking-uri", url, cwd=tmp_path)
    assert r.returncode == 2 and not ray_started, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "MLflow tracking server unreachable" in lines[0] and url in lines[0]
    assert not (tmp_path / "sweeps").exists()
    assert "ray" not in (r.stdout + r.stderr).lower().replace(url, "")
    # on a cluster the URI comes from the environment: the error names it, not a flag nobody passed
    r = subprocess.run(sweeper_cmd("launch", SMOKE), cwd=tmp_path, env={**ENV, "MLFLOW_TRACKING_URI": url},
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 2 and r.stderr.startswith(f"error: $MLFLOW_TRACKING_URI {url}: MLflow tracking server unreachable"), r.stderr


@pytest.mark.parametrize("backend", [pytest.param("sqlite", marks=pytest.mark.long), "postgresql"])  # sqlite: `make test-long`
def test_killed_sweep_resumes_to_exactly_num_samples_trials_and_runs(tmp_path, backend, request):
    # the MLflow server on SQLite (the laptop default behind a server) and on a real PostgreSQL
    # (as k8s/ deploys it): parent and nested children, and a kill-and-resume with no duplicates
    mlflow_server = request.getfixturevalue("mlflow_server" if backend == "sqlite" else "mlflow_postgres_server")
    # smoke.yaml with plain ASHA: its phase-aware rule judges only trials that switched early, so whether a
    # second stop comes would depend on the draws; plain ASHA over 6 trials and 3 rungs always stops two
    space = tmp_path / "smoke.yaml"
    space.write_text(SMOKE.read_text().replace("  phase_margin: 10", "  phase_aware: false  # (test)\n  phase_margin: 10"))
    assert "phase_aware: false" in space.read_text()
    cmd = sweeper_cmd("launch", space, "--tracking-uri", mlflow_server, "--experiment", "smoke-resume")
    # the driver SIGKILLs itself right after the ledger took ASHA's second stop (SWEEPER_FAULT): no chance
    # to clean up, its views one event behind, some trials ended and some mid-training
    killed = subprocess.Popen(cmd, cwd=tmp_path, env={**ENV, "SWEEPER_FAULT": "stop:2:KILL"}, stdout=subprocess.DEVNULL,
                              stderr=subprocess.PIPE, text=True, start_new_session=True)
    _, err = killed.communicate(timeout=600)
    assert killed.returncode == -signal.SIGKILL, "the sweep ended before ASHA's second stop: " + err[-2000:]
    sweep_dir = tmp_path / "sweeps" / "smoke"
    try:
        # Ray leaves its processes behind a killed driver; the next launch of the sweep must end them
        time.sleep(2)  # (what would end with the driver has ended by now)
        assert ray_left_running(sweep_dir), "nothing of the killed driver's Ray was left running: the premise no longer holds"
        finished_before = _ended_in_study(tmp_path)
        assert len(finished_before) >= 2, finished_before

        r = subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=900)
        assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
        assert "resuming sweep smoke" in r.stdout
        assert ray_left_running(sweep_dir) == [] and "processes of this sweep's earlier local Ray" in r.stderr, r.stderr[-2000:]
    finally:
        _kill_session(killed.pid)  # what is still there after a failure
    trials = _summary(tmp_path)["trials"]
    assert len(trials) == 6 and len({t["trial_id"] for t in trials}) == 6
    after = {t["trial_id"]: t for t in trials}
    for trial_id, before in finished_before.items():
        # a finished trial is kept as it was, not run again: training is deterministic,
        # but throughput is not, so a re-run would report another steps_per_s
        assert (after[trial_id]["status"], after[trial_id]["step"]) == (before["status"], before["step"])
        assert after[trial_id]["metrics"]["steps_per_s"] == before["steps_per_s"]
    assert all(t["status"] in ("completed", "stopped", "diverged") for t in trials), [(t["status"], t["step"]) for t in trials]
    # the searcher sampled no extra trials: every trial of the study ran, once
    assert len(_optuna_states(tmp_path)) == 6 and "FAIL" not in _optuna_states(tmp_path)
    # MLflow: the same parent, one child per trial, no duplicates, no report logged twice
    c, _, parents, children = _children(mlflow_server, "smoke-resume")
    assert len(parents) == 1 and len(children) == 6
    assert all(ch.data.tags["mlflow.parentRunId"] == parents[0].info.run_id for ch in children)
    assert parents[0].info.status == "FINISHED" and all(ch.info.status == "FINISHED" for ch in children)
    assert {ch.data.tags["trial_id"] for ch in children} == set(after)
    for ch in children:
        steps = [m.step for m in c.get_metric_history(ch.info.run_id, "acc_3x")]
        assert steps == sorted(set(steps)), steps


DISCRETE = """
name: discrete
metric: acc_3x
mode: max
fixed:
  model: {d_model: 16, n_layers: 1, n_heads: 2}
  eval: {n_sequences: 16, batch_size: 16}
  optim: {batch_size: 16, warmup_steps: 5}
space:
  model.positional: {type: categorical, choices: [none, sinusoidal]}
  dat.switch_step: {type: int, low: 0, high: 20, step: 10}
budget: {num_samples: 6, max_concurrent: 1, max_steps: 20, eval_every: 10}
scheduler: {type: fifo}
searcher: {sampler: random, seed: 0}
resources: {cpu: 1, gpu: 0}
"""


def test_a_point_that_already_trained_is_never_trained_again(tmp_path):
    # 6 distinct points and 6 trials: random draws repeat points, each repeat is answered from
    # the study (tagged duplicate_of) and the trials cover every point exactly once. The sweep runs
    # in a folder whose name an unquoted URL would misread (#, braces, spaces): its study and its
    # default tracking store are the files in that folder, nowhere else.
    workdir = tmp_path / STORE_FOLDER
    workdir.mkdir()
    space = workdir / "discrete.yaml"
    space.write_text(DISCRETE)
    r = subprocess.run(sweeper_cmd("launch", space), cwd=workdir, env=ENV, capture_output=True, text=True, timeout=600)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    assert sorted(p.name for p in tmp_path.iterdir()) == [STORE_FOLDER]
    assert (workdir / "mlflow.db").stat().st_size > 0 and (workdir / "mlartifacts").is_dir()
    points = [tuple(sorted(t["params"].items())) for t in _summary(workdir, "discrete")["trials"]]
    assert len(points) == 6 and len(set(points)) == 6
    import optuna

    study = optuna.load_study(study_name="discrete", storage=sqlite_url(workdir / "sweeps" / "discrete" / "optuna.db"))
    dups = sum("duplicate_of" in t.user_attrs for t in study.trials)
    assert dups > 0 and len(study.trials) == 6 + dups
