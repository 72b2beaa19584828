#include "server/server.h"

#include "absl/strings/str_cat.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "index/registry.h"
#include "index/synthetic.h"
#include "kernels/gpu_backend.h"
#include "kernels/maxsim_cpu.h"
#include "kernels/status_macros.h"
#include "prometheus/exposer.h"
#include "prometheus/registry.h"
#include "server/metrics.h"
#include "server/reranker_service.h"
#include "spdlog/spdlog.h"

namespace maxsimd {
namespace {

constexpr const char* kServices[] = {"maxsimd.v1.Reranker", "maxsimd.v1.Admin"};

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

absl::Status LoadDemoCorpus(CorpusRegistry* corpora, int64_t num_docs) {
  SyntheticCorpusOptions so;
  so.num_docs = num_docs;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(so);
  CorpusConfig config;
  config.name = "demo";
  config.dim = synth.dim;
  MAXSIMD_ASSIGN_OR_RETURN(std::shared_ptr<Corpus> corpus,
                           corpora->Create(config));
  DocumentBuilder builder(config, corpora->limits());
  std::vector<int32_t> counts;
  for (size_t i = 0; i + 1 < synth.cu_seqlens.size(); ++i) {
    counts.push_back(
        static_cast<int32_t>(synth.cu_seqlens[i + 1] - synth.cu_seqlens[i]));
  }
  MAXSIMD_RETURN_IF_ERROR(builder.Add(synth.ids, counts, synth.tokens.data(),
                                      synth.cu_seqlens.back(), DType::kFloat32,
                                      "demo corpus"));
  return corpus->Append(builder.Take()).status();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Backend>> CreateBackend(
    const ServerOptions& options) {
  const BackendLimits limits = LimitsFor(options);
  if (options.backend != BackendChoice::kCpu) {
    const int devices = GpuBackend::DeviceCount();
    if (devices > 0) {
      GpuBackendOptions g;
      g.device = options.device;
      g.limits = limits;
      absl::StatusOr<std::unique_ptr<Backend>> gpu = GpuBackend::Create(g);
      if (gpu.ok() || options.backend == BackendChoice::kGpu) return gpu;
      spdlog::warn("GPU backend unavailable ({}); using the CPU backend",
                   gpu.status().ToString());
    } else if (options.backend == BackendChoice::kGpu) {
      return absl::FailedPreconditionError(
          "--device was given but no usable GPU was found");
    }
  }
  CpuBackendOptions c;
  c.num_threads = options.cpu_threads;
  c.limits = limits;
  MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu,
                           CpuBackend::Create(c));
  return std::unique_ptr<Backend>(std::move(cpu));
}

MaxsimServer::MaxsimServer() = default;

MaxsimServer::~MaxsimServer() { Shutdown(); }

absl::StatusOr<std::unique_ptr<MaxsimServer>> MaxsimServer::Start(
    const ServerOptions& options) {
  MAXSIMD_RETURN_IF_ERROR(ValidateSchedulerOptions(options.scheduler));
  std::unique_ptr<MaxsimServer> s(new MaxsimServer);
  s->options_ = options;
  MAXSIMD_ASSIGN_OR_RETURN(s->backend_, CreateBackend(options));
  spdlog::info("compute backend: {}", s->backend_->name());

  s->prom_registry_ = std::make_shared<prometheus::Registry>();
  s->metrics_ =
      std::make_unique<Metrics>(*s->prom_registry_, s->backend_->name());
  s->corpora_ = std::make_unique<CorpusRegistry>(s->backend_.get(),
                                                 options.corpus_limits);
  s->scheduler_ = std::make_unique<Scheduler>(
      s->backend_.get(), options.scheduler, s->metrics_.get());
  s->reranker_ = std::make_unique<RerankerService>(
      s->corpora_.get(), s->scheduler_.get(), options.request_limits,
      s->metrics_.get());
  s->admin_ = std::make_unique<AdminService>(
      s->corpora_.get(), options.admin_limits, s->metrics_.get());

  if (options.demo_docs > 0) {
    MAXSIMD_RETURN_IF_ERROR(
        LoadDemoCorpus(s->corpora_.get(), options.demo_docs));
    spdlog::info("loaded corpus \"demo\" with {} synthetic documents",
                 options.demo_docs);
  }

  // Reflection describes every service in the generated descriptor pool;
  // touching the health descriptor links grpc.health.v1 into that pool.
  (void)grpc::health::v1::HealthCheckRequest::descriptor();
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  builder.AddListeningPort(options.listen, grpc::InsecureServerCredentials(),
                           &s->port_);
  builder.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  builder.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  builder.RegisterService(s->reranker_.get());
  builder.RegisterService(s->admin_.get());
  s->server_ = builder.BuildAndStart();
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("could not listen on --listen=", options.listen));
  }

  if (!options.metrics_listen.empty()) {
    try {
      s->exposer_ =
          std::make_unique<prometheus::Exposer>(options.metrics_listen);
    } catch (const std::exception& e) {
      return absl::UnavailableError(absl::StrCat(
          "could not listen on --metrics_listen=", options.metrics_listen, ": ",
          e.what()));
    }
    Scheduler* scheduler = s->scheduler_.get();
    s->collectables_ = {s->prom_registry_,
                        std::make_shared<CorpusCollector>(
                            s->corpora_.get(),
                            [scheduler](const std::string& corpus) {
                              return scheduler->queued(corpus);
                            }),
                        std::make_shared<ProcessCollector>()};
    for (const auto& c : s->collectables_) s->exposer_->RegisterCollectable(c);
    s->metrics_port_ = s->exposer_->GetListeningPorts().front();
  }

  grpc::HealthCheckServiceInterface* health =
      s->server_->GetHealthCheckService();
  for (const char* service : kServices) health->SetServingStatus(service, true);
  health->SetServingStatus(true);
  spdlog::info("serving on port {}, metrics on port {}", s->port_,
               s->metrics_port_);
  return s;
}

void MaxsimServer::Shutdown() {
  if (shut_down_ || server_ == nullptr) return;
  shut_down_ = true;
  spdlog::info("draining (deadline {})",
               absl::FormatDuration(options_.drain_timeout));
  server_->GetHealthCheckService()->SetServingStatus(false);
  server_->Shutdown(absl::ToChronoTime(absl::Now() + options_.drain_timeout));
  scheduler_->Shutdown();
  server_->Wait();
  exposer_.reset();
  spdlog::info("stopped");
}

}  // namespace maxsimd
