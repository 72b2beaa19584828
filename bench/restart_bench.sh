#!/usr/bin/env bash
# Restart time of a server with a persisted corpus: creates a synthetic
# corpus under a fresh --data_dir (DOCS documents of TOKENS tokens, dim
# 128, fp16), stops the server, starts it again from the data directory
# alone and measures the time until health is SERVING; then checks that
# the corpus came back whole (document and token counts) and serves scans.
#
# Usage: bench/restart_bench.sh BIN_DIR DATA_DIR [DOCS] [TOKENS]
#   BIN_DIR holds maxsimd, maxsimctl and loadgen; DATA_DIR must not exist
#   (it is removed at the end). Defaults: 1000000 documents of 32 tokens.
set -euo pipefail

bin=${1:?usage: $0 BIN_DIR DATA_DIR [DOCS] [TOKENS]}
data=${2:?usage: $0 BIN_DIR DATA_DIR [DOCS] [TOKENS]}
docs=${3:-1000000}
tokens=${4:-32}
port=50171
[[ ! -e $data ]] || { echo "restart_bench: $data exists" >&2; exit 1; }
log=$(mktemp)
server_pid=
cleanup() {
  [[ -n $server_pid ]] && kill -9 "$server_pid" 2>/dev/null || true
  rm -rf "$data" "$log"
}
trap cleanup EXIT

now() { date +%s.%N; }
# start_server <flags...>: starts maxsimd; sets server_pid, and elapsed to
# the seconds until health is SERVING.
start_server() {
  local t0
  t0=$(now)
  "$bin/maxsimd" --listen=127.0.0.1:$port --metrics_listen= \
    --data_dir="$data" "$@" >>"$log" 2>&1 &
  server_pid=$!
  until "$bin/maxsimctl" --target=127.0.0.1:$port health 2>/dev/null |
      grep -q '^SERVING'; do
    kill -0 "$server_pid" 2>/dev/null || { cat "$log" >&2; exit 1; }
    sleep 0.05
  done
  elapsed=$(python3 -c "print(f'{$(now) - $t0:.2f}')")
}
stop_server() {
  kill -TERM "$server_pid"
  wait "$server_pid" || true
  server_pid=
}
counts() {
  "$bin/maxsimctl" --target=127.0.0.1:$port --json get --name big |
    python3 -c 'import json,sys; c=json.load(sys.stdin); print(c["num_documents"], c["num_tokens"])'
}

start_server --demo_corpus=big:$docs:$tokens
created=$elapsed
before=$(counts)
stop_server
on_disk=$(du -sb "$data" | cut -f1)
start_server
restarted=$elapsed
after=$(counts)
"$bin/loadgen" --target=127.0.0.1:$port --corpus=big --candidates=0 \
  --top_k=10 --mode=closed --concurrency=1 --requests=5 --warmup=0s \
  --duration=60s | grep -E 'responses|latency'
stop_server
grep -E 'data directory|loaded corpus' "$log" | tail -2
echo "restart_bench: $docs documents of $tokens tokens, $((on_disk >> 20)) MiB on disk"
echo "restart_bench: created and persisted in ${created} s; restart to SERVING in ${restarted} s"
echo "restart_bench: counts before ${before}, after ${after}"
[[ "$before" == "$after" ]] || { echo "restart_bench: counts differ" >&2; exit 1; }
