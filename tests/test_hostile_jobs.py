"""`sweeper job status|logs|stop` and `sweeper submit` against a job server that answers badly:
HTTP 500, an HTML page, JSON of another shape, a job status Ray does not define, no answer at all,
or no server. Each is one line and exit 2 through the real CLI; a server that never answers is
given up on (it holds the request until the test ends, so only the CLI's own bound can end the call).

The server is a small HTTP server in this process that answers `/api/version` like a Ray head
(or not, per case) and every other path as the case says.
"""

from __future__ import annotations

import http.server
import json
import os
import threading

import pytest

from sweeper.adapters.ray_jobs import CALL_TIMEOUT_S
from tests.conftest import free_port
from tests.hostile import ROOT, assert_refused, snapshot, sweeper

VERSION = (200, "application/json", json.dumps({"version": "4", "ray_version": "2.40.0", "ray_commit": "x"}))
HTML = (200, "text/html", "<!doctype html><html><body><h1>Welcome to nginx</h1>\n<p>proxy</p></body></html>")
ERROR_500 = (500, "text/html", "<html><body>Internal Server Error\n" + "x" * 5000 + "</body></html>")
JOB = {"type": "SUBMISSION", "job_id": None, "submission_id": "sweep-x-1", "driver_info": None, "status": "RUNNING",
       "entrypoint": "sweeper launch s.yaml", "message": "running", "error_type": None, "start_time": 1, "end_time": None,
       "metadata": {}, "runtime_env": {}, "driver_agent_http_address": None, "driver_node_id": None, "driver_exit_code": None}
HANG = "hang"
HANG_GUARD_S = 20 * CALL_TIMEOUT_S  # what a command may take before the test calls it hung


class FakeHead:
    """answers: path prefix -> (code, content type, body) or HANG; the longest matching prefix wins."""

    def __init__(self, answers: dict):
        self.answers = answers
        head = self
        self.released = threading.Event()

        class Handler(http.server.BaseHTTPRequestHandler):
            def _answer(self):
                path = self.path.split("?")[0]
                key = max((k for k in head.answers if path.startswith(k)), key=len, default=None)
                answer = head.answers.get(key, (404, "text/plain", "not found"))
                if answer == HANG:  # until the test ends: only the client's bound ends the call
                    head.released.wait(HANG_GUARD_S)
                    return
                code, kind, body = answer
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = _answer

            def log_message(self, *args):
                pass

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self):
        self.released.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def head(request):
    heads = []

    def make(answers: dict) -> str:
        heads.append(FakeHead(answers))
        return heads[-1].url

    yield make
    for h in heads:
        h.close()


def refused(tmp_path, *args, expect=()):
    before = snapshot(tmp_path)
    r = sweeper(*args, cwd=tmp_path, timeout=HANG_GUARD_S)  # a call that hangs is killed: exit -9, not 2
    return assert_refused(r, *expect, root=tmp_path, before=before)


CASES = {
    "version_500": ({"/api/version": ERROR_500}, ["HTTP 500"]),
    "version_html": ({"/api/version": HTML}, ["not a Ray job server's"]),
    "version_other_json": ({"/api/version": (200, "application/json", "[1, 2]")}, ["not a Ray job server's"]),
    "job_500": ({"/api/version": VERSION, "/api/jobs/": ERROR_500}, ["HTTP 500"]),
    "job_502": ({"/api/version": VERSION, "/api/jobs/": (502, "text/html", "<h1>Bad Gateway</h1>")}, ["HTTP 502"]),
    "job_html": ({"/api/version": VERSION, "/api/jobs/": HTML}, ["not a Ray job server's"]),
    "job_unknown_status": ({"/api/version": VERSION, "/api/jobs/": (200, "application/json", json.dumps({**JOB, "status": "EXPLODED"}))},
                           ["not a Ray job server's"]),
    "job_other_json": ({"/api/version": VERSION, "/api/jobs/": (200, "application/json", json.dumps({"jobs": []}))},
                       ["not a Ray job server's"]),
    "job_missing": ({"/api/version": VERSION, "/api/jobs/": (404, "text/plain", "Job sweep-x-1 does not exist")},
                    ["no such job"]),
}


@pytest.mark.parametrize("verb", ["status", "logs", "stop"])
@pytest.mark.parametrize("case", sorted(CASES))
def test_a_bad_answer_is_one_line_and_exit_2(head, tmp_path, case, verb):
    answers, expect = CASES[case]
    url = head(answers)
    line = refused(tmp_path, "job", verb, "sweep-x-1", "--address", url, expect=[url, *expect])
    assert "Welcome to nginx" not in line and "xxxxxxxxxx" not in line  # the page is not pasted into the line


@pytest.mark.parametrize("path, expect", [("/api/jobs/sweep-x-1/logs", "the job's logs"), ("/api/jobs/sweep-x-1/stop", "the stop")])
def test_a_bad_answer_to_logs_or_stop_is_one_line(head, tmp_path, path, expect):
    url = head({"/api/version": VERSION, "/api/jobs/": (200, "application/json", json.dumps(JOB)), path: ERROR_500})
    verb = "logs" if path.endswith("logs") else "stop"
    refused(tmp_path, "job", verb, "sweep-x-1", "--address", url, expect=[expect, "HTTP 500"])


def test_an_unreachable_address_is_one_line(tmp_path):
    url = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    refused(tmp_path, "job", "status", "sweep-x-1", "--address", url, expect=["unreachable"])


@pytest.mark.parametrize("address", ["not-a-url", "ftp://x", "http://[::1", "http://" + "a" * 300])
def test_an_address_that_is_not_a_job_servers_is_one_line(tmp_path, address):
    refused(tmp_path, "job", "status", "sweep-x-1", "--address", address, expect=["--address"])


@pytest.mark.integration  # waits out the bound on a request (CALL_TIMEOUT_S)
def test_a_server_that_never_answers_is_given_up_at_the_bound(head, tmp_path):
    url = head({"/api/version": VERSION, "/api/jobs/": HANG})
    refused(tmp_path, "job", "status", "sweep-x-1", "--address", url, expect=["no answer", f"{CALL_TIMEOUT_S:.0f} s"])


@pytest.mark.parametrize("answers, expect", [
    ({"/api/version": ERROR_500}, "HTTP 500"),
    ({"/api/version": HTML}, "not a Ray job server's"),
    ({"/api/version": VERSION, "/api/v0/nodes": ERROR_500}, "the list of nodes"),
])
def test_submit_to_a_bad_server_is_one_line(head, tmp_path, answers, expect):
    url = head(answers)
    refused(tmp_path, "submit", ROOT / "search_spaces" / "smoke.yaml", "--address", url, "--storage", "/mnt/sweeps", "--shared-storage",
            "--tracking-uri", "http://127.0.0.1:1", expect=[expect])


def test_a_job_s_logs_are_shown_with_their_terminal_escapes_escaped(head, tmp_path):
    """The logs are the job server's text: an escape in them would retitle or clear the user's
    terminal; lines and tabs are kept as they are."""
    logs = "step 10\tacc 0.5\n\x1b]0;pwned\x07\x1b[2Jcleared\n"
    url = head({"/api/version": VERSION, "/api/jobs/": (200, "application/json", json.dumps(JOB)),
                "/api/jobs/sweep-x-1/logs": (200, "application/json", json.dumps({"logs": logs}))})
    r = sweeper("job", "logs", "sweep-x-1", "--address", url, cwd=tmp_path)
    assert r.returncode == 0 and "\x1b" not in r.stdout, r.stdout + r.stderr
    assert r.stdout == "step 10\tacc 0.5\n\\x1b]0;pwned\\x07\\x1b[2Jcleared\n", r.stdout


@pytest.mark.parametrize("case, expect", [
    ("line break", "RAY_AUTH_TOKEN: Ray's auth token holds spaces, line breaks"),
    ("not utf-8", "RAY_AUTH_TOKEN: Ray's auth token is not UTF-8 (byte 0xff"),
    ("empty file", "Ray's auth token is empty"),
    ("file not utf-8", "Ray's auth token is not UTF-8"),
    ("no file", "no such file"),
    ("fifo", "not a regular file"),
])
def test_a_token_that_cannot_be_sent_is_named_not_blamed_on_the_server(head, tmp_path, case, expect):
    """A job server that wants Ray's token (HTTP 401) and a token of ours that no request can carry:
    the line names the variable or file, not the server's answer ("not a Ray job server's")."""
    url = head({"/api/version": (401, "text/plain", "unauthorized")})
    token = tmp_path / "t" / "token"
    token.parent.mkdir()
    env = {"HOME": str(tmp_path / "t"), "RAY_AUTH_TOKEN": ""}
    if case == "line break":
        env["RAY_AUTH_TOKEN"] = "abc\ndef"
    elif case == "not utf-8":
        env["RAY_AUTH_TOKEN"] = os.fsdecode(b"ab\xffc")
    else:
        env["RAY_AUTH_TOKEN_PATH"] = str(token)
        if case == "empty file":
            token.write_bytes(b" \n")
        elif case == "file not utf-8":
            token.write_bytes(b"ab\xffc\n")
        elif case == "fifo":
            os.mkfifo(token)
    before = snapshot(tmp_path)
    r = sweeper("job", "status", "sweep-x-1", "--address", url, cwd=tmp_path, env=env, timeout=HANG_GUARD_S)
    line = assert_refused(r, expect, root=tmp_path, before=before)
    assert "job server's" not in line, line
