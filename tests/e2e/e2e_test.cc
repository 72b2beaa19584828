// End to end: the real `maxsimd` binary on 127.0.0.1, driven by the real
// `maxsimctl` tool and the C++ client library. Checks health, an
// add -> query -> delete -> query cycle against the scalar reference, and
// that SIGTERM drains a request in flight before the process exits 0.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <future>
#include <random>
#include <regex>
#include <set>
#include <thread>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "index/npy.h"
#include "index/safetensors.h"
#include "index/token_pooling.h"
#include "kernels/base/half.h"
#include "kernels/element.h"
#include "kernels/gpu_backend.h"
#include "kernels/maxsim_reference.h"
#include "kernels/quantize.h"
#include "tests/e2e/e2e_support.h"
#include "tests/support/http.h"
#include "tests/support/sanitizer.h"

namespace maxsimd {
namespace {

// The PLAID fixtures (tests/data/plaid): MAXSIMD_PLAID_TESTDATA in the
// environment, for a test binary run away from the source tree it was
// built in (bench/run_gpu.sh service), else the source tree's.
std::string PlaidTestData() {
  const char* env = std::getenv("MAXSIMD_PLAID_TESTDATA");
  return env != nullptr ? env : MAXSIMD_PLAID_TESTDATA;
}

using ::maxsimd::testing::kSanitizerSlowdown;
using ::maxsimd::testing::RunCommand;

class E2eTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("maxsimd_e2e_", getpid(), "_", ++counter_);
    std::filesystem::create_directories(dir_);
    // The drain deadline leaves room for the drain test's batch, ~20 s of
    // CPU scoring when a 2-core machine is shared with other tests.
    auto server = ::maxsimd::testing::ServerProcess::Start(
        {"--drain_timeout=90s", "--max_queue_delay=1s"});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
    port_ = server_->port();
    metrics_port_ = server_->metrics_port();
    client_ = server_->NewClient();
  }

  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A maxsimctl command line against `target` (host:port).
  static std::string CtlFor(const std::string& target,
                            const std::string& args) {
    const char* ctl = std::getenv("MAXSIMD_E2E_CTL_BIN");
    return absl::StrCat(ctl != nullptr ? ctl : MAXSIMCTL_BIN,
                        " --target=", target, " ", args);
  }
  // ... against the fixture's server.
  std::string Ctl(const std::string& args) {
    return CtlFor(absl::StrCat("127.0.0.1:", port_), args);
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  int port_ = 0;
  int metrics_port_ = 0;
  std::unique_ptr<::maxsimd::testing::ServerProcess> server_;
  std::unique_ptr<Client> client_;
};

// The reference ranking of `query` over the generated files, minus deleted.
// With `int8`, over the files' tokens quantised as an int8 corpus stores
// them (kernels/quantize.h), queries rounded or `quantize`d. With
// `pool_factor` above 1, over each document pooled (PoolTokenBatch, not
// normalised) and rounded to float16, as a dense pooling corpus stores it.
std::vector<std::pair<std::string, float>> Reference(
    const std::filesystem::path& dir, const std::vector<float>& query, int dim,
    int top_k, const std::vector<std::string>& candidates,
    const std::set<std::string>& deleted, bool int8 = false,
    bool quantize = false, int32_t pool_factor = 1) {
  NpyArray tokens = ReadNpy(dir / "tokens.npy").value();
  std::vector<int64_t> cu =
      NpyToInt64(ReadNpy(dir / "cu_seqlens.npy").value(), "cu").value();
  std::vector<std::string> ids;
  std::ifstream in(dir / "ids.txt");
  for (std::string line; std::getline(in, line);) ids.push_back(line);
  SegmentView seg;
  seg.tokens = tokens.data.data();
  seg.dtype = tokens.descr == "<f2" ? DType::kFloat16 : DType::kFloat32;
  seg.cu_seqlens = cu.data();
  seg.num_docs = static_cast<int64_t>(ids.size());
  seg.num_tokens = cu.back();
  seg.dim = dim;
  std::vector<float> pooled;
  std::vector<int64_t> pooled_cu;
  std::vector<uint16_t> pooled16;
  if (pool_factor > 1) {
    std::vector<float> values(static_cast<size_t>(seg.num_tokens) * dim);
    ConvertToFloat(seg.tokens, seg.dtype, 0,
                   static_cast<int64_t>(values.size()), values.data());
    EXPECT_TRUE(PoolTokenBatch(values, cu, dim, {pool_factor, false}, nullptr,
                               &pooled, &pooled_cu)
                    .ok());
    int64_t kept = 0;  // ceil(n / pool_factor) per document
    for (size_t i = 0; i + 1 < cu.size(); ++i) {
      kept += (cu[i + 1] - cu[i] + pool_factor - 1) / pool_factor;
    }
    EXPECT_EQ(pooled_cu.back(), kept);
    pooled16.resize(pooled.size());
    ConvertFromFloat(pooled.data(), static_cast<int64_t>(pooled.size()),
                     DType::kFloat16, pooled16.data());
    seg.tokens = pooled16.data();
    seg.dtype = DType::kFloat16;
    seg.cu_seqlens = pooled_cu.data();
    seg.num_tokens = pooled_cu.back();
  }
  std::vector<int8_t> codes;
  std::vector<float> scales;
  if (int8) {
    std::vector<float> values(static_cast<size_t>(seg.num_tokens) * dim);
    ConvertToFloat(seg.tokens, seg.dtype, 0,
                   static_cast<int64_t>(values.size()), values.data());
    codes.resize(values.size());
    scales.resize(static_cast<size_t>(seg.num_tokens));
    QuantizeInt8Rows(values.data(), seg.num_tokens, dim, codes.data(),
                     scales.data());
    seg.tokens = codes.data();
    seg.scales = scales.data();
    seg.dtype = DType::kInt8;
  }
  std::vector<std::pair<std::string, float>> all;
  for (int64_t d = 0; d < seg.num_docs; ++d) {
    if (deleted.count(ids[d])) continue;
    if (!candidates.empty() && std::find(candidates.begin(), candidates.end(),
                                         ids[d]) == candidates.end()) {
      continue;
    }
    all.emplace_back(
        ids[d], static_cast<float>(ReferenceScore(
                    query.data(), static_cast<int64_t>(query.size()) / dim, seg,
                    d, quantize)));
  }
  std::stable_sort(all.begin(), all.end(), [](const auto& a, const auto& b) {
    return a.second > b.second;
  });
  if (static_cast<int>(all.size()) > top_k) all.resize(top_k);
  return all;
}

// (id, score) pairs from maxsimctl's --json query output.
std::vector<std::pair<std::string, float>> ParseResults(
    const std::string& json) {
  static const std::regex kResult(
      R"re(\{"rank":\d+,"id":"([^"]*)","score":([-0-9.eE+]+)\})re");
  std::vector<std::pair<std::string, float>> out;
  for (auto it = std::sregex_iterator(json.begin(), json.end(), kResult);
       it != std::sregex_iterator(); ++it) {
    out.emplace_back((*it)[1], std::stof((*it)[2]));
  }
  return out;
}

void ExpectSame(const std::vector<std::pair<std::string, float>>& got,
                const std::vector<std::pair<std::string, float>>& want) {
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    EXPECT_EQ(got[i].first, want[i].first) << "rank " << i;
    EXPECT_NEAR(got[i].second, want[i].second,
                1e-3 * std::max(1.f, std::fabs(want[i].second)));
  }
}

TEST_F(E2eTest, MaxsimctlCycleMatchesTheReference) {
  const std::string d = dir_.string();
  auto [rc, out] = RunCommand(Ctl("health"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(out, "SERVING\n");
  std::tie(rc, out) = RunCommand(Ctl(
      absl::StrCat("generate --out ", d,
                   " --docs 400 --dim 64 --min-tokens 4 "
                   "--max-tokens 60 --queries 2 --query-tokens 16 --seed 5")));
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(RunCommand(Ctl("create --name e2e --dim 64")).first, 0);
  std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
      "add --corpus e2e --tokens ", d, "/tokens.npy --cu-seqlens ", d,
      "/cu_seqlens.npy --ids ", d, "/ids.txt --chunk-mb 0.05")));
  ASSERT_EQ(rc, 0) << out;

  NpyArray q = ReadNpy(dir_ / "query_0.npy").value();
  std::vector<float> query(q.num_elements());
  ConvertToFloat(q.data.data(), DType::kFloat32, 0, q.num_elements(),
                 query.data());
  std::string source;
  std::ifstream(dir_ / "query_0.source") >> source;
  std::vector<std::string> candidates;
  {
    std::ifstream in(dir_ / "candidates_0.txt");
    for (std::string line; std::getline(in, line);) candidates.push_back(line);
  }
  std::set<std::string> deleted;

  // Scan.
  std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
      "--json query --corpus e2e --query ", d, "/query_0.npy --top-k 15")));
  ASSERT_EQ(rc, 0) << out;
  auto scan = ParseResults(out);
  ExpectSame(scan, Reference(dir_, query, 64, 15, {}, deleted));
  ASSERT_FALSE(scan.empty());
  EXPECT_EQ(scan[0].first, source);
  // Rerank.
  const std::string rerank_cmd = Ctl(absl::StrCat(
      "--json query --corpus e2e --query ", d,
      "/query_0.npy --top-k 10 --candidates-file ", d, "/candidates_0.txt"));
  std::tie(rc, out) = RunCommand(rerank_cmd);
  ASSERT_EQ(rc, 0) << out;
  ExpectSame(ParseResults(out),
             Reference(dir_, query, 64, 10, candidates, deleted));
  // Delete the top two of the scan (not candidates of the rerank) and scan
  // again.
  std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
      "delete --corpus e2e --ids ", scan[0].first, ",", scan[1].first)));
  ASSERT_EQ(rc, 0) << out;
  deleted = {scan[0].first, scan[1].first};
  std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
      "--json query --corpus e2e --query ", d, "/query_0.npy --top-k 15")));
  ASSERT_EQ(rc, 0) << out;
  ExpectSame(ParseResults(out), Reference(dir_, query, 64, 15, {}, deleted));
  // A deleted candidate is now an unknown id: exit 1 with NOT_FOUND.
  std::tie(rc, out) = RunCommand(rerank_cmd + " 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("NOT_FOUND"), std::string::npos) << out;
  // The metrics endpoint of the real binary parses.
  auto text = ::maxsimd::testing::HttpGet(metrics_port_, "/metrics");
  ASSERT_TRUE(text.ok()) << text.status();
  EXPECT_EQ(::maxsimd::testing::CheckPrometheusText(*text), "");
  EXPECT_NE(text->find("maxsimd_corpus_documents{corpus=\"e2e\"} 398"),
            std::string::npos);
  EXPECT_EQ(server_->TerminateAndWait(), 0);
}

// A corpus placed on the host (its tokens pinned in host memory and streamed
// to the GPU per search on the GPU backend) ranks like the reference, and
// reports its streamed bytes.
TEST_F(E2eTest, HostPlacedCorpusMatchesTheReference) {
  const std::string d = dir_.string();
  ASSERT_EQ(
      RunCommand(Ctl(absl::StrCat(
                     "generate --out ", d,
                     " --docs 300 --dim 64 --min-tokens 4 --max-tokens 60 "
                     "--queries 1 --query-tokens 16 --seed 9")))
          .first,
      0);
  ASSERT_EQ(
      RunCommand(Ctl("create --name host --dim 64 --placement host")).first, 0);
  auto [rc, out] = RunCommand(Ctl(absl::StrCat(
      "add --corpus host --tokens ", d, "/tokens.npy --cu-seqlens ", d,
      "/cu_seqlens.npy --ids ", d, "/ids.txt --chunk-mb 0.05")));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = RunCommand(Ctl("--json list"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"placement\":\"host\""), std::string::npos) << out;
  EXPECT_EQ(out.find("\"streamed_bytes\":0"), std::string::npos) << out;
  NpyArray q = ReadNpy(dir_ / "query_0.npy").value();
  std::vector<float> query(q.num_elements());
  ConvertToFloat(q.data.data(), DType::kFloat32, 0, q.num_elements(),
                 query.data());
  std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
      "--json query --corpus host --query ", d, "/query_0.npy --top-k 20")));
  ASSERT_EQ(rc, 0) << out;
  ExpectSame(ParseResults(out), Reference(dir_, query, 64, 20, {}, {}));
  std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
      "--json query --corpus host --query ", d,
      "/query_0.npy --top-k 10 --candidates-file ", d, "/candidates_0.txt")));
  ASSERT_EQ(rc, 0) << out;
  std::vector<std::string> candidates;
  std::ifstream in(dir_ / "candidates_0.txt");
  for (std::string line; std::getline(in, line);) candidates.push_back(line);
  ExpectSame(ParseResults(out), Reference(dir_, query, 64, 10, candidates, {}));
}

// Int8 corpora through maxsimctl: created with --layout int8 (and
// --quantize-queries), filled by `add`, described by `get` and `list`, and
// ranked like the reference over the quantised files in a scan and a
// rerank; a GPU server serves the layout at any width, with or without
// the Hopper kernels (the mma.sync kernels widen the codes).
TEST_F(E2eTest, Int8CorporaThroughMaxsimctlMatchTheReference) {
  const std::string d = dir_.string();
  // Usage errors, caught before any call.
  EXPECT_EQ(
      RunCommand(Ctl("create --name x --dim 64 --layout int8 --dtype bfloat16 "
                     "2>&1"))
          .first,
      2);
  EXPECT_EQ(
      RunCommand(Ctl("create --name x --dim 64 --quantize-queries 2>&1")).first,
      2);
  EXPECT_EQ(RunCommand(Ctl("create --name x --dim 64 --layout plaid --dtype "
                           "float16 2>&1"))
                .first,
            2);
  EXPECT_EQ(
      RunCommand(Ctl("create --name x --dim 64 --layout other 2>&1")).first, 2);
  auto [rc, out] = RunCommand(Ctl(
      absl::StrCat("generate --out ", d,
                   " --docs 300 --dim 64 --min-tokens 1 "
                   "--max-tokens 50 --queries 1 --query-tokens 16 --seed 13")));
  ASSERT_EQ(rc, 0) << out;
  NpyArray q = ReadNpy(dir_ / "query_0.npy").value();
  std::vector<float> query(q.num_elements());
  ConvertToFloat(q.data.data(), DType::kFloat32, 0, q.num_elements(),
                 query.data());
  std::vector<std::string> candidates;
  {
    std::ifstream in(dir_ / "candidates_0.txt");
    for (std::string line; std::getline(in, line);) candidates.push_back(line);
  }
  for (bool quantize : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "quantize_queries " << quantize);
    const std::string name = quantize ? "q8q" : "q8";
    std::tie(rc, out) = RunCommand(
        // At dim 64 no backend prefers quantised queries: the default is
        // float16 ones, and =false says so explicitly.
        Ctl(absl::StrCat(
            "create --name ", name, " --dim 64 --layout int8",
            quantize ? " --quantize-queries" : " --quantize-queries=false")));
    ASSERT_EQ(rc, 0) << out;
    std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
        "add --corpus ", name, " --tokens ", d, "/tokens.npy --cu-seqlens ", d,
        "/cu_seqlens.npy --ids ", d, "/ids.txt --chunk-mb 0.05")));
    ASSERT_EQ(rc, 0) << out;
    std::tie(rc, out) = RunCommand(Ctl("--json get --name " + name));
    ASSERT_EQ(rc, 0) << out;
    EXPECT_NE(out.find("\"layout\":\"int8\""), std::string::npos) << out;
    EXPECT_NE(out.find("\"storage_dtype\":\"int8\""), std::string::npos) << out;
    EXPECT_NE(out.find(absl::StrCat("\"quantize_queries\":",
                                    quantize ? "true" : "false")),
              std::string::npos)
        << out;
    std::tie(rc, out) =
        RunCommand(Ctl(absl::StrCat("--json query --corpus ", name, " --query ",
                                    d, "/query_0.npy --top-k 15")));
    ASSERT_EQ(rc, 0) << out;
    ExpectSame(ParseResults(out),
               Reference(dir_, query, 64, 15, {}, {}, true, quantize));
    std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
        "--json query --corpus ", name, " --query ", d,
        "/query_0.npy --top-k 10 --candidates-file ", d, "/candidates_0.txt")));
    ASSERT_EQ(rc, 0) << out;
    ExpectSame(ParseResults(out),
               Reference(dir_, query, 64, 10, candidates, {}, true, quantize));
  }
  // Left unset, the server picks quantised queries where its backend scores
  // them faster: at dim 128 on a GPU with the Hopper kernels (the int8
  // tensor cores), float16 ones elsewhere.
  std::tie(rc, out) =
      RunCommand(Ctl("--json create --name qdefault --dim 128 --layout int8"));
  ASSERT_EQ(rc, 0) << out;
  const bool prefers =
      ::maxsimd::testing::OnGpu() && GpuBackend::TmaKernelsAvailable(0);
  EXPECT_NE(out.find(absl::StrCat("\"quantize_queries\":",
                                  prefers ? "true" : "false")),
            std::string::npos)
      << out;
  std::tie(rc, out) = RunCommand(Ctl("drop --name qdefault"));
  ASSERT_EQ(rc, 0) << out;
  // `list` shows each corpus's layout.
  std::tie(rc, out) = RunCommand(Ctl("list"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(q8q? +64 +int8 +int8 )")))
      << out;
  std::tie(rc, out) = RunCommand(Ctl("get --name q8q"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(layout +int8\n)"))) << out;
  EXPECT_TRUE(std::regex_search(out, std::regex(R"(quantize_queries +true)")))
      << out;

  // Imports by the server quantise too: the same files rank the same, and
  // a PLAID index decompressed into an int8 corpus (16 wide) finds its
  // document.
  auto server = ::maxsimd::testing::ServerProcess::Start(
      {absl::StrCat("--files_dir=", d)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string ctl = CtlFor((*server)->target(), "");
  std::tie(rc, out) =
      RunCommand(ctl + "create --name imp --dim 64 --layout int8");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = RunCommand(
      ctl +
      "import --corpus imp --tokens tokens.npy --cu-seqlens cu_seqlens.npy "
      "--ids ids.txt");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      RunCommand(ctl + absl::StrCat("--json query --corpus imp --query ", d,
                                    "/query_0.npy --top-k 15"));
  ASSERT_EQ(rc, 0) << out;
  ExpectSame(ParseResults(out),
             Reference(dir_, query, 64, 15, {}, {}, true, false));
  std::tie(rc, out) =
      RunCommand(ctl + "create --name pl8 --dim 16 --layout int8");
  ASSERT_EQ(rc, 0) << out;
  const std::string data = PlaidTestData();
  std::filesystem::copy(data + "/fast_plaid", dir_ / "fp",
                        std::filesystem::copy_options::recursive);
  std::tie(rc, out) = RunCommand(ctl + "import --corpus pl8 --plaid fp");
  ASSERT_EQ(rc, 0) << out;
  const std::vector<float> expected =
      NpyToFloat32(ReadNpy(data + "/expected_tokens.npy").value(), "e").value();
  const std::vector<float> doc2(expected.begin() + 4 * 16,
                                expected.begin() + 8 * 16);
  ASSERT_TRUE(
      WriteNpy((dir_ / "q2.npy").string(), MakeNpyFloat32(doc2, {4, 16})).ok());
  std::tie(rc, out) =
      RunCommand(ctl + absl::StrCat("--json query --corpus pl8 --query ", d,
                                    "/q2.npy --top-k 5"));
  ASSERT_EQ(rc, 0) << out;
  const auto plaid = ParseResults(out);
  ASSERT_EQ(plaid.size(), 5u) << out;
  EXPECT_EQ(plaid[0].first, "2");
  EXPECT_NEAR(plaid[0].second, 4.0, 0.05);  // 4 unit tokens against themselves
}

// The same documents imported from a safetensors file (tokens as F16,
// offsets as I32) rank exactly like the .npy import of the cycle above.
TEST_F(E2eTest, MaxsimctlImportsSafetensors) {
  const std::string d = dir_.string();
  auto [rc, out] = RunCommand(Ctl(
      absl::StrCat("generate --out ", d,
                   " --docs 200 --dim 32 --min-tokens 2 "
                   "--max-tokens 20 --queries 1 --query-tokens 8 --seed 3")));
  ASSERT_EQ(rc, 0) << out;
  NpyArray tokens = ReadNpy(dir_ / "tokens.npy").value();
  std::vector<int64_t> cu =
      NpyToInt64(ReadNpy(dir_ / "cu_seqlens.npy").value(), "cu").value();
  std::vector<float> values = NpyToFloat32(tokens, "tokens").value();
  SafetensorsFile st;
  SafetensorsTensor t;
  t.dtype = "F16";
  t.shape = tokens.shape;
  for (float v : values) {
    const uint16_t h = FloatToHalf(v);
    t.data.append(reinterpret_cast<const char*>(&h), 2);
  }
  st.tensors["tokens"] = t;
  SafetensorsTensor c;
  c.dtype = "I32";
  c.shape = {static_cast<int64_t>(cu.size())};
  for (int64_t v : cu) {
    const int32_t i = static_cast<int32_t>(v);
    c.data.append(reinterpret_cast<const char*>(&i), 4);
  }
  st.tensors["cu_seqlens"] = c;
  std::ofstream(dir_ / "docs.safetensors", std::ios::binary)
      << SerializeSafetensors(st);

  for (const char* name : {"npy", "st"}) {
    ASSERT_EQ(RunCommand(Ctl(absl::StrCat("create --name ", name, " --dim 32")))
                  .first,
              0);
  }
  // The .npy import of the same values, rounded to fp16 like the other.
  std::tie(rc, out) = RunCommand(Ctl(
      absl::StrCat("add --corpus npy --tokens ", d, "/tokens.npy --cu-seqlens ",
                   d, "/cu_seqlens.npy --ids ", d, "/ids.txt")));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      RunCommand(Ctl(absl::StrCat("add --corpus st --safetensors ", d,
                                  "/docs.safetensors --ids ", d, "/ids.txt")));
  ASSERT_EQ(rc, 0) << out;
  std::string results[2];
  for (int i = 0; i < 2; ++i) {
    std::tie(rc, results[i]) = RunCommand(
        Ctl(absl::StrCat("--json query --corpus ", i == 0 ? "npy" : "st",
                         " --query ", d, "/query_0.npy --top-k 20")));
    ASSERT_EQ(rc, 0) << results[i];
  }
  EXPECT_EQ(ParseResults(results[0]), ParseResults(results[1]));
  EXPECT_EQ(ParseResults(results[1]).size(), 20u);
  // Both inputs, or neither, is a usage error.
  std::tie(rc, out) = RunCommand(
      Ctl(absl::StrCat("add --corpus st --ids ", d, "/ids.txt 2>&1")));
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("--safetensors"), std::string::npos) << out;

  // The server imports the same files itself (paths under --files_dir).
  auto server = ::maxsimd::testing::ServerProcess::Start(
      {absl::StrCat("--files_dir=", d)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string ctl = CtlFor((*server)->target(), "");
  for (const char* name : {"viaserver_npy", "viaserver_st"}) {
    ASSERT_EQ(
        RunCommand(ctl + absl::StrCat("create --name ", name, " --dim 32"))
            .first,
        0);
  }
  std::tie(rc, out) =
      RunCommand(ctl +
                 "import --corpus viaserver_npy --tokens tokens.npy "
                 "--cu-seqlens cu_seqlens.npy --ids ids.txt");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      RunCommand(ctl +
                 "import --corpus viaserver_st --safetensors docs.safetensors "
                 "--ids ids.txt");
  ASSERT_EQ(rc, 0) << out;
  for (const char* name : {"viaserver_npy", "viaserver_st"}) {
    std::tie(rc, out) = RunCommand(
        ctl + absl::StrCat("--json query --corpus ", name, " --query ", d,
                           "/query_0.npy --top-k 20"));
    ASSERT_EQ(rc, 0) << out;
    EXPECT_EQ(ParseResults(out), ParseResults(results[0])) << name;
  }
  std::tie(rc, out) = RunCommand(
      ctl +
      "import --corpus viaserver_st --safetensors ../x --ids ids.txt 2>&1");
  EXPECT_NE(rc, 0) << out;
  EXPECT_NE(out.find("INVALID_ARGUMENT"), std::string::npos) << out;
}

// A corpus created with --pool-factor 2 stores ceil(n / 2) rows per
// document whether maxsimctl streams the documents or the server imports
// the files, ranks as a reference over the pooled documents
// (PoolTokenBatch, rounded to float16), and keeps its factor across a
// restart: documents added after it are pooled too.
TEST_F(E2eTest, PooledCorpusThroughAddImportAndRestart) {
  const std::string d = dir_.string();
  const std::string data = (dir_ / "data").string();
  auto [rc, out] = RunCommand(Ctl(
      absl::StrCat("generate --out ", d,
                   " --docs 150 --dim 32 --min-tokens 1 "
                   "--max-tokens 40 --queries 1 --query-tokens 8 --seed 7")));
  ASSERT_EQ(rc, 0) << out;
  NpyArray tokens_npy = ReadNpy(dir_ / "tokens.npy").value();
  const std::vector<float> tokens = NpyToFloat32(tokens_npy, "tokens").value();
  const std::vector<int64_t> cu =
      NpyToInt64(ReadNpy(dir_ / "cu_seqlens.npy").value(), "cu").value();
  int64_t want_tokens = 0;
  for (size_t i = 0; i + 1 < cu.size(); ++i) {
    want_tokens += (cu[i + 1] - cu[i] + 1) / 2;
  }
  NpyArray q = ReadNpy(dir_ / "query_0.npy").value();
  const std::vector<float> query = NpyToFloat32(q, "query").value();
  const std::vector<std::pair<std::string, float>> reference =
      Reference(dir_, query, 32, 20, {}, {}, false, false, /*pool_factor=*/2);

  auto info_has = [](const std::string& json, const std::string& field) {
    return json.find(field) != std::string::npos;
  };
  const std::string query_args =
      absl::StrCat(" --query ", d, "/query_0.npy --top-k 20");
  {
    auto server = ::maxsimd::testing::ServerProcess::Start(
        {absl::StrCat("--data_dir=", data), absl::StrCat("--files_dir=", d)});
    ASSERT_TRUE(server.ok()) << server.status();
    const std::string ctl = CtlFor((*server)->target(), "");
    for (const char* name : {"streamed", "imported"}) {
      std::tie(rc, out) =
          RunCommand(ctl + absl::StrCat("--json create --name ", name,
                                        " --dim 32 "
                                        "--pool-factor 2"));
      ASSERT_EQ(rc, 0) << out;
      EXPECT_TRUE(info_has(out, "\"pool_factor\":2")) << out;
    }
    std::tie(rc, out) =
        RunCommand(ctl + absl::StrCat("add --corpus streamed --tokens ", d,
                                      "/tokens.npy --cu-seqlens ", d,
                                      "/cu_seqlens.npy --ids ", d,
                                      "/ids.txt --chunk-mb 0.02"));
    ASSERT_EQ(rc, 0) << out;
    std::tie(rc, out) =
        RunCommand(ctl +
                   "import --corpus imported --tokens tokens.npy --cu-seqlens "
                   "cu_seqlens.npy --ids ids.txt");
    ASSERT_EQ(rc, 0) << out;
    for (const char* name : {"streamed", "imported"}) {
      auto info = (*server)->NewClient()->GetCorpus(name);
      ASSERT_TRUE(info.ok()) << info.status();
      EXPECT_EQ(info->pool_factor(), 2) << name;
      EXPECT_EQ(info->num_documents(), 150) << name;
      EXPECT_EQ(info->num_tokens(), want_tokens) << name;
      std::tie(rc, out) = RunCommand(
          ctl + absl::StrCat("--json query --corpus ", name, query_args));
      ASSERT_EQ(rc, 0) << out;
      ExpectSame(ParseResults(out), reference);
    }
    EXPECT_EQ((*server)->TerminateAndWait(), 0);
  }
  auto server = ::maxsimd::testing::ServerProcess::Start(
      {absl::StrCat("--data_dir=", data)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string ctl = CtlFor((*server)->target(), "");
  auto client = (*server)->NewClient();
  auto info = client->GetCorpus("streamed");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->pool_factor(), 2);
  EXPECT_EQ(info->num_tokens(), want_tokens);
  std::tie(rc, out) = RunCommand(
      ctl + absl::StrCat("--json query --corpus streamed", query_args));
  ASSERT_EQ(rc, 0) << out;
  ExpectSame(ParseResults(out), reference);
  // One more document of 5 tokens keeps 3.
  DocumentBatch more;
  more.dim = 32;
  more.ids = {"late"};
  more.cu_seqlens = {0, 5};
  more.tokens.assign(tokens.begin(), tokens.begin() + 5 * 32);
  ASSERT_TRUE(client->AddDocuments("streamed", more).ok());
  info = client->GetCorpus("streamed");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_tokens(), want_tokens + 3);
}

// A PLAID index (tests/data/plaid: the same 5 documents in ColBERT's and in
// fast-plaid's layout) added by maxsimctl and imported by the server rank
// the same; a query of document 2's own tokens finds it first.
TEST_F(E2eTest, MaxsimctlImportsPlaidIndexes) {
  const std::string d = dir_.string();
  const std::string data = PlaidTestData();
  std::filesystem::copy(data + "/fast_plaid", dir_ / "fp",
                        std::filesystem::copy_options::recursive);
  std::ofstream(dir_ / "pids.txt") << "p0\np1\np2\np3\np4\n";
  std::ofstream(dir_ / "two.txt") << "p0\np1\n";
  const std::vector<float> expected =
      NpyToFloat32(ReadNpy(data + "/expected_tokens.npy").value(), "e").value();
  const std::vector<float> query(expected.begin() + 4 * 16,
                                 expected.begin() + 8 * 16);
  ASSERT_TRUE(
      WriteNpy((dir_ / "q.npy").string(), MakeNpyFloat32(query, {4, 16})).ok());
  const std::string query_args =
      absl::StrCat(" --query ", d, "/q.npy --top-k 5");

  ASSERT_EQ(RunCommand(Ctl("create --name pl --dim 16")).first, 0);
  auto [rc, out] = RunCommand(
      Ctl(absl::StrCat("add --corpus pl --plaid ", data, "/colbert")));
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      RunCommand(Ctl(absl::StrCat("--json query --corpus pl", query_args)));
  ASSERT_EQ(rc, 0) << out;
  const auto client_side = ParseResults(out);
  ASSERT_EQ(client_side.size(), 5u) << out;
  EXPECT_EQ(client_side[0].first, "2");
  EXPECT_NEAR(client_side[0].second, 4.0, 0.02);

  auto server = ::maxsimd::testing::ServerProcess::Start(
      {absl::StrCat("--files_dir=", d)});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string ctl = CtlFor((*server)->target(), "");
  for (const char* name : {"pl_fp", "pl_ids"}) {
    ASSERT_EQ(
        RunCommand(ctl + absl::StrCat("create --name ", name, " --dim 16"))
            .first,
        0);
  }
  std::tie(rc, out) = RunCommand(ctl + "import --corpus pl_fp --plaid fp");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      RunCommand(ctl + absl::StrCat("--json query --corpus pl_fp", query_args));
  ASSERT_EQ(rc, 0) << out;
  ExpectSame(ParseResults(out), client_side);

  std::tie(rc, out) =
      RunCommand(ctl + "import --corpus pl_ids --plaid fp --ids pids.txt");
  ASSERT_EQ(rc, 0) << out;
  std::tie(rc, out) = RunCommand(
      ctl + absl::StrCat("--json query --corpus pl_ids", query_args));
  ASSERT_EQ(rc, 0) << out;
  ASSERT_FALSE(ParseResults(out).empty()) << out;
  EXPECT_EQ(ParseResults(out)[0].first, "p2");

  // Ids that do not fit, a path outside --files_dir, no source at all.
  std::tie(rc, out) =
      RunCommand(ctl + "import --corpus pl_ids --plaid fp --ids two.txt 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("INVALID_ARGUMENT"), std::string::npos) << out;
  EXPECT_NE(out.find("two.txt"), std::string::npos) << out;
  std::tie(rc, out) =
      RunCommand(ctl + "import --corpus pl_ids --plaid ../fp 2>&1");
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("plaid_dir"), std::string::npos) << out;
  std::tie(rc, out) = RunCommand(ctl + "import --corpus pl_ids 2>&1");
  EXPECT_EQ(rc, 2) << out;
  EXPECT_NE(out.find("--ids"), std::string::npos) << out;
}

TEST_F(E2eTest, DataDirKeepsCorporaAndAliasesAcrossRestarts) {
  const std::string data = (dir_ / "data").string();
  DocumentBatch docs;
  docs.dim = 8;
  docs.cu_seqlens = {0};
  std::mt19937_64 rng(5);
  std::normal_distribution<float> normal;
  for (int i = 0; i < 40; ++i) {
    docs.ids.push_back(absl::StrCat("d", i));
    docs.cu_seqlens.push_back(docs.cu_seqlens.back() + 1 + i % 5);
  }
  docs.tokens.resize(docs.cu_seqlens.back() * 8);
  for (float& v : docs.tokens) v = normal(rng);
  Query q;
  q.corpus = "prod";  // through the alias
  q.dim = 8;
  q.tokens.resize(4 * 8);
  for (float& v : q.tokens) v = normal(rng);
  q.top_k = 10;

  std::string before;
  {
    auto server = ::maxsimd::testing::ServerProcess::Start(
        {absl::StrCat("--data_dir=", data)});
    ASSERT_TRUE(server.ok()) << server.status();
    auto client = (*server)->NewClient();
    v1::CreateCorpusRequest create;
    create.set_name("v1");
    create.set_dim(8);
    ASSERT_TRUE(client->CreateCorpus(create).ok());
    ASSERT_TRUE(client->AddDocuments("v1", docs).ok());
    ASSERT_TRUE(client->DeleteDocuments("v1", {"d3", "d7"}).ok());
    auto [rc, out] = RunCommand(
        CtlFor((*server)->target(), "alias --alias prod --corpus v1"));
    ASSERT_EQ(rc, 0) << out;
    auto got = client->Rerank(q);
    ASSERT_TRUE(got.ok()) << got.status();
    ASSERT_EQ(got->results_size(), 10);
    before = got->SerializeAsString();
    // Not the deleted ones.
    for (const auto& r : got->results()) {
      EXPECT_NE(r.id(), "d3");
      EXPECT_NE(r.id(), "d7");
    }
    EXPECT_EQ((*server)->TerminateAndWait(), 0);
  }
  const std::string snaps = (dir_ / "snaps").string();
  std::filesystem::create_directories(snaps);
  auto server = ::maxsimd::testing::ServerProcess::Start(
      {absl::StrCat("--data_dir=", data), absl::StrCat("--files_dir=", snaps)});
  ASSERT_TRUE(server.ok()) << server.status();
  auto client = (*server)->NewClient();
  auto aliases = client->ListAliases();
  ASSERT_TRUE(aliases.ok()) << aliases.status();
  ASSERT_EQ(aliases->size(), 1u);
  EXPECT_EQ((*aliases)[0].alias(), "prod");
  EXPECT_EQ((*aliases)[0].corpus(), "v1");
  auto info = client->GetCorpus("v1");
  ASSERT_TRUE(info.ok()) << info.status();
  EXPECT_EQ(info->num_documents(), 38);
  auto got = client->Rerank(q);
  ASSERT_TRUE(got.ok()) << got.status();
  v1::RerankResponse after = *got;
  after.clear_timing();
  v1::RerankResponse was;
  ASSERT_TRUE(was.ParseFromString(before));
  was.clear_timing();
  EXPECT_EQ(after.SerializeAsString(), was.SerializeAsString());

  // A snapshot of the corpus, loaded back as another corpus, ranks alike.
  auto docs_in_snapshot = client->SnapshotCorpus("prod", "nightly/v1");
  ASSERT_TRUE(docs_in_snapshot.ok()) << docs_in_snapshot.status();
  EXPECT_EQ(*docs_in_snapshot, 38);
  auto loaded = client->LoadCorpus("nightly/v1", "v1-copy");
  ASSERT_TRUE(loaded.ok()) << loaded.status();
  EXPECT_EQ(loaded->num_documents(), 38);
  q.corpus = "v1-copy";
  auto copy = client->Rerank(q);
  ASSERT_TRUE(copy.ok()) << copy.status();
  copy->clear_timing();
  EXPECT_EQ(copy->SerializeAsString(), was.SerializeAsString());
  EXPECT_EQ(client->LoadCorpus("../escape", "x").status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(E2eTest, SigtermDrainsInFlightRequestsAndExitsZero) {
  // A corpus big enough that a batch of scans takes a few seconds on the
  // CPU (sanitizer builds score slower: a smaller one); on a GPU the batch
  // still waits out --max_queue_delay (1 s).
  DocumentBatch docs;
  docs.dim = 128;
  docs.cu_seqlens = {0};
  std::mt19937_64 rng(11);
  std::normal_distribution<float> normal;
  for (int i = 0; i < 3000 / kSanitizerSlowdown; ++i) {
    docs.ids.push_back(absl::StrCat("d", i));
    docs.cu_seqlens.push_back(docs.cu_seqlens.back() + 200);
  }
  docs.tokens.resize(docs.cu_seqlens.back() * 128);
  for (float& v : docs.tokens) v = normal(rng);
  v1::CreateCorpusRequest create;
  create.set_name("big");
  create.set_dim(128);
  ASSERT_TRUE(client_->CreateCorpus(create).ok());
  ASSERT_TRUE(client_->AddDocuments("big", docs).ok());

  std::vector<Query> batch(16);
  for (Query& q : batch) {
    q.corpus = "big";
    q.dim = 128;
    q.tokens.resize(32 * 128);
    for (float& v : q.tokens) v = normal(rng);
    q.top_k = 5;
  }
  using Clock = std::chrono::steady_clock;
  auto pending = std::async(std::launch::async, [&] {
    auto r = client_->RerankBatch(batch);
    return std::make_pair(r.status(), Clock::now());
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const auto sigterm_at = Clock::now();
  server_->Signal(SIGTERM);
  const auto [status, finished_at] = pending.get();
  EXPECT_TRUE(status.ok()) << status;
  EXPECT_GT(finished_at, sigterm_at)
      << "the batch finished before SIGTERM; make the workload larger";
  EXPECT_EQ(server_->WaitForExit(absl::Seconds(120)), 0);
}

// ---------------------------------------------------------------------------
// maxsimctl keeps ids byte for byte and sends bfloat16 queries as bfloat16.

// `arg` as one word of a /bin/sh command line.
std::string ShellQuote(absl::string_view arg) {
  std::string out = "'";
  for (char c : arg) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out.push_back(c);
    }
  }
  return out + "'";
}

// The ids of maxsimctl's --json query output, in order, unescaped (its JSON
// strings escape '"', '\\', \n, \r, \t and other control characters as
// \u00XX; every other byte is itself).
std::vector<std::string> ResultIds(const std::string& json) {
  std::vector<std::string> ids;
  const std::string key = "\"id\":\"";
  for (size_t at = json.find(key); at != std::string::npos;
       at = json.find(key, at)) {
    at += key.size();
    std::string id;
    while (at < json.size() && json[at] != '"') {
      char c = json[at++];
      if (c == '\\' && at < json.size()) {
        const char e = json[at++];
        switch (e) {
          case 'n':
            c = '\n';
            break;
          case 'r':
            c = '\r';
            break;
          case 't':
            c = '\t';
            break;
          case 'u':
            c = static_cast<char>(std::stoi(json.substr(at, 4), nullptr, 16));
            at += 4;
            break;
          default:
            c = e;
        }
      }
      id.push_back(c);
    }
    ids.push_back(std::move(id));
  }
  return ids;
}

std::vector<std::string> Sorted(std::vector<std::string> v) {
  std::sort(v.begin(), v.end());
  return v;
}

void WriteFile(const std::filesystem::path& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// maxsimctl: $MAXSIMD_E2E_CTL_BIN when set, as for E2eTest, else this
// build's.
std::string CtlBinary() {
  const char* ctl = std::getenv("MAXSIMD_E2E_CTL_BIN");
  return ctl != nullptr ? ctl : MAXSIMCTL_BIN;
}

// A temporary directory, and a server with the default --max_queue_delay
// (E2eTest's 1 s would hold each of these tests' queries for a second).
class MaxsimctlTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("maxsimctl_e2e_", getpid(), "_", ++counter_);
    std::filesystem::create_directories(dir_);
    auto server = ::maxsimd::testing::ServerProcess::Start({});
    ASSERT_TRUE(server.ok()) << server.status();
    server_ = *std::move(server);
  }
  void TearDown() override {
    server_.reset();
    std::filesystem::remove_all(dir_);
  }
  std::string Ctl(const std::string& args) const {
    return absl::StrCat(CtlBinary(), " --target=", server_->target(), " ",
                        args);
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
  std::unique_ptr<::maxsimd::testing::ServerProcess> server_;
};

// Ids that a trimming or line-skipping reader would change, stored from an
// ids file and returned by scans and reranks exactly; named in
// --candidates, --candidates-file, --ids and --ids-file exactly. The ids
// file ends one line in "\r\n" (a line ending) and holds a "\r" inside an
// id (a byte of it).
TEST_F(MaxsimctlTest, KeepsIdsByteExact) {
  const std::string d = dir_.string();
  const std::vector<std::string> ids = {" lead",
                                        "trail ",
                                        "tab\there",
                                        "#not a comment",
                                        "comma,in",
                                        "\xc3\xbcnic\xc3\xb6"
                                        "de",
                                        "crlf",
                                        "mid\rcr"};
  auto [rc, out] = RunCommand(Ctl(absl::StrCat(
      "generate --out ", d,
      " --docs 8 --dim 8 --min-tokens 2 --max-tokens 4 --queries 1 "
      "--query-tokens 2 --seed 4")));
  ASSERT_EQ(rc, 0) << out;
  std::string lines;
  for (const std::string& id : ids) {
    absl::StrAppend(&lines, id, id == "crlf" ? "\r\n" : "\n");
  }
  WriteFile(dir_ / "ids.txt", lines);
  ASSERT_EQ(RunCommand(Ctl("create --name exact --dim 8")).first, 0);
  std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
      "add --corpus exact --tokens ", d, "/tokens.npy --cu-seqlens ", d,
      "/cu_seqlens.npy --ids ", d, "/ids.txt 2>&1")));
  ASSERT_EQ(rc, 0) << out;
  const std::string query = absl::StrCat("--json query --corpus exact --query ",
                                         d, "/query_0.npy --top-k 8");

  // A scan returns every id as stored.
  std::tie(rc, out) = RunCommand(Ctl(query + " 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Sorted(ResultIds(out)), Sorted(ids)) << out;

  // Candidates from a file (spaces and a CRLF line ending) and from the
  // command line (split at ',' only).
  WriteFile(dir_ / "cands.txt", " lead\r\ntrail \ntab\there");
  std::tie(rc, out) = RunCommand(
      Ctl(absl::StrCat(query, " --candidates-file ", d, "/cands.txt 2>&1")));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Sorted(ResultIds(out)), Sorted({" lead", "trail ", "tab\there"}))
      << out;
  std::tie(rc, out) = RunCommand(
      Ctl(absl::StrCat(query, " --candidates ",
                       ShellQuote("tab\there, lead,mid\rcr"), " 2>&1")));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Sorted(ResultIds(out)), Sorted({"tab\there", " lead", "mid\rcr"}))
      << out;

  // Deletes by the exact ids: "lead" and "trail" are not ids of the corpus.
  std::tie(rc, out) = RunCommand(
      Ctl(absl::StrCat("--json delete --corpus exact --ids ",
                       ShellQuote("trail ,lead"), " --ignore-missing 2>&1")));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"deleted\":1,\"missing\":1"), std::string::npos) << out;
  WriteFile(dir_ / "del.txt", "comma,in\n");
  std::tie(rc, out) = RunCommand(Ctl(absl::StrCat(
      "--json delete --corpus exact --ids-file ", d, "/del.txt 2>&1")));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("\"deleted\":1,\"missing\":0"), std::string::npos) << out;
  std::tie(rc, out) = RunCommand(Ctl(query + " 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  EXPECT_EQ(Sorted(ResultIds(out)),
            Sorted({" lead", "tab\there", "#not a comment",
                    "\xc3\xbcnic\xc3\xb6"
                    "de",
                    "crlf", "mid\rcr"}))
      << out;
}

// Ids maxsimctl cannot pass on exactly are refused, naming the flag, the
// file and line or the list position, and the id; none of these reach a
// server (there is none at the target).
TEST(MaxsimctlIdsTest, RefusesIdsItCannotPassOnExactly) {
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("maxsimctl_ids_", getpid());
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  // Three documents of one token each.
  ASSERT_TRUE(
      WriteNpy(d + "/t.npy", MakeNpyFloat32({1, 0, 0, 1, 1, 1}, {3, 2})).ok());
  ASSERT_TRUE(WriteNpy(d + "/cu.npy", MakeNpyInt64({0, 1, 2, 3}, {4})).ok());
  ASSERT_TRUE(WriteNpy(d + "/q.npy", MakeNpyFloat32({1, 0}, {1, 2})).ok());
  const std::string ctl = absl::StrCat(CtlBinary(), " --target=127.0.0.1:1 ");
  const std::string add =
      absl::StrCat(ctl, "add --corpus c --tokens ", d, "/t.npy --cu-seqlens ",
                   d, "/cu.npy --ids ", d, "/ids.txt 2>&1");
  struct Case {
    std::string file;
    std::string want;
  };
  const Case cases[] = {
      {"a\nb\n\nc\n", "--ids: '" + d + "/ids.txt' line 3: id \"\" is empty"},
      {"a\n" + std::string(257, 'x') + "\nc",
       "line 2: id \"" + std::string(64, 'x') +
           "...\" (257 bytes) is over the API's limit of 256 bytes"},
      {"a\nb\r\r\nc\n", "line 2: id \"b\\r\" ends in \"\\r\""},
      {"a\nb\xff\nc\n", "line 2: id \"b\\xff\" is not UTF-8"},
      {"\n", "line 1: id \"\" is empty"},
      {"a\nb\n", "'" + d + "/ids.txt' has 2 ids, but the documents number 3"},
      {"a\nb\nc\nd\n", "has 4 ids, but the documents number 3"},
  };
  for (const Case& c : cases) {
    WriteFile(dir / "ids.txt", c.file);
    auto [rc, out] = RunCommand(add);
    EXPECT_EQ(rc, 1) << c.want << "\n" << out;
    EXPECT_NE(out.find(c.want), std::string::npos) << c.want << "\n" << out;
    EXPECT_NE(out.find("INVALID_ARGUMENT"), std::string::npos) << out;
  }
  // Lists on the command line: usage errors (exit 2).
  const std::string query =
      absl::StrCat(ctl, "query --corpus c --query ", d, "/q.npy ");
  const Case lists[] = {
      {query + "--candidates a,,b", "--candidates: id 2 \"\" is empty"},
      {query + "--candidates a,b,", "--candidates: id 3 \"\" is empty"},
      {query + "--candidates ''", "--candidates is empty"},
      {query + "--candidates " + ShellQuote(std::string(300, 'y')),
       "--candidates: id 1 \"" + std::string(64, 'y') + "...\" (300 bytes)"},
      {ctl + "delete --corpus c --ids ,a", "--ids: id 1 \"\" is empty"},
      {ctl + "delete --corpus c", "give --ids, --ids-file or both"},
  };
  for (const Case& c : lists) {
    auto [rc, out] = RunCommand(c.file + " 2>&1");
    EXPECT_EQ(rc, 2) << c.file << "\n" << out;
    EXPECT_NE(out.find(c.want), std::string::npos) << c.want << "\n" << out;
  }
  // Files of candidates and of ids to delete follow --ids' rules; an empty
  // one is not a scan.
  WriteFile(dir / "c.txt", "ok\n\n");
  auto [rc, out] =
      RunCommand(absl::StrCat(query, "--candidates-file ", d, "/c.txt 2>&1"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--candidates-file: '" + d + "/c.txt' line 2: id \"\""),
            std::string::npos)
      << out;
  WriteFile(dir / "c.txt", "");
  std::tie(rc, out) =
      RunCommand(absl::StrCat(query, "--candidates-file ", d, "/c.txt 2>&1"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("holds no ids"), std::string::npos) << out;
  WriteFile(dir / "c.txt", "x\r\r");
  std::tie(rc, out) = RunCommand(
      absl::StrCat(ctl, "delete --corpus c --ids-file ", d, "/c.txt 2>&1"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_NE(out.find("--ids-file: '" + d + "/c.txt' line 1: id \"x\\r\""),
            std::string::npos)
      << out;
  std::filesystem::remove_all(dir);
}

// A Reranker that keeps every request and answers with no results.
class RecordingReranker final : public v1::Reranker::Service {
 public:
  grpc::Status Rerank(grpc::ServerContext*, const v1::RerankRequest* request,
                      v1::RerankResponse* response) override {
    absl::MutexLock lock(&mu_);
    requests_.push_back(*request);
    response->set_request_id(request->request_id());
    return grpc::Status::OK;
  }
  grpc::Status RerankBatch(grpc::ServerContext*,
                           const v1::RerankBatchRequest* request,
                           v1::RerankBatchResponse* response) override {
    absl::MutexLock lock(&mu_);
    for (const v1::RerankRequest& r : request->queries()) {
      requests_.push_back(r);
      response->add_results()->set_request_id(r.request_id());
    }
    return grpc::Status::OK;
  }
  std::vector<v1::RerankRequest> Take() {
    absl::MutexLock lock(&mu_);
    return std::exchange(requests_, {});
  }

 private:
  absl::Mutex mu_;
  std::vector<v1::RerankRequest> requests_ ABSL_GUARDED_BY(mu_);
};

// What maxsimctl puts on the wire for one query: the file's own dtype and
// bytes (bfloat16 from '<V2', '|V2', '<u2' with --query-dtype=bf16 and
// safetensors BF16; float16 and float32 likewise), and candidate ids byte
// for byte. A batch goes through RerankBatch's Queries: bfloat16 widened to
// float32, exactly.
TEST(MaxsimctlQueryTest, SendsOneQueryInItsFilesDtype) {
  RecordingReranker service;
  int port = 0;
  grpc::ServerBuilder builder;
  builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                           &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  ASSERT_NE(server, nullptr);
  const std::filesystem::path dir = std::filesystem::temp_directory_path() /
                                    absl::StrCat("maxsimctl_dtype_", getpid());
  std::filesystem::create_directories(dir);
  const std::string d = dir.string();
  const std::string ctl =
      absl::StrCat(CtlBinary(), " --target=127.0.0.1:", port,
                   " query --corpus c --top-k 3 --query ");

  // [3, 4] values with more bits than bfloat16 keeps, and their bfloat16.
  std::vector<float> values(12);
  std::vector<uint16_t> bf16(12);
  for (int i = 0; i < 12; ++i) {
    values[i] = 1.0f / static_cast<float>(i + 3) - 0.1f * static_cast<float>(i);
    bf16[i] = FloatToBFloat16(values[i]);
  }
  const std::string bits(reinterpret_cast<const char*>(bf16.data()), 24);
  auto npy = [&](const std::string& descr, std::vector<int64_t> shape,
                 const std::string& data) {
    NpyArray a;
    a.descr = descr;
    a.shape = std::move(shape);
    a.data.assign(data.begin(), data.end());
    return a;
  };
  ASSERT_TRUE(WriteNpy(d + "/v.npy", npy("<V2", {3, 4}, bits)).ok());
  ASSERT_TRUE(WriteNpy(d + "/void.npy", npy("|V2", {3, 4}, bits)).ok());
  ASSERT_TRUE(WriteNpy(d + "/u2.npy", npy("<u2", {3, 4}, bits)).ok());
  ASSERT_TRUE(WriteNpy(d + "/f32.npy", MakeNpyFloat32(values, {3, 4})).ok());
  const NpyArray f16 = MakeNpyFloat16(values, {3, 4});
  ASSERT_TRUE(WriteNpy(d + "/f16.npy", f16).ok());
  SafetensorsFile st;
  st.tensors["query"] = SafetensorsTensor{"BF16", {3, 4}, bits};
  st.tensors["other"] = SafetensorsTensor{
      "F16", {3, 4}, std::string(f16.data.begin(), f16.data.end())};
  WriteFile(dir / "q.safetensors", SerializeSafetensors(st));
  SafetensorsFile u16;
  u16.tensors["embeddings"] = SafetensorsTensor{"U16", {3, 4}, bits};
  WriteFile(dir / "u16.safetensors", SerializeSafetensors(u16));
  WriteFile(dir / "cands.txt", "tab\there\r\n a b \n");

  struct Case {
    std::string args;
    v1::DType dtype;
    std::string data;
  };
  const std::string f32_bytes(reinterpret_cast<const char*>(values.data()), 48);
  const Case cases[] = {
      {"v.npy", v1::DTYPE_BFLOAT16, bits},
      {"void.npy", v1::DTYPE_BFLOAT16, bits},
      {"u2.npy --query-dtype=bf16", v1::DTYPE_BFLOAT16, bits},
      {"u2.npy --query_dtype=bfloat16", v1::DTYPE_BFLOAT16, bits},
      {"q.safetensors", v1::DTYPE_BFLOAT16, bits},
      {"u16.safetensors --query-dtype=bf16", v1::DTYPE_BFLOAT16, bits},
      {"q.safetensors --query-tensor other", v1::DTYPE_FLOAT16,
       std::string(f16.data.begin(), f16.data.end())},
      {"f16.npy", v1::DTYPE_FLOAT16,
       std::string(f16.data.begin(), f16.data.end())},
      {"f32.npy", v1::DTYPE_FLOAT32, f32_bytes},
  };
  for (const Case& c : cases) {
    auto [rc, out] = RunCommand(absl::StrCat(
        ctl, d, "/", c.args, " --candidates-file ", d, "/cands.txt 2>&1"));
    ASSERT_EQ(rc, 0) << c.args << "\n" << out;
    const std::vector<v1::RerankRequest> got = service.Take();
    ASSERT_EQ(got.size(), 1u) << c.args;
    EXPECT_EQ(got[0].query().dtype(), c.dtype) << c.args;
    EXPECT_EQ(std::vector<int64_t>(got[0].query().shape().begin(),
                                   got[0].query().shape().end()),
              (std::vector<int64_t>{3, 4}))
        << c.args;
    EXPECT_EQ(got[0].query().data(), c.data) << c.args;
    EXPECT_EQ(std::vector<std::string>(got[0].candidate_ids().begin(),
                                       got[0].candidate_ids().end()),
              (std::vector<std::string>{"tab\there", " a b "}))
        << c.args;
  }

  // A batch [2, 3, 2] of bfloat16: one RerankBatch, its values exact.
  ASSERT_TRUE(WriteNpy(d + "/batch.npy", npy("<V2", {2, 3, 2}, bits)).ok());
  auto [rc, out] = RunCommand(absl::StrCat(ctl, d, "/batch.npy 2>&1"));
  ASSERT_EQ(rc, 0) << out;
  std::vector<v1::RerankRequest> got = service.Take();
  ASSERT_EQ(got.size(), 2u);
  for (int q = 0; q < 2; ++q) {
    EXPECT_EQ(got[q].query().dtype(), v1::DTYPE_FLOAT32);
    ASSERT_EQ(got[q].query().data().size(), 24u);
    for (int i = 0; i < 6; ++i) {
      float v;
      std::memcpy(&v, got[q].query().data().data() + 4 * i, 4);
      EXPECT_EQ(v, BFloat16ToFloat(bf16[q * 6 + i])) << q << " " << i;
    }
  }

  // Refusals name the file, and the flag that would have helped.
  const Case refusals[] = {
      {"u2.npy",
       {},
       "got '<u2'; for bfloat16 bits in a uint16 array give "
       "--query-dtype=bfloat16"},
      {"f32.npy --query-dtype=bf16",
       {},
       "--query-dtype=bfloat16, but '" + d + "/f32.npy' holds float32"},
      {"q.safetensors --query-tensor nope",
       {},
       "no tensor \"nope\" (it has \"other\", \"query\")"},
      {"u16.safetensors",
       {},
       "tensor \"embeddings\" has dtype U16; expected F32, F16 or BF16; for "
       "bfloat16 bits in a uint16 array give --query-dtype=bfloat16"},
      {"v.npy --query-tensor query", {}, "--query-tensor is for safetensors"},
      {"cands.txt",
       {},
       "is not .npy (no \\x93NUMPY magic), and not "
       "safetensors"},
  };
  for (const Case& c : refusals) {
    std::tie(rc, out) = RunCommand(absl::StrCat(ctl, d, "/", c.args, " 2>&1"));
    EXPECT_NE(rc, 0) << c.args << "\n" << out;
    EXPECT_NE(out.find(c.data), std::string::npos) << c.data << "\n" << out;
  }
  EXPECT_TRUE(service.Take().empty());
  server->Shutdown();
  std::filesystem::remove_all(dir);
}

// A bfloat16 query ranks like its float32 equivalent (the same values) on
// the real server, from every encoding: one query (scan and rerank) and a
// batch.
TEST_F(MaxsimctlTest, Bfloat16QueriesRankLikeFloat32) {
  const std::string d = dir_.string();
  auto [rc, out] = RunCommand(
      Ctl(absl::StrCat("generate --out ", d,
                       " --docs 300 --dim 32 --min-tokens 2 --max-tokens 30 "
                       "--queries 2 --query-tokens 8 --seed 7")));
  ASSERT_EQ(rc, 0) << out;
  ASSERT_EQ(RunCommand(Ctl("create --name bf --dim 32")).first, 0);
  std::tie(rc, out) = RunCommand(Ctl(
      absl::StrCat("add --corpus bf --tokens ", d, "/tokens.npy --cu-seqlens ",
                   d, "/cu_seqlens.npy --ids ", d, "/ids.txt")));
  ASSERT_EQ(rc, 0) << out;

  // Both queries rounded to bfloat16, and those values as float32.
  std::string bits;
  std::vector<float> widened;
  for (int q = 0; q < 2; ++q) {
    const std::vector<float> values =
        NpyToFloat32(ReadNpy(dir_ / absl::StrCat("query_", q, ".npy")).value(),
                     "q")
            .value();
    for (float v : values) {
      const uint16_t b = FloatToBFloat16(v);
      bits.append(reinterpret_cast<const char*>(&b), 2);
      widened.push_back(BFloat16ToFloat(b));
    }
  }
  const std::string one = bits.substr(0, 8 * 32 * 2);
  auto bf16_npy = [](const char* descr, std::vector<int64_t> shape,
                     const std::string& data) {
    NpyArray a;
    a.descr = descr;
    a.shape = std::move(shape);
    a.data.assign(data.begin(), data.end());
    return a;
  };
  ASSERT_TRUE(WriteNpy(d + "/f32.npy",
                       MakeNpyFloat32(std::vector<float>(widened.begin(),
                                                         widened.begin() + 256),
                                      {8, 32}))
                  .ok());
  ASSERT_TRUE(WriteNpy(d + "/v.npy", bf16_npy("<V2", {8, 32}, one)).ok());
  ASSERT_TRUE(WriteNpy(d + "/void.npy", bf16_npy("|V2", {8, 32}, one)).ok());
  ASSERT_TRUE(WriteNpy(d + "/u2.npy", bf16_npy("<u2", {8, 32}, one)).ok());
  SafetensorsFile st;
  st.tensors["query"] = SafetensorsTensor{"BF16", {8, 32}, one};
  WriteFile(dir_ / "q.safetensors", SerializeSafetensors(st));
  ASSERT_TRUE(
      WriteNpy(d + "/batch_f32.npy", MakeNpyFloat32(widened, {2, 8, 32})).ok());
  ASSERT_TRUE(
      WriteNpy(d + "/batch_v.npy", bf16_npy("<V2", {2, 8, 32}, bits)).ok());

  for (const std::string& rerank :
       {std::string(),
        absl::StrCat(" --candidates-file ", d, "/candidates_0.txt")}) {
    auto ranked = [&](const std::string& args) {
      auto [rc, out] = RunCommand(
          Ctl(absl::StrCat("--json query --corpus bf --top-k 20 --query ", d,
                           "/", args, rerank, " 2>&1")));
      EXPECT_EQ(rc, 0) << args << "\n" << out;
      return ParseResults(out);
    };
    const auto want = ranked("f32.npy");
    ASSERT_EQ(want.size(), 20u);
    for (const char* args :
         {"v.npy", "void.npy", "u2.npy --query-dtype=bf16", "q.safetensors"}) {
      EXPECT_EQ(ranked(args), want) << args << rerank;
    }
    const auto batch = ranked("batch_f32.npy");
    ASSERT_EQ(batch.size(), 40u);
    EXPECT_EQ(ranked("batch_v.npy"), batch) << rerank;
  }
}

}  // namespace
}  // namespace maxsimd
