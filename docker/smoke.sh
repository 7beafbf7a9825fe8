#!/usr/bin/env bash
# Build the image for real and run `sweeper validate` and a few-step `sweeper trial` inside it.
#
#   bash docker/smoke.sh                      # BASE_IMAGE unset: a local stand-in base (docker/image.sh)
#   BASE_IMAGE=rayproject/ray:2.60.0-py311-cpu bash docker/smoke.sh   # where Docker Hub is reachable
#
# docker/image.sh starts dockerd (no iptables, no bridge) if none runs, and stops it after; it
# builds on the stand-in base with the local CPU torch wheel where no registry is reachable.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "[docker-smoke] $*"; }
source docker/image.sh
trap image_cleanup EXIT

ensure_dockerd
build_image

run() { docker run --rm --network none "$IMAGE" "$@"; }
log "image runs as: $(run id -u):$(run id -g)"
log "sweeper validate search_spaces/smoke.yaml"
run sweeper validate search_spaces/smoke.yaml --samples 1
log "sweeper trial tiny --steps 20"
run sweeper trial tiny --steps 20 --threads 1 | tail -n 3
log "data files installed with the packages: $(run python -c 'import pathlib, trainables; from experiments.dat_reproduction import SPACES; n = len(list(SPACES.glob("*.yaml"))); assert n, "no reproduction spaces"; print(n, "reproduction spaces,", len(list((pathlib.Path(trainables.__file__).parent / "presets").glob("*.yaml"))), "presets")')"
log "torch in the image: $(run python -c 'import torch; print(torch.__version__, "cuda" if torch.version.cuda else "no cuda")')"
if run sh -c 'pip list 2>/dev/null | grep -i "^nvidia-"'; then echo "CUDA wheels in the CPU image" >&2; exit 1; fi
log "no nvidia-* (CUDA) wheels in the image; size $(docker image inspect -f '{{.Size}}' "$IMAGE" | awk '{printf "%.1f GB", $1/1e9}')"
log "OK: $IMAGE built, validated a space and trained a trial"
