"""`sweeper submit`: run a sweep on a remote Ray cluster as a Ray job, and look after the job.

    preflight (space, job server, storage, tracking server)  ->  JobSubmissionClient.submit_job
        entrypoint:  sweeper launch SPACE --address auto --storage S --tracking-uri U
        runtime env: a working directory holding only the search-space file
    ->  job id;  --follow tails its logs;  later: `sweeper job status|logs|stop JOB` (sweeper/job.py)

The cluster brings the code: `sweeper` on the PATH of its nodes (the image of docker/). The only
module of the project that imports ray.job_submission (sweeper/job.py uses its client).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shlex
import shutil
import sys
import tempfile
import time
import urllib.error
import urllib.request
import uuid
from pathlib import Path

from trainables.config import ConfigError

from sweeper.launch import is_uri
from sweeper.space import load_space

SHARED_SCHEMES = ("s3://", "gs://")
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


def check_storage(storage: str | None, shared: bool, nodes: int) -> None:
    """Trial results must outlive the job and, on more than one node, be seen by every node."""
    if not storage:
        raise ConfigError("--storage: required for a job: s3://BUCKET/PATH, gs://..., or an absolute path on the "
                          "cluster (with --shared-storage if all nodes mount it)")
    if is_uri(storage):
        if not storage.startswith(SHARED_SCHEMES):
            raise ConfigError(f"--storage {storage}: unsupported scheme; use s3://, gs:// or an absolute path")
        return
    if not storage.startswith("/"):
        raise ConfigError(f"--storage {storage}: a relative path would land in the job's temporary working "
                          "directory; give an absolute path on the cluster")
    if nodes > 1 and not shared:
        raise ConfigError(f"--storage {storage}: the cluster has {nodes} nodes and a local path is not shared; "
                          "use s3:// or gs://, or pass --shared-storage if every node mounts it")


def check_tracking(cli_value: str | None) -> str:
    """The tracking store must be a server (the cluster cannot see a file on this machine).
    Whether the cluster reaches it, `sweeper launch` checks on the head before any trial starts."""
    from sweeper import tracking

    uri = tracking.resolve_uri(cli_value)
    if not uri.startswith(("http://", "https://")):
        raise ConfigError(f"--tracking-uri {uri}: a local store the cluster cannot see; pass an MLflow server "
                          "the cluster reaches, e.g. --tracking-uri http://mlflow:5000 (k8s/)")
    return uri


def launch_command(space_name: str, storage: str, shared: bool, uri: str, experiment: str | None, restart: bool) -> str:
    """The job's entrypoint: `sweeper launch` on the head, joining the cluster it runs on."""
    argv = ["sweeper", "launch", space_name, "--address", "auto", "--storage", storage, "--tracking-uri", uri]
    argv += ["--shared-storage"] if shared else []
    argv += ["--experiment", experiment] if experiment else []
    argv += ["--restart"] if restart else []
    return shlex.join(argv)


def client_for(address: str):
    check_job_server(address)  # before ray is imported: Ray reads RAY_AUTH_MODE once, at import
    from ray.job_submission import JobSubmissionClient

    try:
        return JobSubmissionClient(address)
    except (ConnectionError, RuntimeError) as err:
        raise ConfigError(f"--address {address}: {str(err).splitlines()[0]}") from None


def _alive_nodes(address: str) -> int:
    from ray.util.state import list_nodes

    return len(list_nodes(address=address, filters=[("state", "=", "ALIVE")], timeout=10))


def submit(args: argparse.Namespace) -> int:
    spec = load_space(args.file)  # every user mistake in the file surfaces here, before any request
    uri = check_tracking(args.tracking_uri)
    client = client_for(args.address)
    nodes = _alive_nodes(args.address)
    check_storage(args.storage, args.shared_storage, nodes)
    entrypoint = launch_command(Path(args.file).name, args.storage, args.shared_storage and not is_uri(args.storage),
                                uri, args.experiment, args.restart)
    with tempfile.TemporaryDirectory() as upload:  # the job's working directory: just the space file
        shutil.copyfile(args.file, Path(upload) / Path(args.file).name)
        job_id = client.submit_job(entrypoint=entrypoint, runtime_env={"working_dir": upload},
                                   submission_id=f"sweep-{spec.name}-{uuid.uuid4().hex[:8]}",
                                   metadata={"sweep": spec.name})
    print(job_id)
    print(f"submitted sweep {spec.name} to {args.address} ({nodes} node{'s' * (nodes != 1)}): {entrypoint}", file=sys.stderr)
    if not args.follow:
        print(f"follow it: sweeper job logs {job_id} --follow --address {args.address}", file=sys.stderr)
        return 0
    return follow(client, job_id)


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
