"""What a launch and `sweeper serve` read of the service, and what the service's folder holds, are
checked before use: a reply outside the protocol, a service that falls silent, a folder opened to
others or a file of the wrong kind in it are each one line (exit 2), never a traceback, a wrong exit
code or a terminal escape. The service here is a stand-in on a real socket that answers what the
test gives it; the real service's side is tests/test_service.py."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import threading
from pathlib import Path

import pytest

from sweeper.orphans import PROCESSES_FILE
from sweeper.service_folder import LOCK, LOG, SOCKET, STATE
from tests.hostile import ROOT, assert_refused, snapshot, sweeper

SMOKE = str(ROOT / "search_spaces" / "smoke.yaml")


class StandIn:
    """A socket in a service folder that reads one request per connection and answers `replies`
    (raw lines; None: close without a word), then closes, or with `hold` keeps the connection open."""

    def __init__(self, folder: Path, replies: bytes | None, hold: bool = False):
        folder.mkdir(mode=0o700, exist_ok=True)
        self.folder, self.replies, self.hold, self.requests = folder, replies, hold, []
        self.released = threading.Event()
        self.server = socket.socket(socket.AF_UNIX)
        self.server.bind(str(folder / SOCKET))
        os.chmod(folder / SOCKET, 0o600)
        self.server.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn:
            self.requests.append(json.loads(conn.makefile("rb").readline()))
            if self.replies is not None:
                conn.sendall(self.replies)
            if self.hold:
                self.released.wait(600)

    def close(self) -> None:
        self.released.set()
        self.server.close()


@pytest.fixture
def stand_in(tmp_path):
    made = []

    def start(replies, hold: bool = False) -> StandIn:
        made.append(StandIn(tmp_path / "svc", replies, hold))
        return made[-1]

    yield start
    for s in made:
        s.close()


def _env(stand: StandIn) -> dict:
    return {"SWEEPER_SERVICE_DIR": str(stand.folder)}


ACCEPTED = b'{"accepted": true}\n'


@pytest.mark.parametrize("reply,named", [
    (b'{"sweep_dir": 5}\n', "sweep_dir: 5"),
    (b'{"sweep_dir": "relative/path"}\n', "sweep_dir"),
    (b'{"exit": "x"}\n', "exit: 'x'"),
    (b'{"exit": 100000000000000000000000}\n', "exit: <integer of 24 digits>"),
    (b'{"exit": 256}\n', "exit: 256"),
    (b'{"exit": -1}\n', "exit: -1"),  # once the launch's own marker of a restart
    (b'{"exit": 0.9}\n', "exit: 0.9"),
    (b'{"exit": true}\n', "exit: True"),
    (b'{"err": ["a"]}\n', "err: ['a']"),
])
def test_a_launch_refuses_a_reply_outside_the_protocol_in_one_line(tmp_path, stand_in, reply, named):
    stand = stand_in(ACCEPTED + reply)
    work = tmp_path / "work"
    work.mkdir()
    before = snapshot(work)
    r = sweeper("launch", SMOKE, cwd=work, env=_env(stand), timeout=120)
    assert_refused(r, "answered what is not its protocol", named, root=work, before=before)  # not run here either
    assert stand.requests and stand.requests[0]["verb"] == "launch"


def test_what_the_service_says_is_shown_as_one_clean_line_and_its_exit_code_kept(tmp_path, stand_in):
    err = json.dumps({"err": "first\nsecond\x1b[2J\x1b[31m red " + "x" * 5000}).encode() + b"\n"
    stand = stand_in(ACCEPTED + err + b'{"exit": 3}\n')
    (tmp_path / "work").mkdir()
    r = sweeper("launch", SMOKE, "--progress", "none", cwd=tmp_path / "work", env=_env(stand), timeout=120)
    assert r.returncode == 3, r.stderr[-2000:]
    shown = [line for line in r.stderr.splitlines() if "first" in line]
    assert len(shown) == 1 and "second" in shown[0] and "\x1b" not in r.stderr and len(shown[0]) < 400, r.stderr[-600:]


def test_a_service_that_takes_the_sweep_then_falls_silent_is_said_within_its_bound(tmp_path, stand_in):
    """It says it is alive every ALIVE_S while a sweep runs; SILENT_S of silence is a stopped service."""
    from sweeper.service_link import SILENT_S

    stand = stand_in(ACCEPTED, hold=True)  # accepted, then nothing, the connection held open
    (tmp_path / "work").mkdir()
    r = sweeper("launch", SMOKE, "--progress", "none", cwd=tmp_path / "work", env=_env(stand), timeout=SILENT_S * 4)
    assert_refused(r, f"took the sweep but has said nothing within {SILENT_S:.0f} s")


@pytest.mark.parametrize("verb,reply,named", [
    ("--stop", b'{"error": "refused"}\n', "refused: refused"),
    ("--stop", b'{"stopping": true}\n', "answered the stop with what is not"),
    ("--stop", None, "closed the connection without an answer"),
    ("--status", b'{"error": "no"}\n', "refused: no"),
    ("--status", b'{"pid": "\\u001b[31mRED", "sweeps": []}\n', "answered a status that is not"),
])
def test_serve_status_and_stop_refuse_an_answer_outside_the_protocol(tmp_path, stand_in, verb, reply, named):
    stand = stand_in(reply)
    r = sweeper("serve", verb, cwd=tmp_path, env=_env(stand), timeout=120)
    assert_refused(r, named)
    assert "\x1b" not in r.stderr + r.stdout


SOUND_STATUS = {"pid": 4242, "started": 1.0, "code": "0123456789abcdef", "workers": 1,
                "worker_info": [{"pid": 4243, "trained": 2, "busy": False}],
                "sweeps": [{"name": "a", "since": 1.0, "client_pid": 7, "sweep_dir": "/tmp/sweeps/a"}]}


@pytest.mark.parametrize("field,value,named", [
    ("workers", float("nan"), "status: workers: must be a valid integer, got nan"),
    ("workers", "3", "status: workers: must be a valid integer"),
    ("started", 1e300, "status: started: must be less than"),
    ("pid", -4, "status: pid: must be greater than 0"),
    ("code", None, "status: code: must be a valid string"),
    ("worker_info", [{"pid": 4243, "trained": "many", "busy": False}], "worker_info.0.trained"),
    ("worker_info", [{"pid": 4243, "trained": 2, "busy": "yes"}], "worker_info.0.busy"),
    ("sweeps", [{"name": ["a"], "since": 1.0, "client_pid": 7, "sweep_dir": None}], "sweeps.0.name"),
    ("sweeps", [{"name": "a", "since": float("inf"), "client_pid": 7, "sweep_dir": None}], "sweeps.0.since"),
    ("sweeps", [{"name": "a", "since": 1.0, "client_pid": 7}], "status: sweeps.0.sweep_dir: required"),
])
def test_a_status_field_of_the_wrong_kind_is_one_line_not_shown_as_sent(tmp_path, stand_in, field, value, named):
    """`nan warm workers`, `up 0m00s` for a start of 1e300: every field is checked before it is shown."""
    stand = stand_in(json.dumps({**SOUND_STATUS, field: value}).encode() + b"\n")
    for args in (("serve", "--status"), ("status",)):
        before = snapshot(tmp_path)
        r = sweeper(*args, cwd=tmp_path, env=_env(stand), timeout=120)
        assert_refused(r, "answered a status that is not a service's", named, root=tmp_path, before=before)
        assert r.stdout == "", r.stdout


def test_a_sound_status_is_shown_whole(tmp_path, stand_in):
    stand = stand_in(json.dumps(SOUND_STATUS).encode() + b"\n")
    r = sweeper("serve", "--status", cwd=tmp_path, env=_env(stand), timeout=120)
    assert r.returncode == 0 and r.stderr == "", r.stderr
    assert r.stdout.splitlines()[0].startswith("sweep service: pid 4242, up ") and "1 warm workers" in r.stdout
    assert "pid 4243 (2 trials)" in r.stdout and "a: running" in r.stdout and "launch pid 7 (/tmp/sweeps/a)" in r.stdout


def test_the_list_of_sweeps_is_not_printed_before_a_service_s_refusal(tmp_path, stand_in):
    (tmp_path / "sweeps" / "a").mkdir(parents=True)
    (tmp_path / "sweeps" / "a" / "space.yaml").write_text("name: a\n")  # a sweep the list would show
    stand = stand_in(b'{"error": "no"}\n')
    r = sweeper("status", cwd=tmp_path, env=_env(stand), timeout=120)
    assert_refused(r, "refused: no")
    assert r.stdout == "", r.stdout


def test_a_status_field_with_terminal_escapes_is_printed_without_them(tmp_path, stand_in):
    answer = {"pid": 4242, "started": 1.0, "code": "c\x1b[2Jode", "workers": 1, "worker_info": [],
              "sweeps": [{"name": "a\nb\x1b[31m", "since": 1.0, "client_pid": 7, "sweep_dir": None}]}
    stand = stand_in(json.dumps(answer).encode() + b"\n")
    r = sweeper("serve", "--status", cwd=tmp_path, env=_env(stand), timeout=120)
    assert r.returncode == 0 and "pid 4242" in r.stdout, r.stdout + r.stderr
    assert "\x1b" not in r.stdout and len(r.stdout.splitlines()) == 2, r.stdout


@pytest.mark.parametrize("damage", ["open folder", "open socket", "socket gone"])
def test_a_service_that_cannot_be_reached_safely_is_one_line_not_passed_by(tmp_path, stand_in, damage):
    """A launch beside such a service would otherwise run its own Ray next to it, saying nothing."""
    stand = stand_in(b'{"pid": 4242, "sweeps": []}\n')
    lock = open(stand.folder / LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)  # as the service holds it
    (stand.folder / STATE).write_text(json.dumps({"pid": 4242}))
    if damage == "open folder":
        os.chmod(stand.folder, 0o755)
    elif damage == "open socket":
        os.chmod(stand.folder / SOCKET, 0o666)
    else:
        (stand.folder / SOCKET).unlink()
    named = {"open folder": "open to other users", "open socket": "not this user's alone",
             "socket gone": "has lost its socket service.sock"}[damage]
    (tmp_path / "work").mkdir()
    try:
        for args in (("serve", "--status"), ("serve", "--stop"), ("launch", SMOKE)):
            before = snapshot(tmp_path / "work")
            r = sweeper(*args, cwd=tmp_path / "work", env=_env(stand), timeout=120)
            assert_refused(r, named, root=tmp_path / "work", before=before)
    finally:
        lock.close()
        os.chmod(stand.folder, 0o700)


@pytest.mark.parametrize("entry,kind", [(LOG, "folder"), (LOG, "link"), (STATE, "folder"), (SOCKET, "folder"),
                                        (LOCK, "fifo"), (LOCK, "link"), (PROCESSES_FILE, "fifo"), (PROCESSES_FILE, "folder")])
def test_a_folder_or_link_where_the_service_keeps_a_file_is_one_line_before_it_starts(tmp_path, entry, kind):
    folder = tmp_path / "svc"
    folder.mkdir(mode=0o700)
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me\n")
    os.chmod(victim, 0o644)
    if kind == "folder":
        (folder / entry).mkdir()
    elif kind == "fifo":
        os.mkfifo(folder / entry)
    else:
        (folder / entry).symlink_to(victim)
    before = snapshot(tmp_path)
    for args in (("serve", "--detach"), ("serve",)):
        r = sweeper(*args, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(folder)}, timeout=120)
        assert_refused(r, entry, "not a ", root=tmp_path, before=before)
    assert victim.read_text() == "keep me\n" and oct(victim.stat().st_mode & 0o777) == "0o644"


def test_an_ending_service_is_waited_on_not_said_gone(tmp_path, monkeypatch):
    """A service that holds its lock but refuses connections (its socket closed: writing its sweeps
    down, then its Ray) is waited on until it ends: `--status` said none runs at once, and a launch
    would have started its own Ray beside the ending one. The lock is released at the first wait,
    so a connect that did not wait returns with it still held."""
    from sweeper import service_link
    from sweeper.lock import lock_held

    folder = tmp_path / "svc"
    folder.mkdir(mode=0o700)
    with socket.socket(socket.AF_UNIX) as closed:  # the socket file stays, nothing listens on it: connect is refused
        closed.bind(str(folder / SOCKET))
        os.chmod(folder / SOCKET, 0o600)
        closed.listen(1)
    lock = open(folder / LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    (folder / STATE).write_text(json.dumps({"pid": 4242}))
    waits = []

    def the_service_ends_while_waited_on(seconds: float) -> None:
        waits.append(seconds)
        lock.close()  # the ending service's last act

    monkeypatch.setattr(service_link.time, "sleep", the_service_ends_while_waited_on)
    monkeypatch.setattr(service_link, "NOTICE_S", 0.0)  # the wait is said from its first round
    said = []
    assert service_link.connect(folder, say=said.append) is None and not lock_held(folder / LOCK)
    assert waits, "said no service runs while the ending one still held its lock"
    assert len(said) == 1 and "waiting for the sweep service" in said[0] and "at most 180 s" in said[0], said


def test_a_long_wait_on_the_service_is_said_once(tmp_path, monkeypatch):
    """A service that holds its lock with no socket yet (starting) is waited on for up to START_S:
    the launch says so once, not silently for minutes, and not once per round."""
    from sweeper import service_link

    folder = tmp_path / "svc"
    folder.mkdir(mode=0o700)
    lock = open(folder / LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    rounds = []

    def a_round(seconds: float) -> None:
        rounds.append(seconds)
        if len(rounds) == 5:
            lock.close()  # the starting service failed and let go

    monkeypatch.setattr(service_link.time, "sleep", a_round)
    monkeypatch.setattr(service_link, "NOTICE_S", 0.0)
    said = []
    assert service_link.connect(folder, say=said.append) is None
    assert len(rounds) == 5 and len(said) == 1 and "to open its socket (starting" in said[0], (rounds, said)
    assert "\n" not in said[0] and len(said[0]) < 300
    monkeypatch.setattr(service_link, "NOTICE_S", 2.0)  # a wait shorter than that (no real time passes here) is unsaid
    lock = open(folder / LOCK, "w")
    fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    rounds.clear()
    said.clear()
    assert service_link.connect(folder, say=said.append) is None and len(rounds) == 5 and said == [], said


def test_the_advice_for_a_shared_open_folder_is_to_name_another_never_to_close_it(tmp_path):
    """`chmod 700 /tmp` would break the machine for everyone: a folder holding more than the service's
    files is not the service's to close."""
    shared, own = tmp_path / "shared", tmp_path / "own"
    shared.mkdir()
    (shared / "someone_else_s.txt").write_text("x\n")
    os.chmod(shared, 0o1777)
    own.mkdir()
    os.chmod(own, 0o755)
    for args in (("serve", "--status"), ("serve", "--stop"), ("launch", SMOKE)):
        line = assert_refused(sweeper(*args, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(shared)}, timeout=120),
                              "a folder of the service's own")
        assert "chmod" not in line, line
        line = assert_refused(sweeper(*args, cwd=tmp_path, env={"SWEEPER_SERVICE_DIR": str(own)}, timeout=120),
                              f"chmod 700 {own}")
    assert oct(shared.stat().st_mode & 0o7777) == "0o1777"


def test_a_fifo_for_the_service_s_state_is_read_as_nothing_not_waited_on(tmp_path):
    """A stopped service's state is read to name its pid: a FIFO there blocked the read for ever."""
    from sweeper.service_folder import read_state

    os.mkfifo(tmp_path / STATE)
    got = []
    reader = threading.Thread(target=lambda: got.append(read_state(tmp_path)), daemon=True)
    reader.start()
    reader.join(60)
    assert got == [{}], "read_state waited on a FIFO"


def test_the_service_s_log_lines_to_a_reader_that_left_end_quietly(tmp_path):
    """`sweeper serve | head -1`: every log line after the reader left was a traceback on stderr."""
    import subprocess
    import sys

    script = ("import logging; from core.tool_cli import StdoutLines; "
              "logging.basicConfig(handlers=[StdoutLines()], level=logging.INFO, format='%(message)s', force=True); "
              "[logging.info('sweep %d: running ' + 'x' * 200, i) for i in range(2000)]; print('done', file=__import__('sys').stderr)")
    reader = subprocess.Popen(["head", "-1"], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    r = subprocess.run([sys.executable, "-c", script], stdout=reader.stdin, stderr=subprocess.PIPE, text=True,
                       cwd=ROOT, timeout=120)
    reader.stdin.close()
    assert reader.stdout.read().startswith(b"sweep 0: running")
    reader.wait(30)
    assert r.returncode == 0 and r.stderr.strip() == "done", r.stderr[-2000:]
