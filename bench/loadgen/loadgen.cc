// loadgen: drives a maxsimd server's unary Rerank with open- or closed-loop
// load and reports throughput, exact latency percentiles, status codes and
// the server's own timing breakdown.
//
// Open loop (--mode=open): Poisson arrivals at --rate requests/s, issued by
// --senders threads, each a Poisson stream of rate / senders (their sum is
// Poisson at --rate; one thread encodes about 9k requests of 1,000
// candidates a second). A sender sends each request at its scheduled
// instant and latency counts from
// that instant, not from the actual send, so a server that stalls the sender
// is still charged for the wait (no coordinated omission). Requests that
// would exceed --max_outstanding are counted as not_sent instead.
// Closed loop (--mode=closed): --concurrency requests in flight, each
// re-issued by the completion callback of the one before, or with
// --blocking by one thread per request in flight making blocking calls.
//
// A point runs --warmup (discarded), then measures until --duration passes
// or --requests have been issued, whichever comes first, and waits for every
// request in flight. Requests sent after the warm-up are "measured": their
// status codes are counted and, for OK ones, latency percentiles are exact
// (nearest rank). Achieved QPS is the server's steady-state rate: every OK
// response that arrived in the measured window (from the end of the warm-up
// to the end of --duration, or to the last measured response if --requests
// ends the point first) over the window's length. --sweep=r1,r2,... runs one
// open-loop point per rate.
// Queries (and candidate sets) come from a pre-generated pool, so the hot
// path only encodes and sends.
//
// Exit status: 0 after a run (failed responses are reported, not fatal),
// 1 when the server or corpus cannot be reached, 2 for bad flags.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <fstream>
#include <map>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "client/client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Server address host:port");
ABSL_FLAG(std::string, corpus, "demo", "Corpus to rerank against");
ABSL_FLAG(int32_t, dim, 0, "Query width; 0 = the corpus's dim (GetCorpus)");
ABSL_FLAG(int32_t, query_tokens, 32, "Tokens per query (Lq)");
ABSL_FLAG(int32_t, candidates, 0,
          "Candidate ids per request; 0 = scan the whole corpus");
ABSL_FLAG(std::string, id_prefix, "doc-",
          "Candidate ids are id_prefix + a decimal index in [0, num_docs), "
          "the scheme of the synthetic corpora (--demo_docs)");
ABSL_FLAG(int64_t, num_docs, 0,
          "Range of candidate indices; 0 = the corpus's document count");
ABSL_FLAG(int32_t, top_k, 10, "Results per request");
ABSL_FLAG(std::string, dtype, "fp32", "Query encoding on the wire: fp32|fp16");
ABSL_FLAG(std::string, mode, "open", "open (Poisson arrivals) or closed");
ABSL_FLAG(double, rate, 100, "Open loop: offered requests per second");
ABSL_FLAG(std::vector<std::string>, sweep, {},
          "Open loop: comma-separated rates, one measured point each "
          "(overrides --rate)");
ABSL_FLAG(int32_t, concurrency, 8, "Closed loop: requests in flight");
ABSL_FLAG(bool, blocking, false,
          "Closed loop: one thread per request in flight, each making "
          "blocking calls (no callback-thread hop on the client)");
ABSL_FLAG(bool, busy_poll, false,
          "With --blocking: each call polls for its response instead of "
          "sleeping (ClientOptions::busy_poll; one busy core per call)");
ABSL_FLAG(int32_t, senders, 4,
          "Open loop: threads issuing requests, each at --rate / --senders");
ABSL_FLAG(int32_t, channels, 1,
          "Independent channels (connections); requests go round robin");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(10), "Per-request deadline");
ABSL_FLAG(absl::Duration, duration, absl::Seconds(10),
          "Measured time per point, after the warm-up; 0 = no limit");
ABSL_FLAG(int64_t, requests, 0,
          "Measured requests per point; 0 = no limit (--duration bounds it)");
ABSL_FLAG(absl::Duration, warmup, absl::Seconds(1),
          "Time per point whose requests are sent but not measured");
ABSL_FLAG(int64_t, max_outstanding, 10000,
          "Open loop: most requests in flight; more are counted as not_sent");
ABSL_FLAG(int32_t, query_pool, 64, "Distinct pre-generated queries");
ABSL_FLAG(uint64_t, seed, 1, "Seed for queries, candidates and arrivals");
ABSL_FLAG(std::string, json, "", "If set, also write the report here");

namespace maxsimd {
namespace {

using Clock = std::chrono::steady_clock;

struct Config {
  bool open_loop = true;
  std::vector<double> rates;  // open loop: one point per rate
  int32_t concurrency = 0;
  bool blocking = false;
  int32_t channels = 0;
  int32_t senders = 1;
  int32_t dim = 0;
  int32_t query_tokens = 0;
  int32_t candidates = 0;
  int64_t num_docs = 0;
  Clock::duration duration{};  // 0 = unbounded
  int64_t requests = 0;        // 0 = unbounded
  Clock::duration warmup{};
  int64_t max_outstanding = 0;
  uint64_t seed = 0;
};

// Validates the flags that need no server; the caller resolves dim and
// num_docs from the corpus.
absl::StatusOr<Config> ConfigFromFlags() {
  Config c;
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (mode != "open" && mode != "closed") {
    return absl::InvalidArgumentError("--mode must be open or closed");
  }
  c.open_loop = mode == "open";
  const std::vector<std::string> sweep = absl::GetFlag(FLAGS_sweep);
  if (!sweep.empty() && !c.open_loop) {
    return absl::InvalidArgumentError("--sweep needs --mode=open");
  }
  for (const std::string& s : sweep) {
    double rate = 0;
    if (!absl::SimpleAtod(s, &rate) || !(rate > 0)) {
      return absl::InvalidArgumentError(
          absl::StrCat("--sweep: '", s, "' is not a positive rate"));
    }
    c.rates.push_back(rate);
  }
  if (c.rates.empty()) c.rates.push_back(absl::GetFlag(FLAGS_rate));
  if (c.open_loop && !(c.rates[0] > 0)) {
    return absl::InvalidArgumentError("--rate must be positive");
  }
  const std::string dtype = absl::GetFlag(FLAGS_dtype);
  if (dtype != "fp32" && dtype != "fp16") {
    return absl::InvalidArgumentError("--dtype must be fp32 or fp16");
  }
  c.concurrency = absl::GetFlag(FLAGS_concurrency);
  c.blocking = absl::GetFlag(FLAGS_blocking);
  if (absl::GetFlag(FLAGS_busy_poll) && (c.open_loop || !c.blocking)) {
    return absl::InvalidArgumentError(
        "--busy_poll needs --mode=closed --blocking");
  }
  c.channels = absl::GetFlag(FLAGS_channels);
  c.senders = absl::GetFlag(FLAGS_senders);
  c.dim = absl::GetFlag(FLAGS_dim);
  c.query_tokens = absl::GetFlag(FLAGS_query_tokens);
  c.candidates = absl::GetFlag(FLAGS_candidates);
  c.num_docs = absl::GetFlag(FLAGS_num_docs);
  c.requests = absl::GetFlag(FLAGS_requests);
  c.max_outstanding = absl::GetFlag(FLAGS_max_outstanding);
  c.seed = absl::GetFlag(FLAGS_seed);
  const absl::Duration duration = absl::GetFlag(FLAGS_duration);
  const absl::Duration warmup = absl::GetFlag(FLAGS_warmup);
  if (c.concurrency < 1 || c.channels < 1 || c.senders < 1 ||
      c.query_tokens < 1 || c.max_outstanding < 1 ||
      absl::GetFlag(FLAGS_query_pool) < 1 || absl::GetFlag(FLAGS_top_k) < 1) {
    return absl::InvalidArgumentError(
        "--concurrency, --channels, --senders, --query_tokens, "
        "--max_outstanding, "
        "--query_pool and --top_k must be at least 1");
  }
  if (c.dim < 0 || c.candidates < 0 || c.num_docs < 0 || c.requests < 0 ||
      duration < absl::ZeroDuration() || warmup < absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "--dim, --candidates, --num_docs, --requests, --duration and "
        "--warmup must not be negative");
  }
  if (duration == absl::ZeroDuration() && c.requests == 0) {
    return absl::InvalidArgumentError(
        "--duration=0 needs --requests > 0 to end the run");
  }
  if (absl::GetFlag(FLAGS_timeout) <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("--timeout must be positive");
  }
  c.duration = absl::ToChronoNanoseconds(duration);
  c.warmup = absl::ToChronoNanoseconds(warmup);
  return c;
}

// Random unit-norm token rows, [query_tokens, dim] per query, each with its
// own set of distinct candidate ids when `candidates` > 0.
std::vector<Query> MakeQueryPool(const Config& c) {
  std::mt19937_64 rng(c.seed);
  std::normal_distribution<float> normal;
  std::vector<Query> pool(absl::GetFlag(FLAGS_query_pool));
  for (Query& q : pool) {
    q.corpus = absl::GetFlag(FLAGS_corpus);
    q.dim = c.dim;
    q.top_k = absl::GetFlag(FLAGS_top_k);
    q.tokens.resize(static_cast<size_t>(c.query_tokens) * c.dim);
    for (int32_t t = 0; t < c.query_tokens; ++t) {
      float* row = &q.tokens[static_cast<size_t>(t) * c.dim];
      double norm = 0;
      for (int32_t d = 0; d < c.dim; ++d) {
        row[d] = normal(rng);
        norm += double{row[d]} * row[d];
      }
      const float scale =
          norm > 0 ? static_cast<float>(1 / std::sqrt(norm)) : 0;
      for (int32_t d = 0; d < c.dim; ++d) row[d] *= scale;
    }
    // Floyd's sampling: `candidates` distinct indices, uniformly, in
    // O(candidates) memory however large the corpus.
    absl::flat_hash_set<int64_t> chosen;
    for (int64_t j = c.num_docs - c.candidates; j < c.num_docs; ++j) {
      int64_t pick = std::uniform_int_distribution<int64_t>(0, j)(rng);
      if (!chosen.insert(pick).second) {
        pick = j;
        chosen.insert(j);
      }
      q.candidate_ids.push_back(
          absl::StrCat(absl::GetFlag(FLAGS_id_prefix), pick));
    }
  }
  return pool;
}

// What one point measured.
struct PointResult {
  double offered_rps = 0;   // open loop only
  int64_t sent = 0;         // measured requests sent
  int64_t not_sent = 0;     // measured arrivals dropped at max_outstanding
  int64_t ok = 0;           // responses to measured requests
  int64_t errors = 0;       // measured requests that failed
  double measured_s = 0;    // the measured window
  double achieved_qps = 0;  // OK responses in the window / measured_s
  // Over OK responses, in ms: p50, p90, p99, p99.9, max, mean.
  double latency_ms[6] = {};
  std::map<std::string, int64_t> codes;  // by gRPC status code name
  // Means of the server's Timing over OK responses: queue, compute, kernel
  // and total ns, then batch_queries.
  double timing_mean[5] = {};
};

constexpr const char* kLatencyNames[6] = {"p50",   "p90", "p99",
                                          "p99_9", "max", "mean"};
constexpr const char* kTimingNames[5] = {"queue_ns", "compute_ns", "kernel_ns",
                                         "total_ns", "batch_queries"};

// One measured point. The issuing thread (the caller of Open or Closed) and
// the completion callbacks, which run on gRPC threads, share the state
// behind mu_. Open and Closed return only when no request is in flight, so
// callbacks never outlive the object. Use each object for one point.
class LoadPoint {
 public:
  // `clients` and `pool` must outlive the object.
  LoadPoint(const Config& config,
            absl::Span<const std::unique_ptr<Client>> clients,
            absl::Span<const Query> pool)
      : config_(config), clients_(clients), pool_(pool) {}

  PointResult Open(double rate) {
    Start();
    const int32_t n = config_.senders;
    std::vector<std::thread> senders;
    for (int32_t i = 1; i < n; ++i) {
      senders.emplace_back([this, rate, n, i] { Issue(rate / n, i); });
    }
    Issue(rate / n, 0);
    for (std::thread& t : senders) t.join();
    WaitIdle();
    PointResult result = Summarize();
    result.offered_rps = rate;
    return result;
  }

  PointResult Closed(int32_t concurrency) {
    Start();
    if (config_.blocking) {
      std::vector<std::thread> workers;
      for (int32_t i = 0; i < concurrency; ++i) {
        workers.emplace_back([this, i] { Block(i); });
      }
      for (std::thread& t : workers) t.join();
      return Summarize();
    }
    const bool measured = config_.warmup == Clock::duration::zero();
    int64_t initial = concurrency;
    if (measured && config_.requests > 0) {
      initial = std::min(initial, config_.requests);
    }
    {
      absl::MutexLock lock(&mu_);
      outstanding_ = initial;
      if (measured) sent_ = initial;
    }
    for (int64_t i = 0; i < initial; ++i) Send(start_, measured);
    WaitIdle();
    return Summarize();
  }

 private:
  // One blocking closed-loop worker: a call at a time until the point ends.
  void Block(int32_t worker) {
    for (int64_t i = worker;; i += config_.concurrency) {
      const Clock::time_point now = Clock::now();
      bool measured;
      {
        absl::MutexLock lock(&mu_);
        if (now >= end_ || OutOfBudget()) return;
        measured = now >= measure_start_;
        ++outstanding_;
        if (measured) ++sent_;
      }
      Complete(
          now, measured,
          clients_[worker % clients_.size()]->Rerank(pool_[i % pool_.size()]));
    }
  }

  // One sender: Poisson arrivals at `rate` until the point ends.
  void Issue(double rate, int32_t sender) {
    std::mt19937_64 rng(config_.seed + static_cast<uint64_t>(sender));
    std::exponential_distribution<double> gap(rate);
    Clock::time_point next = start_;
    while (true) {
      next += std::chrono::duration_cast<Clock::duration>(
          std::chrono::duration<double>(gap(rng)));
      if (next >= end_) break;
      {
        absl::MutexLock lock(&mu_);
        if (OutOfBudget()) break;
      }
      const bool measured = next >= measure_start_;
      std::this_thread::sleep_until(next);
      {
        absl::MutexLock lock(&mu_);
        if (OutOfBudget()) break;  // another sender may have used it up
        if (outstanding_ >= config_.max_outstanding) {
          if (measured) ++not_sent_;
          continue;
        }
        ++outstanding_;
        if (measured) ++sent_;
      }
      Send(next, measured);
    }
  }

  struct Sample {
    int64_t latency_ns;
    v1::Timing timing;
  };

  void Start() {
    start_ = Clock::now();
    measure_start_ = start_ + config_.warmup;
    end_ = config_.duration == Clock::duration::zero()
               ? Clock::time_point::max()
               : measure_start_ + config_.duration;
  }

  // True once --requests measured requests have been issued (or dropped).
  bool OutOfBudget() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return config_.requests > 0 && sent_ + not_sent_ >= config_.requests;
  }

  // REQUIRES: the request is already counted in outstanding_ (and sent_);
  // mu_ not held, since the callback may run inline.
  void Send(Clock::time_point scheduled, bool measured) {
    const uint64_t seq = next_seq_.fetch_add(1, std::memory_order_relaxed);
    clients_[seq % clients_.size()]->RerankAsync(
        pool_[seq % pool_.size()],
        [this, scheduled, measured](absl::StatusOr<v1::RerankResponse> r) {
          Complete(scheduled, measured, r);
        });
  }

  // Runs on a gRPC thread. In closed loop it re-issues while the point lasts.
  void Complete(Clock::time_point scheduled, bool measured,
                const absl::StatusOr<v1::RerankResponse>& response) {
    const Clock::time_point now = Clock::now();
    bool resend = false;
    bool resend_measured = false;
    {
      absl::MutexLock lock(&mu_);
      if (response.ok() && now >= measure_start_) ok_done_.push_back(now);
      if (measured) {
        last_done_ = std::max(last_done_, now);
        ++codes_[absl::StatusCodeToString(response.status().code())];
        if (response.ok()) {
          const auto latency =
              std::chrono::duration_cast<std::chrono::nanoseconds>(now -
                                                                   scheduled);
          samples_.push_back({latency.count(), response->timing()});
        }
      }
      if (!config_.open_loop && !config_.blocking && now < end_ &&
          !OutOfBudget()) {
        resend = true;
        resend_measured = now >= measure_start_;
        if (resend_measured) ++sent_;
      } else {
        --outstanding_;
      }
    }
    if (resend) Send(now, resend_measured);
  }

  void WaitIdle() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(
        +[](int64_t* outstanding) { return *outstanding == 0; },
        &outstanding_));
  }

  PointResult Summarize() {
    absl::MutexLock lock(&mu_);
    PointResult r;
    r.sent = sent_;
    r.not_sent = not_sent_;
    r.codes = codes_;
    r.ok = static_cast<int64_t>(samples_.size());
    for (const auto& [name, count] : codes_) r.errors += count;
    r.errors -= r.ok;
    const Clock::time_point window_end =
        OutOfBudget() ? std::min(end_, last_done_) : end_;
    if (window_end > measure_start_) {
      r.measured_s =
          std::chrono::duration<double>(window_end - measure_start_).count();
      const auto in_window = std::count_if(
          ok_done_.begin(), ok_done_.end(),
          [window_end](Clock::time_point t) { return t <= window_end; });
      r.achieved_qps = in_window / r.measured_s;
    }
    if (samples_.empty()) return r;
    std::vector<int64_t> ns;
    double sum = 0;
    for (const Sample& s : samples_) {
      ns.push_back(s.latency_ns);
      sum += s.latency_ns;
      r.timing_mean[0] += s.timing.queue_ns();
      r.timing_mean[1] += s.timing.compute_ns();
      r.timing_mean[2] += s.timing.kernel_ns();
      r.timing_mean[3] += s.timing.total_ns();
      r.timing_mean[4] += s.timing.batch_queries();
    }
    for (double& t : r.timing_mean) t /= r.ok;
    std::sort(ns.begin(), ns.end());
    // Nearest rank, ceil(q * n) in integers so that 0.99 * 100 is 99: the
    // smallest sample with at least a fraction q of all at or below it.
    const int64_t per_mille[4] = {500, 900, 990, 999};
    for (int i = 0; i < 4; ++i) {
      const int64_t rank = (per_mille[i] * r.ok + 999) / 1000;
      r.latency_ms[i] = ns[std::max<int64_t>(rank, 1) - 1] / 1e6;
    }
    r.latency_ms[4] = ns.back() / 1e6;
    r.latency_ms[5] = sum / r.ok / 1e6;
    return r;
  }

  const Config& config_;
  const absl::Span<const std::unique_ptr<Client>> clients_;
  const absl::Span<const Query> pool_;
  std::atomic<uint64_t> next_seq_{0};  // round robin over clients and pool
  // Written by the issuing thread before any request is sent.
  Clock::time_point start_, measure_start_, end_;

  absl::Mutex mu_;
  int64_t outstanding_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t sent_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t not_sent_ ABSL_GUARDED_BY(mu_) = 0;
  Clock::time_point last_done_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, int64_t> codes_ ABSL_GUARDED_BY(mu_);
  std::vector<Sample> samples_ ABSL_GUARDED_BY(mu_);  // OK, measured
  // Arrival of every OK response after the warm-up, measured or not.
  std::vector<Clock::time_point> ok_done_ ABSL_GUARDED_BY(mu_);
};

void PrintPoint(const Config& c, const PointResult& r) {
  if (c.open_loop) {
    absl::PrintF("open loop, offered %.1f rps:\n", r.offered_rps);
  } else {
    absl::PrintF("closed loop, concurrency %d:\n", c.concurrency);
  }
  absl::PrintF("  sent %d, not sent %d, measured %.2f s, achieved %.1f QPS\n",
               r.sent, r.not_sent, r.measured_s, r.achieved_qps);
  std::string codes;
  for (const auto& [name, count] : r.codes) {
    absl::StrAppend(&codes, " ", name, "=", count);
  }
  absl::PrintF("  responses:%s\n", codes.empty() ? " none" : codes);
  const double* l = r.latency_ms;
  absl::PrintF(
      "  latency ms: p50 %.3f  p90 %.3f  p99 %.3f  p99.9 %.3f  max %.3f  "
      "mean %.3f\n",
      l[0], l[1], l[2], l[3], l[4], l[5]);
  const double* t = r.timing_mean;
  absl::PrintF(
      "  server mean ms: queue %.3f  compute %.3f  kernel %.3f  total %.3f; "
      "batch %.2f queries\n",
      t[0] / 1e6, t[1] / 1e6, t[2] / 1e6, t[3] / 1e6, t[4]);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      absl::StrAppend(&out, "\\", std::string(1, ch));
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      absl::StrAppendFormat(&out, "\\u%04x",
                            static_cast<int>(static_cast<unsigned char>(ch)));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

std::string ToJson(const Config& c, const std::vector<PointResult>& points) {
  std::string j = absl::StrFormat(
      "{\n  \"target\": %s,\n  \"corpus\": %s,\n  \"mode\": \"%s\",\n"
      "  \"dim\": %d,\n  \"query_tokens\": %d,\n  \"candidates\": %d,\n"
      "  \"top_k\": %d,\n  \"dtype\": \"%s\",\n  \"channels\": %d,\n"
      "  \"senders\": %d,\n"
      "  \"concurrency\": %d,\n  \"max_outstanding\": %d,\n"
      "  \"duration_s\": %g,\n  \"warmup_s\": %g,\n"
      "  \"points\": [",
      JsonString(absl::GetFlag(FLAGS_target)),
      JsonString(absl::GetFlag(FLAGS_corpus)), c.open_loop ? "open" : "closed",
      c.dim, c.query_tokens, c.candidates, absl::GetFlag(FLAGS_top_k),
      absl::GetFlag(FLAGS_dtype), c.channels, c.senders, c.concurrency,
      c.max_outstanding, std::chrono::duration<double>(c.duration).count(),
      std::chrono::duration<double>(c.warmup).count());
  for (size_t p = 0; p < points.size(); ++p) {
    const PointResult& r = points[p];
    absl::StrAppendFormat(
        &j,
        "%s\n    {\"offered_rps\": %g, \"sent\": %d, \"not_sent\": %d, "
        "\"ok\": %d, \"errors\": %d, \"measured_s\": %.6f, "
        "\"achieved_qps\": %.3f,\n     \"latency_ms\": {",
        p == 0 ? "" : ",", r.offered_rps, r.sent, r.not_sent, r.ok, r.errors,
        r.measured_s, r.achieved_qps);
    for (int i = 0; i < 6; ++i) {
      absl::StrAppendFormat(&j, "%s\"%s\": %.6f", i == 0 ? "" : ", ",
                            kLatencyNames[i], r.latency_ms[i]);
    }
    j += "},\n     \"status_codes\": {";
    bool first = true;
    for (const auto& [name, count] : r.codes) {
      absl::StrAppendFormat(&j, "%s%s: %d", first ? "" : ", ", JsonString(name),
                            count);
      first = false;
    }
    j += "},\n     \"server_timing_mean\": {";
    for (int i = 0; i < 5; ++i) {
      absl::StrAppendFormat(&j, "%s\"%s\": %.3f", i == 0 ? "" : ", ",
                            kTimingNames[i], r.timing_mean[i]);
    }
    j += "}}";
  }
  return j + "\n  ]\n}\n";
}

int Run() {
  absl::StatusOr<Config> config = ConfigFromFlags();
  if (!config.ok()) {
    std::fprintf(stderr, "loadgen: %s\n",
                 std::string(config.status().message()).c_str());
    return 2;
  }
  Config& c = *config;

  ClientOptions options;
  options.target = absl::GetFlag(FLAGS_target);
  options.timeout = absl::GetFlag(FLAGS_timeout);
  options.send_float16 = absl::GetFlag(FLAGS_dtype) == "fp16";
  options.busy_poll = absl::GetFlag(FLAGS_busy_poll);
  std::vector<std::unique_ptr<Client>> clients;
  for (int32_t i = 0; i < c.channels; ++i) {
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    if (!client.ok()) {
      std::fprintf(stderr, "loadgen: %s\n", client.status().ToString().c_str());
      return 2;
    }
    // Also connects every channel before the clock starts.
    absl::StatusOr<v1::CorpusInfo> info =
        (*client)->GetCorpus(absl::GetFlag(FLAGS_corpus));
    if (!info.ok()) {
      std::fprintf(stderr, "loadgen: GetCorpus(%s) on %s: %s\n",
                   absl::GetFlag(FLAGS_corpus).c_str(), options.target.c_str(),
                   info.status().ToString().c_str());
      return 1;
    }
    if (c.dim == 0) c.dim = info->dim();
    if (c.num_docs == 0) c.num_docs = info->num_documents();
    clients.push_back(std::move(*client));
  }
  if (c.candidates > c.num_docs) {
    std::fprintf(stderr,
                 "loadgen: --candidates=%d exceeds the %lld documents to draw "
                 "from\n",
                 c.candidates, static_cast<long long>(c.num_docs));
    return 2;
  }
  const std::vector<Query> pool = MakeQueryPool(c);

  std::vector<PointResult> points;
  if (c.open_loop) {
    for (const double rate : c.rates) {
      points.push_back(LoadPoint(c, clients, pool).Open(rate));
      PrintPoint(c, points.back());
    }
  } else {
    points.push_back(LoadPoint(c, clients, pool).Closed(c.concurrency));
    PrintPoint(c, points.back());
  }
  const std::string path = absl::GetFlag(FLAGS_json);
  if (!path.empty()) {
    std::ofstream out(path);
    out << ToJson(c, points);
    if (!out.flush()) {
      std::fprintf(stderr, "loadgen: cannot write %s\n", path.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace
}  // namespace maxsimd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Load generator for maxsimd's Rerank.\nUsage: loadgen --target=host:port "
      "[--mode=open --rate=R | --mode=closed --concurrency=C] "
      "[--sweep=r1,r2,...] [--json=PATH]");
  const std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  if (args.size() > 1) {
    std::fprintf(stderr, "loadgen: unexpected argument '%s'\n", args[1]);
    return 2;
  }
  return maxsimd::Run();
}
