// Fuzzes request decoding and validation (server/request_decoder.h) from
// raw protobuf bytes, as the services see them after gRPC: the bytes are
// parsed as a message and validated against a live corpus snapshot with
// the server's default limits (its flags' defaults).
//
// Input: one option byte, then the message's wire bytes.
//   bits 0-1: 0 and 3 RerankRequest (Rerank, RerankStream), 1
//             RerankBatchRequest, 2 AddDocumentsRequest (one message of a
//             stream: DecodeTensor and DocumentBuilder::Add, as
//             AdminService does);
//   bits 2-3: the corpus: 0 and 3 dense float16 (normalising), 1 int8
//             with queries rounded to float16, 2 PLAID 2-bit (a scan runs
//             PLAID's candidate generation).
// What a successful decode returns is checked against the limits.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "google/protobuf/stubs/logging.h"
#include "index/corpus.h"
#include "index/synthetic.h"
#include "kernels/maxsim_cpu.h"
#include "maxsimd/v1/admin.pb.h"
#include "maxsimd/v1/reranker.pb.h"
#include "server/request_decoder.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using maxsimd::Corpus;
using maxsimd::CorpusConfig;
using maxsimd::CorpusLimits;

struct World {
  std::unique_ptr<maxsimd::Backend> backend;
  std::shared_ptr<Corpus> corpora[3];
  maxsimd::RequestLimits limits;  // the flags' defaults
  CorpusLimits corpus_limits;
};

std::shared_ptr<Corpus> MakeCorpus(maxsimd::Backend* backend,
                                   CorpusConfig config) {
  config.dim = 8;
  std::shared_ptr<Corpus> corpus =
      Corpus::Create(config, CorpusLimits{}, backend).value();
  maxsimd::SyntheticCorpusOptions so;
  so.num_docs = 40;
  so.dim = config.dim;
  so.min_tokens = 1;
  so.max_tokens = 12;
  so.num_clusters = 8;
  so.id_prefix = "d";
  const maxsimd::SyntheticCorpus s = maxsimd::GenerateSyntheticCorpus(so);
  std::vector<int32_t> counts;
  for (size_t i = 0; i + 1 < s.cu_seqlens.size(); ++i) {
    counts.push_back(
        static_cast<int32_t>(s.cu_seqlens[i + 1] - s.cu_seqlens[i]));
  }
  maxsimd::DocumentBuilder b(config, CorpusLimits{});
  MAXSIMD_FUZZ_CHECK(b.Add(s.ids, counts, s.tokens.data(), s.cu_seqlens.back(),
                           maxsimd::DType::kFloat32, "seed")
                         .ok());
  std::optional<maxsimd::PlaidCodec> codec = b.TakeCodec();
  MAXSIMD_FUZZ_CHECK(corpus->Append(b.Take(), std::move(codec)).ok());
  // Deleted documents must be refused as candidates.
  MAXSIMD_FUZZ_CHECK(corpus->Delete({"d3", "d7"}, false).ok());
  return corpus;
}

World* TheWorld() {
  static World* w = [] {
    // Parse failures of fuzzed bytes are the common case; not worth a log
    // line each.
    google::protobuf::SetLogHandler(nullptr);
    auto* w = new World;
    maxsimd::CpuBackendOptions o;
    o.num_threads = 1;
    w->backend = maxsimd::CpuBackend::Create(o).value();
    CorpusConfig dense;
    dense.name = "dense";
    dense.normalize = true;
    w->corpora[0] = MakeCorpus(w->backend.get(), dense);
    CorpusConfig int8;
    int8.name = "int8";
    int8.layout = maxsimd::Layout::kInt8;
    int8.storage_dtype = maxsimd::DType::kInt8;
    w->corpora[1] = MakeCorpus(w->backend.get(), int8);
    CorpusConfig plaid;
    plaid.name = "plaid";
    plaid.layout = maxsimd::Layout::kPlaid;
    plaid.storage_dtype = maxsimd::PlaidDType(2);
    plaid.plaid_centroids = 8;
    w->corpora[2] = MakeCorpus(w->backend.get(), plaid);
    return w;
  }();
  return w;
}

// Invariants of an accepted query.
void CheckDecoded(const maxsimd::DecodedQuery& q,
                  const maxsimd::CorpusSnapshot& snap,
                  const maxsimd::RequestLimits& limits) {
  const int32_t dim = snap.config().dim;
  MAXSIMD_FUZZ_CHECK(q.num_tokens >= 1 &&
                     q.num_tokens <= limits.max_query_tokens);
  MAXSIMD_FUZZ_CHECK(q.tokens.size() ==
                     static_cast<size_t>(q.num_tokens) * dim);
  for (float v : q.tokens) MAXSIMD_FUZZ_CHECK(std::isfinite(v));
  MAXSIMD_FUZZ_CHECK(q.top_k >= 1 && q.top_k <= limits.max_top_k);
  MAXSIMD_FUZZ_CHECK(q.priority >= -maxsimd::kMaxPriority &&
                     q.priority <= maxsimd::kMaxPriority);
  MAXSIMD_FUZZ_CHECK(!q.scan || q.candidates.empty());
  MAXSIMD_FUZZ_CHECK(q.candidates.size() <=
                     static_cast<size_t>(limits.max_candidates));
  for (const maxsimd::DocRef& ref : q.candidates) {
    MAXSIMD_FUZZ_CHECK(ref.segment >= 0 && static_cast<size_t>(ref.segment) <
                                               snap.segments().size());
    const auto& seg = snap.segments()[ref.segment];
    MAXSIMD_FUZZ_CHECK(ref.doc >= 0 && ref.doc < seg->num_docs());
    const maxsimd::TombstoneSet* dead = snap.tombstones(ref.segment);
    MAXSIMD_FUZZ_CHECK(dead == nullptr || !dead->Contains(ref.doc));
  }
}

void Rerank(const std::string& bytes, const Corpus& corpus,
            const maxsimd::RequestLimits& limits) {
  maxsimd::v1::RerankRequest req;
  if (!req.ParseFromString(bytes)) return;
  const auto snap = corpus.Snapshot();
  absl::StatusOr<maxsimd::DecodedQuery> q =
      maxsimd::DecodeQuery(req, *snap, limits, "");
  if (q.ok()) CheckDecoded(*q, *snap, limits);
}

// RerankerService::RerankBatch: the count, then each query in order.
void RerankBatch(const std::string& bytes, const Corpus& corpus,
                 const maxsimd::RequestLimits& limits) {
  maxsimd::v1::RerankBatchRequest req;
  if (!req.ParseFromString(bytes)) return;
  const int n = req.queries_size();
  if (n < 1 || n > limits.max_batch_queries) return;
  const auto snap = corpus.Snapshot();
  for (int i = 0; i < n; ++i) {
    absl::StatusOr<maxsimd::DecodedQuery> q = maxsimd::DecodeQuery(
        req.queries(i), *snap, limits, absl::StrCat("queries[", i, "]"));
    if (!q.ok()) return;
    CheckDecoded(*q, *snap, limits);
  }
}

// One AddDocuments message, as AdminService's stream reactor consumes it.
void AddDocuments(const std::string& bytes, const Corpus& corpus,
                  const CorpusLimits& limits) {
  maxsimd::v1::AddDocumentsRequest req;
  if (!req.ParseFromString(bytes)) return;
  if (req.ids_size() == 0 && !req.has_tokens()) return;
  absl::StatusOr<maxsimd::TensorView> view = maxsimd::DecodeTensor(
      req.tokens(), corpus.config().dim, 1,
      static_cast<int64_t>(req.ids_size()) * limits.max_doc_tokens,
      "AddDocuments message 0: tokens");
  if (!view.ok()) return;
  maxsimd::DocumentBuilder builder(corpus.config(), limits);
  const std::vector<std::string> ids(req.ids().begin(), req.ids().end());
  const std::vector<int32_t> counts(req.token_counts().begin(),
                                    req.token_counts().end());
  if (!builder
           .Add(ids, counts, view->data, view->rows, view->dtype,
                "AddDocuments message 0")
           .ok()) {
    MAXSIMD_FUZZ_CHECK(builder.num_docs() == 0);
    return;
  }
  MAXSIMD_FUZZ_CHECK(builder.num_docs() == req.ids_size() &&
                     builder.num_tokens() == view->rows);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  World* w = TheWorld();
  const std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  const int which = (data[0] >> 2) & 3;
  const Corpus& corpus = *w->corpora[which == 3 ? 0 : which];
  switch (data[0] & 3) {
    case 1:
      RerankBatch(bytes, corpus, w->limits);
      break;
    case 2:
      AddDocuments(bytes, corpus, w->corpus_limits);
      break;
    default:
      Rerank(bytes, corpus, w->limits);
      break;
  }
  return 0;
}
