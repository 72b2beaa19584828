#!/usr/bin/env bash
# The scheduler and index concurrency tests under ThreadSanitizer (CUDA off),
# in build-tsan. Debian's abseil is not built with TSan, so its mutexes,
# condition variables and notifications are made visible by preloading
# tests/sanitizers/tsan_absl_sync.cc (tests/sanitizers/README.md). Any report
# fails the test that made it.
#
# Environment: BUILD_DIR (default <repo>/build-tsan), JOBS (default nproc).
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD_DIR="${BUILD_DIR:-$ROOT/build-tsan}"
JOBS="${JOBS:-$(nproc)}"
TESTS=(scheduler_test thread_pool_test corpus_test sharded_corpus_test)
FLAGS="-fsanitize=thread -fno-omit-frame-pointer"

echo "== sanitizers: TSan, ${TESTS[*]} ($BUILD_DIR)"
cmake -S "$ROOT" -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DMAXSIMD_WITH_CUDA=OFF -DCMAKE_CXX_FLAGS="$FLAGS" -DCMAKE_C_FLAGS="$FLAGS" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O2 -g1 -DNDEBUG" \
  -DCMAKE_EXE_LINKER_FLAGS="-fsanitize=thread" \
  -DCMAKE_SHARED_LINKER_FLAGS="-fsanitize=thread"
cmake --build "$BUILD_DIR" -j "$JOBS" --target "${TESTS[@]}"
# The shim itself is not instrumented: it only forwards and annotates.
g++ -std=c++17 -O2 -fPIC -shared -Wall -Wextra \
  "$ROOT/tests/sanitizers/tsan_absl_sync.cc" -o "$BUILD_DIR/libtsan_absl_sync.so" \
  -labsl_synchronization -labsl_time -ldl
export TSAN_OPTIONS="halt_on_error=1 second_deadlock_stack=1"
# The job can pass and can fail: with the shim, a mutex and a condition wait
# must be clean and an unguarded counter must be reported.
g++ -std=c++17 -O1 -g1 -fsanitize=thread "$ROOT/tests/sanitizers/tsan_probe.cc" \
  -o "$BUILD_DIR/tsan_probe" -labsl_synchronization -lpthread
for mode in locked await racy; do
  status=0
  LD_PRELOAD="$BUILD_DIR/libtsan_absl_sync.so" "$BUILD_DIR/tsan_probe" "$mode" \
    >"$BUILD_DIR/tsan_probe_$mode.log" 2>&1 || status=$?
  expected=0
  [[ $mode == racy ]] && expected=66  # TSan's exit code on a report
  if [[ $status -ne $expected ]]; then
    echo "tsan.sh: the probe's $mode mode exited $status:" >&2
    cat "$BUILD_DIR/tsan_probe_$mode.log" >&2
    exit 1
  fi
  echo "probe $mode: exit $status"
done
# Left out: the int8 ranking comparisons, single-threaded scoring that TSan
# slows some fifty times (five and a half of the job's seven minutes in
# CI); the sharded fan-out they go through is the other sharded tests' too,
# and ASan runs them (scripts/sanitize.sh).
declare -A FILTER=(
  [corpus_test]="-Int8RankingTest.*"
  [sharded_corpus_test]="-*Int8CorpusMatchesOneBackendOrIsRefused*"
)
# Each binary runs as JOBS gtest shards at once (TSan's slowdown is mostly
# single-threaded scoring); a shard's log is shown when it fails.
rc=0
for t in "${TESTS[@]}"; do
  bin=$(find "$BUILD_DIR/tests" -name "$t" -type f -executable | head -1)
  echo "== $t ($JOBS shards)"
  pids=()
  for ((i = 0; i < JOBS; ++i)); do
    GTEST_TOTAL_SHARDS=$JOBS GTEST_SHARD_INDEX=$i \
      LD_PRELOAD="$BUILD_DIR/libtsan_absl_sync.so" "$bin" --gtest_brief=1 \
      --gtest_filter="${FILTER[$t]:-*}" >"$BUILD_DIR/$t.shard$i.log" 2>&1 &
    pids+=($!)
  done
  for ((i = 0; i < JOBS; ++i)); do
    if wait "${pids[$i]}"; then
      tail -2 "$BUILD_DIR/$t.shard$i.log"
    else
      cat "$BUILD_DIR/$t.shard$i.log"
      rc=1
    fi
  done
done
exit $rc
