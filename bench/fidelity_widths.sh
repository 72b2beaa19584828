#!/usr/bin/env bash
# Top-10 overlap with the exact fp32 ranking for every (layout, width, pool
# factor) of bench/NOTES.md's fidelity table: fidelity_bench at widths 64,
# 96, 128, 320 and 1024, pool factors 1, 2 and 3, on the clustered
# synthetic corpus (50k documents of 16 to 48 tokens, 100 queries) with
# half of each document's tokens near-duplicates of earlier ones
# (--repeat_fraction 0.5, index/synthetic.h), the redundancy pooling
# removes. One run per width; logs and JSON go to <out-dir>, and the table
# is printed last ("-": the backend does not serve that layout at that
# width; its error is in the log).
#
#   bench/fidelity_widths.sh <fidelity_bench> <out-dir> [backend] [widths]
#
# backend: gpu (the default; a CUDA build on a machine with an NVIDIA GPU)
# or cpu (hours at the wide widths on a few cores). widths: a list such as
# "64 128" (default "64 96 128 320 1024"). FIDELITY_ARGS adds flags.
set -euo pipefail

bin=${1:?usage: $0 <fidelity_bench> <out-dir> [gpu|cpu] [widths]}
out=${2:?usage: $0 <fidelity_bench> <out-dir> [gpu|cpu] [widths]}
backend=${3:-gpu}
widths=${4:-64 96 128 320 1024}
mkdir -p "$out"

for d in $widths; do
  # shellcheck disable=SC2086
  "$bin" --backend "$backend" --dim "$d" --pool_factors 1,2,3 \
    --repeat_fraction 0.5 --layouts int8,fp16,plaid2,plaid4 \
    --json "$out/d$d.json" ${FIDELITY_ARGS:-} >"$out/d$d.log" 2>&1 ||
    { echo "fidelity_widths: d = $d failed:"; tail -5 "$out/d$d.log"; exit 1; }
done

python3 - "$out" $widths <<'PY'
import json, sys
out, widths = sys.argv[1], sys.argv[2:]
cols = [("fp16", "dense"), ("int8", "fp16"), ("int8", "int8 (quantised)"),
        ("plaid2", "exhaustive"), ("plaid2", "PLAID search"),
        ("plaid4", "exhaustive"), ("plaid4", "PLAID search")]
print("| d | pool | tokens kept | fp16 | int8 | int8q | plaid2 | plaid2 search "
      "| plaid4 | plaid4 search |")
print("|---:|---:|---:|" + "---:|" * len(cols))
for d in widths:
    j = json.load(open(f"{out}/d{d}.json"))
    by = {}
    for r in j["layouts"]:
        by[(r["layout"], r["queries"], r["pool_factor"])] = r
    for pf in (1, 2, 3):
        kept = next((r["stored_tokens"] / j["tokens"] for k, r in by.items()
                     if k[2] == pf and "stored_tokens" in r), float("nan"))
        cells = []
        for layout, mode in cols:
            r = by.get((layout, mode, pf))
            cells.append("-" if r is None or "error" in r
                         else f"{r['mean_overlap']:.4f}")
        print(f"| {d} | {pf} | {kept:.3f} | " + " | ".join(cells) + " |")
PY
