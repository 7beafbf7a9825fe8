"""`sweeper job status|logs|stop JOB`: a sweep submitted with `sweeper submit`, as a Ray job.

(`sweeper status NAME` is the state of a sweep from its directory; this is the state of the
Ray job that runs one on a remote cluster.) The Ray job client is sweeper/adapters/ray_jobs.py.
"""

from __future__ import annotations

import argparse
import os

from core.errors import ConfigError, one_line

from sweeper.adapters.ray_jobs import TERMINAL, ask, client_for, follow, known_job, wait
from sweeper.commands.submit import show, to_stderr


def address(args: argparse.Namespace) -> str:
    value = args.address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")
    if not value:
        raise ConfigError("--address: required: the Ray dashboard of the cluster, e.g. http://HEAD:8265 (or $RAY_ADDRESS)")
    return value


def status(args: argparse.Namespace) -> int:
    where = address(args)
    info = known_job(client_for(where), args.job, where)
    print(f"{args.job}: {info.status.value}" + (f" ({one_line(str(info.message), 200)})" if info.message else ""))
    return 0


def logs(args: argparse.Namespace) -> int:
    where = address(args)
    client = client_for(where)
    known_job(client, args.job, where)
    if args.follow:
        return follow(client, args.job, where, show, to_stderr)
    text = ask(where, "the job's logs", client.get_job_logs, args.job)
    if not isinstance(text, str):
        raise ConfigError(f"--address {where}: the answer to the job's logs is not text")
    print(text, end="")
    return 0


def stop(args: argparse.Namespace) -> int:
    where = address(args)
    client = client_for(where)
    known_job(client, args.job, where)
    ask(where, "the stop", client.stop_job, args.job)
    info = wait(client, args.job, 60, where)
    print(f"{args.job}: {info.status.value}")
    return 0 if info.status.value in TERMINAL else 1
