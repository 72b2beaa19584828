// The server under injected faults (kernels/base/fault_injection.h), driven
// through its gRPC API over loopback:
//   - a failed allocation while loading (AddDocuments, LoadCorpus,
//     ImportDocuments) is a clean error and the old corpus keeps serving;
//   - a kernel error mid-batch fails that batch UNAVAILABLE, marks the
//     backend unhealthy and turns health NOT_SERVING, and later calls fail
//     UNAVAILABLE too;
//   - a full disk at any write, fsync or rename of a snapshot fails it
//     cleanly, leaving no snapshot at its path and the previous snapshot
//     intact;
//   - a client that stops reading its RerankStream does not hold up other
//     clients, and gets every response once it reads again;
//   - such a stream is read no further than --max_stream_in_flight requests
//     ahead of its written responses, and a cancel while it waits there
//     ends the call.
//
// The allocation and kernel tests run on the CPU backend (fault points
// cpu.alloc, cpu.search) and on GPU 0 (gpu.malloc, gpu.kernel): the same
// bodies, the GPU instances skipping on a machine without a GPU. The tests
// that arm fault points skip in a build without MAXSIMD_FAULT_INJECTION.
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <ostream>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/blocking_counter.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "index/npy.h"
#include "kernels/backend.h"
#include "kernels/base/fault_injection.h"
#include "kernels/gpu_backend.h"
#include "server/server.h"
#include "tests/support/fault_skip.h"
#include "tests/support/forwarding_backend.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

constexpr int kServing = 1;     // grpc.health.v1 SERVING
constexpr int kNotServing = 2;  // NOT_SERVING
// Health is answered for the whole server ("") and per service.
constexpr const char* kHealthServices[] = {"", "maxsimd.v1.Reranker",
                                           "maxsimd.v1.Admin"};

// `n` documents prefix0.. of 4 to 24 tokens of `dim` normal values.
DocumentBatch MakeDocs(const std::string& prefix, int n, uint64_t seed,
                       int dim = 128) {
  DocumentBatch d;
  d.dim = dim;
  d.cu_seqlens = {0};
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int> len(4, 24);
  for (int i = 0; i < n; ++i) {
    d.ids.push_back(absl::StrCat(prefix, i));
    d.cu_seqlens.push_back(d.cu_seqlens.back() + len(rng));
  }
  std::normal_distribution<float> normal;
  d.tokens.resize(d.cu_seqlens.back() * dim);
  for (float& v : d.tokens) v = normal(rng);
  return d;
}

// A query of 8 tokens: a scan, or a rerank of `candidates`.
Query MakeQuery(const std::string& corpus, uint64_t seed,
                std::vector<std::string> candidates = {}, int dim = 128) {
  Query q;
  q.corpus = corpus;
  q.dim = dim;
  q.top_k = 10;
  q.candidate_ids = std::move(candidates);
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal;
  q.tokens.resize(8 * dim);
  for (float& v : q.tokens) v = normal(rng);
  return q;
}

// Every file under `dir` (relative name -> bytes).
std::map<std::string, std::string> ReadTree(const std::string& dir) {
  std::map<std::string, std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::recursive_directory_iterator(dir, ec)) {
    if (!e.is_regular_file()) continue;
    std::ifstream in(e.path(), std::ios::binary);
    out[std::filesystem::relative(e.path(), dir).string()] = std::string(
        std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  return out;
}

// The names in `dir`, hidden ones included, sorted.
std::vector<std::string> ListDir(const std::string& dir) {
  std::vector<std::string> out;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    out.push_back(e.path().filename().string());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A server on loopback with a --files_dir of its own, and a client.
class ServerFixture : public ::testing::Test {
 protected:
  void SetUp() override {
    const char* base = getenv("TEST_TMPDIR");
    std::string pattern =
        absl::StrCat(base != nullptr ? base : "/tmp", "/maxsimd-fault-XXXXXX");
    ASSERT_NE(mkdtemp(pattern.data()), nullptr);
    files_ = pattern;
  }

  void TearDown() override {
    fault::DisarmAll();
    if (server_ != nullptr) server_->Shutdown();
    if (!files_.empty()) {
      std::error_code ignored;
      std::filesystem::remove_all(files_, ignored);
    }
  }

  // Starts a server on `backend` (GPU 0 for kGpu) with --files_dir set;
  // `adjust` changes the options first.
  void StartServer(BackendChoice backend,
                   const std::function<void(ServerOptions&)>& adjust = {}) {
    ServerOptions o;
    o.listen = "127.0.0.1:0";
    o.metrics_listen = "";
    o.backend = backend;
    if (backend == BackendChoice::kGpu) o.devices = {0};
    o.cpu_threads = 2;
    o.gpu_workers = 2;
    o.stream_buffer_bytes = int64_t{1} << 20;
    o.compaction_interval = absl::ZeroDuration();
    o.health_poll_interval = absl::Milliseconds(5);
    o.drain_timeout = absl::Seconds(5);
    o.admin_limits.files_dir = files_;
    if (adjust) adjust(o);
    auto server = MaxsimServer::Start(o);
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    client_ = NewClient();
    ASSERT_NE(client_, nullptr);
  }

  std::unique_ptr<Client> NewClient(
      absl::Duration timeout = absl::Seconds(30)) const {
    ClientOptions o;
    o.target = Target();
    o.timeout = timeout;
    auto client = Client::Create(o);
    EXPECT_TRUE(client.ok()) << client.status();
    return client.ok() ? *std::move(client) : nullptr;
  }

  std::string Target() const {
    return absl::StrCat("127.0.0.1:", server_->port());
  }

  void CreateCorpus(const std::string& name, int dim,
                    v1::Placement placement = v1::PLACEMENT_AUTO) {
    v1::CreateCorpusRequest create;
    create.set_name(name);
    create.set_dim(dim);
    create.set_placement(placement);
    MAXSIMD_ASSERT_OK(client_->CreateCorpus(create));
  }

  // Each query's ranking as (id, score) pairs; a failed query is fatal.
  std::vector<std::vector<std::pair<std::string, float>>> Rankings(
      const std::vector<Query>& queries) {
    std::vector<std::vector<std::pair<std::string, float>>> out;
    for (const Query& q : queries) {
      absl::StatusOr<v1::RerankResponse> r = client_->Rerank(q);
      EXPECT_TRUE(r.ok()) << r.status();
      out.emplace_back();
      if (!r.ok()) continue;
      for (const v1::ScoredDocument& d : r->results()) {
        out.back().emplace_back(d.id(), d.score());
      }
    }
    return out;
  }

  // Whether every health service reads `want` within 10 s.
  bool HealthBecomes(int want) {
    for (const char* service : kHealthServices) {
      bool reached = false;
      for (int i = 0; i < 1000 && !reached; ++i) {
        absl::StatusOr<int> got = client_->CheckHealth(service);
        reached = got.ok() && *got == want;
        if (!reached) absl::SleepFor(absl::Milliseconds(10));
      }
      if (!reached) return false;
    }
    return true;
  }

  std::string files_;  // the server's --files_dir
  std::unique_ptr<MaxsimServer> server_;
  std::unique_ptr<Client> client_;
};

// The tests that arm fault points: skipped in a build without them.
class FaultTest : public ServerFixture {
 protected:
  void SetUp() override {
    MAXSIMD_SKIP_WITHOUT_FAULT_INJECTION();
    ServerFixture::SetUp();
  }
};

// A backend and its fault points.
struct BackendCase {
  const char* name;
  BackendChoice backend;
  const char* alloc_point;   // fails the backend's placement of an array
  const char* search_point;  // fails a search as a kernel fault does
  const char* search_error;  // in the message of the failed batch
};

void PrintTo(const BackendCase& c, std::ostream* os) { *os << c.name; }

class BackendFaultTest : public FaultTest,
                         public ::testing::WithParamInterface<BackendCase> {
 protected:
  void SetUp() override {
    FaultTest::SetUp();
    if (IsSkipped()) return;
    if (GetParam().backend == BackendChoice::kGpu &&
        GpuBackend::DeviceCount() == 0) {
      GTEST_SKIP() << "no CUDA device on this machine";
    }
  }
};

TEST_P(BackendFaultTest, FailedAllocationAtLoadKeepsTheOldCorpusServing) {
  ASSERT_NO_FATAL_FAILURE(StartServer(GetParam().backend));
  // Placement gpu: a segment that does not fit is refused, rather than
  // placed in host memory as under placement auto.
  ASSERT_NO_FATAL_FAILURE(CreateCorpus("c", 128, v1::PLACEMENT_GPU));
  MAXSIMD_ASSERT_OK(client_->AddDocuments("c", MakeDocs("a", 120, 1)));
  MAXSIMD_ASSERT_OK(client_->SnapshotCorpus("c", "snap/c"));
  // Files for ImportDocuments.
  const DocumentBatch imported = MakeDocs("i", 30, 3);
  MAXSIMD_ASSERT_OK(
      WriteNpy(files_ + "/tokens.npy",
               MakeNpyFloat32(imported.tokens,
                              {imported.cu_seqlens.back(), imported.dim})));
  MAXSIMD_ASSERT_OK(WriteNpy(
      files_ + "/cu_seqlens.npy",
      MakeNpyInt64(imported.cu_seqlens,
                   {static_cast<int64_t>(imported.cu_seqlens.size())})));
  {
    std::ofstream ids(files_ + "/ids.txt");
    for (const std::string& id : imported.ids) ids << id << "\n";
  }
  v1::ImportDocumentsRequest import;
  import.set_corpus("c");
  import.set_tokens_npy("tokens.npy");
  import.set_cu_seqlens_npy("cu_seqlens.npy");
  import.set_ids("ids.txt");

  std::vector<std::string> candidates;
  for (int i = 0; i < 120; i += 3) candidates.push_back(absl::StrCat("a", i));
  const std::vector<Query> queries = {MakeQuery("c", 11),
                                      MakeQuery("c", 12, candidates)};
  const auto before = Rankings(queries);
  const std::vector<DeviceMemory> memory = server_->backend()->Memory();
  const DocumentBatch more = MakeDocs("b", 40, 2);
  const char* point = GetParam().alloc_point;
  const auto refused =
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr("Upload"), HasSubstr("do not fit")));
  {
    fault::ScopedFault no_memory(point, fault::Schedule::Always());
    EXPECT_THAT(client_->AddDocuments("c", more), refused);
    EXPECT_THAT(client_->LoadCorpus("snap/c", "copy"), refused);
    EXPECT_THAT(client_->ImportDocuments(import), refused);
    EXPECT_GE(fault::Failures(point), 3);
  }
  {
    // The load's second allocation fails after its first succeeded.
    fault::ScopedFault second(point, fault::Schedule::NthHit(2));
    EXPECT_THAT(client_->AddDocuments("c", more), refused);
    EXPECT_EQ(fault::Failures(point), 1);
  }

  // The old state serves, unchanged, and the server stays ready.
  EXPECT_THAT(client_->GetCorpus("copy"),
              StatusIs(absl::StatusCode::kNotFound));
  absl::StatusOr<v1::CorpusInfo> info = client_->GetCorpus("c");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_documents(), 120);
  EXPECT_EQ(Rankings(queries), before);
  EXPECT_TRUE(server_->backend()->healthy());
  EXPECT_TRUE(server_->serving());
  for (const char* service : kHealthServices) {
    EXPECT_EQ(client_->CheckHealth(service).value_or(-1), kServing) << service;
  }
  // What the failed loads allocated went back.
  const std::vector<DeviceMemory> after = server_->backend()->Memory();
  ASSERT_EQ(after.size(), memory.size());
  for (size_t i = 0; i < after.size(); ++i) {
    EXPECT_EQ(after[i].corpus_bytes, memory[i].corpus_bytes) << "device " << i;
  }
  // Nothing was half-committed: the same loads succeed now.
  MAXSIMD_EXPECT_OK(client_->AddDocuments("c", more));
  MAXSIMD_EXPECT_OK(client_->LoadCorpus("snap/c", "copy"));
  MAXSIMD_EXPECT_OK(client_->ImportDocuments(import));
  info = client_->GetCorpus("c");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_documents(), 190);
}

TEST_P(BackendFaultTest, KernelErrorMidBatchFailsItAndTurnsNotServing) {
  // A batch closes when it holds 4 queries (or after 2 s).
  ASSERT_NO_FATAL_FAILURE(StartServer(GetParam().backend, [](ServerOptions& o) {
    o.scheduler.max_batch_queries = 4;
    o.scheduler.max_queue_delay = absl::Seconds(2);
  }));
  ASSERT_NO_FATAL_FAILURE(CreateCorpus("c", 128));
  MAXSIMD_ASSERT_OK(client_->AddDocuments("c", MakeDocs("a", 200, 1)));
  ASSERT_TRUE(HealthBecomes(kServing));

  const char* point = GetParam().search_point;
  fault::ScopedFault kernel_fault(point, fault::Schedule::Once());
  constexpr int kQueries = 4;
  absl::Mutex mu;
  std::vector<absl::Status> got(kQueries);
  absl::BlockingCounter answered(kQueries);
  for (int i = 0; i < kQueries; ++i) {
    client_->RerankAsync(MakeQuery("c", 20 + i),
                         [&, i](absl::StatusOr<v1::RerankResponse> r) {
                           {
                             absl::MutexLock lock(&mu);
                             got[i] = r.status();
                           }
                           answered.DecrementCount();
                         });
  }
  answered.Wait();
  for (int i = 0; i < kQueries; ++i) {
    EXPECT_THAT(got[i], StatusIs(absl::StatusCode::kUnavailable,
                                 HasSubstr(GetParam().search_error)))
        << "query " << i;
  }
  // One search ran: the batch of four.
  EXPECT_EQ(fault::Hits(point), 1);
  EXPECT_FALSE(server_->backend()->healthy());
  EXPECT_TRUE(HealthBecomes(kNotServing));
  EXPECT_FALSE(server_->serving());

  // Sticky: later calls fail at once, without another search.
  EXPECT_THAT(
      client_->Rerank(MakeQuery("c", 30)),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("has failed")));
  EXPECT_THAT(
      client_->AddDocuments("c", MakeDocs("late", 5, 9)),
      StatusIs(absl::StatusCode::kUnavailable, HasSubstr("has failed")));
  EXPECT_EQ(fault::Hits(point), 1);
  EXPECT_EQ(client_->CheckHealth().value_or(-1), kNotServing);
}

INSTANTIATE_TEST_SUITE_P(
    Backends, BackendFaultTest,
    ::testing::Values(BackendCase{"cpu", BackendChoice::kCpu, fault::kCpuAlloc,
                                  fault::kCpuSearch, "fault point cpu.search"},
                      BackendCase{"gpu", BackendChoice::kGpu, fault::kGpuMalloc,
                                  fault::kGpuKernel, "cudaErrorLaunchFailure"}),
    [](const ::testing::TestParamInfo<BackendCase>& info) {
      return std::string(info.param.name);
    });

// Parameter: the storage fault point that fails (write, fsync, rename).
class SnapshotFaultTest : public FaultTest,
                          public ::testing::WithParamInterface<const char*> {};

TEST_P(SnapshotFaultTest, FullDiskAtAnyStepLeavesThePreviousSnapshotIntact) {
  ASSERT_NO_FATAL_FAILURE(StartServer(BackendChoice::kCpu));
  ASSERT_NO_FATAL_FAILURE(CreateCorpus("c", 128));
  MAXSIMD_ASSERT_OK(client_->AddDocuments("c", MakeDocs("a", 60, 1)));
  const std::vector<Query> queries = {MakeQuery("c", 5), MakeQuery("c", 6)};
  const auto at_v1 = Rankings(queries);
  ASSERT_EQ(client_->SnapshotCorpus("c", "snap/v1").value_or(-1), 60);
  const std::string snaps = files_ + "/snap";
  const auto v1_files = ReadTree(snaps + "/v1");
  ASSERT_FALSE(v1_files.empty());
  // Two segments and a tombstone file from here on.
  MAXSIMD_ASSERT_OK(client_->AddDocuments("c", MakeDocs("b", 30, 2)));
  MAXSIMD_ASSERT_OK(client_->DeleteDocuments("c", {"a3", "b4"}));
  const auto now = Rankings(queries);

  // Hit n of the point fails, for every n until a snapshot needs fewer.
  const char* point = GetParam();
  int failed = 0;
  std::string done;  // the path of the snapshot that completed
  for (int n = 1; done.empty(); ++n) {
    ASSERT_LT(n, 100) << "the snapshot never completed";
    const std::string path = absl::StrCat("snap/v2-", n);
    absl::StatusOr<int64_t> s;
    {
      fault::ScopedFault full_disk(point, fault::Schedule::NthHit(n));
      s = client_->SnapshotCorpus("c", path);
      if (fault::Failures(point) == 0) {
        ASSERT_EQ(s.value_or(-1), 88) << s.status();
        done = path;
        break;
      }
    }
    ++failed;
    EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted,
                            AllOf(HasSubstr(path),
                                  HasSubstr("No space left on device"))))
        << "hit " << n;
    // Nothing at the path, no partial directory beside it, and the
    // previous snapshot byte for byte as it was.
    EXPECT_EQ(ListDir(snaps), std::vector<std::string>{"v1"}) << "hit " << n;
    EXPECT_EQ(ReadTree(snaps + "/v1"), v1_files) << "hit " << n;
    // The corpus serves on.
    EXPECT_EQ(Rankings(queries), now) << "hit " << n;
  }
  EXPECT_GT(failed, 0);
  EXPECT_TRUE(server_->serving());

  // Both snapshots load back as they were taken.
  auto old = client_->LoadCorpus("snap/v1", "old");
  ASSERT_TRUE(old.ok()) << old.status();
  EXPECT_EQ(old->num_documents(), 60);
  auto fresh = client_->LoadCorpus(done, "fresh");
  ASSERT_TRUE(fresh.ok()) << fresh.status();
  EXPECT_EQ(fresh->num_documents(), 88);
  std::vector<Query> on_old = queries, on_fresh = queries;
  for (Query& q : on_old) q.corpus = "old";
  for (Query& q : on_fresh) q.corpus = "fresh";
  EXPECT_EQ(Rankings(on_old), at_v1);
  EXPECT_EQ(Rankings(on_fresh), now);
}

INSTANTIATE_TEST_SUITE_P(StoragePoints, SnapshotFaultTest,
                         ::testing::Values(fault::kStorageWrite,
                                           fault::kStorageFsync,
                                           fault::kStorageRename),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name = info.param;
                           name.erase(0, name.find('.') + 1);
                           return name;
                         });

// No fault point: these run in every build.
class SlowClientTest : public ServerFixture {
 protected:
  // Counts the queries the backend searched.
  class CountingBackend : public testing::ForwardingBackend {
   public:
    using ForwardingBackend::ForwardingBackend;
    absl::Status Search(const SearchParams& params,
                        absl::Span<std::vector<ScoredDoc>> results,
                        SearchTiming* timing) override {
      searched += params.num_queries;
      return ForwardingBackend::Search(params, results, timing);
    }
    std::atomic<int64_t> searched{0};
  };

  // Starts a CPU server whose streams read at most `limit` requests ahead,
  // with a counting backend, and a corpus "slow" of kSlowDocs documents.
  void StartLimited(int limit) {
    ASSERT_NO_FATAL_FAILURE(
        StartServer(BackendChoice::kCpu, [this, limit](ServerOptions& o) {
          o.request_limits.max_stream_in_flight = limit;
          o.backend_factory = [this](const ServerOptions& options)
              -> absl::StatusOr<std::unique_ptr<Backend>> {
            absl::StatusOr<std::unique_ptr<Backend>> inner =
                CreateBackend(options);
            if (!inner.ok()) return inner.status();
            auto counting =
                std::make_unique<CountingBackend>(*std::move(inner));
            counting_ = counting.get();
            return counting;
          };
        }));
    ASSERT_NE(counting_, nullptr);
    ASSERT_NO_FATAL_FAILURE(CreateSlowCorpus());
  }

  // The corpus "slow": kSlowDocs documents that every request asks for.
  void CreateSlowCorpus() {
    ASSERT_NO_FATAL_FAILURE(CreateCorpus("slow", kDim));
    MAXSIMD_ASSERT_OK(client_->AddDocuments(
        "slow", MakeDocs("document-", kSlowDocs, 1, kDim)));
  }

  // A RerankStream call (60 s deadline) on a channel whose receive window
  // (64 KiB) does not grow, so the server's writes to a client that reads
  // nothing wait after a few responses of top_k = every document (about
  // 20 KB each).
  struct NarrowStream {
    std::unique_ptr<v1::Reranker::Stub> stub;
    grpc::ClientContext ctx;
    std::unique_ptr<
        grpc::ClientReaderWriter<v1::RerankRequest, v1::RerankResponse>>
        stream;
  };
  std::unique_ptr<NarrowStream> OpenNarrowStream() const {
    grpc::ChannelArguments args;
    args.SetInt(GRPC_ARG_HTTP2_BDP_PROBE, 0);
    args.SetInt(GRPC_ARG_HTTP2_STREAM_LOOKAHEAD_BYTES, kWindow);
    auto call = std::make_unique<NarrowStream>();
    call->stub = v1::Reranker::NewStub(grpc::CreateCustomChannel(
        Target(), grpc::InsecureChannelCredentials(), args));
    call->ctx.set_deadline(std::chrono::system_clock::now() +
                           std::chrono::seconds(60));
    call->stream = call->stub->RerankStream(&call->ctx);
    return call;
  }

  // Writes `n` requests for every document of "slow" to the call, then
  // half-closes.
  std::thread StartWriter(NarrowStream* call, int n) {
    auto* stream = call->stream.get();
    return std::thread([this, stream, n] {
      for (int i = 0; i < n; ++i) {
        v1::RerankRequest r =
            client_->ToRequest(MakeQuery("slow", i, {}, kDim));
        r.set_top_k(kSlowDocs);
        r.set_request_id(absl::StrCat("slow-", i));
        if (!stream->Write(r)) break;
      }
      stream->WritesDone();
    });
  }

  static constexpr int kDim = 16;
  static constexpr int kSlowDocs = 1000;
  static constexpr int kWindow = 64 << 10;
  CountingBackend* counting_ = nullptr;
};

TEST_F(SlowClientTest, ClientThatStopsReadingItsStreamDoesNotHoldUpOthers) {
  ASSERT_NO_FATAL_FAILURE(StartServer(BackendChoice::kCpu));
  // The slow client queries one corpus, the others another: the scheduler
  // serves corpora in turn, so each of the others' calls waits for one batch
  // of the slow client's at most, whatever it has queued (that is fairness,
  // tested in scheduler_test; here the question is what its unread
  // responses do).
  ASSERT_NO_FATAL_FAILURE(CreateSlowCorpus());
  ASSERT_NO_FATAL_FAILURE(CreateCorpus("s", kDim));
  MAXSIMD_ASSERT_OK(client_->AddDocuments("s", MakeDocs("d", 100, 2, kDim)));

  // The slow client, on a narrow channel: its responses (about 20 KB each)
  // total far more than its window.
  auto call = OpenNarrowStream();
  auto& stream = call->stream;
  constexpr int kSlow = 120;
  std::thread writer = StartWriter(call.get(), kSlow);

  // It reads nothing until another client's calls have all been answered.
  // Were the server to hold them up behind the slow client's unwritten
  // responses, they would wait for a read that never comes and end at
  // their deadline. (No wall-clock bound: under a sanitizer on a loaded
  // machine one batch of the slow client's takes seconds.) No ASSERT until
  // the stream is read: the writer thread must finish.
  absl::SleepFor(absl::Milliseconds(500));
  std::unique_ptr<Client> other = NewClient(absl::Seconds(60));
  int answered = 0;
  for (int i = 0; other != nullptr && i < 20; ++i) {
    absl::StatusOr<v1::RerankResponse> r =
        other->Rerank(MakeQuery("s", 1000 + i, {}, kDim));
    if (!r.ok()) {
      ADD_FAILURE() << "call " << i << ": " << r.status();
      break;
    }
    EXPECT_EQ(r->results_size(), 10);
    ++answered;
  }
  EXPECT_EQ(answered, 20);

  // Then it reads: every response arrives, whole.
  int read = 0;
  size_t bytes = 0;
  v1::RerankResponse response;
  while (stream->Read(&response)) {
    EXPECT_EQ(response.status_code(), 0) << response.status_message();
    EXPECT_EQ(response.results_size(), kSlowDocs);
    bytes += response.ByteSizeLong();
    ++read;
  }
  writer.join();
  const grpc::Status finished = stream->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  EXPECT_EQ(read, kSlow);
  // Far more than its window: the server's writes to it waited while the
  // other client was answered.
  EXPECT_GT(bytes, size_t{16} * kWindow);
}

TEST_F(SlowClientTest, StreamIsReadNoFurtherThanItsInFlightLimitAhead) {
  constexpr int kLimit = 8;
  ASSERT_NO_FATAL_FAILURE(StartLimited(kLimit));
  auto call = OpenNarrowStream();
  auto& stream = call->stream;
  constexpr int kRequests = 200;
  std::thread writer = StartWriter(call.get(), kRequests);

  // It reads nothing for a second, ample time to search all 200 queries:
  // the server reads the limit ahead of the responses the window took,
  // and searches no more.
  absl::SleepFor(absl::Seconds(1));
  const int64_t searched = counting_->searched.load();
  EXPECT_GE(searched, kLimit);
  EXPECT_LE(searched, 3 * kLimit);

  // Then it reads: every request is answered once, whole.
  std::map<std::string, int> answers;
  v1::RerankResponse response;
  while (stream->Read(&response)) {
    EXPECT_EQ(response.status_code(), 0) << response.status_message();
    EXPECT_EQ(response.results_size(), kSlowDocs);
    ++answers[response.request_id()];
  }
  writer.join();
  const grpc::Status finished = stream->Finish();
  EXPECT_TRUE(finished.ok()) << finished.error_message();
  EXPECT_EQ(answers.size(), size_t{kRequests});
  for (const auto& [id, count] : answers) EXPECT_EQ(count, 1) << id;
  EXPECT_EQ(counting_->searched.load(), kRequests);
}

TEST_F(SlowClientTest, CancelWhileAtTheInFlightLimitEndsTheCall) {
  constexpr int kLimit = 4;
  ASSERT_NO_FATAL_FAILURE(StartLimited(kLimit));
  auto call = OpenNarrowStream();
  auto& stream = call->stream;
  std::thread writer = StartWriter(call.get(), 100);
  absl::SleepFor(absl::Milliseconds(500));
  EXPECT_LE(counting_->searched.load(), 3 * kLimit);
  call->ctx.TryCancel();
  writer.join();
  EXPECT_FALSE(stream->Finish().ok());

  // The server is not left holding the call: it answers others, and it
  // shuts down well within its 5 s drain.
  absl::StatusOr<v1::RerankResponse> r =
      client_->Rerank(MakeQuery("slow", 7, {}, kDim));
  EXPECT_TRUE(r.ok()) << r.status();
  const absl::Time t0 = absl::Now();
  server_->Shutdown();
  EXPECT_LT(absl::Now() - t0, absl::Seconds(3));
}

}  // namespace
}  // namespace maxsimd
