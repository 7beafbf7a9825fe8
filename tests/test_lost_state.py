"""A sweep's views are safe to delete: `sweeper status` and the next launch rebuild them from the
ledger (the Optuna study) and the trials' folders, without a wrong label, a retrained step or a
second MLflow run; a lost study is refused in one line before Ray starts."""

from __future__ import annotations

import json
import subprocess

import pytest

from tests.conftest import sweeper_cmd, sweeper_env, tiny_space

pytestmark = pytest.mark.integration
ENV = sweeper_env()

SPACE = tiny_space("lost", switch_high=40, switch_step=20, samples=3, max_steps=80, eval_every=20,
                   scheduler="{type: asha, grace_period: 20, reduction_factor: 2}", seed=5)


def _statuses(sweep_dir) -> dict[str, tuple[str, int]]:
    return {t["trial_id"]: (t["status"], t["step"]) for t in json.loads((sweep_dir / "status.json").read_text())["trials"]}


def _runs(tmp_path) -> tuple[list, list]:
    from mlflow import MlflowClient

    c = MlflowClient(tracking_uri=f"sqlite:///{tmp_path / 'mlflow.db'}")
    runs = c.search_runs([c.get_experiment_by_name("lost").experiment_id])
    return [r for r in runs if r.data.tags.get("role") == "sweep"], [r for r in runs if r.data.tags.get("role") == "trial"]



def _left_behind(sweep_dir) -> list[str]:
    """The processes the launch recorded (its local Ray) that still exist, zombies included."""
    import psutil

    from sweeper.orphans import still_there

    record = json.loads((sweep_dir / "ray_processes.json").read_text())
    left = []
    for proc in still_there([(p["pid"], p["started"]) for p in record["processes"]]):
        try:
            left.append(f"{proc.name()} ({proc.status()})")
        except psutil.Error:
            continue
    return left


def test_lost_state_files_are_rebuilt_or_refused(tmp_path):
    space = tmp_path / "lost.yaml"
    space.write_text(SPACE)
    sweep_dir = tmp_path / "sweeps" / "lost"
    cmd = sweeper_cmd("launch", space, "--progress", "lines")

    def launch():
        return subprocess.run(cmd, cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=600)

    r = launch()
    assert r.returncode == 0, r.stderr[-3000:]
    assert not _left_behind(sweep_dir)  # the launch's local Ray: ended and reaped, not even a zombie
    before = _statuses(sweep_dir)
    assert len(before) == 3 and {s for s, _ in before.values()} <= {"completed", "stopped"}
    assert {p.name for p in sweep_dir.iterdir()} >= {"space.yaml", "optuna.db", "trials", "status.json", "summary.json"}
    reports = {p.parent.name: p.read_text() for p in sweep_dir.glob("trials/*/metrics.jsonl")}
    assert sorted(reports) == sorted(before)

    views = [p for p in sweep_dir.iterdir() if p.name not in ("space.yaml", "optuna.db", "trials", "ray_processes.json")]
    for view in views:  # every view, deleted: `sweeper status` rebuilds status.json, same statuses
        view.unlink()
    r = subprocess.run(sweeper_cmd("status", "lost"), cwd=tmp_path, env=ENV, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0 and "rebuilt" in r.stdout, r.stdout + r.stderr
    assert _statuses(sweep_dir) == before

    r = launch()  # the next launch: nothing trained again, the views all back, one parent run in MLflow
    assert r.returncode == 0, r.stderr[-3000:]
    assert _statuses(sweep_dir) == before
    assert {p.parent.name: p.read_text() for p in sweep_dir.glob("trials/*/metrics.jsonl")} == reports
    assert {v.name for v in views} <= {p.name for p in sweep_dir.iterdir()}
    parents, children = _runs(tmp_path)
    assert len(parents) == 1 and parents[0].info.status == "FINISHED"
    assert sorted(c.data.tags["trial_id"] for c in children) == sorted(before)

    saved = (sweep_dir / "space.yaml").read_bytes()
    (sweep_dir / "space.yaml").unlink()  # the space it started with: refused, in one line, before Ray starts
    r = launch()
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "space.yaml: missing" in lines[0] and "--restart" in lines[0], r.stderr
    assert _statuses(sweep_dir) == before and r.stdout == ""
    (sweep_dir / "space.yaml").write_bytes(saved)

    files = {p: p.read_bytes() for p in (tmp_path / "sweeps").rglob("*") if p.is_file()}  # the lock beside it too
    assert sweep_dir.parent / ".lost.lock" in files and sweep_dir / "ray_processes.json" in files
    r = subprocess.run(cmd + ["--tracking-uri", f"sqlite:///{tmp_path / 'other.db'}"], cwd=tmp_path, env=ENV,
                       capture_output=True, text=True, timeout=600)  # another store: refused with nothing changed
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "logs to" in lines[0], r.stderr
    assert {p: p.read_bytes() for p in (tmp_path / "sweeps").rglob("*") if p.is_file()} == files
    assert not (tmp_path / "other.db").exists()

    (sweep_dir / "optuna.db").unlink()  # the study: refused, in one line, before Ray starts
    r = launch()
    lines = r.stderr.strip().splitlines()
    assert r.returncode == 2 and len(lines) == 1 and "optuna.db: missing" in lines[0] and "--restart" in lines[0], r.stderr
    assert _statuses(sweep_dir) == before  # nothing touched
