"""Shared fixtures: the project root, and a `sweeper` subprocess runner."""

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
ODD_FOLDER = "odd ?#%25{x} name"  # a folder name SQLAlchemy and Optuna would misread unquoted (query, fragment, escape, format field)

# A shell without job control starts background commands (`make test &`, nohup) with SIGINT ignored,
# and every process they start inherits that: a verb the tests stop with SIGINT, as Ctrl-C would in a
# terminal, would never see it. Python's own handler here makes the children start with the default.
signal.signal(signal.SIGINT, signal.default_int_handler)

# A launch attaches to the user's sweep service when one runs (`sweeper serve`); the tests' launches
# look for theirs in a folder of their own, where none runs unless a test starts it.
if "SWEEPER_SERVICE_DIR" not in os.environ:
    import tempfile

    os.environ["SWEEPER_SERVICE_DIR"] = tempfile.mkdtemp(prefix="sweeper-test-service-")


# The longest files, started first: `make test` hands whole files to its two workers in collection
# order (`--no-loadscope-reorder`; xdist's own order, by number of tests, put test_service.py's 13
# long tests last, where they ran alone for minutes while the other worker sat idle).
RUN_FIRST = ("test_service.py", "test_damaged_resume.py", "test_device_runs.py", "test_sweep_integration.py",
             "test_hostile_env.py", "test_hostile_service.py", "faults/test_driver_signals.py", "test_bad_input.py")


def pytest_collection_modifyitems(items) -> None:
    def rank(item) -> int:
        path = item.path.as_posix()
        return next((i for i, name in enumerate(RUN_FIRST) if path.endswith(f"tests/{name}")), len(RUN_FIRST))

    items.sort(key=rank)  # stable: each file's own order is kept, and the same on every worker


def sweeper_env() -> dict[str, str]:
    """The environment of a `sweeper` subprocess in a test: this checkout importable, and no
    MLFLOW_TRACKING_URI from the caller's shell (the sweep's default store, ./mlflow.db, is used)."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    return env


def sweeper_cmd(*args: str) -> list[str]:
    return [sys.executable, "-m", "sweeper.cli", *map(str, args)]


def tiny_space(name: str, *, switch_high: int, switch_step: int, samples: int, max_steps: int | str, eval_every: int,
               scheduler: str, seed: int) -> str:
    """A space file of the smallest model, searching only the switch step: the sweep tests' workload."""
    return f"""
name: {name}
fixed:
  model: {{d_model: 16, n_layers: 1, n_heads: 2}}
  eval: {{n_sequences: 16, batch_size: 16}}
  optim: {{batch_size: 16, warmup_steps: 5}}
space:
  dat.switch_step: {{type: int, low: 0, high: {switch_high}, step: {switch_step}}}
budget: {{num_samples: {samples}, max_concurrent: 2, max_steps: {max_steps}, eval_every: {eval_every}}}
scheduler: {scheduler}
searcher: {{sampler: random, seed: {seed}}}
resources: {{cpu: 1, gpu: 0}}
"""


@pytest.fixture
def run_sweeper(tmp_path):
    """Run `sweeper ARGS` in tmp_path (so ./sweeps and ./mlflow.db land there)."""

    def run(*args, timeout=600, env=None):
        full_env = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
        return subprocess.run(sweeper_cmd(*args), cwd=tmp_path, capture_output=True, text=True, timeout=timeout, env=full_env)

    return run


def ray_left_running(sweep_dir: Path) -> list[str]:
    """The processes of the sweep's recorded local Ray (ray_processes.json) still running, as name:pid."""
    import json

    import psutil

    from sweeper.orphans import still_there

    recorded = json.loads((sweep_dir / "ray_processes.json").read_text())["processes"]
    out = []
    for proc in still_there([(p["pid"], p["started"]) for p in recorded]):
        try:
            if proc.status() != psutil.STATUS_ZOMBIE:
                out.append(f"{proc.name()}:{proc.pid}")
        except psutil.Error:
            continue
    return out


def empty_mlflow_store(folder: Path) -> Path:
    """An MLflow store with its tables and no run, `folder/mlflow.db`: what `sweeper ui` serves
    before any sweep (it never makes a store itself)."""
    import mlflow

    path = folder / "mlflow.db"
    mlflow.MlflowClient(tracking_uri=f"sqlite:///{path}").search_experiments(max_results=1)
    return path


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_mlflow_server(root: Path, backend_store_uri: str, port: int | None = None):
    """A real `mlflow server` on 127.0.0.1 with a free port (or `port`) and served artifacts; (url, process)."""
    import time
    import urllib.request

    port = port or free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(root / "server.log", "w")
    proc = subprocess.Popen([sys.executable, "-m", "mlflow", "server", "--host", "127.0.0.1", "--port", str(port),
                             "--backend-store-uri", backend_store_uri,
                             "--artifacts-destination", str(root / "artifacts"), "--workers", "1"],
                            stdout=log, stderr=subprocess.STDOUT, cwd=root)
    deadline = time.time() + 120
    while True:
        try:
            urllib.request.urlopen(f"{url}/health", timeout=2)
            return url, proc
        except OSError:
            if proc.poll() is not None or time.time() > deadline:
                proc.kill()
                raise RuntimeError("mlflow server did not start: " + (root / "server.log").read_text()[-2000:])
            time.sleep(0.5)


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=20)
    except subprocess.TimeoutExpired:
        proc.kill()


@pytest.fixture(scope="session")
def mlflow_server(tmp_path_factory):
    """A real `mlflow server` on 127.0.0.1 with a free port, SQLite backend, served artifacts."""
    root = tmp_path_factory.mktemp("mlflow-server")
    url, proc = start_mlflow_server(root, f"sqlite:///{root / 'mlflow.db'}")
    yield url
    stop(proc)


def postgres_bin() -> Path | None:
    """Debian's PostgreSQL server binaries (initdb, pg_ctl), if installed."""
    import glob

    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"), key=lambda p: int(Path(p).parts[-3]))
    return Path(found[-1]).parent if found else None


@pytest.fixture(scope="session")
def postgres_url():
    """A throwaway PostgreSQL server on 127.0.0.1 (its own data directory, trust auth, no fsync)
    with an empty `mlflow` database; skipped where Debian's postgresql is not installed."""
    import shutil
    import tempfile

    bin_dir = postgres_bin()
    if bin_dir is None:
        pytest.skip("PostgreSQL is not installed (make test installs Debian's postgresql when run as root)")
    root = Path(tempfile.mkdtemp(prefix="sweeper-pg-"))  # under /tmp: the server's user must reach it
    as_user: list[str] = []
    if os.geteuid() == 0:  # initdb refuses to run as root: the package's `postgres` user runs the server
        shutil.chown(root, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]
    port = free_port()
    data = root / "data"
    run = lambda *cmd: subprocess.run([*as_user, *map(str, cmd)], capture_output=True, text=True, timeout=120, check=True)  # noqa: E731
    try:
        run(bin_dir / "initdb", "-D", data, "-U", "postgres", "-A", "trust", "-E", "UTF8", "--no-sync")
        run(bin_dir / "pg_ctl", "-D", data, "-l", root / "server.log", "-w", "-o",
            f"-p {port} -k {root} -c listen_addresses=127.0.0.1 -c fsync=off", "start")
        run(bin_dir / "createdb", "-h", "127.0.0.1", "-p", port, "-U", "postgres", "mlflow")
    except subprocess.CalledProcessError as err:
        shutil.rmtree(root, ignore_errors=True)
        raise RuntimeError(f"PostgreSQL did not start: {err.stderr[-2000:]}") from None
    yield f"postgresql://postgres@127.0.0.1:{port}/mlflow"
    subprocess.run([*as_user, str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop"], capture_output=True, timeout=60)
    shutil.rmtree(root, ignore_errors=True)


@pytest.fixture(scope="session")
def mlflow_postgres_server(tmp_path_factory, postgres_url):
    """A real `mlflow server` whose backend store is the PostgreSQL server above (as on the cluster)."""
    root = tmp_path_factory.mktemp("mlflow-pg")
    url, proc = start_mlflow_server(root, postgres_url)
    yield url
    stop(proc)


# credentials a user may have in the environment; the smoke sweep runs with them set, and
# tests/test_exposure.py checks that none of them reaches a file, a parameter or a tag
SECRET_CANARIES = {
    "MLFLOW_TRACKING_PASSWORD": "canary-mlflow-password-5f1c2e",
    "AWS_SECRET_ACCESS_KEY": "canary-aws-secret-9b7d4a",
    "AWS_ACCESS_KEY_ID": "canary-aws-key-id-31e8f0",
    "RAY_AUTH_TOKEN": "canary-ray-token-c0ffee",
    "HF_TOKEN": "canary-hf-token-77aa01",
}


@pytest.fixture(scope="session")
def smoke_sweep(tmp_path_factory, mlflow_server):
    """search_spaces/smoke.yaml run once through `sweeper launch`, logging to the real MLflow server,
    with credential canaries in its environment."""
    workdir = tmp_path_factory.mktemp("smoke") / ODD_FOLDER  # every verb on it meets a name a URL would misread
    workdir.mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), **SECRET_CANARIES}
    cmd = sweeper_cmd("launch", ROOT / "search_spaces" / "smoke.yaml", "--tracking-uri", mlflow_server)
    r = subprocess.run(cmd, cwd=workdir, env=env, capture_output=True, text=True, timeout=900)
    assert r.returncode == 0, r.stdout[-3000:] + r.stderr[-3000:]
    return workdir, r
