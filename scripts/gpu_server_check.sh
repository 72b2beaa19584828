#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: starts one maxsimd on the GPU and one on
# the CPU, loads the same synthetic corpus into both through maxsimctl, and
# checks that scan and rerank queries rank the same documents with scores
# within 1e-3 relative. Exits non-zero on any difference.
#
#   scripts/gpu_server_check.sh <bin-dir>    (maxsimd and maxsimctl inside;
#                                             libraries from LD_LIBRARY_PATH)
set -euo pipefail
bin=${1:?usage: $0 <bin-dir>}
work=$(mktemp -d)
pids=()
trap 'for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done; rm -rf "$work"' EXIT

start() {  # start <port> <flags...>
  local port=$1
  shift
  "$bin/maxsimd" --listen=127.0.0.1:"$port" --metrics_listen= "$@" \
    >"$work/server_$port.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 100); do
    "$bin/maxsimctl" --target=127.0.0.1:"$port" health >/dev/null 2>&1 && return
    sleep 0.2
  done
  cat "$work/server_$port.log" >&2
  return 1
}
start 50071 --devices=0
start 50072 --cpu
grep -h "compute backend" "$work"/server_*.log

"$bin/maxsimctl" generate --out "$work/c" --docs 3000 --dim 128 --queries 3 \
  --seed 3 >/dev/null
status=0
for port in 50071 50072; do
  ctl=("$bin/maxsimctl" --target=127.0.0.1:"$port")
  "${ctl[@]}" create --name c --dim 128 >/dev/null
  "${ctl[@]}" add --corpus c --tokens "$work/c/tokens.npy" \
    --cu-seqlens "$work/c/cu_seqlens.npy" --ids "$work/c/ids.txt" >/dev/null
  "${ctl[@]}" --json get --name c >"$work/info_$port.json"
  for q in 0 1 2; do
    "${ctl[@]}" --json query --corpus c --query "$work/c/query_$q.npy" \
      --top-k 100 >"$work/scan_${q}_$port.json"
    "${ctl[@]}" --json query --corpus c --query "$work/c/query_$q.npy" \
      --top-k 20 --candidates-file "$work/c/candidates_$q.txt" \
      >"$work/rerank_${q}_$port.json"
  done
done
grep -o '"resident_on":"[^"]*"' "$work"/info_*.json
python3 - "$work" <<'PY'
import json, sys, glob, os
work = sys.argv[1]
bad = 0
for gpu in sorted(glob.glob(os.path.join(work, "*_50071.json"))):
    if "info" in gpu:
        continue
    cpu = gpu.replace("_50071", "_50072")
    g = json.load(open(gpu))["results"]
    c = json.load(open(cpu))["results"]
    name = os.path.basename(gpu).replace("_50071.json", "")
    worst = max(abs(a["score"] - b["score"]) / max(1.0, abs(b["score"]))
                for a, b in zip(g, c))
    same_ids = [a["id"] for a in g] == [b["id"] for b in c]
    same_set = {a["id"] for a in g} == {b["id"] for b in c}
    ok = len(g) == len(c) and worst <= 1e-3 and same_set
    bad += not ok
    print(f"{name:10s} n={len(g):3d} same order={same_ids} same set={same_set} "
          f"max rel score diff={worst:.2e} {'ok' if ok else 'MISMATCH'}")
sys.exit(1 if bad else 0)
PY
status=$?
echo "gpu_server_check: $([[ $status -eq 0 ]] && echo PASS || echo FAIL)"
exit $status
