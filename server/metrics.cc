#include "server/metrics.h"

#include <dirent.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include "index/registry.h"
#include "prometheus/metric_family.h"

namespace maxsimd {
namespace {

// Latency buckets from 50 µs to 10 s.
const prometheus::Histogram::BucketBoundaries& LatencyBuckets() {
  static const auto* b = new prometheus::Histogram::BucketBoundaries{
      50e-6, 100e-6, 250e-6, 500e-6, 1e-3,   2.5e-3, 5e-3, 10e-3,
      25e-3, 50e-3,  100e-3, 250e-3, 500e-3, 1,      2.5,  10};
  return *b;
}

prometheus::MetricFamily GaugeFamily(const std::string& name,
                                     const std::string& help) {
  prometheus::MetricFamily f;
  f.name = name;
  f.help = help;
  f.type = prometheus::MetricType::Gauge;
  return f;
}

void AddGauge(prometheus::MetricFamily& f, double value,
              std::vector<prometheus::ClientMetric::Label> labels = {}) {
  prometheus::ClientMetric m;
  m.label = std::move(labels);
  m.gauge.value = value;
  f.metric.push_back(std::move(m));
}

}  // namespace

Metrics::Metrics(prometheus::Registry& registry,
                 const std::string& backend_name)
    : requests_(prometheus::BuildCounter()
                    .Name("maxsimd_requests_total")
                    .Help("Finished RPCs by method and status code.")
                    .Register(registry)),
      request_duration_(prometheus::BuildHistogram()
                            .Name("maxsimd_request_duration_seconds")
                            .Help("RPC latency from arrival to response.")
                            .Register(registry)),
      stage_duration_(prometheus::BuildHistogram()
                          .Name("maxsimd_stage_duration_seconds")
                          .Help("Per-query time in each pipeline stage.")
                          .Register(registry)),
      batch_queries_(prometheus::BuildHistogram()
                         .Name("maxsimd_batch_queries")
                         .Help("Queries per executed batch.")
                         .Register(registry)
                         .Add({},
                              prometheus::Histogram::BucketBoundaries{
                                  1, 2, 4, 8, 16, 32, 64, 128, 256})),
      queue_depth_(prometheus::BuildGauge()
                       .Name("maxsimd_queue_depth")
                       .Help("Queries waiting for an executor.")
                       .Register(registry)
                       .Add({})),
      queue_bytes_(prometheus::BuildGauge()
                       .Name("maxsimd_queue_bytes")
                       .Help("Decoded query bytes waiting for an executor.")
                       .Register(registry)
                       .Add({})),
      rejected_(prometheus::BuildCounter()
                    .Name("maxsimd_rejected_total")
                    .Help("Queries refused or withdrawn before they ran, by "
                          "reason.")
                    .Register(registry)),
      plaid_products_(
          prometheus::BuildCounter()
              .Name("maxsimd_plaid_centroid_products_total")
              .Help("Query-token by centroid products (Q C^T) run by PLAID "
                    "candidate generation, one per executed batch that "
                    "generates.")
              .Register(registry)
              .Add({})),
      plaid_device_products_(
          prometheus::BuildCounter()
              .Name("maxsimd_plaid_device_products_total")
              .Help("Of maxsimd_plaid_centroid_products_total, the products "
                    "that ran on the backend's accelerator (the GPU); the "
                    "others ran on the host's threads.")
              .Register(registry)
              .Add({})),
      plaid_queries_(prometheus::BuildCounter()
                         .Name("maxsimd_plaid_generated_queries_total")
                         .Help("Queries whose candidates PLAID candidate "
                               "generation found.")
                         .Register(registry)
                         .Add({})),
      serving_(prometheus::BuildGauge()
                   .Name("maxsimd_serving")
                   .Help("1 while health reports SERVING (corpora loaded, "
                         "backend healthy, not draining), else 0.")
                   .Register(registry)
                   .Add({})) {
  prometheus::BuildGauge()
      .Name("maxsimd_build_info")
      .Help("Build facts of the running server; the value is always 1.")
      .Register(registry)
      .Add({{"version", MAXSIMD_VERSION}, {"backend", backend_name}})
      .Set(1);
}

void Metrics::ObserveRequest(const std::string& method, const std::string& code,
                             double seconds) {
  requests_.Add({{"method", method}, {"code", code}}).Increment();
  request_duration_.Add({{"method", method}}, LatencyBuckets())
      .Observe(seconds);
}

void Metrics::ObserveStage(const std::string& stage, double seconds) {
  stage_duration_.Add({{"stage", stage}}, LatencyBuckets()).Observe(seconds);
}

void Metrics::ObserveBatch(int num_queries) {
  batch_queries_.Observe(num_queries);
}

void Metrics::SetQueueDepth(int64_t queries, int64_t bytes) {
  queue_depth_.Set(static_cast<double>(queries));
  queue_bytes_.Set(static_cast<double>(bytes));
}

void Metrics::CountRejected(const std::string& reason) {
  rejected_.Add({{"reason", reason}}).Increment();
}

void Metrics::CountPlaidGeneration(int64_t products, int64_t device_products,
                                   int64_t queries) {
  plaid_products_.Increment(static_cast<double>(products));
  plaid_device_products_.Increment(static_cast<double>(device_products));
  plaid_queries_.Increment(static_cast<double>(queries));
}

void Metrics::SetServing(bool serving) { serving_.Set(serving ? 1 : 0); }

std::vector<prometheus::MetricFamily> CorpusCollector::Collect() const {
  auto docs =
      GaugeFamily("maxsimd_corpus_documents", "Live documents per corpus.");
  auto tokens = GaugeFamily("maxsimd_corpus_tokens",
                            "Tokens of live documents per corpus.");
  auto bytes = GaugeFamily("maxsimd_corpus_bytes",
                           "Bytes of token storage held per corpus.");
  auto deleted = GaugeFamily("maxsimd_corpus_deleted_documents",
                             "Deleted documents still stored per corpus.");
  auto segments =
      GaugeFamily("maxsimd_corpus_segments", "Segments per corpus.");
  auto queued = GaugeFamily("maxsimd_corpus_queue_depth",
                            "Queries waiting for an executor per corpus.");
  for (const auto& corpus : corpora_->List()) {
    const auto snap = corpus->Snapshot();
    std::vector<prometheus::ClientMetric::Label> l{
        {"corpus", corpus->config().name}};
    AddGauge(docs, static_cast<double>(snap->live_docs()), l);
    AddGauge(tokens, static_cast<double>(snap->live_tokens()), l);
    AddGauge(bytes, static_cast<double>(snap->bytes()), l);
    AddGauge(deleted, static_cast<double>(snap->deleted_docs()), l);
    AddGauge(segments, static_cast<double>(snap->segments().size()), l);
    if (queue_depth_) {
      AddGauge(queued, static_cast<double>(queue_depth_(corpus->config().name)),
               l);
    }
  }
  std::vector<prometheus::MetricFamily> out{docs, tokens, bytes, deleted,
                                            segments};
  if (queue_depth_) out.push_back(std::move(queued));
  auto failed = GaugeFamily(
      "maxsimd_corpus_load_failed",
      "1 for each corpus on disk that failed to load; requests for it fail "
      "with its load error.");
  for (const auto& [name, status] : corpora_->Failed()) {
    AddGauge(failed, 1, {{"corpus", name}});
  }
  out.push_back(std::move(failed));
  auto held =
      GaugeFamily("maxsimd_corpora", "Corpora held, served or failed to load.");
  AddGauge(held, static_cast<double>(corpora_->NumCorpora()));
  out.push_back(std::move(held));
  auto limit = GaugeFamily("maxsimd_corpora_limit",
                           "Most corpora the server holds (--max_corpora).");
  AddGauge(limit, corpora_->limits().max_corpora);
  out.push_back(std::move(limit));
  const CorpusRegistry::AliasState aliases = corpora_->alias_state();
  auto damaged = GaugeFamily(
      "maxsimd_aliases_damaged",
      "1 while the alias map is unknown (ALIASES and ALIASES.prev both "
      "unusable at start): alias calls fail with DATA_LOSS until the files "
      "are repaired and the server restarted.");
  AddGauge(damaged, aliases == CorpusRegistry::AliasState::kUnknown ? 1 : 0);
  out.push_back(std::move(damaged));
  auto from_backup = GaugeFamily(
      "maxsimd_aliases_from_backup",
      "1 while the aliases come from ALIASES.prev because ALIASES was "
      "damaged at start (the last alias change may be lost); the next alias "
      "change clears it.");
  AddGauge(from_backup,
           aliases == CorpusRegistry::AliasState::kFromBackup ? 1 : 0);
  out.push_back(std::move(from_backup));
  return out;
}

ProcessCollector::ProcessCollector() {
  // The process start time is boot time + starttime ticks from /proc, but
  // the server starts this collector at start-up, so "now" is within
  // milliseconds of it and needs no /proc arithmetic.
  start_time_seconds_ = std::chrono::duration<double>(
                            std::chrono::system_clock::now().time_since_epoch())
                            .count();
}

std::vector<prometheus::MetricFamily> ProcessCollector::Collect() const {
  std::vector<prometheus::MetricFamily> out;
  // /proc/self/stat: fields 14 (utime) and 15 (stime) in clock ticks, 23
  // (vsize) in bytes and 24 (rss) in pages, counted after the ")" that ends
  // the command name.
  std::ifstream stat("/proc/self/stat");
  std::string line;
  if (std::getline(stat, line)) {
    std::istringstream rest(line.substr(line.rfind(')') + 2));
    std::vector<std::string> f;
    for (std::string tok; rest >> tok;) f.push_back(tok);
    // f[0] is field 3 (state).
    if (f.size() > 21) {
      const double ticks = static_cast<double>(sysconf(_SC_CLK_TCK));
      prometheus::MetricFamily cpu;
      cpu.name = "process_cpu_seconds_total";
      cpu.help = "Total user and system CPU time spent in seconds.";
      cpu.type = prometheus::MetricType::Counter;
      prometheus::ClientMetric m;
      m.counter.value = (std::stod(f[11]) + std::stod(f[12])) / ticks;
      cpu.metric.push_back(m);
      out.push_back(std::move(cpu));
      auto vsize = GaugeFamily("process_virtual_memory_bytes",
                               "Virtual memory size in bytes.");
      AddGauge(vsize, std::stod(f[20]));
      out.push_back(std::move(vsize));
      auto rss = GaugeFamily("process_resident_memory_bytes",
                             "Resident memory size in bytes.");
      AddGauge(rss,
               std::stod(f[21]) * static_cast<double>(sysconf(_SC_PAGESIZE)));
      out.push_back(std::move(rss));
    }
  }
  int fds = 0;
  if (DIR* dir = opendir("/proc/self/fd")) {
    while (dirent* e = readdir(dir)) fds += e->d_name[0] != '.';
    closedir(dir);
    --fds;  // the descriptor opendir itself holds
  }
  auto open_fds =
      GaugeFamily("process_open_fds", "Number of open file descriptors.");
  AddGauge(open_fds, fds);
  out.push_back(std::move(open_fds));
  auto start = GaugeFamily("process_start_time_seconds",
                           "Start time of the process since unix epoch in "
                           "seconds.");
  AddGauge(start, start_time_seconds_);
  out.push_back(std::move(start));
  return out;
}

}  // namespace maxsimd
