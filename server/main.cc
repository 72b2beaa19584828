// maxsimd: the server binary. Flags may also come from a file with
// --flagfile=PATH (one --flag=value per line).
#include <signal.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "kernels/types.h"
#include "server/auth.h"
#include "server/logging.h"
#include "server/scheduler.h"
#include "server/server.h"
#include "spdlog/spdlog.h"

ABSL_FLAG(std::string, listen, "0.0.0.0:50051",
          "gRPC listen address host:port (port 0 picks a free port)");
ABSL_FLAG(std::string, metrics_listen, "0.0.0.0:9464",
          "Prometheus /metrics listen address; empty disables it");
ABSL_FLAG(std::string, metrics_token_file, "",
          "File of bearer tokens for /metrics, in the format of "
          "--admin_token_file, read at start: a scrape must send "
          "'Authorization: Bearer <token>' with one of them or gets 401 "
          "(Prometheus: authorization.credentials_file); empty = /metrics is "
          "open to whoever can reach --metrics_listen");
ABSL_FLAG(int, metrics_max_connections, 256,
          "Most connections open at once on --metrics_listen, in [1, 65536]; "
          "at the limit a new connection closes the oldest one that has not "
          "yet sent a complete request, so idle or slow clients cannot lock "
          "scrapers out");
ABSL_FLAG(absl::Duration, metrics_request_timeout, absl::Seconds(5),
          "Time a connection to --metrics_listen has, from accept, to send "
          "its whole request head before it is closed without an answer, in "
          "(0, 1h]; the response then has 10s to be sent");
ABSL_FLAG(std::string, tls_cert, "",
          "PEM file of the server's certificate chain (leaf first): the gRPC "
          "port serves TLS, with --tls_key; empty = plaintext. /metrics "
          "stays plain HTTP on --metrics_listen");
ABSL_FLAG(std::string, tls_key, "",
          "PEM file of the unencrypted private key of --tls_cert");
ABSL_FLAG(std::string, tls_client_ca, "",
          "PEM file of the CA certificates that sign client certificates: "
          "with it every client must present a certificate they verify "
          "(mutual TLS), and such a certificate may call Admin (see "
          "--admin_client_names); needs --tls_cert");
ABSL_FLAG(std::vector<std::string>, admin_client_names, {},
          "With --tls_client_ca, the client certificate names (subject CN or "
          "a subject alternative name), comma-separated, that may call Admin "
          "without a token; empty = every verified client certificate");
ABSL_FLAG(std::string, admin_token_file, "",
          "File of bearer tokens that may call Admin, one a line (16 to 4096 "
          "printable ASCII characters; blank lines and '#' comments "
          "skipped), read at start; list two tokens to rotate. With a token "
          "configured, an Admin call without a valid one is refused");
ABSL_FLAG(std::vector<std::string>, admin_tokens, {},
          "Admin bearer tokens, comma-separated, added to those of "
          "--admin_token_file; visible in the process list, so prefer the "
          "file");
ABSL_FLAG(bool, allow_readable_secret_files, false,
          "Start even when --tls_key, --admin_token_file, --query_token_file "
          "or --metrics_token_file can be accessed by group or others (mode "
          "not 0600/0400), with a warning; by default such a file stops "
          "start-up");
ABSL_FLAG(std::string, query_auth, "none",
          "Authentication of Reranker calls: none (open), or token (a token "
          "of --query_token_file or an admin token, or an admin client "
          "certificate); health and reflection stay open");
ABSL_FLAG(std::string, query_token_file, "",
          "File of bearer tokens for Reranker calls under --query_auth=token, "
          "in the format of --admin_token_file (admin tokens are accepted "
          "too)");
ABSL_FLAG(bool, cpu, false, "Force the CPU backend even when a GPU is present");
ABSL_FLAG(std::vector<std::string>, devices, {},
          "Comma-separated CUDA device ordinals to serve on; empty = every "
          "usable GPU, falling back to the CPU when there is none");
ABSL_FLAG(int, shards_per_device, 1,
          "Shards per device: corpora are split by document range over "
          "devices x shards_per_device backends (more than 1 runs the "
          "sharded path on one device)");
ABSL_FLAG(int, gpu_workers, 4,
          "Concurrent searches per GPU, each with its own stream and "
          "workspace, so one batch's host staging and copies overlap "
          "another's kernels");
ABSL_FLAG(bool, gpu_serialize_scans, true,
          "Run the kernels of concurrent scan batches one batch after "
          "another, each with its top-k, rather than interleaved (where a "
          "batch's top-k waits behind another batch's whole scan); staging "
          "and copies still overlap");
ABSL_FLAG(bool, gpu_plaid_int8_mma, true,
          "Score PLAID batches at d = 128 on the int8 tensor cores (residual "
          "levels against quantised query rows); false: the float16 decode");
ABSL_FLAG(bool, gpu_plaid_warp_scan, true,
          "Scan resident PLAID corpora at 2 and 4 bits with the warp kernel "
          "(residuals decoded in registers); false: the TMA kernel");
ABSL_FLAG(int, grpc_max_threads, 0,
          "gRPC resource quota: most threads gRPC may use; 0 = gRPC default");
ABSL_FLAG(int, rerank_queues, 0,
          "gRPC completion queues serving Rerank, each drained by a thread of "
          "its own; 0 = half the cores, at least 2 and at most 16");
ABSL_FLAG(int64_t, grpc_memory_quota_bytes, 0,
          "gRPC resource quota: memory gRPC may use for calls; 0 = gRPC "
          "default");
ABSL_FLAG(absl::Duration, grpc_handshake_timeout, absl::Seconds(10),
          "gRPC port: a connection that has not completed its TLS and HTTP/2 "
          "handshake within this long is closed; inf = never");
ABSL_FLAG(absl::Duration, grpc_max_connection_idle, absl::Minutes(5),
          "gRPC port: a connection with no call for this long is closed "
          "(GOAWAY; clients reconnect on their next call); inf = never");
ABSL_FLAG(absl::Duration, grpc_max_connection_age, absl::InfiniteDuration(),
          "gRPC port: a connection this old is asked to close (GOAWAY), so "
          "that clients rebalance over replicas; inf = never");
ABSL_FLAG(absl::Duration, grpc_max_connection_age_grace, absl::Minutes(1),
          "gRPC port: how long calls of a connection past "
          "--grpc_max_connection_age may still run before it is closed");
ABSL_FLAG(absl::Duration, grpc_keepalive_time, absl::Minutes(2),
          "gRPC port: ping a client after this long without traffic, to find "
          "dead peers; inf = never");
ABSL_FLAG(absl::Duration, grpc_keepalive_timeout, absl::Seconds(20),
          "gRPC port: a connection whose keepalive ping gets no answer within "
          "this long is closed");
ABSL_FLAG(int, cpu_threads, 0, "CPU backend threads; 0 = one per core");
ABSL_FLAG(int64_t, corpus_budget_bytes, 0,
          "Most bytes of corpus data each backend shard (a GPU, or the CPU) "
          "keeps; a write past it is RESOURCE_EXHAUSTED and changes nothing. "
          "0 = as much as fits");
ABSL_FLAG(int64_t, pinned_budget_bytes, 0,
          "Most bytes of host-placed corpus data (placement host, or auto past "
          "--corpus_budget_bytes) each backend shard page-locks; a write past "
          "it is RESOURCE_EXHAUSTED and changes nothing. 0 = no limit");
ABSL_FLAG(int64_t, stream_buffer_bytes, int64_t{64} << 20,
          "Per GPU worker, the size of each of two device buffers (and two "
          "pinned host buffers) through which host-placed tokens stream to "
          "the GPU; one document must fit. 0 = host placement refused");
ABSL_FLAG(int64_t, max_message_bytes, 64 << 20,
          "Largest gRPC message accepted or sent, in bytes");
ABSL_FLAG(int32_t, max_query_tokens, 1024, "Most tokens in one query (Lq)");
ABSL_FLAG(int32_t, max_candidates, 100000,
          "Most candidate ids in one rerank request");
ABSL_FLAG(int32_t, max_top_k, maxsimd::kMaxTopK, "Largest top_k accepted");
ABSL_FLAG(int32_t, max_batch_queries, 256,
          "Most queries in one RerankBatch request");
ABSL_FLAG(int32_t, max_stream_in_flight, 1024,
          "Most requests of one RerankStream read and not yet answered; at "
          "the limit the stream's next request is read once a response is "
          "written (bounds what a client that stops reading costs)");
ABSL_FLAG(int64_t, max_queued_queries, 4096,
          "Most queries waiting for an executor, all corpora together; beyond "
          "it requests get RESOURCE_EXHAUSTED at once");
ABSL_FLAG(int64_t, max_queued_bytes, int64_t{1} << 30,
          "Most decoded query bytes (Lq * dim * 4 per query) waiting for an "
          "executor, all corpora together; beyond it RESOURCE_EXHAUSTED");
ABSL_FLAG(int64_t, max_queued_queries_per_corpus, 0,
          "Most queries waiting for an executor on one corpus; 0 = only "
          "--max_queued_queries applies");
ABSL_FLAG(int64_t, max_queued_bytes_per_corpus, 0,
          "Most decoded query bytes waiting for an executor on one corpus; "
          "0 = only --max_queued_bytes applies");
ABSL_FLAG(int32_t, batch_max_queries, 64,
          "Most queries the scheduler runs in one backend search");
ABSL_FLAG(int64_t, batch_max_tokens, 16384,
          "Most query tokens (sum of Lq) the scheduler runs in one backend "
          "search; a longer single query still runs, alone");
ABSL_FLAG(absl::Duration, max_queue_delay, absl::Milliseconds(1),
          "How long the oldest queued query of a corpus waits for a fuller "
          "batch before its batch runs; 0 = dispatch at once");
ABSL_FLAG(absl::Duration, min_execution_time, absl::ZeroDuration(),
          "Shortest time a batch is expected to take; a queued query whose "
          "deadline is nearer than this gets DEADLINE_EXCEEDED without "
          "running");
ABSL_FLAG(int, executors, 4,
          "Scheduler threads running batches, each with one batch in flight; "
          "match --gpu_workers so every GPU worker has a batch to run");
ABSL_FLAG(std::string, data_dir, "",
          "Directory where corpora persist (created if missing); every corpus "
          "in it is loaded at start. Empty = corpora live in memory only");
ABSL_FLAG(absl::Duration, compaction_interval, absl::Seconds(10),
          "How often every corpus is compacted: runs of small segments are "
          "merged and segments with many deletes rewritten; 0 = never");
ABSL_FLAG(int64_t, segment_seal_bytes, int64_t{64} << 20,
          "Compaction merges adjacent small segments up to this many token "
          "bytes; a segment this large is sealed");
ABSL_FLAG(double, compact_tombstone_ratio, 0.25,
          "Compaction rewrites a segment once this fraction of its documents "
          "is deleted");
ABSL_FLAG(std::string, files_dir, "",
          "Root directory of the server-side files of the admin API: "
          "SnapshotCorpus writes there, LoadCorpus and ImportDocuments read "
          "from there (relative paths only); empty = those calls are refused");
ABSL_FLAG(int32_t, max_running_scans, 1,
          "Scan batches that may run on the backend at once; while that "
          "many run, scan queries stay queued and join the next batch, "
          "which closes when one of them returns (a batch taken early only "
          "waits on the device). 0 = no limit but --executors");
ABSL_FLAG(absl::Duration, scan_lead, absl::Milliseconds(3),
          "With --max_running_scans: one more scan batch may close this "
          "long before the first running scan is expected to return (from "
          "its corpus's recent scan time per query), so that it waits "
          "staged on the device rather than the device waiting for it; "
          "0 = only when one returns");
ABSL_FLAG(absl::Duration, executor_spin, absl::ZeroDuration(),
          "How long one idle executor polls for new work before it sleeps: "
          "a query arriving meanwhile starts without a thread wake-up (tens "
          "of microseconds on an idle host), at the cost of one busy core; "
          "0 = sleep at once");
ABSL_FLAG(int32_t, max_dim, 4096, "Largest corpus dimension accepted");
ABSL_FLAG(int32_t, max_corpora, maxsimd::CorpusLimits{}.max_corpora,
          "Most corpora the server holds, counting those under --data_dir "
          "that failed to load; CreateCorpus and LoadCorpus beyond it are "
          "RESOURCE_EXHAUSTED. Corpora found under --data_dir at start are "
          "all loaded, even past it");
ABSL_FLAG(int32_t, max_doc_tokens, 65536, "Most tokens in one document");
ABSL_FLAG(int64_t, shard_split_bytes, int64_t{8} << 20,
          "With several shards, an append of at least this many token bytes "
          "is split by document range over all of them; a smaller one goes "
          "whole to the emptiest");
ABSL_FLAG(int64_t, max_add_stream_bytes, int64_t{4} << 30,
          "Most bytes of token storage one AddDocuments stream may carry");
ABSL_FLAG(int32_t, max_write_streams, 16,
          "Most AddDocuments streams open at once; another is refused with "
          "RESOURCE_EXHAUSTED before it is read");
ABSL_FLAG(int64_t, max_write_bytes, int64_t{4} << 30,
          "Most bytes (converted tokens and ids) all open AddDocuments streams "
          "hold together; the message that would pass it ends its stream "
          "with RESOURCE_EXHAUSTED and nothing of it is added");
ABSL_FLAG(absl::Duration, write_idle_timeout, absl::Seconds(30),
          "An AddDocuments stream that sends no message adding documents "
          "for this long ends with DEADLINE_EXCEEDED and nothing of it is "
          "added; at least 100ms, inf = never");
ABSL_FLAG(absl::Duration, drain_grace, absl::ZeroDuration(),
          "On SIGTERM, how long the server keeps accepting and answering new "
          "calls after health turns NOT_SERVING, before the drain: set it "
          "above the time a load balancer that polls health takes to see "
          "NOT_SERVING; 0 = drain at once");
ABSL_FLAG(absl::Duration, drain_timeout, absl::Seconds(30),
          "On SIGTERM, how long in-flight requests may take to finish (after "
          "--drain_grace)");
ABSL_FLAG(std::string, log_level, "info",
          "trace, debug (one line per request), info (adds failed requests "
          "caused by the caller), warn (refused under load or past their "
          "deadline), error, critical or off; changed at run time by "
          "Admin.SetLogLevel (maxsimctl log-level)");
ABSL_FLAG(std::string, log_format, "text",
          "text (spdlog's lines) or json (one JSON object per line: time, "
          "level, logger, thread, message, and request_id for a line written "
          "for a call with x-request-id metadata)");
ABSL_FLAG(int64_t, demo_docs, 0,
          "If > 0, create corpus \"demo\" with this many synthetic documents");
ABSL_FLAG(std::vector<std::string>, demo_corpus, {},
          "Synthetic corpora to create at start, comma-separated "
          "NAME:DOCS[:TOKENS[:DIM]] (TOKENS per document, 0 = random 32..300; "
          "DIM default 128); health is NOT_SERVING until they are loaded");

namespace {

int Fail(const std::string& message) {
  std::fprintf(stderr, "maxsimd: %s\n", message.c_str());
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "GPU MaxSim reranking server.\nUsage: maxsimd [--flag=value ...] "
      "[--flagfile=config.flags]");
  absl::ParseCommandLine(argc, argv);

  const absl::StatusOr<spdlog::level::level_enum> level =
      maxsimd::ParseLogLevel(absl::GetFlag(FLAGS_log_level), "--log_level");
  if (!level.ok()) return Fail(std::string(level.status().message()));
  const absl::StatusOr<maxsimd::LogFormat> format =
      maxsimd::ParseLogFormat(absl::GetFlag(FLAGS_log_format), "--log_format");
  if (!format.ok()) return Fail(std::string(format.status().message()));
  maxsimd::ConfigureLogging(*format);
  spdlog::set_level(*level);

  maxsimd::ServerOptions o;
  o.listen = absl::GetFlag(FLAGS_listen);
  o.metrics_listen = absl::GetFlag(FLAGS_metrics_listen);
  o.metrics_token_file = absl::GetFlag(FLAGS_metrics_token_file);
  o.metrics_max_connections = absl::GetFlag(FLAGS_metrics_max_connections);
  o.metrics_request_timeout = absl::GetFlag(FLAGS_metrics_request_timeout);
  o.tls.cert_file = absl::GetFlag(FLAGS_tls_cert);
  o.tls.key_file = absl::GetFlag(FLAGS_tls_key);
  o.tls.client_ca_file = absl::GetFlag(FLAGS_tls_client_ca);
  o.auth.admin_client_names = absl::GetFlag(FLAGS_admin_client_names);
  o.auth.admin_token_file = absl::GetFlag(FLAGS_admin_token_file);
  o.auth.admin_tokens = absl::GetFlag(FLAGS_admin_tokens);
  o.auth.query_token_file = absl::GetFlag(FLAGS_query_token_file);
  o.tls.allow_readable_secrets =
      absl::GetFlag(FLAGS_allow_readable_secret_files);
  o.auth.allow_readable_secrets = o.tls.allow_readable_secrets;
  const absl::StatusOr<maxsimd::QueryAuth> query_auth =
      maxsimd::ParseQueryAuth(absl::GetFlag(FLAGS_query_auth), "--query_auth");
  if (!query_auth.ok()) return Fail(std::string(query_auth.status().message()));
  o.auth.query_auth = *query_auth;
  for (const std::string& d : absl::GetFlag(FLAGS_devices)) {
    int ordinal = -1;
    if (!absl::SimpleAtoi(d, &ordinal) || ordinal < 0) {
      return Fail(absl::StrCat("--devices: \"", d,
                               "\" is not a device ordinal (0, 1, ...)"));
    }
    o.devices.push_back(ordinal);
  }
  if (absl::GetFlag(FLAGS_cpu)) {
    if (!o.devices.empty())
      return Fail("--cpu and --devices exclude each other");
    o.backend = maxsimd::BackendChoice::kCpu;
  } else if (!o.devices.empty()) {
    o.backend = maxsimd::BackendChoice::kGpu;
  }
  o.shards_per_device = absl::GetFlag(FLAGS_shards_per_device);
  o.gpu_workers = absl::GetFlag(FLAGS_gpu_workers);
  o.gpu_serialize_scans = absl::GetFlag(FLAGS_gpu_serialize_scans);
  o.gpu_plaid_int8_mma = absl::GetFlag(FLAGS_gpu_plaid_int8_mma);
  o.gpu_plaid_warp_scan = absl::GetFlag(FLAGS_gpu_plaid_warp_scan);
  if (o.shards_per_device < 1 || o.shards_per_device > 64) {
    return Fail("--shards_per_device must be in [1, 64]");
  }
  if (o.gpu_workers < 1 || o.gpu_workers > 16) {
    return Fail("--gpu_workers must be in [1, 16]");
  }
  o.grpc_max_threads = absl::GetFlag(FLAGS_grpc_max_threads);
  o.grpc_memory_quota_bytes = absl::GetFlag(FLAGS_grpc_memory_quota_bytes);
  if (o.grpc_max_threads < 0 || o.grpc_memory_quota_bytes < 0) {
    return Fail(
        "--grpc_max_threads and --grpc_memory_quota_bytes must not be "
        "negative");
  }
  o.grpc_handshake_timeout = absl::GetFlag(FLAGS_grpc_handshake_timeout);
  o.grpc_max_connection_idle = absl::GetFlag(FLAGS_grpc_max_connection_idle);
  o.grpc_max_connection_age = absl::GetFlag(FLAGS_grpc_max_connection_age);
  o.grpc_max_connection_age_grace =
      absl::GetFlag(FLAGS_grpc_max_connection_age_grace);
  o.grpc_keepalive_time = absl::GetFlag(FLAGS_grpc_keepalive_time);
  o.grpc_keepalive_timeout = absl::GetFlag(FLAGS_grpc_keepalive_timeout);
  for (const auto& [flag, value] :
       {std::pair<const char*, absl::Duration>{"grpc_handshake_timeout",
                                               o.grpc_handshake_timeout},
        {"grpc_max_connection_idle", o.grpc_max_connection_idle},
        {"grpc_max_connection_age", o.grpc_max_connection_age},
        {"grpc_max_connection_age_grace", o.grpc_max_connection_age_grace},
        {"grpc_keepalive_time", o.grpc_keepalive_time},
        {"grpc_keepalive_timeout", o.grpc_keepalive_timeout}}) {
    if (value <= absl::ZeroDuration()) {
      return Fail(absl::StrCat("--", flag, " must be positive (inf = never)"));
    }
  }
  o.rerank_queues = absl::GetFlag(FLAGS_rerank_queues);
  if (o.rerank_queues < 0 || o.rerank_queues > 64) {
    return Fail("--rerank_queues must be in [0, 64]");
  }
  if (o.rerank_queues == 0) {
    o.rerank_queues = std::clamp(
        static_cast<int>(std::thread::hardware_concurrency()) / 2, 2, 16);
  }
  o.cpu_threads = absl::GetFlag(FLAGS_cpu_threads);
  o.corpus_budget_bytes = absl::GetFlag(FLAGS_corpus_budget_bytes);
  o.pinned_budget_bytes = absl::GetFlag(FLAGS_pinned_budget_bytes);
  o.stream_buffer_bytes = absl::GetFlag(FLAGS_stream_buffer_bytes);
  if (o.stream_buffer_bytes < 0 || o.pinned_budget_bytes < 0) {
    return Fail("--stream_buffer_bytes and --pinned_budget_bytes must be >= 0");
  }
  o.max_message_bytes = absl::GetFlag(FLAGS_max_message_bytes);
  if (o.max_message_bytes < 1024 ||
      o.max_message_bytes > (int64_t{2} << 30) - 1) {
    return Fail("--max_message_bytes must be in [1024, 2147483647]");
  }
  o.drain_grace = absl::GetFlag(FLAGS_drain_grace);
  o.drain_timeout = absl::GetFlag(FLAGS_drain_timeout);
  if (o.drain_grace < absl::ZeroDuration()) {
    return Fail("--drain_grace must not be negative");
  }
  o.request_limits.max_query_tokens = absl::GetFlag(FLAGS_max_query_tokens);
  o.request_limits.max_candidates = absl::GetFlag(FLAGS_max_candidates);
  o.request_limits.max_top_k = absl::GetFlag(FLAGS_max_top_k);
  o.request_limits.max_batch_queries = absl::GetFlag(FLAGS_max_batch_queries);
  o.request_limits.max_stream_in_flight =
      absl::GetFlag(FLAGS_max_stream_in_flight);
  if (o.request_limits.max_top_k < 1 ||
      o.request_limits.max_top_k > maxsimd::kMaxTopK) {
    return Fail(
        absl::StrCat("--max_top_k must be in [1, ", maxsimd::kMaxTopK, "]"));
  }
  if (o.request_limits.max_query_tokens < 1 ||
      o.request_limits.max_candidates < 1 ||
      o.request_limits.max_batch_queries < 1 ||
      o.request_limits.max_stream_in_flight < 1) {
    return Fail(
        "--max_query_tokens, --max_candidates, --max_batch_queries and "
        "--max_stream_in_flight must be at least 1");
  }
  o.corpus_limits.max_dim = absl::GetFlag(FLAGS_max_dim);
  o.corpus_limits.max_doc_tokens = absl::GetFlag(FLAGS_max_doc_tokens);
  o.corpus_limits.max_corpora = absl::GetFlag(FLAGS_max_corpora);
  if (o.corpus_limits.max_corpora < 1) {
    return Fail("--max_corpora must be at least 1");
  }
  o.corpus_limits.shard_split_bytes = absl::GetFlag(FLAGS_shard_split_bytes);
  if (o.corpus_limits.shard_split_bytes < 1) {
    return Fail("--shard_split_bytes must be at least 1");
  }
  o.admin_limits.max_stream_bytes = absl::GetFlag(FLAGS_max_add_stream_bytes);
  o.admin_limits.max_write_streams = absl::GetFlag(FLAGS_max_write_streams);
  o.admin_limits.max_write_bytes = absl::GetFlag(FLAGS_max_write_bytes);
  o.admin_limits.write_idle_timeout = absl::GetFlag(FLAGS_write_idle_timeout);
  if (o.admin_limits.max_write_streams < 1) {
    return Fail(absl::StrCat("--max_write_streams is ",
                             o.admin_limits.max_write_streams,
                             "; must be at least 1"));
  }
  if (o.admin_limits.max_write_bytes < 1) {
    return Fail(absl::StrCat("--max_write_bytes is ",
                             o.admin_limits.max_write_bytes,
                             "; must be at least 1"));
  }
  if (o.admin_limits.write_idle_timeout < absl::Milliseconds(100)) {
    return Fail(
        absl::StrCat("--write_idle_timeout is ",
                     absl::FormatDuration(o.admin_limits.write_idle_timeout),
                     "; must be at least 100ms (inf = never)"));
  }
  o.scheduler.max_queued_queries = absl::GetFlag(FLAGS_max_queued_queries);
  o.scheduler.max_queued_bytes = absl::GetFlag(FLAGS_max_queued_bytes);
  o.scheduler.max_queued_queries_per_corpus =
      absl::GetFlag(FLAGS_max_queued_queries_per_corpus);
  o.scheduler.max_queued_bytes_per_corpus =
      absl::GetFlag(FLAGS_max_queued_bytes_per_corpus);
  o.scheduler.max_batch_queries = absl::GetFlag(FLAGS_batch_max_queries);
  o.scheduler.max_batch_tokens = absl::GetFlag(FLAGS_batch_max_tokens);
  o.scheduler.max_queue_delay = absl::GetFlag(FLAGS_max_queue_delay);
  o.scheduler.min_execution_time = absl::GetFlag(FLAGS_min_execution_time);
  o.scheduler.num_executors = absl::GetFlag(FLAGS_executors);
  o.scheduler.idle_spin = absl::GetFlag(FLAGS_executor_spin);
  o.scheduler.max_running_scans = absl::GetFlag(FLAGS_max_running_scans);
  o.scheduler.scan_lead = absl::GetFlag(FLAGS_scan_lead);
  o.data_dir = absl::GetFlag(FLAGS_data_dir);
  o.admin_limits.files_dir = absl::GetFlag(FLAGS_files_dir);
  o.compaction_interval = absl::GetFlag(FLAGS_compaction_interval);
  o.compaction.seal_bytes = absl::GetFlag(FLAGS_segment_seal_bytes);
  o.compaction.tombstone_ratio = absl::GetFlag(FLAGS_compact_tombstone_ratio);
  if (o.compaction_interval < absl::ZeroDuration() ||
      o.compaction.seal_bytes < 1 || !(o.compaction.tombstone_ratio > 0) ||
      o.compaction.tombstone_ratio > 1) {
    return Fail(
        "--compaction_interval must not be negative, --segment_seal_bytes "
        "must be at least 1 and --compact_tombstone_ratio in (0, 1]");
  }
  if (absl::Status s = maxsimd::ValidateSchedulerOptions(o.scheduler);
      !s.ok()) {
    return Fail(std::string(s.message()));
  }
  if (const int64_t docs = absl::GetFlag(FLAGS_demo_docs); docs > 0) {
    maxsimd::DemoCorpus demo;
    demo.num_docs = docs;
    o.demo_corpora.push_back(demo);
  }
  for (const std::string& spec : absl::GetFlag(FLAGS_demo_corpus)) {
    auto demo = maxsimd::ParseDemoCorpus(spec, "demo_corpus");
    if (!demo.ok()) return Fail(std::string(demo.status().message()));
    o.demo_corpora.push_back(*demo);
  }

  // Block the shutdown signals in every thread (they inherit this mask) so
  // that only sigwait() below receives them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGTERM);
  sigaddset(&signals, SIGINT);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);

  auto server = maxsimd::MaxsimServer::Start(o);
  if (!server.ok()) {
    spdlog::error("start-up failed: {}", server.status().ToString());
    return 1;
  }
  int received = 0;
  sigwait(&signals, &received);
  spdlog::info("received {}", received == SIGTERM ? "SIGTERM" : "SIGINT");
  (*server)->Shutdown();
  return 0;
}
