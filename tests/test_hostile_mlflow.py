"""MLflow around a sweep, hostile: its SQL store's own settings in the environment set to values it
cannot take, the sweep's experiment or parent run deleted in the store, and a report file named
where a lock or a sweep's own file is. Each is one line on stderr, exit code 2, no traceback, no
long wait, and nothing written: the folder is byte-identical after the refusal.

Real components only: the installed `sweeper` in a process of its own, real SQLite stores made by
MLflow, a real sweep (2 trials of 20 steps) shared by the tests that need one.
"""

from __future__ import annotations

import sqlite3
import time
from pathlib import Path

import pytest

from tests.conftest import free_port
from tests.hostile import ROOT, assert_refused, snapshot, sweeper
from tests.hostile import sweeper_watching_ray

SMOKE = ROOT / "search_spaces" / "smoke.yaml"
NAME = "hostile_mlflow"
STORE_ENV = "MLFLOW_SQLALCHEMYSTORE_"


def small_space(name: str = NAME) -> str:
    """search_spaces/smoke.yaml cut to 2 trials of 20 steps, one at a time."""
    text = SMOKE.read_text().replace("name: smoke", f"name: {name}").replace("num_samples: 6", "num_samples: 2")
    text = text.replace("max_concurrent: 2", "max_concurrent: 1").replace("max_steps: 60", "max_steps: 20")
    return text.replace("high: 60, step: 10", "high: 20, step: 10")


def mlflow_store(folder: Path) -> Path:
    """An MLflow store with one experiment, made by MLflow's client: `folder/mlflow.db`."""
    from mlflow import MlflowClient

    path = folder / "mlflow.db"
    client = MlflowClient(tracking_uri=f"sqlite:///{path}")
    exp = client.create_experiment(NAME, artifact_location=str(folder / "mlartifacts"))
    client.create_run(exp, run_name=NAME, tags={"role": "sweep", "sweep": NAME})
    return path


# --------------------------------------------------------------------------- A: the SQL store's settings

BAD_SETTINGS = [  # (variable, value, what the line says of the rule)
    ("POOL_SIZE", "abc", "must be a whole number >= 1"),
    ("POOL_SIZE", "-1", "must be a whole number >= 1"),  # SQLAlchemy's queue of -1 connections: every call waits
    ("POOL_SIZE", "", "must be a whole number >= 1"),
    ("MAX_OVERFLOW", "-5", "must be a whole number >= -1"),  # below -1: SQLAlchemy's pool recurses for ever
    ("MAX_OVERFLOW", "2.5", "must be a whole number >= -1"),
    ("POOL_RECYCLE", "soon", "must be a whole number"),
    ("ECHO", "maybe", "must be true, false, 1 or 0"),
    ("POOLCLASS", "NoSuchPool", "name one of QueuePool, SingletonThreadPool, NullPool, StaticPool"),
    ("POOLCLASS", "AsyncAdaptedQueuePool", "asyncio"),  # MLflow's drivers are synchronous
    ("POOLCLASS", "AssertionPool", "one connection at a time"),
]


def bad_setting_ids():
    return [f"{name}={value or 'empty'}" for name, value, _ in BAD_SETTINGS]


def first_in_make_test(cases: list) -> list:
    """The first case runs in `make test`, the rest of the matrix in `make test-long`."""
    return [case if i == 0 else pytest.param(*case, marks=pytest.mark.long) for i, case in enumerate(cases)]


@pytest.mark.parametrize("name, value, rule", first_in_make_test(BAD_SETTINGS), ids=bad_setting_ids())
def test_a_bad_sql_store_setting_refuses_the_launch_before_anything_is_written(tmp_path, name, value, rule):
    (tmp_path / "space.yaml").write_text(small_space())
    before = snapshot(tmp_path)
    started = time.monotonic()
    r, ray_started = sweeper_watching_ray("launch", "space.yaml", "--in-process", cwd=tmp_path,
                                          env={STORE_ENV + name: value}, timeout=90)
    line = assert_refused(r, f"${STORE_ENV}{name} '{value}'", rule, root=tmp_path, before=before)
    assert "the tracking store failed" not in line and not ray_started and r.stdout == ""
    assert time.monotonic() - started < 60


def test_sql_store_settings_that_do_not_fit_together_are_refused(tmp_path):
    """NullPool keeps no connections: SQLAlchemy refuses a pool size beside it (a TypeError in MLflow's engine)."""
    (tmp_path / "space.yaml").write_text(small_space())
    before = snapshot(tmp_path)
    r = sweeper("launch", "space.yaml", "--in-process", cwd=tmp_path,
                env={STORE_ENV + "POOLCLASS": "NullPool", STORE_ENV + "POOL_SIZE": "5"}, timeout=90)
    assert_refused(r, f"${STORE_ENV}POOL_SIZE", f"${STORE_ENV}POOLCLASS 'NullPool'", root=tmp_path, before=before)


@pytest.mark.parametrize("verb", ["report", "report-default", "ui"])
@pytest.mark.parametrize("name, value", first_in_make_test([("POOL_SIZE", "abc"), ("MAX_OVERFLOW", "-5"), ("POOLCLASS", "NoSuchPool")]))
def test_a_bad_sql_store_setting_refuses_report_and_ui_before_anything(tmp_path, verb, name, value):
    store = mlflow_store(tmp_path)
    args = {"report": ("report", NAME, "--tracking-uri", f"sqlite:///{store}", "--markdown", "report.md"),
            "report-default": ("report", NAME, "--markdown", "report.md"),  # ./mlflow.db, no sweep folder: read from the store
            "ui": ("ui", "--tracking-uri", f"sqlite:///{store}", "--port", str(free_port()))}[verb]
    if verb == "report-default":
        (tmp_path / "sweeps" / NAME).mkdir(parents=True)  # a sweep folder, so the default store is read
    before = snapshot(tmp_path)
    started = time.monotonic()
    r = sweeper(*args, cwd=tmp_path, env={STORE_ENV + name: value}, timeout=90)
    line = assert_refused(r, f"${STORE_ENV}{name} '{value}'", root=tmp_path, before=before)
    assert "not a readable MLflow store" not in line and "the tracking store failed" not in line
    assert time.monotonic() - started < 60


@pytest.mark.parametrize("settings", [
    {"POOL_SIZE": "5", "MAX_OVERFLOW": "-1", "POOL_RECYCLE": "-1", "ECHO": "FALSE"},
    {"POOL_SIZE": "0", "MAX_OVERFLOW": "0", "POOL_RECYCLE": "3600", "ECHO": "0", "POOLCLASS": ""},  # 0 and "": MLflow's unset
    {"POOLCLASS": "NullPool"}, {"POOLCLASS": "StaticPool"}, {"POOLCLASS": "SingletonThreadPool", "POOL_SIZE": "3"},
    {"POOLCLASS": "QueuePool", "POOL_SIZE": "2", "MAX_OVERFLOW": "3"},
], ids=["queue", "unset", "null", "static", "singleton", "queue-named"])
def test_sql_store_settings_mlflow_takes_pass_and_a_server_s_are_its_own(tmp_path, settings):
    from sweeper.store_settings import check_store_settings

    environ = {STORE_ENV + k: v for k, v in settings.items()}
    check_store_settings(f"sqlite:///{tmp_path / 'mlflow.db'}", environ)
    check_store_settings("postgresql://me@127.0.0.1:1/db", environ)
    check_store_settings("http://127.0.0.1:1", {STORE_ENV + "POOL_SIZE": "abc"})  # the server reads its own environment
    assert list(tmp_path.iterdir()) == []


# --------------------------------------------------------------------------- a real sweep: B, C, D


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A finished sweep of 2 trials of 20 steps in a folder of its own, logged to ./mlflow.db."""
    root = tmp_path_factory.mktemp("sweep")
    (root / "space.yaml").write_text(small_space())
    r = sweeper("launch", "space.yaml", "--in-process", cwd=root, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return root


@pytest.fixture
def store(sweep):
    """The sweep's ./mlflow.db, put back byte for byte after the test changed it."""
    path = sweep / "mlflow.db"
    good = path.read_bytes()
    yield path
    path.write_bytes(good)


def sql(path: Path, statement: str, *args) -> list:
    with sqlite3.connect(path) as db:
        return db.execute(statement, args).fetchall()


@pytest.mark.integration
def test_a_resume_whose_experiment_was_deleted_is_one_line_before_ray(sweep, store):
    sql(store, "update experiments set lifecycle_stage = 'deleted' where name = ?", NAME)
    (exp_id,) = sql(store, "select experiment_id from experiments where name = ?", NAME)[0]
    before = snapshot(sweep)
    r, ray_started = sweeper_watching_ray("launch", "space.yaml", "--in-process", cwd=sweep)
    assert_refused(r, f"experiment `{NAME}`", "deleted", f"mlflow experiments restore --experiment-id {exp_id}",
                   f"MLFLOW_TRACKING_URI=sqlite:///{store}", "--experiment", root=sweep, before=before)
    assert not ray_started and r.stdout == ""


@pytest.mark.integration
def test_a_deleted_experiment_is_found_by_the_store_check_without_a_write(sweep, store):
    from sweeper.adapters.mlflow_store import check_store
    from core.errors import ConfigError

    uri = f"sqlite:///{store}"
    check_store(uri, "the default tracking URI", NAME)  # active: passes
    check_store(uri, "the default tracking URI", "no_such_experiment")  # a new one is made by the launch
    sql(store, "update experiments set lifecycle_stage = 'deleted' where name = ?", NAME)
    before = snapshot(sweep)
    with pytest.raises(ConfigError, match=r"experiment `hostile_mlflow` .*deleted.*mlflow experiments restore"):
        check_store(uri, "the default tracking URI", NAME)
    assert snapshot(sweep) == before


@pytest.mark.integration
def test_a_launch_onto_a_server_whose_experiment_is_deleted_is_one_line_with_nothing_made(tmp_path, mlflow_server):
    from mlflow import MlflowClient

    name = f"deleted_{tmp_path.name}"[:60]
    client = MlflowClient(tracking_uri=mlflow_server)
    exp_id = client.create_experiment(name)
    client.delete_experiment(exp_id)
    (tmp_path / "space.yaml").write_text(small_space())
    before = snapshot(tmp_path)
    r = sweeper("launch", "space.yaml", "--in-process", "--tracking-uri", mlflow_server, "--experiment", name, cwd=tmp_path)
    assert_refused(r, f"experiment `{name}`", "deleted", f"MLFLOW_TRACKING_URI={mlflow_server} mlflow experiments restore "
                   f"--experiment-id {exp_id}", root=tmp_path, before=before)
    assert r.stdout == ""


@pytest.mark.integration
def test_the_tracker_refuses_an_experiment_deleted_after_the_checks_in_one_line(tmp_path):
    from sweeper.adapters.mlflow_tracking import SweepTracker
    from sweeper.space_file import load_space
    from core.errors import ConfigError

    (tmp_path / "space.yaml").write_text(small_space())
    store = mlflow_store(tmp_path)
    sql(store, "update experiments set lifecycle_stage = 'deleted' where name = ?", NAME)
    tracker = SweepTracker(f"sqlite:///{store}", load_space(tmp_path / "space.yaml"), tmp_path / "sweep")
    with pytest.raises(ConfigError, match=r"^MLflow: experiment `hostile_mlflow` is deleted .*mlflow experiments restore"):
        tracker.start(tmp_path / "space.yaml")
    assert sql(store, "select count(*) from runs")[0][0] == 1  # no run made in it


@pytest.mark.integration
@pytest.mark.parametrize("case", ["parent-run", "experiment", "other-experiment"])
def test_a_report_of_a_deleted_run_or_experiment_says_so_with_the_user_s_uri(sweep, store, case):
    (run_id,) = sql(store, "select run_uuid from runs where name = ?", NAME)[0]
    (exp_id,) = sql(store, "select experiment_id from experiments where name = ?", NAME)[0]
    args: tuple[str, ...] = ()
    if case == "parent-run":
        sql(store, "update runs set lifecycle_stage = 'deleted', deleted_time = 1 where run_uuid = ?", run_id)
        expect = ("deleted", f"mlflow runs restore --run-id {run_id}")
    elif case == "experiment":
        sql(store, "update experiments set lifecycle_stage = 'deleted' where name = ?", NAME)
        expect = ("deleted", f"mlflow experiments restore --experiment-id {exp_id}")
    else:
        args, expect = ("--experiment", "elsewhere"), ("no MLflow experiment `elsewhere`",)
    before = snapshot(sweep)
    r = sweeper("report", NAME, *args, cwd=sweep)
    line = assert_refused(r, *expect, f"sqlite:///{store}", root=sweep, before=before)
    assert "mode=ro" not in line and "pysqlite" not in line and "another folder" not in line
    assert r.stdout == ""


@pytest.mark.integration
@pytest.mark.parametrize("target", [  # one of each kind in `make test`, the rest in `make test-long`
    "mlflow.db.lock", "SERVICE/service.lock", "sweeps/NAME/report.md", "LINK/report.md",
    *(pytest.param(t, marks=pytest.mark.long) for t in ("sweeps/.NAME.lock", "notes.lock", "SERVICE/report.md",
                                                         "sweeps/NAME/space.yaml.md", "sweeps/NAME/trials/report.md")),
])
def test_a_markdown_file_in_the_place_of_a_lock_the_service_or_a_sweep_is_refused(sweep, tmp_path, target):
    service = tmp_path / "service"
    service.mkdir(mode=0o700)
    (service / "service.lock").write_bytes(b"")  # as the service leaves it: empty, a report's start to is_report
    (tmp_path / "link").symlink_to(sweep / "sweeps" / NAME)  # the sweep's folder by another name
    path = target.replace("NAME", NAME).replace("SERVICE", str(service)).replace("LINK", str(tmp_path / "link"))
    before, served = snapshot(sweep), snapshot(service)
    r = sweeper("report", NAME, "--markdown", path, cwd=sweep, env={"SWEEPER_SERVICE_DIR": str(service)})
    assert_refused(r, "--markdown", root=sweep, before=before)
    assert snapshot(service) == served and r.stdout == ""


@pytest.mark.integration
def test_a_markdown_report_beside_the_sweep_is_still_written(sweep, tmp_path):
    out = tmp_path / "report.md"
    r = sweeper("report", NAME, "--markdown", out, cwd=sweep)
    assert r.returncode == 0, r.stderr[-2000:]
    assert out.read_text().startswith(f"# Sweep `{NAME}`") and f"sqlite:///{sweep / 'mlflow.db'}" in out.read_text()


@pytest.mark.parametrize("option, blames_the_warnings", [(["error"], True), (["e::DeprecationWarning"], True),
                                                          (["ignore"], False), ([], False)])
def test_a_store_failure_under_warnings_raised_as_errors_names_them_not_the_store(monkeypatch, option, blames_the_warnings):
    import sys

    from sweeper.tracking_uri import store_failure

    monkeypatch.setattr(sys, "warnoptions", option)
    line = str(store_failure("sqlite:////tmp/mlflow.db", "--tracking-uri", RuntimeError("One or more mappers failed")))
    assert ("warnings raised as errors" in line and "PYTHONWARNINGS" in line) == blames_the_warnings, line
    assert ("move it away" in line) != blames_the_warnings, line


@pytest.mark.parametrize("verb", [("ui",), ("launch", ROOT / "search_spaces" / "smoke.yaml", "--in-process")])
def test_a_store_of_an_older_mlflow_names_its_upgrade_not_a_mend(tmp_path, verb):
    # the line said "the tracking store failed (...); mend or move it away ... (the sweep's files are kept)",
    # cut before MLflow's own `mlflow db upgrade`, and in `ui`, which has no sweep
    import mlflow

    mlflow.MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}").search_experiments()  # a store of today's schema
    with sqlite3.connect(tmp_path / "mlflow.db") as db:
        db.execute("update alembic_version set version_num = '451aebb31d03'")  # an older MLflow's revision
    before = snapshot(tmp_path)
    r = sweeper(*verb, cwd=tmp_path)
    line = assert_refused(r, "an older MLflow's", "`mlflow db upgrade sqlite:///", root=tmp_path, before=before)
    assert "mlflow.db`, and run this again" in line, line
