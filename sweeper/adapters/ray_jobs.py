"""Ray's job API, the client side: the one module that imports ray.job_submission.

`sweeper submit` sends a sweep to a remote cluster as a Ray job; `sweeper job status|logs|stop`
looks after it. Every failure to reach the job server is one line (a ConfigError).
"""

from __future__ import annotations

import asyncio
import os
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from trainables.errors import ConfigError

TERMINAL = ("SUCCEEDED", "FAILED", "STOPPED")


def check_job_server(address: str, timeout_s: float = 5.0) -> None:
    """One line when `address` is not the HTTP address of a Ray job server that answers."""
    if not address.startswith(("http://", "https://")):
        raise ConfigError(f"--address {address}: the Ray dashboard's HTTP address expected, e.g. http://HEAD:8265")
    try:
        urllib.request.urlopen(f"{address.rstrip('/')}/api/version", timeout=timeout_s).close()
    except urllib.error.HTTPError as err:
        if err.code != 401:
            raise ConfigError(f"--address {address}: not a Ray job server (HTTP {err.code} on /api/version)") from None
        use_token(address)
    except (urllib.error.URLError, OSError, ValueError) as err:
        raise ConfigError(f"--address {address}: Ray job server unreachable ({getattr(err, 'reason', err)}); "
                          "start the cluster, or port-forward its dashboard port 8265") from None


def use_token(address: str) -> None:
    """The job server wants Ray's auth token: send ours (Ray's client sends it only in token mode)."""
    if os.environ.get("RAY_AUTH_MODE", "token") != "token":
        raise ConfigError(f"--address {address}: the job server requires a token, but RAY_AUTH_MODE is "
                          f"{os.environ['RAY_AUTH_MODE']}; unset it and provide the cluster's token")
    token_file = Path(os.environ.get("RAY_AUTH_TOKEN_PATH", Path.home() / ".ray" / "auth_token"))
    if not os.environ.get("RAY_AUTH_TOKEN") and not token_file.is_file():
        raise ConfigError(f"--address {address}: the job server requires Ray's auth token; set RAY_AUTH_TOKEN "
                          f"or put it in {token_file} (docs/deploy.md)")
    os.environ["RAY_AUTH_MODE"] = "token"


def client_for(address: str):
    check_job_server(address)  # before ray is imported: Ray reads RAY_AUTH_MODE once, at import
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError) as err:
        raise ConfigError(f"--address {address}: {str(err).splitlines()[0]}") from None


AGENT_WAIT_S = 60.0  # a head that just started answers before its job agent is up


def submit_job(client, timeout_s: float = AGENT_WAIT_S, **kwargs) -> str:
    """`client.submit_job(**kwargs)`, retried while the head says its job agent is not up yet
    (Ray's HTTP 500 "No available agent to submit job": the dashboard answers a few seconds before
    the agent that runs jobs is ready, longer on a loaded head). Nothing was submitted on such an
    answer, so the retry with the same submission id cannot make a second job."""
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
                print("waiting for the head's job agent (it starts a few seconds after the head)", file=sys.stderr, flush=True)
                said = True
        time.sleep(pause)
        pause = min(pause * 2, 5.0)


def alive_nodes(address: str) -> int:
    from ray.util.state import list_nodes

    return len(list_nodes(address=address, filters=[("state", "=", "ALIVE")], timeout=10))


def follow(client, job_id: str) -> int:
    """Print the job's logs as they come until it ends; its outcome is the exit code."""

    async def tail() -> None:
        async for chunk in client.tail_job_logs(job_id):
            print(chunk, end="", flush=True)

    try:
        asyncio.run(tail())
    except KeyboardInterrupt:
        print(f"\nstopped following; the job runs on (sweeper job stop {job_id} to stop it)", file=sys.stderr)
        return 130
    info = wait(client, job_id, timeout_s=30)
    print(f"job {job_id}: {info.status.value}", file=sys.stderr)
    if info.status.value == "SUCCEEDED":
        return 0
    return 2 if info.driver_exit_code == 2 else 1  # 2: the launch on the cluster refused its input


def wait(client, job_id: str, timeout_s: float):
    deadline = time.monotonic() + timeout_s
    info = client.get_job_info(job_id)
    while info.status.value not in TERMINAL and time.monotonic() < deadline:
        time.sleep(0.5)
        info = client.get_job_info(job_id)
    return info


def known_job(client, job_id: str, address: str):
    try:
        return client.get_job_info(job_id)
    except RuntimeError as err:
        if "404" in str(err) or "does not exist" in str(err):
            raise ConfigError(f"{job_id}: no such job on {address}") from None
        raise
