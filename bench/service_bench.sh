#!/usr/bin/env bash
# The service benchmark: maxsimd and bench/loadgen on one host over
# loopback, on a machine with an NVIDIA GPU. Each case starts a server with
# its synthetic corpus, waits for health SERVING, drives it with loadgen, and
# stops it with SIGTERM. Reports (JSON, one per case) and server logs go to
# the output folder; a summary table is printed last.
#
#   bench/service_bench.sh <bin-dir> <out-dir> [case...]
#
# Cases (default: idle scan sharded rerank):
#   idle     one client, --max_queue_delay=0, --executor_spin=2ms: end-to-end
#            latency against the server-reported kernel time (rerank of
#            1,000 candidates and a scan, on 100k documents of 300 tokens),
#            and the transport floor (a rerank of one one-token document);
#            each with blocking calls, then with a busy-polling client
#   idle_nospin  the same without --executor_spin
#   scan     full scan of 100k documents, top-100: open-loop sweep (on every
#            GPU: with several, the corpus is sharded over them)
#   scan_gpu0  the scan sweep on GPU 0 alone
#   sharded  the scan case's heaviest point with the corpus in two shards on
#            one GPU (--shards_per_device=2)
#   rerank   1,000 candidates of a 500k-document corpus: open-loop sweep
#   rerank_e2     the rerank sweep with 2 executors and 2 GPU workers
#   rerank100k    the rerank sweep on the 100k-document corpus
#   rerank100k_2lg  the highest rerank rate from two loadgen processes
#                 (4 channels each), 100k-document corpus
#   rerank_2lg    the same on the rerank case's 500k-document corpus
#   scan_e1       the scan sweep with one executor (--executors=1)
#   scan_e1_b128  the same with batches of 128 queries
#   scan_interleaved  the scan sweep with --gpu_serialize_scans=false
#                 --max_running_scans=0 (the service before either existed)
#   scan_r1       the scan sweep with --max_running_scans=1 --scan_lead=0
#   scan_r2       the same with 2
#   scan_held0    the scan sweep with --max_running_scans=0 (scan batches
#                 close whenever an executor is free)
#   scan_r1_lead<N>  scan_r1 with --scan_lead=<N>ms (the scan case runs the
#                 defaults, --max_running_scans=1 --scan_lead=3ms)
#   plaid    PLAID candidate generation: queries without candidates on a
#            PLAID corpus (2 bits, d = 128) of 100k documents of 64 tokens,
#            top-10 with ColBERT's defaults for k (1 cell per query token,
#            64 documents ranked exactly): open-loop sweep. The corpus is
#            made with maxsimctl (generate once into PLAID_DATA, then create
#            and add: the server trains the codec on it), so any build of
#            the server with PLAID corpora runs it
#
# Environment: SERVER_FLAGS (extra maxsimd flags), DURATION (seconds per
# measured point, default 5), RERANK_RATES, SCAN_RATES, PLAID_RATES
# (comma-separated), LG_CHANNELS (channels of each load generator in the
# *_2lg cases); for the plaid case PLAID_DOCS (default 100000),
# PLAID_TOKENS (tokens per document, default 64), PLAID_NBITS (default 2),
# PLAID_TOP_K (default 10) and PLAID_DATA (where the generated corpus files
# are kept and reused, default <out-dir>/plaid_data: share it between the
# runs of a before/after comparison so that both load the same files).
set -euo pipefail

bin=${1:?usage: $0 <bin-dir> <out-dir> [case...]}
out=${2:?usage: $0 <bin-dir> <out-dir> [case...]}
shift 2
cases=("$@")
[[ ${#cases[@]} -gt 0 ]] || cases=(idle scan sharded rerank)
duration=${DURATION:-5}
rerank_rates=${RERANK_RATES:-5000,10000,15000,20000,25000,30000}
scan_rates=${SCAN_RATES:-500,1000,1500,2000,2500}
plaid_rates=${PLAID_RATES:-50,100,200,400,800,1600}
port=50151
mkdir -p "$out"

server_pid=""
server_log=""
stop_server() {
  [[ -n "$server_pid" ]] || return 0
  if ! kill -0 "$server_pid" 2>/dev/null; then
    # Its failures above are then connection errors: say why.
    echo "service_bench: the server exited before its case ended" \
      "($server_log):" >&2
    tail -5 "$server_log" >&2
  fi
  kill -TERM "$server_pid" 2>/dev/null || true
  wait "$server_pid" 2>/dev/null || true
  server_pid=""
}
trap stop_server EXIT

# start_server <name> <flags...>: starts maxsimd and waits (up to 10 min,
# the corpus load) for health SERVING.
start_server() {
  local name=$1
  shift
  server_log=$out/server_$name.log
  "$bin/maxsimd" --listen=127.0.0.1:$port --metrics_listen=127.0.0.1:$((port + 1)) \
    --log_level=info ${SERVER_FLAGS:-} "$@" >"$server_log" 2>&1 &
  server_pid=$!
  for _ in $(seq 3000); do
    if "$bin/maxsimctl" --target=127.0.0.1:$port health 2>/dev/null | grep -q '^SERVING'; then
      grep -h "compute backend\|loaded corpus" "$out/server_$name.log"
      return 0
    fi
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.2
  done
  echo "service_bench: server for $name did not become SERVING" >&2
  tail -20 "$out/server_$name.log" >&2
  return 1
}

loadgen() {
  "$bin/loadgen" --target=127.0.0.1:$port --warmup=1s --duration="${duration}s" "$@"
}

scrape() {  # scrape <name>: keep the server's metrics
  curl -s "127.0.0.1:$((port + 1))/metrics" >"$out/metrics_$1.txt" || true
}

# scan_sweep <case> <rates> [server flags...]: full scans, top-100, on 100k
# documents.
scan_sweep() {
  local c=$1 rates=$2
  shift 2
  start_server "$c" --demo_corpus=scan:100000:300 --max_queue_delay=5ms "$@"
  loadgen --corpus=scan --candidates=0 --top_k=100 --channels=4 \
    --sweep="$rates" --json="$out/${c}_sweep.json"
  scrape "$c"
  stop_server
}

# rerank_sweep <case> <corpus> <docs> [server flags...]: 1,000 candidates
# of <docs> documents.
rerank_sweep() {
  local c=$1 corpus=$2 docs=$3
  shift 3
  start_server "$c" --demo_corpus="$corpus:$docs:300" --max_queue_delay=1ms "$@"
  loadgen --corpus="$corpus" --candidates=1000 --num_docs="$docs" --top_k=10 \
    --channels=8 --senders=8 --sweep="$rerank_rates" \
    --json="$out/${c}_sweep.json"
  scrape "$c"
  stop_server
}

# rerank_2lg <case> <corpus> <docs>: the rerank case's last rate, offered
# by two load generator processes at half the rate each (LG_CHANNELS
# channels each, default 4), with a thread snapshot (top -H) mid-run.
rerank_2lg() {
  local c=$1 corpus=$2 docs=$3 pids=() i
  start_server "$c" --demo_corpus="$corpus:$docs:300" --max_queue_delay=1ms
  for i in 1 2; do
    loadgen --corpus="$corpus" --candidates=1000 --num_docs="$docs" \
      --top_k=10 --channels="${LG_CHANNELS:-4}" --seed=$i \
      --rate=$((${rerank_rates##*,} / 2)) \
      --json="$out/${c}_$i.json" >"$out/${c}_$i.txt" &
    pids+=($!)
  done
  sleep $((duration / 2 + 1))
  top -b -H -n 1 -w 200 | head -60 >"$out/top_$c.txt" || true
  wait "${pids[@]}"
  cat "$out/${c}"_[12].txt
  scrape "$c"
  stop_server
}

ctl() {
  "$bin/maxsimctl" --target=127.0.0.1:$port "$@"
}

# plaid_sweep <case> [server flags...]: PLAID candidate generation (queries
# without candidates) on a PLAID corpus, top PLAID_TOP_K. The corpus files
# come from maxsimctl generate, once per size (written aside, then moved in
# place, so that an interrupted run leaves none half-written); the server
# builds the corpus from them (create, then one add: the codec is trained
# on the documents of the first add, then every token is compressed).
plaid_sweep() {
  local c=$1 docs=${PLAID_DOCS:-100000} tokens=${PLAID_TOKENS:-64}
  shift
  local data=${PLAID_DATA:-$out/plaid_data}/d128_${docs}x${tokens} t0
  if [[ ! -f $data/ids.txt ]]; then
    rm -rf "$data.tmp"
    mkdir -p "$(dirname "$data")"
    "$bin/maxsimctl" generate --out="$data.tmp" --docs="$docs" --dim=128 \
      --min-tokens="$tokens" --max-tokens="$tokens" --queries=0
    mv "$data.tmp" "$data"
  fi
  start_server "$c" --max_queue_delay=1ms "$@"
  t0=$(date +%s%N)
  ctl create --name=plaid --dim=128 --layout=plaid \
    --plaid-nbits="${PLAID_NBITS:-2}" >/dev/null
  # One stream of every document: its deadline covers the codec's training
  # and the compression at the commit.
  ctl --timeout=30m add --corpus=plaid --tokens="$data/tokens.npy" \
    --cu-seqlens="$data/cu_seqlens.npy" --ids="$data/ids.txt"
  echo "plaid corpus built in $((($(date +%s%N) - t0) / 1000000)) ms:" \
    "$(ctl get --name=plaid | tr -s ' \n' ' ')"
  loadgen --corpus=plaid --candidates=0 --top_k="${PLAID_TOP_K:-10}" \
    --channels=4 --sweep="$plaid_rates" --json="$out/${c}_sweep.json"
  scrape "$c"
  stop_server
}

for c in "${cases[@]}"; do
  case $c in
    idle | idle_nospin)
      # One request at a time at --max_queue_delay=0, blocking calls (no
      # client callback thread). "idle" lets an idle executor spin
      # (--executor_spin); "idle_nospin" sleeps. The floor: a rerank of one
      # one-token candidate, i.e. the transport and request handling alone.
      spin=2ms
      [[ $c == idle ]] || spin=0
      start_server "$c" --demo_corpus=scan:100000:300,floor:1000:1 \
        --max_queue_delay=0 --executor_spin=$spin
      loadgen --corpus=floor --candidates=1 --mode=closed --concurrency=1 \
        --blocking --json="$out/${c}_floor.json"
      loadgen --corpus=scan --candidates=1000 --mode=closed --concurrency=1 \
        --blocking --json="$out/${c}_rerank.json"
      loadgen --corpus=scan --candidates=0 --top_k=100 --mode=closed \
        --concurrency=1 --blocking --json="$out/${c}_scan.json"
      if [[ $c == idle ]]; then
        # A client that polls for its response instead of sleeping: what
        # is left is the server's share plus the transport.
        poll=(--mode=closed --concurrency=1 --blocking --busy_poll)
        loadgen --corpus=floor --candidates=1 "${poll[@]}" \
          --json="$out/${c}_poll_floor.json"
        loadgen --corpus=scan --candidates=1000 "${poll[@]}" \
          --json="$out/${c}_poll_rerank.json"
        loadgen --corpus=scan --candidates=0 --top_k=100 "${poll[@]}" \
          --json="$out/${c}_poll_scan.json"
      fi
      scrape "$c"
      stop_server
      ;;
    scan) scan_sweep scan "$scan_rates" ;;
    # On a machine with several GPUs: the scan sweep on the first GPU alone
    # (the "scan" case shards the corpus over every GPU).
    scan_gpu0) scan_sweep scan_gpu0 "$scan_rates" --devices=0 ;;
    sharded) scan_sweep sharded "${scan_rates##*,}" --shards_per_device=2 ;;
    # One executor (no two batches sharing the GPU), batches of 64 or 128.
    scan_e1) scan_sweep scan_e1 "$scan_rates" --executors=1 ;;
    scan_e1_b128)
      scan_sweep scan_e1_b128 "$scan_rates" --executors=1 \
        --batch_max_queries=128
      ;;
    # As before scan admission and scan order existed: scan batches close
    # whenever an executor is free, and their kernels interleave on the GPU.
    scan_interleaved)
      scan_sweep scan_interleaved "$scan_rates" --gpu_serialize_scans=false \
        --max_running_scans=0
      ;;
    # Scan batches held in the queue while 1 (2) run.
    scan_r1) scan_sweep scan_r1 "$scan_rates" --max_running_scans=1 --scan_lead=0 ;;
    scan_r2) scan_sweep scan_r2 "$scan_rates" --max_running_scans=2 --scan_lead=0 ;;
    scan_held0) scan_sweep scan_held0 "$scan_rates" --max_running_scans=0 ;;
    scan_r1_lead[0-9]*)
      scan_sweep "$c" "$scan_rates" --max_running_scans=1 \
        --scan_lead="${c##*lead}ms"
      ;;
    rerank) rerank_sweep rerank rerank 500000 ;;
    # Two batches in flight instead of the default four.
    rerank_e2) rerank_sweep rerank_e2 rerank 500000 --executors=2 --gpu_workers=2 ;;
    rerank100k) rerank_sweep rerank100k scan 100000 ;;
    # Two load generator processes: tells a client-bound run from a
    # server-bound one.
    rerank100k_2lg) rerank_2lg rerank100k_2lg scan 100000 ;;
    rerank_2lg) rerank_2lg rerank_2lg rerank 500000 ;;
    plaid) plaid_sweep plaid ;;
    *) echo "service_bench: unknown case $c" >&2; exit 1 ;;
  esac
done
shopt -s nullglob
reports=("$out"/idle_*.json "$out"/*_sweep.json)
# The two-loadgen cases write neither: their reports are printed above.
if [[ ${#reports[@]} -gt 0 ]]; then
  python3 "$(dirname "${BASH_SOURCE[0]}")/plot_curve.py" "${reports[@]}"
fi
