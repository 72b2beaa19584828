#!/usr/bin/env bash
# Top-10 overlap of the int8 and bf16 layouts with the exact fp32 ranking
# over variations of the synthetic corpus (bench/NOTES.md, "Fidelity"):
# the defaults, two more seeds, fewer and more clusters, less and more query
# noise, and longer documents. One fidelity_bench run per variation; logs
# and JSON go to <out-dir>, and the table of mean overlaps is printed last.
#
#   bench/fidelity_matrix.sh <fidelity_bench> <out-dir> [backend]
#
# backend: cpu (the default; about 5 minutes per variation on 2 cores) or
# gpu (a CUDA build on a machine with an NVIDIA GPU; seconds per variation).
set -euo pipefail

bin=${1:?usage: $0 <fidelity_bench> <out-dir> [cpu|gpu]}
out=${2:?usage: $0 <fidelity_bench> <out-dir> [cpu|gpu]}
backend=${3:-cpu}
mkdir -p "$out"

variations=(
  "defaults|"
  "seed 8|--seed 8"
  "seed 9|--seed 9"
  "clusters 256|--clusters 256"
  "clusters 1024|--clusters 1024"
  "query_noise 0.3|--query_noise 0.3"
  "query_noise 1.0|--query_noise 1.0"
  "tokens 32..128|--min_tokens 32 --max_tokens 128"
)

# Mean overlap of the row whose first columns match $2 in log $1.
overlap() {
  awk -v want="$2" 'index($0, want) == 1 { print $(NF - 6); exit }' "$1"
}

table="variation|int8, fp16 queries|int8, int8 queries|bf16"$'\n'
n=0
for v in "${variations[@]}"; do
  name=${v%%|*}
  flags=${v#*|}
  n=$((n + 1))
  log=$out/$n.log
  # shellcheck disable=SC2086
  "$bin" --backend "$backend" --layouts int8,bf16 --json "$out/$n.json" \
    $flags >"$log" 2>&1 || { echo "fidelity_matrix: $name failed:"; tail -5 "$log"; exit 1; }
  table+="$name|$(overlap "$log" "int8   fp16")|$(overlap "$log" "int8   int8")|$(overlap "$log" "bf16")"$'\n'
done
printf '%s' "$table" | awk -F'|' '{ printf "%-16s %-20s %-20s %s\n", $1, $2, $3, $4 }'
