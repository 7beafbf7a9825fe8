"""`sweeper submit`: run a sweep on a remote Ray cluster as a Ray job, and look after the job.

    preflight (space, job server, storage, tracking server)  ->  JobSubmissionClient.submit_job
        entrypoint:  sweeper launch SPACE --address auto --storage S --tracking-uri U
        runtime env: a working directory holding only the search-space file
    ->  job id;  --follow tails its logs;  later: `sweeper job status|logs|stop JOB` (sweeper/commands/job.py)

The cluster brings the code: `sweeper` on the PATH of its nodes (the image of docker/). The Ray job
client is sweeper/adapters/ray_jobs.py.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import os
import shlex
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from trainables.config import ConfigError

from core.errors import visible
from core.uri_secrets import hide_password
from sweeper.adapters.ray_jobs import (AGENT_WAIT_S, CALL_TIMEOUT_S, alive_nodes, ask, client_for, dashboard_address,
                                       follow, named_as, submit_job)
from sweeper.sweep_dir import is_uri
from sweeper.space_file import load_space


@dataclass(frozen=True)
class Options:
    """What the command line gives `sweeper submit`."""

    file: str | None
    address: str | None
    storage: str | None
    shared_storage: bool
    tracking_uri: str | None
    experiment: str | None
    restart: bool
    follow: bool
    old_status: str | None
    old_logs: str | None
    old_stop: str | None


def check_storage(storage: str | None, shared: bool, nodes: int) -> None:
    """Trial results must outlive the job and, on more than one node, be seen by every node."""
    if not storage:
        raise ConfigError("--storage: required for a job: an absolute path on the cluster "
                          "(with --shared-storage if all nodes mount it)")
    if is_uri(storage):
        raise ConfigError(f"--storage {storage}: trials keep their checkpoints in folders of their own, so the storage "
                          "must be an absolute path every node mounts (NFS, a ReadWriteMany volume), not object storage")
    if not storage.startswith("/"):
        raise ConfigError(f"--storage {storage}: a relative path would land in the job's temporary working "
                          "directory; give an absolute path on the cluster")
    if nodes > 1 and not shared:
        raise ConfigError(f"--storage {storage}: the cluster has {nodes} nodes and a local path is not shared; "
                          "pass --shared-storage if every node mounts it (NFS, a ReadWriteMany volume)")


def check_tracking(cli_value: str | None) -> str:
    """The tracking store must be a server (the cluster cannot see a file on this machine).
    Whether the cluster reaches it, `sweeper launch` checks on the head before any trial starts."""
    from sweeper.tracking_uri import hide_password, is_server, resolve_uri

    uri = resolve_uri(cli_value)
    if not is_server(uri):
        raise ConfigError(f"--tracking-uri {hide_password(uri)}: a local store the cluster cannot see; pass an MLflow server "
                          "the cluster reaches, e.g. --tracking-uri http://mlflow:5000 (k8s/)")
    return uri


def launch_command(space_name: str, storage: str, shared: bool, uri: str, experiment: str | None, restart: bool) -> str:
    """The job's entrypoint: `sweeper launch` on the head, joining the cluster it runs on. A file
    named like an option (`-h`, `--restart`) is given as `./NAME`, so it stays the file."""
    shown = f"./{space_name}" if space_name.startswith("-") else space_name
    argv = ["sweeper", "launch", shown, "--address", "auto", "--storage", storage, "--tracking-uri", uri]
    argv += ["--shared-storage"] if shared else []
    argv += ["--experiment", experiment] if experiment else []
    argv += ["--restart"] if restart else []
    return shlex.join(argv)


def submit(options: Options) -> int:
    spec = load_space(options.file)  # every user mistake in the file surfaces here, before any request
    uri = check_tracking(options.tracking_uri)
    client = client_for(options.address)
    nodes = alive_nodes(options.address)
    check_storage(options.storage, options.shared_storage, nodes)
    entrypoint = launch_command(Path(options.file).name, options.storage, options.shared_storage and not is_uri(options.storage),
                                uri, options.experiment, options.restart)
    with tempfile.TemporaryDirectory() as upload:  # the job's working directory: just the space file
        shutil.copyfile(options.file, Path(upload) / Path(options.file).name)
        job_id = ask(options.address, "the submission", submit_job, client, bound_s=AGENT_WAIT_S + CALL_TIMEOUT_S,
                     entrypoint=entrypoint, runtime_env={"working_dir": upload},
                     submission_id=f"sweep-{spec.name}-{uuid.uuid4().hex[:8]}", metadata={"sweep": spec.name},
                     say=to_stderr)
    print(job_id)
    print(f"submitted sweep {spec.name} to {hide_password(options.address)} ({nodes} node{'s' * (nodes != 1)}): {entrypoint}", file=sys.stderr)
    if not options.follow:
        print(f"follow it: sweeper job logs {job_id} --follow --address {hide_password(options.address)}", file=sys.stderr)
        return 0
    return follow(client, job_id, options.address, show, to_stderr)


def show(chunk: str) -> None:
    """Text a job server sent (a job's logs): its control characters, terminal escapes among them,
    shown as escapes, its lines and tabs as they are."""
    print(visible(chunk, keep="\n\t"), end="", flush=True)


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(options: Options) -> int:
    moved = next((f for f in ("status", "logs", "stop") if getattr(options, f"old_{f}", None)), None)
    if moved:
        raise ConfigError(f"submit --{moved}: moved: sweeper job {moved} {getattr(options, f'old_{moved}')}"
                          f"{' --follow' if moved == 'logs' and options.follow else ''}")
    if not options.file:
        raise ConfigError("submit: a search-space file to submit (a submitted job: sweeper job status|logs|stop JOB)")
    address, source = dashboard_address(options.address, os.environ)
    with named_as(source):
        return submit(dataclasses.replace(options, address=address))
