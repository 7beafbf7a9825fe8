"""`sweeper job status|logs|stop JOB`: a sweep submitted with `sweeper submit`, as a Ray job.

(`sweeper status NAME` is the state of a sweep from its directory; this is the state of the
Ray job that runs one on a remote cluster.) The Ray job client is sweeper/adapters/ray_jobs.py.
"""

from __future__ import annotations

import os
from dataclasses import dataclass

from core.errors import ConfigError, one_line

from sweeper.adapters.ray_jobs import TERMINAL, ask, client_for, dashboard_address, follow, known_job, named_as, shown, wait
from sweeper.commands.submit import show, to_stderr


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper job` ACTION."""

    job: str
    address: str | None
    follow: bool = False


def status(options: Options) -> int:
    where, source = dashboard_address(options.address, os.environ)
    with named_as(source):
        info = known_job(client_for(where), options.job, where)
    print(f"{options.job}: {info.status.value}" + (f" ({one_line(str(info.message), 200)})" if info.message else ""))
    return 0


def logs(options: Options) -> int:
    where, source = dashboard_address(options.address, os.environ)
    with named_as(source):
        client = client_for(where)
        known_job(client, options.job, where)
        if options.follow:
            return follow(client, options.job, where, show, to_stderr)
        text = ask(where, "the job's logs", client.get_job_logs, options.job)
        if not isinstance(text, str):
            raise ConfigError(f"--address {shown(where)}: the answer to the job's logs is not text")
    show(text)
    return 0


def stop(options: Options) -> int:
    where, source = dashboard_address(options.address, os.environ)
    with named_as(source):
        client = client_for(where)
        known_job(client, options.job, where)
        ask(where, "the stop", client.stop_job, options.job)
        info = wait(client, options.job, 60, where)
    print(f"{options.job}: {info.status.value}")
    return 0 if info.status.value in TERMINAL else 1
