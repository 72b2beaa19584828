#include "client/client.h"

#include <algorithm>
#include <cstring>
#include <limits>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/support/client_interceptor.h"
#include "kernels/base/half.h"
#include "kernels/base/status_macros.h"
#include "proto/call_arena.h"

namespace maxsimd {
namespace {

// Every call gets its own context; the deadline bounds the whole call,
// stream calls included.
void SetDeadline(grpc::ClientContext* context, absl::Duration timeout) {
  if (timeout == absl::InfiniteDuration()) return;
  context->set_deadline(absl::ToChronoTime(absl::Now() + timeout));
}

// The service config that selects `lb_policy` ("" when there is none to set).
std::string ServiceConfigFor(const std::string& lb_policy) {
  if (lb_policy.empty()) return "";
  return absl::StrCat(R"({"loadBalancingConfig":[{")", lb_policy, R"(":{}}]})");
}

// One unary call of `method` on `stub` under the client's deadline.
template <typename Stub, typename Request, typename Response>
absl::StatusOr<Response> CallUnary(
    Stub* stub,
    grpc::Status (Stub::*method)(grpc::ClientContext*, const Request&,
                                 Response*),
    const Request& request, absl::Duration timeout) {
  grpc::ClientContext context;
  SetDeadline(&context, timeout);
  Response response;
  const grpc::Status status = (stub->*method)(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

// Appends n fp32 values to `out` as little-endian fp32 or fp16 bytes.
// Tensors are little-endian on the wire; memcpy is correct because every
// supported host (x86-64, aarch64) is little-endian.
void AppendValues(const float* values, size_t n, bool float16,
                  std::string* out) {
  const size_t start = out->size();
  if (!float16) {
    out->resize(start + n * sizeof(float));
    if (n > 0) std::memcpy(&(*out)[start], values, n * sizeof(float));
    return;
  }
  out->resize(start + n * sizeof(uint16_t));
  for (size_t i = 0; i < n; ++i) {
    const uint16_t h = FloatToHalf(values[i]);
    std::memcpy(&(*out)[start + i * sizeof(h)], &h, sizeof(h));
  }
}

absl::Status ValidateBatch(const DocumentBatch& docs) {
  if (docs.dim <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AddDocuments: dim must be >= 1, got ", docs.dim));
  }
  if (docs.cu_seqlens.size() != docs.ids.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AddDocuments: cu_seqlens has ", docs.cu_seqlens.size(),
        " entries, expected ids.size() + 1 = ", docs.ids.size() + 1));
  }
  if (docs.cu_seqlens[0] != 0) {
    return absl::InvalidArgumentError("AddDocuments: cu_seqlens[0] must be 0");
  }
  for (size_t i = 0; i < docs.ids.size(); ++i) {
    const int64_t len = docs.cu_seqlens[i + 1] - docs.cu_seqlens[i];
    if (len < 0 || len > std::numeric_limits<int32_t>::max()) {
      return absl::InvalidArgumentError(
          absl::StrCat("AddDocuments: document ", i, " ('", docs.ids[i],
                       "') has an invalid token count ", len));
    }
  }
  const int64_t total = docs.cu_seqlens.back();
  if (static_cast<uint64_t>(total) * docs.dim != docs.tokens.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("AddDocuments: tokens has ", docs.tokens.size(),
                     " values, expected cu_seqlens.back() * dim = ", total,
                     " * ", docs.dim));
  }
  return absl::OkStatus();
}

// Adds `authorization: Bearer <token>` to the initial metadata of every call
// of the channel it is installed on, whichever stub or API starts the call.
class BearerTokenInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit BearerTokenInterceptor(const std::string& header)
      : header_(header) {}
  void Intercept(
      grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(
            grpc::experimental::InterceptionHookPoints::
                PRE_SEND_INITIAL_METADATA)) {
      methods->GetSendInitialMetadata()->emplace("authorization", header_);
    }
    methods->Proceed();
  }

 private:
  const std::string header_;
};

class BearerTokenInterceptorFactory final
    : public grpc::experimental::ClientInterceptorFactoryInterface {
 public:
  explicit BearerTokenInterceptorFactory(const std::string& token)
      : header_(absl::StrCat("Bearer ", token)) {}
  grpc::experimental::Interceptor* CreateClientInterceptor(
      grpc::experimental::ClientRpcInfo*) override {
    return new BearerTokenInterceptor(header_);
  }

 private:
  const std::string header_;
};

absl::Status ValidateSecurity(const ClientOptions& o) {
  if (!o.use_tls &&
      (!o.tls_root_certs.empty() || !o.tls_cert_chain.empty() ||
       !o.tls_private_key.empty() || !o.tls_server_name.empty())) {
    return absl::InvalidArgumentError(
        "Client::Create: tls_root_certs, tls_cert_chain, tls_private_key and "
        "tls_server_name need use_tls");
  }
  if (o.tls_cert_chain.empty() != o.tls_private_key.empty()) {
    return absl::InvalidArgumentError(
        "Client::Create: tls_cert_chain and tls_private_key go together "
        "(mutual TLS) or not at all");
  }
  // gRPC refuses metadata values outside printable ASCII at call time; say
  // so once, here, without quoting the token.
  for (char c : o.token) {
    if (c < 0x21 || c > 0x7e) {
      return absl::InvalidArgumentError(
          "Client::Create: token has a character that is not printable "
          "ASCII, or white space");
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status FromGrpcStatus(const grpc::Status& status) {
  if (status.ok()) return absl::OkStatus();
  // grpc::StatusCode and absl::StatusCode share the canonical numbering.
  return absl::Status(static_cast<absl::StatusCode>(status.error_code()),
                      status.error_message());
}

Client::Client(const ClientOptions& options) : options_(options) {}

absl::StatusOr<std::unique_ptr<Client>> Client::Create(
    const ClientOptions& options) {
  if (options.target.empty()) {
    return absl::InvalidArgumentError("Client::Create: target is empty");
  }
  if (options.timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError(
        "Client::Create: timeout must be positive");
  }
  if (options.max_message_bytes <= 0 ||
      options.max_message_bytes > std::numeric_limits<int>::max()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Client::Create: max_message_bytes must be in [1, 2^31), got ",
        options.max_message_bytes));
  }
  // Only policies that gRPC registers and that need no configuration: any
  // other name would make every call of the channel fail.
  if (!options.lb_policy.empty() && options.lb_policy != "pick_first" &&
      options.lb_policy != "round_robin") {
    return absl::InvalidArgumentError(absl::StrCat(
        "Client::Create: lb_policy must be \"\", \"pick_first\" or "
        "\"round_robin\", got \"",
        options.lb_policy, "\""));
  }
  MAXSIMD_RETURN_IF_ERROR(ValidateSecurity(options));
  grpc::ChannelArguments args;
  const std::string service_config = ServiceConfigFor(options.lb_policy);
  if (!service_config.empty()) args.SetServiceConfigJSON(service_config);
  // gRPC shares connections between channels with equal arguments through a
  // process-wide subchannel pool; a local pool gives each Client its own.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetMaxSendMessageSize(static_cast<int>(options.max_message_bytes));
  args.SetMaxReceiveMessageSize(static_cast<int>(options.max_message_bytes));
  std::unique_ptr<Client> client(new Client(options));
  std::shared_ptr<grpc::ChannelCredentials> credentials =
      grpc::InsecureChannelCredentials();
  if (options.use_tls) {
    grpc::SslCredentialsOptions ssl;
    ssl.pem_root_certs = options.tls_root_certs;
    ssl.pem_cert_chain = options.tls_cert_chain;
    ssl.pem_private_key = options.tls_private_key;
    credentials = grpc::SslCredentials(ssl);
    if (!options.tls_server_name.empty()) {
      args.SetSslTargetNameOverride(options.tls_server_name);
    }
  }
  std::vector<
      std::unique_ptr<grpc::experimental::ClientInterceptorFactoryInterface>>
      interceptors;
  if (!options.token.empty()) {
    interceptors.push_back(
        std::make_unique<BearerTokenInterceptorFactory>(options.token));
  }
  client->channel_ = grpc::experimental::CreateCustomChannelWithInterceptors(
      options.target, credentials, args, std::move(interceptors));
  client->reranker_ = v1::Reranker::NewStub(client->channel_);
  client->admin_ = v1::Admin::NewStub(client->channel_);
  return client;
}

// Everything one RerankAsync call touches, owned until its reaction has
// run. A request RerankAsync encodes lives on an arena of the call, so that
// a thousand candidate ids take their strings from one block instead of one
// heap allocation each; a request handed in by value is moved in, not
// copied onto the arena. The response stays off the arena: it is moved out
// to the caller, where one on the arena could only be copied.
struct Client::AsyncRerankCall {
  google::protobuf::Arena arena{CallArenaOptions()};
  grpc::ClientContext context;
  v1::RerankRequest moved_in;
  v1::RerankRequest* request = nullptr;  // on `arena`, or `moved_in`
  v1::RerankResponse response;
  std::function<void(absl::StatusOr<v1::RerankResponse>)> done;
};

v1::RerankRequest Client::ToRequest(const Query& query) const {
  v1::RerankRequest request;
  FillRequest(query, &request);
  return request;
}

void Client::FillRequest(const Query& query, v1::RerankRequest* request) const {
  request->set_corpus(query.corpus);
  v1::Tensor* tensor = request->mutable_query();
  tensor->set_dtype(options_.send_float16 ? v1::DTYPE_FLOAT16
                                          : v1::DTYPE_FLOAT32);
  // A ragged tail (tokens.size() not a multiple of dim) is sent as is: the
  // server rejects the byte length with a message naming the field.
  const int64_t num_tokens =
      query.dim > 0 ? static_cast<int64_t>(query.tokens.size()) / query.dim : 0;
  tensor->add_shape(num_tokens);
  tensor->add_shape(query.dim);
  AppendValues(query.tokens.data(), query.tokens.size(), options_.send_float16,
               tensor->mutable_data());
  request->mutable_candidate_ids()->Reserve(
      static_cast<int>(query.candidate_ids.size()));
  for (const std::string& id : query.candidate_ids) {
    request->add_candidate_ids(id);
  }
  request->set_top_k(query.top_k);
  request->set_request_id(query.request_id);
}

absl::StatusOr<v1::CorpusInfo> Client::CreateCorpus(
    const v1::CreateCorpusRequest& request) {
  return CallUnary(admin_.get(), &v1::Admin::Stub::CreateCorpus, request,
                   options_.timeout);
}

absl::StatusOr<v1::AddDocumentsResponse> Client::AddDocuments(
    const std::string& corpus, const DocumentBatch& docs, int64_t chunk_bytes) {
  const absl::Status valid = ValidateBatch(docs);
  if (!valid.ok()) return valid;
  if (chunk_bytes <= 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AddDocuments: chunk_bytes must be positive, got ", chunk_bytes));
  }
  const bool float16 = options_.send_float16;
  const int64_t row_bytes = static_cast<int64_t>(docs.dim) * (float16 ? 2 : 4);

  grpc::ClientContext context;
  SetDeadline(&context, options_.timeout);
  v1::AddDocumentsResponse response;
  std::unique_ptr<grpc::ClientWriter<v1::AddDocumentsRequest>> writer =
      admin_->AddDocuments(&context, &response);

  const size_t num_docs = docs.ids.size();
  size_t next = 0;
  bool first = true;
  // An empty batch still sends one message so that the server sees the
  // corpus name and answers for it.
  while (first || next < num_docs) {
    // Take documents while the chunk stays within chunk_bytes; a document
    // larger than chunk_bytes travels alone rather than being split.
    size_t end = next;
    int64_t bytes = 0;
    while (end < num_docs) {
      const int64_t doc_bytes =
          (docs.cu_seqlens[end + 1] - docs.cu_seqlens[end]) * row_bytes;
      if (end > next && bytes + doc_bytes > chunk_bytes) break;
      bytes += doc_bytes;
      ++end;
    }
    v1::AddDocumentsRequest message;
    if (first) message.set_corpus(corpus);
    v1::Tensor* tensor = message.mutable_tokens();
    tensor->set_dtype(float16 ? v1::DTYPE_FLOAT16 : v1::DTYPE_FLOAT32);
    const int64_t row_begin = docs.cu_seqlens[next];
    const int64_t row_end = docs.cu_seqlens[end];
    tensor->add_shape(row_end - row_begin);
    tensor->add_shape(docs.dim);
    for (size_t i = next; i < end; ++i) {
      message.add_ids(docs.ids[i]);
      message.add_token_counts(
          static_cast<int32_t>(docs.cu_seqlens[i + 1] - docs.cu_seqlens[i]));
    }
    AppendValues(docs.tokens.data() + row_begin * docs.dim,
                 static_cast<size_t>(row_end - row_begin) * docs.dim, float16,
                 tensor->mutable_data());
    first = false;
    next = end;
    // A failed write means the server has already ended the call; Finish()
    // below returns its status.
    if (!writer->Write(message)) break;
  }
  writer->WritesDone();
  const grpc::Status status = writer->Finish();
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

absl::StatusOr<v1::DeleteDocumentsResponse> Client::DeleteDocuments(
    const std::string& corpus, const std::vector<std::string>& ids,
    bool ignore_missing) {
  v1::DeleteDocumentsRequest request;
  request.set_corpus(corpus);
  for (const std::string& id : ids) request.add_ids(id);
  request.set_ignore_missing(ignore_missing);
  return CallUnary(admin_.get(), &v1::Admin::Stub::DeleteDocuments, request,
                   options_.timeout);
}

absl::Status Client::DropCorpus(const std::string& name) {
  v1::DropCorpusRequest request;
  request.set_name(name);
  return CallUnary(admin_.get(), &v1::Admin::Stub::DropCorpus, request,
                   options_.timeout)
      .status();
}

absl::StatusOr<std::vector<v1::CorpusInfo>> Client::ListCorpora() {
  MAXSIMD_ASSIGN_OR_RETURN(
      v1::ListCorporaResponse response,
      CallUnary(admin_.get(), &v1::Admin::Stub::ListCorpora,
                v1::ListCorporaRequest(), options_.timeout));
  return std::vector<v1::CorpusInfo>(response.corpora().begin(),
                                     response.corpora().end());
}

absl::StatusOr<std::string> Client::SetAlias(const std::string& alias,
                                             const std::string& corpus) {
  v1::SetAliasRequest request;
  request.set_alias(alias);
  request.set_corpus(corpus);
  MAXSIMD_ASSIGN_OR_RETURN(v1::SetAliasResponse response,
                           CallUnary(admin_.get(), &v1::Admin::Stub::SetAlias,
                                     request, options_.timeout));
  return response.previous_corpus();
}

absl::Status Client::DeleteAlias(const std::string& alias) {
  v1::DeleteAliasRequest request;
  request.set_alias(alias);
  return CallUnary(admin_.get(), &v1::Admin::Stub::DeleteAlias, request,
                   options_.timeout)
      .status();
}

absl::StatusOr<std::vector<v1::Alias>> Client::ListAliases() {
  MAXSIMD_ASSIGN_OR_RETURN(
      v1::ListAliasesResponse response,
      CallUnary(admin_.get(), &v1::Admin::Stub::ListAliases,
                v1::ListAliasesRequest(), options_.timeout));
  return std::vector<v1::Alias>(response.aliases().begin(),
                                response.aliases().end());
}

absl::StatusOr<int64_t> Client::SnapshotCorpus(const std::string& name,
                                               const std::string& path) {
  v1::SnapshotCorpusRequest request;
  request.set_name(name);
  request.set_path(path);
  MAXSIMD_ASSIGN_OR_RETURN(
      v1::SnapshotCorpusResponse response,
      CallUnary(admin_.get(), &v1::Admin::Stub::SnapshotCorpus, request,
                options_.timeout));
  return response.num_documents();
}

absl::StatusOr<v1::CorpusInfo> Client::LoadCorpus(const std::string& path,
                                                  const std::string& name) {
  v1::LoadCorpusRequest request;
  request.set_path(path);
  request.set_name(name);
  return CallUnary(admin_.get(), &v1::Admin::Stub::LoadCorpus, request,
                   options_.timeout);
}

absl::StatusOr<v1::AddDocumentsResponse> Client::ImportDocuments(
    const v1::ImportDocumentsRequest& request) {
  return CallUnary(admin_.get(), &v1::Admin::Stub::ImportDocuments, request,
                   options_.timeout);
}

absl::StatusOr<std::string> Client::GetLogLevel() {
  MAXSIMD_ASSIGN_OR_RETURN(
      v1::GetLogLevelResponse response,
      CallUnary(admin_.get(), &v1::Admin::Stub::GetLogLevel,
                v1::GetLogLevelRequest(), options_.timeout));
  return response.level();
}

absl::StatusOr<v1::SetLogLevelResponse> Client::SetLogLevel(
    const std::string& level) {
  v1::SetLogLevelRequest request;
  request.set_level(level);
  return CallUnary(admin_.get(), &v1::Admin::Stub::SetLogLevel, request,
                   options_.timeout);
}

absl::StatusOr<v1::CorpusInfo> Client::GetCorpus(const std::string& name) {
  v1::GetCorpusRequest request;
  request.set_name(name);
  return CallUnary(admin_.get(), &v1::Admin::Stub::GetCorpus, request,
                   options_.timeout);
}

absl::StatusOr<v1::RerankResponse> Client::Rerank(const Query& query) {
  // The request on an arena, as RerankAsync's: its candidate ids take no
  // heap allocation (and free) each, which is time inside the call.
  google::protobuf::Arena arena{CallArenaOptions()};
  auto* request_on_arena =
      google::protobuf::Arena::CreateMessage<v1::RerankRequest>(&arena);
  FillRequest(query, request_on_arena);
  const v1::RerankRequest& request = *request_on_arena;
  grpc::ClientContext context;
  SetDeadline(&context, options_.timeout);
  v1::RerankResponse response;
  grpc::Status status;
  if (!options_.busy_poll) {
    status = reranker_->Rerank(&context, request, &response);
  } else {
    grpc::CompletionQueue cq;
    auto call = reranker_->AsyncRerank(&context, request, &cq);
    call->Finish(&response, &status, &cq);  // the tag: any unique pointer
    void* tag = nullptr;
    bool ok = false;
    // A deadline in the past makes each AsyncNext a non-blocking poll of
    // the connection. The call's own deadline ends it at the latest.
    while (cq.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) !=
           grpc::CompletionQueue::GOT_EVENT) {
    }
    cq.Shutdown();
    while (cq.Next(&tag, &ok)) {
    }
  }
  if (!status.ok()) return FromGrpcStatus(status);
  return response;
}

void Client::RerankAsync(
    const Query& query,
    std::function<void(absl::StatusOr<v1::RerankResponse>)> done) {
  const absl::Time deadline = options_.timeout == absl::InfiniteDuration()
                                  ? absl::InfiniteFuture()
                                  : absl::Now() + options_.timeout;
  auto call = std::make_unique<AsyncRerankCall>();
  call->request =
      google::protobuf::Arena::CreateMessage<v1::RerankRequest>(&call->arena);
  FillRequest(query, call->request);
  StartRerank(std::move(call), deadline, std::move(done));
}

void Client::RerankAsync(
    v1::RerankRequest request, absl::Time deadline,
    std::function<void(absl::StatusOr<v1::RerankResponse>)> done) {
  auto call = std::make_unique<AsyncRerankCall>();
  call->moved_in = std::move(request);
  call->request = &call->moved_in;
  StartRerank(std::move(call), deadline, std::move(done));
}

void Client::StartRerank(
    std::unique_ptr<AsyncRerankCall> call, absl::Time deadline,
    std::function<void(absl::StatusOr<v1::RerankResponse>)> done) {
  call->done = std::move(done);
  if (deadline != absl::InfiniteFuture()) {
    call->context.set_deadline(absl::ToChronoTime(deadline));
  }
  AsyncRerankCall* raw = call.release();
  reranker_->async()->Rerank(
      &raw->context, raw->request, &raw->response, [raw](grpc::Status status) {
        std::unique_ptr<AsyncRerankCall> owned(raw);
        auto done = std::move(owned->done);
        absl::StatusOr<v1::RerankResponse> result =
            status.ok()
                ? absl::StatusOr<v1::RerankResponse>(std::move(owned->response))
                : FromGrpcStatus(status);
        // The call's context goes before `done`, after which another thread
        // may destroy the client.
        owned.reset();
        done(std::move(result));
      });
}

absl::StatusOr<std::vector<v1::RerankResponse>> Client::RerankBatch(
    const std::vector<Query>& queries) {
  v1::RerankBatchRequest request;
  for (const Query& query : queries) *request.add_queries() = ToRequest(query);
  grpc::ClientContext context;
  SetDeadline(&context, options_.timeout);
  v1::RerankBatchResponse response;
  const grpc::Status status =
      reranker_->RerankBatch(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  if (static_cast<size_t>(response.results_size()) != queries.size()) {
    return absl::InternalError(
        absl::StrCat("RerankBatch: server answered ", response.results_size(),
                     " results for ", queries.size(), " queries"));
  }
  return std::vector<v1::RerankResponse>(response.results().begin(),
                                         response.results().end());
}

absl::StatusOr<std::vector<v1::RerankResponse>> Client::RerankStream(
    const std::vector<Query>& queries) {
  // Assign ids to untagged queries and check that every id is unique, since
  // responses can only be matched back by id.
  std::vector<v1::RerankRequest> requests;
  requests.reserve(queries.size());
  absl::flat_hash_map<std::string, size_t> index_of;
  for (size_t i = 0; i < queries.size(); ++i) {
    requests.push_back(ToRequest(queries[i]));
    if (requests.back().request_id().empty()) {
      requests.back().set_request_id(absl::StrCat("stream-", i));
    }
    if (!index_of.emplace(requests.back().request_id(), i).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("RerankStream: duplicate request_id '",
                       requests.back().request_id(), "' (query ", i, ")"));
    }
  }

  grpc::ClientContext context;
  SetDeadline(&context, options_.timeout);
  std::shared_ptr<
      grpc::ClientReaderWriter<v1::RerankRequest, v1::RerankResponse>>
      stream = reranker_->RerankStream(&context);

  // Write from a second thread while this one reads: with both directions
  // flow-controlled, a writer that waited for its last write before reading
  // could stall against a server that is waiting for room to respond.
  std::thread writer([&stream, &requests] {
    for (const v1::RerankRequest& request : requests) {
      if (!stream->Write(request)) break;  // the call has ended
    }
    stream->WritesDone();
  });

  std::vector<v1::RerankResponse> responses(queries.size());
  std::vector<bool> seen(queries.size(), false);
  size_t received = 0;
  absl::Status protocol_error;
  v1::RerankResponse response;
  while (stream->Read(&response)) {
    if (!protocol_error.ok()) continue;  // drain until the server is done
    auto it = index_of.find(response.request_id());
    if (it == index_of.end() || seen[it->second]) {
      protocol_error = absl::InternalError(
          absl::StrCat("RerankStream: unexpected response for request_id '",
                       response.request_id(), "'"));
      context.TryCancel();
      continue;
    }
    seen[it->second] = true;
    responses[it->second] = std::move(response);
    response = v1::RerankResponse();
    ++received;
  }
  writer.join();
  const grpc::Status status = stream->Finish();
  if (!protocol_error.ok()) return protocol_error;
  if (!status.ok()) return FromGrpcStatus(status);
  if (received != queries.size()) {
    return absl::InternalError(absl::StrCat("RerankStream: stream ended after ",
                                            received, " responses to ",
                                            queries.size(), " requests"));
  }
  return responses;
}

absl::StatusOr<int> Client::CheckHealth(const std::string& service) {
  std::unique_ptr<grpc::health::v1::Health::Stub> health =
      grpc::health::v1::Health::NewStub(channel_);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::ClientContext context;
  SetDeadline(&context, options_.timeout);
  grpc::health::v1::HealthCheckResponse response;
  const grpc::Status status = health->Check(&context, request, &response);
  if (!status.ok()) return FromGrpcStatus(status);
  return static_cast<int>(response.status());
}

}  // namespace maxsimd
