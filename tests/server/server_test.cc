// In-process server tests over real loopback sockets: health, reflection,
// the add -> query -> delete -> query cycle against the scalar reference,
// every bad input with its status code, batch and stream calls, /metrics.
#include "server/server.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <limits>
#include <random>
#include <sstream>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/notification.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "index/plaid_search.h"
#include "index/registry.h"
#include "index/synthetic.h"
#include "kernels/maxsim_reference.h"
#include "maxsimd/v1/admin.grpc.pb.h"
#include "maxsimd/v1/reranker.grpc.pb.h"
#include "server/admin_service.h"
#include "server/logging.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/support/http.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

class ServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.metrics_listen = "127.0.0.1:0";
    o.backend = BackendChoice::kCpu;
    o.cpu_threads = 2;
    o.request_limits.max_query_tokens = 64;
    o.request_limits.max_candidates = 50;
    o.request_limits.max_top_k = 200;
    o.request_limits.max_batch_queries = 8;
    o.drain_timeout = absl::Seconds(5);
    auto s = MaxsimServer::Start(o);
    ASSERT_TRUE(s.ok()) << s.status();
    server_ = *std::move(s);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    reranker_ = v1::Reranker::NewStub(channel_);
    admin_ = v1::Admin::NewStub(channel_);
  }

  grpc::Status CreateCorpus(const std::string& name, int dim) {
    grpc::ClientContext ctx;
    v1::CreateCorpusRequest req;
    req.set_name(name);
    req.set_dim(dim);
    v1::CorpusInfo info;
    return admin_->CreateCorpus(&ctx, req, &info);
  }

  // Streams `synth` documents [begin, end) in messages of `per_message`.
  grpc::Status Add(const std::string& corpus, const SyntheticCorpus& synth,
                   int64_t begin, int64_t end, int per_message,
                   v1::AddDocumentsResponse* resp) {
    grpc::ClientContext ctx;
    auto writer = admin_->AddDocuments(&ctx, resp);
    for (int64_t d = begin; d < end; d += per_message) {
      v1::AddDocumentsRequest m;
      if (d == begin) m.set_corpus(corpus);
      const int64_t stop = std::min(end, d + per_message);
      for (int64_t i = d; i < stop; ++i) {
        m.add_ids(synth.ids[i]);
        m.add_token_counts(static_cast<int32_t>(synth.cu_seqlens[i + 1] -
                                                synth.cu_seqlens[i]));
      }
      const int64_t r0 = synth.cu_seqlens[d], r1 = synth.cu_seqlens[stop];
      m.mutable_tokens()->set_dtype(v1::DTYPE_FLOAT32);
      m.mutable_tokens()->add_shape(r1 - r0);
      m.mutable_tokens()->add_shape(synth.dim);
      m.mutable_tokens()->set_data(synth.tokens.data() + r0 * synth.dim,
                                   (r1 - r0) * synth.dim * sizeof(float));
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  static v1::RerankRequest Query(const std::string& corpus,
                                 const std::vector<float>& tokens, int dim,
                                 int top_k) {
    v1::RerankRequest r;
    r.set_corpus(corpus);
    r.set_top_k(top_k);
    r.mutable_query()->set_dtype(v1::DTYPE_FLOAT32);
    r.mutable_query()->add_shape(static_cast<int64_t>(tokens.size()) / dim);
    r.mutable_query()->add_shape(dim);
    r.mutable_query()->set_data(tokens.data(), tokens.size() * sizeof(float));
    return r;
  }

  grpc::Status Rerank(const v1::RerankRequest& req, v1::RerankResponse* resp) {
    grpc::ClientContext ctx;
    return reranker_->Rerank(&ctx, req, resp);
  }

  // The oracle's ranking of `req` against the server's current snapshot of
  // `corpus`, as (id, score) pairs.
  std::vector<std::pair<std::string, float>> Expected(
      const std::string& corpus, const v1::RerankRequest& req) {
    auto snap = server_->corpora()->Get(corpus).value()->Snapshot();
    const int dim = snap->config().dim;
    std::vector<float> q(req.query().data().size() / sizeof(float));
    std::memcpy(q.data(), req.query().data().data(), req.query().data().size());
    SearchBatch batch;
    batch.dim = dim;
    batch.quantize_queries = snap->config().quantize_queries;
    batch.refs = snap->SegmentRefs();
    batch.AddQuery(q, req.top_k());
    if (req.candidate_ids_size() > 0) {
      batch.cand_offsets = {0};
      for (const std::string& id : req.candidate_ids()) {
        batch.candidates.push_back(snap->Find(id).value());
      }
      batch.cand_offsets.push_back(
          static_cast<int64_t>(batch.candidates.size()));
    }
    const SearchParams p = batch.Params();
    std::vector<std::pair<std::string, float>> out;
    const auto ranked = ReferenceSearch(p);
    for (const ScoredDoc& d : ranked[0]) {
      out.emplace_back(snap->IdOf(d.index), d.score);
    }
    return out;
  }

  static void ExpectSameRanking(
      const v1::RerankResponse& got,
      const std::vector<std::pair<std::string, float>>& want) {
    ASSERT_EQ(got.results_size(), static_cast<int>(want.size()));
    for (int i = 0; i < got.results_size(); ++i) {
      EXPECT_EQ(got.results(i).id(), want[i].first) << "rank " << i;
      EXPECT_NEAR(got.results(i).score(), want[i].second,
                  1e-4 * std::max(1.f, std::fabs(want[i].second)));
    }
  }

  std::unique_ptr<MaxsimServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Reranker::Stub> reranker_;
  std::unique_ptr<v1::Admin::Stub> admin_;
};

TEST(FilesPathTest, OnlyRelativePathsUnderTheRootAreAccepted) {
  EXPECT_EQ(ResolveFilesPath("/srv/snaps", "v1/2026-11", "path").value(),
            "/srv/snaps/v1/2026-11");
  EXPECT_THAT(ResolveFilesPath("", "v1", "path"),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       HasSubstr("--files_dir")));
  for (const char* bad :
       {"", "/etc", "../x", "a/../b", "a//b", "a/./b", "a b", "a\\b", "x/"}) {
    EXPECT_THAT(
        ResolveFilesPath("/srv/snaps", bad, "path"),
        StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("path is")))
        << bad;
  }
}

TEST_F(ServerTest, HealthAnswersPerService) {
  auto health = grpc::health::v1::Health::NewStub(channel_);
  for (const char* service : {"", "maxsimd.v1.Reranker", "maxsimd.v1.Admin"}) {
    grpc::ClientContext ctx;
    grpc::health::v1::HealthCheckRequest req;
    req.set_service(service);
    grpc::health::v1::HealthCheckResponse resp;
    ASSERT_TRUE(health->Check(&ctx, req, &resp).ok()) << service;
    EXPECT_EQ(resp.status(), grpc::health::v1::HealthCheckResponse::SERVING);
  }
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckRequest req;
  req.set_service("no.such.Service");
  grpc::health::v1::HealthCheckResponse resp;
  EXPECT_EQ(health->Check(&ctx, req, &resp).error_code(),
            grpc::StatusCode::NOT_FOUND);
}

// One reflection request over the generic stub; returns the raw response.
std::string ReflectionCall(grpc::Channel* channel, const std::string& request) {
  grpc::GenericStub stub(channel->shared_from_this());
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice(request);
  grpc::ByteBuffer out(&slice, 1);
  call->Write(out, reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer in;
  call->Read(&in, reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  std::string body;
  std::vector<grpc::Slice> slices;
  if (ok && in.Dump(&slices).ok()) {
    for (const auto& s : slices) {
      body.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  call->WritesDone(reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(5));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return body;
}

// Encodes a length-delimited protobuf field (wire type 2).
std::string Field(int number, const std::string& value) {
  std::string out(1, static_cast<char>(number << 3 | 2));
  out.push_back(static_cast<char>(value.size()));  // values here are < 128
  return out + value;
}

TEST_F(ServerTest, ReflectionListsServicesAndDescribesHealth) {
  // ServerReflectionRequest.list_services is field 7.
  const std::string list = ReflectionCall(channel_.get(), Field(7, "*"));
  EXPECT_THAT(list, HasSubstr("maxsimd.v1.Reranker"));
  EXPECT_THAT(list, HasSubstr("maxsimd.v1.Admin"));
  EXPECT_THAT(list, HasSubstr("grpc.health.v1.Health"));
  // file_containing_symbol is field 4; the answer carries the serialized
  // FileDescriptorProto of health.proto.
  const std::string health =
      ReflectionCall(channel_.get(), Field(4, "grpc.health.v1.Health"));
  EXPECT_THAT(health, HasSubstr("grpc/health/v1/health.proto"));
  EXPECT_THAT(health, HasSubstr("HealthCheckRequest"));
}

TEST_F(ServerTest, AddQueryDeleteQueryMatchesTheReference) {
  SyntheticCorpusOptions so;
  so.num_docs = 300;
  so.dim = 64;
  so.min_tokens = 1;
  so.max_tokens = 40;
  so.seed = 7;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(so);
  ASSERT_TRUE(CreateCorpus("docs", 64).ok());
  // Two streams, so the corpus has two segments.
  v1::AddDocumentsResponse added;
  ASSERT_TRUE(Add("docs", synth, 0, 200, 37, &added).ok());
  EXPECT_EQ(added.added(), 200);
  ASSERT_TRUE(Add("docs", synth, 200, 300, 64, &added).ok());
  EXPECT_EQ(added.corpus().num_documents(), 300);
  EXPECT_EQ(added.corpus().num_segments(), 2);

  const std::vector<float> q =
      GenerateQueryForDocument(synth, 250, 16, 0.1f, 3);
  v1::RerankRequest scan = Query("docs", q, 64, 20);
  v1::RerankResponse resp;
  ASSERT_TRUE(Rerank(scan, &resp).ok());
  ExpectSameRanking(resp, Expected("docs", scan));
  EXPECT_EQ(resp.results(0).id(), synth.ids[250]);
  EXPECT_GT(resp.timing().total_ns(), 0);

  v1::RerankRequest rerank = scan;
  for (int i = 0; i < 40; ++i) rerank.add_candidate_ids(synth.ids[i * 7]);
  rerank.set_top_k(200);  // more than the candidates: all 40 come back
  ASSERT_TRUE(Rerank(rerank, &resp).ok());
  EXPECT_EQ(resp.results_size(), 40);
  ExpectSameRanking(resp, Expected("docs", rerank));

  // Delete the best document and one candidate; both vanish from results.
  const std::string best = resp.results(0).id();
  grpc::ClientContext ctx;
  v1::DeleteDocumentsRequest del;
  del.set_corpus("docs");
  del.add_ids(synth.ids[250]);
  del.add_ids(best);
  v1::DeleteDocumentsResponse del_resp;
  ASSERT_TRUE(admin_->DeleteDocuments(&ctx, del, &del_resp).ok());
  EXPECT_EQ(del_resp.deleted(), best == synth.ids[250] ? 1 : 2);
  ASSERT_TRUE(Rerank(scan, &resp).ok());
  ExpectSameRanking(resp, Expected("docs", scan));
  for (const auto& r : resp.results()) EXPECT_NE(r.id(), synth.ids[250]);
  // The deleted candidate is now unknown.
  EXPECT_EQ(Rerank(rerank, &resp).error_code(), grpc::StatusCode::NOT_FOUND);
}

// CreateCorpus's layout options: LAYOUT_INT8 takes storage_dtype unset or
// DTYPE_INT8, quantize_queries only goes with it (unset: the backend's
// preference); LAYOUT_PLAID takes
// plaid_nbits in {1, 2, 4, 8} (0: 2) and refuses another storage_dtype;
// the plaid fields go only with it. Every refusal names its field, and
// none leaves a corpus behind.
TEST_F(ServerTest, Int8LayoutOptionsAreValidatedByName) {
  auto create = [&](v1::Layout layout, v1::DType dtype, bool quantize,
                    v1::CorpusInfo* info) {
    grpc::ClientContext ctx;
    v1::CreateCorpusRequest req;
    req.set_name("q");
    req.set_dim(8);
    req.set_layout(layout);
    req.set_storage_dtype(dtype);
    req.set_quantize_queries(quantize);
    return admin_->CreateCorpus(&ctx, req, info);
  };
  auto drop = [&] {
    grpc::ClientContext ctx;
    v1::DropCorpusRequest req;
    req.set_name("q");
    v1::DropCorpusResponse resp;
    return admin_->DropCorpus(&ctx, req, &resp).ok();
  };
  v1::CorpusInfo info;
  for (v1::DType bad :
       {v1::DTYPE_FLOAT16, v1::DTYPE_BFLOAT16, v1::DTYPE_FLOAT32}) {
    grpc::Status st = create(v1::LAYOUT_INT8, bad, false, &info);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << bad;
    EXPECT_THAT(st.error_message(), HasSubstr("storage_dtype")) << bad;
  }
  grpc::Status st = create(v1::LAYOUT_DENSE, v1::DTYPE_INT8, false, &info);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("storage_dtype"));
  for (v1::Layout dense : {v1::LAYOUT_UNSPECIFIED, v1::LAYOUT_DENSE}) {
    st = create(dense, v1::DTYPE_UNSPECIFIED, true, &info);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("quantize_queries"));
  }
  st = create(v1::LAYOUT_PLAID, v1::DTYPE_FLOAT16, false, &info);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("storage_dtype"));
  auto create_plaid = [&](v1::Layout layout, int nbits, int64_t centroids) {
    grpc::ClientContext ctx;
    v1::CreateCorpusRequest req;
    req.set_name("q");
    req.set_dim(8);
    req.set_layout(layout);
    req.set_plaid_nbits(nbits);
    req.set_plaid_centroids(centroids);
    info.Clear();
    return admin_->CreateCorpus(&ctx, req, &info);
  };
  for (int bad : {3, -1, 16}) {
    st = create_plaid(v1::LAYOUT_PLAID, bad, 0);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("plaid_nbits is"));
  }
  st = create_plaid(v1::LAYOUT_PLAID, 2, -5);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("plaid_centroids is -5"));
  st = create_plaid(v1::LAYOUT_DENSE, 2, 0);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("only valid with LAYOUT_PLAID"));
  EXPECT_TRUE(server_->corpora()->List().empty());
  for (int nbits : {0, 1, 4}) {
    ASSERT_TRUE(create_plaid(v1::LAYOUT_PLAID, nbits, 16).ok()) << nbits;
    EXPECT_EQ(info.layout(), v1::LAYOUT_PLAID);
    EXPECT_EQ(info.storage_dtype(), v1::DTYPE_PLAID);
    EXPECT_EQ(info.plaid_nbits(), nbits == 0 ? 2 : nbits);
    EXPECT_EQ(info.plaid_centroids(), 16);
    ASSERT_TRUE(drop());
  }

  for (v1::DType dtype : {v1::DTYPE_UNSPECIFIED, v1::DTYPE_INT8}) {
    for (bool quantize : {false, true}) {
      info.Clear();
      ASSERT_TRUE(create(v1::LAYOUT_INT8, dtype, quantize, &info).ok());
      EXPECT_EQ(info.layout(), v1::LAYOUT_INT8);
      EXPECT_EQ(info.storage_dtype(), v1::DTYPE_INT8);
      EXPECT_EQ(info.quantize_queries(), quantize);
      ASSERT_TRUE(drop());
    }
  }
  ASSERT_TRUE(create(v1::LAYOUT_DENSE, v1::DTYPE_BFLOAT16, false, &info).ok());
  EXPECT_EQ(info.storage_dtype(), v1::DTYPE_BFLOAT16);
  EXPECT_FALSE(info.quantize_queries());
  ASSERT_TRUE(drop());
  // query_quantization: unspecified takes the backend's preference (the CPU
  // backend's: float16 queries; GpuInt8Test checks the GPU's); the others
  // say which.
  for (v1::QueryQuantization mode :
       {v1::QUERY_QUANTIZATION_UNSPECIFIED, v1::QUERY_QUANTIZATION_FLOAT16,
        v1::QUERY_QUANTIZATION_INT8}) {
    grpc::ClientContext ctx;
    v1::CreateCorpusRequest req;
    req.set_name("q");
    req.set_dim(8);
    req.set_layout(v1::LAYOUT_INT8);
    req.set_query_quantization(mode);
    info.Clear();
    ASSERT_TRUE(admin_->CreateCorpus(&ctx, req, &info).ok()) << mode;
    EXPECT_EQ(info.quantize_queries(), mode == v1::QUERY_QUANTIZATION_INT8);
    ASSERT_TRUE(drop());
  }
}

// An int8 corpus through the real services, in both query modes: added
// documents rank like the reference in a scan and a rerank, GetCorpus
// reports the layout and the bytes of codes and scales, and bad inputs
// peculiar to int8 are refused by name.
TEST_F(ServerTest, Int8CorpusAddRerankAndScanMatchTheReference) {
  SyntheticCorpusOptions so;
  so.num_docs = 200;
  so.dim = 32;
  so.min_tokens = 1;
  so.max_tokens = 30;
  so.seed = 11;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(so);
  for (bool quantize : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "quantize_queries " << quantize);
    const std::string name = quantize ? "q8q" : "q8";
    grpc::ClientContext ctx;
    v1::CreateCorpusRequest req;
    req.set_name(name);
    req.set_dim(32);
    req.set_layout(v1::LAYOUT_INT8);
    req.set_normalize(true);
    req.set_quantize_queries(quantize);
    v1::CorpusInfo info;
    ASSERT_TRUE(admin_->CreateCorpus(&ctx, req, &info).ok());
    v1::AddDocumentsResponse added;
    ASSERT_TRUE(Add(name, synth, 0, 120, 50, &added).ok());
    ASSERT_TRUE(Add(name, synth, 120, 200, 80, &added).ok());
    const v1::CorpusInfo& c = added.corpus();
    EXPECT_EQ(c.layout(), v1::LAYOUT_INT8);
    EXPECT_EQ(c.storage_dtype(), v1::DTYPE_INT8);
    EXPECT_EQ(c.quantize_queries(), quantize);
    const int64_t tokens = synth.cu_seqlens.back();
    EXPECT_EQ(c.num_tokens(), tokens);
    EXPECT_EQ(c.bytes(), tokens * (32 + 4) + (120 + 1 + 80 + 1) * 8);

    const std::vector<float> q =
        GenerateQueryForDocument(synth, 150, 16, 0.1f, 3);
    v1::RerankRequest scan = Query(name, q, 32, 20);
    v1::RerankResponse resp;
    ASSERT_TRUE(Rerank(scan, &resp).ok());
    ExpectSameRanking(resp, Expected(name, scan));
    EXPECT_EQ(resp.results(0).id(), synth.ids[150]);
    v1::RerankRequest rerank = scan;
    for (int i = 0; i < 40; ++i) rerank.add_candidate_ids(synth.ids[i * 5]);
    rerank.set_top_k(15);
    ASSERT_TRUE(Rerank(rerank, &resp).ok());
    EXPECT_EQ(resp.results_size(), 15);
    ExpectSameRanking(resp, Expected(name, rerank));

    // A value past fp16's range is fine here: the corpus normalises the
    // query before it is rounded (or quantised).
    std::vector<float> big = q;
    big[3 * 32 + 5] = 1e6f;
    EXPECT_TRUE(Rerank(Query(name, big, 32, 5), &resp).ok());
  }
  // An unnormalised int8 corpus that rounds queries to fp16 refuses a value
  // past fp16's range, by row and column.
  {
    grpc::ClientContext ctx;
    v1::CreateCorpusRequest req;
    req.set_name("raw");
    req.set_dim(32);
    req.set_layout(v1::LAYOUT_INT8);
    v1::CorpusInfo info;
    ASSERT_TRUE(admin_->CreateCorpus(&ctx, req, &info).ok());
    v1::AddDocumentsResponse added;
    ASSERT_TRUE(Add("raw", synth, 0, 10, 10, &added).ok());
  }
  std::vector<float> big(2 * 32, 0.5f);
  big[32 + 5] = 1e6f;
  v1::RerankResponse resp;
  grpc::Status st = Rerank(Query("raw", big, 32, 5), &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(),
              HasSubstr("query.data row 1 column 5 is 1e+06, outside the "
                        "float16 range"));
  big[32 + 5] = 65504.f;  // the largest float16
  EXPECT_TRUE(Rerank(Query("raw", big, 32, 5), &resp).ok());
  // DTYPE_INT8 is a storage dtype, never a tensor's.
  v1::RerankRequest int8_query = Query("raw", big, 32, 5);
  int8_query.mutable_query()->set_dtype(v1::DTYPE_INT8);
  st = Rerank(int8_query, &resp);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(st.error_message(), HasSubstr("query.dtype is DTYPE_INT8"));
  {
    grpc::ClientContext ctx;
    v1::AddDocumentsResponse added;
    auto writer = admin_->AddDocuments(&ctx, &added);
    v1::AddDocumentsRequest m;
    m.set_corpus("raw");
    m.add_ids("x");
    m.add_token_counts(1);
    m.mutable_tokens()->set_dtype(v1::DTYPE_INT8);
    m.mutable_tokens()->add_shape(1);
    m.mutable_tokens()->add_shape(32);
    m.mutable_tokens()->set_data(std::string(32, '\1'));
    writer->Write(m);
    writer->WritesDone();
    st = writer->Finish();
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(st.error_message(), HasSubstr("tokens.dtype is DTYPE_INT8"));
  }
}

TEST_F(ServerTest, BadInputsGetTheirCodesAndTheServerKeepsServing) {
  ASSERT_TRUE(CreateCorpus("c", 8).ok());
  SyntheticCorpusOptions so;
  so.num_docs = 10;
  so.dim = 8;
  so.min_tokens = 2;
  so.max_tokens = 4;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(so);
  v1::AddDocumentsResponse added;
  ASSERT_TRUE(Add("c", synth, 0, 10, 10, &added).ok());
  const v1::RerankRequest good =
      Query("c", std::vector<float>(2 * 8, 0.5f), 8, 5);

  struct Case {
    const char* name;
    std::function<void(v1::RerankRequest&)> mutate;
    grpc::StatusCode code;
    const char* field;
  };
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const std::vector<Case> cases = {
      {"wrong byte length",
       [](auto& r) { r.mutable_query()->mutable_data()->append("x"); },
       grpc::StatusCode::INVALID_ARGUMENT, "query.data"},
      {"d mismatch", [](auto& r) { r.mutable_query()->set_shape(1, 16); },
       grpc::StatusCode::INVALID_ARGUMENT, "query.shape[1]"},
      {"unknown dtype",
       [](auto& r) { r.mutable_query()->set_dtype(static_cast<v1::DType>(9)); },
       grpc::StatusCode::INVALID_ARGUMENT, "query.dtype"},
      {"empty query",
       [](auto& r) {
         r.mutable_query()->set_shape(0, 0);
         r.mutable_query()->clear_data();
       },
       grpc::StatusCode::INVALID_ARGUMENT, "query.shape[0]"},
      {"NaN value",
       [nan](auto& r) {
         std::memcpy(r.mutable_query()->mutable_data()->data(), &nan, 4);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "query.data"},
      {"Lq over the limit",
       [](auto& r) {
         const std::vector<float> big(65 * 8, 0.1f);
         r.mutable_query()->set_shape(0, 65);
         r.mutable_query()->set_data(big.data(), big.size() * 4);
       },
       grpc::StatusCode::INVALID_ARGUMENT, "query.shape[0] is 65"},
      {"top_k over the limit", [](auto& r) { r.set_top_k(201); },
       grpc::StatusCode::INVALID_ARGUMENT, "top_k is 201"},
      {"too many candidates",
       [](auto& r) {
         for (int i = 0; i < 51; ++i) r.add_candidate_ids("doc-1");
       },
       grpc::StatusCode::INVALID_ARGUMENT, "candidate_ids has 51"},
      {"unknown corpus", [](auto& r) { r.set_corpus("nope"); },
       grpc::StatusCode::NOT_FOUND, "corpus"},
      {"unknown id", [](auto& r) { r.add_candidate_ids("missing-id"); },
       grpc::StatusCode::NOT_FOUND, "candidate_ids[0]"},
  };
  for (const Case& c : cases) {
    v1::RerankRequest req = good;
    c.mutate(req);
    v1::RerankResponse resp;
    const grpc::Status s = Rerank(req, &resp);
    EXPECT_EQ(s.error_code(), c.code) << c.name << ": " << s.error_message();
    EXPECT_THAT(s.error_message(), HasSubstr(c.field)) << c.name;
    // Still serving after every bad request.
    ASSERT_TRUE(Rerank(good, &resp).ok()) << "after " << c.name;
    EXPECT_EQ(resp.results_size(), 5);
  }

  // Duplicate id on add: ALREADY_EXISTS, and the corpus is unchanged.
  EXPECT_EQ(Add("c", synth, 3, 4, 1, &added).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  // Repeated inside one stream: INVALID_ARGUMENT, nothing of it added.
  SyntheticCorpus twice = synth;
  twice.ids[1] = twice.ids[0] = "fresh";
  grpc::Status s = Add("c", twice, 0, 2, 1, &added);
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("appears twice"));
  // Bad dim in a create.
  EXPECT_EQ(CreateCorpus("bad", 0).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_EQ(CreateCorpus("c", 8).error_code(),
            grpc::StatusCode::ALREADY_EXISTS);
  grpc::ClientContext ctx;
  v1::GetCorpusRequest get;
  get.set_name("c");
  v1::CorpusInfo info;
  ASSERT_TRUE(admin_->GetCorpus(&ctx, get, &info).ok());
  EXPECT_EQ(info.num_documents(), 10);
  EXPECT_EQ(info.num_segments(), 1);
}

TEST_F(ServerTest, MessageOverTheSizeLimitIsRefusedByTransport) {
  ASSERT_TRUE(CreateCorpus("c", 8).ok());
  v1::RerankRequest req = Query("c", std::vector<float>(8, 1.f), 8, 1);
  req.set_request_id(std::string(65 << 20, 'x'));  // over 64 MiB
  v1::RerankResponse resp;
  EXPECT_EQ(Rerank(req, &resp).error_code(),
            grpc::StatusCode::RESOURCE_EXHAUSTED);
}

TEST_F(ServerTest, BatchAndStreamAnswerEveryQuery) {
  SyntheticCorpusOptions so;
  so.num_docs = 80;
  so.dim = 32;
  so.max_tokens = 50;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(so);
  ASSERT_TRUE(CreateCorpus("s", 32).ok());
  v1::AddDocumentsResponse added;
  ASSERT_TRUE(Add("s", synth, 0, 80, 80, &added).ok());

  v1::RerankBatchRequest batch;
  for (int i = 0; i < 4; ++i) {
    *batch.add_queries() =
        Query("s", GenerateQueryForDocument(synth, i * 10, 8, 0.05f, i), 32, 3);
    batch.mutable_queries(i)->set_request_id(absl::StrCat("q", i));
  }
  {
    grpc::ClientContext ctx;
    v1::RerankBatchResponse resp;
    ASSERT_TRUE(reranker_->RerankBatch(&ctx, batch, &resp).ok());
    ASSERT_EQ(resp.results_size(), 4);
    for (int i = 0; i < 4; ++i) {
      EXPECT_EQ(resp.results(i).request_id(), absl::StrCat("q", i));
      ExpectSameRanking(resp.results(i), Expected("s", batch.queries(i)));
    }
  }
  {
    // One bad query fails the whole batch, naming its index.
    v1::RerankBatchRequest bad = batch;
    bad.mutable_queries(2)->set_top_k(-5);
    grpc::ClientContext ctx;
    v1::RerankBatchResponse resp;
    const grpc::Status s = reranker_->RerankBatch(&ctx, bad, &resp);
    EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(s.error_message(), HasSubstr("queries[2].top_k"));
  }
  {
    // A stream with a bad request in the middle keeps going.
    grpc::ClientContext ctx;
    auto stream = reranker_->RerankStream(&ctx);
    for (int i = 0; i < 4; ++i) {
      v1::RerankRequest r = batch.queries(i);
      if (i == 1) r.set_corpus("nope");
      ASSERT_TRUE(stream->Write(r));
    }
    stream->WritesDone();
    std::map<std::string, v1::RerankResponse> got;
    v1::RerankResponse r;
    while (stream->Read(&r)) got[r.request_id()] = r;
    ASSERT_TRUE(stream->Finish().ok());
    ASSERT_EQ(got.size(), 4u);
    EXPECT_EQ(got["q1"].status_code(), grpc::StatusCode::NOT_FOUND);
    for (int i : {0, 2, 3}) {
      const auto& resp = got[absl::StrCat("q", i)];
      EXPECT_EQ(resp.status_code(), 0);
      ExpectSameRanking(resp, Expected("s", batch.queries(i)));
    }
  }
}

TEST_F(ServerTest, MetricsEndpointServesValidPrometheusText) {
  ASSERT_TRUE(CreateCorpus("m", 8).ok());
  v1::RerankResponse resp;
  Rerank(Query("m", std::vector<float>(8, 1.f), 8, 1), &resp);  // OK, empty
  Rerank(Query("nope", std::vector<float>(8, 1.f), 8, 1), &resp);
  auto text = ::maxsimd::testing::HttpGet(server_->metrics_port(), "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(::maxsimd::testing::CheckPrometheusText(*text), "");
  for (const char* name :
       {"maxsimd_build_info{", "maxsimd_requests_total{code=\"NOT_FOUND\"",
        "maxsimd_request_duration_seconds_bucket{", "maxsimd_corpus_documents{",
        "maxsimd_queue_depth ", "process_resident_memory_bytes ",
        "process_cpu_seconds_total ", "process_open_fds ",
        "process_start_time_seconds "}) {
    EXPECT_THAT(*text, HasSubstr(name));
  }
  bool ran = false;
  EXPECT_EQ(::maxsimd::testing::PromtoolCheck(*text, &ran), "");
  if (!ran) std::printf("promtool not installed; format checked in-process\n");
}

TEST_F(ServerTest, ShutdownTurnsHealthNotServingAndRefusesNewCalls) {
  server_->Shutdown();
  auto health = grpc::health::v1::Health::NewStub(channel_);
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  const grpc::Status s = health->Check(&ctx, req, &resp);
  EXPECT_FALSE(s.ok() &&
               resp.status() == grpc::health::v1::HealthCheckResponse::SERVING);
}

// The whole server's health asked over a new channel (a new connection):
// the status, or -1 when the call fails.
int HealthOnNewChannel(int port) {
  auto health = grpc::health::v1::Health::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  grpc::health::v1::HealthCheckRequest req;
  grpc::health::v1::HealthCheckResponse resp;
  if (!health->Check(&ctx, req, &resp).ok()) return -1;
  return resp.status();
}

// A scan of corpus "demo" (dim 8, top 3) over a new channel.
grpc::Status ScanOnNewChannel(int port, v1::RerankResponse* resp) {
  auto reranker = v1::Reranker::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", port), grpc::InsecureChannelCredentials()));
  const std::vector<float> query(2 * 8, 0.5f);
  v1::RerankRequest req;
  req.set_corpus("demo");
  req.set_top_k(3);
  req.mutable_query()->set_dtype(v1::DTYPE_FLOAT32);
  req.mutable_query()->add_shape(2);
  req.mutable_query()->add_shape(8);
  req.mutable_query()->set_data(query.data(), query.size() * sizeof(float));
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return reranker->Rerank(&ctx, req, resp);
}

// The gRPC port's connection limits: a socket that never starts its
// HTTP/2 handshake is closed after --grpc_handshake_timeout, and a
// connection without calls after --grpc_max_connection_idle.
TEST(ServerConnectionTest, IdleConnectionsAreClosed) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "";
  o.backend = BackendChoice::kCpu;
  o.cpu_threads = 1;
  o.grpc_handshake_timeout = absl::Milliseconds(300);
  o.grpc_max_connection_idle = absl::Milliseconds(300);
  auto server = MaxsimServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();

  // A raw socket that sends nothing: the server closes it.
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  ASSERT_GE(fd, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>((*server)->port()));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  timeval timeout{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &timeout, sizeof(timeout));
  const absl::Time opened = absl::Now();
  char byte;
  // The server may send its HTTP/2 settings first; read until it closes.
  ssize_t got = 1;
  while (got > 0) got = recv(fd, &byte, 1, 0);
  const absl::Duration open_for = absl::Now() - opened;
  close(fd);
  EXPECT_EQ(got, 0) << "recv timed out: the socket was still open after 10 s";
  EXPECT_LT(open_for, absl::Seconds(5));

  // A channel after one call goes back to IDLE once the server has closed
  // its connection.
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials());
  auto health = grpc::health::v1::Health::NewStub(channel);
  grpc::ClientContext ctx;
  grpc::health::v1::HealthCheckResponse resp;
  ASSERT_TRUE(health->Check(&ctx, {}, &resp).ok());
  const absl::Time give_up = absl::Now() + absl::Seconds(10);
  while (channel->GetState(false) == GRPC_CHANNEL_READY &&
         absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(20));
  }
  EXPECT_NE(channel->GetState(false), GRPC_CHANNEL_READY)
      << "the idle connection was still open after 10 s";
}

// Snapshots cut short by a crash (.partial-* under --files_dir) are
// removed at start; nothing else there is touched.
TEST(ServerFilesDirTest, UnfinishedSnapshotsAreRemovedAtStart) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("maxsimd-files-", getpid());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir / ".partial-demo-1-0" / "seg");
  std::filesystem::create_directories(dir / "nightly" / ".partial-demo-2-1");
  std::filesystem::create_directories(dir / "snap");
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "";
  o.backend = BackendChoice::kCpu;
  o.cpu_threads = 1;
  o.admin_limits.files_dir = dir.string();
  auto server = MaxsimServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  EXPECT_FALSE(std::filesystem::exists(dir / ".partial-demo-1-0"));
  EXPECT_FALSE(std::filesystem::exists(dir / "nightly" / ".partial-demo-2-1"));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "nightly"));
  EXPECT_TRUE(std::filesystem::is_directory(dir / "snap"));
  (*server)->Shutdown();
  std::filesystem::remove_all(dir);
}

// With a drain grace, Shutdown() turns health NOT_SERVING and then, for the
// grace, still accepts connections and answers calls (what a load balancer
// sends until its health check has seen NOT_SERVING); only then does the
// drain close the listener and refuse calls.
TEST(ServerDrainGraceTest, NewCallsAreAnsweredUntilTheGraceEnds) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "";
  o.backend = BackendChoice::kCpu;
  o.cpu_threads = 1;
  o.drain_grace = absl::Seconds(3);
  o.drain_timeout = absl::Seconds(5);
  DemoCorpus demo;
  demo.num_docs = 50;
  demo.dim = 8;
  o.demo_corpora = {demo};
  auto server = MaxsimServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int port = (*server)->port();
  ASSERT_EQ(HealthOnNewChannel(port),
            grpc::health::v1::HealthCheckResponse::SERVING);

  const absl::Time start = absl::Now();
  std::thread stop([&] { (*server)->Shutdown(); });
  int health = -1;
  for (int i = 0; i < 200; ++i) {
    health = HealthOnNewChannel(port);
    if (health == grpc::health::v1::HealthCheckResponse::NOT_SERVING) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  EXPECT_EQ(health, grpc::health::v1::HealthCheckResponse::NOT_SERVING);
  EXPECT_FALSE((*server)->serving());
  v1::RerankResponse resp;
  const grpc::Status during = ScanOnNewChannel(port, &resp);
  const absl::Duration answered_at = absl::Now() - start;
  EXPECT_TRUE(during.ok()) << during.error_message() << " after "
                           << absl::FormatDuration(answered_at);
  EXPECT_EQ(resp.results_size(), 3);
  stop.join();
  const absl::Duration took = absl::Now() - start;
  EXPECT_GE(took, o.drain_grace);
  EXPECT_LT(took, o.drain_grace + o.drain_timeout);

  // After the grace the listener is closed: calls are refused.
  EXPECT_EQ(HealthOnNewChannel(port), -1);
  EXPECT_EQ(ScanOnNewChannel(port, &resp).error_code(),
            grpc::StatusCode::UNAVAILABLE);
}

// The value of the first sample line of /metrics that starts with `prefix`,
// or NaN when there is none.
double MetricValue(int port, const std::string& prefix) {
  auto text = ::maxsimd::testing::HttpGet(port, "/metrics");
  if (!text.ok()) return std::numeric_limits<double>::quiet_NaN();
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    if (absl::StartsWith(line, prefix)) {
      return std::strtod(std::string(line.substr(prefix.size())).c_str(),
                         nullptr);
    }
  }
  return std::numeric_limits<double>::quiet_NaN();
}

// Polls /metrics until the sample reaches `want` (real-time guard of 30 s;
// polling only synchronises with the server, it times nothing).
bool AwaitMetric(int port, const std::string& prefix, double want) {
  const absl::Time give_up = absl::Now() + absl::Seconds(30);
  while (absl::Now() < give_up) {
    if (MetricValue(port, prefix) == want) return true;
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// A client that cancels while its query waits for the batching window gets
// CANCELLED, and the server withdraws the query from the queue at once
// instead of holding it until the window (an hour here) closes.
TEST(ServerCancelTest, CancelledCallLeavesTheQueueAtOnce) {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "127.0.0.1:0";
  o.backend = BackendChoice::kCpu;
  o.cpu_threads = 1;
  o.scheduler.max_queue_delay = absl::Hours(1);
  o.drain_timeout = absl::Seconds(5);
  auto server = MaxsimServer::Start(o);
  ASSERT_TRUE(server.ok()) << server.status();
  const int metrics = (*server)->metrics_port();
  CorpusConfig config;
  config.name = "q";
  config.dim = 4;
  ASSERT_TRUE((*server)->corpora()->Create(config).ok());
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", (*server)->port()),
                          grpc::InsecureChannelCredentials());
  auto stub = v1::Reranker::NewStub(channel);
  v1::RerankRequest req;
  req.set_corpus("q");
  req.set_top_k(1);
  const std::vector<float> q(4, 1.f);
  req.mutable_query()->set_dtype(v1::DTYPE_FLOAT32);
  req.mutable_query()->add_shape(1);
  req.mutable_query()->add_shape(4);
  req.mutable_query()->set_data(q.data(), q.size() * sizeof(float));

  grpc::ClientContext ctx;
  v1::RerankResponse resp;
  absl::Notification done;
  grpc::Status status;
  stub->async()->Rerank(&ctx, &req, &resp, [&](grpc::Status s) {
    status = std::move(s);
    done.Notify();
  });
  ASSERT_TRUE(AwaitMetric(metrics, "maxsimd_queue_depth ", 1));
  ctx.TryCancel();
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(30)));
  EXPECT_EQ(status.error_code(), grpc::StatusCode::CANCELLED);
  EXPECT_TRUE(AwaitMetric(metrics, "maxsimd_queue_depth ", 0));
  EXPECT_TRUE(
      AwaitMetric(metrics, "maxsimd_rejected_total{reason=\"cancelled\"} ", 1));
  EXPECT_EQ(MetricValue(metrics, "maxsimd_corpus_queue_depth{corpus=\"q\"} "),
            0);
}

// A LAYOUT_PLAID corpus over the wire: documents compressed at append,
// queries without candidates answered through PLAID candidate generation
// (the exact ranking of PlaidCandidates' documents), or exhaustively when
// asked; the plaid fields refused by name where they do not apply.
TEST_F(ServerTest, PlaidCorpusAnswersThroughCandidateGenerationOrAScan) {
  {
    grpc::ClientContext ctx;
    v1::CreateCorpusRequest req;
    req.set_name("p");
    req.set_dim(32);
    req.set_layout(v1::LAYOUT_PLAID);
    req.set_normalize(true);
    v1::CorpusInfo info;
    ASSERT_TRUE(admin_->CreateCorpus(&ctx, req, &info).ok());
  }
  ASSERT_TRUE(CreateCorpus("dense", 32).ok());
  SyntheticCorpusOptions so;
  so.num_docs = 400;
  so.dim = 32;
  so.min_tokens = 4;
  so.max_tokens = 16;
  so.num_clusters = 32;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(so);
  v1::AddDocumentsResponse added;
  ASSERT_TRUE(Add("p", synth, 0, 400, 100, &added).ok());
  EXPECT_EQ(added.corpus().plaid_nbits(), 2);
  EXPECT_GT(added.corpus().plaid_centroids(), 0);
  EXPECT_EQ(added.corpus().bytes(),
            synth.cu_seqlens.back() * (8 + 4 + 4) + 401 * 8);
  auto snap = server_->corpora()->Get("p").value()->Snapshot();
  for (int q = 0; q < 6; ++q) {
    const std::vector<float> tokens =
        GenerateQueryForDocument(synth, q * 50, 6, 0.2f, q);
    v1::RerankRequest req = Query("p", tokens, 32, 5);
    v1::RerankResponse resp;
    ASSERT_TRUE(Rerank(req, &resp).ok());
    // The server's candidates, ranked by the oracle.
    SearchBatch batch;
    batch.dim = 32;
    batch.refs = snap->SegmentRefs();
    batch.AddQuery(tokens, 5);
    PlaidSearchParams params = DefaultPlaidSearchParams(5);
    params.n_full_scores = 50;  // --max_candidates bounds it
    batch.candidates = PlaidCandidates(*snap, tokens.data(), 6, params);
    batch.cand_offsets = {0, static_cast<int64_t>(batch.candidates.size())};
    std::vector<std::pair<std::string, float>> want;
    const auto ranked = ReferenceSearch(batch.Params());
    for (const ScoredDoc& d : ranked[0]) {
      want.emplace_back(snap->IdOf(d.index), d.score);
    }
    ExpectSameRanking(resp, want);
    // Exhaustive: the scan, and its best document is the generated one's.
    req.mutable_plaid()->set_exhaustive(true);
    v1::RerankResponse scan;
    ASSERT_TRUE(Rerank(req, &scan).ok());
    ExpectSameRanking(scan, Expected("p", req));
    ASSERT_GT(scan.results_size(), 0);
    ASSERT_GT(resp.results_size(), 0);
    EXPECT_EQ(scan.results(0).id(), resp.results(0).id());
  }
  const std::vector<float> tokens =
      GenerateQueryForDocument(synth, 1, 2, 0.2f, 9);
  auto refused = [&](v1::RerankRequest req, const std::string& what) {
    v1::RerankResponse resp;
    const grpc::Status st = Rerank(req, &resp);
    EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << what;
    EXPECT_THAT(st.error_message(), HasSubstr(what));
  };
  v1::RerankRequest dense = Query("dense", tokens, 32, 5);
  dense.mutable_plaid()->set_n_ivf_probe(2);
  refused(dense, "plaid is set; corpus \"dense\" is not a LAYOUT_PLAID");
  v1::RerankRequest with_ids = Query("p", tokens, 32, 5);
  with_ids.add_candidate_ids(synth.ids[0]);
  with_ids.mutable_plaid()->set_n_ivf_probe(2);
  refused(with_ids, "plaid is set with candidate_ids");
  v1::RerankRequest probe = Query("p", tokens, 32, 5);
  probe.mutable_plaid()->set_n_ivf_probe(1025);
  refused(probe, "plaid.n_ivf_probe is 1025; must be in [1, 1024]");
  v1::RerankRequest full = Query("p", tokens, 32, 5);
  full.mutable_plaid()->set_n_full_scores(-1);
  refused(full, "plaid.n_full_scores is -1");
}

// Admin.SetLogLevel changes spdlog's level at once (a request's debug line
// appears only after it), refuses an unknown level by name, and every line
// written for a call carries the call's x-request-id, which comes back in
// the trailing metadata.
TEST_F(ServerTest, SetLogLevelTakesEffectAndRequestIdsTagTheLines) {
  const spdlog::level::level_enum level_before = spdlog::get_level();
  const std::shared_ptr<spdlog::logger> logger_before =
      spdlog::default_logger();
  std::ostringstream captured;
  {
    auto logger = std::make_shared<spdlog::logger>(
        "maxsimd", std::make_shared<spdlog::sinks::ostream_sink_mt>(captured));
    logger->set_formatter(MakeLogFormatter(LogFormat::kJson));
    spdlog::set_default_logger(logger);
    spdlog::set_level(spdlog::level::info);
  }
  // The JSON lines whose request_id is `id`, as (level, message).
  auto lines_of = [&](const std::string& id) {
    std::vector<std::pair<std::string, std::string>> out;
    for (absl::string_view line :
         absl::StrSplit(captured.str(), '\n', absl::SkipEmpty())) {
      google::protobuf::Struct s;
      EXPECT_TRUE(
          google::protobuf::util::JsonStringToMessage(std::string(line), &s)
              .ok())
          << line;
      auto it = s.fields().find("request_id");
      if (it != s.fields().end() && it->second.string_value() == id) {
        out.emplace_back(s.fields().at("level").string_value(),
                         s.fields().at("message").string_value());
      }
    }
    return out;
  };
  auto set_level = [&](const std::string& level, const std::string& id,
                       v1::SetLogLevelResponse* response) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-request-id", id);
    v1::SetLogLevelRequest request;
    request.set_level(level);
    return admin_->SetLogLevel(&ctx, request, response);
  };
  // A Rerank with `id`; returns the id echoed in the trailing metadata.
  auto rerank = [&](const std::string& corpus, const std::string& id,
                    grpc::StatusCode want) {
    grpc::ClientContext ctx;
    ctx.AddMetadata("x-request-id", id);
    v1::RerankResponse response;
    const std::vector<float> q(4 * 16, 0.25f);
    EXPECT_EQ(reranker_->Rerank(&ctx, Query(corpus, q, 16, 3), &response)
                  .error_code(),
              want)
        << id;
    const auto& trailing = ctx.GetServerTrailingMetadata();
    auto it = trailing.find("x-request-id");
    return it == trailing.end()
               ? std::string("<absent>")
               : std::string(it->second.data(), it->second.size());
  };

  SyntheticCorpusOptions so;
  so.num_docs = 20;
  so.dim = 16;
  const SyntheticCorpus synth = GenerateSyntheticCorpus(so);
  ASSERT_TRUE(CreateCorpus("logs", 16).ok());
  v1::AddDocumentsResponse added;
  ASSERT_TRUE(Add("logs", synth, 0, 20, 20, &added).ok());

  v1::SetLogLevelResponse response;
  const grpc::Status bad = set_level("loud", "set-bad", &response);
  EXPECT_EQ(bad.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(bad.error_message(),
              AllOf(HasSubstr("level is \"loud\""),
                    HasSubstr("trace, debug, info, warn, error, critical or "
                              "off")));
  EXPECT_EQ(spdlog::get_level(), spdlog::level::info);

  // At info, a successful call writes nothing; a failed one a line with
  // its id.
  EXPECT_EQ(rerank("logs", "ok-at-info", grpc::StatusCode::OK), "ok-at-info");
  EXPECT_EQ(rerank("nope", "missing-corpus", grpc::StatusCode::NOT_FOUND),
            "missing-corpus");
  EXPECT_TRUE(lines_of("ok-at-info").empty());
  ASSERT_EQ(lines_of("missing-corpus").size(), 1u) << captured.str();
  EXPECT_EQ(lines_of("missing-corpus")[0].first, "info");
  EXPECT_THAT(lines_of("missing-corpus")[0].second,
              HasSubstr("Rerank NOT_FOUND"));
  ASSERT_EQ(lines_of("set-bad").size(), 1u);
  EXPECT_THAT(lines_of("set-bad")[0].second,
              HasSubstr("SetLogLevel INVALID_ARGUMENT"));

  ASSERT_TRUE(set_level("debug", "set-debug", &response).ok());
  EXPECT_EQ(response.previous_level(), "info");
  EXPECT_EQ(response.level(), "debug");
  EXPECT_EQ(spdlog::get_level(), spdlog::level::debug);
  {
    grpc::ClientContext ctx;
    v1::GetLogLevelResponse got;
    ASSERT_TRUE(admin_->GetLogLevel(&ctx, v1::GetLogLevelRequest(), &got).ok());
    EXPECT_EQ(got.level(), "debug");
  }
  EXPECT_EQ(rerank("logs", "ok-at-debug", grpc::StatusCode::OK), "ok-at-debug");
  const auto debug_lines = lines_of("ok-at-debug");
  ASSERT_EQ(debug_lines.size(), 1u) << captured.str();
  EXPECT_EQ(debug_lines[0].first, "debug");
  EXPECT_THAT(debug_lines[0].second, HasSubstr("Rerank OK"));
  EXPECT_TRUE(lines_of("ok-at-info").empty());

  // "warning" is spdlog's spelling of warn.
  ASSERT_TRUE(set_level("warning", "set-warn", &response).ok());
  EXPECT_EQ(response.previous_level(), "debug");
  EXPECT_EQ(response.level(), "warn");
  EXPECT_EQ(spdlog::get_level(), spdlog::level::warn);

  spdlog::set_default_logger(logger_before);
  spdlog::set_level(level_before);
}

}  // namespace
}  // namespace maxsimd
