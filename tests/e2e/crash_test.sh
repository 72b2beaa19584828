#!/usr/bin/env bash
# Crash test of durable corpora: a writer streams adds and deletes to a
# server with --data_dir while the server is killed with SIGKILL at random
# moments; after every restart the checker verifies, against the writer's
# log, that every acknowledged write is there, that the write in flight at
# the kill is all applied or not at all, and that every score equals the
# reference (tests/e2e/crash_client.cc). Compaction runs every 200 ms with
# small segments sealing at 64 KiB, so kills also land mid-compaction.
#
# Usage: crash_test.sh MAXSIMD_BIN CRASH_CLIENT_BIN [KILLS]   (default 20)
set -euo pipefail

server_bin=$1
client_bin=$2
kills=${3:-20}
work=$(mktemp -d)
server_pid=
writer_pid=
cleanup() {
  [[ -n $writer_pid ]] && kill -9 "$writer_pid" 2>/dev/null || true
  [[ -n $server_pid ]] && kill -9 "$server_pid" 2>/dev/null || true
  wait 2>/dev/null || true
  rm -rf "$work"
}
trap cleanup EXIT

# Starts the server on a free port (it logs the port once it serves) and
# waits for it; sets server_pid and port.
start_server() {
  [[ -f $work/server.log ]] && cat "$work/server.log" >>"$work/servers.log"
  : >"$work/server.log"
  "$server_bin" --cpu --cpu_threads=1 --listen=127.0.0.1:0 --metrics_listen= \
    --data_dir="$work/data" --compaction_interval=200ms \
    --segment_seal_bytes=65536 >"$work/server.log" 2>&1 &
  server_pid=$!
  port=
  for _ in $(seq 300); do
    port=$(sed -n 's/.*serving on port \([0-9][0-9]*\).*/\1/p' "$work/server.log")
    [[ -n $port ]] && return 0
    kill -0 "$server_pid" 2>/dev/null || break
    sleep 0.05
  done
  echo "crash_test: the server did not start:" >&2
  cat "$work/server.log" >&2
  exit 1
}

client() { "$client_bin" "$1" --target="127.0.0.1:$port" --corpus=crash \
  --log="$work/writes.log" "${@:2}"; }

start_server
client create
survived=0
for round in $(seq "$kills"); do
  client write --seed="$round" >"$work/writer.log" 2>&1 &
  writer_pid=$!
  # A random moment 50..800 ms into the writes.
  sleep "0.$(printf '%03d' $((50 + RANDOM % 750)))"
  kill -9 "$server_pid"
  wait "$server_pid" 2>/dev/null || true
  wait "$writer_pid" || { echo "crash_test: the writer failed:" >&2;
                          cat "$work/writer.log" >&2; exit 1; }
  writer_pid=
  start_server
  if ! client verify; then
    echo "crash_test: verification failed after kill $round" >&2
    tail -20 "$work/server.log" >&2
    exit 1
  fi
  survived=$((survived + 1))
done
kill "$server_pid"
wait "$server_pid" 2>/dev/null || true
server_pid=
acked=$(grep -c '^ok ' "$work/writes.log" || true)
cat "$work/server.log" >>"$work/servers.log"
compactions=$(grep -c 'compacted corpus' "$work/servers.log" || true)
echo "crash_test: $survived kills survived; $acked acknowledged writes checked after each restart"
echo "crash_test: $compactions compactions committed across the runs"
