#!/usr/bin/env bash
# One command for the GPU side of maxsimd: build, GPU tests, benchmarks.
#
#   bench/run_gpu.sh build     configure + build the kernels, GPU tests,
#                              benchmark, server, client and load generator
#                              (sm_90a, static cudart), then bundle
#                              them with their shared libraries in .bundle/
#                              and two archives: .bundle.tgz (tests and
#                              benchmarks: run, sanitize) and
#                              .bundle_service.tgz (service); carry the one
#                              a mode needs, it unpacks it into .bundle/
#   bench/run_gpu.sh run       on a machine with an NVIDIA GPU: run the GPU
#                              tests, the benchmark, then the fidelity report
#                              (top-10 overlap of each layout); logs and JSON
#                              go to $OUT (if set) or .bundle/out, and the
#                              summary bench/results keeps to summary.md
#                              there (RUN_NAME names it)
#   bench/run_gpu.sh sanitize  compute-sanitizer memcheck + racecheck on the
#                              small GPU tests
#   bench/run_gpu.sh service   on a machine with an NVIDIA GPU: the sharded
#                              and end-to-end tests on the GPU, then the
#                              service benchmark (bench/service_bench.sh;
#                              cases from SERVICE_CASES, default all)
#   bench/run_gpu.sh all       build, then run
#
# Environment: BUILD_DIR (default build-gpu), CUDA_ARCHS (default 90a, the
# GPUs benchmarked here; "80-virtual" builds compute_80 PTX alone, which the
# driver compiles at load: the path of GPUs before Hopper, on a Hopper GPU),
# BENCH_ARGS (extra arguments of maxsim_bench, e.g. "--only
# colbert_scan_100k"), GTEST_FILTER, SKIP_BENCH=1 (run: tests only; service:
# the tests without the service benchmark), BUNDLE (default .bundle: the
# bundle folder; its archives are $BUNDLE.tgz and ${BUNDLE}_service.tgz).
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/bundle_env.sh
source "$root/scripts/bundle_env.sh"
build_dir=${BUILD_DIR:-$root/build-gpu}
bundle=${BUNDLE:-$root/.bundle}
tests=(maxsim_scan_test maxsim_gather_test topk_test gpu_backend_test
  host_stream_test gpu_int8_test gpu_plaid_test gpu_kmeans_test
  gpu_backend_centroids_test)

# Service binaries and tests that also run on the GPU (path in the build).
service_bins=(server/maxsimd client/maxsimctl bench/loadgen/loadgen
  tests/index/sharded_corpus_test tests/index/placement_test
  tests/server/fault_tolerance_test tests/e2e/service_test tests/e2e/e2e_test)

# A Release build with the test-only fault points compiled in, so that the
# GPU twins of the fault tests run (an unarmed point is one relaxed atomic
# load per allocation or search); the Docker image leaves them out.
build() {
  cmake -S "$root" -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
    -DMAXSIMD_BUILD_SERVER=ON -DMAXSIMD_WITH_CUDA=ON \
    -DMAXSIMD_FAULT_INJECTION=ON -DMAXSIMD_CUDA_ARCHS="${CUDA_ARCHS:-90a}" \
    -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc
  local targets=(maxsim_bench fidelity_bench "${tests[@]}")
  for b in "${service_bins[@]}"; do targets+=("$(basename "$b")"); done
  cmake --build "$build_dir" --target "${targets[@]}"
  rm -rf "$bundle"
  mkdir -p "$bundle"
  # The machine with the GPU has no git: the bundle names its commit.
  git -C "$root" describe --always --dirty >"$bundle/COMMIT" 2>/dev/null ||
    echo unknown >"$bundle/COMMIT"
  local bins=(bench/maxsim_bench bench/fidelity_bench)
  for t in "${tests[@]}"; do bins+=("tests/kernels/$t"); done
  # The CUDA binaries compress about 4:1, yet each holds every kernel: the
  # archives are split by mode so that each travels on its own (~45 MB).
  "$root/scripts/bundle.sh" "$build_dir" "$bundle" "${bins[@]}"
  tar -C "$bundle" -czf "$bundle.tgz" COMMIT lib \
    $(for bin in "${bins[@]}"; do echo "bin/$(basename "$bin")"; done)
  "$root/scripts/bundle.sh" "$build_dir" "$bundle" "${service_bins[@]}"
  tar -C "$bundle" -czf "${bundle}_service.tgz" COMMIT lib \
    $(for bin in "${service_bins[@]}"; do echo "bin/$(basename "$bin")"; done)
  echo "bundle archives: $(du -h "$bundle.tgz" "${bundle}_service.tgz" | tr '\t\n' ' ')"
}

# Unpacks archive $1 into the bundle where its binary $2 is absent (only the
# archive was carried), and puts the bundled libraries on the search path.
ensure_bundle() {
  local archive=$1 probe=$2
  if [[ ! -x $bundle/bin/$probe && -f $archive ]]; then
    mkdir -p "$bundle"
    tar -C "$bundle" -xzf "$archive"
  fi
  use_bundle "$bundle"
}

# The sharded corpus test's GPU instances, the end-to-end tests against a
# server on the GPU, then the service benchmark (bench/service_bench.sh).
service() {
  ensure_bundle "${bundle}_service.tgz" maxsimd
  local out failed=0
  out=$(out_dir)
  if [[ -z ${SKIP_SERVICE_TESTS:-} ]]; then
    for t in sharded_corpus_test placement_test fault_tolerance_test \
      service_test e2e_test; do
      if MAXSIMD_E2E_SERVER_BIN=$bundle/bin/maxsimd \
        MAXSIMD_E2E_CTL_BIN=$bundle/bin/maxsimctl MAXSIMD_E2E_BACKEND=gpu \
        MAXSIMD_PLAID_TESTDATA=$root/tests/data/plaid \
        "$bundle/bin/$t" >"$out/$t.log" 2>&1; then
        :
      else
        failed=1
      fi
      printf '%-20s %s\n' "$t" "$(grep -E '^\[  (PASSED|FAILED|SKIPPED)  \]' "$out/$t.log" | tr '\n' ' ')"
      grep -E '^\[  FAILED  \]|Failure' "$out/$t.log" | head -10 || true
    done
  fi
  if [[ -z ${SKIP_BENCH:-} ]]; then
    "$root/bench/service_bench.sh" "$bundle/bin" "$out/service" ${SERVICE_CASES:-} || failed=1
  fi
  [[ $failed -eq 0 ]]
}

# The one summary bench/results keeps of this run ($out/summary.md; copy it
# to bench/results/<name>.md): RUN_NAME names it.
summarize() {
  local cite=()
  # Without a name there are no NOTES sections that cite the run yet.
  [[ -n ${RUN_NAME:-} ]] || cite=(--notes /dev/null)
  python3 "$root/bench/summarize_results.py" --name "${RUN_NAME:-$1}" \
    "${cite[@]}" --commit "$(cat "$bundle/COMMIT" 2>/dev/null || echo unknown)" \
    --command "$2" --out "$out/summary.md" "$out" >/dev/null 2>&1 &&
    echo "summary: $out/summary.md" || echo "summary: not written"
}

out_dir() {
  local out=${OUT:-$bundle/out}
  mkdir -p "$out"
  echo "$out"
}

run() {
  ensure_bundle "$bundle.tgz" maxsim_bench
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
  # TMA kernel does not take, and of GPUs before Hopper): int8 there on its
  # codes widened in registers; the PLAID suite checks that PLAID is
  # refused, since only the TMA kernels score it.
  for t in maxsim_scan_test maxsim_gather_test host_stream_test gpu_int8_test \
    gpu_plaid_test; do
    if MAXSIMD_TEST_KERNELS=mma "$bundle/bin/$t" --gtest_filter="${GTEST_FILTER:-*}" \
      >"$out/$t.mma.log" 2>&1; then
      :
    else
      failed=1
    fi
    summary+="$(printf '%-20s %s' "$t (mma)" "$(grep -E '^\[  (PASSED|FAILED)  \]|tests? ran' "$out/$t.mma.log" | tr '\n' ' ')")"$'\n'
    grep -E '^\[  FAILED  \]|Failure|MAXSIMD_TEST_SEED' "$out/$t.mma.log" | head -20 || true
  done
  if [[ -n ${SKIP_BENCH:-} ]]; then
    echo "GPU tests:"
    printf '%s' "$summary"
    [[ $failed -eq 0 ]]
    return
  fi
  set +e
  "$bundle/bin/maxsim_bench" --json "$out/bench.json" ${BENCH_ARGS:-} 2>&1 | tee "$out/bench.log"
  local bench_rc=${PIPESTATUS[0]}
  # Top-10 overlap of each layout with the exact fp32 ranking, on the GPU
  # backend (bench/NOTES.md, "Fidelity").
  "$bundle/bin/fidelity_bench" --backend gpu --json "$out/fidelity.json" \
    >"$out/fidelity.log" 2>&1
  local fid_rc=$?
  set -e
  echo
  echo "GPU tests:"
  printf '%s' "$summary"
  echo "benchmark exit code: $bench_rc (table above; JSON in $out/bench.json)"
  echo
  echo "fidelity (exit code $fid_rc; JSON in $out/fidelity.json):"
  grep -A9 '^layout ' "$out/fidelity.log" || tail -5 "$out/fidelity.log"
  summarize "run" "bench/run_gpu.sh run"
  [[ $failed -eq 0 && $bench_rc -eq 0 ]]
}

# One compute-sanitizer run: tool, binary, gtest filter, and an optional
# kernel family (MAXSIMD_TEST_KERNELS). Sets rc=1 on any report.
sanitize_one() {
  local tool=$1 t=$2 f=$3 kernels=${4:-}
  local log=$out/sanitizer_${tool}_$t${kernels:+.$kernels}.log
  MAXSIMD_TEST_KERNELS=$kernels compute-sanitizer --tool "$tool" \
    --error-exitcode 9 "$bundle/bin/$t" --gtest_filter="$f" >"$log" 2>&1 || rc=1
  # racecheck's warnings (hazards between lanes of one warp) do not set
  # the exit code; they fail this step too.
  grep -qE 'ERROR SUMMARY: 0 errors|RACECHECK SUMMARY: 0 hazards' "$log" || rc=1
  echo "$tool $t${kernels:+ ($kernels)}: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$log" | tail -1)"
}

sanitize() {
  ensure_bundle "$bundle.tgz" maxsim_bench
  local out
  out=$(out_dir)
  local scan='GpuScanTest.OneTokenAndEmptyDocuments:GpuScanTest.DeletedDocumentsAreSkipped'
  rc=0
  for tool in memcheck racecheck; do
    sanitize_one $tool maxsim_scan_test "$scan"
    sanitize_one $tool maxsim_scan_test "$scan" mma
    sanitize_one $tool maxsim_gather_test \
      'GpuGatherTest.DuplicatesAreScoredAsGivenAndDeletedSkipped'
    sanitize_one $tool topk_test 'GpuTopKTest.KOneHundredAnd4096AndAboveDocumentCount'
    # The int8 paths: the TMA kernel's (widened, int8 MMA) at 64, 128 and
    # 256, the mma.sync kernels' (codes widened in registers) at the other
    # widths of the test.
    sanitize_one $tool gpu_int8_test \
      'GpuInt8Test.ScoresFollowTheStatedFormulasExactly:GpuInt8Test.RerankMatchesReferenceWithDuplicatesAndDeletedCandidates'
    # The PLAID scan kernel (ragged, two queries in a tile, a large shift
    # of its int16 table), the TMA kernel's PLAID paths, the rerank.
    sanitize_one $tool gpu_plaid_test \
      'GpuPlaidTest.ScoresFollowTheStatedFormula:GpuPlaidTest.RerankMatchesReference:GpuPlaidTest.RaggedScanMatchesReference:GpuPlaidTest.Int8MmaServesSeveralQueriesPerLaunch:GpuPlaidTest.TmaPlaidMmaScanWithTheWarpScanOff:GpuPlaidTest.ScanTableOfLargeUnitsKeepsItsPrecision'
    sanitize_one $tool gpu_kmeans_test \
      'GpuKMeansTest.MatchesTheHostOnRandomUnitTokens:GpuKMeansTest.TiesGoToTheLowestIndex:GpuKMeansTest.SpecialValuesGiveTheHostsCodes'
    # PLAID generation's centroid product (double-buffered cp.async tiles).
    sanitize_one $tool gpu_backend_centroids_test \
      'GpuCentroidScoresTest.SpecialValuesMatchTheHost:GpuCentroidScoresTest.PlaidCandidatesMatchTheHost'
  done
  # What racecheck follows through an mbarrier (tests/sanitizers/
  # mbarrier_probe.cu): informational, expected "1 hazard" for modes 0 and 2.
  if command -v nvcc >/dev/null; then
    nvcc -std=c++17 -O2 -lineinfo -arch=sm_90a \
      "$root/tests/sanitizers/mbarrier_probe.cu" -o "$out/mbarrier_probe" &&
      for m in 0 1 2; do
        echo "mbarrier probe mode $m: $(compute-sanitizer --tool racecheck \
          "$out/mbarrier_probe" $m 2>&1 | grep -E 'RACECHECK SUMMARY')"
      done
  fi
  return $rc
}

case ${1:-} in
  build) build ;;
  run) run ;;
  sanitize) sanitize ;;
  service) service ;;
  all) build && run ;;
  *) sed -n '2,/^set -euo/p' "$0" | sed '$d' >&2; exit 1 ;;
esac
