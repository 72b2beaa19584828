#!/usr/bin/env bash
# Smoke test of bench/loadgen against the real server: starts maxsimd on the
# CPU backend with a small synthetic corpus, runs about a second of open-loop
# load (random candidate ids, so the default id scheme must match the demo
# corpus), a few closed-loop scans, a few blocking closed-loop reranks and
# a few busy-polling ones, and checks loadgen's exit status and JSON report: every measured request
# sent and answered OK, achieved_qps > 0.
#
# Usage: loadgen_smoke.sh MAXSIMD_BIN LOADGEN_BIN
set -euo pipefail

server_bin=$1
loadgen_bin=$2
work=$(mktemp -d)
server_pid=
cleanup() {
  if [[ -n $server_pid ]]; then
    kill "$server_pid" 2>/dev/null || true
    wait "$server_pid" || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT

# Port 0 lets the server pick a free port, which it logs once it serves. The
# log exists before the server starts, so that polling it never fails.
: >"$work/server.log"
# LOADGEN_SMOKE_DOCS: a smaller corpus for sanitizer builds, which score
# slower (tests/bench/CMakeLists.txt).
"$server_bin" --cpu --listen=127.0.0.1:0 --metrics_listen= \
  --demo_docs="${LOADGEN_SMOKE_DOCS:-200}" \
  >"$work/server.log" 2>&1 &
server_pid=$!
port=
for _ in $(seq 100); do
  port=$(sed -n 's/.*serving on port \([0-9][0-9]*\).*/\1/p' "$work/server.log")
  [[ -n $port ]] && break
  if ! kill -0 "$server_pid" 2>/dev/null; then break; fi
  sleep 0.1
done
if [[ -z $port ]]; then
  echo "loadgen_smoke: the server did not start:" >&2
  cat "$work/server.log" >&2
  exit 1
fi

# check REPORT REQUESTS: one point, REQUESTS sent, all OK, achieved_qps > 0.
check() {
  python3 - "$1" "$2" <<'PY'
import json, sys
report = json.load(open(sys.argv[1]))
want = int(sys.argv[2])
assert len(report["points"]) == 1, report
p = report["points"][0]
assert p["sent"] == want and p["not_sent"] == 0, p
assert p["ok"] == want and p["errors"] == 0, p
assert p["status_codes"] == {"OK": want}, p
assert p["achieved_qps"] > 0 and p["latency_ms"]["p50"] > 0, p
print(f"{sys.argv[1]}: {p['achieved_qps']:.1f} QPS, "
      f"p50 {p['latency_ms']['p50']:.2f} ms")
PY
}

"$loadgen_bin" --target="127.0.0.1:$port" --mode=open --rate=50 \
  --requests=40 --duration=10s --warmup=0.2s --candidates=20 --channels=2 \
  --json="$work/open.json"
check "$work/open.json" 40

"$loadgen_bin" --target="127.0.0.1:$port" --mode=closed --concurrency=2 \
  --requests=10 --duration=10s --warmup=0s --dtype=fp16 \
  --json="$work/closed.json"
check "$work/closed.json" 10

"$loadgen_bin" --target="127.0.0.1:$port" --mode=closed --concurrency=2 \
  --blocking --requests=10 --duration=10s --warmup=0s --candidates=5 \
  --json="$work/blocking.json"
check "$work/blocking.json" 10

"$loadgen_bin" --target="127.0.0.1:$port" --mode=closed --concurrency=1 \
  --blocking --busy_poll --requests=10 --duration=10s --warmup=0s \
  --candidates=5 --json="$work/busy_poll.json"
check "$work/busy_poll.json" 10
