// fidelity_bench: how much of the exact ranking each stored layout keeps.
//
// Builds a clustered synthetic corpus (index/synthetic.h: unit token rows
// around --clusters random centroids, ragged lengths in [--min_tokens,
// --max_tokens]) and --queries queries, each built from the tokens of a
// random document plus noise, so that every query has a cluster of close
// documents and its top 10 is decided by small score gaps. The exact
// ranking is fp32 MaxSim over the fp32 tokens, computed here on the host
// with its own blocked loop (independent of the backend under test) and
// spot-checked against the fp64 oracle (kernels/maxsim_reference.h).
//
// Each layout is then built the way the index builds it (Corpus::Create,
// DocumentBuilder, Corpus::Append: the same rounding and int8 quantisation
// as a served corpus) and searched through the Backend interface:
//
//   int8,  quantize_queries false  (queries rounded to fp16)
//   int8,  quantize_queries true   (queries quantised like documents)
//   fp16 and bf16 dense            (for comparison)
//   plaid2, plaid4                 (PLAID residual compression at 2 and 4
//                                   bits, codec trained on the corpus:
//                                   every document ranked decompressed,
//                                   and the PLAID search, i.e. candidate
//                                   generation with ColBERT's defaults for
//                                   k, then the candidates ranked exactly;
//                                   its overlap is the pipeline's recall@k)
//
// The PLAID codecs are trained as the index trains them for the backend
// (PlaidTrainOptionsFor, index/plaid_train.h): with --backend cpu, k-means
// on the host over a sample of 2^16 tokens (so at most 2048 centroids);
// with --backend gpu, k-means assignments on the GPU over a sample of 2^19
// tokens, for ColBERT's centroid count of the corpus (16384 for the
// default 1.6 M tokens), from random seeds as ColBERT's. The report names
// the trainer and each codec's centroid count.
//
// For each, the table gives the mean top-k overlap with the exact top k
// (|exact ∩ layout| / k, averaged over queries), the fraction of queries
// whose first result is the exact first, the worst query's overlap, and
// where the intruders (results outside the exact top k) come from: "near"
// ones are in the exact top 2k, i.e. swaps across the rank-k boundary,
// "far" ones are not. The exact line also gives the median gap between the
// exact k-th and (k+1)-th scores, the margin a layout's error competes with.
// A layout that the backend refuses (the GPU backend without an int8
// kernel answers UNIMPLEMENTED) is reported with its error.
//
// With --pool_factors, each layout is also built with token pooling at
// ingest (CorpusConfig::pool_factor: each document's tokens clustered into
// ceil(n / factor) means, normalised again) and compared with the same
// exact ranking of the unpooled fp32 corpus; the table gives the tokens the
// pooled corpus keeps. --repeat_fraction makes that share of the tokens
// near-duplicates of earlier tokens of their document (index/synthetic.h),
// the redundancy pooling removes in real documents.
//
// Usage: fidelity_bench [--docs N] [--queries N] [--min_tokens N]
//   [--max_tokens N] [--dim N] [--seed N] [--backend cpu|gpu] [--threads N]
//   [--json PATH] [--min_int8_overlap X]
//   [--layouts int8,fp16,bf16,plaid2,plaid4] [--pool_factors 1,2,3]
//   [--repeat_fraction X] [--repeat_noise X]
//
// Exit status: 0 after a run; 1 when --min_int8_overlap is set and an int8
// row misses it or could not be measured, or when the backend or the JSON
// file cannot be opened; 2 for bad flags.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/types/span.h"
#include "index/corpus.h"
#include "index/plaid_search.h"
#include "index/plaid_train.h"
#include "index/synthetic.h"
#include "index/token_pooling.h"
#include "kernels/backend.h"
#include "kernels/base/status_macros.h"
#include "kernels/base/thread_pool.h"
#include "kernels/gpu_backend.h"
#include "kernels/maxsim_cpu.h"
#include "kernels/maxsim_reference.h"
#include "kernels/topk_cpu.h"

ABSL_FLAG(int64_t, docs, 50000, "Documents in the synthetic corpus");
ABSL_FLAG(int32_t, queries, 100, "Queries");
ABSL_FLAG(int32_t, query_tokens, 32, "Tokens per query");
ABSL_FLAG(int32_t, min_tokens, 16, "Fewest tokens per document");
ABSL_FLAG(int32_t, max_tokens, 48, "Most tokens per document");
ABSL_FLAG(int32_t, dim, 128, "Token width");
ABSL_FLAG(int32_t, clusters, 512, "Topic centroids of the synthetic corpus");
ABSL_FLAG(double, noise, 0.35,
          "Document token noise around its centroid (index/synthetic.h)");
ABSL_FLAG(double, query_noise, 0.6,
          "Query token noise around its source document's tokens");
ABSL_FLAG(int32_t, top_k, 10, "Results compared per query");
ABSL_FLAG(int32_t, batch_queries, 0,
          "Most queries per search (0: as many as the backend accepts); 1 "
          "scores a PLAID corpus's exhaustive scans on the GPU's int8 MMA "
          "path, which serves one query tile per block");
ABSL_FLAG(uint64_t, seed, 7, "Seed of the corpus and the queries");
ABSL_FLAG(std::string, backend, "cpu", "Backend under test: cpu or gpu");
ABSL_FLAG(int32_t, device, 0, "CUDA device of --backend gpu");
ABSL_FLAG(int32_t, threads, 0,
          "Host threads for the exact ranking and the CPU backend (0: one "
          "per hardware thread)");
ABSL_FLAG(std::string, json, "", "Also write the results here as JSON");
ABSL_FLAG(std::string, layouts, "int8,fp16,bf16,plaid2,plaid4",
          "Layouts to measure, comma-separated: int8 (both query modes), "
          "fp16, bf16, plaid2, plaid4 (each exhaustive and through PLAID "
          "candidate generation)");
ABSL_FLAG(std::string, pool_factors, "1",
          "Token pooling factors to measure each layout at, comma-separated "
          "(CorpusConfig::pool_factor; 1 keeps every token)");
ABSL_FLAG(double, repeat_fraction, 0.0,
          "Share of document tokens that are near-duplicates of an earlier "
          "token of their document (SyntheticCorpusOptions::repeat_fraction)");
ABSL_FLAG(double, repeat_noise, 0.1,
          "Noise of those near-duplicates (SyntheticCorpusOptions)");
ABSL_FLAG(double, min_int8_overlap, 0.0,
          "Exit 1 unless both int8 rows reach this mean top-k overlap (0: no "
          "check)");

namespace maxsimd {
namespace {

double Seconds(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since)
      .count();
}

// ---------------------------------------------------------------------------
// The exact ranking.
//
// Register tiles of kRows query rows x 2 vectors of document tokens (GCC/
// Clang vector extensions). Per step of the shared dimension a tile takes
// kRows broadcasts and 2 loads of the transposed document for 2 * kRows
// vector multiply-adds, so the loop runs near the multiply-add rate rather
// than the load rate. Each dot product is still one sequential fp32 sum over
// the dimension (contracted to FMAs where the target has them).
constexpr int kRows = 4;
constexpr int kTileVecs = 2;
// Document tokens are padded to a multiple of this (every tile width).
constexpr int kColPad = 16;

// row_max[s] = max over t < ld of <q_s, d_t> for every s < rows (a multiple
// of kRows). q is [rows, dim] row-major; dt is the document transposed,
// [dim, stride] with stride a multiple of kColPad >= ld, padded with zeros
// (padded columns are computed and ignored). Always inlined, so that it
// compiles for the target of the wrapper that instantiates it.
template <int kLanes>
__attribute__((always_inline)) inline void DocRowMaxTiles(
    const float* q, int64_t rows, int32_t dim, const float* dt, int64_t ld,
    int64_t stride, float* row_max) {
  typedef float Vec
      __attribute__((vector_size(kLanes * sizeof(float)), aligned(4)));
  constexpr int kCols = kTileVecs * kLanes;
  for (int64_t s0 = 0; s0 < rows; s0 += kRows) {
    float best[kRows];
    for (int r = 0; r < kRows; ++r) {
      best[r] = -std::numeric_limits<float>::infinity();
    }
    const float* qr = q + s0 * dim;
    for (int64_t c0 = 0; c0 < stride; c0 += kCols) {
      Vec acc[kRows][kTileVecs];
      for (int r = 0; r < kRows; ++r) {
        for (int v = 0; v < kTileVecs; ++v) acc[r][v] = Vec{};
      }
      for (int32_t k = 0; k < dim; ++k) {
        const Vec* col = reinterpret_cast<const Vec*>(dt + k * stride + c0);
        for (int r = 0; r < kRows; ++r) {
          const float a = qr[r * dim + k];
          for (int v = 0; v < kTileVecs; ++v) acc[r][v] += a * col[v];
        }
      }
      float cells[kRows][kCols];
      for (int r = 0; r < kRows; ++r) {
        for (int v = 0; v < kTileVecs; ++v) {
          *reinterpret_cast<Vec*>(&cells[r][v * kLanes]) = acc[r][v];
        }
      }
      const int64_t valid = std::min<int64_t>(kCols, ld - c0);
      for (int r = 0; r < kRows; ++r) {
        for (int64_t c = 0; c < valid; ++c) {
          best[r] = std::max(best[r], cells[r][c]);
        }
      }
    }
    for (int r = 0; r < kRows; ++r) row_max[s0 + r] = best[r];
  }
}

using DocRowMaxFn = void (*)(const float*, int64_t, int32_t, const float*,
                             int64_t, int64_t, float*);

// 4 lanes: SSE2 or NEON registers on every 64-bit target.
void DocRowMaxPortable(const float* q, int64_t rows, int32_t dim,
                       const float* dt, int64_t ld, int64_t stride,
                       float* row_max) {
  DocRowMaxTiles<4>(q, rows, dim, dt, ld, stride, row_max);
}

// The instantiation is chosen at run time rather than by target_clones, as
// kernels/maxsim_cpu.cc does, because the vector width itself differs: 8
// lanes lowered to SSE run ~20x slower than 4, so one body cannot serve
// both targets.
#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx,fma"))) void DocRowMaxAvx(const float* q,
                                                     int64_t rows, int32_t dim,
                                                     const float* dt,
                                                     int64_t ld, int64_t stride,
                                                     float* row_max) {
  DocRowMaxTiles<8>(q, rows, dim, dt, ld, stride, row_max);
}

DocRowMaxFn PickDocRowMax() {
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx") && __builtin_cpu_supports("fma")) {
    return DocRowMaxAvx;
  }
  return DocRowMaxPortable;
}
#else
DocRowMaxFn PickDocRowMax() { return DocRowMaxPortable; }
#endif

// Every query's exact top k over the fp32 corpus, as (score, document row),
// in RanksBefore order. query_offsets has num_queries + 1 entries.
std::vector<std::vector<ScoredDoc>> ExactTopK(
    const SyntheticCorpus& corpus, const std::vector<float>& query_tokens,
    const std::vector<int64_t>& query_offsets, int32_t k, ThreadPool* pool) {
  const int32_t dim = corpus.dim;
  const int64_t num_docs = static_cast<int64_t>(corpus.cu_seqlens.size()) - 1;
  const int32_t num_queries = static_cast<int32_t>(query_offsets.size()) - 1;
  const int64_t rows = query_offsets.back();
  const int64_t padded_rows = (rows + kRows - 1) / kRows * kRows;
  std::vector<float> q(static_cast<size_t>(padded_rows) * dim, 0.f);
  std::copy(query_tokens.begin(), query_tokens.end(), q.begin());

  struct Worker {
    std::vector<float> dt;
    std::vector<float> row_max;
    std::vector<TopKAccumulator> heaps;
  };
  const DocRowMaxFn doc_row_max = PickDocRowMax();
  std::vector<Worker> workers(pool->size());
  for (Worker& w : workers) {
    w.row_max.resize(static_cast<size_t>(padded_rows));
    w.heaps.assign(num_queries, TopKAccumulator(k));
  }
  pool->ParallelFor(num_docs, 64, [&](int wi, int64_t begin, int64_t end) {
    Worker& w = workers[wi];
    for (int64_t d = begin; d < end; ++d) {
      const int64_t first = corpus.cu_seqlens[d];
      const int64_t ld = corpus.cu_seqlens[d + 1] - first;
      const int64_t stride = (ld + kColPad - 1) / kColPad * kColPad;
      w.dt.assign(static_cast<size_t>(stride) * dim, 0.f);
      const float* doc = corpus.tokens.data() + first * dim;
      for (int64_t t = 0; t < ld; ++t) {
        for (int32_t j = 0; j < dim; ++j) {
          w.dt[j * stride + t] = doc[t * dim + j];
        }
      }
      doc_row_max(q.data(), padded_rows, dim, w.dt.data(), ld, stride,
                  w.row_max.data());
      for (int32_t qi = 0; qi < num_queries; ++qi) {
        float score = 0.f;
        for (int64_t s = query_offsets[qi]; s < query_offsets[qi + 1]; ++s) {
          score += w.row_max[s];
        }
        w.heaps[qi].Push({score, d});
      }
    }
  });
  std::vector<std::vector<ScoredDoc>> out(num_queries);
  for (int32_t qi = 0; qi < num_queries; ++qi) {
    for (size_t wi = 1; wi < workers.size(); ++wi) {
      workers[0].heaps[qi].Merge(workers[wi].heaps[qi]);
    }
    out[qi] = workers[0].heaps[qi].TakeSorted();
  }
  return out;
}

// Largest |fp32 score - fp64 oracle score| over every query's exact top k:
// a check that the blocked loop above computes MaxSim.
double MaxDeviationFromOracle(const SyntheticCorpus& corpus,
                              const std::vector<float>& query_tokens,
                              const std::vector<int64_t>& query_offsets,
                              const std::vector<std::vector<ScoredDoc>>& top) {
  SegmentView view;
  view.tokens = corpus.tokens.data();
  view.dtype = DType::kFloat32;
  view.cu_seqlens = corpus.cu_seqlens.data();
  view.num_docs = static_cast<int64_t>(corpus.cu_seqlens.size()) - 1;
  view.num_tokens = corpus.cu_seqlens.back();
  view.dim = corpus.dim;
  double worst = 0.0;
  for (size_t qi = 0; qi < top.size(); ++qi) {
    const float* query = query_tokens.data() + query_offsets[qi] * corpus.dim;
    const int64_t lq = query_offsets[qi + 1] - query_offsets[qi];
    for (const ScoredDoc& d : top[qi]) {
      const double want = ReferenceScore(query, lq, view, d.index);
      worst = std::max(worst, std::fabs(want - d.score));
    }
  }
  return worst;
}

// ---------------------------------------------------------------------------
// The layouts under test.

struct LayoutCase {
  const char* name;  // table label
  Layout layout;
  DType storage;
  bool quantize_queries;
  // PLAID: rank each query's candidates from PLAID candidate generation
  // (ColBERT's defaults for k) instead of scanning every document.
  bool pipeline = false;
};

struct LayoutResult {
  std::string name;
  std::string query_mode;
  int32_t pool_factor = 1;
  int64_t stored_tokens = 0;  // of the built corpus
  bool is_int8 = false;
  std::string error;  // empty when measured
  double mean_overlap = 0.0;
  double same_first = 0.0;
  double worst_overlap = 0.0;
  int64_t near_intruders = 0;  // in the exact top 2k
  int64_t far_intruders = 0;
  double build_seconds = 0.0;
  double search_seconds = 0.0;
  int64_t plaid_centroids = 0;  // the codec's, PLAID layouts only
};

// Builds `c` as the index does, searches every query in batches within the
// backend's limits and compares each top k with the exact one. exact[q] is
// query q's exact top 2k (or all documents, if fewer).
// `index` is the corpus of an earlier case of the same layout and dtype
// (built here when null, and left for the next case), with `pool_factor`.
absl::Status MeasureLayout(const LayoutCase& c, int32_t pool_factor,
                           const SyntheticCorpus& corpus,
                           const SearchBatch& queries, int32_t k,
                           const std::vector<std::vector<ScoredDoc>>& exact,
                           Backend* backend, std::shared_ptr<Corpus>& index,
                           LayoutResult* result) {
  const int64_t num_docs = static_cast<int64_t>(corpus.ids.size());
  auto start = std::chrono::steady_clock::now();
  if (index == nullptr) {
    CorpusConfig config;
    config.name = "fidelity";
    config.dim = corpus.dim;
    config.layout = c.layout;
    config.storage_dtype = c.storage;
    config.quantize_queries = c.quantize_queries;
    // The rows are unit already; PLAID and pooling normalise (pooled means
    // back to unit length, as a cosine corpus stores them).
    config.normalize = c.layout == Layout::kPlaid || pool_factor > 1;
    config.pool_factor = pool_factor;
    CorpusLimits limits;
    MAXSIMD_ASSIGN_OR_RETURN(index, Corpus::Create(config, limits, backend));
    {
      std::vector<int32_t> counts(static_cast<size_t>(num_docs));
      for (int64_t d = 0; d < num_docs; ++d) {
        counts[d] = static_cast<int32_t>(corpus.cu_seqlens[d + 1] -
                                         corpus.cu_seqlens[d]);
      }
      DocumentBuilder builder(config, limits);
      MAXSIMD_RETURN_IF_ERROR(builder.Add(
          corpus.ids, counts, corpus.tokens.data(), corpus.cu_seqlens.back(),
          DType::kFloat32, "fidelity_bench"));
      MAXSIMD_RETURN_IF_ERROR(index->Append(builder.Take()).status());
    }
  }
  const std::shared_ptr<const CorpusSnapshot> snap = index->Snapshot();
  result->build_seconds = Seconds(start);
  result->stored_tokens = snap->live_tokens();
  if (snap->codec() != nullptr) {
    result->plaid_centroids = snap->codec()->codec().num_centroids;
  }

  // The queries in batches the backend accepts.
  const BackendLimits& bl = backend->limits();
  const int32_t num_queries = static_cast<int32_t>(queries.top_k.size());
  std::vector<std::vector<ScoredDoc>> got(num_queries);
  start = std::chrono::steady_clock::now();
  for (int32_t q0 = 0; q0 < num_queries;) {
    SearchBatch batch;
    batch.dim = queries.dim;
    batch.quantize_queries = c.quantize_queries;
    batch.refs = snap->SegmentRefs();
    int32_t q1 = q0;
    const int32_t most =
        absl::GetFlag(FLAGS_batch_queries) > 0
            ? std::min(absl::GetFlag(FLAGS_batch_queries), bl.max_batch_queries)
            : bl.max_batch_queries;
    while (q1 < num_queries && q1 - q0 < most &&
           queries.offsets[q1 + 1] - queries.offsets[q0] <=
               bl.max_batch_query_tokens) {
      ++q1;
    }
    if (q1 == q0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "query ", q0, " alone exceeds the backend's batch limits"));
    }
    if (c.pipeline) batch.cand_offsets = {0};
    for (int32_t q = q0; q < q1; ++q) {
      const float* first =
          queries.tokens.data() + queries.offsets[q] * queries.dim;
      const float* last =
          queries.tokens.data() + queries.offsets[q + 1] * queries.dim;
      batch.AddQuery(std::vector<float>(first, last), queries.top_k[q]);
      if (c.pipeline) {
        const std::vector<DocRef> cands = PlaidCandidates(
            *snap, first, queries.offsets[q + 1] - queries.offsets[q],
            DefaultPlaidSearchParams(queries.top_k[q]));
        batch.candidates.insert(batch.candidates.end(), cands.begin(),
                                cands.end());
        batch.cand_offsets.push_back(
            static_cast<int64_t>(batch.candidates.size()));
      }
    }
    MAXSIMD_RETURN_IF_ERROR(backend->Search(
        batch.Params(), absl::MakeSpan(got).subspan(q0, q1 - q0), nullptr));
    q0 = q1;
  }
  result->search_seconds = Seconds(start);

  int64_t overlap = 0, first = 0;
  int64_t worst = k;
  for (int32_t q = 0; q < num_queries; ++q) {
    std::set<int64_t> want, near;
    for (size_t i = 0; i < exact[q].size(); ++i) {
      (i < static_cast<size_t>(k) ? want : near).insert(exact[q][i].index);
    }
    int64_t hits = 0;
    for (const ScoredDoc& d : got[q]) {
      // One append into an empty corpus: internal index == document row.
      if (d.index < 0 || d.index >= num_docs ||
          snap->IdOf(d.index) != corpus.ids[d.index]) {
        return absl::InternalError(absl::StrCat(
            "query ", q, ": result index ", d.index, " is not a document row"));
      }
      if (want.count(d.index) != 0) {
        ++hits;
      } else if (near.count(d.index) != 0) {
        ++result->near_intruders;
      } else {
        ++result->far_intruders;
      }
    }
    overlap += hits;
    worst = std::min(worst, hits);
    first += !got[q].empty() && !exact[q].empty() &&
             got[q][0].index == exact[q][0].index;
  }
  result->mean_overlap =
      static_cast<double>(overlap) / (static_cast<double>(k) * num_queries);
  result->same_first = static_cast<double>(first) / num_queries;
  result->worst_overlap = static_cast<double>(worst) / k;
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<Backend>> MakeBackend(const std::string& kind,
                                                     int threads, int device) {
  if (kind == "cpu") {
    CpuBackendOptions o;
    o.num_threads = threads;
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<CpuBackend> cpu,
                             CpuBackend::Create(o));
    return std::unique_ptr<Backend>(std::move(cpu));
  }
  GpuBackendOptions o;
  o.device = device;
  return GpuBackend::Create(o);
}

std::string JsonString(const std::string& s) {
  std::string out = "\"";
  for (const char ch : s) {
    if (ch == '"' || ch == '\\') {
      out += '\\';
      out += ch;
    } else if (static_cast<unsigned char>(ch) < 0x20) {
      out += absl::StrFormat("\\u%04x", static_cast<unsigned char>(ch));
    } else {
      out += ch;
    }
  }
  return out + "\"";
}

// A finite number as %.6g, else null (JSON has no NaN).
std::string JsonNumber(double v) {
  return std::isfinite(v) ? absl::StrFormat("%.6g", v) : "null";
}

int Run() {
  const int64_t num_docs = absl::GetFlag(FLAGS_docs);
  const int32_t num_queries = absl::GetFlag(FLAGS_queries);
  const int32_t query_tokens = absl::GetFlag(FLAGS_query_tokens);
  const int32_t min_tokens = absl::GetFlag(FLAGS_min_tokens);
  const int32_t max_tokens = absl::GetFlag(FLAGS_max_tokens);
  const int32_t dim = absl::GetFlag(FLAGS_dim);
  const int32_t clusters = absl::GetFlag(FLAGS_clusters);
  const int32_t k = absl::GetFlag(FLAGS_top_k);
  const uint64_t seed = absl::GetFlag(FLAGS_seed);
  const std::string backend_kind = absl::GetFlag(FLAGS_backend);
  const int32_t threads = absl::GetFlag(FLAGS_threads);
  const double min_int8 = absl::GetFlag(FLAGS_min_int8_overlap);
  const double noise = absl::GetFlag(FLAGS_noise);
  const double query_noise = absl::GetFlag(FLAGS_query_noise);
  std::string bad;
  if (num_docs < 1) bad = "--docs must be >= 1";
  if (num_queries < 1) bad = "--queries must be >= 1";
  if (query_tokens < 1) bad = "--query_tokens must be >= 1";
  if (min_tokens < 1 || max_tokens < min_tokens) {
    bad = "--min_tokens must be >= 1 and <= --max_tokens";
  }
  if (dim < 1 || dim > 4096) bad = "--dim must be in [1, 4096]";
  if (clusters < 1) bad = "--clusters must be >= 1";
  if (k < 1 || k > kMaxTopK || k > num_docs) {
    bad = absl::StrCat("--top_k must be in [1, min(", kMaxTopK, ", --docs)]");
  }
  if (!(noise >= 0) || !(query_noise >= 0)) {
    bad = "--noise and --query_noise must be >= 0";
  }
  if (!(min_int8 >= 0 && min_int8 <= 1)) {
    bad = "--min_int8_overlap must be in [0, 1]";
  }
  const std::set<std::string, std::less<>> layouts =
      absl::StrSplit(absl::GetFlag(FLAGS_layouts), ',', absl::SkipEmpty());
  for (const std::string& l : layouts) {
    if (l != "int8" && l != "fp16" && l != "bf16" && l != "plaid2" &&
        l != "plaid4") {
      bad = absl::StrCat("--layouts: unknown layout \"", l,
                         "\"; choose from int8, fp16, bf16, plaid2, plaid4");
    }
  }
  std::vector<int32_t> pool_factors;
  for (absl::string_view f : absl::StrSplit(absl::GetFlag(FLAGS_pool_factors),
                                            ',', absl::SkipEmpty())) {
    int32_t v = 0;
    if (!absl::SimpleAtoi(f, &v) || v < 1 || v > kMaxTokenPoolFactor) {
      bad = absl::StrCat("--pool_factors: \"", f, "\" is not in [1, ",
                         kMaxTokenPoolFactor, "]");
    }
    pool_factors.push_back(v);
  }
  if (pool_factors.empty()) bad = "--pool_factors must name a factor";
  const double repeat_fraction = absl::GetFlag(FLAGS_repeat_fraction);
  const double repeat_noise = absl::GetFlag(FLAGS_repeat_noise);
  if (!(repeat_fraction >= 0 && repeat_fraction <= 1) || !(repeat_noise >= 0)) {
    bad = "--repeat_fraction must be in [0, 1] and --repeat_noise >= 0";
  }
  if (min_int8 > 0 && layouts.count("int8") == 0) {
    bad = "--min_int8_overlap needs int8 in --layouts";
  }
  if (backend_kind != "cpu" && backend_kind != "gpu") {
    bad = "--backend must be cpu or gpu";
  }
  if (!bad.empty()) {
    std::fprintf(stderr, "fidelity_bench: %s\n", bad.c_str());
    return 2;
  }
  const auto run_start = std::chrono::steady_clock::now();

  auto backend =
      MakeBackend(backend_kind, threads, absl::GetFlag(FLAGS_device));
  if (!backend.ok()) {
    std::fprintf(stderr, "fidelity_bench: backend %s: %s\n",
                 backend_kind.c_str(), backend.status().ToString().c_str());
    return 1;
  }
  ThreadPool pool(threads);

  auto start = std::chrono::steady_clock::now();
  SyntheticCorpusOptions so;
  so.num_docs = num_docs;
  so.dim = dim;
  so.min_tokens = min_tokens;
  so.max_tokens = max_tokens;
  so.num_clusters = clusters;
  so.noise = static_cast<float>(noise);
  so.seed = seed;
  so.repeat_fraction = static_cast<float>(repeat_fraction);
  so.repeat_noise = static_cast<float>(repeat_noise);
  const SyntheticCorpus corpus = GenerateSyntheticCorpus(so);
  // Each query comes from a random document's tokens (raw mt19937_64
  // output, the same on every platform).
  SearchBatch queries;
  queries.dim = dim;
  std::mt19937_64 pick(seed ^ 0x5bd1e995u);
  for (int32_t q = 0; q < num_queries; ++q) {
    const int64_t doc = static_cast<int64_t>(pick() % num_docs);
    queries.AddQuery(
        GenerateQueryForDocument(corpus, doc, query_tokens,
                                 static_cast<float>(query_noise), seed + q),
        k);
  }
  const double generate_seconds = Seconds(start);
  std::printf(
      "corpus: %lld documents, %lld tokens (%d..%d per document), dim %d, "
      "%d clusters, seed %llu, near-duplicate tokens %.2f (noise %.2f); %d "
      "queries of %d tokens; generated in %.1f s\n",
      static_cast<long long>(num_docs),
      static_cast<long long>(corpus.cu_seqlens.back()), min_tokens, max_tokens,
      dim, clusters, static_cast<unsigned long long>(seed), repeat_fraction,
      repeat_noise, num_queries, query_tokens, generate_seconds);

  start = std::chrono::steady_clock::now();
  const int32_t exact_k = static_cast<int32_t>(
      std::min<int64_t>({2 * int64_t{k}, num_docs, kMaxTopK}));
  const std::vector<std::vector<ScoredDoc>> exact =
      ExactTopK(corpus, queries.tokens, queries.offsets, exact_k, &pool);
  const double exact_seconds = Seconds(start);
  const double oracle_dev =
      MaxDeviationFromOracle(corpus, queries.tokens, queries.offsets, exact);
  // The margin at the rank-k boundary, absolute and relative to the k-th
  // score (NaN when the corpus has only k documents).
  double median_gap = std::nan(""), median_rel_gap = std::nan("");
  if (exact_k > k) {
    std::vector<double> gaps, rel;
    for (const std::vector<ScoredDoc>& e : exact) {
      gaps.push_back(e[k - 1].score - e[k].score);
      rel.push_back(gaps.back() / std::fabs(e[k - 1].score));
    }
    std::sort(gaps.begin(), gaps.end());
    std::sort(rel.begin(), rel.end());
    median_gap = gaps[gaps.size() / 2];
    median_rel_gap = rel[rel.size() / 2];
  }
  std::printf(
      "exact fp32 ranking: %.1f s on %d threads; top-%d scores within %.2e "
      "of the fp64 oracle; median gap between exact #%d and #%d: %.4f "
      "(%.2e of #%d)\n",
      exact_seconds, pool.size(), exact_k, oracle_dev, k, k + 1, median_gap,
      median_rel_gap, k);

  const LayoutCase cases[] = {
      {"int8", Layout::kInt8, DType::kInt8, false},
      {"int8", Layout::kInt8, DType::kInt8, true},
      {"fp16", Layout::kDense, DType::kFloat16, false},
      {"bf16", Layout::kDense, DType::kBFloat16, false},
      {"plaid2", Layout::kPlaid, DType::kPlaid2, false},
      {"plaid2", Layout::kPlaid, DType::kPlaid2, false, true},
      {"plaid4", Layout::kPlaid, DType::kPlaid4, false},
      {"plaid4", Layout::kPlaid, DType::kPlaid4, false, true},
  };
  // How the index trains PLAID codecs for this backend.
  const PlaidTrainOptions trainer = PlaidTrainOptionsFor(backend->get());
  const std::string trainer_text = absl::StrFormat(
      "k-means %s, on a sample of up to %d tokens, ColBERT's centroid count "
      "(at most one per 32 sampled tokens), %s seeds, %d iterations",
      trainer.assign ? absl::StrCat("assignments on ", (*backend)->name())
                     : std::string("on the host"),
      trainer.max_sample,
      trainer.seeding == PlaidSeeding::kRandomTokens ? "random" : "k-means++",
      trainer.iterations);
  if (layouts.count("plaid2") != 0 || layouts.count("plaid4") != 0) {
    std::printf("PLAID codec trainer: %s\n", trainer_text.c_str());
  }
  std::vector<LayoutResult> results;
  // By (storage dtype, pool factor): the PLAID cases share a corpus.
  std::map<std::pair<DType, int32_t>, std::shared_ptr<Corpus>> built;
  for (const int32_t pool_factor : pool_factors) {
    for (const LayoutCase& c : cases) {
      if (layouts.count(c.name) == 0) continue;
      LayoutResult r;
      r.name = c.name;
      r.pool_factor = pool_factor;
      r.is_int8 = c.layout == Layout::kInt8;
      r.query_mode = c.pipeline                   ? "PLAID search"
                     : c.layout == Layout::kPlaid ? "exhaustive"
                     : !r.is_int8                 ? "dense"
                     : c.quantize_queries         ? "int8 (quantised)"
                                                  : "fp16";
      // Int8's two query modes are two corpora (the mode is configuration).
      std::shared_ptr<Corpus> none;
      std::shared_ptr<Corpus>& index =
          c.layout == Layout::kPlaid ? built[{c.storage, pool_factor}] : none;
      const absl::Status st = MeasureLayout(c, pool_factor, corpus, queries, k,
                                            exact, backend->get(), index, &r);
      if (!st.ok()) r.error = st.ToString();
      results.push_back(r);
    }
    built.clear();  // one pool factor's corpora at a time
  }

  std::printf("\nbackend %s: top-%d overlap with the exact fp32 ranking\n",
              (*backend)->name().c_str(), k);
  std::printf("%-6s %-17s %4s %7s %12s %11s %11s %6s %6s %8s %9s\n", "layout",
              "queries", "pool", "tokens", "mean overlap", "same first",
              "worst query", "near", "far", "build s", "search s");
  const double all_tokens = static_cast<double>(corpus.cu_seqlens.back());
  bool failed = false;
  for (const LayoutResult& r : results) {
    if (!r.error.empty()) {
      std::printf("%-6s %-17s %4d error: %s\n", r.name.c_str(),
                  r.query_mode.c_str(), r.pool_factor, r.error.c_str());
    } else {
      std::printf(
          "%-6s %-17s %4d %7.3f %12.4f %11.3f %11.2f %6lld %6lld %8.1f "
          "%9.1f\n",
          r.name.c_str(), r.query_mode.c_str(), r.pool_factor,
          r.stored_tokens / all_tokens, r.mean_overlap, r.same_first,
          r.worst_overlap, static_cast<long long>(r.near_intruders),
          static_cast<long long>(r.far_intruders), r.build_seconds,
          r.search_seconds);
    }
    if (min_int8 > 0 && r.is_int8 &&
        (!r.error.empty() || r.mean_overlap < min_int8)) {
      std::fprintf(
          stderr,
          "fidelity_bench: int8 with %s queries: %s, below "
          "--min_int8_overlap %.4f\n",
          r.query_mode.c_str(),
          r.error.empty()
              ? absl::StrFormat("mean overlap %.4f", r.mean_overlap).c_str()
              : "not measured",
          min_int8);
      failed = true;
    }
  }
  for (const LayoutResult& r : results) {
    if (r.plaid_centroids > 0 && r.query_mode == "exhaustive") {
      std::printf(
          "%s codec (pool factor %d): %lld centroids; trained and "
          "compressed in %.1f s (k-means %s)\n",
          r.name.c_str(), r.pool_factor,
          static_cast<long long>(r.plaid_centroids), r.build_seconds,
          trainer.assign ? "assignments on the GPU" : "on the host");
    }
  }
  const double total_seconds = Seconds(run_start);
  std::printf("total %.1f s\n", total_seconds);

  const std::string json_path = absl::GetFlag(FLAGS_json);
  if (!json_path.empty()) {
    std::string j = absl::StrFormat(
        "{\n  \"backend\": %s,\n  \"docs\": %d,\n  \"tokens\": %d,\n"
        "  \"min_tokens\": %d,\n  \"max_tokens\": %d,\n  \"dim\": %d,\n"
        "  \"clusters\": %d,\n  \"noise\": %g,\n  \"repeat_fraction\": %g,\n"
        "  \"repeat_noise\": %g,\n  \"queries\": %d,\n"
        "  \"query_tokens\": %d,\n  \"query_noise\": %g,\n  \"top_k\": %d,\n"
        "  \"seed\": %d,\n  \"threads\": %d,\n  \"generate_seconds\": %.3f,\n"
        "  \"exact_seconds\": %.3f,\n  \"exact_max_deviation_from_fp64\": "
        "%.3e,\n  \"exact_median_boundary_gap\": %s,\n"
        "  \"exact_median_boundary_gap_relative\": %s,\n"
        "  \"total_seconds\": %.3f,\n  \"plaid_trainer\": %s,\n"
        "  \"layouts\": [\n",
        JsonString((*backend)->name()), num_docs, corpus.cu_seqlens.back(),
        min_tokens, max_tokens, dim, clusters, noise, repeat_fraction,
        repeat_noise, num_queries, query_tokens, query_noise, k, seed,
        pool.size(), generate_seconds, exact_seconds, oracle_dev,
        JsonNumber(median_gap), JsonNumber(median_rel_gap), total_seconds,
        JsonString(trainer_text));
    for (size_t i = 0; i < results.size(); ++i) {
      const LayoutResult& r = results[i];
      absl::StrAppend(&j, "    {\"layout\": ", JsonString(r.name),
                      ", \"queries\": ", JsonString(r.query_mode),
                      ", \"pool_factor\": ", r.pool_factor, ", ");
      if (!r.error.empty()) {
        absl::StrAppend(&j, "\"error\": ", JsonString(r.error));
      } else {
        absl::StrAppend(
            &j,
            absl::StrFormat("\"mean_overlap\": %.6f, \"same_first\": %.6f, "
                            "\"worst_overlap\": %.4f, \"near_intruders\": %d, "
                            "\"far_intruders\": %d, \"build_seconds\": %.3f, "
                            "\"search_seconds\": %.3f",
                            r.mean_overlap, r.same_first, r.worst_overlap,
                            r.near_intruders, r.far_intruders, r.build_seconds,
                            r.search_seconds));
        absl::StrAppend(&j, ", \"stored_tokens\": ", r.stored_tokens);
        if (r.plaid_centroids > 0) {
          absl::StrAppend(&j, ", \"plaid_centroids\": ", r.plaid_centroids);
        }
      }
      absl::StrAppend(&j, "}", i + 1 < results.size() ? "," : "", "\n");
    }
    absl::StrAppend(&j, "  ]\n}\n");
    FILE* f = std::fopen(json_path.c_str(), "w");
    if (f == nullptr || std::fwrite(j.data(), 1, j.size(), f) != j.size() ||
        std::fclose(f) != 0) {
      std::perror(json_path.c_str());
      return 1;
    }
  }
  return failed ? 1 : 0;
}

}  // namespace
}  // namespace maxsimd

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Top-k overlap of the int8, fp16, bf16 and PLAID layouts with the exact "
      "fp32 ranking on a clustered synthetic corpus.\nUsage: fidelity_bench "
      "[--docs N] [--queries N] [--backend cpu|gpu] [--json PATH] "
      "[--min_int8_overlap X]");
  const std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  if (rest.size() > 1) {
    std::fprintf(stderr, "fidelity_bench: unexpected argument %s\n", rest[1]);
    return 2;
  }
  return maxsimd::Run();
}
