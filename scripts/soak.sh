#!/usr/bin/env bash
# The soak test (tests/soak/README.md): builds the server (CUDA off) in a
# build directory of its own, generates the Python client's stubs, and runs
# tests/soak/soak.py for SECONDS of mixed query, add, delete, compaction and
# alias-swap load. Prints the summary and writes it as JSON; exits non-zero
# when a check fails.
#
# Usage: scripts/soak.sh [SECONDS] [soak.py flag ...]
#   SECONDS  of load (default SOAK_SECONDS, else 600: the 10-minute run);
#            further arguments go to soak.py (e.g. --seed=7)
# Environment:
#   BUILD_DIR  build directory, also where the stubs and soak.json go
#              (default <repo>/build-soak)
#   SERVER     a prebuilt maxsimd to soak instead of building one, e.g. a
#              bundle's bin/maxsimd (scripts/bundle.sh) on a machine with an
#              NVIDIA GPU, with LD_LIBRARY_PATH naming the bundle's lib/
#   BACKEND    cpu (default: the server runs with --cpu) or gpu (without
#              it; the reference then rounds queries as the GPU stages them)
#   MAXSIMD_STUBS_DIR  Python stubs generated beforehand (client/python/
#              build_stubs.py), for a machine without python3-grpc-tools;
#              default: generated into BUILD_DIR
#   PYTHON     interpreter (default: the first python3 that imports grpc,
#              numpy and, to generate the stubs, grpc_tools)
#   JOBS       build jobs (default nproc)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-soak}"
JOBS="${JOBS:-$(nproc)}"
BACKEND="${BACKEND:-cpu}"
DURATION="${SOAK_SECONDS:-600}"
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then
  DURATION="$1"
  shift
fi

MODULES="grpc, numpy"
[[ -n "${MAXSIMD_STUBS_DIR:-}" ]] || MODULES="$MODULES, grpc_tools"
if [[ -z "${PYTHON:-}" ]]; then
  for candidate in "$(command -v python3 || true)" /usr/bin/python3; do
    if [[ -x "$candidate" ]] && "$candidate" -c "import $MODULES" 2>/dev/null
    then
      PYTHON="$candidate"
      break
    fi
  done
fi
if [[ -z "${PYTHON:-}" ]]; then
  echo "soak.sh: no python3 that imports $MODULES; run" \
    "scripts/install_deps.sh (or set PYTHON)" >&2
  exit 1
fi

if [[ -z "${SERVER:-}" ]]; then
  echo "== soak: build maxsimd (CUDA off, $BUILD_DIR)"
  cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DMAXSIMD_WITH_CUDA=OFF >/dev/null
  cmake --build "$BUILD_DIR" --target maxsimd -j "$JOBS"
  SERVER="$BUILD_DIR/server/maxsimd"
fi
[[ -x "$SERVER" ]] || {
  echo "soak.sh: $SERVER is not an executable" >&2
  exit 1
}

STUBS="${MAXSIMD_STUBS_DIR:-}"
if [[ -z "$STUBS" ]]; then
  # Where the python_client_stubs test of the same build directory puts
  # them.
  STUBS="$BUILD_DIR/tests/python/stubs"
  echo "== soak: Python stubs ($STUBS)"
  "$PYTHON" "$ROOT/client/python/build_stubs.py" "$STUBS" \
    --proto-dir "$ROOT/proto"
fi
mkdir -p "$BUILD_DIR"

echo "== soak: $DURATION s, backend $BACKEND, server $SERVER"
MAXSIMD_STUBS_DIR="$STUBS" PYTHONDONTWRITEBYTECODE=1 \
  "$PYTHON" "$ROOT/tests/soak/soak.py" --server "$SERVER" \
  --backend "$BACKEND" --duration "$DURATION" \
  --json "$BUILD_DIR/soak.json" "$@"
