#!/usr/bin/env bash
# Build the image for real and run `sweeper validate` and a few-step `sweeper trial` inside it.
#
#   bash docker/smoke.sh                      # BASE_IMAGE unset: a local stand-in base (below)
#   BASE_IMAGE=rayproject/ray:2.60.0-py311-cpu bash docker/smoke.sh   # where Docker Hub is reachable
#
# With no registry to pull the Ray image from, the stand-in is Debian bookworm (Python 3.11)
# from debootstrap, shaped like the Ray image (user ray, uid 1000, gid 100, Python env in
# /home/ray/anaconda3), imported with `docker import`. The CPU torch wheel comes from pip's
# find-links folder ($TORCH_WHEEL_DIR, default /opt/wheels) through docker/wheels/, so no CUDA
# wheel is downloaded. Starts dockerd (no iptables, no bridge) if none runs, and stops it after.
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-dat-sweeper:smoke-cpu}
STANDIN=dat-sweeper-standin:bookworm
ROOTFS_CACHE=${ROOTFS_CACHE:-/var/tmp/dat-sweeper-standin.tar}
TORCH_WHEEL_DIR=${TORCH_WHEEL_DIR:-/opt/wheels}
log() { echo "[docker-smoke] $*"; }

started_dockerd=
cleanup() {
  rm -f docker/wheels/*.whl
  if [ -n "$started_dockerd" ]; then log "stopping dockerd ($started_dockerd)"; kill "$started_dockerd"; wait "$started_dockerd" 2>/dev/null || true; fi
}
trap cleanup EXIT

if ! docker info >/dev/null 2>&1; then
  command -v dockerd >/dev/null || { echo "dockerd not found: apt-get install docker.io" >&2; exit 2; }
  log "starting dockerd --iptables=false --bridge=none"
  dockerd --iptables=false --bridge=none >/var/tmp/dat-sweeper-dockerd.log 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null
fi

build_args=(--build-arg VARIANT=cpu)
if [ -z "${BASE_IMAGE:-}" ]; then
  if ! docker image inspect "$STANDIN" >/dev/null 2>&1; then
    if [ ! -s "$ROOTFS_CACHE" ]; then
      command -v debootstrap >/dev/null || { echo "debootstrap not found: apt-get install debootstrap" >&2; exit 2; }
      rootfs=$(mktemp -d /var/tmp/standin.XXXXXX) && chmod 755 "$rootfs"  # it becomes /
      log "debootstrap bookworm -> $rootfs"
      debootstrap --variant=minbase --include=python3,python3-venv,ca-certificates bookworm "$rootfs" http://deb.debian.org/debian >/dev/null
      cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"  # this machine's CAs for pip
      chroot "$rootfs" useradd --uid 1000 --gid 100 --create-home --shell /bin/bash ray
      chroot "$rootfs" su ray -c 'python3 -m venv /home/ray/anaconda3'
      rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
      tar -C "$rootfs" -cf "$ROOTFS_CACHE" .
      rm -rf "$rootfs"
    fi
    log "docker import $ROOTFS_CACHE -> $STANDIN"
    docker import --change 'USER ray' --change 'WORKDIR /home/ray' \
      --change 'ENV PIP_CERT=/etc/ssl/certs/ca-certificates.crt' \
      --change 'ENV PATH=/home/ray/anaconda3/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      "$ROOTFS_CACHE" "$STANDIN" >/dev/null
  fi
  build_args+=(--build-arg BASE_IMAGE="$STANDIN" --build-arg TORCH_CPU_INDEX=)
  cp "$TORCH_WHEEL_DIR"/torch-*+cpu-*.whl docker/wheels/
else
  build_args+=(--build-arg BASE_IMAGE="$BASE_IMAGE")
fi

log "docker build ${build_args[*]} -t $IMAGE"
SECONDS=0
DOCKER_BUILDKIT=0 docker build --network host -f docker/Dockerfile "${build_args[@]}" -t "$IMAGE" . 2>&1 | tail -n 3
log "built in ${SECONDS}s"

run() { docker run --rm --network none "$IMAGE" "$@"; }
log "image runs as: $(run id -u):$(run id -g)"
log "sweeper validate search_spaces/smoke.yaml"
run sweeper validate search_spaces/smoke.yaml --samples 1
log "sweeper trial tiny --steps 20"
run sweeper trial tiny --steps 20 --threads 1 | tail -n 3
log "torch in the image: $(run python -c 'import torch; print(torch.__version__, "cuda" if torch.version.cuda else "no cuda")')"
if run sh -c 'pip list 2>/dev/null | grep -i "^nvidia-"'; then echo "CUDA wheels in the CPU image" >&2; exit 1; fi
log "no nvidia-* (CUDA) wheels in the image; size $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.1f GB", $1/1e9}')"
log "OK: $IMAGE built, validated a space and trained a trial"
