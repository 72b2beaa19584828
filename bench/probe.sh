#!/usr/bin/env bash
# Timing probes of the Hopper MaxSim kernel (kernels/detail/
# maxsim_tma_kernel.cuh, MAXSIMD_TMA_PROBE): benchmark builds whose scores
# are wrong on purpose, to bound what one part of the kernel costs.
#
#   bench/probe.sh build   here: builds maxsim_bench with the normal kernel
#                          and with each probe (build-probe0..2, CUDA on,
#                          server and tests off), bundled in .probe/ and
#                          .probe.tgz (carry the archive)
#   bench/probe.sh run     on a machine with an NVIDIA GPU: each build on
#                          SHAPE (default colbert_batch64_scan_100k), twice,
#                          interleaved; logs in $OUT (or .probe/out)
#
# Probes: 0 the normal kernel; 1 the epilogue replaced by one max over each
# part's cells (MMAs and data flow alone); 2 query tiles kept resident
# instead of streamed from L2 for every chunk.
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
# shellcheck source=../scripts/bundle_env.sh
source "$root/scripts/bundle_env.sh"
probe=$root/.probe
probes=(0 1 2)

build() {
  rm -rf "$probe"
  for n in "${probes[@]}"; do
    local dir=$root/build-probe$n
    cmake -S "$root" -B "$dir" -G Ninja -DCMAKE_BUILD_TYPE=Release \
      -DMAXSIMD_WITH_CUDA=ON -DMAXSIMD_BUILD_SERVER=OFF \
      -DMAXSIMD_BUILD_TESTS=OFF -DMAXSIMD_FAULT_INJECTION=OFF \
      -DCMAKE_CUDA_COMPILER=/usr/local/cuda/bin/nvcc \
      -DCMAKE_CUDA_FLAGS="-DMAXSIMD_TMA_PROBE=$n" >/dev/null
    cmake --build "$dir" --target maxsim_bench
    "$root/scripts/bundle.sh" "$dir" "$probe" bench/maxsim_bench
    mv "$probe/bin/maxsim_bench" "$probe/bin/maxsim_bench_probe$n"
  done
  tar -C "$probe" -czf "$probe.tgz" bin lib
  echo "probe archive: $(du -h "$probe.tgz" | cut -f1) in $probe.tgz"
}

run() {
  use_bundle "$probe"
  local shape=${SHAPE:-colbert_batch64_scan_100k}
  local out=${OUT:-$probe/out}
  mkdir -p "$out"
  for round in 1 2; do
    for n in "${probes[@]}"; do
      local log=$out/probe${n}_$round.txt
      "$probe/bin/maxsim_bench_probe$n" --only "$shape" --runs 20 >"$log" 2>&1
      printf 'probe %s, round %s: %s\n' "$n" "$round" \
        "$(grep -E "^$shape " "$log" | awk '{print $2 " ms, " $7 " of floor"}')"
    done
  done
}

case ${1:-} in
  build) build ;;
  run) run ;;
  *)
    echo "usage: $0 build|run" >&2
    exit 1
    ;;
esac
