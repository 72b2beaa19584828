#!/usr/bin/env bash
# Builds the libFuzzer targets of tests/fuzz with clang-14 (ASan + UBSan)
# in a build directory of their own, runs each for SECONDS from its seed
# corpus, and prints per target the executions, exec/s and crashes. Exits
# non-zero when any target crashed, ran out of memory or timed out.
#
# Usage: scripts/fuzz.sh [SECONDS] [TARGET ...]
#   SECONDS  per target (default FUZZ_SECONDS, else 600: the 10-minute run)
#   TARGET   npy safetensors json zip torch_file plaid storage request
#            (default: all)
# Environment:
#   BUILD_DIR      build directory (default <repo>/build-fuzz)
#   FUZZ_PARALLEL  targets run at once (default 1)
#   FUZZ_OUT       where new corpus entries, crash artifacts and logs go
#                  (default: a temporary directory, removed after a clean
#                  run and kept after a failure); never the repository
#   JOBS           build jobs (default nproc)
#   NICE           nice level of the fuzzers (default 10)
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-fuzz}"
JOBS="${JOBS:-$(nproc)}"
NICE="${NICE:-10}"
PARALLEL="${FUZZ_PARALLEL:-1}"
DURATION="${FUZZ_SECONDS:-600}"
if [[ $# -gt 0 && "$1" =~ ^[0-9]+$ ]]; then
  DURATION="$1"
  shift
fi
ALL=(npy safetensors json zip torch_file plaid storage request)
TARGETS=("$@")
((${#TARGETS[@]} > 0)) || TARGETS=("${ALL[@]}")

# Longest input per target: above its largest seed, small enough to keep
# the executions fast.
declare -A MAX_LEN=([npy]=4096 [safetensors]=8192 [json]=4096 [zip]=8192
  [torch_file]=16384 [plaid]=16384 [storage]=16384 [request]=32768)
for t in "${TARGETS[@]}"; do
  [[ -n "${MAX_LEN[$t]:-}" ]] || {
    echo "fuzz.sh: unknown target '$t' (targets: ${ALL[*]})" >&2
    exit 2
  }
done

for tool in clang-14 clang++-14; do
  command -v "$tool" >/dev/null || {
    echo "fuzz.sh: $tool not found; run scripts/install_deps.sh" >&2
    exit 1
  }
done

echo "== fuzz: configure and build (clang-14, $BUILD_DIR)"
# -O1 without NDEBUG, as libFuzzer's documentation advises; no tests, no
# benchmarks, no CUDA: only the fuzz targets and the libraries they link
# are built.
CC=clang-14 CXX=clang++-14 cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja \
  -DMAXSIMD_FUZZ=ON -DMAXSIMD_WITH_CUDA=OFF -DMAXSIMD_BUILD_TESTS=OFF \
  -DMAXSIMD_BUILD_BENCH=OFF -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g" >/dev/null
cmake --build "$BUILD_DIR" -j "$JOBS" --target \
  "${TARGETS[@]/#/fuzz_}"

if [[ -n "${FUZZ_OUT:-}" ]]; then
  OUT="$FUZZ_OUT"
  KEEP=1
else
  OUT="$(mktemp -d "${TMPDIR:-/tmp}/maxsimd-fuzz.XXXXXX")"
  KEEP=0
fi
mkdir -p "$OUT"
# The directory readers' scratch directories (tests/fuzz/fuzz_support.h),
# removed even when a fuzzer dies without cleaning up.
SCRATCH="$(mktemp -d /dev/shm/maxsimd-fuzz.XXXXXX 2>/dev/null ||
  mktemp -d "${TMPDIR:-/tmp}/maxsimd-fuzz-scratch.XXXXXX")"
trap 'rm -rf "$SCRATCH"' EXIT
export MAXSIMD_FUZZ_SCRATCH="$SCRATCH"

# run_target NAME: one fuzzing run; its log, new inputs and artifacts go
# under $OUT/NAME.
run_target() {
  local t="$1" dir="$OUT/$1"
  mkdir -p "$dir/corpus" "$dir/artifacts"
  local rc=0 dict=()
  if [[ -f "$ROOT/tests/fuzz/dict/$t.dict" ]]; then
    dict=(-dict="$ROOT/tests/fuzz/dict/$t.dict")
  fi
  # New inputs go to the first corpus directory (ours, temporary); the
  # seeds are read from the second.
  nice -n "$NICE" "$BUILD_DIR/tests/fuzz/fuzz_$t" "${dict[@]}" \
    "$dir/corpus" "$ROOT/tests/fuzz/corpus/$t" \
    -max_total_time="$DURATION" -max_len="${MAX_LEN[$t]}" \
    -rss_limit_mb=2048 -malloc_limit_mb=2048 -timeout=10 \
    -artifact_prefix="$dir/artifacts/" -print_final_stats=1 \
    >"$dir/log" 2>&1 || rc=$?
  echo "$rc" >"$dir/rc"
}

echo "== fuzz: ${TARGETS[*]} for ${DURATION} s each, $PARALLEL at a time"
echo "   (output under $OUT)"
running=0
for t in "${TARGETS[@]}"; do
  if ((running >= PARALLEL)); then
    wait -n || true
    running=$((running - 1))
  fi
  run_target "$t" &
  running=$((running + 1))
done
wait

final_stat() {  # final_stat NAME LOG: a -print_final_stats value, or "-"
  local v
  v="$(grep -m1 "^stat::$1:" "$2" | awk '{print $2}')" || true
  echo "${v:--}"
}

failed=0
printf '%-12s %8s %12s %8s %10s %9s  %s\n' target seconds executions \
  exec/s new_units rss_mb result
for t in "${TARGETS[@]}"; do
  dir="$OUT/$t"
  rc="$(cat "$dir/rc")"
  artifacts=("$dir"/artifacts/*)
  [[ -e "${artifacts[0]}" ]] || artifacts=()
  result="ok, 0 crashes"
  if [[ "$rc" != 0 || ${#artifacts[@]} -gt 0 ]]; then
    failed=1
    result="FAILED (exit $rc, ${#artifacts[@]} artifact(s))"
  fi
  printf '%-12s %8s %12s %8s %10s %9s  %s\n' "$t" "$DURATION" \
    "$(final_stat number_of_executed_units "$dir/log")" \
    "$(final_stat average_exec_per_sec "$dir/log")" \
    "$(final_stat new_units_added "$dir/log")" \
    "$(final_stat peak_rss_mb "$dir/log")" "$result"
done

if ((failed)); then
  echo
  for t in "${TARGETS[@]}"; do
    dir="$OUT/$t"
    [[ "$(cat "$dir/rc")" == 0 ]] && continue
    echo "== $t: last lines of $dir/log"
    grep -E "ERROR|SUMMARY|Test unit written|runtime error" "$dir/log" |
      tail -n 8 || tail -n 20 "$dir/log"
    for a in "$dir"/artifacts/*; do
      [[ -e "$a" ]] || continue
      echo "   reproduce: $BUILD_DIR/tests/fuzz/fuzz_$t $a"
    done
  done
  echo "fuzz.sh: failures; logs and artifacts kept in $OUT" >&2
  exit 1
fi
if ((KEEP == 0)); then
  rm -rf "$OUT"
fi
echo "fuzz.sh: every target ran clean"
