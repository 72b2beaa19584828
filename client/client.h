// The C++ client library for maxsimd's Reranker and Admin services.
//
// Every call returns absl::Status/StatusOr: a gRPC error becomes the Status
// with the same code and message. Embeddings are passed as fp32 host arrays
// and sent as raw little-endian bytes (fp32, or fp16 when
// ClientOptions::send_float16 is set).
//
// Thread-safety: a Client may be used from many threads at once; it holds one
// channel and the generated stubs, which are thread-safe. Each Client opens
// its own connection (its channel has a local subchannel pool), so N Clients
// to one target give N independent TCP connections, as a load generator
// needs. RerankAsync's callback runs on a gRPC thread (see there).
//
// A corpus larger than one host is split over shards: see
// client/sharded_client.h (ShardedClient) and client/README.md.
#ifndef MAXSIMD_CLIENT_CLIENT_H_
#define MAXSIMD_CLIENT_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "maxsimd/v1/admin.grpc.pb.h"
#include "maxsimd/v1/reranker.grpc.pb.h"

namespace maxsimd {

struct ClientOptions {
  std::string target = "127.0.0.1:50051";      // host:port, or any gRPC target
  absl::Duration timeout = absl::Seconds(30);  // per call deadline
  int64_t max_message_bytes = 64 << 20;
  bool send_float16 = false;  // send embeddings as fp16 instead of fp32
  // Rerank() waits for its response by polling a completion queue instead
  // of sleeping: the calling thread stays on its core (one busy core per
  // call in flight) and skips the wake-up when the response arrives, which
  // on an idle host can cost more than a small request's whole service time.
  bool busy_poll = false;
  // gRPC load-balancing policy of the channel, set through its service
  // config: "" keeps gRPC's default (pick_first: one connection, to the
  // first address the target resolves to that answers); "round_robin"
  // connects to every address and spreads calls over those that are ready,
  // so the replicas behind one name (a Kubernetes headless Service,
  // `dns:///maxsimd-headless.<namespace>.svc.cluster.local:50051`, or a list,
  // `ipv4:10.0.0.1:50051,10.0.0.2:50051`) share the load and a replica that
  // is down is skipped. "pick_first" names the default explicitly.
  std::string lb_policy;

  // TLS: with use_tls the channel connects over TLS and verifies the
  // server's certificate against tls_root_certs (PEM text; empty: gRPC's
  // default roots). tls_cert_chain and tls_private_key (PEM text, both or
  // neither) are the client certificate of mutual TLS. tls_server_name is
  // the name the server's certificate must carry when the target's host is
  // not it (an IP address, a load balancer's name). The tls_* fields need
  // use_tls.
  bool use_tls = false;
  std::string tls_root_certs;
  std::string tls_cert_chain;
  std::string tls_private_key;
  std::string tls_server_name;
  // A bearer token sent as `authorization: Bearer <token>` metadata with
  // every call (Admin calls on a server with admin tokens, and queries
  // under --query_auth=token); empty: none. It travels over plaintext too
  // when use_tls is false, so use that only on a trusted network.
  std::string token;
};

// Documents to add: ids[i] owns token rows [cu_seqlens[i], cu_seqlens[i+1])
// of `tokens` ([cu_seqlens.back(), dim] fp32, row-major).
struct DocumentBatch {
  int32_t dim = 0;
  std::vector<std::string> ids;
  std::vector<int64_t> cu_seqlens;
  std::vector<float> tokens;
};

// One query: `tokens` is [num_tokens, dim] fp32, row-major.
struct Query {
  std::string corpus;
  int32_t dim = 0;
  std::vector<float> tokens;
  std::vector<std::string> candidate_ids;  // empty: scan the whole corpus
  int32_t top_k = 10;
  std::string request_id;
};

class Client {
 public:
  static absl::StatusOr<std::unique_ptr<Client>> Create(
      const ClientOptions& options);

  absl::StatusOr<v1::CorpusInfo> CreateCorpus(
      const v1::CreateCorpusRequest& request);
  // Streams the batch in messages of at most `chunk_bytes` of token data
  // (documents are never split across messages); commits when all are sent.
  absl::StatusOr<v1::AddDocumentsResponse> AddDocuments(
      const std::string& corpus, const DocumentBatch& docs,
      int64_t chunk_bytes = 8 << 20);
  absl::StatusOr<v1::DeleteDocumentsResponse> DeleteDocuments(
      const std::string& corpus, const std::vector<std::string>& ids,
      bool ignore_missing = false);
  absl::Status DropCorpus(const std::string& name);
  absl::StatusOr<std::vector<v1::CorpusInfo>> ListCorpora();
  absl::StatusOr<v1::CorpusInfo> GetCorpus(const std::string& name);
  // Points `alias` at `corpus`; returns the corpus it named before ("" if
  // the alias is new).
  absl::StatusOr<std::string> SetAlias(const std::string& alias,
                                       const std::string& corpus);
  absl::Status DeleteAlias(const std::string& alias);
  // alias -> corpus, sorted by alias.
  absl::StatusOr<std::vector<v1::Alias>> ListAliases();
  // Snapshot to / load from a directory relative to the server's
  // --files_dir. SnapshotCorpus returns the snapshot's document count.
  absl::StatusOr<int64_t> SnapshotCorpus(const std::string& name,
                                         const std::string& path);
  absl::StatusOr<v1::CorpusInfo> LoadCorpus(const std::string& path,
                                            const std::string& name = "");
  // Documents the server reads from files under its --files_dir.
  absl::StatusOr<v1::AddDocumentsResponse> ImportDocuments(
      const v1::ImportDocumentsRequest& request);
  // The server's log level; SetLogLevel changes it until the next change
  // or a restart and returns the new and the previous level.
  absl::StatusOr<std::string> GetLogLevel();
  absl::StatusOr<v1::SetLogLevelResponse> SetLogLevel(const std::string& level);

  absl::StatusOr<v1::RerankResponse> Rerank(const Query& query);
  // The asynchronous form of Rerank, on the gRPC callback API: encodes the
  // request on the calling thread, starts the call and returns at once.
  // `done` then runs exactly once with the response or the error
  // (DEADLINE_EXCEEDED after ClientOptions::timeout): on a gRPC thread, or
  // inline before RerankAsync returns if gRPC fails the call at once (a
  // request it cannot serialize), so the caller must not hold a lock that
  // `done` takes. It should return quickly since it holds that thread, and
  // it may start new calls.
  // The call's context, request and response live in a heap object that is
  // freed just before `done` runs, so another thread may destroy the Client
  // as soon as `done` has run for every call started on it (gRPC finishes
  // the call on its own thread meanwhile, which is safe). `done` itself must
  // not destroy the Client: destroying a channel on the thread of one of its
  // own callbacks crashes gRPC (1.51). The Client must outlive every call in
  // flight.
  void RerankAsync(
      const Query& query,
      std::function<void(absl::StatusOr<v1::RerankResponse>)> done);
  // As above, for a request built by ToRequest (moved into the call) and an
  // absolute deadline in place of ClientOptions::timeout
  // (absl::InfiniteFuture(): none), so that one deadline can bound several
  // calls started one after another (ShardedClient's fan-out).
  void RerankAsync(
      v1::RerankRequest request, absl::Time deadline,
      std::function<void(absl::StatusOr<v1::RerankResponse>)> done);
  absl::StatusOr<std::vector<v1::RerankResponse>> RerankBatch(
      const std::vector<Query>& queries);
  // Sends every query on one RerankStream and returns the responses in
  // request order (matched by request_id, which it assigns when empty;
  // duplicate ids are INVALID_ARGUMENT). A query the server rejects keeps
  // its slot, with the error in the response's status_code and
  // status_message; a failure of the stream itself fails the whole call.
  absl::StatusOr<std::vector<v1::RerankResponse>> RerankStream(
      const std::vector<Query>& queries);

  // grpc.health.v1 Check for `service` ("" = the whole server). Returns the
  // serving status enum value (1 = SERVING, 2 = NOT_SERVING).
  absl::StatusOr<int> CheckHealth(const std::string& service = "");

  // Builds the request message for a query (exposed for tests and tools).
  v1::RerankRequest ToRequest(const Query& query) const;

 private:
  struct AsyncRerankCall;

  explicit Client(const ClientOptions& options);
  // Writes the request message for a query into `request` (ToRequest's
  // body; RerankAsync writes into its call's arena).
  void FillRequest(const Query& query, v1::RerankRequest* request) const;
  // Starts `call`, whose request is filled in; `done` runs as RerankAsync
  // says.
  void StartRerank(
      std::unique_ptr<AsyncRerankCall> call, absl::Time deadline,
      std::function<void(absl::StatusOr<v1::RerankResponse>)> done);
  ClientOptions options_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Reranker::Stub> reranker_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

// The absl::Status for a grpc::Status (same code and message).
absl::Status FromGrpcStatus(const grpc::Status& status);

}  // namespace maxsimd

#endif  // MAXSIMD_CLIENT_CLIENT_H_
