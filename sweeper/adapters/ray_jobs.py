"""Ray's job API, the client side: the one module that imports ray.job_submission.

`sweeper submit` sends a sweep to a remote cluster as a Ray job; `sweeper job status|logs|stop`
looks after it. Every failure to reach the job server is one line (a ConfigError), and so is
every answer that is not a Ray job server's: an HTTP error (500, 502 from a proxy), an HTML page,
JSON of another shape, a job status Ray does not define. Ray's client sets no timeout on its
requests, so each call runs in a thread of its own and is given up after CALL_TIMEOUT_S: a server
that accepts the connection and never answers costs one line after that bound, not a hang.
"""

from __future__ import annotations

import asyncio
import contextlib
import http.client
import os
import re
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable, Iterator, Mapping

from core.errors import ConfigError, cut, one_line
from core.http_address import address_problem
from core.uri_secrets import shown, split_user

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")
CALL_TIMEOUT_S = 15.0  # one request to the job server; a head under load answers within a few seconds


class JobServerError(ConfigError):
    """An answer of the job server that is not usable, as one line; `status` is its HTTP code, if any."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


ADDRESS_VARIABLES = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")  # read by Ray's own job CLI, in this order


def dashboard_address(given: str | None, environ: Mapping[str, str]) -> tuple[str, str]:
    """The job server's address and where it came from: --address, else Ray's own variables."""
    if given:
        return given, "--address"
    for name in ADDRESS_VARIABLES:
        if environ.get(name):
            return environ[name], name
    raise ConfigError("--address: required: the Ray dashboard of the cluster, e.g. http://HEAD:8265 (or $RAY_ADDRESS)")


@contextlib.contextmanager
def named_as(source: str) -> Iterator[None]:
    """A refusal about the address names it as the user gave it (RAY_ADDRESS, not --address)."""
    try:
        yield
    except ConfigError as err:
        if source != "--address" and str(err).startswith("--address "):
            err.args = (source + str(err).removeprefix("--address"),)
        raise


def ask(address: str, what: str, fn, /, *args, bound_s: float = CALL_TIMEOUT_S, **kwargs):
    """`fn(*args, **kwargs)`, a call of Ray's job client, bounded by `bound_s` seconds and with any
    failure turned into one JobServerError line naming the address and the request."""
    box: dict = {}

    def call() -> None:
        try:
            box["value"] = fn(*args, **kwargs)
        except BaseException as err:  # noqa: BLE001  (handed to the caller's thread)
            box["error"] = err

    worker = threading.Thread(target=call, name=f"ray-jobs {what}", daemon=True)  # a hung request dies with us
    worker.start()
    worker.join(bound_s)
    if worker.is_alive():
        raise JobServerError(f"--address {shown(address)}: no answer to {what} within {bound_s:.0f} s; is the "
                             "cluster's dashboard up, and is the address its port 8265?")
    if "error" not in box:
        return box["value"]
    err = box["error"]
    if isinstance(err, (ConfigError, KeyboardInterrupt, SystemExit)):
        raise err
    raise describe(address, what, err) from None


def describe(address: str, what: str, err: BaseException) -> JobServerError:
    """One line for a failed call of Ray's job client."""
    text = one_line(str(err) or type(err).__name__, 2000)
    code = re.search(r"status code (\d{3})", text)
    if code:
        status = int(code.group(1))
        return JobServerError(f"--address {shown(address)}: the job server answered {what} with HTTP {status}"
                              f"{' (not found)' if status == 404 else ''}", status)
    if isinstance(err, (ConnectionError, OSError)) and not isinstance(err, ValueError):  # (requests' JSON error is both)
        return JobServerError(f"--address {shown(address)}: Ray job server unreachable during {what} ({cut(text, 100)})")
    if "does not exist" in text:
        return JobServerError(f"--address {shown(address)}: {what}: {cut(text, 120)}", 404)
    return JobServerError(f"--address {shown(address)}: the answer to {what} is not a Ray job server's "
                          f"({type(err).__name__}: {cut(text, 100)})")


def check_job_server(address: str, timeout_s: float = 5.0) -> None:
    """One line when `address` is not the HTTP address of a Ray job server that answers."""
    if not address.startswith(("http://", "https://")):
        raise ConfigError(f"--address {shown(address)}: the Ray dashboard's HTTP address expected, e.g. http://HEAD:8265")
    if not address.isprintable() or " " in address:
        raise ConfigError(f"--address {shown(address)}: a URL holds no spaces or control characters")
    if (problem := address_problem(address)) is not None:
        raise ConfigError(f"--address {shown(address)}: {problem}; the Ray dashboard's HTTP address, e.g. http://HEAD:8265")
    url, credentials = split_user(address)  # urllib takes no user part in a URL: it goes as a header
    try:
        urllib.request.urlopen(urllib.request.Request(f"{url.rstrip('/')}/api/version", headers=credentials),
                               timeout=timeout_s).close()
    except urllib.error.HTTPError as err:
        if err.code != 401:
            raise ConfigError(f"--address {shown(address)}: not a Ray job server (HTTP {err.code} on /api/version)") from None
        use_token(address)
    except (urllib.error.URLError, http.client.HTTPException, OSError, ValueError) as err:
        raise ConfigError(f"--address {shown(address)}: Ray job server unreachable ({getattr(err, 'reason', err)}); "
                          "start the cluster, or port-forward its dashboard port 8265") from None


def use_token(address: str) -> None:
    """The job server wants Ray's auth token: send ours (Ray's client sends it only in token mode)."""
    if os.environ.get("RAY_AUTH_MODE", "token") != "token":
        raise ConfigError(f"--address {shown(address)}: the job server requires a token, but RAY_AUTH_MODE is "
                          f"{os.environ['RAY_AUTH_MODE']}; unset it and provide the cluster's token")
    token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
    if not os.environ.get("RAY_AUTH_TOKEN") and not os.path.lexists(token_file) and "RAY_AUTH_TOKEN_PATH" not in os.environ:
        raise ConfigError(f"--address {shown(address)}: the job server requires Ray's auth token; set RAY_AUTH_TOKEN "
                          f"or put it in {token_file} (docs/deploy.md)")
    check_token(token_file)
    os.environ["RAY_AUTH_MODE"] = "token"


MAX_TOKEN_BYTES = 64 * 1024


def check_token(token_file: Path) -> None:
    """Ray's auth token, where Ray takes it from (RAY_AUTH_TOKEN, else the file), as one line when it
    cannot be sent: a mistake of ours, not an answer of the server's (as Ray's client would report it)."""
    from sweeper.fs import read_limited

    if os.environ.get("RAY_AUTH_TOKEN"):
        where, raw = "RAY_AUTH_TOKEN", os.environb.get(b"RAY_AUTH_TOKEN", b"")
    else:
        where = f"RAY_AUTH_TOKEN_PATH {cut(str(token_file), 100)}" if "RAY_AUTH_TOKEN_PATH" in os.environ else str(token_file)
        raw = read_limited(token_file, "Ray's auth token file", MAX_TOKEN_BYTES)
    try:
        token = raw.decode("utf-8").strip()
    except UnicodeDecodeError as err:
        raise ConfigError(f"{where}: Ray's auth token is not UTF-8 (byte {raw[err.start]:#04x} at {err.start}); "
                          "set the cluster's token (docs/deploy.md)") from None
    if not token:
        raise ConfigError(f"{where}: Ray's auth token is empty; set the cluster's token (docs/deploy.md)")
    if not token.isascii() or not token.isprintable() or any(c.isspace() for c in token):
        raise ConfigError(f"{where}: Ray's auth token holds spaces, line breaks or other characters a request header "
                          "cannot carry; set the cluster's token (docs/deploy.md)")


def client_for(address: str):
    check_job_server(address)  # before ray is imported: Ray reads RAY_AUTH_MODE once, at import
    from ray.job_submission import JobSubmissionClient

    return ask(address, "the version check", JobSubmissionClient, address)


AGENT_WAIT_S = 60.0  # a head that just started answers before its job agent is up


def submit_job(client, timeout_s: float = AGENT_WAIT_S, say: Callable[[str], None] = lambda text: None, **kwargs) -> str:
    """`client.submit_job(**kwargs)`, retried while the head says its job agent is not up yet
    (Ray's HTTP 500 "No available agent to submit job": the dashboard answers a few seconds before
    the agent that runs jobs is ready, longer on a loaded head). Nothing was submitted on such an
    answer, so the retry with the same submission id cannot make a second job. `say` hears of the wait."""
    deadline, pause, said = time.monotonic() + timeout_s, 0.5, False
    while True:
        try:
            return client.submit_job(**kwargs)
        except RuntimeError as err:
            if "No available agent" not in str(err):
                raise
            if time.monotonic() + pause > deadline:
                raise ConfigError(f"the cluster's job agent did not come up in {timeout_s:.0f} s (Ray: "
                                  f"{str(err).splitlines()[0][:160]}); check the head's dashboard agent and submit again") from None
            if not said:
                say("waiting for the head's job agent (it starts a few seconds after the head)")
                said = True
        time.sleep(pause)
        pause = min(pause * 2, 5.0)


def alive_nodes(address: str) -> int:
    from ray.util.state import list_nodes

    nodes = ask(address, "the list of nodes", list_nodes, address=address, filters=[("state", "=", "ALIVE")], timeout=10)
    return len(nodes)


def follow(client, job_id: str, address: str, show: Callable[[str], None], say: Callable[[str], None]) -> int:
    """Hand the job's logs to `show` as they come until it ends, then `say` its outcome, which is
    the exit code."""

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            show(chunk)

    try:
        asyncio.run(tail())
    except KeyboardInterrupt:
        say(f"\nstopped following; the job runs on (sweeper job stop {job_id} to stop it)")
        return 130
    except Exception as err:  # noqa: BLE001  (the log stream's own errors: websocket, HTTP, a cut connection)
        raise describe(address, "the log stream", err) from None
    info = wait(client, job_id, 30, address)
    say(f"job {job_id}: {info.status.value}")
    if info.status.value == "SUCCEEDED":
        return 0
    return 2 if info.driver_exit_code == 2 else 1  # 2: the launch on the cluster refused its input


def job_info(client, job_id: str, address: str):
    """The job's details (a status Ray does not define, or any other shape, is one line)."""
    return ask(address, "the job's status", client.get_job_info, job_id)


def wait(client, job_id: str, timeout_s: float, address: str):
    """The job's details once it has ended, or after `timeout_s`."""
    deadline = time.monotonic() + timeout_s
    info = job_info(client, job_id, address)
    while info.status.value not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)
        info = job_info(client, job_id, address)
    return info


def known_job(client, job_id: str, address: str):
    try:
        return job_info(client, job_id, address)
    except JobServerError as err:
        if err.status == 404:
            raise ConfigError(f"{cut(job_id, 80)}: no such job on {shown(address)}") from None
        raise
