"""`sweeper job status|logs|stop JOB`: a sweep submitted with `sweeper submit`, as a Ray job.

(`sweeper status NAME` is the state of a sweep from its directory; this is the state of the
Ray job that runs one on a remote cluster.) The Ray job client is sweeper/adapters/ray_jobs.py.
"""

from __future__ import annotations

from dataclasses import dataclass

import os

from core.errors import ConfigError, one_line

from sweeper.adapters.ray_jobs import TERMINAL, ask, client_for, follow, known_job, shown, wait
from sweeper.commands.submit import show, to_stderr


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper job` ACTION."""

    job: str
    address: str | None
    follow: bool = False


def address(options: Options) -> str:
    value = options.address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")
    if not value:
        raise ConfigError("--address: required: the Ray dashboard of the cluster, e.g. http://HEAD:8265 (or $RAY_ADDRESS)")
    return value


def status(options: Options) -> int:
    where = address(options)
    info = known_job(client_for(where), options.job, where)
    print(f"{options.job}: {info.status.value}" + (f" ({one_line(str(info.message), 200)})" if info.message else ""))
    return 0


def logs(options: Options) -> int:
    where = address(options)
    client = client_for(where)
    known_job(client, options.job, where)
    if options.follow:
        return follow(client, options.job, where, show, to_stderr)
    text = ask(where, "the job's logs", client.get_job_logs, options.job)
    if not isinstance(text, str):
        raise ConfigError(f"--address {shown(where)}: the answer to the job's logs is not text")
    print(text, end="")
    return 0


def stop(options: Options) -> int:
    where = address(options)
    client = client_for(where)
    known_job(client, options.job, where)
    ask(where, "the stop", client.stop_job, options.job)
    info = wait(client, options.job, 60, where)
    print(f"{options.job}: {info.status.value}")
    return 0 if info.status.value in TERMINAL else 1
