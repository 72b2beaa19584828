#!/usr/bin/env bash
# One command for the GPU side of maxsimd: build, GPU tests, benchmarks.
#
#   bench/run_gpu.sh build     configure + build the kernels, GPU tests and
#                              benchmark (sm_90a, static cudart), then bundle
#                              them with their shared libraries in .bundle/
#   bench/run_gpu.sh run       on a machine with an NVIDIA GPU: run the GPU
#                              tests, then the benchmark; logs and JSON go to
#                              $OUT (if set) or .bundle/out
#   bench/run_gpu.sh sanitize  compute-sanitizer memcheck + racecheck on the
#                              small GPU tests
#   bench/run_gpu.sh all       build, then run
#
# Environment: BUILD_DIR (default build-gpu), BENCH_ARGS (extra arguments of
# maxsim_bench, e.g. "--only colbert_scan_100k"), GTEST_FILTER.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
build_dir=${BUILD_DIR:-$root/build-gpu}
bundle=$root/.bundle
tests=(maxsim_scan_test maxsim_gather_test topk_test gpu_backend_test)

build() {
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMAXSIMD_BUILD_SERVER=OFF -DMAXSIMD_WITH_CUDA=ON \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc
  cmake --build "$build_dir" --target maxsim_bench "${tests[@]}"
  rm -rf "$bundle"
  local bins=(bench/maxsim_bench)
  for t in "${tests[@]}"; do bins+=("tests/kernels/$t"); done
  "$root/scripts/bundle.sh" "$build_dir" "$bundle" "${bins[@]}"
}

out_dir() {
  local out=${OUT:-$bundle/out}
  mkdir -p "$out"
  echo "$out"
}

run() {
  export LD_LIBRARY_PATH=$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  local out
  out=$(out_dir)
  nvidia-smi --query-gpu=name,memory.total,clocks.sm,clocks.mem,driver_version \
    --format=csv | tee "$out/device.txt"
  local failed=0 summary=""
  for t in "${tests[@]}"; do
    if "$bundle/bin/$t" --gtest_filter="${GTEST_FILTER:-*}" >"$out/$t.log" 2>&1; then
      :
    else
      failed=1
    fi
    summary+="$(printf '%-20s %s' "$t" "$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/$t.log" | tr '\n' ' ')")"$'\n'
    grep -E '^\[  FAILED  \]|Failure|MAXSIMD_TEST_SEED' "$out/$t.log" | head -20 || true
  done
  # The same scoring suites on the mma.sync kernels (the path of widths the
  # TMA kernel does not take).
  for t in maxsim_scan_test maxsim_gather_test; do
    if MAXSIMD_TEST_KERNELS=mma "$bundle/bin/$t" --gtest_filter="${GTEST_FILTER:-*}" \
      >"$out/$t.mma.log" 2>&1; then
      :
    else
      failed=1
    fi
    summary+="$(printf '%-20s %s' "$t (mma)" "$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/$t.mma.log" | tr '\n' ' ')")"$'\n'
    grep -E '^\[  FAILED  \]|Failure|MAXSIMD_TEST_SEED' "$out/$t.mma.log" | head -20 || true
  done
  set +e
  "$bundle/bin/maxsim_bench" --json "$out/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
  local bench_rc=${PIPESTATUS[0]}
  set -e
  echo
  echo "GPU tests:"
  printf '%s' "$summary"
  echo "benchmark exit code: $bench_rc (table above; JSON in $out/bench.json)"
  [[ $failed -eq 0 && $bench_rc -eq 0 ]]
}

sanitize() {
  export LD_LIBRARY_PATH=$bundle/lib:/usr/local/cuda/lib64:${LD_LIBRARY_PATH:-}
  local out
  out=$(out_dir)
  local filter='GpuScanTest.OneTokenAndEmptyDocuments:GpuScanTest.DeletedDocumentsAreSkipped'
  local rc=0
  for tool in memcheck racecheck; do
    for t in maxsim_scan_test maxsim_gather_test topk_test; do
      local f=$filter
      [[ $t == maxsim_gather_test ]] && f='GpuGatherTest.DuplicatesAreScoredAsGivenAndDeletedSkipped'
      [[ $t == topk_test ]] && f='GpuTopKTest.KOneHundredAnd4096AndAboveDocumentCount'
      compute-sanitizer --tool "$tool" --error-exitcode 9 "$bundle/bin/$t" \
        --gtest_filter="$f" >"$out/sanitizer_${tool}_$t.log" 2>&1 || rc=1
      echo "$tool $t: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/sanitizer_${tool}_$t.log" | tail -1)"
    done
  done
  return $rc
}

case ${1:-} in
  build) build ;;
  run) run ;;
  sanitize) sanitize ;;
  all) build && run ;;
  *) sed -n '2,16p' "$0" >&2; exit 1 ;;
esac
