"""`sweeper ui` and `sweeper dashboard` as a user meets them: the address printed at once (also to
a file), Ctrl-C (SIGINT) stops the server and all its workers without a traceback, a port another
server holds or a host that is not this machine's is one line and exit 2, and a host beyond
loopback gets a warning that the UI is open to the network. Real `mlflow ui` and optuna-dashboard."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import time
import urllib.request

import pytest

from sweeper.commands.web_server import exposure_warning, is_loopback, url_of
from tests.conftest import empty_mlflow_store, free_port, sweeper_cmd, sweeper_env

STARTUP_S = 180  # what a server may take to start on a loaded machine before the test calls it hung


def sweeper(cwd, *args, timeout=60) -> subprocess.CompletedProcess:
    return subprocess.run(sweeper_cmd(*args), cwd=cwd, env=sweeper_env(), capture_output=True, text=True, timeout=timeout)


def start(cwd, *args, env: dict[str, str] | None = None) -> tuple[subprocess.Popen, object, object]:
    """The verb with stdout and stderr redirected to files, as in `sweeper ui > ui.log`."""
    out, err = open(cwd / "out.txt", "w"), open(cwd / "err.txt", "w")
    proc = subprocess.Popen(sweeper_cmd(*args), cwd=cwd, env={**sweeper_env(), **(env or {})}, stdout=out, stderr=err)
    return proc, cwd / "out.txt", cwd / "err.txt"


def wait_for(path, text: str, proc: subprocess.Popen, timeout_s: float) -> None:
    """Wait until `text` is in the file; fail if the process ends first or it seems hung."""
    t0 = time.monotonic()
    while text not in path.read_text():
        assert proc.poll() is None, (f"ended (exit {proc.returncode}) before {text!r}: {path.read_text()[-500:]}; "
                                     f"stderr: {path.with_name('err.txt').read_text()[-1500:]}")
        assert time.monotonic() - t0 < timeout_s, f"no {text!r} within {timeout_s} s: {path.read_text()[-500:]}"
        time.sleep(0.05)


def port_answers(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=1):
            return True
    except OSError:
        return False


def interrupt(proc: subprocess.Popen) -> int:
    proc.send_signal(signal.SIGINT)  # what Ctrl-C sends to the verb
    try:
        return proc.wait(timeout=90)  # a bound on a hang (the verb itself gives its server 10 s + 5 s)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


# -- addresses (no server) ------------------------------------------------------------------------


def test_loopback_hosts_are_quiet_and_others_are_warned_about():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert exposure_warning("127.0.0.1", 5000, "the MLflow UI") is None
    for host in ("0.0.0.0", "::", "192.0.2.1"):
        warning = exposure_warning(host, 5000, "the MLflow UI")
        assert warning.startswith(f"warning: --host {host}: the MLflow UI has no login") and "\n" not in warning
    assert url_of("0.0.0.0", 8080) == "http://127.0.0.1:8080" and url_of("::1", 8080) == "http://[::1]:8080"


@pytest.mark.parametrize("host, rule", [
    ("192.0.2.1", "--host 192.0.2.1: not an address of this machine"),  # TEST-NET-1: never a local address
    ("no-such-host.invalid", "--host no-such-host.invalid: not a host name or address this machine can resolve"),
])
def test_a_host_that_cannot_be_served_on_is_one_line_and_exit_2(tmp_path, host, rule):
    for verb in (["ui"], ["dashboard", "smoke"]):
        if verb[0] == "dashboard":
            make_study(tmp_path)
        r = sweeper(tmp_path, *verb, "--host", host, "--port", free_port())
        assert r.returncode == 2 and r.stdout == "", r.stdout
        assert r.stderr.startswith(f"error: {rule}") and len(r.stderr.splitlines()) == 1, r.stderr


def make_study(root):
    """A sweep folder with a real Optuna study of the sweep's name (what the dashboard serves)."""
    import optuna

    folder = root / "sweeps" / "smoke"
    if not (folder / "optuna.db").exists():
        folder.mkdir(parents=True, exist_ok=True)
        study = optuna.create_study(study_name="smoke", storage=f"sqlite:///{folder / 'optuna.db'}", direction="maximize")
        study.set_user_attr("sweeper.format", 2)  # a sweep's study: the dashboard serves no other


@pytest.mark.parametrize("verb", [["ui"], ["dashboard", "smoke"]])
def test_a_port_another_server_holds_is_one_line_and_exit_2(tmp_path, verb):
    make_study(tmp_path)
    with socket.socket() as held:  # another server, listening on the port
        held.bind(("127.0.0.1", 0))
        held.listen()
        port = held.getsockname()[1]
        r = sweeper(tmp_path, *verb, "--port", port)
    assert r.returncode == 2 and r.stdout == "", r.stdout  # no address printed: nothing serves there for us
    assert r.stderr == f"error: --port {port}: already in use on 127.0.0.1 (another server holds it); stop it, or pick another --port\n"


# -- real servers ------------------------------------------------------------------------------------


@pytest.mark.integration
def test_ui_prints_its_address_at_once_to_a_file_and_stops_on_ctrl_c_without_a_traceback(tmp_path):
    empty_mlflow_store(tmp_path)
    port = free_port()
    proc, out, err = start(tmp_path, "ui", "--port", port)
    try:
        wait_for(out, f"http://127.0.0.1:{port}", proc, STARTUP_S)  # flushed while it runs: not held in a buffer
        wait_for(out, "ready: ", proc, STARTUP_S)
        first = out.read_text().splitlines()[0]  # the address first, before the wait for the server
        assert first.startswith("MLflow UI on sqlite:///") and f"http://127.0.0.1:{port}" in first, out.read_text()
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(f"http://127.0.0.1:{port}/health", timeout=5).close()
    finally:
        code = interrupt(proc)
    assert code == 0
    assert "Traceback" not in err.read_text() + out.read_text() and err.read_text() == "", err.read_text()
    deadline = time.time() + 15  # the server and its workers went with it
    while port_answers(port) and time.time() < deadline:
        time.sleep(0.2)
    assert not port_answers(port), "the MLflow server outlived `sweeper ui`"


@pytest.mark.integration
@pytest.mark.long  # `make test-long`; the warning itself is checked without a server above
def test_a_host_beyond_loopback_is_warned_about_and_ctrl_c_while_starting_is_clean(tmp_path):
    empty_mlflow_store(tmp_path)
    port = free_port()
    proc, out, err = start(tmp_path, "ui", "--host", "0.0.0.0", "--port", port)
    try:
        wait_for(err, "warning: --host 0.0.0.0: the MLflow UI has no login", proc, STARTUP_S)
        wait_for(out, f"http://127.0.0.1:{port}", proc, STARTUP_S)
    finally:
        code = interrupt(proc)  # before the server answers
    assert code == 0 and "Traceback" not in err.read_text() and len(err.read_text().splitlines()) == 1, err.read_text()
    time.sleep(1)
    assert not port_answers(port)


@pytest.mark.integration
def test_dashboard_prints_its_address_at_once_and_stops_on_ctrl_c_without_a_traceback(tmp_path):
    make_study(tmp_path)
    port = free_port()
    leaks = {"PYTHONWARNINGS": "error::ResourceWarning"}  # a pipe or file the verb leaves open: said on stderr at exit
    proc, out, err = start(tmp_path, "dashboard", "smoke", "--port", port, env=leaks)
    try:
        wait_for(out, f"http://127.0.0.1:{port}", proc, STARTUP_S)  # flushed while it runs: not held in a buffer
        wait_for(out, f"ready: http://127.0.0.1:{port}/dashboard/studies/", proc, STARTUP_S)
        first = out.read_text().splitlines()[0]  # the address first, before the wait for the server
        assert f"http://127.0.0.1:{port}" in first and not first.startswith("ready"), out.read_text()
        assert port_answers(port)
    finally:
        code = interrupt(proc)
    assert code == 0 and "Traceback" not in err.read_text() and err.read_text() == "", err.read_text()
    time.sleep(1)
    assert not port_answers(port)


@pytest.mark.integration
def test_a_dashboard_whose_stdout_reader_is_gone_serves_on_and_says_so_once(tmp_path):
    # `sweeper dashboard smoke | true`: it printed its address into the closed pipe and ended, exit 0, serving nothing
    make_study(tmp_path)
    port = free_port()
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader is gone before the first line
    err = open(tmp_path / "err.txt", "w")
    try:
        proc = subprocess.Popen(sweeper_cmd("dashboard", "smoke", "--port", port), cwd=tmp_path, env=sweeper_env(),
                                stdout=write_end, stderr=err)
    finally:
        os.close(write_end)
    try:
        t0 = time.monotonic()
        while not port_answers(port):
            assert proc.poll() is None, f"ended (exit {proc.returncode}): {(tmp_path / 'err.txt').read_text()[-1500:]}"
            assert time.monotonic() - t0 < STARTUP_S, "no server within the bound"
            time.sleep(0.1)
    finally:
        code = interrupt(proc)
    said = (tmp_path / "err.txt").read_text()
    assert code == 0 and said.count("stdout's reader left") == 1 and "Traceback" not in said, said


@pytest.mark.integration
def test_ui_killed_outright_takes_its_server_and_every_worker_with_it(tmp_path):
    """SIGKILL leaves the verb no moment to stop its server: the guard does (sweeper/server_guard.py)."""
    import psutil

    empty_mlflow_store(tmp_path)
    port = free_port()
    proc, out, err = start(tmp_path, "ui", "--port", port)
    try:
        wait_for(out, f"ready: http://127.0.0.1:{port}", proc, STARTUP_S)
        family = psutil.Process(proc.pid).children(recursive=True)  # the server, its workers, the guard
        assert any("server_guard" in " ".join(p.cmdline()) for p in family), [p.cmdline()[:3] for p in family]
        assert len(family) >= 3 and port_answers(port)
    finally:
        proc.kill()
        proc.wait()
    def running(p: psutil.Process) -> bool:
        try:
            return p.status() != psutil.STATUS_ZOMBIE
        except psutil.NoSuchProcess:
            return False

    deadline = time.monotonic() + 60  # the guard gives the server 10 s after SIGTERM, then SIGKILL
    while (left := [p for p in family if running(p)]) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not left, [p.cmdline()[:4] for p in left]
    assert not port_answers(port)
