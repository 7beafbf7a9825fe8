#!/usr/bin/env bash
# The image as a real Ray cluster: a head and a worker container started from it, an MLflow server
# container, and `sweeper submit SPACE --follow` from this machine against the head's job server.
#
#   bash docker/cluster.sh                    # make docker-cluster; SPACE=search_spaces/smoke.yaml
#   KEEP=1 bash docker/cluster.sh             # keep the shared volume (results, MLflow db) afterwards
#
# Builds the image as docker/smoke.sh does (docker/image.sh). Every container uses the host's
# network (dockerd may run with --bridge=none), with loopback addresses: the head's node IP is
# 127.0.0.2, the worker's 127.0.0.3 (one each, so each trial's result says which node ran it;
# Ray replaces 127.0.0.1 itself by the machine's address), the dashboard and job server on
# 127.0.0.1; every port picked free. Ray's token auth is on, with a token made for this run.
#
# Shared between the containers, at the same path: $WORK/sweeps -> /mnt/sweeps, the sweep's
# storage (Ray Tune results and checkpoints written by trials on either node, the Optuna study,
# status.json). MLflow runs in a third container from the same image (as k8s/base/mlflow.yaml
# does), on 127.0.0.1 with its SQLite store and artifacts in $WORK/mlflow; trials on both nodes
# and the driver log to it over HTTP. At the end: the nodes, where each trial ran, the MLflow
# runs (docker/cluster_check.py); then every container is removed and a dockerd this script
# started is stopped.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[docker-cluster] $*"; }
source docker/image.sh

SPACE=${SPACE:-search_spaces/smoke.yaml}
PY=${PY:-.venv/bin/python}   # the host side: sweeper submit, the checks
SWEEPER=${SWEEPER:-.venv/bin/sweeper}
CPUS=1                       # per node: one trial at a time on each, two cores in all
RUN_ID=$$
containers=()
WORK=

cleanup() {
  local rc=$?
  if [ "$rc" -ne 0 ]; then
    for c in "${containers[@]}"; do log "last lines of $c:"; docker logs --tail 15 "$c" 2>&1 | sed 's/^/    /'; done
  fi
  if [ "${#containers[@]}" -gt 0 ]; then
    log "removing containers: ${containers[*]}"
    docker rm -f "${containers[@]}" >/dev/null 2>&1 || true
  fi
  if [ -n "$WORK" ] && [ -z "${KEEP:-}" ]; then rm -rf "$WORK"; elif [ -n "$WORK" ]; then log "kept $WORK"; fi
  image_cleanup
  exit "$rc"
}
trap cleanup EXIT

[ -x "$PY" ] && [ -x "$SWEEPER" ] || { echo "$PY / $SWEEPER missing: make install first" >&2; exit 2; }
ensure_dockerd
build_image

# ports, all free now; the two nodes share the host's network, so none may be a default twice
read -r GCS DASH CLIENT AGENT_HEAD AGENT_WORKER MLFLOW < <("$PY" -c '
import socket
socks = [socket.socket() for _ in range(6)]
for s in socks: s.bind(("127.0.0.1", 0))
print(*[s.getsockname()[1] for s in socks])')
DASHBOARD=http://127.0.0.1:$DASH
TRACKING=http://127.0.0.1:$MLFLOW
export RAY_AUTH_MODE=token RAY_USAGE_STATS_ENABLED=0
RAY_AUTH_TOKEN=$("$PY" -c 'import secrets; print(secrets.token_hex(32))')
export RAY_AUTH_TOKEN  # into the containers by name (-e RAY_AUTH_TOKEN), never on a command line

WORK=$(mktemp -d /var/tmp/dat-sweeper-cluster.XXXXXX)
mkdir -p "$WORK/sweeps" "$WORK/mlflow"
chown 1000:100 "$WORK/sweeps" "$WORK/mlflow" 2>/dev/null || chmod 777 "$WORK/sweeps" "$WORK/mlflow"  # the image's user

node() {  # node NAME ARGS...: a container of the image on the host network, shared volume at /mnt/sweeps
  local name=dat-sweeper-$1-$RUN_ID; shift
  containers+=("$name")
  docker run --detach --name "$name" --network host --cpus "$CPUS" --memory 4g --shm-size 256m \
    -e RAY_AUTH_MODE -e RAY_AUTH_TOKEN -e RAY_USAGE_STATS_ENABLED \
    -v "$WORK/sweeps:/mnt/sweeps" "$IMAGE" "$@" >/dev/null
}
wait_for() {  # wait_for WHAT SECONDS COMMAND...: until COMMAND succeeds
  local what=$1 limit=$2; shift 2
  for _ in $(seq "$limit"); do "$@" >/dev/null 2>&1 && return; sleep 1; done
  echo "timed out after ${limit}s waiting for $what" >&2; exit 1
}
nodes_are() { [ "$("$PY" docker/cluster_check.py nodes "$DASHBOARD")" = "$1" ]; }

SECONDS=0
log "mlflow server on $TRACKING (container, SQLite + artifacts in $WORK/mlflow)"
containers+=("dat-sweeper-mlflow-$RUN_ID")
docker run --detach --name "dat-sweeper-mlflow-$RUN_ID" --network host --cpus "$CPUS" --memory 2g \
  -v "$WORK/mlflow:/mlflow" "$IMAGE" mlflow server --host 127.0.0.1 --port "$MLFLOW" --workers 1 \
  --backend-store-uri sqlite:////mlflow/mlflow.db --artifacts-destination /mlflow/artifacts >/dev/null

ray_args=(ray start --block --disable-usage-stats --num-cpus "$CPUS" --object-store-memory 100000000)
log "ray head on 127.0.0.2:$GCS (dashboard and job server $DASHBOARD)"
node head "${ray_args[@]}" --head --node-ip-address 127.0.0.2 --port "$GCS" \
  --include-dashboard true --dashboard-host 127.0.0.1 --dashboard-port "$DASH" \
  --ray-client-server-port "$CLIENT" --dashboard-agent-listen-port "$AGENT_HEAD"
wait_for "the head" 120 nodes_are 1
log "ray worker on 127.0.0.3, joining 127.0.0.2:$GCS"
node worker "${ray_args[@]}" --address "127.0.0.2:$GCS" --node-ip-address 127.0.0.3 \
  --dashboard-agent-listen-port "$AGENT_WORKER"
wait_for "the worker to join" 120 nodes_are 2
wait_for "mlflow" 120 "$PY" -c "import urllib.request; urllib.request.urlopen('$TRACKING/health', timeout=2)"
log "cluster up in ${SECONDS}s: 2 nodes alive"

# The check's space: $SPACE with a fresh worker per trial (resources.reuse_workers: false). Each node
# has one CPU and a trial takes one, so the trials that run at once are placed on both nodes by
# Ray's resources, whichever actor comes up first (a reused worker could take every trial).
CHECK_SPACE="$WORK/$(basename "$SPACE")"
"$PY" -c "import sys, yaml; s = yaml.safe_load(open(sys.argv[1])); s.setdefault('resources', {})['reuse_workers'] = False
assert s['budget']['max_concurrent'] >= 2, 'the check needs two trials at once'
yaml.safe_dump(s, open(sys.argv[2], 'w'), sort_keys=False)" "$SPACE" "$CHECK_SPACE"
log "sweeper submit $SPACE (a fresh worker per trial) --address $DASHBOARD --storage /mnt/sweeps --shared-storage --tracking-uri $TRACKING --follow"
start=$SECONDS
"$SWEEPER" submit "$CHECK_SPACE" --address "$DASHBOARD" --storage /mnt/sweeps --shared-storage \
  --tracking-uri "$TRACKING" --follow 2>&1 | sed -u '/View run \|View experiment at/d'  # MLflow's per-run links
log "job finished in $((SECONDS - start))s"

name=$("$PY" -c "import sys, yaml; print(yaml.safe_load(open(sys.argv[1]))['name'])" "$SPACE")
"$PY" docker/cluster_check.py report "$DASHBOARD" "$WORK/sweeps/$name" "$TRACKING"
log "OK: $IMAGE ran as a 2-node Ray cluster; the sweep succeeded with trials on both nodes (${SECONDS}s after the build)"
