#include "server/server.h"

#include <algorithm>
#include <climits>
#include <functional>
#include <thread>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "index/registry.h"
#include "index/storage.h"
#include "index/synthetic.h"
#include "kernels/base/status_macros.h"
#include "kernels/base/thread_pool.h"
#include "kernels/element.h"
#include "kernels/gpu_backend.h"
#include "kernels/maxsim_cpu.h"
#include "kernels/sharded_backend.h"
#include "prometheus/registry.h"
#include "server/health_service.h"
#include "server/metrics.h"
#include "server/metrics_http.h"
#include "server/parse_error_interceptor.h"
#include "server/reranker_service.h"
#include "spdlog/spdlog.h"

namespace maxsimd {
namespace {

constexpr const char* kServices[] = {"maxsimd.v1.Reranker", "maxsimd.v1.Admin"};

// A duration as a gRPC channel argument in milliseconds; INT_MAX (gRPC's
// "never") for InfiniteDuration.
int ChannelArgMs(absl::Duration d) {
  if (d >= absl::Milliseconds(INT_MAX)) return INT_MAX;
  return static_cast<int>(std::max<int64_t>(1, absl::ToInt64Milliseconds(d)));
}

BackendLimits LimitsFor(const ServerOptions& o) {
  BackendLimits l;
  l.max_batch_queries = std::max(o.scheduler.max_batch_queries,
                                 o.request_limits.max_batch_queries);
  l.max_batch_query_tokens =
      int64_t{l.max_batch_queries} * o.request_limits.max_query_tokens;
  l.max_batch_candidates =
      std::max<int64_t>(int64_t{o.request_limits.max_candidates} *
                            std::min(l.max_batch_queries, 16),
                        o.request_limits.max_candidates);
  l.max_dim = o.corpus_limits.max_dim;
  return l;
}

// Runs fn(c) for every c in [0, chunks) on `pool`, a chunk at a time.
void ForEachChunk(ThreadPool& pool, int64_t chunks,
                  const std::function<void(int64_t)>& fn) {
  pool.ParallelFor(chunks, 1, [&fn](int, int64_t begin, int64_t end) {
    for (int64_t c = begin; c < end; ++c) fn(c);
  });
}

// Creates one demo corpus: synthetic documents "doc-<index>", generated in
// chunks of about 2^20 tokens on every core (chunk c with seed c + 1) so a
// large corpus never exists in fp32 at once. With a fixed document length
// the chunks are written in place into one segment (one append, split over
// the shards), so the corpus stays a few segments however large; with
// random lengths each chunk is its own append.
absl::Status LoadDemoCorpus(CorpusRegistry* corpora, const DemoCorpus& demo) {
  CorpusConfig config;
  config.name = demo.name;
  config.dim = demo.dim;
  MAXSIMD_ASSIGN_OR_RETURN(std::shared_ptr<Corpus> corpus,
                           corpora->Create(config));
  const int64_t len = demo.doc_tokens;
  const int64_t chunk_docs =
      std::max<int64_t>(1, (int64_t{1} << 20) / (len > 0 ? len : 166));
  const int64_t chunks = (demo.num_docs + chunk_docs - 1) / chunk_docs;
  auto generate = [&](int64_t c) {
    SyntheticCorpusOptions so;
    so.num_docs = std::min(chunk_docs, demo.num_docs - c * chunk_docs);
    so.dim = demo.dim;
    if (len > 0) so.min_tokens = so.max_tokens = static_cast<int32_t>(len);
    so.seed = static_cast<uint64_t>(c) + 1;
    SyntheticCorpus synth = GenerateSyntheticCorpus(so);
    for (int64_t i = 0; i < so.num_docs; ++i) {
      synth.ids[i] = absl::StrCat("doc-", c * chunk_docs + i);
    }
    return synth;
  };
  ThreadPool pool(0);  // one thread per core, only while loading
  absl::Mutex mu;
  absl::Status status;
  if (len == 0) {
    ForEachChunk(pool, chunks, [&](int64_t c) {
      SyntheticCorpus synth = generate(c);
      std::vector<int32_t> counts;
      for (size_t i = 0; i + 1 < synth.cu_seqlens.size(); ++i) {
        counts.push_back(static_cast<int32_t>(synth.cu_seqlens[i + 1] -
                                              synth.cu_seqlens[i]));
      }
      DocumentBuilder builder(config, corpora->limits());
      absl::Status st = builder.Add(synth.ids, counts, synth.tokens.data(),
                                    synth.cu_seqlens.back(), DType::kFloat32,
                                    absl::StrCat("demo corpus ", demo.name));
      if (st.ok()) st = corpus->Append(builder.Take()).status();
      absl::MutexLock lock(&mu);
      if (status.ok()) status = st;
    });
    return status;
  }
  SegmentData all;
  all.dim = demo.dim;
  all.dtype = config.storage_dtype;
  const int64_t row_bytes = int64_t{demo.dim} * DTypeSize(all.dtype);
  all.tokens.resize(demo.num_docs * len * row_bytes);
  all.ids.resize(demo.num_docs);
  all.cu_seqlens.resize(demo.num_docs + 1);
  for (int64_t d = 0; d <= demo.num_docs; ++d) all.cu_seqlens[d] = d * len;
  ForEachChunk(pool, chunks, [&](int64_t c) {
    SyntheticCorpus synth = generate(c);
    const int64_t first = c * chunk_docs;
    ConvertFromFloat(synth.tokens.data(),
                     static_cast<int64_t>(synth.tokens.size()), all.dtype,
                     all.tokens.data() + first * len * row_bytes);
    std::move(synth.ids.begin(), synth.ids.end(), all.ids.begin() + first);
  });
  return corpus->Append(std::move(all)).status();
}

// Exposes Backend::Memory() as maxsimd_gpu_memory_bytes{device,kind} and
// maxsimd_pinned_host_bytes{device}.
class BackendCollector final : public prometheus::Collectable {
 public:
  explicit BackendCollector(const Backend* backend) : backend_(backend) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    prometheus::MetricFamily f;
    f.name = "maxsimd_gpu_memory_bytes";
    f.help =
        "GPU memory by device and kind: corpus (resident corpora), workspace "
        "(search buffers), free and total (the whole device).";
    f.type = prometheus::MetricType::Gauge;
    for (const DeviceMemory& m : backend_->Memory()) {
      const std::pair<const char*, int64_t> kinds[] = {
          {"corpus", m.corpus_bytes},
          {"workspace", m.workspace_bytes},
          {"free", m.free_bytes},
          {"total", m.total_bytes}};
      for (const auto& [kind, bytes] : kinds) {
        prometheus::ClientMetric c;
        c.label = {{"device", std::to_string(m.device)}, {"kind", kind}};
        c.gauge.value = static_cast<double>(bytes);
        f.metric.push_back(std::move(c));
      }
    }
    prometheus::MetricFamily pinned;
    pinned.name = "maxsimd_pinned_host_bytes";
    pinned.help =
        "Host memory page-locked for host-placed corpora, by the device that "
        "streams it.";
    pinned.type = prometheus::MetricType::Gauge;
    for (const DeviceMemory& m : backend_->Memory()) {
      prometheus::ClientMetric c;
      c.label = {{"device", std::to_string(m.device)}};
      c.gauge.value = static_cast<double>(m.pinned_bytes);
      pinned.metric.push_back(std::move(c));
    }
    return {f, pinned};
  }

 private:
  const Backend* backend_;
};

// Exposes the open AddDocuments streams as maxsimd_write_streams and
// maxsimd_write_stream_bytes (against --max_write_streams and
// --max_write_bytes).
class WriteStreamCollector final : public prometheus::Collectable {
 public:
  explicit WriteStreamCollector(const AdminService* admin) : admin_(admin) {}
  std::vector<prometheus::MetricFamily> Collect() const override {
    auto gauge = [](const char* name, const char* help, double value) {
      prometheus::MetricFamily f;
      f.name = name;
      f.help = help;
      f.type = prometheus::MetricType::Gauge;
      f.metric.emplace_back();
      f.metric.back().gauge.value = value;
      return f;
    };
    return {gauge("maxsimd_write_streams",
                  "Open AddDocuments streams (limit --max_write_streams).",
                  admin_->write_streams()),
            gauge("maxsimd_write_stream_bytes",
                  "Bytes the open AddDocuments streams hold, converted tokens "
                  "and ids (limit --max_write_bytes).",
                  static_cast<double>(admin_->write_bytes()))};
  }

 private:
  const AdminService* admin_;
};

}  // namespace

absl::StatusOr<DemoCorpus> ParseDemoCorpus(absl::string_view spec,
                                           absl::string_view flag) {
  const std::vector<std::string> parts = absl::StrSplit(spec, ':');
  DemoCorpus d;
  int64_t tokens = 0, dim = d.dim;
  const bool ok = parts.size() >= 2 && parts.size() <= 4 && !parts[0].empty() &&
                  absl::SimpleAtoi(parts[1], &d.num_docs) && d.num_docs > 0 &&
                  (parts.size() < 3 || (absl::SimpleAtoi(parts[2], &tokens) &&
                                        tokens >= 0 && tokens <= (1 << 16))) &&
                  (parts.size() < 4 || (absl::SimpleAtoi(parts[3], &dim) &&
                                        dim >= 1 && dim <= 4096));
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": \"", spec,
        "\" is not NAME:DOCS[:TOKENS[:DIM]] with DOCS >= 1, 0 <= TOKENS <= "
        "65536 and 1 <= DIM <= 4096"));
  }
  d.name = parts[0];
  d.doc_tokens = static_cast<int32_t>(tokens);
  d.dim = static_cast<int32_t>(dim);
  return d;
}

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const ServerOptions& options) {
  const BackendLimits limits = LimitsFor(options);
  const int per_device = std::max(1, options.shards_per_device);
  std::vector<std::unique_ptr<Backend>> shards;
  int threads_per_shard = 1;
  if (options.backend != BackendChoice::kCpu) {
    const int count = GpuBackend::DeviceCount();
    std::vector<int> devices = options.devices;
    if (devices.empty()) {
      for (int d = 0; d < count; ++d) devices.push_back(d);
    }
    for (int d : devices) {
      if (d < 0 || d >= count) {
        return absl::InvalidArgumentError(absl::StrCat(
            "--devices: GPU ", d, " does not exist; this machine has ", count,
            " usable GPUs"));
      }
    }
    if (devices.empty() && options.backend == BackendChoice::kGpu) {
      return absl::FailedPreconditionError(
          "--devices was given but no usable GPU was found");
    }
    absl::Status failure;
    for (int d : devices) {
      for (int i = 0; i < per_device && failure.ok(); ++i) {
        GpuBackendOptions g;
        g.device = d;
        g.num_workers = std::max(1, options.gpu_workers);
        g.limits = limits;
        g.corpus_budget_bytes = options.corpus_budget_bytes;
        g.stream_buffer_bytes = options.stream_buffer_bytes;
        g.pinned_budget_bytes = options.pinned_budget_bytes;
        g.serialize_scans = options.gpu_serialize_scans;
        g.plaid_int8_mma = options.gpu_plaid_int8_mma;
        g.plaid_warp_scan = options.gpu_plaid_warp_scan;
        absl::StatusOr<std::unique_ptr<Backend>> gpu = GpuBackend::Create(g);
        if (gpu.ok()) {
          shards.push_back(*std::move(gpu));
        } else {
          failure = gpu.status();
        }
      }
    }
    if (!failure.ok()) {
      if (options.backend == BackendChoice::kGpu) return failure;
      spdlog::warn("GPU backend unavailable ({}); using the CPU backend",
                   failure.ToString());
      shards.clear();
    }
    threads_per_shard = std::max(1, options.gpu_workers);
  }
  if (shards.empty()) {
    const int cores = static_cast<int>(std::thread::hardware_concurrency());
    const int threads =
        options.cpu_threads > 0 ? options.cpu_threads : std::max(1, cores);
    for (int i = 0; i < per_device; ++i) {
      CpuBackendOptions c;
      c.num_threads = std::max(1, threads / per_device);
      c.limits = limits;
      c.corpus_budget_bytes = options.corpus_budget_bytes;
      c.pinned_budget_bytes = options.pinned_budget_bytes;
      MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu,
                               CpuBackend::Create(c));
      shards.push_back(std::move(cpu));
    }
    threads_per_shard = 1;
  }
  if (shards.size() == 1) return std::move(shards[0]);
  return ShardedBackend::Create(std::move(shards), threads_per_shard);
}

// Rerank calls waiting for a request on each completion queue: enough that
// a burst of arrivals does not wait for the queue's thread to re-arm.
constexpr int kRerankCallsPerQueue = 16;

MaxsimServer::MaxsimServer() = default;

MaxsimServer::~MaxsimServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<MaxsimServer>> MaxsimServer::Start(
    const ServerOptions& options) {
  MAXSIMD_RETURN_IF_ERROR(ValidateSchedulerOptions(options.scheduler));
  std::unique_ptr<MaxsimServer> s(new MaxsimServer);
  s->options_ = options;
  // Credentials first: a bad file fails start-up before a corpus loads.
  MAXSIMD_ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> creds,
                           MakeServerCredentials(options.tls));
  const bool tls = !options.tls.cert_file.empty();
  const bool mutual_tls = tls && !options.tls.client_ca_file.empty();
  MAXSIMD_ASSIGN_OR_RETURN(s->auth_,
                           Authenticator::Create(options.auth, mutual_tls));
  std::vector<std::string> metrics_tokens;
  if (!options.metrics_token_file.empty()) {
    if (options.metrics_listen.empty()) {
      return absl::InvalidArgumentError(
          "--metrics_token_file is set but --metrics_listen is empty: there "
          "is no /metrics to protect");
    }
    MAXSIMD_ASSIGN_OR_RETURN(
        metrics_tokens,
        ReadTokenFile(options.metrics_token_file, "metrics_token_file",
                      options.auth.allow_readable_secrets));
  }
  spdlog::info("gRPC port: {}; Admin calls: {}; Reranker calls: {}",
               mutual_tls ? "mutual TLS"
               : tls      ? "TLS"
                          : "plaintext",
               s->auth_->Protects(Scope::kAdmin) ? "authenticated" : "open",
               s->auth_->Protects(Scope::kQuery) ? "authenticated" : "open");
  if (!tls && (s->auth_->Protects(Scope::kAdmin) ||
               s->auth_->Protects(Scope::kQuery))) {
    spdlog::warn(
        "bearer tokens are accepted over plaintext: anyone who can watch the "
        "network can read them; set --tls_cert and --tls_key");
  }
  MAXSIMD_ASSIGN_OR_RETURN(s->backend_, options.backend_factory
                                            ? options.backend_factory(options)
                                            : CreateBackend(options));
  spdlog::info("compute backend: {}", s->backend_->description());

  s->prom_registry_ = std::make_shared<prometheus::Registry>();
  s->metrics_ =
      std::make_unique<Metrics>(*s->prom_registry_, s->backend_->name());
  s->corpora_ = std::make_unique<CorpusRegistry>(
      s->backend_.get(), options.corpus_limits, options.data_dir);
  s->scheduler_ = std::make_unique<Scheduler>(
      s->backend_.get(), options.scheduler, s->metrics_.get());
  // Closed while corpora load (from data_dir, then the demo ones).
  s->loading_ = std::make_unique<LoadingGate>(options.data_dir.empty() &&
                                              options.demo_corpora.empty());
  s->reranker_ = std::make_unique<RerankerService>(
      s->corpora_.get(), s->scheduler_.get(), options.request_limits,
      s->metrics_.get(), s->auth_.get(), s->loading_.get());
  s->admin_ = std::make_unique<AdminService>(
      s->corpora_.get(), options.admin_limits, s->metrics_.get(),
      s->auth_.get(), s->loading_.get());
  s->health_ = std::make_unique<HealthService>(
      std::vector<std::string>(std::begin(kServices), std::end(kServices)));

  // Reflection describes every service in the generated descriptor pool;
  // touching the health descriptor links grpc.health.v1 into that pool.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  // gRPC's default health service would answer SERVING before the server
  // could set NOT_SERVING; HealthService starts NOT_SERVING.
  grpc::EnableDefaultHealthCheckService(false);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, creds, &s->port_);
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             ChannelArgMs(options.grpc_handshake_timeout));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             ChannelArgMs(options.grpc_max_connection_idle));
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_AGE_MS,
                             ChannelArgMs(options.grpc_max_connection_age));
  builder.AddChannelArgument(
      GRPC_ARG_MAX_CONNECTION_AGE_GRACE_MS,
      ChannelArgMs(options.grpc_max_connection_age_grace));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS,
                             ChannelArgMs(options.grpc_keepalive_time));
  builder.AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS,
                             ChannelArgMs(options.grpc_keepalive_timeout));
  std::vector<
      std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>>
      interceptors;
  interceptors.push_back(
      std::make_unique<ParseErrorInterceptorFactory>(s->metrics_.get()));
  builder.experimental().SetInterceptorCreators(std::move(interceptors));
  grpc::ResourceQuota quota("maxsimd");
  if (options.grpc_max_threads > 0)
    quota.SetMaxThreads(options.grpc_max_threads);
  if (options.grpc_memory_quota_bytes > 0) {
    quota.Resize(static_cast<size_t>(options.grpc_memory_quota_bytes));
  }
  builder.SetResourceQuota(quota);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(s->reranker_.get());
  builder.RegisterService(s->admin_.get());
  builder.RegisterService(s->health_.get());
  // grpc.reflection.v1 beside the library's v1alpha: current grpcurl and
  // grpcui ask for v1 first.
  s->reflection_v1_ =
      std::make_unique<ReflectionV1Service>(std::vector<std::string>{
          "maxsimd.v1.Reranker", "maxsimd.v1.Admin", "grpc.health.v1.Health",
          "grpc.reflection.v1alpha.ServerReflection",
          "grpc.reflection.v1.ServerReflection"});
  builder.RegisterService(s->reflection_v1_.get());
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> rerank_queues;
  for (int i = 0; i < std::max(1, options.rerank_queues); ++i) {
    rerank_queues.push_back(builder.AddCompletionQueue());
  }
  s->server_ = builder.BuildAndStart();
  if (s->server_ != nullptr) {
    s->reranker_->StartRerankQueues(std::move(rerank_queues),
                                    kRerankCallsPerQueue);
  }
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("could not listen on --listen=", options.listen));
  }
  s->SetServing(false);  // until the corpora are loaded

  if (!options.metrics_listen.empty()) {
    Scheduler* scheduler = s->scheduler_.get();
    s->collectables_ = {s->prom_registry_,
                        std::make_shared<CorpusCollector>(
                            s->corpora_.get(),
                            [scheduler](const std::string& corpus) {
                              return scheduler->queued(corpus);
                            }),
                        std::make_shared<BackendCollector>(s->backend_.get()),
                        std::make_shared<WriteStreamCollector>(s->admin_.get()),
                        std::make_shared<ProcessCollector>()};
    MetricsHttpOptions http;
    http.listen = options.metrics_listen;
    http.bearer_tokens = std::move(metrics_tokens);
    http.max_connections = options.metrics_max_connections;
    http.request_timeout = options.metrics_request_timeout;
    MAXSIMD_ASSIGN_OR_RETURN(
        s->metrics_http_,
        MetricsHttpServer::Start(
            http, std::vector<std::weak_ptr<prometheus::Collectable>>(
                      s->collectables_.begin(), s->collectables_.end())));
    s->metrics_port_ = s->metrics_http_->port();
  }

  if (!options.data_dir.empty()) {
    const absl::Time start = absl::Now();
    MAXSIMD_ASSIGN_OR_RETURN(CorpusRegistry::LoadReport loaded,
                             s->corpora_->LoadAll());
    for (const auto& [name, status] : loaded.corpora) {
      if (status.ok()) {
        const auto snapshot = (*s->corpora_->Get(name))->Snapshot();
        spdlog::info("loaded corpus \"{}\" from {}: {} documents", name,
                     options.data_dir, snapshot->live_docs());
      } else {
        spdlog::error("corpus \"{}\" is not served: {}", name,
                      status.ToString());
      }
    }
    if (!loaded.aliases.ok() && loaded.aliases_backup.ok()) {
      spdlog::error(
          "{}; the aliases come from {}/ALIASES.prev, as they were before the "
          "last alias change (which may be lost){}{}",
          loaded.aliases.ToString(), options.data_dir,
          loaded.aliases_dropped.empty()
              ? ""
              : "; not restored, as their name is now a corpus's or their "
                "corpus is gone: ",
          absl::StrJoin(loaded.aliases_dropped, ", "));
    } else if (!loaded.aliases.ok()) {
      spdlog::error("{}", s->corpora_->Aliases().status().ToString());
    }
    if (static_cast<int64_t>(loaded.corpora.size()) >
        options.corpus_limits.max_corpora) {
      spdlog::warn(
          "data directory {} holds {} corpora, more than --max_corpora={}: all "
          "are loaded, and CreateCorpus and LoadCorpus are refused until "
          "enough are dropped",
          options.data_dir, loaded.corpora.size(),
          options.corpus_limits.max_corpora);
    }
    spdlog::info(
        "data directory {}: {} corpora, {} aliases in {}", options.data_dir,
        loaded.corpora.size(),
        s->corpora_->Aliases().ok() ? s->corpora_->Aliases()->size() : 0,
        absl::FormatDuration(absl::Now() - start));
  }
  if (!options.admin_limits.files_dir.empty()) {
    // Snapshots cut short by a crash; nothing writes one before we serve.
    const absl::StatusOr<int> partials =
        RemovePartialSnapshots(options.admin_limits.files_dir);
    if (!partials.ok()) {
      spdlog::warn("--files_dir {}: unfinished snapshots not removed: {}",
                   options.admin_limits.files_dir,
                   partials.status().ToString());
    } else if (*partials > 0) {
      spdlog::info(
          "--files_dir {}: removed {} unfinished snapshot(s) (.partial-*)",
          options.admin_limits.files_dir, *partials);
    }
  }
  for (const DemoCorpus& demo : options.demo_corpora) {
    if (s->corpora_->Get(demo.name).ok()) {
      spdlog::info("corpus \"{}\" was loaded from the data directory; kept",
                   demo.name);
      continue;
    }
    const absl::Time start = absl::Now();
    MAXSIMD_RETURN_IF_ERROR(LoadDemoCorpus(s->corpora_.get(), demo));
    spdlog::info("loaded corpus \"{}\": {} synthetic documents in {}",
                 demo.name, demo.num_docs,
                 absl::FormatDuration(absl::Now() - start));
  }
  s->loading_->Open();
  s->SetServing(s->backend_->healthy());
  MaxsimServer* server = s.get();
  s->health_thread_ = std::thread([server] {
    while (!server->stop_.WaitForNotificationWithTimeout(
        server->options_.health_poll_interval)) {
      const bool healthy = server->backend_->healthy();
      if (healthy != server->serving_.load()) {
        if (!healthy) spdlog::error("the backend failed; health NOT_SERVING");
        server->SetServing(healthy);
      }
    }
  });
  if (options.compaction_interval > absl::ZeroDuration()) {
    s->compaction_thread_ = std::thread([server] {
      while (!server->stop_.WaitForNotificationWithTimeout(
          server->options_.compaction_interval)) {
        for (const std::shared_ptr<Corpus>& corpus : server->corpora_->List()) {
          absl::StatusOr<int> rewritten =
              corpus->Compact(server->options_.compaction);
          if (!rewritten.ok()) {
            spdlog::warn("compaction of corpus \"{}\" failed: {}",
                         corpus->config().name, rewritten.status().ToString());
          } else if (*rewritten > 0) {
            spdlog::info("compacted corpus \"{}\": {} segments rewritten",
                         corpus->config().name, *rewritten);
          }
        }
      }
    });
  }
  spdlog::info("serving on port {}, metrics on port {}", s->port_,
               s->metrics_port_);
  return s;
}

void MaxsimServer::SetServing(bool serving) {
  serving_.store(serving);
  // The gauge first: whoever sees the new health status sees it too.
  if (metrics_ != nullptr) metrics_->SetServing(serving);
  health_->SetServing(serving);
}

void MaxsimServer::Shutdown() {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  stop_.Notify();
  if (health_thread_.joinable()) health_thread_.join();
  if (compaction_thread_.joinable()) compaction_thread_.join();
  SetServing(false);
  if (options_.drain_grace > absl::ZeroDuration()) {
    // Still listening and answering: a load balancer that polls health sends
    // its last calls here until it has seen NOT_SERVING.
    spdlog::info("health NOT_SERVING; answering new calls for {} more",
                 absl::FormatDuration(options_.drain_grace));
    absl::SleepFor(options_.drain_grace);
  }
  spdlog::info("draining (deadline {})",
               absl::FormatDuration(options_.drain_timeout));
  health_->Shutdown();  // ends the Watch calls, which would hold the drain
  server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.drain_timeout));
  scheduler_->Shutdown();
  server_->Wait();
  reranker_->StopRerankQueues();
  metrics_http_.reset();
  spdlog::info("stopped");
}

}  // namespace maxsimd
