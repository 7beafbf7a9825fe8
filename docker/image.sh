# Shared by docker/smoke.sh and docker/cluster.sh (sourced, not run): a running dockerd and the
# CPU image built from docker/Dockerfile.
#
#   log() { echo "[my-script] $*"; }    # the caller's log prefix
#   source docker/image.sh
#   trap image_cleanup EXIT             # or call it from the caller's own EXIT trap
#   ensure_dockerd                      # starts dockerd (no iptables, no bridge) if none answers
#   build_image                         # -> $IMAGE
#
# With BASE_IMAGE unset (no registry to pull the Ray image from), the base is a local stand-in:
# Debian bookworm (Python 3.11) from debootstrap, shaped like the Ray image (user ray, uid 1000,
# gid 100, Python env in /home/ray/anaconda3), imported with `docker import`; its root file
# system is cached in $ROOTFS_CACHE. The CPU torch wheel comes from pip's find-links folder
# ($TORCH_WHEEL_DIR, default /opt/wheels) through docker/wheels/, so no CUDA wheel is downloaded.

IMAGE=${IMAGE:-dat-sweeper:smoke-cpu}
STANDIN=dat-sweeper-standin:bookworm
ROOTFS_CACHE=${ROOTFS_CACHE:-/var/tmp/dat-sweeper-standin.tar}
TORCH_WHEEL_DIR=${TORCH_WHEEL_DIR:-/opt/wheels}
DOCKERD_LOG=${DOCKERD_LOG:-/var/tmp/dat-sweeper-dockerd.log}

started_dockerd=

image_cleanup() {
  rm -f docker/wheels/*.whl
  if [ -n "$started_dockerd" ]; then
    log "stopping dockerd ($started_dockerd)"
    kill "$started_dockerd" 2>/dev/null || true
    wait "$started_dockerd" 2>/dev/null || true
    started_dockerd=
  fi
}

ensure_dockerd() {
  docker info >/dev/null 2>&1 && return
  command -v dockerd >/dev/null || { echo "dockerd not found: apt-get install docker.io" >&2; exit 2; }
  log "starting dockerd --iptables=false --bridge=none (log: $DOCKERD_LOG)"
  dockerd --iptables=false --bridge=none >"$DOCKERD_LOG" 2>&1 &
  started_dockerd=$!
  for _ in $(seq 60); do docker info >/dev/null 2>&1 && break; sleep 1; done
  docker info >/dev/null
}

standin_base() {
  docker image inspect "$STANDIN" >/dev/null 2>&1 && return
  if [ ! -s "$ROOTFS_CACHE" ]; then
    command -v debootstrap >/dev/null || { echo "debootstrap not found: apt-get install debootstrap" >&2; exit 2; }
    local rootfs
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
}

build_image() {
  local build_args=(--build-arg VARIANT=cpu)
  if [ -z "${BASE_IMAGE:-}" ]; then
    standin_base
    build_args+=(--build-arg BASE_IMAGE="$STANDIN" --build-arg TORCH_CPU_INDEX=)
    cp "$TORCH_WHEEL_DIR"/torch-*+cpu-*.whl docker/wheels/
  else
    build_args+=(--build-arg BASE_IMAGE="$BASE_IMAGE")
  fi
  log "docker build ${build_args[*]} -t $IMAGE"
  local start=$SECONDS
  DOCKER_BUILDKIT=0 docker build --network host -f docker/Dockerfile "${build_args[@]}" -t "$IMAGE" . 2>&1 | tail -n 3
  rm -f docker/wheels/*.whl
  log "built in $((SECONDS - start))s"
}
