#!/usr/bin/env bash
# The maxsimd demo: installs the build dependencies (Debian/Ubuntu), builds
# the server and maxsimctl, starts the server, loads a synthetic clustered
# corpus, runs a rerank query and a full-scan query, shows the server's
# metrics, and shuts the server down with SIGTERM.
#
# On a machine with an NVIDIA GPU (and the CUDA toolkit) the server ranks on
# the GPU; elsewhere it uses the CPU backend and the demo runs the same way.
#
# Environment overrides:
#   BUILD_DIR     build directory (default: <repo>/build)
#   DEMO_DIR      demo data and server log (default: $BUILD_DIR/demo)
#   PORT          gRPC port (default: 50051, or the next free one)
#   METRICS_PORT  Prometheus port (default: 9464, or the next free one)
#   DEMO_DOCS     documents in the synthetic corpus (default: 3000)
#   SERVER_FLAGS  extra flags for the server, e.g. "--cpu"
#   SKIP_BUILD=1  skip steps 1 and 2 and use the binaries already in BUILD_DIR
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build}"
DEMO_DIR="${DEMO_DIR:-$BUILD_DIR/demo}"
DEMO_DOCS="${DEMO_DOCS:-3000}"
SERVER_FLAGS="${SERVER_FLAGS:-}"
SKIP_BUILD="${SKIP_BUILD:-0}"
CORPUS=demo

section() { printf '\n\033[1m==== %s ====\033[0m\n' "$*"; }
die() { printf 'demo: error: %s\n' "$*" >&2; exit 1; }

SERVER_PID=""
SERVER_LOG=""
cleanup() {
  local rc=$?
  if [[ -n "$SERVER_PID" ]] && kill -0 "$SERVER_PID" 2>/dev/null; then
    echo "demo: stopping the server (pid $SERVER_PID)" >&2
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    for _ in $(seq 50); do
      kill -0 "$SERVER_PID" 2>/dev/null || break
      sleep 0.2
    done
    kill -KILL "$SERVER_PID" 2>/dev/null || true
  fi
  if [[ $rc -ne 0 && -n "$SERVER_LOG" && -f "$SERVER_LOG" ]]; then
    echo "demo: failed (exit $rc); last lines of $SERVER_LOG:" >&2
    tail -n 30 "$SERVER_LOG" >&2 || true
  fi
}
trap cleanup EXIT

# ---------------------------------------------------------------------------
# CUDA for the GPUs of this machine only (a first build stays short; the
# image carries every GPU from Ampere on), and no CUDA without a GPU: the
# CPU backend then serves the demo.
cuda_flags() {
  local nvcc="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
  if [[ -x "$nvcc" ]] && nvidia-smi -L >/dev/null 2>&1; then
    echo "-DMAXSIMD_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=$nvcc -DMAXSIMD_CUDA_ARCHS=native"
  else
    echo "-DMAXSIMD_WITH_CUDA=OFF"
  fi
}

build() {
  # shellcheck disable=SC2046  # cuda_flags prints a list of flags
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    $(cuda_flags)
  # Only what the demo runs; the test suites build with the README's second
  # command.
  cmake --build "$BUILD_DIR" --target maxsimd maxsimctl
}

if [[ "$SKIP_BUILD" == 1 ]]; then
  section "1-2. Skipped (SKIP_BUILD=1): using the binaries in $BUILD_DIR"
else
  section "1. Build dependencies"
  "$ROOT/scripts/install_deps.sh"
  section "2. Configure and build (Release) into $BUILD_DIR"
  build
fi
SERVER="$BUILD_DIR/server/maxsimd"
CTL="$BUILD_DIR/client/maxsimctl"
[[ -x "$SERVER" ]] || die "server binary not found at $SERVER"
[[ -x "$CTL" ]] || die "maxsimctl not found at $CTL"

# ---------------------------------------------------------------------------
section "3. Start the server"
# True when something accepts connections on 127.0.0.1:$1.
port_in_use() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
  local port=$1
  for _ in $(seq 100); do
    if ! port_in_use "$port"; then
      echo "$port"
      return 0
    fi
    port=$((port + 1))
  done
  die "no free port in [$1, $port)"
}
PORT="${PORT:-$(free_port 50051)}"
METRICS_PORT="${METRICS_PORT:-$(free_port 9464)}"
[[ "$METRICS_PORT" != "$PORT" ]] || METRICS_PORT="$(free_port $((PORT + 1)))"
TARGET="127.0.0.1:$PORT"
mkdir -p "$DEMO_DIR"
SERVER_LOG="$DEMO_DIR/server.log"
ctl() { "$CTL" --target="$TARGET" "$@"; }

# shellcheck disable=SC2086  # SERVER_FLAGS is a list of flags
"$SERVER" --listen="$TARGET" --metrics_listen="127.0.0.1:$METRICS_PORT" \
  $SERVER_FLAGS >"$SERVER_LOG" 2>&1 &
SERVER_PID=$!
echo "server pid $SERVER_PID on $TARGET, metrics on 127.0.0.1:$METRICS_PORT"
echo "log: $SERVER_LOG"
for attempt in $(seq 120); do
  kill -0 "$SERVER_PID" 2>/dev/null || die "the server exited during start-up"
  if ctl --timeout=2s health >/dev/null 2>&1; then
    echo "health: SERVING (after ${attempt} checks)"
    break
  fi
  ((attempt < 120)) || die "the server did not report SERVING within 60 s"
  sleep 0.5
done

# ---------------------------------------------------------------------------
section "4. Generate a clustered corpus and load it"
DATA="$DEMO_DIR/data"
ctl generate --out "$DATA" --docs "$DEMO_DOCS" --dim 128 --queries 2 --seed 7
ctl create --name "$CORPUS" --dim 128 --dtype float16
ctl add --corpus "$CORPUS" --tokens "$DATA/tokens.npy" \
  --cu-seqlens "$DATA/cu_seqlens.npy" --ids "$DATA/ids.txt"
echo
ctl list

# Prints a query's ranking and checks that the document the query was built
# from ranks first. $1: query index; the rest: extra maxsimctl query flags.
run_query() {
  local i=$1
  shift
  local source out top
  source="$(<"$DATA/query_$i.source")"
  echo "query_$i.npy was built from document $source (tokens of it plus noise)"
  out="$(ctl query --corpus "$CORPUS" --query "$DATA/query_$i.npy" --top-k 5 "$@")"
  echo "$out"
  top="$(echo "$out" | awk '$1 == "1" { print $2; exit }')"
  if [[ "$top" == "$source" ]]; then
    echo "=> top hit is $top, the source document"
  else
    die "expected $source at rank 1, got '${top:-nothing}'"
  fi
}

# ---------------------------------------------------------------------------
section "5a. Rerank: query 0 against its 100 candidates"
run_query 0 --candidates-file "$DATA/candidates_0.txt"

section "5b. Scan: query 1 against all $DEMO_DOCS documents"
run_query 1

section "5c. Metrics excerpt (curl /metrics | grep ^maxsimd_)"
if metrics="$(curl -sf "http://127.0.0.1:$METRICS_PORT/metrics")"; then
  grep '^maxsimd_' <<<"$metrics" | grep -v '_bucket{' | head -n 25 || true
else
  echo "(could not fetch http://127.0.0.1:$METRICS_PORT/metrics)"
fi

# ---------------------------------------------------------------------------
section "6. Stop the server (SIGTERM)"
kill -TERM "$SERVER_PID"
for _ in $(seq 300); do
  kill -0 "$SERVER_PID" 2>/dev/null || break
  sleep 0.1
done
if kill -0 "$SERVER_PID" 2>/dev/null; then
  die "the server did not exit within 30 s of SIGTERM"
fi
if wait "$SERVER_PID"; then
  rc=0
else
  rc=$?
fi
SERVER_PID=""
[[ $rc -eq 0 ]] || die "the server exited with status $rc"
echo "server exited 0"
echo
echo "Demo complete. Data: $DATA; server log: $SERVER_LOG"
