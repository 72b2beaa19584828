#include "server/admin_service.h"

#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "index/importers.h"
#include "index/plaid.h"
#include "index/token_pooling.h"
#include "kernels/base/status_macros.h"
#include "server/grpc_status.h"
#include "server/logging.h"
#include "server/raw_message.h"
#include "server/request_decoder.h"
#include "server/reranker_service.h"
#include "spdlog/spdlog.h"

namespace maxsimd {
namespace {

// The corpus `r` asks for; `backend` decides what `r` leaves to the server.
absl::StatusOr<CorpusConfig> ConfigFromRequest(const v1::CreateCorpusRequest& r,
                                               const Backend& backend) {
  CorpusConfig c;
  c.name = r.name();
  c.dim = r.dim();
  c.normalize = r.normalize();
  switch (r.layout()) {
    case v1::LAYOUT_UNSPECIFIED:
    case v1::LAYOUT_DENSE:
      c.layout = Layout::kDense;
      break;
    case v1::LAYOUT_INT8:
      c.layout = Layout::kInt8;
      break;
    case v1::LAYOUT_PLAID:
      c.layout = Layout::kPlaid;
      break;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("layout is ", r.layout(), ", not a known Layout"));
  }
  switch (r.placement()) {
    case v1::PLACEMENT_UNSPECIFIED:
    case v1::PLACEMENT_AUTO:
      c.placement = Placement::kAuto;
      break;
    case v1::PLACEMENT_GPU:
      c.placement = Placement::kGpu;
      break;
    case v1::PLACEMENT_HOST:
      c.placement = Placement::kHost;
      break;
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          "placement is ", r.placement(), ", not a known Placement"));
  }
  // Unset: the layout's default. DTYPE_INT8 exists only as a storage
  // dtype (DecodeDType, for input tensors, refuses it);
  // ValidateCorpusConfig checks that the dtype fits the layout.
  if (c.layout != Layout::kPlaid &&
      (r.plaid_nbits() != 0 || r.plaid_centroids() != 0)) {
    return absl::InvalidArgumentError(
        "plaid_nbits and plaid_centroids are only valid with LAYOUT_PLAID");
  }
  if (c.layout == Layout::kPlaid) {
    const int nbits = r.plaid_nbits() == 0 ? 2 : r.plaid_nbits();
    if (PlaidNbits(PlaidDType(nbits)) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "plaid_nbits is ", r.plaid_nbits(), "; must be 1, 2, 4 or 8"));
    }
    if (r.storage_dtype() != v1::DTYPE_UNSPECIFIED &&
        r.storage_dtype() != v1::DTYPE_PLAID) {
      return absl::InvalidArgumentError(
          absl::StrCat("storage_dtype is ", v1::DType_Name(r.storage_dtype()),
                       "; LAYOUT_PLAID stores DTYPE_PLAID (leave it unset)"));
    }
    c.storage_dtype = PlaidDType(nbits);
    c.plaid_centroids = r.plaid_centroids();
  } else if (r.storage_dtype() == v1::DTYPE_UNSPECIFIED) {
    c.storage_dtype =
        c.layout == Layout::kInt8 ? DType::kInt8 : DType::kFloat16;
  } else if (r.storage_dtype() == v1::DTYPE_INT8) {
    c.storage_dtype = DType::kInt8;
  } else if (r.storage_dtype() == v1::DTYPE_PLAID ||
             !v1::DType_IsValid(r.storage_dtype())) {
    // Not DecodeDType's message, which is about tensors.
    return absl::InvalidArgumentError(absl::StrCat(
        "storage_dtype is ",
        v1::DType_IsValid(r.storage_dtype())
            ? v1::DType_Name(r.storage_dtype())
            : absl::StrCat(static_cast<int>(r.storage_dtype())),
        c.layout == Layout::kInt8
            ? "; LAYOUT_INT8 stores DTYPE_INT8 (leave storage_dtype unset)"
            : "; LAYOUT_DENSE stores DTYPE_FLOAT16 or DTYPE_BFLOAT16"));
  } else {
    MAXSIMD_ASSIGN_OR_RETURN(c.storage_dtype,
                             DecodeDType(r.storage_dtype(), "storage_dtype"));
  }
  const bool mode_set =
      r.query_quantization() != v1::QUERY_QUANTIZATION_UNSPECIFIED;
  if (mode_set && c.layout != Layout::kInt8) {
    return absl::InvalidArgumentError(
        "query_quantization is set; it is only valid with LAYOUT_INT8");
  }
  if (mode_set && r.query_quantization() != v1::QUERY_QUANTIZATION_FLOAT16 &&
      r.query_quantization() != v1::QUERY_QUANTIZATION_INT8) {
    return absl::InvalidArgumentError(
        absl::StrCat("query_quantization is ", r.query_quantization(),
                     ", not a known QueryQuantization"));
  }
  if (r.quantize_queries() &&
      r.query_quantization() == v1::QUERY_QUANTIZATION_FLOAT16) {
    return absl::InvalidArgumentError(
        "quantize_queries is set with query_quantization "
        "QUERY_QUANTIZATION_FLOAT16; set one of them");
  }
  // Neither field set on an int8 corpus: the backend's preference.
  c.quantize_queries = r.quantize_queries() ||
                       r.query_quantization() == v1::QUERY_QUANTIZATION_INT8 ||
                       (c.layout == Layout::kInt8 && !mode_set &&
                        backend.PrefersQuantizedQueries(c.dim));
  if (r.pool_factor() < 0 || r.pool_factor() > kMaxTokenPoolFactor) {
    return absl::InvalidArgumentError(
        absl::StrCat("pool_factor is ", r.pool_factor(), ", must be in [0, ",
                     kMaxTokenPoolFactor, "] (0 and 1 keep every token)"));
  }
  c.pool_factor = std::max(1, r.pool_factor());
  return c;
}

v1::DType ToProto(DType t) {
  switch (t) {
    case DType::kFloat32:
      return v1::DTYPE_FLOAT32;
    case DType::kFloat16:
      return v1::DTYPE_FLOAT16;
    case DType::kBFloat16:
      return v1::DTYPE_BFLOAT16;
    case DType::kInt8:
      return v1::DTYPE_INT8;
    case DType::kPlaid1:
    case DType::kPlaid2:
    case DType::kPlaid4:
    case DType::kPlaid8:
      return v1::DTYPE_PLAID;
  }
  return v1::DTYPE_UNSPECIFIED;
}

// Each document's token count from cu_seqlens, clamped to int32 (the
// builder refuses what is past its limit).
std::vector<int32_t> TokenCounts(const std::vector<int64_t>& cu_seqlens) {
  std::vector<int32_t> counts;
  counts.reserve(cu_seqlens.size());
  for (size_t i = 0; i + 1 < cu_seqlens.size(); ++i) {
    const int64_t n = cu_seqlens[i + 1] - cu_seqlens[i];
    counts.push_back(static_cast<int32_t>(
        std::min<int64_t>(n, std::numeric_limits<int32_t>::max())));
  }
  return counts;
}

// Finishes a unary admin call and records it, echoing its request id.
void FinishUnary(grpc::CallbackServerContext* ctx,
                 grpc::ServerUnaryReactor* reactor, Metrics* metrics,
                 const char* method, absl::Time arrival,
                 const absl::Status& status) {
  ObserveCall(metrics, method, arrival, status, TakeRequestId(ctx));
  reactor->Finish(ToGrpcStatus(status));
}

}  // namespace

// One AddDocuments stream: converts every message into a DocumentBuilder as
// it arrives and commits the lot when the client half-closes. A bad message
// ends the call at once with nothing added, and so does a stream that breaks
// instead (the client cancelled or went away, or gRPC refused a message over
// --max_message_bytes and answered the client itself), one that waits for
// its next message past --write_idle_timeout (AdminService::EndIdleStreams
// calls TimeOut), and one whose bytes do not fit --max_write_bytes. Counts
// in the service's open streams from construction (AddDocuments counted it)
// to OnDone, which releases its bytes and deletes it. (Outside the
// anonymous namespace: the service befriends it.)
class AddReactor final : public grpc::ServerReadReactor<grpc::ByteBuffer> {
 public:
  AddReactor(AdminService* service, grpc::CallbackServerContext* ctx,
             grpc::ByteBuffer* response)
      : service_(service),
        response_(response),
        arrival_(absl::Now()),
        request_id_(TakeRequestId(ctx)) {
    {
      absl::MutexLock lock(&service_->streams_mu_);
      service_->streams_.insert(this);
    }
    absl::MutexLock lock(&mu_);
    idle_since_ = absl::Now();
    StartReadLocked();
  }

  void OnReadDone(bool ok) override {
    {
      absl::MutexLock lock(&mu_);
      reading_ = false;
      if (finished_) return;  // timed out meanwhile
    }
    if (!ok) {
      // A read fails at the client's half-close and also when the call
      // broke; a call's cancelled flag can still be unset then (a message
      // over the size limit). The next operation tells them apart: sending
      // the initial metadata fails on a broken call.
      StartSendInitialMetadata();
      return;
    }
    const int64_t rows_before = builder_ ? builder_->num_tokens() : 0;
    const absl::Status status = Consume();
    if (status.ok()) {
      absl::MutexLock lock(&mu_);
      // Only a message that adds documents resets the idle clock: empty
      // ones cannot keep a stream (and its --max_write_streams slot) open.
      if (builder_ && builder_->num_tokens() > rows_before) {
        idle_since_ = absl::Now();
      }
      if (!finished_) StartReadLocked();
      return;
    }
    Answer(status);
  }

  void OnSendInitialMetadataDone(bool ok) override {
    Answer(ok ? Commit()
              : absl::CancelledError(
                    "AddDocuments: the stream broke before the client "
                    "half-closed it; nothing was added"));
  }

  // Ends the stream with DEADLINE_EXCEEDED when it is waiting for a message
  // and has added no documents since before `cutoff`. Called with the
  // service's streams_mu_ held, so the reactor is not deleted meanwhile.
  void TimeOut(absl::Time cutoff) {
    absl::MutexLock lock(&mu_);
    if (finished_ || !reading_ || idle_since_ > cutoff) return;
    FinishLocked(absl::DeadlineExceededError(absl::StrCat(
        "AddDocuments: no documents added for ",
        absl::FormatDuration(service_->limits().write_idle_timeout),
        " (--write_idle_timeout), after message ", messages_,
        "; the stream is closed and nothing was added")));
  }

  void OnDone() override {
    {
      absl::MutexLock lock(&service_->streams_mu_);
      service_->streams_.erase(this);
    }
    service_->ReleaseWriteBytes(held_bytes_);
    service_->write_streams_.fetch_sub(1);
    delete this;
  }

 private:
  // REQUIRES: mu_ held.
  void StartReadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    reading_ = true;
    StartRead(&read_buffer_);
  }

  absl::Status Consume() {
    const std::string where = absl::StrCat("AddDocuments message ", messages_);
    ++messages_;
    request_.Clear();
    MAXSIMD_RETURN_IF_ERROR(ParseRawMessage(&read_buffer_, &request_, where));
    if (corpus_ == nullptr) {
      if (request_.corpus().empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat(where, ": corpus is required in the first message"));
      }
      MAXSIMD_ASSIGN_OR_RETURN(corpus_,
                               service_->corpora()->Get(request_.corpus()));
      corpus_name_ = request_.corpus();
      builder_.emplace(corpus_->config(), corpus_->limits(),
                       service_->IngestPool(corpus_->config()));
    } else if (!request_.corpus().empty() &&
               request_.corpus() != corpus_name_ &&
               request_.corpus() != corpus_->config().name) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": corpus \"", request_.corpus().substr(0, 160),
                       "\" differs from the stream's corpus \"",
                       corpus_->config().name, "\""));
    }
    if (request_.ids_size() == 0 && !request_.has_tokens())
      return absl::OkStatus();
    // Named here: the row limit below would otherwise read [1, 0].
    if (request_.ids_size() == 0 || !request_.has_tokens()) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": ", request_.ids_size() == 0 ? "tokens" : "ids",
          " is set but ", request_.ids_size() == 0 ? "ids" : "tokens",
          " is not; a message adds documents with both, or carries neither"));
    }
    const int32_t max_doc_tokens = corpus_->limits().max_doc_tokens;
    MAXSIMD_ASSIGN_OR_RETURN(
        TensorView view,
        DecodeTensor(request_.tokens(), corpus_->config().dim, 1,
                     static_cast<int64_t>(request_.ids_size()) * max_doc_tokens,
                     absl::StrCat(where, ": tokens")));
    const int64_t row_bytes = BuilderRowBytes(corpus_->config());
    if ((builder_->num_tokens() + view.rows) * row_bytes >
        service_->limits().max_stream_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat(where, ": the stream exceeds --max_add_stream_bytes (",
                       service_->limits().max_stream_bytes,
                       "); split the load into several AddDocuments calls"));
    }
    int64_t bytes = view.rows * row_bytes;
    for (const std::string& id : request_.ids()) {
      bytes += static_cast<int64_t>(id.size());
    }
    MAXSIMD_RETURN_IF_ERROR(service_->ReserveWriteBytes(bytes, where));
    held_bytes_ += bytes;
    const std::vector<std::string> ids(request_.ids().begin(),
                                       request_.ids().end());
    const std::vector<int32_t> counts(request_.token_counts().begin(),
                                      request_.token_counts().end());
    return builder_->Add(ids, counts, view.data, view.rows, view.dtype, where);
  }

  void Answer(const absl::Status& status) {
    absl::MutexLock lock(&mu_);
    if (!finished_) FinishLocked(status);
  }

  // REQUIRES: mu_ held; not finished.
  void FinishLocked(const absl::Status& status)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    finished_ = true;
    ObserveCall(service_->metrics(), "AddDocuments", arrival_, status,
                request_id_);
    if (status.ok()) *response_ = SerializeRawMessage(response_message_);
    Finish(ToGrpcStatus(status));
  }

  absl::Status Commit() {
    if (corpus_ == nullptr) {
      return absl::InvalidArgumentError(
          "AddDocuments: the stream carried no message naming a corpus");
    }
    MAXSIMD_ASSIGN_OR_RETURN(int64_t added, corpus_->Append(builder_->Take()));
    response_message_.set_added(added);
    DescribeCorpus(*corpus_, service_->corpora()->backend()->name(),
                   response_message_.mutable_corpus());
    return absl::OkStatus();
  }

  AdminService* const service_;
  grpc::ByteBuffer* const response_;  // the raw response, set on success
  const absl::Time arrival_;
  const std::string request_id_;  // x-request-id metadata; "" when absent
  // The read in flight (reads are sequential) and its parsed message.
  grpc::ByteBuffer read_buffer_;
  v1::AddDocumentsRequest request_;
  v1::AddDocumentsResponse response_message_;
  absl::Mutex mu_;
  bool reading_ ABSL_GUARDED_BY(mu_) = false;  // a read is in flight
  // The stream's start, or the last message that added documents.
  absl::Time idle_since_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  int64_t held_bytes_ = 0;  // reserved of --max_write_bytes
  int64_t messages_ = 0;
  std::shared_ptr<Corpus> corpus_;
  std::string corpus_name_;  // as the first message named it (or an alias)
  std::optional<DocumentBuilder> builder_;
};

void DescribeCorpus(const Corpus& corpus, const std::string& resident_on,
                    v1::CorpusInfo* info) {
  const CorpusConfig& c = corpus.config();
  const auto snap = corpus.Snapshot();
  info->set_name(c.name);
  info->set_dim(c.dim);
  info->set_layout(c.layout == Layout::kDense  ? v1::LAYOUT_DENSE
                   : c.layout == Layout::kInt8 ? v1::LAYOUT_INT8
                                               : v1::LAYOUT_PLAID);
  info->set_placement(c.placement == Placement::kGpu    ? v1::PLACEMENT_GPU
                      : c.placement == Placement::kHost ? v1::PLACEMENT_HOST
                                                        : v1::PLACEMENT_AUTO);
  info->set_normalize(c.normalize);
  info->set_storage_dtype(ToProto(c.storage_dtype));
  info->set_num_documents(snap->live_docs());
  info->set_num_tokens(snap->live_tokens());
  info->set_bytes(snap->bytes());
  info->set_streamed_bytes(snap->streamed_bytes());
  info->set_quantize_queries(c.quantize_queries);
  info->set_pool_factor(c.pool_factor);
  if (c.layout == Layout::kPlaid) {
    info->set_plaid_nbits(PlaidNbits(c.storage_dtype));
    info->set_plaid_centroids(snap->codec() != nullptr
                                  ? snap->codec()->codec().num_centroids
                                  : c.plaid_centroids);
  }
  info->set_num_segments(static_cast<int32_t>(snap->segments().size()));
  info->set_num_deleted(snap->deleted_docs());
  info->set_resident_on(resident_on);
}

AdminService::AdminService(CorpusRegistry* corpora, const AdminLimits& limits,
                           Metrics* metrics, const Authenticator* auth,
                           const LoadingGate* loading)
    : corpora_(corpora),
      limits_(limits),
      metrics_(metrics),
      auth_(auth),
      loading_(loading) {
  if (limits_.write_idle_timeout > absl::ZeroDuration() &&
      limits_.write_idle_timeout < absl::InfiniteDuration()) {
    idle_thread_ = std::thread([this] { EndIdleStreams(); });
  }
}

AdminService::~AdminService() {
  stop_.Notify();
  if (idle_thread_.joinable()) idle_thread_.join();
}

void AdminService::EndIdleStreams() {
  // A stream ends between one and 1.25 timeouts (at most a second more)
  // after the last message that added documents.
  const absl::Duration period = std::clamp(
      limits_.write_idle_timeout / 4, absl::Milliseconds(10), absl::Seconds(1));
  while (!stop_.WaitForNotificationWithTimeout(period)) {
    const absl::Time cutoff = absl::Now() - limits_.write_idle_timeout;
    absl::MutexLock lock(&streams_mu_);
    for (AddReactor* stream : streams_) stream->TimeOut(cutoff);
  }
}

absl::Status AdminService::ReserveWriteBytes(int64_t bytes,
                                             absl::string_view where) {
  int64_t held = write_bytes_.load();
  while (held + bytes <= limits_.max_write_bytes) {
    if (write_bytes_.compare_exchange_weak(held, held + bytes)) {
      return absl::OkStatus();
    }
  }
  held += bytes;
  return absl::ResourceExhaustedError(absl::StrCat(
      where, ": its ", bytes,
      " bytes would take the open AddDocuments "
      "streams to ",
      held, " bytes, over --max_write_bytes (", limits_.max_write_bytes,
      "); the stream is closed and nothing was added; retry once other "
      "loads have committed"));
}

bool AdminService::Refused(grpc::CallbackServerContext* ctx,
                           grpc::ServerUnaryReactor* reactor,
                           const char* method, absl::Time arrival,
                           bool needs_corpora) const {
  absl::Status status;
  if (auth_->Protects(Scope::kAdmin)) {
    status = auth_->Check(*ctx, Scope::kAdmin, absl::StrCat("Admin.", method));
  }
  if (status.ok() && needs_corpora) {
    status = loading_->Check(absl::StrCat("Admin.", method));
  }
  if (status.ok()) return false;
  FinishUnary(ctx, reactor, metrics_, method, arrival, status);
  return true;
}

grpc::ServerUnaryReactor* AdminService::CreateCorpus(
    grpc::CallbackServerContext* ctx, const v1::CreateCorpusRequest* request,
    v1::CorpusInfo* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "CreateCorpus", arrival)) return reactor;
  absl::Status status = [&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(CorpusConfig config,
                             ConfigFromRequest(*request, *corpora_->backend()));
    MAXSIMD_ASSIGN_OR_RETURN(std::shared_ptr<Corpus> corpus,
                             corpora_->Create(config));
    DescribeCorpus(*corpus, corpora_->backend()->name(), response);
    return absl::OkStatus();
  }();
  FinishUnary(ctx, reactor, metrics_, "CreateCorpus", arrival, status);
  return reactor;
}

grpc::ServerReadReactor<grpc::ByteBuffer>* AdminService::AddDocuments(
    grpc::CallbackServerContext* ctx, grpc::ByteBuffer* response) {
  const absl::Time arrival = absl::Now();
  absl::Status refused =
      auth_->Check(*ctx, Scope::kAdmin, "Admin.AddDocuments");
  if (refused.ok()) refused = loading_->Check("Admin.AddDocuments");
  if (refused.ok() &&
      write_streams_.fetch_add(1) >= limits_.max_write_streams) {
    write_streams_.fetch_sub(1);
    refused = absl::ResourceExhaustedError(absl::StrCat(
        "Admin.AddDocuments: ", limits_.max_write_streams,
        " AddDocuments streams are open, the limit of --max_write_streams; "
        "retry once one has committed"));
  }
  if (!refused.ok()) {
    ObserveCall(metrics_, "AddDocuments", arrival, refused, TakeRequestId(ctx));
    // Finished before the first read: no message is decoded or added.
    return new FinishedReactor<grpc::ServerReadReactor<grpc::ByteBuffer>>(
        ToGrpcStatus(refused));
  }
  return new AddReactor(this, ctx, response);
}

grpc::ServerUnaryReactor* AdminService::DeleteDocuments(
    grpc::CallbackServerContext* ctx, const v1::DeleteDocumentsRequest* request,
    v1::DeleteDocumentsResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "DeleteDocuments", arrival)) return reactor;
  absl::Status status = [&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::shared_ptr<Corpus> corpus,
                             corpora_->Get(request->corpus()));
    const std::vector<std::string> ids(request->ids().begin(),
                                       request->ids().end());
    MAXSIMD_ASSIGN_OR_RETURN(DeleteResult r,
                             corpus->Delete(ids, request->ignore_missing()));
    response->set_deleted(r.deleted);
    response->set_missing(r.missing);
    return absl::OkStatus();
  }();
  FinishUnary(ctx, reactor, metrics_, "DeleteDocuments", arrival, status);
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::DropCorpus(
    grpc::CallbackServerContext* ctx, const v1::DropCorpusRequest* request,
    v1::DropCorpusResponse*) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "DropCorpus", arrival)) return reactor;
  FinishUnary(ctx, reactor, metrics_, "DropCorpus", arrival,
              corpora_->Drop(request->name()));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ListCorpora(
    grpc::CallbackServerContext* ctx, const v1::ListCorporaRequest*,
    v1::ListCorporaResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "ListCorpora", arrival)) return reactor;
  for (const auto& corpus : corpora_->List()) {
    DescribeCorpus(*corpus, corpora_->backend()->name(),
                   response->add_corpora());
  }
  FinishUnary(ctx, reactor, metrics_, "ListCorpora", arrival, absl::OkStatus());
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetCorpus(
    grpc::CallbackServerContext* ctx, const v1::GetCorpusRequest* request,
    v1::CorpusInfo* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "GetCorpus", arrival)) return reactor;
  absl::StatusOr<std::shared_ptr<Corpus>> corpus =
      corpora_->Get(request->name());
  if (corpus.ok()) {
    DescribeCorpus(**corpus, corpora_->backend()->name(), response);
  }
  FinishUnary(ctx, reactor, metrics_, "GetCorpus", arrival, corpus.status());
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::SetAlias(
    grpc::CallbackServerContext* ctx, const v1::SetAliasRequest* request,
    v1::SetAliasResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "SetAlias", arrival)) return reactor;
  absl::StatusOr<std::string> previous =
      corpora_->SetAlias(request->alias(), request->corpus());
  if (previous.ok()) response->set_previous_corpus(*previous);
  FinishUnary(ctx, reactor, metrics_, "SetAlias", arrival, previous.status());
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::DeleteAlias(
    grpc::CallbackServerContext* ctx, const v1::DeleteAliasRequest* request,
    v1::DeleteAliasResponse*) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "DeleteAlias", arrival)) return reactor;
  FinishUnary(ctx, reactor, metrics_, "DeleteAlias", arrival,
              corpora_->DeleteAlias(request->alias()));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ListAliases(
    grpc::CallbackServerContext* ctx, const v1::ListAliasesRequest*,
    v1::ListAliasesResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "ListAliases", arrival)) return reactor;
  const absl::StatusOr<std::map<std::string, std::string>> aliases =
      corpora_->Aliases();
  if (aliases.ok()) {
    for (const auto& [alias, corpus] : *aliases) {
      v1::Alias* a = response->add_aliases();
      a->set_alias(alias);
      a->set_corpus(corpus);
    }
  }
  FinishUnary(ctx, reactor, metrics_, "ListAliases", arrival, aliases.status());
  return reactor;
}

absl::StatusOr<std::string> ResolveFilesPath(const std::string& root,
                                             const std::string& path,
                                             absl::string_view field) {
  if (root.empty()) {
    return absl::FailedPreconditionError(
        "the server has no --files_dir; the admin calls on server-side files "
        "are disabled");
  }
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat(field, " is \"", path.substr(0, 160), "\"; ", why,
                     " (a relative path under --files_dir)"));
  };
  if (path.empty() || path.size() > 1024) return bad("must be 1 to 1024 bytes");
  if (path[0] == '/') return bad("is absolute");
  for (char c : path) {
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '_' &&
        c != '-' && c != '.' && c != '/') {
      return bad("has a character outside [A-Za-z0-9_.-/]");
    }
  }
  for (absl::string_view part : absl::StrSplit(path, '/')) {
    if (part.empty() || part == "." || part == "..") {
      return bad("has an empty, '.' or '..' component");
    }
  }
  return absl::StrCat(root, "/", path);
}

namespace {

// An error about a file or directory under --files_dir `root`, which the
// request named: `paths` holds (field, ResolveFilesPath's path) of each it
// named. The message gets the field of the path it names first in front
// (the longest there, as one path may begin another) and shows paths as the
// request gave them. Errors that name no such path are returned as they
// are.
absl::Status NameFilesField(
    const absl::Status& status, const std::string& root,
    const std::vector<std::pair<const char*, std::string>>& paths) {
  if (status.ok() || root.empty()) return status;
  const std::pair<const char*, std::string>* named = nullptr;
  size_t named_at = absl::string_view::npos;
  for (const auto& p : paths) {
    const size_t at = p.second.empty() ? absl::string_view::npos
                                       : status.message().find(p.second);
    if (at == absl::string_view::npos) continue;
    if (named == nullptr || at < named_at ||
        (at == named_at && p.second.size() > named->second.size())) {
      named = &p;
      named_at = at;
    }
  }
  if (named == nullptr) return status;
  return absl::Status(
      status.code(),
      absl::StrCat(named->first, ": ",
                   absl::StrReplaceAll(status.message(),
                                       {{absl::StrCat(root, "/"), ""}})));
}

// What `path` (ResolveFilesPath's, of the request's `given` in `field`)
// names, checked before it is read, so that a wrong path is the caller's
// error naming the field and not an I/O error from below: NOT_FOUND when
// nothing is there, INVALID_ARGUMENT when it is not a directory (or not a
// regular file). Other stat errors are left to the reader.
absl::Status CheckFilesEntry(const std::string& path, const std::string& given,
                             absl::string_view field, bool directory) {
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    if (errno != ENOENT && errno != ENOTDIR) return absl::OkStatus();
    return absl::NotFoundError(absl::StrCat(
        field, ": \"", given, "\" does not exist under --files_dir"));
  }
  if (directory ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(field, ": \"", given, "\" is not a ",
                   directory ? "directory" : "regular file"));
}

// The same for a directory to be made at `given`: every parent of it that
// exists must be a directory.
absl::Status CheckNewFilesDirectory(const std::string& root,
                                    const std::string& given,
                                    absl::string_view field) {
  for (size_t slash = given.find('/'); slash != std::string::npos;
       slash = given.find('/', slash + 1)) {
    const std::string parent = given.substr(0, slash);
    struct stat st;
    if (stat(absl::StrCat(root, "/", parent).c_str(), &st) != 0) break;
    if (!S_ISDIR(st.st_mode)) {
      return absl::InvalidArgumentError(
          absl::StrCat(field, ": \"", parent, "\" is not a directory"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

grpc::ServerUnaryReactor* AdminService::SnapshotCorpus(
    grpc::CallbackServerContext* ctx, const v1::SnapshotCorpusRequest* request,
    v1::SnapshotCorpusResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "SnapshotCorpus", arrival)) return reactor;
  absl::StatusOr<int64_t> docs = [&]() -> absl::StatusOr<int64_t> {
    MAXSIMD_ASSIGN_OR_RETURN(
        std::string dir,
        ResolveFilesPath(limits_.files_dir, request->path(), "path"));
    MAXSIMD_RETURN_IF_ERROR(
        CheckNewFilesDirectory(limits_.files_dir, request->path(), "path"));
    absl::StatusOr<int64_t> written =
        corpora_->SnapshotCorpus(request->name(), dir);
    if (written.ok()) return written;
    return NameFilesField(written.status(), limits_.files_dir, {{"path", dir}});
  }();
  if (docs.ok()) response->set_num_documents(*docs);
  FinishUnary(ctx, reactor, metrics_, "SnapshotCorpus", arrival, docs.status());
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::LoadCorpus(
    grpc::CallbackServerContext* ctx, const v1::LoadCorpusRequest* request,
    v1::CorpusInfo* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "LoadCorpus", arrival)) return reactor;
  absl::StatusOr<std::shared_ptr<Corpus>> corpus =
      [&]() -> absl::StatusOr<std::shared_ptr<Corpus>> {
    MAXSIMD_ASSIGN_OR_RETURN(
        std::string dir,
        ResolveFilesPath(limits_.files_dir, request->path(), "path"));
    // Not DATA_LOSS, which says that a corpus directory is damaged.
    MAXSIMD_RETURN_IF_ERROR(CheckFilesEntry(dir, request->path(), "path",
                                            /*directory=*/true));
    absl::StatusOr<std::shared_ptr<Corpus>> loaded =
        corpora_->LoadCorpus(dir, request->name());
    if (loaded.ok()) return loaded;
    return NameFilesField(loaded.status(), limits_.files_dir, {{"path", dir}});
  }();
  if (corpus.ok()) {
    DescribeCorpus(**corpus, corpora_->backend()->name(), response);
  }
  FinishUnary(ctx, reactor, metrics_, "LoadCorpus", arrival, corpus.status());
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::ImportDocuments(
    grpc::CallbackServerContext* ctx, const v1::ImportDocumentsRequest* request,
    v1::AddDocumentsResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "ImportDocuments", arrival)) return reactor;
  DocumentFiles files;
  const absl::Status status = [&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::shared_ptr<Corpus> corpus,
                             corpora_->Get(request->corpus()));
    // As ReadDocumentFiles checks, in the request's terms.
    const bool npy =
        !request->tokens_npy().empty() || !request->cu_seqlens_npy().empty();
    const int sources = int{npy} + int{!request->safetensors().empty()} +
                        int{!request->plaid_dir().empty()};
    if (sources != 1 || (npy && (request->tokens_npy().empty() ||
                                 request->cu_seqlens_npy().empty()))) {
      return absl::InvalidArgumentError(
          "ImportDocuments: give exactly one source: tokens_npy with "
          "cu_seqlens_npy, safetensors, or plaid_dir");
    }
    if (request->ids().empty() && request->plaid_dir().empty()) {
      return absl::InvalidArgumentError(
          "ids is required (a text file of ids, one per line) except with "
          "plaid_dir");
    }
    const std::pair<const std::string*, std::string*> paths[] = {
        {&request->tokens_npy(), &files.tokens_npy},
        {&request->cu_seqlens_npy(), &files.cu_seqlens_npy},
        {&request->safetensors(), &files.safetensors},
        {&request->plaid_dir(), &files.plaid_dir},
        {&request->ids(), &files.ids}};
    const char* fields[] = {"tokens_npy", "cu_seqlens_npy", "safetensors",
                            "plaid_dir", "ids"};
    for (int i = 0; i < 5; ++i) {
      if (paths[i].first->empty()) continue;
      MAXSIMD_ASSIGN_OR_RETURN(
          *paths[i].second,
          ResolveFilesPath(limits_.files_dir, *paths[i].first, fields[i]));
      MAXSIMD_RETURN_IF_ERROR(
          CheckFilesEntry(*paths[i].second, *paths[i].first, fields[i],
                          /*directory=*/paths[i].second == &files.plaid_dir));
    }
    // A PLAID index is refused before it is decoded when its dense tokens
    // would exceed the limit checked below.
    // floor(max_stream_bytes * dim / row_bytes), without overflow.
    const int64_t row_bytes = StoredRowBytes(corpus->config());
    const int64_t dim = corpus->config().dim;
    files.max_token_values =
        limits_.max_stream_bytes / row_bytes * dim +
        limits_.max_stream_bytes % row_bytes * dim / row_bytes;
    if (!files.plaid_dir.empty() && corpus->config().layout == Layout::kPlaid &&
        corpus->config().pool_factor == 1) {
      // A PLAID index into a PLAID corpus: kept compressed, with its codec.
      // (A pooling corpus takes its decoded tokens, below, and compresses
      // the pooled rows with its own codec.)
      PlaidOptions options;
      options.ids = files.ids;
      options.max_token_values = files.max_token_values;
      MAXSIMD_ASSIGN_OR_RETURN(
          CompressedPlaidDocuments docs,
          ReadPlaidIndexCompressed(files.plaid_dir, options));
      // Corpus::Append refuses a codec of other nbits or centroids.
      DocumentBuilder builder(corpus->config(), corpus->limits());
      MAXSIMD_RETURN_IF_ERROR(builder.AddPlaid(
          docs.ids, TokenCounts(docs.cu_seqlens), docs.codec, docs.codes.data(),
          docs.residuals.data(), docs.cu_seqlens.back(), "ImportDocuments"));
      std::optional<PlaidCodec> codec = builder.TakeCodec();
      MAXSIMD_ASSIGN_OR_RETURN(
          int64_t added, corpus->Append(builder.Take(), std::move(codec)));
      response->set_added(added);
      DescribeCorpus(*corpus, corpora_->backend()->name(),
                     response->mutable_corpus());
      return absl::OkStatus();
    }
    MAXSIMD_ASSIGN_OR_RETURN(ImportedDocuments docs, ReadDocumentFiles(files));
    const int64_t rows = docs.cu_seqlens.empty() ? 0 : docs.cu_seqlens.back();
    const int64_t stored_bytes = rows * StoredRowBytes(corpus->config());
    if (stored_bytes > limits_.max_stream_bytes) {
      return absl::ResourceExhaustedError(
          absl::StrCat("ImportDocuments: ", stored_bytes,
                       " bytes of tokens exceed --max_add_stream_bytes (",
                       limits_.max_stream_bytes, "); split the files"));
    }
    if (docs.dim != corpus->config().dim) {
      const char* source = npy                              ? "tokens_npy"
                           : request->safetensors().empty() ? "plaid_dir"
                                                            : "safetensors";
      return absl::InvalidArgumentError(absl::StrCat(
          source, ": the file holds dim ", docs.dim, "; corpus \"",
          corpus->config().name, "\" has dim ", corpus->config().dim));
    }
    DocumentBuilder builder(corpus->config(), corpus->limits(),
                            IngestPool(corpus->config()));
    MAXSIMD_RETURN_IF_ERROR(builder.Add(
        docs.ids, TokenCounts(docs.cu_seqlens), docs.tokens.data(),
        docs.cu_seqlens.back(), DType::kFloat32, "ImportDocuments"));
    docs.tokens = std::vector<float>();  // converted into the builder
    MAXSIMD_ASSIGN_OR_RETURN(int64_t added, corpus->Append(builder.Take()));
    response->set_added(added);
    DescribeCorpus(*corpus, corpora_->backend()->name(),
                   response->mutable_corpus());
    return absl::OkStatus();
  }();
  FinishUnary(ctx, reactor, metrics_, "ImportDocuments", arrival,
              NameFilesField(status, limits_.files_dir,
                             {{"tokens_npy", files.tokens_npy},
                              {"cu_seqlens_npy", files.cu_seqlens_npy},
                              {"safetensors", files.safetensors},
                              {"plaid_dir", files.plaid_dir},
                              {"ids", files.ids}}));
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::GetLogLevel(
    grpc::CallbackServerContext* ctx, const v1::GetLogLevelRequest*,
    v1::GetLogLevelResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "GetLogLevel", arrival, /*needs_corpora=*/false)) {
    return reactor;
  }
  response->set_level(std::string(LogLevelName(spdlog::get_level())));
  FinishUnary(ctx, reactor, metrics_, "GetLogLevel", arrival, absl::OkStatus());
  return reactor;
}

grpc::ServerUnaryReactor* AdminService::SetLogLevel(
    grpc::CallbackServerContext* ctx, const v1::SetLogLevelRequest* request,
    v1::SetLogLevelResponse* response) {
  const absl::Time arrival = absl::Now();
  auto* reactor = ctx->DefaultReactor();
  if (Refused(ctx, reactor, "SetLogLevel", arrival, /*needs_corpora=*/false)) {
    return reactor;
  }
  const std::string request_id = TakeRequestId(ctx);
  absl::StatusOr<spdlog::level::level_enum> level =
      ParseLogLevel(request->level(), "level");
  if (level.ok()) {
    const spdlog::level::level_enum previous = spdlog::get_level();
    response->set_previous_level(std::string(LogLevelName(previous)));
    response->set_level(std::string(LogLevelName(*level)));
    // The change is logged (at info, or the more verbose level when that
    // is above info) while the more verbose of the two levels is in force,
    // so the line shows under either.
    const auto note = [&] {
      ScopedRequestId scope(request_id);
      spdlog::log(std::max(spdlog::level::info, std::min(previous, *level)),
                  "log level {} (was {}), set by SetLogLevel",
                  response->level(), response->previous_level());
    };
    if (*level <= previous) spdlog::set_level(*level);
    if (std::min(previous, *level) != spdlog::level::off) note();
    if (*level > previous) spdlog::set_level(*level);
  }
  ObserveCall(metrics_, "SetLogLevel", arrival, level.status(), request_id);
  reactor->Finish(ToGrpcStatus(level.status()));
  return reactor;
}

}  // namespace maxsimd
