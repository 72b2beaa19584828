#!/usr/bin/env bash
# Interleaved A/B of two maxsim_bench builds on a machine with an NVIDIA GPU:
# A, B, A, B, ... in one process order, so that both see the same clocks
# and the same neighbours. Each run's output goes to <out>/<label>_<round>.txt;
# a table of each shape's gpu ms per round, and B against A, is printed last.
#
#   bench/ab_bench.sh <bench-A> <bench-B> <out-dir> <rounds> <shape,shape...>
#
# Environment: RUNS (timed runs per shape, default 20).
set -euo pipefail

a=${1:?usage: $0 <bench-A> <bench-B> <out-dir> <rounds> <shapes>}
b=${2:?usage: $0 <bench-A> <bench-B> <out-dir> <rounds> <shapes>}
out=${3:?usage: $0 <bench-A> <bench-B> <out-dir> <rounds> <shapes>}
rounds=${4:?usage: $0 <bench-A> <bench-B> <out-dir> <rounds> <shapes>}
shapes=${5:?usage: $0 <bench-A> <bench-B> <out-dir> <rounds> <shapes>}
runs=${RUNS:-20}
mkdir -p "$out"

for r in $(seq "$rounds"); do
  "$a" --runs "$runs" --only "$shapes" --json "$out/A_$r.json" >"$out/A_$r.txt"
  "$b" --runs "$runs" --only "$shapes" --json "$out/B_$r.json" >"$out/B_$r.txt"
done

python3 - "$out" "$rounds" "$shapes" <<'EOF'
import json
import sys

out, rounds, shapes = sys.argv[1], int(sys.argv[2]), sys.argv[3].split(",")


def gpu_ms(label, r):
    with open(f"{out}/{label}_{r}.json") as f:
        doc = json.load(f)
    return {s["name"]: s["gpu_ms"] for s in doc["shapes"] if "gpu_ms" in s}


a = [gpu_ms("A", r) for r in range(1, rounds + 1)]
b = [gpu_ms("B", r) for r in range(1, rounds + 1)]
print("| shape | A ms (per round) | B ms (per round) | B / A (medians) |")
print("|---|---|---|---:|")
for s in shapes:
    xa = [x[s] for x in a if s in x]
    xb = [x[s] for x in b if s in x]
    if not xa or not xb:
        print(f"| {s} | - | - | - |")
        continue
    med = lambda v: sorted(v)[len(v) // 2]
    fa = " / ".join(f"{v:.4f}" for v in xa)
    fb = " / ".join(f"{v:.4f}" for v in xb)
    print(f"| {s} | {fa} | {fb} | {med(xb) / med(xa):.3f} |")
EOF
