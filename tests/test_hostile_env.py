"""A hostile environment around `sweeper launch` and `sweeper status`: a tracking store or a Ray
cluster that is not there, not what it claims, or damaged, and state files that are huge, deep or
name a process that is no longer the driver. Each costs one line on stderr and exit code 2 in a
bounded time, and nothing of the sweep is lost or written; `status` never claims a dead driver runs.

Real components only: the installed `sweeper`, real HTTP and TCP servers, real SQLite files, a real
sweep (2 trials of 20 steps) whose files are checked byte for byte.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import free_port, sweeper_cmd
from tests.hostile import ROOT, SWEEPER, assert_refused, snapshot, sweeper
from tests.hostile import sweeper_watching_ray as run

SMOKE = ROOT / "search_spaces" / "smoke.yaml"
PASSWORD = "pw-canary-7d1e"


def refused_before_ray(tmp_path: Path, *args, expect: tuple[str, ...], env: dict | None = None) -> str:
    """`sweeper ARGS` in an empty folder: one line, exit 2, no Ray node started, nothing printed on
    stdout (the plan line comes before Ray starts) and nothing written."""
    before = snapshot(tmp_path)
    r, ray_started = run(*args, cwd=tmp_path, env=env)
    line = assert_refused(r, *expect, root=tmp_path, before=before)
    assert r.stdout == "" and not ray_started, r.stdout[-500:]
    return line


# --------------------------------------------------------------------------- tracking stores


@pytest.mark.parametrize("scheme", ["postgresql", "postgresql+psycopg"])
def test_a_database_where_nothing_listens_is_one_line_without_its_password(tmp_path, scheme):
    uri = f"{scheme}://sweeper:{PASSWORD}@127.0.0.1:{free_port()}/mlflow"
    line = refused_before_ray(tmp_path, "launch", SMOKE, "--tracking-uri", uri,
                              expect=("--tracking-uri", "cannot connect to the tracking database", ":***@"))
    assert PASSWORD not in line  # MLflow retries it for minutes, then fails with a traceback


def test_a_database_password_is_not_shown_from_the_environment_either(tmp_path):
    uri = f"postgresql://sweeper:{PASSWORD}@127.0.0.1:{free_port()}/mlflow"
    line = refused_before_ray(tmp_path, "launch", SMOKE, env={"MLFLOW_TRACKING_URI": uri},
                              expect=("$MLFLOW_TRACKING_URI", "cannot connect"))
    assert PASSWORD not in line


@pytest.mark.parametrize("where", ["flag", "environment"])
def test_a_tracking_uri_with_a_byte_that_is_not_utf8_is_named_so_not_a_control_character(tmp_path, where):
    uri = "sqlite:///" + str(tmp_path) + "/\udcff.db"
    args, env = (["--tracking-uri", uri], {"LC_ALL": "C.UTF-8"}) if where == "flag" else \
        ([], {"MLFLOW_TRACKING_URI": uri, "LC_ALL": "C.UTF-8"})
    before = snapshot(tmp_path)
    for verb in (["ui"], ["launch", str(ROOT / "search_spaces" / "smoke.yaml"), "--in-process"]):
        r = sweeper(*verb, *args, cwd=tmp_path, env=env)
        assert_refused(r, "a byte that is not UTF-8", root=tmp_path, before=before)


@pytest.mark.parametrize("home", ["rel/home", ""])
@pytest.mark.parametrize("verb", [["launch", str(ROOT / "search_spaces" / "smoke.yaml"), "--in-process"], ["serve", "--status"]])
def test_a_relative_home_is_one_line_before_anything_is_written_under_the_working_folder(tmp_path, home, verb):
    """The signing key of Ray records, Ray's token and MLflow's settings went under ./rel/home."""
    before = snapshot(tmp_path)
    r = sweeper(*verb, cwd=tmp_path, env={"HOME": home})
    assert_refused(r, "$HOME", "not an absolute path", root=tmp_path, before=before)


@pytest.mark.parametrize("under", [False, True])
def test_a_home_that_is_a_file_is_one_line_for_every_verb(tmp_path, under):
    """`report` went on with matplotlib's two-line warning about its config folder under it."""
    (tmp_path / "afile").write_text("x\n")
    home = str(tmp_path / "afile" / "sub") if under else str(tmp_path / "afile")
    before = snapshot(tmp_path)
    for verb in (["report", "s"], ["status"], ["launch", str(ROOT / "search_spaces" / "smoke.yaml"), "--in-process"]):
        assert_refused(sweeper(*verb, cwd=tmp_path, env={"HOME": home}), "$HOME", "a file, or under one",
                       root=tmp_path, before=before)


@pytest.mark.parametrize("variable", ["SWEEPER_SERVICE_DIR", "RAY_TMPDIR", "TMPDIR", "XDG_STATE_HOME"])
def test_a_folder_variable_with_a_control_character_is_one_line_before_its_folder_is_made(tmp_path, variable):
    # `$XDG_STATE_HOME` or `$RAY_TMPDIR` holding \x01 made folders of that name; the service's was passed by silently
    folder = tmp_path / "a\x01b"
    before = snapshot(tmp_path)
    r = sweeper("launch", SMOKE, cwd=tmp_path, env={variable: str(folder)})  # RAY_TMPDIR as given, not a watcher's
    assert_refused(r, f"${variable}", "control character", root=tmp_path, before=before)
    assert r.stdout == "" and not folder.exists()


@pytest.mark.parametrize("uri", ["sqlite:///{tmp}/x\ny.db", "http://127.0.0.1:5000/\x1b[2J"], ids=["newline", "escape"])
def test_a_tracking_uri_with_a_control_character_from_the_environment_is_one_line_as_from_the_flag(tmp_path, uri):
    # the store (`x<newline>y.db`) would be made in tmp_path: refused_before_ray sees nothing written
    refused_before_ray(tmp_path, "launch", SMOKE, env={"MLFLOW_TRACKING_URI": uri.format(tmp=tmp_path)},
                       expect=("$MLFLOW_TRACKING_URI", "control character"))


REFUSED = 'connection to server at "127.0.0.1", port 5 failed: Connection refused'


@pytest.mark.parametrize("password, error, shown", [
    ("e", REFUSED, REFUSED),  # a one-letter password is no token of it: its words stay whole
    ("e", "authentication failed for user sweeper (password e)", "authentication failed for user sweeper (password ***)"),
    ("longsecret", "login longsecretX refused", "login ***X refused"),  # a long one is hidden anywhere
    ("p%40ss", "authentication failed: p@ss", "authentication failed: ***"),  # as the driver saw it, unquoted
])
def test_an_error_keeps_its_words_and_loses_the_password(password, error, shown):
    from sweeper.tracking_uri import reason

    assert reason(RuntimeError(error), f"postgresql://sweeper:{password}@127.0.0.1:5/mlflow") == shown


@pytest.mark.parametrize("uri, shown", [
    (f"postgresql://127.0.0.1:5/mlflow?sslmode=require&password={PASSWORD}", "postgresql://127.0.0.1:5/mlflow?sslmode=require&password=***"),
    (f"http://127.0.0.1:5/?token={PASSWORD}&x=1", "http://127.0.0.1:5/?token=***&x=1"),
    (f"ray://user:{PASSWORD}@127.0.0.1:10001", "ray://user:***@127.0.0.1:10001"),
    (f"user:{PASSWORD}@127.0.0.1:6379", "user:***@127.0.0.1:6379"),  # an address written without a scheme
    (f"http://127.0.0.1:5/#token={PASSWORD}", "http://127.0.0.1:5/#token=***"),  # in the fragment
    (f"http://bob:{PASSWORD}@[::1", "http://bob:***@[::1"),  # a URI urllib cannot split
    ("sqlite:////tmp/a b/mlflow.db?mode=ro", "sqlite:////tmp/a b/mlflow.db?mode=ro"),
    (f"https://{PASSWORD}@github.com/a@b", "https://***@github.com/a@b"),  # a token as the whole user part
    (f"{PASSWORD}@127.0.0.1:6379", "***@127.0.0.1:6379"),
    (f"http://127.0.0.1:5/;jsessionid={PASSWORD}", "http://127.0.0.1:5/;jsessionid=***"),  # a path parameter
])
def test_a_secret_in_a_query_or_an_address_is_hidden_too(uri, shown):
    from core.uri_secrets import hide_password, reason

    assert hide_password(uri) == shown
    if PASSWORD in uri:
        assert reason(RuntimeError(f"refused for {PASSWORD}"), uri) == "refused for ***"


def test_a_ray_address_with_a_password_is_refused_without_it(tmp_path):
    line = refused_before_ray(tmp_path, "launch", SMOKE, "--address", f"ray://u:{PASSWORD}@127.0.0.1:{free_port()}",
                              expect=("--address", "not a Ray address"))
    assert PASSWORD not in line and ":***@" in line
    r = sweeper("job", "status", "raysubmit_x", cwd=tmp_path,
                env={"RAY_ADDRESS": f"http://u:{PASSWORD}@127.0.0.1:{free_port()}"})
    assert r.returncode == 2 and PASSWORD not in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert r.stderr.startswith("error: RAY_ADDRESS http://u:***@"), r.stderr  # named as the user gave it


@pytest.mark.parametrize("config", ["fifo", "/dev/zero", "folder"])
def test_a_databricks_config_that_is_no_regular_file_is_one_line_never_a_hang(tmp_path, config):
    if config == "fifo":
        os.mkfifo(tmp_path / "fifo")  # read whole, it would block for ever; /dev/zero would fill the memory
    path = {"fifo": str(tmp_path / "fifo"), "folder": str(tmp_path)}.get(config, config)
    r = sweeper("ui", "--tracking-uri", "databricks", cwd=tmp_path, timeout=60,
                env={"DATABRICKS_CONFIG_FILE": path, "DATABRICKS_HOST": ""})
    assert r.returncode == 2 and r.stdout == "" and "Traceback" not in r.stderr, r.stderr[-500:]
    (line,) = r.stderr.strip().splitlines()
    assert "$DATABRICKS_CONFIG_FILE" in line and ("not a regular file" in line or "is a folder" in line), line


@pytest.fixture
def web_server(tmp_path_factory):
    """`python -m http.server` on a free port, serving a folder of the test's; yields (url, folder)."""
    folder = tmp_path_factory.mktemp("served")
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1"], cwd=folder,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "http.server did not start"
                time.sleep(0.2)
        yield f"http://127.0.0.1:{port}", folder
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.mark.parametrize("health, expect", [
    (None, "HTTP 404 on /health"),  # no such path
    ("folder", "'<!DOCTYPE"),  # a redirect to a directory listing
    ("file", "'hello"),  # 200, but not MLflow's answer
    ("ok", "HTTP 404 on its REST API"),  # /health says OK, as many web servers' do, but no MLflow behind it
])
def test_a_web_server_that_is_not_mlflow_is_one_line(tmp_path, web_server, health, expect):
    url, served = web_server
    if health == "folder":
        (served / "health").mkdir()
    elif health == "file":
        (served / "health").write_text("hello\n")
    elif health == "ok":
        (served / "health").write_text("OK")
    refused_before_ray(tmp_path, "launch", SMOKE, "--tracking-uri", url,
                       expect=("--tracking-uri", url, "not an MLflow tracking server", expect))


@pytest.mark.parametrize("answers", ["search", "search-and-get-by-name"])
def test_a_server_that_only_looks_like_mlflow_leaves_no_claim_on_the_sweep_s_store(tmp_path, web_server, answers):
    # /health says OK and the searches the checks make answer JSON, as MLflow's would; every other call fails
    url, served = web_server
    (served / "health").write_text("OK")
    api = served / "api" / "2.0" / "mlflow" / "experiments"
    api.mkdir(parents=True)
    (api / "search").write_text('{"experiments": []}')
    if answers == "search-and-get-by-name":  # the experiment's check passes: the launch fails later, at the run's start
        (api / "get-by-name").write_text("{}")
    r = sweeper("launch", SMOKE, "--tracking-uri", url, "--in-process", cwd=tmp_path, timeout=300)
    assert r.returncode == 2 and "Traceback" not in r.stderr, r.stderr[-800:]
    assert "the tracking store failed" in r.stderr.strip().splitlines()[-1]
    sweep_dir = tmp_path / "sweeps" / "smoke"
    if answers == "search":  # refused by the checks: nothing made
        assert not sweep_dir.exists()
        return
    from sweeper.space_file import load_space
    from sweeper.sweep_checks import check_resume

    # the sweep's files are kept, and its next launch may name a store that works: no run of it is in that server
    check_resume(sweep_dir, load_space(SMOKE), f"sqlite:///{tmp_path}/mlflow.db", "--tracking-uri")


@pytest.mark.integration
def test_a_real_mlflow_server_passes_the_check(mlflow_server):
    from sweeper.tracking_uri import preflight

    preflight(mlflow_server)  # its /health answers OK, its REST API with JSON


def test_a_blank_tracking_uri_in_the_environment_is_one_line_on_stderr_for_the_ui(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "MLFLOW_TRACKING_URI": " "}
    r = subprocess.run(sweeper_cmd("ui", "--port", str(free_port())), cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and r.stdout == "", r.stdout
    assert r.stderr.count("\n") == 1 and "$MLFLOW_TRACKING_URI" in r.stderr and "blank" in r.stderr
    assert list(tmp_path.iterdir()) == []  # nothing made


# --------------------------------------------------------------------------- Ray addresses


@pytest.mark.parametrize("address, expect", [
    ("not a url", "not a Ray address"),
    ("local", "not a Ray address"),  # a private instance is what no --address gives
    ("127.0.0.1:99999", "not a Ray address"),
    ("ray://127.0.0.1:{port}", "nothing answers at 127.0.0.1:{port}"),
    ("127.0.0.1:{port}", "nothing answers at 127.0.0.1:{port}"),
])
def test_an_address_that_is_bad_or_where_nothing_listens_is_one_line(tmp_path, address, expect):
    port = free_port()  # nothing listens there
    address, expect = address.format(port=port), expect.format(port=port)
    refused_before_ray(tmp_path, "launch", SMOKE, "--address", address, expect=("--address", expect))


def _alone() -> list[str]:
    """A prefix that runs a command in PID and mount namespaces of its own, with an empty /tmp/ray:
    no Ray of another user or test can be seen (`auto` finds Ray's processes and files there)."""
    prefix = ["unshare", "--pid", "--fork", "--mount-proc", "--mount"]
    if subprocess.run([*prefix, "true"], capture_output=True).returncode != 0:
        pytest.skip("cannot make PID and mount namespaces here (needs root)")
    return [*prefix, "sh", "-c", 'mkdir -p /tmp/ray && mount -t tmpfs tmpfs /tmp/ray && exec "$0" "$@"']


def test_auto_with_no_ray_cluster_is_one_line(tmp_path):
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    before = snapshot(tmp_path)
    r = subprocess.run([*_alone(), str(SWEEPER), "launch", str(SMOKE), "--address", "auto"], cwd=tmp_path, env=env,
                       capture_output=True, text=True, timeout=200)
    assert_refused(r, "--address auto", "cannot join the Ray cluster", "Could not find any running Ray", root=tmp_path, before=before)
    assert r.stdout == ""



@pytest.mark.integration
@pytest.mark.serial  # `auto` would see the Ray of another test
@pytest.mark.parametrize("owner, named", [("", "pid "), ("sweeper.service_host", "the sweep service's")])
def test_auto_that_finds_only_another_drivers_own_ray_is_one_line(tmp_path, owner, named):
    """`auto` finds any Ray on the machine. The private Ray of another process (its `ray.init()`; another
    sweep's driver, or the sweep service, named by its command line) is not a cluster to join: refused in
    one line, before the join, nothing written; the service is named as such, never by a pid to signal."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    sweep_dir, driver_dir = tmp_path / "sweep", tmp_path / "driver"
    sweep_dir.mkdir()
    driver_dir.mkdir()
    before = snapshot(sweep_dir)
    driver = (f"cd {driver_dir} && {sys.executable} -c 'import ray, time; ray.init(include_dashboard=False); "
              f"open(\"up\", \"w\").close(); time.sleep(900)' {owner} > log 2>&1 & pid=$!; "
              f"for i in $(seq 900); do [ -e {driver_dir}/up ] && break; sleep 0.2; done; "
              f"{SWEEPER} launch {SMOKE} --address auto; code=$?; kill $pid; exit $code")
    r = subprocess.run([*_alone(), "sh", "-c", driver], cwd=sweep_dir, env=env, capture_output=True, text=True, timeout=600)
    assert (driver_dir / "up").exists(), r.stderr[-2000:]
    assert_refused(r, "--address auto", "another process's own", "ray start --head", named, root=sweep_dir, before=before)


@pytest.fixture
def silent_port():
    """A TCP port that accepts connections and never says a word (a Ray cluster that never answers)."""
    with socket.socket() as server:
        server.bind(("127.0.0.1", 0))
        server.listen(64)
        yield server.getsockname()[1]


@pytest.mark.integration
@pytest.mark.long  # waits out the join's bound (60 s): `make test-long`
def test_a_cluster_that_never_answers_is_one_line_when_the_join_times_out(tmp_path, silent_port):
    from sweeper.adapters.ray_tune import JOIN_TIMEOUT_S

    line = refused_before_ray(tmp_path, "launch", SMOKE, "--address", f"127.0.0.1:{silent_port}",
                              expect=("--address", f"within {JOIN_TIMEOUT_S:.0f} s"))
    assert "gcs" not in line.lower()  # Ray's own retry lines were kept aside


# --------------------------------------------------------------------------- a real sweep's stores and views

NAME = "hostile_env"


@pytest.fixture(scope="module")
def sweep(tmp_path_factory):
    """A finished sweep of 2 trials of 20 steps in a folder of its own, logged to ./mlflow.db."""
    root = tmp_path_factory.mktemp("sweep")
    text = SMOKE.read_text().replace("name: smoke", f"name: {NAME}").replace("num_samples: 6", "num_samples: 2")
    text = text.replace("max_steps: 60", "max_steps: 20").replace("high: 60, step: 10", "high: 20, step: 10")
    (root / "space.yaml").write_text(text)
    r = sweeper("launch", "space.yaml", cwd=root, timeout=900)
    assert r.returncode == 0, r.stdout[-2000:] + r.stderr[-2000:]
    return root


def _kept(root: Path) -> dict:
    """What a refusal must leave as it was: the study and every trial's folder."""
    sweep_dir = root / "sweeps" / NAME
    return {"optuna.db": snapshot(sweep_dir)["optuna.db"], **snapshot(sweep_dir / "trials")}


@pytest.fixture
def damaged(sweep):
    """damage(path, how) replaces a store by damaged bytes; every file it touched is put back after."""
    saved: dict[Path, bytes | None] = {}

    def damage(path: Path, how: str) -> None:
        saved.setdefault(path, path.read_bytes() if path.exists() else None)
        data = bytearray(path.read_bytes()) if how == "pages" else bytearray(os.urandom(256 * 1024))
        if how == "pages":  # the schema whole, the experiments and runs tables' first pages random
            with sqlite3.connect(path) as db:
                size = db.execute("PRAGMA page_size").fetchone()[0]
                roots = [n for (n,) in db.execute("SELECT rootpage FROM sqlite_master WHERE name IN ('experiments', 'runs')")]
            for page in roots:
                data[(page - 1) * size:page * size] = os.urandom(size)
        path.write_bytes(bytes(data))

    yield damage
    for path, data in saved.items():
        path.unlink() if data is None else path.write_bytes(data)


@pytest.mark.integration
@pytest.mark.parametrize("where", ["./mlflow.db", "sweeps/NAME/mlflow.db"])
def test_a_damaged_sqlite_store_is_one_line_before_ray_and_the_sweep_is_kept(sweep, damaged, where):
    store = sweep / where.replace("NAME", NAME)
    damaged(store, "random")
    args = () if where == "./mlflow.db" else ("--tracking-uri", f"sqlite:///{store}")
    before = snapshot(sweep)
    r, ray_started = run("launch", "space.yaml", *args, cwd=sweep)
    assert_refused(r, "not a readable SQLite database", "file is not a database", root=sweep, before=before)
    assert r.stdout == "" and not ray_started


@pytest.mark.integration
def test_a_store_damaged_past_its_schema_is_one_line_and_the_sweep_is_kept(sweep, damaged):
    """The schema reads, a table's pages do not: MLflow fails once Ray runs; still one line, exit 2."""
    damaged(sweep / "mlflow.db", "pages")
    kept = _kept(sweep)
    r, _ = run("launch", "space.yaml", cwd=sweep, timeout=300)
    assert_refused(r, "the tracking store failed", "malformed")
    assert _kept(sweep) == kept


@pytest.fixture
def status_file(sweep):
    path = sweep / "sweeps" / NAME / "status.json"
    good = path.read_bytes()
    yield path
    path.write_bytes(good)


@pytest.mark.integration
@pytest.mark.parametrize("content, expect", [
    (lambda good: b" " * (200 * 2**20) + good, "at most 67,108,864 are read"),  # 200 MB of spaces, then the JSON
    (lambda good: b"[" * 100_000 + b"]" * 100_000, "nested too deep"),
    (lambda good: b'{"trials": ' + b"[" * 5_000 + b"]" * 5_000 + b"}", "nested too deep"),
])
def test_a_huge_or_deep_status_file_is_one_line(sweep, status_file, content, expect):
    status_file.write_bytes(content(status_file.read_bytes()))
    before = snapshot(sweep)
    r, ray_started = run("status", NAME, cwd=sweep)
    assert_refused(r, "status.json", expect, "move it away", root=sweep, before=before)
    assert not ray_started


@pytest.mark.integration
def test_a_driver_pid_now_of_another_process_is_not_taken_for_the_driver(sweep, status_file):
    status = json.loads(status_file.read_text())
    driver = status["driver"]  # the real driver's record: host, pid, start time; that driver has ended
    assert driver["host"] == socket.gethostname() and isinstance(driver["started"], float)
    other = subprocess.Popen(["sleep", "120"])  # an unrelated process, under a pid the driver no longer holds
    try:
        status_file.write_text(json.dumps({**status, "state": "running", "driver": {**driver, "pid": other.pid}}))
        r = sweeper("status", NAME, cwd=sweep)
        assert r.returncode == 0 and "interrupted (driver gone" in r.stdout.splitlines()[0], r.stdout + r.stderr
        # the check is not blind: with that process's own start time it would be the driver
        started = psutil.Process(other.pid).create_time()
        status_file.write_text(json.dumps({**status, "state": "running", "driver": {**driver, "pid": other.pid, "started": started}}))
        assert f"sweep {NAME}: running," in sweeper("status", NAME, cwd=sweep).stdout
    finally:
        other.kill()
        other.wait()


CLUSTER_SIGNAL = r"""
set -u
ray=$(dirname "$SWEEPER")/ray
"$ray" start --head --num-cpus 2 --include-dashboard=false --disable-usage-stats > ray_start.log 2>&1 || exit 90
"$SWEEPER" launch "$SPACE" --address auto --progress none > out.log 2> err.log &
pid=$!
for i in $(seq 1200); do
  grep -q '"step": [1-9]' sweeps/smoke/status.json 2>/dev/null && break
  sleep 0.25
done
kill -"$SIGNAL" "$pid"
wait "$pid"
echo "exit $?"
grep -o '"state": "[a-z]*"' sweeps/smoke/status.json | head -1
grep -c '"status": "interrupted"' sweeps/smoke/status.json | sed 's/^/interrupted trials: /'
pgrep -x gcs_server > /dev/null && echo "cluster up" || echo "cluster gone"
"$SWEEPER" launch "$SPACE" --address auto --progress none > out2.log 2> err2.log
echo "resume exit $?"
"$ray" stop --force > /dev/null 2>&1
"""


@pytest.mark.integration
@pytest.mark.long  # a `ray start` cluster and two launches: `make test-long`
@pytest.mark.serial  # ends with `ray stop --force`
@pytest.mark.parametrize("sig", ["INT", "TERM"])
def test_a_launch_joined_to_a_cluster_with_auto_stops_on_a_signal_and_leaves_the_cluster_up(tmp_path, sig):
    """`--address auto` into a `ray start` cluster: SIGINT or SIGTERM after the first report ends the
    launch as interrupted (exit 130, the running trials marked), the cluster keeps running, and the
    same command finishes the sweep."""
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"} | {"PYTHONPATH": str(ROOT)}
    env.pop("MLFLOW_TRACKING_URI", None)
    env |= {"SWEEPER": str(SWEEPER), "SPACE": str(SMOKE), "SIGNAL": sig}
    r = subprocess.run([*_alone(), "bash", "-c", CLUSTER_SIGNAL], cwd=tmp_path, env=env, capture_output=True,
                       text=True, timeout=900)
    log = r.stdout + r.stderr + "".join((tmp_path / f).read_text()[-1500:] for f in ("err.log", "err2.log")
                                        if (tmp_path / f).exists())
    assert "exit 130" in r.stdout and "cluster up" in r.stdout and "resume exit 0" in r.stdout, log
    assert '"state": "interrupted"' in r.stdout and "interrupted trials: 0" not in r.stdout, log
    assert "Traceback" not in (tmp_path / "err.log").read_text(), log
    status = json.loads((tmp_path / "sweeps" / "smoke" / "status.json").read_text())
    assert status["state"] == "finished" and len(status["trials"]) == 6, status
    assert all(t["status"] in ("completed", "stopped") for t in status["trials"]), status["trials"]


@pytest.mark.parametrize("verb", [("launch", SMOKE, "--in-process"), ("serve", "--detach")])
@pytest.mark.parametrize("variable", ["RAY_TMPDIR", "TMPDIR"])
def test_a_temp_folder_too_long_for_ray_s_sockets_is_one_line_before_anything_is_written(tmp_path, verb, variable):
    # Ray's socket paths ($RAY_TMPDIR/ray/session_.../sockets/plasma_store) must fit in 107 bytes: a
    # launch had written its store, lock and sweep folder before Ray's traceback; a service, its log
    long = tmp_path / ("t" * 60)
    long.mkdir()
    env = {variable: str(long), "SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}
    if variable == "TMPDIR":
        env["RAY_TMPDIR"] = ""
    before = snapshot(tmp_path)
    r = sweeper(*verb, cwd=tmp_path, env=env)
    assert_refused(r, f"${variable}", "too long for the local Ray's socket paths", root=tmp_path, before=before)


@pytest.mark.parametrize("verb", [("launch", SMOKE, "--in-process"), ("serve", "--detach"), ("serve",)])
@pytest.mark.parametrize("planted", ["file", "link", "dangling link"])
def test_a_private_ray_folder_that_cannot_be_used_is_one_line_before_anything_is_written(tmp_path, verb, planted):
    # <TMPDIR>/sweeper-ray-UID, where a local Ray keeps its sockets, a file or a link: a launch had
    # written its lock, its study and an MLflow run left RUNNING first; a service, its folder and log
    temp = tmp_path / "tmp"
    temp.mkdir()
    at = temp / f"sweeper-ray-{os.getuid()}"
    if planted == "file":
        at.write_text("x\n")
    else:
        (tmp_path / "elsewhere").mkdir()
        at.symlink_to(tmp_path / ("elsewhere" if planted == "link" else "gone"))
    env = {"TMPDIR": str(temp), "RAY_TMPDIR": "", "SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}
    before = snapshot(tmp_path)
    r = sweeper(*verb, cwd=tmp_path, env=env)
    assert_refused(r, str(at), "cannot keep the local Ray's files there", root=tmp_path, before=before)


@pytest.mark.parametrize("verb", [("launch", SMOKE, "--in-process"), ("serve", "--detach")])
def test_a_tmpdir_that_is_no_folder_is_one_line_not_replaced_by_tmp_unsaid(tmp_path, verb):
    # Python's tempfile falls back to /tmp without a word: the local Ray's files went to the folder
    # every other user of the machine's default shares
    env = {"TMPDIR": str(tmp_path / "no" / "such"), "RAY_TMPDIR": "", "SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}
    before = snapshot(tmp_path)
    r = sweeper(*verb, cwd=tmp_path, env=env)
    assert_refused(r, "$TMPDIR", "no such folder", "unset TMPDIR", root=tmp_path, before=before)


@pytest.mark.parametrize("inside", ["", "trials", "trials/t0000"])
def test_a_storage_inside_a_sweep_s_folder_is_one_line_before_anything_is_written(sweep, tmp_path, inside):
    # a sweep stored in another's folder: the outer sweep's --restart removed it with its own files
    shutil.copytree(sweep, tmp_path / "w", symlinks=True)
    root = tmp_path / "w"
    inner = root / "inner.yaml"
    inner.write_text((root / "space.yaml").read_text().replace(f"name: {NAME}", "name: inner"))
    before = snapshot(root)
    r = sweeper("launch", "inner.yaml", "--storage", str(root / "sweeps" / NAME / inside), cwd=root)
    assert_refused(r, "--storage", f"inside the folder of sweep `{NAME}`", root=root, before=before)


def test_a_restart_of_a_sweep_that_holds_another_sweep_s_folder_removes_nothing(sweep, tmp_path):
    shutil.copytree(sweep, tmp_path / "w", symlinks=True)
    root = tmp_path / "w"
    outer = root / "sweeps" / NAME
    shutil.copytree(outer, tmp_path / "inner", symlinks=True)
    shutil.move(tmp_path / "inner", outer / "trials" / "inner")  # stored there before the storage check, or by hand
    before = snapshot(root)
    r = sweeper("launch", "space.yaml", "--restart", cwd=root)
    assert_refused(r, "--restart", "holds another sweep's folder", "nothing was removed", root=root, before=before)


def test_a_trial_run_into_a_sweep_s_trial_folder_is_one_line_and_the_sweep_unchanged(sweep, tmp_path):
    # `trial --out` a sweep's trial: it trained past the sweep's budget into the sweep's files
    shutil.copytree(sweep, tmp_path / "w", symlinks=True)
    root = tmp_path / "w"
    trial = root / "sweeps" / NAME / "trials" / "t0000"
    config = next(trial.glob("checkpoint-*/config.yaml"))
    before = snapshot(root)
    r = sweeper("trial", str(config), "--out", str(trial), "--resume", "--steps", "30", "--threads", "1", cwd=root)
    assert_refused(r, "--out", f"inside the folder of sweep `{NAME}`", root=root, before=before)


@pytest.mark.parametrize("verb", [("launch", SMOKE, "--in-process"), ("launch", SMOKE), ("serve", "--detach"), ("serve",)])
@pytest.mark.parametrize("option", ["error", "e::DeprecationWarning"])
def test_warnings_raised_as_errors_are_one_line_before_anything_is_written(tmp_path, verb, option):
    # Ray's dashboard failed to start under them: 71 lines of Ray's log and a traceback, exit 1, after
    # the launch had made its sweep folder and lock; a service had started a node that never came up
    env = {"PYTHONWARNINGS": option, "SWEEPER_SERVICE_DIR": str(tmp_path / "svc")}
    before = snapshot(tmp_path)
    r, ray_started = run(*verb, cwd=tmp_path, env=env)
    assert_refused(r, f"PYTHONWARNINGS or -W {option}", "unset it", root=tmp_path, before=before)
    assert r.stdout == "" and not ray_started, r.stdout[-500:]
