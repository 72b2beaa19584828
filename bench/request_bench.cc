// request_bench: host-side cost of a rerank request's candidate ids, stage
// by stage, without a network or a GPU. A corpus of --docs one-token
// documents (ids "doc-<n>", as the demo corpora name them) stands on the CPU
// backend; a pool of requests with --candidates distinct random ids each is
// then, request after request:
//   build   filled as the client library fills one (on an arena, one add
//           per id)
//   encode  serialised to wire bytes
//   parse   parsed onto an arena, as the server's call handler does
//   decode  DecodeQuery: every id looked up in the corpus snapshot
//   release both messages freed (the client's request, the call's arena)
// Prints each stage's mean time per request and per id. Only the host's
// memory system and allocator are measured; the index is what decides
// `decode`, so --docs should be the corpus size in question.
//
// Exit status: 0 after a run, 1 when the corpus cannot be built or a
// request does not decode, 2 for bad flags.
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "google/protobuf/arena.h"
#include "index/corpus.h"
#include "kernels/maxsim_cpu.h"
#include "maxsimd/v1/reranker.pb.h"
#include "proto/call_arena.h"
#include "server/request_decoder.h"

ABSL_FLAG(int64_t, docs, 100000, "Documents in the corpus");
ABSL_FLAG(int32_t, candidates, 1000, "Candidate ids per request");
ABSL_FLAG(int32_t, requests, 2000, "Requests timed per stage");
ABSL_FLAG(int32_t, pool, 64, "Distinct requests, cycled through");

namespace maxsimd {
namespace {

using Clock = std::chrono::steady_clock;
constexpr int32_t kDim = 128;
constexpr int32_t kQueryTokens = 32;

double Seconds(Clock::duration d) {
  return std::chrono::duration<double>(d).count();
}

int Run() {
  const int64_t docs = absl::GetFlag(FLAGS_docs);
  const int32_t candidates = absl::GetFlag(FLAGS_candidates);
  const int32_t requests = absl::GetFlag(FLAGS_requests);
  const int32_t pool_size = absl::GetFlag(FLAGS_pool);
  if (docs < 1 || candidates < 1 || candidates > docs || requests < 1 ||
      pool_size < 1) {
    std::fprintf(stderr,
                 "request_bench: need --docs >= --candidates >= 1, "
                 "--requests >= 1, --pool >= 1\n");
    return 2;
  }

  auto backend = CpuBackend::Create({});
  if (!backend.ok()) {
    std::fprintf(stderr, "%s\n", backend.status().ToString().c_str());
    return 1;
  }
  CorpusConfig config;
  config.name = "c";
  config.dim = kDim;
  auto corpus = Corpus::Create(config, CorpusLimits{}, backend->get());
  if (!corpus.ok()) {
    std::fprintf(stderr, "%s\n", corpus.status().ToString().c_str());
    return 1;
  }
  SegmentData data;
  data.dim = kDim;
  data.dtype = DType::kFloat16;
  data.tokens.assign(static_cast<size_t>(docs) * kDim * 2, 0);
  data.cu_seqlens.resize(docs + 1);
  data.ids.reserve(docs);
  for (int64_t d = 0; d < docs; ++d) {
    data.cu_seqlens[d + 1] = d + 1;
    data.ids.push_back(absl::StrCat("doc-", d));
  }
  if (auto added = (*corpus)->Append(std::move(data)); !added.ok()) {
    std::fprintf(stderr, "%s\n", added.status().ToString().c_str());
    return 1;
  }
  const std::shared_ptr<const CorpusSnapshot> snapshot = (*corpus)->Snapshot();

  // Candidate sets: distinct ids, uniformly over the corpus.
  std::mt19937_64 rng(1);
  std::vector<std::vector<std::string>> pool(pool_size);
  for (std::vector<std::string>& ids : pool) {
    std::vector<int64_t> picks;
    picks.reserve(candidates);
    std::uniform_int_distribution<int64_t> any(0, docs - 1);
    while (static_cast<int32_t>(picks.size()) < candidates) {
      picks.push_back(any(rng));
      if (static_cast<int32_t>(picks.size()) == candidates) {
        std::sort(picks.begin(), picks.end());
        picks.erase(std::unique(picks.begin(), picks.end()), picks.end());
      }
    }
    std::shuffle(picks.begin(), picks.end(), rng);
    for (int64_t p : picks) ids.push_back(absl::StrCat("doc-", p));
  }
  const std::vector<float> query(kQueryTokens * kDim, 0.1f);

  RequestLimits limits;
  limits.max_candidates = std::max(limits.max_candidates, candidates);
  std::vector<std::string> wire(pool_size);
  Clock::duration build{}, encode{}, parse{}, decode{}, release{};
  int64_t decoded_ids = 0;
  for (int32_t r = 0; r < requests; ++r) {
    const std::vector<std::string>& ids = pool[r % pool_size];
    const Clock::time_point t0 = Clock::now();
    auto client_arena =
        std::make_unique<google::protobuf::Arena>(CallArenaOptions());
    auto* request = google::protobuf::Arena::CreateMessage<v1::RerankRequest>(
        client_arena.get());
    request->set_corpus("c");
    v1::Tensor* tensor = request->mutable_query();
    tensor->set_dtype(v1::DTYPE_FLOAT32);
    tensor->add_shape(kQueryTokens);
    tensor->add_shape(kDim);
    tensor->set_data(query.data(), query.size() * sizeof(float));
    request->mutable_candidate_ids()->Reserve(candidates);
    for (const std::string& id : ids) request->add_candidate_ids(id);
    const Clock::time_point t1 = Clock::now();
    std::string& bytes = wire[r % pool_size];
    request->SerializeToString(&bytes);
    const Clock::time_point t2 = Clock::now();
    auto arena = std::make_unique<google::protobuf::Arena>(CallArenaOptions());
    auto* parsed =
        google::protobuf::Arena::CreateMessage<v1::RerankRequest>(arena.get());
    const bool ok = parsed->ParseFromString(bytes);
    const Clock::time_point t3 = Clock::now();
    absl::StatusOr<DecodedQuery> q =
        DecodeQuery(*parsed, *snapshot, limits, "");
    const Clock::time_point t4 = Clock::now();
    client_arena.reset();
    arena.reset();
    const Clock::time_point t5 = Clock::now();
    if (!ok || !q.ok()) {
      std::fprintf(stderr, "request %d: %s\n", r,
                   ok ? q.status().ToString().c_str() : "parse failed");
      return 1;
    }
    decoded_ids += static_cast<int64_t>(q->candidates.size());
    build += t1 - t0;
    encode += t2 - t1;
    parse += t3 - t2;
    decode += t4 - t3;
    release += t5 - t4;
  }
  if (decoded_ids != int64_t{requests} * candidates) {
    std::fprintf(stderr, "decoded %lld ids, expected %lld\n",
                 static_cast<long long>(decoded_ids),
                 static_cast<long long>(int64_t{requests} * candidates));
    return 1;
  }
  std::printf("%lld documents, %d candidate ids per request, %d requests\n",
              static_cast<long long>(docs), candidates, requests);
  std::printf("%-8s %12s %10s\n", "stage", "us/request", "ns/id");
  const auto row = [&](const char* name, Clock::duration d) {
    const double s = Seconds(d) / requests;
    std::printf("%-8s %12.1f %10.1f\n", name, s * 1e6, s * 1e9 / candidates);
  };
  row("build", build);
  row("encode", encode);
  row("parse", parse);
  row("decode", decode);
  row("release", release);
  row("total", build + encode + parse + decode + release);
  return 0;
}

}  // namespace
}  // namespace maxsimd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "request_bench [--docs=N] [--candidates=N] [--requests=N]: host cost "
      "of a rerank request's candidate ids, stage by stage");
  absl::ParseCommandLine(argc, argv);
  return maxsimd::Run();
}
