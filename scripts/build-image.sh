#!/usr/bin/env bash
# Builds inferd's image from this checkout: `docker build --tag TAG .` (default TAG: inferd).
# Where `python:3.11-slim` is neither on the engine nor pullable (no image registry), its
# stand-in is built first from the Debian archive (src/inferd/tools/base_image.py: needs root
# and Debian's mmdebstrap; the root filesystem is kept in .cache/container), as the container
# tests build it. Needs a running Docker engine (DOCKER_HOST, or the default socket).
set -euo pipefail
cd "$(dirname "$0")/.."
TAG="${1:-inferd}"
BASE=python:3.11-slim
if ! docker image inspect "$BASE" >/dev/null 2>&1; then
  if ! timeout 60 docker pull --quiet "$BASE" >/dev/null 2>&1; then
    echo "no $BASE here and none to pull: building its stand-in from the Debian archive" >&2
    python3 src/inferd/tools/base_image.py --cache .cache/container --tag "$BASE"
  fi
fi
docker build --tag "$TAG" .
echo "built $TAG: $(docker image inspect --format '{{.Size}}' "$TAG" | awk '{printf "%.0f MB", $1 / 1e6}')"
