"""`sweeper submit`: run a sweep on a remote Ray cluster as a Ray job, and look after the job.

    preflight (space, job server, storage, tracking server)  ->  JobSubmissionClient.submit_job
        entrypoint:  sweeper launch SPACE --address auto --storage S --tracking-uri U
        runtime env: a working directory holding only the search-space file
    ->  job id;  --follow tails its logs;  later: `sweeper job status|logs|stop JOB` (sweeper/commands/job.py)

The cluster brings the code: `sweeper` on the PATH of its nodes (the image of docker/). The Ray job
client is sweeper/adapters/ray_jobs.py.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import sys
import tempfile
import uuid
from pathlib import Path

from trainables.config import ConfigError

from sweeper.adapters.ray_jobs import AGENT_WAIT_S, CALL_TIMEOUT_S, alive_nodes, ask, client_for, follow, submit_job
from sweeper.sweep_dir import is_uri
from sweeper.space_file import load_space



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
    from sweeper.tracking_uri import hide_password, resolve_uri

    uri = resolve_uri(cli_value)
    if not uri.startswith(("http://", "https://")):
        raise ConfigError(f"--tracking-uri {hide_password(uri)}: a local store the cluster cannot see; pass an MLflow server "
                          "the cluster reaches, e.g. --tracking-uri http://mlflow:5000 (k8s/)")
    return uri


def launch_command(space_name: str, storage: str, shared: bool, uri: str, experiment: str | None, restart: bool) -> str:
    """The job's entrypoint: `sweeper launch` on the head, joining the cluster it runs on."""
    argv = ["sweeper", "launch", space_name, "--address", "auto", "--storage", storage, "--tracking-uri", uri]
    argv += ["--shared-storage"] if shared else []
    argv += ["--experiment", experiment] if experiment else []
    argv += ["--restart"] if restart else []
    return shlex.join(argv)


def submit(args: argparse.Namespace) -> int:
    spec = load_space(args.file)  # every user mistake in the file surfaces here, before any request
    uri = check_tracking(args.tracking_uri)
    client = client_for(args.address)
    nodes = alive_nodes(args.address)
    check_storage(args.storage, args.shared_storage, nodes)
    entrypoint = launch_command(Path(args.file).name, args.storage, args.shared_storage and not is_uri(args.storage),
                                uri, args.experiment, args.restart)
    with tempfile.TemporaryDirectory() as upload:  # the job's working directory: just the space file
        shutil.copyfile(args.file, Path(upload) / Path(args.file).name)
        job_id = ask(args.address, "the submission", submit_job, client, bound_s=AGENT_WAIT_S + CALL_TIMEOUT_S,
                     entrypoint=entrypoint, runtime_env={"working_dir": upload},
                     submission_id=f"sweep-{spec.name}-{uuid.uuid4().hex[:8]}", metadata={"sweep": spec.name},
                     say=to_stderr)
    print(job_id)
    print(f"submitted sweep {spec.name} to {args.address} ({nodes} node{'s' * (nodes != 1)}): {entrypoint}", file=sys.stderr)
    if not args.follow:
        print(f"follow it: sweeper job logs {job_id} --follow --address {args.address}", file=sys.stderr)
        return 0
    return follow(client, job_id, args.address, show, to_stderr)


def show(chunk: str) -> None:
    print(chunk, end="", flush=True)


def to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    moved = next((f for f in ("status", "logs", "stop") if getattr(args, f"old_{f}", None)), None)
    if moved:
        raise ConfigError(f"submit --{moved}: moved: sweeper job {moved} {getattr(args, f'old_{moved}')}"
                          f"{' --follow' if moved == 'logs' and args.follow else ''}")
    if not args.file:
        raise ConfigError("submit: a search-space file to submit (a submitted job: sweeper job status|logs|stop JOB)")
    args.address = args.address or os.environ.get("RAY_API_SERVER_ADDRESS") or os.environ.get("RAY_ADDRESS")
    if not args.address:
        raise ConfigError("--address: required: the Ray dashboard of the cluster, e.g. http://HEAD:8265")
    return submit(args)
