"""`sweeper trial` end to end in a subprocess: it trains, and bad input is one line and exit 2."""

import json
import subprocess
import sys

import pytest


def sweeper(*args, cwd=None):
    return subprocess.run([sys.executable, "-m", "sweeper.cli", *args], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_trial_trains_writes_metrics_and_resumes(tmp_path):
    out = tmp_path / "run"
    r = sweeper("trial", "tiny", "--steps", "40", "--out", str(out), "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "completed after 40 steps" in r.stdout
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [20, 40]
    # a longer budget continues from the checkpoint instead of starting over
    r = sweeper("trial", "tiny", "--steps", "60", "--out", str(out), "--resume", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert "resuming from" in r.stdout
    lines = [json.loads(x) for x in (out / "metrics.jsonl").read_text().splitlines()]
    assert [m["step"] for m in lines] == [20, 40, 60]


BAD = {
    "range.yaml": ("model:\n  n_layers: 0\n", "model.n_layers: must be greater than or equal to 1, got 0"),
    "unknown.yaml": ("modell:\n  d_model: 8\n", "modell: unknown key"),
    "syntax.yaml": ("model: [\n", "invalid YAML at line 2"),
    "choice.yaml": ("model:\n  mixer: gru\n", "model.mixer: must be 'lstm', 'ssm' or 'none', got 'gru'"),
    "cross.yaml": ("model:\n  d_model: 30\n  n_heads: 4\n", "`d_model % n_heads == 0` must hold"),
    "type.yaml": ("steps: many\n", "steps: must be a valid integer"),
    "list.yaml": ("- 1\n- 2\n", "must be a mapping"),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_config_is_one_line_and_exit_2(tmp_path, name):
    text, expected = BAD[name]
    path = tmp_path / name
    path.write_text(text)
    r = sweeper("trial", str(path), "--out", str(tmp_path / "out"))
    assert r.returncode == 2
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and str(path) in lines[0] and expected in lines[0], r.stderr
    assert "Traceback" not in r.stderr
    assert not (tmp_path / "out").exists()  # nothing half-written


def test_missing_file_and_bad_override_are_clear(tmp_path):
    r = sweeper("trial", str(tmp_path / "nope.yaml"))
    assert r.returncode == 2 and "no such file" in r.stderr
    r = sweeper("trial", "tiny", "--set", "dat.switch_step=1000")
    assert r.returncode == 2 and "dat.switch_step <= steps" in r.stderr
    r = sweeper("trial", "tiny", "--set", "nodots")
    assert r.returncode == 2 and "KEY=VALUE" in r.stderr


def test_resume_without_a_checkpoint_is_an_error_and_a_finished_run_appends_nothing(tmp_path):
    out = tmp_path / "run"
    r = sweeper("trial", "tiny", "--steps", "40", "--out", str(out), "--resume")
    assert r.returncode == 2 and "holds no checkpoint" in r.stderr and not out.exists()
    assert sweeper("trial", "tiny", "--steps", "40", "--out", str(out), "--threads", "1").returncode == 0
    before = (out / "metrics.jsonl").read_text()
    assert (out / "checkpoint").is_symlink() and (out / "checkpoint" / "state.pt").exists()
    r = sweeper("trial", "tiny", "--steps", "40", "--out", str(out), "--resume", "--threads", "1")
    assert r.returncode == 0, r.stderr
    assert (out / "metrics.jsonl").read_text() == before  # nothing appended
    assert sorted(p.name for p in out.glob("checkpoint*")) == ["checkpoint", "checkpoint-40"]


def test_a_kill_between_copy_and_swap_leaves_a_complete_checkpoint(tmp_path):
    from trainables.run_dir import RunDir

    out = tmp_path / "run"
    out.mkdir()
    for step in (10, 20):
        src = tmp_path / f"src{step}"
        src.mkdir()
        (src / "state.pt").write_text(str(step))
        RunDir(out).keep_checkpoint(str(src), step)
    assert (out / "checkpoint" / "state.pt").read_text() == "20"
    # a kill after the copy of step 30 but before the swap: the link still names step 20, complete
    (out / "checkpoint-30").mkdir()
    (out / "checkpoint-30" / "state.pt").write_text("partial")
    assert (out / "checkpoint" / "state.pt").read_text() == "20"
