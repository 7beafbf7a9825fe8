"""`sweeper report`: parameters typed from the sweep's space file, stores read without a write
(an empty one is one line, exit 2, and stays byte-identical), `--markdown` checked first.

The MLflow store is a real one (SQLite, made with MLflow's client the way a sweep's mirror
tags its runs); the report runs as the real CLI."""

from __future__ import annotations

import hashlib
import os
import subprocess

import pytest

from sweeper.commands.report import parameter_effects, space_kinds
from sweeper.space_file import load_space
from tests.conftest import ROOT, sweeper_cmd, sweeper_env

SPACE = (ROOT / "search_spaces" / "smoke.yaml").read_text().replace("n_layers: 1, ", "").replace(
    "  optim.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}",
    "  optim.lr: {type: float, low: 1.0e-3, high: 1.0e-2, log: true}\n"
    "  model.n_layers: {type: int, low: 1, high: 4}\n"
    "  model.mixer: {type: categorical, choices: [lstm, ssm]}")
# (n_layers, mixer, switch_step, lr, acc_3x): n_layers takes two of its four values, the mixer both
TRIALS = [(1, "lstm", 0, 0.002, 0.31), (2, "ssm", 10, 0.004, 0.52), (1, "ssm", 20, 0.003, 0.40), (2, "lstm", 30, 0.006, 0.61)]


def digest(path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def sweeper(cwd, *args) -> subprocess.CompletedProcess:
    return subprocess.run(sweeper_cmd(*args), cwd=cwd, env=sweeper_env(), capture_output=True, text=True, timeout=300)


def make_sweep(root):
    """A sweep folder with its space file, and an MLflow store holding its parent run and trials."""
    from mlflow import MlflowClient

    sweep = root / "sweeps" / "smoke"
    sweep.mkdir(parents=True)
    (sweep / "space.yaml").write_text(SPACE)
    uri = f"sqlite:///{root / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    exp = client.create_experiment("smoke", artifact_location=str(root / "artifacts"))
    parent = client.create_run(exp, run_name="smoke", tags={"role": "sweep", "sweep": "smoke", "metric": "acc_3x", "mode": "max"})
    searched = "dat.switch_step,model.mixer,model.n_layers,optim.lr"
    for i, (layers, mixer, switch, lr, acc) in enumerate(TRIALS):
        run = client.create_run(exp, run_name=f"t{i:04d}", tags={
            "mlflow.parentRunId": parent.info.run_id, "trial_id": f"t{i:04d}", "status": "completed",
            "best": str(acc == 0.61).lower(), "searched": searched})
        for key, value in {"model.n_layers": layers, "model.mixer": mixer, "dat.switch_step": switch, "optim.lr": lr}.items():
            client.log_param(run.info.run_id, key, value)
        for k, value in {"acc_1x": 0.9, "acc_2x": 0.7, "acc_3x": acc, "acc_4x": 0.2, "step": 60}.items():
            client.log_metric(run.info.run_id, k, value)
        client.set_terminated(run.info.run_id)
    return sweep, uri


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    root = tmp_path_factory.mktemp("report")
    return root, *make_sweep(root)


def test_an_int_parameter_with_two_values_tried_is_numeric():
    spec = load_space_text(SPACE)
    ranges, kinds = space_kinds(spec)
    assert kinds == {"dat.switch_step": "numeric", "optim.lr": "numeric", "model.n_layers": "numeric", "model.mixer": "categorical"}
    runs = [{"searched": ["model.n_layers"], "params": {"model.n_layers": str(n)}, "metrics": {"acc_3x": a}}
            for n, *_, a in TRIALS]
    (row,) = parameter_effects(runs, "acc_3x", "max", ranges, kinds)
    assert row.startswith("| `model.n_layers` | numeric | Spearman +0.89 | best 2 |")  # two values, still a number
    assert "edge" not in row  # 2 lies inside [1, 4]
    (guess,) = parameter_effects(runs, "acc_3x", "max", {}, None)  # no space file: numbers are numeric too
    assert "| numeric |" in guess


def load_space_text(text):
    import tempfile
    from pathlib import Path

    with tempfile.TemporaryDirectory() as d:
        path = Path(d) / "space.yaml"
        path.write_text(text)
        return load_space(path, n_samples=0)


def test_report_types_parameters_from_the_space_and_leaves_the_stores_as_they_were(sweep):
    root, sweep_dir, uri = sweep
    before = digest(root / "mlflow.db")
    r = sweeper(root, "report", "smoke", "--tracking-uri", uri, "--markdown", root / "report.md")
    assert r.returncode == 0, r.stderr
    assert "| `model.n_layers` | numeric |" in r.stdout and "| `model.mixer` | categorical |" in r.stdout
    assert "| `dat.switch_step` | numeric |" in r.stdout and "t0003 (best)" in r.stdout
    assert (root / "report.md").read_text() in r.stdout
    assert digest(root / "mlflow.db") == before  # read only
    assert sorted(p.name for p in root.iterdir()) == ["mlflow.db", "report.md", "sweeps"]  # nothing else made


@pytest.mark.parametrize("store", ["optuna.db", "mlflow.db"])
def test_an_empty_store_is_one_line_exit_2_and_stays_byte_identical(tmp_path, store):
    sweep_dir = tmp_path / "sweeps" / "smoke"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "space.yaml").write_text(SPACE)
    empty = (sweep_dir / "optuna.db") if store == "optuna.db" else (tmp_path / "mlflow.db")
    empty.write_bytes(b"")
    r = sweeper(tmp_path, "report", "smoke", "--tracking-uri", f"sqlite:///{tmp_path / 'mlflow.db'}")
    assert r.returncode == 2 and r.stdout == ""
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr, r.stderr
    assert str(empty.name) in r.stderr
    assert empty.read_bytes() == b""  # no tables were made
    assert not (tmp_path / "mlflow.db").exists() or (tmp_path / "mlflow.db").read_bytes() == b""


def test_a_damaged_mlflow_store_is_one_line_and_stays_byte_identical(tmp_path):
    sweep_dir = tmp_path / "sweeps" / "smoke"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "space.yaml").write_text(SPACE)
    damaged = tmp_path / "mlflow.db"
    damaged.write_bytes(os.urandom(4096))
    before = digest(damaged)
    r = sweeper(tmp_path, "report", "smoke", "--tracking-uri", f"sqlite:///{damaged}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1 and "not a readable MLflow store" in r.stderr, r.stderr
    assert digest(damaged) == before


def test_a_store_missing_a_table_of_mlflow_s_schema_is_said_so_not_called_read_only(tmp_path):
    import sqlite3

    sweep_dir = tmp_path / "sweeps" / "smoke"
    sweep_dir.mkdir(parents=True)
    (sweep_dir / "space.yaml").write_text(SPACE)
    store = tmp_path / "mlflow.db"
    import mlflow

    mlflow.MlflowClient(f"sqlite:///{store}").search_experiments()  # a real store, then a table of it dropped
    with sqlite3.connect(store) as db:
        db.execute("drop table metrics")
    before = digest(store)
    r = sweeper(tmp_path, "report", "smoke", "--tracking-uri", f"sqlite:///{store}")
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert "tables of MLflow's schema are missing" in r.stderr and "readonly" not in r.stderr, r.stderr
    assert digest(store) == before


@pytest.mark.parametrize("target, rule", [
    ("{tmp}", "is a folder"),
    ("{tmp}/no/such/folder/report.md", "does not exist"),
    ("/proc/self/comm", "under /proc"),
    ("/proc/report.md", "under /proc"),
])
def test_markdown_is_checked_before_any_work_or_printing(tmp_path, target, rule):
    # the sweep does not exist either: the --markdown error comes first, and nothing is printed
    r = sweeper(tmp_path, "report", "no_such_sweep", "--markdown", target.format(tmp=tmp_path))
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.startswith("error: --markdown ") and rule in r.stderr and len(r.stderr.splitlines()) == 1, r.stderr


def test_markdown_in_a_read_only_folder_is_refused_first(tmp_path):
    if os.geteuid() == 0:
        pytest.skip("root writes into read-only folders")
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        r = sweeper(tmp_path, "report", "no_such_sweep", "--markdown", folder / "report.md")
    finally:
        folder.chmod(0o700)
    assert r.returncode == 2 and r.stdout == "" and "--markdown" in r.stderr


def test_report_reads_the_store_the_sweep_logged_to_whose_password_the_study_does_not_keep(tmp_path):
    from sweeper.commands.report import report_uri
    from core.errors import ConfigError

    study = tmp_path / "optuna.db"
    kept = "postgresql://me:***@db:5432/mlflow"
    assert report_uri("http://other:5000", kept, "sqlite:///mlflow.db", study) == "http://other:5000"
    assert report_uri(None, "http://mlflow:5000", "sqlite:///mlflow.db", study) == "http://mlflow:5000"
    assert report_uri(None, kept, "postgresql://me:s3cret@db:5432/mlflow", study) == "postgresql://me:s3cret@db:5432/mlflow"
    with pytest.raises(ConfigError, match=r"whose password is not kept; pass --tracking-uri") as err:
        report_uri(None, kept, "sqlite:///mlflow.db", study)
    assert "s3cret" not in str(err.value)


def test_two_trials_or_one_value_tried_show_no_effect_rather_than_a_meaningless_one():
    spec = load_space_text(SPACE)
    ranges, kinds = space_kinds(spec)
    two = [{"searched": ["dat.switch_step"], "params": {"dat.switch_step": str(v)}, "metrics": {"acc_3x": a}}
           for v, a in ((0, 0.4), (500, 0.6))]  # e.g. a sweep's two baseline points
    (row,) = parameter_effects(two, "acc_3x", "max", ranges, kinds)
    assert "too few trials to say (2 scored, 2 values" in row and "Spearman" not in row and "edge" not in row
    same = [{"searched": ["model.mixer"], "params": {"model.mixer": "lstm"}, "metrics": {"acc_3x": a}} for a in (0.1, 0.2, 0.3)]
    (row,) = parameter_effects(same, "acc_3x", "max", ranges, kinds)
    assert "too few trials to say (3 scored, 1 value;" in row


@pytest.mark.parametrize("change", ["PRAGMA journal_mode=WAL", "DROP TABLE trial_values", "garbage -wal",
                                    "garbage -wal beside a rollback journal"])
def test_a_study_in_wal_mode_or_missing_a_table_is_read_and_nothing_is_left_beside_it(tmp_path, change):
    """A study in WAL mode is read (SQLite would leave -wal and -shm files beside a read-only
    reader), also with a -wal file that is not a log beside it; one missing a table is our one
    line, without Optuna's SQL before it."""
    import sqlite3

    import optuna

    sweep_dir, uri = make_sweep(tmp_path)
    study = optuna.create_study(study_name="smoke", storage=f"sqlite:///{sweep_dir / 'optuna.db'}", direction="maximize")
    study.set_user_attr("sweeper.format", 2)  # a sweep's study: a report reads no other
    lr = optuna.distributions.FloatDistribution(1e-3, 1e-2, log=True)
    for *_, rate, acc in TRIALS:
        study.add_trial(optuna.trial.create_trial(params={"optim.lr": rate}, distributions={"optim.lr": lr}, value=acc))
    db = sqlite3.connect(sweep_dir / "optuna.db")
    db.execute("PRAGMA journal_mode=WAL" if change == "garbage -wal" else
               "PRAGMA journal_mode=DELETE" if change.startswith("garbage") else change)
    db.close()
    if change.startswith("garbage -wal"):
        (sweep_dir / "optuna.db-wal").write_bytes(b"not a write-ahead log\n" * 100)
    before = {p.name: digest(p) for p in sweep_dir.iterdir() if p.is_file()}
    r = sweeper(tmp_path, "report", "smoke", "--tracking-uri", uri)
    assert {p.name: digest(p) for p in sweep_dir.iterdir() if p.is_file()} == before
    if change.startswith("DROP"):
        assert r.returncode == 2 and r.stdout == "" and len(r.stderr.strip().splitlines()) == 1, r.stderr
        assert "optuna.db: not a readable Optuna study" in r.stderr
    else:
        assert r.returncode == 0 and "## Parameter importance" in r.stdout and r.stderr == "", r.stderr


def test_warnings_raised_as_errors_are_named_rather_than_the_sound_store_blamed(sweep):
    root, sweep_dir, uri = sweep
    before = digest(root / "mlflow.db")
    r = subprocess.run(sweeper_cmd("report", "smoke", "--tracking-uri", uri), cwd=root,
                       env={**sweeper_env(), "PYTHONWARNINGS": "error"}, capture_output=True, text=True, timeout=300)
    line = r.stderr.strip()  # the pinned MLflow's SQLAlchemy warns as it reads (a deprecation): raised, it fails the read
    assert r.returncode == 2 and "\n" not in line and "Traceback" not in r.stderr, r.stderr[-2000:]
    assert "warnings raised as errors" in line and "PYTHONWARNINGS" in line, line
    assert "not a readable MLflow store" not in line and "move it away" not in line, line
    assert digest(root / "mlflow.db") == before


def test_a_report_whose_stdout_reader_is_gone_still_writes_its_markdown(sweep, tmp_path):
    """`sweeper report NAME --markdown r.md | true`: the file is written before anything is shown, so a
    reader that left (stdout a pipe with no reader) costs the terminal's copy only."""
    root, sweep_dir, uri = sweep
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    try:
        r = subprocess.run(sweeper_cmd("report", "smoke", "--tracking-uri", uri, "--markdown", tmp_path / "r.md"), cwd=root,
                           env=sweeper_env(), stdout=write_end, stderr=subprocess.PIPE, text=True, timeout=300)
    finally:
        os.close(write_end)
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "t0003 (best)" in (tmp_path / "r.md").read_text()
