// Every kind of bad input the API takes, sent to a real server (CPU
// backend, loopback gRPC) whose limits are small so that each is cheap to
// exceed. Each table row is one input: the RPC, the input, the status code
// it must get and the substrings its message must hold (the field, and the
// limit where there is one). After every row the server still answers good
// queries with the reference ranking, and no corpus, document, alias, file
// under --files_dir or the log level has changed: a refused request changes
// nothing, and a refused AddDocuments stream adds nothing of its earlier,
// good messages.
//
// With MAXSIMD_BAD_INPUT_TABLE=FILE, the rows tried are written to FILE as
// a Markdown table (RPC, bad input, status code, message excerpt). Run the
// binary directly for the whole table: ctest runs each test in a process of
// its own.
#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/client_unary_call.h"
#include "grpcpp/impl/rpc_method.h"
#include "gtest/gtest.h"
#include "index/npy.h"
#include "index/registry.h"
#include "index/synthetic.h"
#include "kernels/base/half.h"
#include "kernels/maxsim_reference.h"
#include "maxsimd/v1/admin.grpc.pb.h"
#include "maxsimd/v1/reranker.grpc.pb.h"
#include "server/server.h"
#include "tests/support/temp_dir.h"

namespace maxsimd {
namespace {

using ::testing::HasSubstr;

// The server's limits in this test.
constexpr int kQueryTokensLimit = 8;
constexpr int kCandidatesLimit = 16;
constexpr int kTopKLimit = 20;
constexpr int kBatchLimit = 4;
constexpr int kMessageLimit = 256 << 10;
constexpr int kDimLimit = 64;
constexpr int kDocTokensLimit = 16;
constexpr int kStreamBytesLimit = 32 << 10;
constexpr int kWriteStreamsLimit = 3;
constexpr int kCorporaLimit = 2;  // "c" and "p"
constexpr int kWriteBytesLimit = 40 << 10;
// A message that no protobuf parser accepts: field 1 as a length-delimited
// value that claims 127 bytes and has 2.
const char kGarbage[] = "\x0a\x7f\x01\x02";

// The corpora every test starts with: "c" (dense, dim 8; doc-39 deleted;
// alias "prod") and "p" (PLAID, dim 16).
constexpr int kDim = 8;
constexpr int kDocs = 40;
constexpr int kPlaidDim = 16;
constexpr int kPlaidDocs = 120;

std::string CodeName(grpc::StatusCode code) {
  return absl::StatusCodeToString(static_cast<absl::StatusCode>(code));
}

// One row of the table, as it ran.
struct Row {
  std::string rpc;
  std::string input;
  grpc::StatusCode code;
  std::string message;
};

std::vector<Row>& Rows() {
  static auto* rows = new std::vector<Row>();
  return *rows;
}

// A row to run: `call` sends the input and returns the status it got.
struct Case {
  std::string rpc;
  std::string input;
  grpc::StatusCode code;
  std::vector<std::string> want;  // substrings of the message
  std::function<grpc::Status()> call;
};

// A change to a good query: the input of one row per query RPC. `want`
// holds substrings of Rerank's message; RerankBatch's and RerankStream's
// are the same, RerankBatch's with the query's index in front.
struct QueryCase {
  std::string input;
  grpc::StatusCode code;
  std::vector<std::string> want;
  std::function<void(v1::RerankRequest*)> mutate;
};

v1::Tensor Fp32Tensor(const std::vector<float>& values, int64_t rows,
                      int64_t cols) {
  v1::Tensor t;
  t.set_dtype(v1::DTYPE_FLOAT32);
  t.add_shape(rows);
  t.add_shape(cols);
  t.set_data(values.data(), values.size() * sizeof(float));
  return t;
}

void SetFloat(v1::Tensor* t, int64_t index, float value) {
  std::memcpy(t->mutable_data()->data() + index * sizeof(float), &value,
              sizeof(float));
}

class BadInputTest : public ::testing::Test {
 protected:
  static void TearDownTestSuite() {
    const char* path = std::getenv("MAXSIMD_BAD_INPUT_TABLE");
    if (path == nullptr || *path == '\0') return;
    std::ofstream out(path, std::ios::trunc);
    out << "| RPC | bad input | status code | message excerpt |\n"
        << "|---|---|---|---|\n";
    for (const Row& row : Rows()) {
      std::string excerpt = ShortenRuns(row.message);
      if (excerpt.size() > 240) excerpt = excerpt.substr(0, 240) + "...";
      out << "| " << Cell(row.rpc) << " | " << Cell(row.input) << " | `"
          << CodeName(row.code) << "` | " << Cell(excerpt) << " |\n";
    }
  }

  // `text` with each run of more than 16 equal characters (an oversized
  // input, quoted) written as its first four and the run's length.
  static std::string ShortenRuns(const std::string& text) {
    std::string out;
    for (size_t i = 0, j = 0; i < text.size(); i = j) {
      while (j < text.size() && text[j] == text[i]) ++j;
      if (j - i > 16) {
        absl::StrAppend(&out, text.substr(i, 4), "...(", j - i, " bytes)");
      } else {
        out.append(text, i, j - i);
      }
    }
    return out;
  }

  // Markdown table cell text.
  static std::string Cell(const std::string& text) {
    return absl::StrReplaceAll(text, {{"|", "\\|"}, {"\n", " "}});
  }

  void SetUp() override {
    ASSERT_FALSE(files_.path().empty());
    std::filesystem::create_directories(files_.path() + "/existing");
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.metrics_listen = "";
    o.backend = BackendChoice::kCpu;
    o.cpu_threads = 2;
    o.compaction_interval = absl::ZeroDuration();
    o.drain_timeout = absl::Seconds(5);
    o.max_message_bytes = kMessageLimit;
    o.request_limits.max_query_tokens = kQueryTokensLimit;
    o.request_limits.max_candidates = kCandidatesLimit;
    o.request_limits.max_top_k = kTopKLimit;
    o.request_limits.max_batch_queries = kBatchLimit;
    o.corpus_limits.max_dim = kDimLimit;
    o.corpus_limits.max_doc_tokens = kDocTokensLimit;
    o.corpus_limits.max_corpora = kCorporaLimit;
    o.admin_limits.max_stream_bytes = kStreamBytesLimit;
    o.admin_limits.max_write_streams = kWriteStreamsLimit;
    o.admin_limits.max_write_bytes = kWriteBytesLimit;
    // Long enough that the cases holding streams open are never ended by
    // it, on a loaded machine or under sanitizers.
    o.admin_limits.write_idle_timeout = absl::Seconds(4);
    o.admin_limits.files_dir = files_.path();
    auto server = MaxsimServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    channel_ = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                                   grpc::InsecureChannelCredentials());
    reranker_ = v1::Reranker::NewStub(channel_);
    admin_ = v1::Admin::NewStub(channel_);

    SyntheticCorpusOptions so;
    so.num_docs = kDocs;
    so.dim = kDim;
    so.min_tokens = 1;
    so.max_tokens = 6;
    so.seed = 5;
    synth_ = GenerateSyntheticCorpus(so);
    so.num_docs = kPlaidDocs;
    so.dim = kPlaidDim;
    so.min_tokens = 4;
    so.max_tokens = 8;
    so.num_clusters = 16;
    so.seed = 6;
    so.id_prefix = "p-";
    plaid_synth_ = GenerateSyntheticCorpus(so);

    v1::CreateCorpusRequest create;
    create.set_name("c");
    create.set_dim(kDim);
    ASSERT_TRUE(Call(&v1::Admin::Stub::CreateCorpus, create).ok());
    ASSERT_TRUE(AddStream({Docs("c", synth_, 0, kDocs)}).ok());
    create.set_name("p");
    create.set_dim(kPlaidDim);
    create.set_layout(v1::LAYOUT_PLAID);
    create.set_normalize(true);
    create.set_plaid_centroids(16);
    ASSERT_TRUE(Call(&v1::Admin::Stub::CreateCorpus, create).ok());
    ASSERT_TRUE(AddStream({Docs("p", plaid_synth_, 0, kPlaidDocs)}).ok());
    v1::DeleteDocumentsRequest del;
    del.set_corpus("c");
    del.add_ids("doc-39");
    ASSERT_TRUE(Call(&v1::Admin::Stub::DeleteDocuments, del).ok());
    v1::SetAliasRequest alias;
    alias.set_alias("prod");
    alias.set_corpus("c");
    ASSERT_TRUE(Call(&v1::Admin::Stub::SetAlias, alias).ok());
    v1::SnapshotCorpusRequest snap;
    snap.set_name("c");
    snap.set_path("snap");
    ASSERT_TRUE(Call(&v1::Admin::Stub::SnapshotCorpus, snap).ok());
    WriteFiles();

    // What must not change.
    baseline_ = State();
    good_scan_ = GoodQuery("c");
    good_rerank_ = GoodQuery("prod");
    for (int i = 0; i < 10; ++i) {
      good_rerank_.add_candidate_ids(synth_.ids[i * 3]);
    }
    want_scan_ = Reference(good_scan_);
    want_rerank_ = Reference(good_rerank_);
    ASSERT_EQ(want_scan_.size(), 5u);
    good_plaid_ = GoodQuery("p");
    v1::RerankResponse plaid;
    ASSERT_TRUE(Rerank(good_plaid_, &plaid).ok());
    ASSERT_EQ(plaid.results_size(), 5);
    for (const auto& r : plaid.results()) {
      want_plaid_.emplace_back(r.id(), r.score());
    }
    ExpectServesAndUnchanged();
  }

  void TearDown() override {
    if (server_ != nullptr) server_->Shutdown();
  }

  // ---- Requests.

  // A good query of `rows` tokens for corpus "c" (or an alias of it), or
  // "p": tokens of one of its documents plus noise; top_k 5.
  v1::RerankRequest GoodQuery(const std::string& corpus, int rows = 4) const {
    const bool plaid = corpus == "p";
    const SyntheticCorpus& synth = plaid ? plaid_synth_ : synth_;
    v1::RerankRequest r;
    r.set_corpus(corpus);
    r.set_top_k(5);
    *r.mutable_query() = Fp32Tensor(
        GenerateQueryForDocument(synth, 7, rows, 0.1f, 11), rows, synth.dim);
    return r;
  }

  // One AddDocuments message with documents [begin, end) of `synth`.
  static v1::AddDocumentsRequest Docs(const std::string& corpus,
                                      const SyntheticCorpus& synth,
                                      int64_t begin, int64_t end) {
    v1::AddDocumentsRequest m;
    m.set_corpus(corpus);
    for (int64_t i = begin; i < end; ++i) {
      m.add_ids(synth.ids[i]);
      m.add_token_counts(
          static_cast<int32_t>(synth.cu_seqlens[i + 1] - synth.cu_seqlens[i]));
    }
    const int64_t r0 = synth.cu_seqlens[begin], r1 = synth.cu_seqlens[end];
    *m.mutable_tokens() =
        Fp32Tensor(std::vector<float>(synth.tokens.begin() + r0 * synth.dim,
                                      synth.tokens.begin() + r1 * synth.dim),
                   r1 - r0, synth.dim);
    return m;
  }

  // `count` new documents of `tokens` tokens each for corpus "c" (ids
  // new-0, new-1, ...), all values 0.5.
  static v1::AddDocumentsRequest NewDocs(int count, int tokens = 2,
                                         const std::string& corpus = "c") {
    v1::AddDocumentsRequest m;
    m.set_corpus(corpus);
    for (int i = 0; i < count; ++i) {
      m.add_ids(absl::StrCat("new-", i));
      m.add_token_counts(tokens);
    }
    *m.mutable_tokens() = Fp32Tensor(
        std::vector<float>(count * tokens * kDim, 0.5f), count * tokens, kDim);
    return m;
  }

  // ---- Calls.

  template <typename Req, typename Resp>
  grpc::Status Call(grpc::Status (v1::Admin::Stub::*method)(
                        grpc::ClientContext*, const Req&, Resp*),
                    const Req& request, Resp* response = nullptr) {
    grpc::ClientContext ctx;
    Resp ignored;
    return (admin_.get()->*method)(&ctx, request,
                                   response != nullptr ? response : &ignored);
  }

  grpc::Status Rerank(const v1::RerankRequest& request,
                      v1::RerankResponse* response) {
    grpc::ClientContext ctx;
    return reranker_->Rerank(&ctx, request, response);
  }

  grpc::Status RerankBatch(const v1::RerankBatchRequest& request) {
    grpc::ClientContext ctx;
    v1::RerankBatchResponse response;
    return reranker_->RerankBatch(&ctx, request, &response);
  }

  // Sends `request` and then a good query on one stream; returns the status
  // that `request`'s response carries. The good query must be answered with
  // the reference ranking on the same stream, and the stream must end OK.
  grpc::Status RerankStream(v1::RerankRequest request) {
    grpc::ClientContext ctx;
    auto stream = reranker_->RerankStream(&ctx);
    request.set_request_id("bad");
    v1::RerankRequest good = good_scan_;
    good.set_request_id("good");
    stream->Write(request);
    stream->Write(good);
    stream->WritesDone();
    std::map<std::string, v1::RerankResponse> got;
    v1::RerankResponse r;
    while (stream->Read(&r)) got[r.request_id()] = r;
    const grpc::Status finished = stream->Finish();
    if (!finished.ok()) return finished;  // the transport refused the call
    EXPECT_EQ(got.size(), 2u);
    EXPECT_EQ(got["good"].status_code(), 0) << got["good"].status_message();
    ExpectRanking(got["good"], want_scan_, "the stream's good query");
    return grpc::Status(static_cast<grpc::StatusCode>(got["bad"].status_code()),
                        got["bad"].status_message());
  }

  // ---- Raw calls: messages as bytes, so that a test can send ones that are
  // not valid protobuf.

  static grpc::ByteBuffer Bytes(const std::string& bytes) {
    grpc::Slice slice(bytes);
    return grpc::ByteBuffer(&slice, 1);
  }

  // A unary call of `method` ("/maxsimd.v1.Admin/CreateCorpus") with
  // `bytes` as its request.
  grpc::Status RawUnary(const std::string& method, const std::string& bytes) {
    grpc::ClientContext ctx;
    grpc::ByteBuffer response;
    return grpc::internal::BlockingUnaryCall<grpc::ByteBuffer,
                                             grpc::ByteBuffer>(
        channel_.get(),
        grpc::internal::RpcMethod(method.c_str(),
                                  grpc::internal::RpcMethod::NORMAL_RPC),
        &ctx, Bytes(bytes), &response);
  }

  // AddDocuments with `messages` as they are.
  grpc::Status RawAddStream(const std::vector<std::string>& messages) {
    grpc::ClientContext ctx;
    grpc::ByteBuffer response;
    const grpc::internal::RpcMethod method(
        "/maxsimd.v1.Admin/AddDocuments",
        grpc::internal::RpcMethod::CLIENT_STREAMING);
    std::unique_ptr<grpc::ClientWriter<grpc::ByteBuffer>> writer(
        grpc::internal::ClientWriterFactory<grpc::ByteBuffer>::Create(
            channel_.get(), method, &ctx, &response));
    for (const std::string& m : messages) {
      if (!writer->Write(Bytes(m))) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // Streams `messages` (ignoring a refused write: the server may end the
  // call at the first bad message) and returns the call's status.
  grpc::Status AddStream(const std::vector<v1::AddDocumentsRequest>& messages) {
    grpc::ClientContext ctx;
    v1::AddDocumentsResponse response;
    auto writer = admin_->AddDocuments(&ctx, &response);
    for (const auto& m : messages) {
      if (!writer->Write(m)) break;
    }
    writer->WritesDone();
    return writer->Finish();
  }

  // ---- Files under --files_dir.

  std::string FilePath(const std::string& name) const {
    return absl::StrCat(files_.path(), "/", name);
  }

  void WriteNpyFile(const std::string& name, const NpyArray& array) {
    ASSERT_TRUE(WriteNpy(FilePath(name), array).ok()) << name;
  }

  void WriteText(const std::string& name, const std::string& text) {
    std::ofstream out(FilePath(name), std::ios::binary | std::ios::trunc);
    out << text;
    ASSERT_TRUE(out.good()) << name;
  }

  // Three documents of 2, 1 and 3 tokens (dim 8) as good files, and bad
  // variants of each.
  void WriteFiles() {
    std::vector<float> tokens(6 * kDim, 0.25f);
    WriteNpyFile("tokens.npy", MakeNpyFloat32(tokens, {6, kDim}));
    WriteNpyFile("cu.npy", MakeNpyInt64({0, 2, 3, 6}, {4}));
    WriteText("ids.txt", "imp-0\nimp-1\nimp-2\n");
    WriteText("two_ids.txt", "imp-0\nimp-1\n");
    WriteText("old_ids.txt", "imp-0\ndoc-1\nimp-2\n");
    WriteNpyFile("cu_short.npy", MakeNpyInt64({0, 2, 5}, {3}));
    WriteNpyFile("cu_empty_doc.npy", MakeNpyInt64({0, 2, 2, 6}, {4}));
    WriteNpyFile("tokens_1d.npy", MakeNpyFloat32(tokens, {6 * kDim}));
    WriteNpyFile("tokens_dim16.npy",
                 MakeNpyFloat32(std::vector<float>(6 * 16, 0.25f), {6, 16}));
    std::vector<float> nan = tokens;
    nan[2 * kDim + 3] = std::numeric_limits<float>::quiet_NaN();
    WriteNpyFile("tokens_nan.npy", MakeNpyFloat32(nan, {6, kDim}));
    NpyArray int16 = MakeNpyInt64({0, 2, 3, 6}, {4});
    int16.descr = "<i2";  // a dtype the importers do not read
    int16.data.resize(8);
    WriteNpyFile("tokens_i2.npy", int16);
    WriteText("garbage.npy", "this is not an npy file at all");
    std::string truncated;
    {
      std::ifstream in(FilePath("tokens.npy"), std::ios::binary);
      truncated.assign(std::istreambuf_iterator<char>(in), {});
    }
    truncated.resize(truncated.size() - 10);
    WriteText("truncated.npy", truncated);
    // 2560 tokens of 16 stored bytes (40 KiB), past --max_add_stream_bytes
    // (32 KiB).
    const int big_docs = 160, big_tokens = 16;
    std::vector<int64_t> cu(big_docs + 1);
    std::string ids;
    for (int i = 0; i <= big_docs; ++i) cu[i] = int64_t{i} * big_tokens;
    for (int i = 0; i < big_docs; ++i) absl::StrAppend(&ids, "big-", i, "\n");
    WriteNpyFile(
        "big_tokens.npy",
        MakeNpyFloat32(std::vector<float>(big_docs * big_tokens * kDim, 0.25f),
                       {big_docs * big_tokens, kDim}));
    WriteNpyFile("big_cu.npy", MakeNpyInt64(cu, {big_docs + 1}));
    WriteText("big_ids.txt", ids);
    // A PLAID index whose metadata.json is a directory.
    std::filesystem::create_directories(FilePath("dir_plaid/metadata.json"));
    WriteText("dir_plaid/centroids.npy", "");
    std::filesystem::create_directories(FilePath("bad_snap"));
    WriteText("bad_snap/MANIFEST", "not a manifest");
  }

  // Every path under --files_dir.
  std::set<std::string> Files() const {
    std::set<std::string> out;
    for (const auto& entry :
         std::filesystem::recursive_directory_iterator(files_.path())) {
      out.insert(entry.path().string());
    }
    return out;
  }

  // ---- What must not change.

  struct ServerState {
    std::string corpora;  // ListCorpora, serialised
    std::string aliases;  // ListAliases, serialised
    std::string log_level;
    std::set<std::string> files;
  };

  ServerState State() {
    ServerState s;
    v1::ListCorporaResponse corpora;
    EXPECT_TRUE(
        Call(&v1::Admin::Stub::ListCorpora, v1::ListCorporaRequest(), &corpora)
            .ok());
    s.corpora = corpora.DebugString();
    v1::ListAliasesResponse aliases;
    EXPECT_TRUE(
        Call(&v1::Admin::Stub::ListAliases, v1::ListAliasesRequest(), &aliases)
            .ok());
    s.aliases = aliases.DebugString();
    v1::GetLogLevelResponse level;
    EXPECT_TRUE(
        Call(&v1::Admin::Stub::GetLogLevel, v1::GetLogLevelRequest(), &level)
            .ok());
    s.log_level = level.level();
    s.files = Files();
    return s;
  }

  // The oracle's ranking of `request` against corpus "c" as it is now.
  std::vector<std::pair<std::string, float>> Reference(
      const v1::RerankRequest& request) {
    auto snap = server_->corpora()->Get("c").value()->Snapshot();
    std::vector<float> q(request.query().data().size() / sizeof(float));
    std::memcpy(q.data(), request.query().data().data(),
                request.query().data().size());
    SearchBatch batch;
    batch.dim = kDim;
    batch.refs = snap->SegmentRefs();
    batch.AddQuery(q, request.top_k());
    if (request.candidate_ids_size() > 0) {
      batch.cand_offsets = {0};
      for (const std::string& id : request.candidate_ids()) {
        batch.candidates.push_back(snap->Find(id).value());
      }
      batch.cand_offsets.push_back(
          static_cast<int64_t>(batch.candidates.size()));
    }
    const std::vector<std::vector<ScoredDoc>> ranked =
        ReferenceSearch(batch.Params());
    std::vector<std::pair<std::string, float>> out;
    for (const ScoredDoc& d : ranked[0]) {
      out.emplace_back(snap->IdOf(d.index), d.score);
    }
    return out;
  }

  static void ExpectRanking(
      const v1::RerankResponse& got,
      const std::vector<std::pair<std::string, float>>& want,
      const std::string& what) {
    ASSERT_EQ(got.results_size(), static_cast<int>(want.size())) << what;
    for (int i = 0; i < got.results_size(); ++i) {
      EXPECT_EQ(got.results(i).id(), want[i].first) << what << " rank " << i;
      EXPECT_NEAR(got.results(i).score(), want[i].second,
                  1e-4 * std::max(1.f, std::fabs(want[i].second)))
          << what << " rank " << i;
    }
  }

  // Good queries still get the reference ranking (a scan, a rerank through
  // the alias, PLAID candidate generation), and nothing changed.
  void ExpectServesAndUnchanged() {
    v1::RerankResponse resp;
    ASSERT_TRUE(Rerank(good_scan_, &resp).ok());
    ExpectRanking(resp, want_scan_, "scan of c");
    ASSERT_TRUE(Rerank(good_rerank_, &resp).ok());
    ExpectRanking(resp, want_rerank_, "rerank through prod");
    ASSERT_TRUE(Rerank(good_plaid_, &resp).ok());
    ExpectRanking(resp, want_plaid_, "PLAID query of p");
    const ServerState now = State();
    EXPECT_EQ(now.corpora, baseline_.corpora);
    EXPECT_EQ(now.aliases, baseline_.aliases);
    EXPECT_EQ(now.log_level, baseline_.log_level);
    EXPECT_EQ(now.files, baseline_.files);
  }

  // Runs each case, checks its code and message, records its row, then
  // checks that the server serves and nothing changed.
  void Run(const std::vector<Case>& cases) {
    for (const Case& c : cases) {
      SCOPED_TRACE(absl::StrCat(c.rpc, ": ", c.input));
      const grpc::Status got = c.call();
      EXPECT_EQ(CodeName(got.error_code()), CodeName(c.code))
          << got.error_message();
      for (const std::string& want : c.want) {
        EXPECT_THAT(got.error_message(), HasSubstr(want));
      }
      // Clear: short, whatever the size of the input it names.
      EXPECT_LE(got.error_message().size(), 1024u) << got.error_message();
      Rows().push_back({c.rpc, c.input, got.error_code(),
                        absl::StrReplaceAll(got.error_message(),
                                            {{files_.path(), "$FILES_DIR"}})});
      ExpectServesAndUnchanged();
    }
  }

  // The bad inputs of the three query RPCs, as changes to a good query of
  // corpus "c" (or "p" where the case sets it).
  std::vector<QueryCase> QueryCases() const;

  // One case per QueryCase for `rpc`: "Rerank", "RerankBatch" (the bad
  // query second of two) or "RerankStream".
  std::vector<Case> QueryRpcCases(const std::string& rpc);

  ::maxsimd::testing::TempDir files_{"maxsimd-bad-input-"};
  std::unique_ptr<MaxsimServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::Reranker::Stub> reranker_;
  std::unique_ptr<v1::Admin::Stub> admin_;
  SyntheticCorpus synth_;
  SyntheticCorpus plaid_synth_;
  ServerState baseline_;
  v1::RerankRequest good_scan_;
  v1::RerankRequest good_rerank_;
  v1::RerankRequest good_plaid_;
  std::vector<std::pair<std::string, float>> want_scan_;
  std::vector<std::pair<std::string, float>> want_rerank_;
  std::vector<std::pair<std::string, float>> want_plaid_;
};

constexpr grpc::StatusCode kInvalid = grpc::StatusCode::INVALID_ARGUMENT;
constexpr grpc::StatusCode kNotFound = grpc::StatusCode::NOT_FOUND;
constexpr grpc::StatusCode kExists = grpc::StatusCode::ALREADY_EXISTS;
constexpr grpc::StatusCode kExhausted = grpc::StatusCode::RESOURCE_EXHAUSTED;

std::vector<QueryCase> BadInputTest::QueryCases() const {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  const std::string plaid_query = GoodQuery("p").query().SerializeAsString();
  auto plaid = [plaid_query](v1::RerankRequest* r) {
    r->set_corpus("p");
    r->mutable_query()->ParseFromString(plaid_query);
  };
  return {
      {"unknown corpus",
       kNotFound,
       {"corpus: \"nope\" does not exist"},
       [](auto* r) { r->set_corpus("nope"); }},
      {"empty corpus name",
       kNotFound,
       {"corpus: \"\" does not exist"},
       [](auto* r) { r->clear_corpus(); }},
      {"corpus name of 100 KB",
       kNotFound,
       {"corpus: \"xxxx", "does not exist"},
       [](auto* r) { r->set_corpus(std::string(100 << 10, 'x')); }},
      {"no query tensor",
       kInvalid,
       {"query.dtype is 0", "DTYPE_FLOAT32, DTYPE_FLOAT16 or DTYPE_BFLOAT16"},
       [](auto* r) { r->clear_query(); }},
      {"empty query: shape [0, 8], no data",
       kInvalid,
       {"query.shape[0] is 0", "must be in [1, 8]"},
       [](auto* r) {
         r->mutable_query()->set_shape(0, 0);
         r->mutable_query()->clear_data();
       }},
      {"dtype value 9",
       kInvalid,
       {"query.dtype is 9", "DTYPE_FLOAT32, DTYPE_FLOAT16 or DTYPE_BFLOAT16"},
       [](auto* r) {
         r->mutable_query()->set_dtype(static_cast<v1::DType>(9));
       }},
      {"dtype DTYPE_UNSPECIFIED",
       kInvalid,
       {"query.dtype is 0"},
       [](auto* r) { r->mutable_query()->set_dtype(v1::DTYPE_UNSPECIFIED); }},
      {"dtype DTYPE_INT8 (a storage dtype)",
       kInvalid,
       {"query.dtype is DTYPE_INT8", "a storage dtype only"},
       [](auto* r) { r->mutable_query()->set_dtype(v1::DTYPE_INT8); }},
      {"dtype DTYPE_PLAID (a storage dtype)",
       kInvalid,
       {"query.dtype is DTYPE_PLAID", "a storage dtype only"},
       [](auto* r) { r->mutable_query()->set_dtype(v1::DTYPE_PLAID); }},
      {"shape 1-D [32]",
       kInvalid,
       {"query.shape has 1 dimensions", "[tokens, dim]"},
       [](auto* r) {
         r->mutable_query()->clear_shape();
         r->mutable_query()->add_shape(4 * kDim);
       }},
      {"shape 3-D [1, 4, 8]",
       kInvalid,
       {"query.shape has 3 dimensions", "[tokens, dim]"},
       [](auto* r) {
         r->mutable_query()->clear_shape();
         for (int d : {1, 4, kDim}) r->mutable_query()->add_shape(d);
       }},
      {"no shape",
       kInvalid,
       {"query.shape has 0 dimensions"},
       [](auto* r) { r->mutable_query()->clear_shape(); }},
      {"shape [4, 8] with one byte too many",
       kInvalid,
       {"query.data has 129 bytes", "needs 128"},
       [](auto* r) { r->mutable_query()->mutable_data()->append("x"); }},
      {"shape [4, 8] with 4 bytes too few",
       kInvalid,
       {"query.data has 124 bytes", "needs 128"},
       [](auto* r) { r->mutable_query()->mutable_data()->resize(124); }},
      {"DTYPE_FLOAT16 with fp32 bytes",
       kInvalid,
       {"query.data has 128 bytes", "needs 64"},
       [](auto* r) { r->mutable_query()->set_dtype(v1::DTYPE_FLOAT16); }},
      {"dim 16 against a corpus of dim 8",
       kInvalid,
       {"query.shape[1] is 16", "the corpus has dim 8"},
       [](auto* r) {
         r->mutable_query()->set_shape(0, 2);
         r->mutable_query()->set_shape(1, 16);
       }},
      {"dim 8 against the PLAID corpus of dim 16",
       kInvalid,
       {"query.shape[1] is 8", "the corpus has dim 16"},
       [](auto* r) { r->set_corpus("p"); }},
      {"shape [-1, 8]",
       kInvalid,
       {"query.shape[0] is -1", "must be in [1, 8]"},
       [](auto* r) { r->mutable_query()->set_shape(0, -1); }},
      {"shape [2^40, 8] with 128 bytes (no allocation of that size)",
       kInvalid,
       {"query.shape[0] is 1099511627776", "must be in [1, 8]"},
       [](auto* r) { r->mutable_query()->set_shape(0, int64_t{1} << 40); }},
      {"9 query tokens, over --max_query_tokens",
       kInvalid,
       {"query.shape[0] is 9", "must be in [1, 8]"},
       [](auto* r) {
         *r->mutable_query() =
             Fp32Tensor(std::vector<float>(9 * kDim, 0.1f), 9, kDim);
       }},
      {"NaN value",
       kInvalid,
       {"query.data row 0 column 0 is nan", "values must be finite"},
       [nan](auto* r) { SetFloat(r->mutable_query(), 0, nan); }},
      {"+Inf value",
       kInvalid,
       {"query.data row 2 column 3 is inf", "values must be finite"},
       [inf](auto* r) { SetFloat(r->mutable_query(), 2 * kDim + 3, inf); }},
      {"-Inf value (float16)",
       kInvalid,
       {"query.data row 1 column 0 is -inf", "values must be finite"},
       [](auto* r) {
         std::vector<uint16_t> half(4 * kDim, FloatToHalf(0.25f));
         half[kDim] = 0xFC00;  // -inf
         r->mutable_query()->set_dtype(v1::DTYPE_FLOAT16);
         r->mutable_query()->set_data(half.data(), half.size() * 2);
       }},
      {"top_k -1",
       kInvalid,
       {"top_k is -1", "must be in [1, 20]"},
       [](auto* r) { r->set_top_k(-1); }},
      {"top_k 21, over --max_top_k",
       kInvalid,
       {"top_k is 21", "must be in [1, 20]"},
       [](auto* r) { r->set_top_k(21); }},
      {"top_k 2^31-1",
       kInvalid,
       {"top_k is 2147483647", "must be in [1, 20]"},
       [](auto* r) { r->set_top_k(std::numeric_limits<int32_t>::max()); }},
      {"priority 101",
       kInvalid,
       {"priority is 101", "must be in [-100, 100]"},
       [](auto* r) { r->set_priority(101); }},
      {"priority -101",
       kInvalid,
       {"priority is -101", "must be in [-100, 100]"},
       [](auto* r) { r->set_priority(-101); }},
      {"17 candidate ids, over --max_candidates",
       kInvalid,
       {"candidate_ids has 17 ids", "the limit is 16"},
       [](auto* r) {
         for (int i = 0; i < 17; ++i) r->add_candidate_ids("doc-1");
       }},
      {"unknown candidate id",
       kNotFound,
       {"candidate_ids[1]: \"missing\" is not a document of corpus \"c\""},
       [](auto* r) {
         r->add_candidate_ids("doc-1");
         r->add_candidate_ids("missing");
       }},
      {"deleted candidate id",
       kNotFound,
       {"candidate_ids[0]: \"doc-39\" is not a document of corpus \"c\""},
       [](auto* r) { r->add_candidate_ids("doc-39"); }},
      {"empty candidate id",
       kNotFound,
       {"candidate_ids[0]: \"\" is not a document"},
       [](auto* r) { r->add_candidate_ids(""); }},
      {"unknown candidate id of 100 KB",
       kNotFound,
       {"candidate_ids[0]: \"yyyy", "is not a document of corpus \"c\""},
       [](auto* r) { r->add_candidate_ids(std::string(100 << 10, 'y')); }},
      {"duplicate candidate ids (accepted: ranked once)",
       grpc::StatusCode::OK,
       {},
       [](auto* r) {
         r->add_candidate_ids("doc-1");
         r->add_candidate_ids("doc-1");
       }},
      {"plaid.n_ivf_probe set on a dense corpus",
       kInvalid,
       {"plaid is set; corpus \"c\" is not a LAYOUT_PLAID corpus"},
       [](auto* r) { r->mutable_plaid()->set_n_ivf_probe(2); }},
      {"plaid.n_full_scores 1000000 on a dense corpus",
       kInvalid,
       {"plaid is set; corpus \"c\" is not a LAYOUT_PLAID corpus"},
       [](auto* r) { r->mutable_plaid()->set_n_full_scores(1000000); }},
      {"plaid.exhaustive on a dense corpus",
       kInvalid,
       {"plaid is set; corpus \"c\" is not a LAYOUT_PLAID corpus"},
       [](auto* r) { r->mutable_plaid()->set_exhaustive(true); }},
      {"PLAID corpus: plaid.n_ivf_probe -1",
       kInvalid,
       {"plaid.n_ivf_probe is -1", "must be in [1, 1024]"},
       [plaid](auto* r) {
         plaid(r);
         r->mutable_plaid()->set_n_ivf_probe(-1);
       }},
      {"PLAID corpus: plaid.n_ivf_probe 1025",
       kInvalid,
       {"plaid.n_ivf_probe is 1025", "must be in [1, 1024]"},
       [plaid](auto* r) {
         plaid(r);
         r->mutable_plaid()->set_n_ivf_probe(1025);
       }},
      {"PLAID corpus: plaid.n_full_scores -1",
       kInvalid,
       {"plaid.n_full_scores is -1", "must be in [1, 16]"},
       [plaid](auto* r) {
         plaid(r);
         r->mutable_plaid()->set_n_full_scores(-1);
       }},
      {"PLAID corpus: plaid.n_full_scores 17, over --max_candidates",
       kInvalid,
       {"plaid.n_full_scores is 17", "must be in [1, 16]", "--max_candidates"},
       [plaid](auto* r) {
         plaid(r);
         r->mutable_plaid()->set_n_full_scores(17);
       }},
      {"PLAID corpus: plaid.n_full_scores 70000, over 65536",
       kInvalid,
       {"plaid.n_full_scores is 70000", "must be in [1, 16]"},
       [plaid](auto* r) {
         plaid(r);
         r->mutable_plaid()->set_n_full_scores(70000);
       }},
      {"PLAID corpus: plaid set with candidate_ids",
       kInvalid,
       {"plaid is set with candidate_ids"},
       [plaid](auto* r) {
         plaid(r);
         r->add_candidate_ids("p-1");
         r->mutable_plaid()->set_n_ivf_probe(2);
       }},
  };
}

std::vector<Case> BadInputTest::QueryRpcCases(const std::string& rpc) {
  std::vector<Case> cases;
  for (QueryCase& q : QueryCases()) {
    v1::RerankRequest request = good_scan_;
    q.mutate(&request);
    Case c{rpc, q.input, q.code, q.want, nullptr};
    if (rpc == "Rerank") {
      c.call = [this, request] {
        v1::RerankResponse response;
        return Rerank(request, &response);
      };
    } else if (rpc == "RerankBatch") {
      if (q.code != grpc::StatusCode::OK) c.want.push_back("queries[1].");
      c.call = [this, request] {
        v1::RerankBatchRequest batch;
        *batch.add_queries() = good_scan_;
        *batch.add_queries() = request;
        return RerankBatch(batch);
      };
    } else {
      c.call = [this, request] { return RerankStream(request); };
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

// A request over --max_message_bytes (256 KiB here): gRPC refuses it
// before the server sees it.
const std::string kOverMessageLimit = "request_id of 300 KB";
const std::vector<std::string> kMessageLimitWant = {
    "Received message larger than max", "262144"};

TEST_F(BadInputTest, Rerank) {
  std::vector<Case> cases = QueryRpcCases("Rerank");
  v1::RerankRequest big = good_scan_;
  big.set_request_id(std::string(300 << 10, 'r'));
  cases.push_back(
      {"Rerank", kOverMessageLimit, kExhausted, kMessageLimitWant, [this, big] {
         v1::RerankResponse response;
         return Rerank(big, &response);
       }});
  cases.push_back(
      {"Rerank",
       "a message that is not a RerankRequest (not protobuf)",
       kInvalid,
       {"Reranker.Rerank: the message is not a valid maxsimd.v1.RerankRequest"},
       [this] { return RawUnary("/maxsimd.v1.Reranker/Rerank", kGarbage); }});
  Run(cases);
}

TEST_F(BadInputTest, RerankBatch) {
  std::vector<Case> cases = QueryRpcCases("RerankBatch");
  cases.push_back({"RerankBatch",
                   "no queries",
                   kInvalid,
                   {"queries has 0 entries", "must be in [1, 4]"},
                   [this] { return RerankBatch(v1::RerankBatchRequest()); }});
  cases.push_back({"RerankBatch",
                   "5 queries, over --max_batch_queries",
                   kInvalid,
                   {"queries has 5 entries", "must be in [1, 4]"},
                   [this] {
                     v1::RerankBatchRequest batch;
                     for (int i = 0; i < 5; ++i) {
                       *batch.add_queries() = good_scan_;
                     }
                     return RerankBatch(batch);
                   }});
  cases.push_back({"RerankBatch",
                   "the first of two queries bad",
                   kInvalid,
                   {"queries[0].top_k is 99", "must be in [1, 20]"},
                   [this] {
                     v1::RerankBatchRequest batch;
                     *batch.add_queries() = good_scan_;
                     *batch.add_queries() = good_scan_;
                     batch.mutable_queries(0)->set_top_k(99);
                     return RerankBatch(batch);
                   }});
  cases.push_back({"RerankBatch",
                   "a message that is not a RerankBatchRequest (not protobuf)",
                   kInvalid,
                   {"Reranker.RerankBatch: the message is not a valid "
                    "maxsimd.v1.RerankBatchRequest"},
                   [this] {
                     return RawUnary("/maxsimd.v1.Reranker/RerankBatch",
                                     kGarbage);
                   }});
  cases.push_back({"RerankBatch", "4 queries of 70 KB each (280 KB)",
                   kExhausted, kMessageLimitWant, [this] {
                     v1::RerankBatchRequest batch;
                     for (int i = 0; i < 4; ++i) {
                       *batch.add_queries() = good_scan_;
                       batch.mutable_queries(i)->set_request_id(
                           std::string(70 << 10, 'r'));
                     }
                     return RerankBatch(batch);
                   }});
  Run(cases);
}

TEST_F(BadInputTest, RerankStream) {
  std::vector<Case> cases = QueryRpcCases("RerankStream");
  v1::RerankRequest big = good_scan_;
  big.set_request_id(std::string(300 << 10, 'r'));
  cases.push_back({"RerankStream", kOverMessageLimit, kExhausted,
                   kMessageLimitWant, [this, big] {
                     grpc::ClientContext ctx;
                     auto stream = reranker_->RerankStream(&ctx);
                     stream->Write(big);
                     stream->WritesDone();
                     v1::RerankResponse r;
                     while (stream->Read(&r)) {
                     }
                     return stream->Finish();
                   }});
  // [good, not protobuf, good]: every request is answered, the bad one
  // with its own error, and the stream ends OK.
  cases.push_back(
      {"RerankStream",
       "a good request, a message that is not protobuf, a good request",
       kInvalid,
       {"RerankStream message 1: the message is not a valid "
        "maxsimd.v1.RerankRequest"},
       [this] {
         grpc::ClientContext ctx;
         const grpc::internal::RpcMethod method(
             "/maxsimd.v1.Reranker/RerankStream",
             grpc::internal::RpcMethod::BIDI_STREAMING);
         std::unique_ptr<
             grpc::ClientReaderWriter<grpc::ByteBuffer, grpc::ByteBuffer>>
             stream(grpc::internal::ClientReaderWriterFactory<
                    grpc::ByteBuffer, grpc::ByteBuffer>::Create(channel_.get(),
                                                                method, &ctx));
         v1::RerankRequest first = good_scan_, last = good_scan_;
         first.set_request_id("first");
         last.set_request_id("last");
         stream->Write(Bytes(first.SerializeAsString()));
         stream->Write(Bytes(kGarbage));
         stream->Write(Bytes(last.SerializeAsString()));
         stream->WritesDone();
         std::vector<v1::RerankResponse> got;
         grpc::ByteBuffer buffer;
         while (stream->Read(&buffer)) {
           std::vector<grpc::Slice> slices;
           EXPECT_TRUE(buffer.Dump(&slices).ok());
           std::string bytes;
           for (const grpc::Slice& slice : slices) {
             bytes.append(reinterpret_cast<const char*>(slice.begin()),
                          slice.size());
           }
           got.emplace_back();
           EXPECT_TRUE(got.back().ParseFromString(bytes));
         }
         EXPECT_TRUE(stream->Finish().ok());
         std::map<std::string, v1::RerankResponse> by_id;
         grpc::Status bad(grpc::StatusCode::OK, "no response for message 1");
         for (const v1::RerankResponse& r : got) {
           if (r.status_code() != 0) {
             bad = grpc::Status(static_cast<grpc::StatusCode>(r.status_code()),
                                r.status_message());
           } else {
             by_id[r.request_id()] = r;
           }
         }
         EXPECT_EQ(got.size(), 3u);
         ExpectRanking(by_id["first"], want_scan_, "the first good request");
         ExpectRanking(by_id["last"], want_scan_, "the last good request");
         return bad;
       }});
  Run(cases);
}

TEST_F(BadInputTest, CreateCorpus) {
  auto create = [this](const std::string& name, int dim,
                       std::function<void(v1::CreateCorpusRequest*)> more =
                           nullptr) {
    return [this, name, dim, more] {
      v1::CreateCorpusRequest r;
      r.set_name(name);
      r.set_dim(dim);
      if (more) more(&r);
      return Call(&v1::Admin::Stub::CreateCorpus, r);
    };
  };
  auto plaid = [](int nbits, int64_t centroids) {
    return [nbits, centroids](v1::CreateCorpusRequest* r) {
      r->set_layout(v1::LAYOUT_PLAID);
      r->set_plaid_nbits(nbits);
      r->set_plaid_centroids(centroids);
    };
  };
  const std::string name_rule =
      "name must be 1 to 128 characters from [A-Za-z0-9_.-]";
  const std::string rpc = "CreateCorpus";
  Run({
      {rpc, "empty name", kInvalid, {name_rule, "got \"\""}, create("", 8)},
      {rpc,
       "a 3rd corpus, past --max_corpora (2)",
       kExhausted,
       {"the server holds 2 corpora", "--max_corpora is 2"},
       create("third", 8)},
      {rpc,
       "name of 129 characters",
       kInvalid,
       {name_rule},
       create(std::string(129, 'n'), 8)},
      {rpc,
       "name of 100 KB",
       kInvalid,
       {name_rule},
       create(std::string(100 << 10, 'n'), 8)},
      {rpc, "name of 300 KB, over --max_message_bytes", kExhausted,
       kMessageLimitWant, create(std::string(300 << 10, 'n'), 8)},
      {rpc,
       "name with a space and '!'",
       kInvalid,
       {name_rule, "got \"bad name!\""},
       create("bad name!", 8)},
      {rpc, "name with '/'", kInvalid, {name_rule}, create("a/b", 8)},
      {rpc,
       "name starting with '.'",
       kInvalid,
       {"not starting with '.'"},
       create(".hidden", 8)},
      {rpc,
       "name taken by a corpus",
       kExists,
       {"name: corpus \"c\" already exists"},
       create("c", 8)},
      {rpc,
       "name taken by an alias",
       kExists,
       {"name: corpus \"prod\" already exists"},
       create("prod", 8)},
      {rpc,
       "dim 0",
       kInvalid,
       {"dim is 0", "must be in [1, 64]"},
       create("n", 0)},
      {rpc,
       "dim -8",
       kInvalid,
       {"dim is -8", "must be in [1, 64]"},
       create("n", -8)},
      {rpc,
       "dim 65, over --max_dim",
       kInvalid,
       {"dim is 65", "must be in [1, 64]"},
       create("n", 65)},
      {rpc,
       "layout value 7",
       kInvalid,
       {"layout is 7", "not a known Layout"},
       create("n", 8,
              [](auto* r) { r->set_layout(static_cast<v1::Layout>(7)); })},
      {rpc,
       "placement value 9",
       kInvalid,
       {"placement is 9", "not a known Placement"},
       create(
           "n", 8,
           [](auto* r) { r->set_placement(static_cast<v1::Placement>(9)); })},
      {rpc,
       "storage_dtype value 9",
       kInvalid,
       {"storage_dtype is 9",
        "LAYOUT_DENSE stores DTYPE_FLOAT16 or DTYPE_BFLOAT16"},
       create(
           "n", 8,
           [](auto* r) { r->set_storage_dtype(static_cast<v1::DType>(9)); })},
      {rpc,
       "storage_dtype DTYPE_FLOAT32 (dense)",
       kInvalid,
       {"storage_dtype is float32",
        "LAYOUT_DENSE stores DTYPE_FLOAT16 or DTYPE_BFLOAT16"},
       create("n", 8,
              [](auto* r) { r->set_storage_dtype(v1::DTYPE_FLOAT32); })},
      {rpc,
       "storage_dtype DTYPE_PLAID (dense)",
       kInvalid,
       {"storage_dtype is DTYPE_PLAID",
        "LAYOUT_DENSE stores DTYPE_FLOAT16 or DTYPE_BFLOAT16"},
       create("n", 8, [](auto* r) { r->set_storage_dtype(v1::DTYPE_PLAID); })},
      {rpc,
       "storage_dtype DTYPE_INT8 (dense)",
       kInvalid,
       {"storage_dtype is int8",
        "LAYOUT_DENSE stores DTYPE_FLOAT16 or DTYPE_BFLOAT16"},
       create("n", 8, [](auto* r) { r->set_storage_dtype(v1::DTYPE_INT8); })},
      {rpc,
       "storage_dtype DTYPE_FLOAT16 (LAYOUT_INT8)",
       kInvalid,
       {"storage_dtype is float16", "LAYOUT_INT8 stores DTYPE_INT8"},
       create("n", 8,
              [](auto* r) {
                r->set_layout(v1::LAYOUT_INT8);
                r->set_storage_dtype(v1::DTYPE_FLOAT16);
              })},
      {rpc,
       "quantize_queries with LAYOUT_DENSE",
       kInvalid,
       {"quantize_queries is set", "only valid with LAYOUT_INT8"},
       create("n", 8, [](auto* r) { r->set_quantize_queries(true); })},
      {rpc,
       "LAYOUT_PLAID, plaid_nbits 3",
       kInvalid,
       {"plaid_nbits is 3", "must be 1, 2, 4 or 8"},
       create("n", 8, plaid(3, 0))},
      {rpc,
       "LAYOUT_PLAID, plaid_nbits -1",
       kInvalid,
       {"plaid_nbits is -1", "must be 1, 2, 4 or 8"},
       create("n", 8, plaid(-1, 0))},
      {rpc,
       "LAYOUT_PLAID, plaid_nbits 16",
       kInvalid,
       {"plaid_nbits is 16", "must be 1, 2, 4 or 8"},
       create("n", 8, plaid(16, 0))},
      {rpc,
       "LAYOUT_PLAID, plaid_nbits 1 at dim 12",
       kInvalid,
       {"plaid_nbits is 1 and dim 12", "multiple of 8"},
       create("n", 12, plaid(1, 0))},
      {rpc,
       "LAYOUT_PLAID, plaid_centroids -1",
       kInvalid,
       {"plaid_centroids is -1", "must be in [0, 4194304]"},
       create("n", 8, plaid(2, -1))},
      {rpc,
       "LAYOUT_PLAID, plaid_centroids 4194305",
       kInvalid,
       {"plaid_centroids is 4194305", "must be in [0, 4194304]"},
       create("n", 8, plaid(2, 4194305))},
      {rpc,
       "LAYOUT_PLAID, storage_dtype DTYPE_FLOAT16",
       kInvalid,
       {"storage_dtype is DTYPE_FLOAT16", "LAYOUT_PLAID stores DTYPE_PLAID"},
       create("n", 8,
              [](auto* r) {
                r->set_layout(v1::LAYOUT_PLAID);
                r->set_storage_dtype(v1::DTYPE_FLOAT16);
              })},
      {rpc,
       "plaid_nbits with LAYOUT_DENSE",
       kInvalid,
       {"plaid_nbits and plaid_centroids are only valid with LAYOUT_PLAID"},
       create("n", 8, [](auto* r) { r->set_plaid_nbits(2); })},
      {rpc,
       "plaid_centroids with LAYOUT_INT8",
       kInvalid,
       {"plaid_nbits and plaid_centroids are only valid with LAYOUT_PLAID"},
       create("n", 8,
              [](auto* r) {
                r->set_layout(v1::LAYOUT_INT8);
                r->set_plaid_centroids(16);
              })},
      {rpc,
       "query_quantization with LAYOUT_DENSE",
       kInvalid,
       {"query_quantization is set", "only valid with LAYOUT_INT8"},
       create("n", 8,
              [](auto* r) {
                r->set_query_quantization(v1::QUERY_QUANTIZATION_FLOAT16);
              })},
      {rpc,
       "LAYOUT_INT8, query_quantization 7",
       kInvalid,
       {"query_quantization is 7", "not a known QueryQuantization"},
       create("n", 8,
              [](auto* r) {
                r->set_layout(v1::LAYOUT_INT8);
                r->set_query_quantization(
                    static_cast<v1::QueryQuantization>(7));
              })},
      {rpc,
       "LAYOUT_INT8, quantize_queries with QUERY_QUANTIZATION_FLOAT16",
       kInvalid,
       {"quantize_queries is set with query_quantization", "set one of them"},
       create("n", 8,
              [](auto* r) {
                r->set_layout(v1::LAYOUT_INT8);
                r->set_quantize_queries(true);
                r->set_query_quantization(v1::QUERY_QUANTIZATION_FLOAT16);
              })},
      {rpc,
       "pool_factor -1",
       kInvalid,
       {"pool_factor is -1", "must be in [0, 1024]"},
       create("n", 8, [](auto* r) { r->set_pool_factor(-1); })},
      {rpc,
       "pool_factor 1025",
       kInvalid,
       {"pool_factor is 1025", "must be in [0, 1024]"},
       create("n", 8, [](auto* r) { r->set_pool_factor(1025); })},
  });
}

TEST_F(BadInputTest, AddDocuments) {
  const std::string rpc = "AddDocuments";
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  auto add = [this](std::vector<v1::AddDocumentsRequest> messages) {
    return [this, messages] { return AddStream(messages); };
  };
  // NewDocs(n) with a change.
  auto docs = [](int n, std::function<void(v1::AddDocumentsRequest*)> change) {
    v1::AddDocumentsRequest m = NewDocs(n);
    change(&m);
    return m;
  };
  v1::AddDocumentsRequest later = NewDocs(1);
  later.set_ids(0, "new-later");
  // Over --max_add_stream_bytes (32 KiB = 2048 rows of 16 bytes) in three
  // messages of 48 documents of 16 tokens (768 rows each).
  std::vector<v1::AddDocumentsRequest> over;
  for (int i = 0; i < 3; ++i) {
    v1::AddDocumentsRequest m = NewDocs(48, 16, i == 0 ? "c" : "");
    for (int d = 0; d < 48; ++d) m.set_ids(d, absl::StrCat("big-", i, "-", d));
    over.push_back(std::move(m));
  }
  // 768 rows of 16 bytes (12 KiB) and 48 ids, `tag` in their names.
  auto rows768 = [](const std::string& tag) {
    v1::AddDocumentsRequest m = NewDocs(48, 16);
    for (int d = 0; d < 48; ++d) m.set_ids(d, absl::StrCat(tag, "-", d));
    return m;
  };
  v1::AddDocumentsRequest huge = NewDocs(1);
  huge.set_ids(0, "huge");
  huge.mutable_tokens()->mutable_data()->append(300 << 10, '\0');
  Run({
      {rpc,
       "unknown corpus",
       kNotFound,
       {"corpus: \"nope\" does not exist"},
       add({docs(1, [](auto* m) { m->set_corpus("nope"); })})},
      {rpc,
       "first message without corpus",
       kInvalid,
       {"AddDocuments message 0: corpus is required in the first message"},
       add({docs(1, [](auto* m) { m->clear_corpus(); })})},
      {rpc,
       "a stream without messages",
       kInvalid,
       {"the stream carried no message naming a corpus"},
       add({})},
      {rpc,
       "a later message naming another corpus",
       kInvalid,
       {"AddDocuments message 1: corpus \"p\" differs from the stream's "
        "corpus \"c\""},
       add({NewDocs(1), docs(1,
                             [](auto* m) {
                               m->set_corpus("p");
                               m->set_ids(0, "new-1");
                             })})},
      {rpc,
       "a later message naming a corpus of 100 KB",
       kInvalid,
       {"AddDocuments message 1: corpus \"zzzz", "differs from the stream's"},
       add({NewDocs(1), docs(1,
                             [](auto* m) {
                               m->set_corpus(std::string(100 << 10, 'z'));
                               m->set_ids(0, "new-1");
                             })})},
      {rpc,
       "alias repeated in a later message (accepted), NaN in it",
       kInvalid,
       {"AddDocuments message 1: tokens row 0 column 0 is nan"},
       add({docs(1, [](auto* m) { m->set_corpus("prod"); }),
            docs(1,
                 [nan](auto* m) {
                   m->set_corpus("prod");
                   m->set_ids(0, "new-1");
                   SetFloat(m->mutable_tokens(), 0, nan);
                 })})},
      {rpc,
       "2 ids, 1 token count",
       kInvalid,
       {"ids has 2 entries but token_counts has 1"},
       add({docs(2,
                 [](auto* m) {
                   m->mutable_token_counts()->RemoveLast();
                   m->set_token_counts(0, 4);
                 })})},
      {rpc,
       "token counts sum to 3, tokens has 4 rows",
       kInvalid,
       {"tokens has 4 rows but token_counts sum to 3"},
       add({docs(2, [](auto* m) { m->set_token_counts(1, 1); })})},
      {rpc,
       "token counts sum to 5, tokens has 4 rows",
       kInvalid,
       {"tokens has 4 rows but token_counts sum to 5"},
       add({docs(2, [](auto* m) { m->set_token_counts(1, 3); })})},
      {rpc,
       "a document of 0 tokens",
       kInvalid,
       {"token_counts[1] is 0", "must be in [1, 16]"},
       add({docs(3,
                 [](auto* m) {
                   m->set_token_counts(0, 3);
                   m->set_token_counts(1, 0);
                   m->set_token_counts(2, 3);
                 })})},
      {rpc,
       "a token count of -2",
       kInvalid,
       {"token_counts[0] is -2", "must be in [1, 16]"},
       add({docs(2,
                 [](auto* m) {
                   m->set_token_counts(0, -2);
                   m->set_token_counts(1, 6);
                 })})},
      {rpc,
       "a document of 17 tokens, over --max_doc_tokens",
       kInvalid,
       {"token_counts[0] is 17", "must be in [1, 16]"},
       add({docs(2,
                 [](auto* m) {
                   m->set_token_counts(0, 17);
                   m->set_token_counts(1, 1);
                   *m->mutable_tokens() = Fp32Tensor(
                       std::vector<float>(18 * kDim, 0.5f), 18, kDim);
                 })})},
      {rpc,
       "tokens of 17 rows for one id",
       kInvalid,
       {"tokens.shape[0] is 17", "must be in [1, 16]"},
       add({docs(1,
                 [](auto* m) {
                   m->set_token_counts(0, 17);
                   *m->mutable_tokens() = Fp32Tensor(
                       std::vector<float>(17 * kDim, 0.5f), 17, kDim);
                 })})},
      {rpc,
       "tokens shape [2^40, 8] with 128 bytes (no allocation of that size)",
       kInvalid,
       {"tokens.shape[0] is 1099511627776", "must be in [1, 32]"},
       add({docs(2,
                 [](auto* m) {
                   m->mutable_tokens()->set_shape(0, int64_t{1} << 40);
                 })})},
      {rpc,
       "a token count of 2^31-1",
       kInvalid,
       {"token_counts[0] is 2147483647", "must be in [1, 16]"},
       add({docs(2,
                 [](auto* m) {
                   m->set_token_counts(0, std::numeric_limits<int32_t>::max());
                 })})},
      {rpc,
       "tokens without ids",
       kInvalid,
       {"AddDocuments message 0: tokens is set but ids is not"},
       add({docs(2,
                 [](auto* m) {
                   m->clear_ids();
                   m->clear_token_counts();
                 })})},
      {rpc,
       "ids without tokens",
       kInvalid,
       {"AddDocuments message 0: ids is set but tokens is not"},
       add({docs(2, [](auto* m) { m->clear_tokens(); })})},
      {rpc,
       "empty id",
       kInvalid,
       {"ids[1] must be 1 to 256 bytes, got 0"},
       add({docs(2, [](auto* m) { m->set_ids(1, ""); })})},
      {rpc,
       "id of 257 bytes",
       kInvalid,
       {"ids[0] must be 1 to 256 bytes, got 257"},
       add({docs(2, [](auto* m) { m->set_ids(0, std::string(257, 'i')); })})},
      {rpc,
       "the same id twice in one message",
       kInvalid,
       {"ids[1] \"new-0\" appears twice in the stream"},
       add({docs(2, [](auto* m) { m->set_ids(1, "new-0"); })})},
      {rpc,
       "the same id in two messages of one stream",
       kInvalid,
       {"AddDocuments message 1: ids[0] \"new-0\" appears twice in the "
        "stream"},
       add({NewDocs(1), docs(1, [](auto* m) { m->clear_corpus(); })})},
      {rpc,
       "an id already in the corpus",
       kExists,
       {"ids: \"doc-3\" is already in corpus \"c\""},
       add({docs(2, [](auto* m) { m->set_ids(1, "doc-3"); })})},
      {rpc,
       "good messages, then an id already in the corpus in the last",
       kExists,
       {"ids: \"doc-3\" is already in corpus \"c\""},
       add({NewDocs(1), later,
            docs(1,
                 [](auto* m) {
                   m->clear_corpus();
                   m->set_ids(0, "doc-3");
                 })})},
      {rpc,
       "an alias's corpus id, through the alias",
       kExists,
       {"ids: \"doc-0\" is already in corpus \"c\""},
       add({docs(1,
                 [](auto* m) {
                   m->set_corpus("prod");
                   m->set_ids(0, "doc-0");
                 })})},
      {rpc,
       "dim 16 into a corpus of dim 8",
       kInvalid,
       {"tokens.shape[1] is 16", "the corpus has dim 8"},
       add({docs(2,
                 [](auto* m) {
                   *m->mutable_tokens() =
                       Fp32Tensor(std::vector<float>(4 * 16, 0.5f), 4, 16);
                 })})},
      {rpc,
       "dim 8 into the PLAID corpus of dim 16",
       kInvalid,
       {"tokens.shape[1] is 8", "the corpus has dim 16"},
       add({docs(2, [](auto* m) { m->set_corpus("p"); })})},
      {rpc,
       "tokens shape 1-D",
       kInvalid,
       {"tokens.shape has 1 dimensions", "[tokens, dim]"},
       add({docs(2,
                 [](auto* m) {
                   m->mutable_tokens()->clear_shape();
                   m->mutable_tokens()->add_shape(4 * kDim);
                 })})},
      {rpc,
       "tokens with one byte too many",
       kInvalid,
       {"tokens.data has 129 bytes", "needs 128"},
       add({docs(2,
                 [](auto* m) {
                   m->mutable_tokens()->mutable_data()->append("x");
                 })})},
      {rpc,
       "tokens dtype value 9",
       kInvalid,
       {"tokens.dtype is 9", "DTYPE_FLOAT32, DTYPE_FLOAT16 or DTYPE_BFLOAT16"},
       add({docs(2,
                 [](auto* m) {
                   m->mutable_tokens()->set_dtype(static_cast<v1::DType>(9));
                 })})},
      {rpc,
       "tokens dtype DTYPE_INT8",
       kInvalid,
       {"tokens.dtype is DTYPE_INT8", "a storage dtype only"},
       add({docs(
           2,
           [](auto* m) { m->mutable_tokens()->set_dtype(v1::DTYPE_INT8); })})},
      {rpc,
       "NaN value",
       kInvalid,
       {"tokens row 1 column 2 is nan", "values must be finite"},
       add({docs(
           2,
           [nan](auto* m) { SetFloat(m->mutable_tokens(), kDim + 2, nan); })})},
      {rpc,
       "-Inf value",
       kInvalid,
       {"tokens row 3 column 7 is -inf", "values must be finite"},
       add({docs(2,
                 [inf](auto* m) {
                   SetFloat(m->mutable_tokens(), 3 * kDim + 7, -inf);
                 })})},
      {rpc,
       "NaN value into the PLAID corpus",
       kInvalid,
       {"tokens row 0 column 5 is nan", "values must be finite"},
       add({docs(1,
                 [nan](auto* m) {
                   m->set_corpus("p");
                   *m->mutable_tokens() =
                       Fp32Tensor(std::vector<float>(2 * 16, 0.5f), 2, 16);
                   SetFloat(m->mutable_tokens(), 5, nan);
                 })})},
      {rpc,
       "1e6 into a float16 corpus",
       kInvalid,
       {"tokens row 0 column 1 is 1e+06",
        "outside the range of the corpus's float16 storage"},
       add({docs(1, [](auto* m) { SetFloat(m->mutable_tokens(), 1, 1e6f); })})},
      {rpc,
       "a good message, then NaN in the second",
       kInvalid,
       {"AddDocuments message 1: tokens row 0 column 0 is nan"},
       add({NewDocs(1), docs(1,
                             [nan](auto* m) {
                               m->clear_corpus();
                               m->set_ids(0, "new-1");
                               SetFloat(m->mutable_tokens(), 0, nan);
                             })})},
      {rpc,
       "3 messages of 768 rows, over --max_add_stream_bytes",
       kExhausted,
       {"AddDocuments message 2", "--max_add_stream_bytes (32768)"},
       add(over)},
      {rpc, "a good message, then one of 300 KB", kExhausted, kMessageLimitWant,
       add({NewDocs(1), huge})},
      {rpc,
       "a good message, then the client cancels",
       grpc::StatusCode::CANCELLED,
       {},
       [this] {
         grpc::ClientContext ctx;
         v1::AddDocumentsResponse response;
         auto writer = admin_->AddDocuments(&ctx, &response);
         writer->Write(NewDocs(1));
         ctx.TryCancel();
         return writer->Finish();
       }},
      {rpc,
       "a good message, then one that is not protobuf",
       kInvalid,
       {"AddDocuments message 1: the message is not a valid "
        "maxsimd.v1.AddDocumentsRequest"},
       [this] {
         return RawAddStream({NewDocs(1).SerializeAsString(), kGarbage});
       }},
      {rpc,
       "a 4th stream while 3 are open, over --max_write_streams",
       kExhausted,
       {"3 AddDocuments streams are open", "--max_write_streams"},
       [this] {
         std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
         std::vector<v1::AddDocumentsResponse> responses(kWriteStreamsLimit);
         std::vector<
             std::unique_ptr<grpc::ClientWriter<v1::AddDocumentsRequest>>>
             open;
         for (int i = 0; i < kWriteStreamsLimit; ++i) {
           contexts.push_back(std::make_unique<grpc::ClientContext>());
           open.push_back(
               admin_->AddDocuments(contexts.back().get(), &responses[i]));
           open.back()->Write(NewDocs(1));
         }
         // The server counts a stream once its call has started.
         const absl::Time give_up = absl::Now() + absl::Seconds(10);
         while (server_->admin()->write_streams() < kWriteStreamsLimit &&
                absl::Now() < give_up) {
           absl::SleepFor(absl::Milliseconds(5));
         }
         EXPECT_EQ(server_->admin()->write_streams(), kWriteStreamsLimit);
         const grpc::Status got = AddStream({NewDocs(1)});
         for (int i = 0; i < kWriteStreamsLimit; ++i) {
           contexts[i]->TryCancel();
           EXPECT_FALSE(open[i]->Finish().ok());
         }
         return got;
       }},
      {rpc,
       "two streams holding 49 KiB together, over --max_write_bytes",
       kExhausted,
       {"AddDocuments message 1", "--max_write_bytes (40960)",
        "nothing was added"},
       [this, rows768] {
         // The first stream holds 2 x 12 KiB, under --max_add_stream_bytes
         // (32 KiB); the second's second message passes 40 KiB.
         grpc::ClientContext ctx;
         v1::AddDocumentsResponse response;
         auto first = admin_->AddDocuments(&ctx, &response);
         first->Write(rows768("a0"));
         first->Write(rows768("a1"));
         const absl::Time give_up = absl::Now() + absl::Seconds(10);
         while (server_->admin()->write_bytes() < 2 * 768 * 16 &&
                absl::Now() < give_up) {
           absl::SleepFor(absl::Milliseconds(5));
         }
         EXPECT_GE(server_->admin()->write_bytes(), 2 * 768 * 16);
         const grpc::Status got = AddStream({rows768("b0"), rows768("b1")});
         ctx.TryCancel();
         EXPECT_FALSE(first->Finish().ok());
         return got;
       }},
      {rpc,
       "a good message, then nothing for 4 s, past --write_idle_timeout",
       grpc::StatusCode::DEADLINE_EXCEEDED,
       {"no documents added for 4s (--write_idle_timeout), after message 1",
        "nothing was added"},
       [this] {
         grpc::ClientContext ctx;
         v1::AddDocumentsResponse response;
         auto writer = admin_->AddDocuments(&ctx, &response);
         writer->Write(NewDocs(1));
         return writer->Finish();  // without WritesDone: the server ends it
       }},
  });
}

TEST_F(BadInputTest, DeleteDropAndGetCorpus) {
  auto del = [this](const std::string& corpus, std::vector<std::string> ids) {
    return [this, corpus, ids] {
      v1::DeleteDocumentsRequest r;
      r.set_corpus(corpus);
      for (const auto& id : ids) r.add_ids(id);
      return Call(&v1::Admin::Stub::DeleteDocuments, r);
    };
  };
  auto drop = [this](const std::string& name) {
    return [this, name] {
      v1::DropCorpusRequest r;
      r.set_name(name);
      return Call(&v1::Admin::Stub::DropCorpus, r);
    };
  };
  auto get = [this](const std::string& name) {
    return [this, name] {
      v1::GetCorpusRequest r;
      r.set_name(name);
      return Call(&v1::Admin::Stub::GetCorpus, r);
    };
  };
  Run({
      {"DeleteDocuments",
       "an unknown id without ignore_missing",
       kNotFound,
       {"ids[0]: \"missing\" is not in corpus \"c\""},
       del("c", {"missing"})},
      {"DeleteDocuments",
       "known ids and an unknown one (nothing deleted)",
       kNotFound,
       {"ids[2]: \"missing\" is not in corpus \"c\""},
       del("c", {"doc-1", "doc-2", "missing", "doc-3"})},
      {"DeleteDocuments",
       "an id already deleted",
       kNotFound,
       {"ids[0]: \"doc-39\" is not in corpus \"c\""},
       del("c", {"doc-39"})},
      {"DeleteDocuments",
       "an unknown id of 100 KB",
       kNotFound,
       {"ids[0]: \"iiii", "bytes cut", "is not in corpus \"c\""},
       del("c", {std::string(100 << 10, 'i')})},
      {"DeleteDocuments",
       "unknown corpus",
       kNotFound,
       {"corpus: \"nope\" does not exist"},
       del("nope", {"doc-1"})},
      {"DropCorpus",
       "unknown corpus",
       kNotFound,
       {"name: corpus \"nope\" does not exist"},
       drop("nope")},
      {"DropCorpus",
       "a corpus an alias names",
       grpc::StatusCode::FAILED_PRECONDITION,
       {"name: corpus \"c\" is named by alias prod"},
       drop("c")},
      {"GetCorpus",
       "unknown corpus",
       kNotFound,
       {"corpus: \"nope\" does not exist"},
       get("nope")},
  });
}

TEST_F(BadInputTest, Aliases) {
  auto set = [this](const std::string& alias, const std::string& corpus) {
    return [this, alias, corpus] {
      v1::SetAliasRequest r;
      r.set_alias(alias);
      r.set_corpus(corpus);
      return Call(&v1::Admin::Stub::SetAlias, r);
    };
  };
  const std::string name_rule =
      "alias: name must be 1 to 128 characters from [A-Za-z0-9_.-]";
  Run({
      {"SetAlias",
       "an unknown corpus",
       kNotFound,
       {"corpus: \"nope\" is not a corpus"},
       set("staging", "nope")},
      {"SetAlias",
       "an alias as the corpus",
       kNotFound,
       {"corpus: \"prod\" is not a corpus (it is an alias)"},
       set("staging", "prod")},
      {"SetAlias",
       "alias equal to a corpus name",
       kExists,
       {"alias: \"p\" is the name of a corpus"},
       set("p", "c")},
      {"SetAlias", "empty alias", kInvalid, {name_rule}, set("", "c")},
      {"SetAlias",
       "alias of 129 characters",
       kInvalid,
       {name_rule},
       set(std::string(129, 'a'), "c")},
      {"SetAlias",
       "alias with '/'",
       kInvalid,
       {name_rule, "got \"a/b\""},
       set("a/b", "c")},
      {"DeleteAlias",
       "unknown alias",
       kNotFound,
       {"alias: \"nope\" does not exist"},
       [this] {
         v1::DeleteAliasRequest r;
         r.set_alias("nope");
         return Call(&v1::Admin::Stub::DeleteAlias, r);
       }},
  });
}

TEST_F(BadInputTest, SnapshotAndLoadCorpus) {
  auto snapshot = [this](const std::string& name, const std::string& path) {
    return [this, name, path] {
      v1::SnapshotCorpusRequest r;
      r.set_name(name);
      r.set_path(path);
      return Call(&v1::Admin::Stub::SnapshotCorpus, r);
    };
  };
  auto load = [this](const std::string& path, const std::string& name) {
    return [this, path, name] {
      v1::LoadCorpusRequest r;
      r.set_path(path);
      r.set_name(name);
      return Call(&v1::Admin::Stub::LoadCorpus, r);
    };
  };
  const std::string under = "(a relative path under --files_dir)";
  Run({
      {"SnapshotCorpus",
       "path ../escape",
       kInvalid,
       {"path is \"../escape\"", "'..' component", under},
       snapshot("c", "../escape")},
      {"SnapshotCorpus",
       "path a/../../escape",
       kInvalid,
       {"path is \"a/../../escape\"", "'..' component"},
       snapshot("c", "a/../../escape")},
      {"SnapshotCorpus",
       "absolute path",
       kInvalid,
       {"path is \"/tmp/escape\"", "absolute", under},
       snapshot("c", "/tmp/escape")},
      {"SnapshotCorpus",
       "empty path",
       kInvalid,
       {"path is \"\"", "must be 1 to 1024 bytes"},
       snapshot("c", "")},
      {"SnapshotCorpus",
       "path of 1025 bytes",
       kInvalid,
       {"must be 1 to 1024 bytes"},
       snapshot("c", std::string(1025, 'p'))},
      {"SnapshotCorpus",
       "path with a space",
       kInvalid,
       {"path is \"a b\"", "outside [A-Za-z0-9_.-/]"},
       snapshot("c", "a b")},
      {"SnapshotCorpus",
       "an existing directory",
       kExists,
       {"path: existing already exists"},
       snapshot("c", "existing")},
      {"SnapshotCorpus",
       "a path under a regular file",
       kInvalid,
       {"path: \"ids.txt\" is not a directory"},
       snapshot("c", "ids.txt/snap")},
      {"SnapshotCorpus",
       "an existing regular file",
       kExists,
       {"path: ids.txt already exists"},
       snapshot("c", "ids.txt")},
      {"SnapshotCorpus",
       "unknown corpus",
       kNotFound,
       {"corpus: \"nope\" does not exist"},
       snapshot("nope", "new")},
      {"LoadCorpus",
       "path ../escape",
       kInvalid,
       {"path is \"../escape\"", "'..' component"},
       load("../escape", "")},
      {"LoadCorpus",
       "absolute path",
       kInvalid,
       {"path is \"/etc\"", "absolute"},
       load("/etc", "")},
      {"LoadCorpus",
       "a directory that does not exist",
       kNotFound,
       {"path: \"missing\" does not exist under --files_dir"},
       load("missing", "m")},
      {"LoadCorpus",
       "a regular file",
       kInvalid,
       {"path: \"ids.txt\" is not a directory"},
       load("ids.txt", "m")},
      {"LoadCorpus",
       "a path under a regular file",
       kNotFound,
       {"path: \"ids.txt/x\" does not exist under --files_dir"},
       load("ids.txt/x", "m")},
      {"LoadCorpus",
       "a directory without a MANIFEST",
       grpc::StatusCode::DATA_LOSS,
       {"path: file existing/MANIFEST is missing"},
       load("existing", "m")},
      {"LoadCorpus",
       "a directory with a damaged MANIFEST",
       grpc::StatusCode::DATA_LOSS,
       {"path: file bad_snap/MANIFEST", "bad magic"},
       load("bad_snap", "m")},
      {"LoadCorpus",
       "a snapshot of a corpus whose name is taken",
       kExists,
       {"name: corpus \"c\" already exists"},
       load("snap", "")},
      {"LoadCorpus",
       "a snapshot under a bad name",
       kInvalid,
       {"name must be 1 to 128 characters", "got \"bad name\""},
       load("snap", "bad name")},
      {"LoadCorpus",
       "a snapshot under an alias's name",
       kExists,
       {"name: corpus \"prod\" already exists"},
       load("snap", "prod")},
  });
}

TEST_F(BadInputTest, ImportDocuments) {
  struct Files {
    std::string corpus = "c";
    std::string tokens = "tokens.npy";
    std::string cu = "cu.npy";
    std::string safetensors;
    std::string ids = "ids.txt";
    std::string plaid_dir;
  };
  auto import = [this](Files f) {
    return [this, f] {
      v1::ImportDocumentsRequest r;
      r.set_corpus(f.corpus);
      r.set_tokens_npy(f.tokens);
      r.set_cu_seqlens_npy(f.cu);
      r.set_safetensors(f.safetensors);
      r.set_ids(f.ids);
      r.set_plaid_dir(f.plaid_dir);
      return Call(&v1::Admin::Stub::ImportDocuments, r);
    };
  };
  auto with = [](std::function<void(Files*)> change) {
    Files f;
    change(&f);
    return f;
  };
  const std::string rpc = "ImportDocuments";
  Run({
      {rpc,
       "unknown corpus",
       kNotFound,
       {"corpus: \"nope\" does not exist"},
       import(with([](Files* f) { f->corpus = "nope"; }))},
      {rpc,
       "tokens_npy ../tokens.npy",
       kInvalid,
       {"tokens_npy is \"../tokens.npy\"", "'..' component"},
       import(with([](Files* f) { f->tokens = "../tokens.npy"; }))},
      {rpc,
       "cu_seqlens_npy absolute",
       kInvalid,
       {"cu_seqlens_npy is \"/etc/passwd\"", "absolute"},
       import(with([](Files* f) { f->cu = "/etc/passwd"; }))},
      {rpc,
       "ids absolute",
       kInvalid,
       {"ids is \"/etc/hostname\"", "absolute"},
       import(with([](Files* f) { f->ids = "/etc/hostname"; }))},
      {rpc,
       "safetensors ../x",
       kInvalid,
       {"safetensors is \"../x\"", "'..' component"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
         f->safetensors = "../x";
       }))},
      {rpc,
       "plaid_dir a/../../x",
       kInvalid,
       {"plaid_dir is \"a/../../x\"", "'..' component"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
         f->plaid_dir = "a/../../x";
       }))},
      {rpc,
       "no source file",
       kInvalid,
       {"give exactly one source: tokens_npy with cu_seqlens_npy, "
        "safetensors, or plaid_dir"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
       }))},
      {rpc,
       "tokens_npy without cu_seqlens_npy",
       kInvalid,
       {"tokens_npy", "cu_seqlens_npy"},
       import(with([](Files* f) { f->cu.clear(); }))},
      {rpc,
       "both .npy files and safetensors",
       kInvalid,
       {"tokens_npy", "safetensors"},
       import(with([](Files* f) { f->safetensors = "docs.safetensors"; }))},
      {rpc,
       "no ids file",
       kInvalid,
       {"ids is required", "except with plaid_dir"},
       import(with([](Files* f) { f->ids.clear(); }))},
      {rpc,
       "tokens_npy missing",
       kNotFound,
       {"tokens_npy: \"missing.npy\" does not exist under --files_dir"},
       import(with([](Files* f) { f->tokens = "missing.npy"; }))},
      {rpc,
       "ids file missing",
       kNotFound,
       {"ids: \"missing.txt\" does not exist under --files_dir"},
       import(with([](Files* f) { f->ids = "missing.txt"; }))},
      {rpc,
       "safetensors missing",
       kNotFound,
       {"safetensors: \"missing.safetensors\" does not exist under "
        "--files_dir"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
         f->safetensors = "missing.safetensors";
       }))},
      {rpc,
       "plaid_dir missing",
       kNotFound,
       {"plaid_dir: \"missing_plaid\" does not exist under --files_dir"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
         f->plaid_dir = "missing_plaid";
       }))},
      {rpc,
       "plaid_dir whose metadata.json is a directory",
       kInvalid,
       {"plaid_dir: 'dir_plaid/metadata.json' is not a regular file"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
         f->plaid_dir = "dir_plaid";
       }))},
      {rpc,
       "tokens_npy a directory",
       kInvalid,
       {"tokens_npy: \"existing\" is not a regular file"},
       import(with([](Files* f) { f->tokens = "existing"; }))},
      {rpc,
       "plaid_dir a regular file",
       kInvalid,
       {"plaid_dir: \"ids.txt\" is not a directory"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
         f->plaid_dir = "ids.txt";
       }))},
      {rpc,
       "ids a directory",
       kInvalid,
       {"ids: \"existing\" is not a regular file"},
       import(with([](Files* f) { f->ids = "existing"; }))},
      {rpc,
       "safetensors a directory",
       kInvalid,
       {"safetensors: \"existing\" is not a regular file"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
         f->safetensors = "existing";
       }))},
      {rpc,
       "tokens_npy not an npy file",
       grpc::StatusCode::DATA_LOSS,
       {"tokens_npy: npy file 'garbage.npy'", "NUMPY magic"},
       import(with([](Files* f) { f->tokens = "garbage.npy"; }))},
      {rpc,
       "tokens_npy truncated",
       grpc::StatusCode::DATA_LOSS,
       {"tokens_npy: npy file 'truncated.npy': truncated data"},
       import(with([](Files* f) { f->tokens = "truncated.npy"; }))},
      {rpc,
       "cu_seqlens_npy not an npy file",
       grpc::StatusCode::DATA_LOSS,
       {"cu_seqlens_npy: npy file 'garbage.npy'"},
       import(with([](Files* f) { f->cu = "garbage.npy"; }))},
      {rpc,
       "safetensors not a safetensors file",
       grpc::StatusCode::DATA_LOSS,
       {"safetensors: file garbage.npy: header length"},
       import(with([](Files* f) {
         f->tokens.clear();
         f->cu.clear();
         f->safetensors = "garbage.npy";
       }))},
      {rpc,
       "tokens_npy of int16",
       kInvalid,
       {"tokens_npy: npy file 'tokens_i2.npy': unsupported dtype '<i2'"},
       import(with([](Files* f) { f->tokens = "tokens_i2.npy"; }))},
      {rpc,
       "tokens_npy 1-D",
       kInvalid,
       {"tokens_npy: 'tokens_1d.npy' must be a 2-D [tokens, dim] array"},
       import(with([](Files* f) { f->tokens = "tokens_1d.npy"; }))},
      {rpc,
       "cu_seqlens ending short of the token rows",
       kInvalid,
       {"cu_seqlens_npy: 'cu_short.npy' must run from 0 to the 6 token rows "
        "of 'tokens.npy'"},
       import(with([](Files* f) { f->cu = "cu_short.npy"; }))},
      {rpc,
       "2 ids for 3 documents",
       kInvalid,
       {"ids: the offsets have 4 entries but 'two_ids.txt' has 2 ids"},
       import(with([](Files* f) { f->ids = "two_ids.txt"; }))},
      {rpc,
       "a document of 0 tokens",
       kInvalid,
       {"token_counts[1] is 0", "must be in [1, 16]"},
       import(with([](Files* f) { f->cu = "cu_empty_doc.npy"; }))},
      {rpc,
       "dim 16 into a corpus of dim 8",
       kInvalid,
       {"tokens_npy: the file holds dim 16; corpus \"c\" has dim 8"},
       import(with([](Files* f) { f->tokens = "tokens_dim16.npy"; }))},
      {rpc,
       "NaN value",
       kInvalid,
       {"tokens row 2 column 3 is nan", "values must be finite"},
       import(with([](Files* f) { f->tokens = "tokens_nan.npy"; }))},
      {rpc,
       "an id already in the corpus",
       kExists,
       {"ids: \"doc-1\" is already in corpus \"c\""},
       import(with([](Files* f) { f->ids = "old_ids.txt"; }))},
      {rpc,
       "2560 token rows, over --max_add_stream_bytes",
       kExhausted,
       {"40960 bytes of tokens exceed --max_add_stream_bytes (32768)"},
       import(with([](Files* f) {
         f->tokens = "big_tokens.npy";
         f->cu = "big_cu.npy";
         f->ids = "big_ids.txt";
       }))},
  });
}

// Every unary Admin method, sent a message that is not protobuf.
TEST_F(BadInputTest, UnparseableAdminMessages) {
  const google::protobuf::ServiceDescriptor* admin =
      google::protobuf::DescriptorPool::generated_pool()->FindServiceByName(
          "maxsimd.v1.Admin");
  ASSERT_NE(admin, nullptr);
  std::vector<Case> cases;
  for (int i = 0; i < admin->method_count(); ++i) {
    const google::protobuf::MethodDescriptor* m = admin->method(i);
    if (m->client_streaming() || m->server_streaming()) continue;
    cases.push_back(
        {m->name(),
         absl::StrCat("a message that is not a ", m->input_type()->name(),
                      " (not protobuf)"),
         kInvalid,
         {absl::StrCat("Admin.", m->name(), ": the message is not a valid ",
                       m->input_type()->full_name())},
         [this, m] {
           return RawUnary(absl::StrCat("/maxsimd.v1.Admin/", m->name()),
                           kGarbage);
         }});
  }
  EXPECT_EQ(cases.size(), 13u);
  Run(cases);
}

// Health's methods, sent a message that is not protobuf.
TEST_F(BadInputTest, UnparseableHealthMessages) {
  Run({{"Health.Check",
        "a message that is not a HealthCheckRequest (not protobuf)",
        kInvalid,
        {"Health.Check: the message is not a valid "
         "grpc.health.v1.HealthCheckRequest"},
        [this] { return RawUnary("/grpc.health.v1.Health/Check", kGarbage); }},
       {"Health.Watch",
        "a message that is not a HealthCheckRequest (not protobuf)",
        kInvalid,
        {"Health.Watch: the message is not a valid "
         "grpc.health.v1.HealthCheckRequest"},
        [this] {
          grpc::ClientContext ctx;
          const grpc::internal::RpcMethod method(
              "/grpc.health.v1.Health/Watch",
              grpc::internal::RpcMethod::SERVER_STREAMING);
          std::unique_ptr<grpc::ClientReader<grpc::ByteBuffer>> reader(
              grpc::internal::ClientReaderFactory<grpc::ByteBuffer>::Create(
                  channel_.get(), method, &ctx, Bytes(kGarbage)));
          grpc::ByteBuffer ignored;
          while (reader->Read(&ignored)) {
          }
          return reader->Finish();
        }}});
}

// plaid.n_full_scores below top_k ranks top_k documents exactly all the
// same: the request gets top_k results, as the proto says.
TEST_F(BadInputTest, PlaidFullScoresBelowTopK) {
  v1::RerankRequest request = good_plaid_;
  request.set_top_k(12);
  request.mutable_plaid()->set_n_full_scores(3);
  v1::RerankResponse response;
  ASSERT_TRUE(Rerank(request, &response).ok());
  EXPECT_EQ(response.results_size(), 12);
  std::set<std::string> ids;
  for (int i = 0; i < response.results_size(); ++i) {
    ids.insert(response.results(i).id());
    if (i > 0) {
      EXPECT_GE(response.results(i - 1).score(), response.results(i).score());
    }
  }
  EXPECT_EQ(ids.size(), 12u);
}

TEST_F(BadInputTest, SetLogLevel) {
  auto set = [this](const std::string& level) {
    return [this, level] {
      v1::SetLogLevelRequest r;
      r.set_level(level);
      return Call(&v1::Admin::Stub::SetLogLevel, r);
    };
  };
  const std::string allowed =
      "must be trace, debug, info, warn, error, critical or off";
  Run({
      {"SetLogLevel",
       "unknown level",
       kInvalid,
       {"level is \"loud\"", allowed},
       set("loud")},
      {"SetLogLevel",
       "empty level",
       kInvalid,
       {"level is \"\"", allowed},
       set("")},
      {"SetLogLevel",
       "upper-case INFO",
       kInvalid,
       {"level is \"INFO\"", allowed},
       set("INFO")},
      {"SetLogLevel",
       "level of 100 KB",
       kInvalid,
       {"level is \"llll", allowed},
       set(std::string(100 << 10, 'l'))},
  });
}

}  // namespace
}  // namespace maxsimd
