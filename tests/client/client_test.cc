#include "client/client.h"

#include <chrono>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "gmock/gmock.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "kernels/base/half.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// ---------------------------------------------------------------------------
// In-process fakes of the three services the client talks to.

// Echoes enough of each request into the response for the tests to check
// what arrived: each candidate id becomes a result (scored by position), and
// "missing"/"slow" corpora exercise errors and deadlines.
v1::RerankResponse Echo(const v1::RerankRequest& request) {
  v1::RerankResponse response;
  response.set_request_id(request.request_id());
  for (int i = 0; i < request.candidate_ids_size(); ++i) {
    v1::ScoredDocument* doc = response.add_results();
    doc->set_id(request.candidate_ids(i));
    doc->set_score(static_cast<float>(request.candidate_ids_size() - i));
  }
  // Marks which request this was, independently of request_id.
  response.add_results()->set_id(absl::StrCat("corpus:", request.corpus()));
  response.mutable_timing()->set_total_ns(1000);
  return response;
}

class FakeReranker final : public v1::Reranker::Service {
 public:
  grpc::Status Rerank(grpc::ServerContext* context,
                      const v1::RerankRequest* request,
                      v1::RerankResponse* response) override {
    {
      absl::MutexLock lock(&mu_);
      ++calls_;
      last_deadline_ = context->deadline();
      last_request_ = *request;
      last_peer_ = context->peer();
    }
    if (request->corpus() == "missing") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND,
                          "corpus 'missing' not found");
    }
    if (request->corpus() == "slow") {
      // Outlives any deadline the tests set, but ends if the test forgot.
      for (int i = 0; i < 500 && !context->IsCancelled(); ++i) {
        std::this_thread::sleep_for(std::chrono::milliseconds(10));
      }
      return grpc::Status(grpc::StatusCode::CANCELLED, "gave up");
    }
    *response = Echo(*request);
    return grpc::Status::OK;
  }

  grpc::Status RerankBatch(grpc::ServerContext*,
                           const v1::RerankBatchRequest* request,
                           v1::RerankBatchResponse* response) override {
    for (const v1::RerankRequest& q : request->queries()) {
      *response->add_results() = Echo(q);
    }
    return grpc::Status::OK;
  }

  // Answers only after the client has closed its side, in reverse order, so
  // that the client must match responses by request_id. Corpus "bad" gets an
  // in-band error, as the real server does for a bad request.
  grpc::Status RerankStream(
      grpc::ServerContext*,
      grpc::ServerReaderWriter<v1::RerankResponse, v1::RerankRequest>* stream)
      override {
    std::vector<v1::RerankRequest> requests;
    v1::RerankRequest request;
    while (stream->Read(&request)) requests.push_back(request);
    for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
      v1::RerankResponse response;
      if (it->corpus() == "bad") {
        response.set_request_id(it->request_id());
        response.set_status_code(grpc::StatusCode::INVALID_ARGUMENT);
        response.set_status_message("bad corpus");
      } else {
        response = Echo(*it);
      }
      if (!stream->Write(response)) break;
    }
    return grpc::Status::OK;
  }

  std::chrono::system_clock::time_point last_deadline() {
    absl::MutexLock lock(&mu_);
    return last_deadline_;
  }
  v1::RerankRequest last_request() {
    absl::MutexLock lock(&mu_);
    return last_request_;
  }
  // The client's address as the server saw it ("ipv4:127.0.0.1:PORT").
  std::string last_peer() {
    absl::MutexLock lock(&mu_);
    return last_peer_;
  }
  // Rerank calls answered so far.
  int calls() {
    absl::MutexLock lock(&mu_);
    return calls_;
  }

 private:
  absl::Mutex mu_;
  int calls_ ABSL_GUARDED_BY(mu_) = 0;
  std::chrono::system_clock::time_point last_deadline_ ABSL_GUARDED_BY(mu_);
  v1::RerankRequest last_request_ ABSL_GUARDED_BY(mu_);
  std::string last_peer_ ABSL_GUARDED_BY(mu_);
};

class FakeAdmin final : public v1::Admin::Service {
 public:
  grpc::Status CreateCorpus(grpc::ServerContext*,
                            const v1::CreateCorpusRequest* request,
                            v1::CorpusInfo* info) override {
    if (request->name() == "taken") {
      return grpc::Status(grpc::StatusCode::ALREADY_EXISTS, "name taken");
    }
    info->set_name(request->name());
    info->set_dim(request->dim());
    info->set_storage_dtype(request->storage_dtype());
    info->set_normalize(request->normalize());
    return grpc::Status::OK;
  }

  grpc::Status AddDocuments(grpc::ServerContext*,
                            grpc::ServerReader<v1::AddDocumentsRequest>* reader,
                            v1::AddDocumentsResponse* response) override {
    v1::AddDocumentsRequest message;
    int64_t added = 0;
    std::vector<v1::AddDocumentsRequest> received;
    while (reader->Read(&message)) {
      added += message.ids_size();
      received.push_back(message);
    }
    absl::MutexLock lock(&mu_);
    messages_ = std::move(received);
    response->set_added(added);
    response->mutable_corpus()->set_num_documents(added);
    return grpc::Status::OK;
  }

  grpc::Status DeleteDocuments(grpc::ServerContext*,
                               const v1::DeleteDocumentsRequest* request,
                               v1::DeleteDocumentsResponse* response) override {
    if (!request->ignore_missing()) {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown id");
    }
    response->set_deleted(request->ids_size() - 1);
    response->set_missing(1);
    return grpc::Status::OK;
  }

  grpc::Status DropCorpus(grpc::ServerContext*,
                          const v1::DropCorpusRequest* request,
                          v1::DropCorpusResponse*) override {
    if (request->name() != "c") {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "no such corpus");
    }
    return grpc::Status::OK;
  }

  grpc::Status ListCorpora(grpc::ServerContext*, const v1::ListCorporaRequest*,
                           v1::ListCorporaResponse* response) override {
    response->add_corpora()->set_name("a");
    response->add_corpora()->set_name("b");
    return grpc::Status::OK;
  }

  grpc::Status GetCorpus(grpc::ServerContext*,
                         const v1::GetCorpusRequest* request,
                         v1::CorpusInfo* info) override {
    info->set_name(request->name());
    info->set_num_documents(42);
    return grpc::Status::OK;
  }

  std::vector<v1::AddDocumentsRequest> messages() {
    absl::MutexLock lock(&mu_);
    return messages_;
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::AddDocumentsRequest> messages_ ABSL_GUARDED_BY(mu_);
};

class FakeHealth final : public grpc::health::v1::Health::Service {
 public:
  grpc::Status Check(grpc::ServerContext*,
                     const grpc::health::v1::HealthCheckRequest* request,
                     grpc::health::v1::HealthCheckResponse* response) override {
    if (request->service().empty()) {
      response->set_status(grpc::health::v1::HealthCheckResponse::SERVING);
    } else if (request->service() == "down") {
      response->set_status(grpc::health::v1::HealthCheckResponse::NOT_SERVING);
    } else {
      return grpc::Status(grpc::StatusCode::NOT_FOUND, "unknown service");
    }
    return grpc::Status::OK;
  }
};

class ClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(&reranker_);
    builder.RegisterService(&admin_);
    builder.RegisterService(&health_);
    server_ = builder.BuildAndStart();
    ASSERT_NE(server_, nullptr);
    ASSERT_GT(port_, 0);
  }
  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  std::unique_ptr<Client> Connect(bool float16 = false,
                                  absl::Duration timeout = absl::Seconds(10),
                                  bool busy_poll = false) {
    ClientOptions options;
    options.target = absl::StrCat("127.0.0.1:", port_);
    options.send_float16 = float16;
    options.timeout = timeout;
    options.busy_poll = busy_poll;
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    EXPECT_THAT(client, IsOk());
    return client.ok() ? std::move(*client) : nullptr;
  }

  FakeReranker reranker_;
  FakeAdmin admin_;
  FakeHealth health_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

Query MakeQuery(std::string corpus, int lq, int dim, std::string request_id) {
  Query q;
  q.corpus = std::move(corpus);
  q.dim = dim;
  for (int i = 0; i < lq * dim; ++i) q.tokens.push_back(0.25f * i - 1.f);
  q.request_id = std::move(request_id);
  return q;
}

std::unique_ptr<Client> OfflineClient(bool float16) {
  ClientOptions options;
  options.send_float16 = float16;
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  return client.ok() ? std::move(*client) : nullptr;
}

// ---------------------------------------------------------------------------
// Encoding and status mapping (no server).

TEST(ClientEncodingTest, ToRequestFloat32) {
  std::unique_ptr<Client> client = OfflineClient(false);
  ASSERT_NE(client, nullptr);
  Query q = MakeQuery("c", 2, 3, "r1");
  q.tokens[4] = 0.1f;  // not representable in fp16: must pass unchanged
  q.candidate_ids = {"x", "y"};
  q.top_k = 7;
  const v1::RerankRequest request = client->ToRequest(q);
  EXPECT_EQ(request.corpus(), "c");
  EXPECT_EQ(request.query().dtype(), v1::DTYPE_FLOAT32);
  EXPECT_THAT(request.query().shape(), ElementsAre(2, 3));
  ASSERT_EQ(request.query().data().size(), 6 * sizeof(float));
  EXPECT_EQ(std::memcmp(request.query().data().data(), q.tokens.data(),
                        6 * sizeof(float)),
            0);
  EXPECT_THAT(request.candidate_ids(), ElementsAre("x", "y"));
  EXPECT_EQ(request.top_k(), 7);
  EXPECT_EQ(request.request_id(), "r1");
}

TEST(ClientEncodingTest, ToRequestFloat16) {
  std::unique_ptr<Client> client = OfflineClient(true);
  ASSERT_NE(client, nullptr);
  Query q = MakeQuery("c", 4, 2, "");
  q.tokens[1] = 0.1f;
  q.tokens[2] = 1e6f;  // overflows fp16 to inf
  const v1::RerankRequest request = client->ToRequest(q);
  EXPECT_EQ(request.query().dtype(), v1::DTYPE_FLOAT16);
  EXPECT_THAT(request.query().shape(), ElementsAre(4, 2));
  ASSERT_EQ(request.query().data().size(), 8 * sizeof(uint16_t));
  for (size_t i = 0; i < 8; ++i) {
    uint16_t h;
    std::memcpy(&h, request.query().data().data() + 2 * i, sizeof(h));
    EXPECT_EQ(h, FloatToHalf(q.tokens[i])) << "element " << i;
  }
  uint16_t h1;
  std::memcpy(&h1, request.query().data().data() + 2, sizeof(h1));
  EXPECT_NEAR(HalfToFloat(h1), 0.1f, 1e-4f);
  uint16_t h2;
  std::memcpy(&h2, request.query().data().data() + 4, sizeof(h2));
  EXPECT_EQ(h2, 0x7c00);  // +inf: the server, not the client, rejects it
}

TEST(ClientEncodingTest, FromGrpcStatusKeepsCodeAndMessage) {
  EXPECT_THAT(FromGrpcStatus(grpc::Status::OK), IsOk());
  for (int code = 1; code <= 16; ++code) {
    const absl::Status s = FromGrpcStatus(
        grpc::Status(static_cast<grpc::StatusCode>(code), "why"));
    EXPECT_EQ(static_cast<int>(s.code()), code);
    EXPECT_EQ(s.message(), "why");
  }
  EXPECT_THAT(FromGrpcStatus(grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                                          "queue full")),
              StatusIs(absl::StatusCode::kResourceExhausted, "queue full"));
}

TEST(ClientEncodingTest, CreateRejectsBadOptions) {
  ClientOptions options;
  options.target = "";
  EXPECT_THAT(
      Client::Create(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("target")));
  options = ClientOptions();
  options.timeout = absl::ZeroDuration();
  EXPECT_THAT(
      Client::Create(options),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("timeout")));
  options = ClientOptions();
  options.max_message_bytes = int64_t{1} << 40;
  EXPECT_THAT(Client::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument));
  options = ClientOptions();
  options.lb_policy = "least_request";
  EXPECT_THAT(Client::Create(options),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("lb_policy must be")));
  for (const char* policy : {"", "pick_first", "round_robin"}) {
    options.lb_policy = policy;
    MAXSIMD_EXPECT_OK(Client::Create(options));
  }
}

// ---------------------------------------------------------------------------
// Calls against the fakes.

TEST_F(ClientTest, RerankSendsRequestWithDeadline) {
  std::unique_ptr<Client> client = Connect(false, absl::Seconds(20));
  ASSERT_NE(client, nullptr);
  Query q = MakeQuery("c", 2, 4, "tag");
  q.candidate_ids = {"d1", "d2", "d3"};
  const auto before = std::chrono::system_clock::now();
  absl::StatusOr<v1::RerankResponse> response = client->Rerank(q);
  MAXSIMD_ASSERT_OK(response);
  EXPECT_EQ(response->request_id(), "tag");
  ASSERT_EQ(response->results_size(), 4);
  EXPECT_EQ(response->results(0).id(), "d1");
  EXPECT_EQ(response->results(3).id(), "corpus:c");
  EXPECT_EQ(reranker_.last_request().query().data(),
            client->ToRequest(q).query().data());
  // The server saw a deadline about 20 s out.
  const auto deadline = reranker_.last_deadline();
  EXPECT_GT(deadline, before + std::chrono::seconds(15));
  EXPECT_LT(deadline, before + std::chrono::seconds(25));
}

TEST_F(ClientTest, ServerErrorKeepsCodeAndMessage) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->Rerank(MakeQuery("missing", 1, 4, "")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("corpus 'missing' not found")));
}

TEST_F(ClientTest, DeadlineExceededWhenServerIsSlow) {
  std::unique_ptr<Client> client = Connect(false, absl::Milliseconds(200));
  ASSERT_NE(client, nullptr);
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(client->Rerank(MakeQuery("slow", 1, 4, "")),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_F(ClientTest, RerankAsyncAnswersLikeRerank) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  Query q = MakeQuery("c", 2, 4, "async");
  q.candidate_ids = {"d1", "d2", "d3"};
  absl::StatusOr<v1::RerankResponse> expected = client->Rerank(q);
  MAXSIMD_ASSERT_OK(expected);
  // Several calls in flight at once; each callback must run exactly once
  // (BlockingCounter aborts on an extra decrement).
  constexpr int kCalls = 16;
  std::vector<absl::StatusOr<v1::RerankResponse>> got(
      kCalls, absl::UnknownError("callback never ran"));
  absl::BlockingCounter pending(kCalls);
  for (int i = 0; i < kCalls; ++i) {
    client->RerankAsync(
        q, [&got, &pending, i](absl::StatusOr<v1::RerankResponse> response) {
          got[i] = std::move(response);
          pending.DecrementCount();
        });
  }
  pending.Wait();
  for (int i = 0; i < kCalls; ++i) {
    SCOPED_TRACE(i);
    MAXSIMD_ASSERT_OK(got[i]);
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(*got[i], *expected))
        << got[i]->DebugString();
  }
  EXPECT_EQ(reranker_.last_request().query().data(),
            client->ToRequest(q).query().data());
}

TEST_F(ClientTest, RerankAsyncDeliversErrors) {
  std::unique_ptr<Client> client = Connect(false, absl::Milliseconds(200));
  ASSERT_NE(client, nullptr);
  absl::StatusOr<v1::RerankResponse> missing = absl::UnknownError("unset");
  absl::StatusOr<v1::RerankResponse> slow = absl::UnknownError("unset");
  absl::BlockingCounter pending(2);
  client->RerankAsync(MakeQuery("missing", 1, 4, ""),
                      [&](absl::StatusOr<v1::RerankResponse> response) {
                        missing = std::move(response);
                        pending.DecrementCount();
                      });
  client->RerankAsync(MakeQuery("slow", 1, 4, ""),
                      [&](absl::StatusOr<v1::RerankResponse> response) {
                        slow = std::move(response);
                        pending.DecrementCount();
                      });
  pending.Wait();
  EXPECT_THAT(missing, StatusIs(absl::StatusCode::kNotFound,
                                HasSubstr("corpus 'missing' not found")));
  EXPECT_THAT(slow, StatusIs(absl::StatusCode::kDeadlineExceeded));
}

// RerankAsync's contract: another thread may destroy the Client as soon as
// `done` has run, while gRPC's thread is still finishing the call. (Destroying
// it inside `done` instead fails within a few iterations.)
TEST_F(ClientTest, ClientMayBeDestroyedOnceDoneHasRun) {
  for (int i = 0; i < 50; ++i) {
    std::unique_ptr<Client> client = Connect();
    ASSERT_NE(client, nullptr);
    absl::Notification answered;
    client->RerankAsync(MakeQuery("c", 1, 4, ""),
                        [&answered](absl::StatusOr<v1::RerankResponse> r) {
                          EXPECT_THAT(r, IsOk());
                          answered.Notify();
                        });
    answered.WaitForNotification();
    client.reset();
  }
}

TEST_F(ClientTest, BusyPollRerankAnswersLikeBlockingRerank) {
  std::unique_ptr<Client> blocking = Connect();
  std::unique_ptr<Client> polling =
      Connect(false, absl::Milliseconds(200), /*busy_poll=*/true);
  ASSERT_NE(blocking, nullptr);
  ASSERT_NE(polling, nullptr);
  Query q = MakeQuery("c", 2, 4, "poll");
  q.candidate_ids = {"d1", "d2", "d3"};
  absl::StatusOr<v1::RerankResponse> expected = blocking->Rerank(q);
  MAXSIMD_ASSERT_OK(expected);
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<v1::RerankResponse> got = polling->Rerank(q);
    MAXSIMD_ASSERT_OK(got);
    EXPECT_TRUE(
        google::protobuf::util::MessageDifferencer::Equals(*got, *expected))
        << got->DebugString();
  }
  EXPECT_THAT(polling->Rerank(MakeQuery("missing", 1, 4, "")),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("corpus 'missing' not found")));
  const auto start = std::chrono::steady_clock::now();
  EXPECT_THAT(polling->Rerank(MakeQuery("slow", 1, 4, "")),
              StatusIs(absl::StatusCode::kDeadlineExceeded));
  EXPECT_LT(std::chrono::steady_clock::now() - start, std::chrono::seconds(3));
}

TEST_F(ClientTest, DistinctClientsUseDistinctConnections) {
  std::unique_ptr<Client> first = Connect();
  std::unique_ptr<Client> second = Connect();
  ASSERT_NE(first, nullptr);
  ASSERT_NE(second, nullptr);
  MAXSIMD_ASSERT_OK(first->Rerank(MakeQuery("c", 1, 4, "")));
  const std::string first_peer = reranker_.last_peer();
  MAXSIMD_ASSERT_OK(second->Rerank(MakeQuery("c", 1, 4, "")));
  EXPECT_NE(reranker_.last_peer(), first_peer);
  // One Client keeps its connection.
  MAXSIMD_ASSERT_OK(first->Rerank(MakeQuery("c", 1, 4, "")));
  EXPECT_EQ(reranker_.last_peer(), first_peer);
}

// Two replicas behind one target: round_robin sends calls to both,
// pick_first (the default) to the first address only.
TEST(ClientConnectTest, RoundRobinSpreadsCallsOverReplicas) {
  FakeReranker replicas[2];
  std::unique_ptr<grpc::Server> servers[2];
  int ports[2] = {0, 0};
  for (int r = 0; r < 2; ++r) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &ports[r]);
    builder.RegisterService(&replicas[r]);
    servers[r] = builder.BuildAndStart();
    ASSERT_NE(servers[r], nullptr);
  }
  auto calls_per_replica = [&](const std::string& lb_policy) {
    const int before[2] = {replicas[0].calls(), replicas[1].calls()};
    ClientOptions options;
    options.target =
        absl::StrCat("ipv4:127.0.0.1:", ports[0], ",127.0.0.1:", ports[1]);
    options.lb_policy = lb_policy;
    options.timeout = absl::Seconds(10);
    absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
    EXPECT_THAT(client, IsOk());
    for (int i = 0; client.ok() && i < 20; ++i) {
      EXPECT_THAT((*client)->Rerank(MakeQuery("c", 1, 4, "")), IsOk());
    }
    return std::vector<int>{replicas[0].calls() - before[0],
                            replicas[1].calls() - before[1]};
  };
  const std::vector<int> round_robin = calls_per_replica("round_robin");
  EXPECT_EQ(round_robin[0] + round_robin[1], 20);
  // Calls alternate once both connections are ready; the first calls may
  // all go to whichever connected first.
  EXPECT_GE(round_robin[0], 5);
  EXPECT_GE(round_robin[1], 5);
  EXPECT_THAT(calls_per_replica(""), ElementsAre(20, 0));
  EXPECT_THAT(calls_per_replica("pick_first"), ElementsAre(20, 0));

  // A dns:/// name is resolved by gRPC itself (here to 127.0.0.1, and on
  // some hosts also to ::1, where nothing listens and round_robin skips it).
  ClientOptions options;
  options.target = absl::StrCat("dns:///localhost:", ports[1]);
  options.lb_policy = "round_robin";
  options.timeout = absl::Seconds(10);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  MAXSIMD_ASSERT_OK(client);
  const int before = replicas[1].calls();
  for (int i = 0; i < 5; ++i) {
    MAXSIMD_EXPECT_OK((*client)->Rerank(MakeQuery("c", 1, 4, "")));
  }
  EXPECT_EQ(replicas[1].calls() - before, 5);
  for (auto& server : servers) server->Shutdown();
}

TEST(ClientConnectTest, UnreachableServerIsUnavailable) {
  // A port that was just free: bind it, then shut the server down.
  int port = 0;
  {
    FakeHealth health;
    grpc::ServerBuilder builder;
    builder.RegisterService(&health);
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port);
    std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
    ASSERT_NE(server, nullptr);
    server->Shutdown();
  }
  ClientOptions options;
  options.target = absl::StrCat("127.0.0.1:", port);
  options.timeout = absl::Seconds(5);
  absl::StatusOr<std::unique_ptr<Client>> client = Client::Create(options);
  MAXSIMD_ASSERT_OK(client);
  EXPECT_THAT((*client)->CheckHealth(),
              StatusIs(absl::StatusCode::kUnavailable));
}

TEST_F(ClientTest, RerankBatchAnswersInOrder) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  std::vector<Query> queries = {MakeQuery("a", 1, 4, "0"),
                                MakeQuery("b", 2, 4, "1"),
                                MakeQuery("c", 3, 4, "2")};
  absl::StatusOr<std::vector<v1::RerankResponse>> responses =
      client->RerankBatch(queries);
  MAXSIMD_ASSERT_OK(responses);
  ASSERT_EQ(responses->size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ((*responses)[i].request_id(), absl::StrCat(i));
    EXPECT_EQ((*responses)[i].results(0).id(),
              absl::StrCat("corpus:", queries[i].corpus));
  }
}

TEST_F(ClientTest, RerankStreamMatchesResponsesByRequestId) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  // Mixed: ids given and ids left for the client to assign; one bad request.
  std::vector<Query> queries;
  for (int i = 0; i < 20; ++i) {
    queries.push_back(MakeQuery(i == 7 ? "bad" : absl::StrCat("corpus", i), 2,
                                4, i % 3 == 0 ? "" : absl::StrCat("id-", i)));
  }
  absl::StatusOr<std::vector<v1::RerankResponse>> responses =
      client->RerankStream(queries);
  MAXSIMD_ASSERT_OK(responses);
  ASSERT_EQ(responses->size(), queries.size());
  for (size_t i = 0; i < queries.size(); ++i) {
    SCOPED_TRACE(i);
    const v1::RerankResponse& r = (*responses)[i];
    if (!queries[i].request_id.empty()) {
      EXPECT_EQ(r.request_id(), queries[i].request_id);
    } else {
      EXPECT_FALSE(r.request_id().empty());
    }
    if (i == 7) {
      EXPECT_EQ(r.status_code(), grpc::StatusCode::INVALID_ARGUMENT);
      EXPECT_EQ(r.status_message(), "bad corpus");
    } else {
      EXPECT_EQ(r.status_code(), 0);
      ASSERT_EQ(r.results_size(), 1);
      EXPECT_EQ(r.results(0).id(), absl::StrCat("corpus:corpus", i));
    }
  }
}

TEST_F(ClientTest, RerankStreamRejectsDuplicateRequestIds) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  EXPECT_THAT(client->RerankStream(
                  {MakeQuery("a", 1, 4, "same"), MakeQuery("b", 1, 4, "same")}),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("duplicate request_id 'same'")));
}

DocumentBatch RandomBatch(int num_docs, int dim, uint64_t seed) {
  std::mt19937_64 rng(seed);
  DocumentBatch batch;
  batch.dim = dim;
  batch.cu_seqlens.push_back(0);
  for (int d = 0; d < num_docs; ++d) {
    // Document 10 is larger than any chunk the test asks for.
    const int64_t len = d == 10 ? 100 : 1 + static_cast<int64_t>(rng() % 40);
    batch.ids.push_back(absl::StrCat("doc", d));
    batch.cu_seqlens.push_back(batch.cu_seqlens.back() + len);
  }
  std::normal_distribution<float> normal;
  batch.tokens.resize(batch.cu_seqlens.back() * dim);
  for (float& v : batch.tokens) v = normal(rng);
  return batch;
}

TEST_F(ClientTest, AddDocumentsChunksWithoutSplittingDocuments) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  const int dim = 8;
  const int64_t row_bytes = dim * 4;
  const int64_t chunk_bytes = 1000;
  const DocumentBatch batch = RandomBatch(60, dim, 5);
  absl::StatusOr<v1::AddDocumentsResponse> response =
      client->AddDocuments("c", batch, chunk_bytes);
  MAXSIMD_ASSERT_OK(response);
  EXPECT_EQ(response->added(), 60);

  const std::vector<v1::AddDocumentsRequest> messages = admin_.messages();
  ASSERT_GT(messages.size(), 10u);
  EXPECT_EQ(messages[0].corpus(), "c");
  std::vector<std::string> ids;
  std::string data;
  size_t doc = 0;
  for (size_t m = 0; m < messages.size(); ++m) {
    SCOPED_TRACE(absl::StrCat("message ", m));
    const v1::AddDocumentsRequest& msg = messages[m];
    EXPECT_TRUE(msg.corpus().empty() || msg.corpus() == "c");
    ASSERT_EQ(msg.ids_size(), msg.token_counts_size());
    ASSERT_GT(msg.ids_size(), 0);
    EXPECT_EQ(msg.tokens().dtype(), v1::DTYPE_FLOAT32);
    int64_t rows = 0;
    for (int i = 0; i < msg.ids_size(); ++i, ++doc) {
      // Every document arrives whole, with its own token count.
      EXPECT_EQ(msg.token_counts(i),
                batch.cu_seqlens[doc + 1] - batch.cu_seqlens[doc]);
      rows += msg.token_counts(i);
      ids.push_back(msg.ids(i));
    }
    ASSERT_THAT(msg.tokens().shape(), ElementsAre(rows, dim));
    const int64_t bytes = static_cast<int64_t>(msg.tokens().data().size());
    EXPECT_EQ(bytes, rows * row_bytes);
    // Within the limit, unless one oversized document travels alone.
    EXPECT_TRUE(bytes <= chunk_bytes || msg.ids_size() == 1);
    // Packed greedily: the next document would not have fitted.
    if (m + 1 < messages.size()) {
      EXPECT_GT(bytes + messages[m + 1].token_counts(0) * row_bytes,
                chunk_bytes);
    }
    data += msg.tokens().data();
  }
  EXPECT_EQ(ids, batch.ids);
  ASSERT_EQ(data.size(), batch.tokens.size() * sizeof(float));
  EXPECT_EQ(std::memcmp(data.data(), batch.tokens.data(), data.size()), 0);
}

TEST_F(ClientTest, AddDocumentsSendsFloat16) {
  std::unique_ptr<Client> client = Connect(/*float16=*/true);
  ASSERT_NE(client, nullptr);
  const DocumentBatch batch = RandomBatch(12, 4, 9);
  MAXSIMD_ASSERT_OK(client->AddDocuments("c", batch));
  const std::vector<v1::AddDocumentsRequest> messages = admin_.messages();
  ASSERT_EQ(messages.size(), 1u);  // the default chunk holds everything
  const std::string& data = messages[0].tokens().data();
  EXPECT_EQ(messages[0].tokens().dtype(), v1::DTYPE_FLOAT16);
  ASSERT_EQ(data.size(), batch.tokens.size() * 2);
  for (size_t i = 0; i < batch.tokens.size(); ++i) {
    uint16_t h;
    std::memcpy(&h, data.data() + 2 * i, sizeof(h));
    ASSERT_EQ(h, FloatToHalf(batch.tokens[i])) << i;
  }
}

TEST_F(ClientTest, AddDocumentsValidatesBeforeSending) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  DocumentBatch batch = RandomBatch(5, 4, 1);
  batch.tokens.pop_back();
  EXPECT_THAT(
      client->AddDocuments("c", batch),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tokens")));
  batch = RandomBatch(5, 4, 1);
  batch.ids.pop_back();
  EXPECT_THAT(
      client->AddDocuments("c", batch),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cu_seqlens")));
  batch = RandomBatch(5, 4, 1);
  EXPECT_THAT(
      client->AddDocuments("c", batch, 0),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chunk_bytes")));
  EXPECT_TRUE(admin_.messages().empty());
}

TEST_F(ClientTest, AdminCalls) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  v1::CreateCorpusRequest create;
  create.set_name("c");
  create.set_dim(96);
  create.set_storage_dtype(v1::DTYPE_BFLOAT16);
  absl::StatusOr<v1::CorpusInfo> info = client->CreateCorpus(create);
  MAXSIMD_ASSERT_OK(info);
  EXPECT_EQ(info->dim(), 96);
  EXPECT_EQ(info->storage_dtype(), v1::DTYPE_BFLOAT16);
  create.set_name("taken");
  EXPECT_THAT(client->CreateCorpus(create),
              StatusIs(absl::StatusCode::kAlreadyExists));

  absl::StatusOr<std::vector<v1::CorpusInfo>> list = client->ListCorpora();
  MAXSIMD_ASSERT_OK(list);
  ASSERT_EQ(list->size(), 2u);
  EXPECT_EQ((*list)[1].name(), "b");

  absl::StatusOr<v1::CorpusInfo> got = client->GetCorpus("g");
  MAXSIMD_ASSERT_OK(got);
  EXPECT_EQ(got->name(), "g");
  EXPECT_EQ(got->num_documents(), 42);

  EXPECT_THAT(client->DeleteDocuments("c", {"x", "y"}),
              StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<v1::DeleteDocumentsResponse> deleted =
      client->DeleteDocuments("c", {"x", "y", "z"}, /*ignore_missing=*/true);
  MAXSIMD_ASSERT_OK(deleted);
  EXPECT_EQ(deleted->deleted(), 2);
  EXPECT_EQ(deleted->missing(), 1);

  MAXSIMD_EXPECT_OK(client->DropCorpus("c"));
  EXPECT_THAT(client->DropCorpus("other"),
              StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(ClientTest, CheckHealth) {
  std::unique_ptr<Client> client = Connect();
  ASSERT_NE(client, nullptr);
  absl::StatusOr<int> serving = client->CheckHealth();
  MAXSIMD_ASSERT_OK(serving);
  EXPECT_EQ(*serving, 1);
  absl::StatusOr<int> down = client->CheckHealth("down");
  MAXSIMD_ASSERT_OK(down);
  EXPECT_EQ(*down, 2);
  EXPECT_THAT(client->CheckHealth("nope"),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace maxsimd
