#!/usr/bin/env bash
# Builds everything (CUDA targets included when nvcc is present) and runs
# every test: the README's second command, and what CI runs.
#
# GPU tests build here too; on a machine without a GPU they report SKIPPED.
# Environment: BUILD_DIR (default <repo>/build-test), JOBS (default nproc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-test}"
JOBS="${JOBS:-$(nproc)}"

# Each phase's line carries the seconds since the start, so a CI log shows
# where the time goes (the whole run should stay under 45 minutes).
phase() { echo "== [${SECONDS} s] $*"; }

"$ROOT/scripts/install_deps.sh"

# The image check's base images (debootstrap: mostly download and disk, few
# cycles) are made meanwhile, in the background; the check waits for them.
IMAGE_BASE_LOG="$BUILD_DIR-image-base.log"
IMAGE_BASE_PID=""
if [[ -z ${SKIP_IMAGE:-} ]]; then
  mkdir -p "$(dirname "$IMAGE_BASE_LOG")"
  bash "$ROOT/scripts/image.sh" base --debian >"$IMAGE_BASE_LOG" 2>&1 &
  IMAGE_BASE_PID=$!
fi

phase "format check (clang-format, Google style)"
"$ROOT/scripts/check_format.sh"

CUDA_FLAG=-DMAXSIMD_WITH_CUDA=OFF
NVCC="${CUDACXX:-/usr/local/cuda/bin/nvcc}"
if [[ -x "$NVCC" ]]; then
  CUDA_FLAG="-DMAXSIMD_WITH_CUDA=ON -DCMAKE_CUDA_COMPILER=$NVCC"
  echo "== CUDA targets on ($("$NVCC" --version | tail -1))"
else
  echo "== no nvcc found: CUDA targets off"
fi

if [[ -x "$NVCC" ]]; then
  phase "configure against Debian's stock CMake modules (cmake-data)"
  CUDACXX="$NVCC" "$ROOT/scripts/check_stock_cmake.sh"
fi

phase "configure"
# shellcheck disable=SC2086
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  $CUDA_FLAG
phase "build"
cmake --build "$BUILD_DIR" -j "$JOBS"
phase "test"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" --timeout 600

# The image's runtime stage from this build's binaries, built with buildah
# (base from debootstrap), and its entrypoint run in the image's root file
# system as the image's user: HEALTHCHECK SERVING, a rerank, SIGTERM exits 0.
# SKIP_IMAGE=1 leaves it out, for a quicker local run.
if [[ -z ${SKIP_IMAGE:-} ]]; then
  phase "image: runtime stage with buildah, entrypoint check"
  if ! wait "$IMAGE_BASE_PID"; then
    cat "$IMAGE_BASE_LOG" >&2
    echo "test.sh: the image's base images failed" >&2
    exit 1
  fi
  cat "$IMAGE_BASE_LOG"
  bash "$ROOT/scripts/image.sh" ci "$BUILD_DIR"
fi

# A short run of every libFuzzer target (tests/fuzz), built with clang-14 in
# a build directory of its own; it replays the seed corpus and its crash
# reproducers first. scripts/fuzz.sh with no argument is the 10-minute run.
FUZZ_SMOKE_SECONDS="${FUZZ_SMOKE_SECONDS:-20}"
phase "fuzz smoke (${FUZZ_SMOKE_SECONDS} s per target, 2 at a time)"
BUILD_DIR="${FUZZ_BUILD_DIR:-$ROOT/build-fuzz}" FUZZ_PARALLEL=2 JOBS="$JOBS" \
  bash "$ROOT/scripts/fuzz.sh" "$FUZZ_SMOKE_SECONDS"

# The CPU suite again under AddressSanitizer and UndefinedBehaviorSanitizer,
# then the scheduler and index concurrency tests under ThreadSanitizer, each
# in a build directory of its own (tests/sanitizers/README.md).
# SKIP_SANITIZERS=1 leaves both out, for a quicker local run.
if [[ -z ${SKIP_SANITIZERS:-} ]]; then
  phase "ASan + UBSan"
  BUILD_DIR="${ASAN_BUILD_DIR:-$ROOT/build-asan}" JOBS="$JOBS" \
    bash "$ROOT/scripts/sanitize.sh"
  phase "TSan"
  BUILD_DIR="${TSAN_BUILD_DIR:-$ROOT/build-tsan}" JOBS="$JOBS" \
    bash "$ROOT/scripts/tsan.sh"
fi
phase "done"
