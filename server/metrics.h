// Prometheus metrics of the server, registered on one prometheus::Registry
// that is injected into every component (no global singletons).
//
// Names follow Prometheus conventions: a maxsimd_ prefix, base units
// (_seconds, _bytes), counters ending in _total, and a `stage` label where
// time is broken down. Corpus gauges and process metrics are computed at
// scrape time by collectors, so they never go stale.
//
// Thread-safety: thread-safe (prometheus-cpp metrics are atomic; label
// lookups take the family's lock).
#ifndef MAXSIMD_SERVER_METRICS_H_
#define MAXSIMD_SERVER_METRICS_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "prometheus/collectable.h"
#include "prometheus/counter.h"
#include "prometheus/family.h"
#include "prometheus/gauge.h"
#include "prometheus/histogram.h"
#include "prometheus/registry.h"

namespace maxsimd {

class CorpusRegistry;

class Metrics {
 public:
  // Registers every family on `registry`; `backend_name` and the build
  // facts become labels of maxsimd_build_info.
  Metrics(prometheus::Registry& registry, const std::string& backend_name);

  // One finished RPC: method is the gRPC method name ("Rerank", ...), code
  // the canonical status code name ("OK", "INVALID_ARGUMENT", ...).
  void ObserveRequest(const std::string& method, const std::string& code,
                      double seconds);
  // Time one query spent in a pipeline stage: "queue" (Submit to batch
  // start), "compute" (the batch's PLAID candidate generation, if any, and
  // backend search), its parts "generate" (PLAID candidate generation, for
  // the queries that had it), "h2d", "kernel", "topk", "d2h", and "total"
  // (Submit to answer).
  void ObserveStage(const std::string& stage, double seconds);
  void ObserveBatch(int num_queries);
  // Queries waiting for an executor, and their decoded query bytes.
  void SetQueueDepth(int64_t queries, int64_t bytes);
  // A query refused or withdrawn before it ran. reason: the limit that
  // refused it ("max_queued_queries", "max_queued_bytes",
  // "max_queued_queries_per_corpus", "max_queued_bytes_per_corpus"), or
  // "deadline", "cancelled", "draining".
  void CountRejected(const std::string& reason);
  // One PLAID candidate generation run by an executor for a batch:
  // `products` Q C^T products (maxsimd_plaid_centroid_products_total), of
  // which `device_products` ran on the backend's accelerator
  // (maxsimd_plaid_device_products_total), for `queries` queries
  // (maxsimd_plaid_generated_queries_total).
  void CountPlaidGeneration(int64_t products, int64_t device_products,
                            int64_t queries);
  // maxsimd_serving: 1 while health reports SERVING (configured corpora
  // loaded, backend healthy, not draining), else 0.
  void SetServing(bool serving);

 private:
  prometheus::Family<prometheus::Counter>& requests_;
  prometheus::Family<prometheus::Histogram>& request_duration_;
  prometheus::Family<prometheus::Histogram>& stage_duration_;
  prometheus::Histogram& batch_queries_;
  prometheus::Gauge& queue_depth_;
  prometheus::Gauge& queue_bytes_;
  prometheus::Family<prometheus::Counter>& rejected_;
  prometheus::Counter& plaid_products_;
  prometheus::Counter& plaid_device_products_;
  prometheus::Counter& plaid_queries_;
  prometheus::Gauge& serving_;
};

// Scrape-time gauges per corpus: maxsimd_corpus_documents,
// maxsimd_corpus_tokens, maxsimd_corpus_bytes,
// maxsimd_corpus_deleted_documents, maxsimd_corpus_segments and, when a
// queue depth source is given, maxsimd_corpus_queue_depth, all labelled
// {corpus}; maxsimd_corpus_load_failed{corpus} (1) for each corpus on disk
// that failed to load. And of the registry: maxsimd_corpora (corpora held,
// served or failed to load) and maxsimd_corpora_limit (--max_corpora);
// maxsimd_aliases_damaged (1 while the alias map is unknown: both alias
// files unusable, alias calls failing with DATA_LOSS) and
// maxsimd_aliases_from_backup (1 while the aliases come from ALIASES.prev
// because ALIASES was damaged at start), each 0 otherwise.
class CorpusCollector : public prometheus::Collectable {
 public:
  // Queries queued for one corpus; called at scrape time from the scraping
  // thread, so it must be thread-safe.
  using QueueDepthFn = std::function<int64_t(const std::string& corpus)>;

  explicit CorpusCollector(const CorpusRegistry* corpora,
                           QueueDepthFn queue_depth = nullptr)
      : corpora_(corpora), queue_depth_(std::move(queue_depth)) {}
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  const CorpusRegistry* corpora_;
  QueueDepthFn queue_depth_;
};

// Standard process metrics read from /proc at scrape time:
// process_cpu_seconds_total, process_resident_memory_bytes,
// process_virtual_memory_bytes, process_open_fds, process_start_time_seconds.
class ProcessCollector : public prometheus::Collectable {
 public:
  ProcessCollector();
  std::vector<prometheus::MetricFamily> Collect() const override;

 private:
  double start_time_seconds_ = 0;
};

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_METRICS_H_
