#include "kernels/backend.h"

#include "absl/strings/str_cat.h"

namespace maxsimd {

absl::Status ValidateSearchParams(const SearchParams& p,
                                  const BackendLimits& limits,
                                  size_t num_results) {
  if (p.num_queries < 0 || p.num_queries > limits.max_batch_queries) {
    return absl::InvalidArgumentError(
        absl::StrCat("Search: num_queries is ", p.num_queries,
                     ", the limit is ", limits.max_batch_queries));
  }
  if (num_results != static_cast<size_t>(p.num_queries)) {
    return absl::InvalidArgumentError(
        absl::StrCat("Search: results has ", num_results,
                     " entries for num_queries ", p.num_queries));
  }
  if (p.dim <= 0 || p.dim > limits.max_dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Search: dim is ", p.dim, ", must be in [1, ", limits.max_dim, "]"));
  }
  if (p.num_queries > 0 && (p.query_offsets == nullptr || p.top_k == nullptr)) {
    return absl::InvalidArgumentError(
        "Search: query_offsets and top_k are required");
  }
  const int64_t total_tokens =
      p.num_queries > 0 ? p.query_offsets[p.num_queries] : 0;
  if (total_tokens > limits.max_batch_query_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Search: the batch has ", total_tokens, " query tokens, the limit is ",
        limits.max_batch_query_tokens));
  }
  for (int32_t q = 0; q < p.num_queries; ++q) {
    if (p.query_offsets[q + 1] < p.query_offsets[q]) {
      return absl::InvalidArgumentError(
          absl::StrCat("Search: query_offsets decreases at query ", q));
    }
    if (p.top_k[q] < 1 || p.top_k[q] > kMaxTopK) {
      return absl::InvalidArgumentError(
          absl::StrCat("Search: top_k[", q, "] is ", p.top_k[q],
                       ", must be in [1, ", kMaxTopK, "]"));
    }
  }
  for (size_t s = 0; s < p.segments.size(); ++s) {
    const SegmentView& v = p.segments[s].host;
    if (v.dim != p.dim || p.segments[s].resident.dim != p.dim) {
      return absl::InvalidArgumentError(
          absl::StrCat("Search: segments[", s, "].dim is ", v.dim,
                       ", the queries have dim ", p.dim));
    }
    if (v.dtype == DType::kInt8 && v.num_tokens > 0 &&
        (v.scales == nullptr || p.segments[s].resident.scales == nullptr)) {
      return absl::InvalidArgumentError(
          absl::StrCat("Search: segments[", s, "] is int8 and has no scales"));
    }
    if (PlaidNbits(v.dtype) != 0 && v.num_tokens > 0) {
      for (const SegmentView* x : {&v, &p.segments[s].resident}) {
        if (x->scales == nullptr || x->codes == nullptr ||
            x->plaid.bucket_weights == nullptr ||
            x->plaid.centroids == nullptr || x->plaid.num_centroids <= 0) {
          return absl::InvalidArgumentError(
              absl::StrCat("Search: segments[", s,
                           "] is PLAID and lacks its scales, codes or codec"));
        }
      }
    }
  }
  if (p.candidate_offsets != nullptr && p.num_queries > 0) {
    const int64_t total = p.candidate_offsets[p.num_queries];
    if (total > limits.max_batch_candidates) {
      return absl::InvalidArgumentError(absl::StrCat(
          "Search: the batch has ", total, " candidates, the limit is ",
          limits.max_batch_candidates));
    }
    for (int64_t c = 0; c < total; ++c) {
      const DocRef& r = p.candidates[c];
      if (r.segment < 0 ||
          static_cast<size_t>(r.segment) >= p.segments.size() || r.doc < 0 ||
          r.doc >= p.segments[r.segment].host.num_docs) {
        return absl::InvalidArgumentError(
            absl::StrCat("Search: candidates[", c, "] = (", r.segment, ", ",
                         r.doc, ") is outside the segment list"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ValidateAssignNearestCentroids(absl::Span<const float> tokens,
                                            absl::Span<const float> centroids,
                                            int32_t dim,
                                            absl::Span<const int64_t> codes) {
  if (dim < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "AssignNearestCentroids: dim is ", dim, ", must be at least 1"));
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        "AssignNearestCentroids: tokens is empty (m = 0); nothing to assign");
  }
  if (centroids.empty()) {
    return absl::InvalidArgumentError(
        "AssignNearestCentroids: centroids is empty (k = 0); at least one "
        "centroid is needed");
  }
  if (tokens.size() % dim != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AssignNearestCentroids: tokens has ", tokens.size(),
                     " values, not a multiple of dim ", dim));
  }
  if (centroids.size() % dim != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("AssignNearestCentroids: centroids has ", centroids.size(),
                     " values, not a multiple of dim ", dim));
  }
  const size_t m = tokens.size() / dim;
  if (codes.size() != m) {
    return absl::InvalidArgumentError(
        absl::StrCat("AssignNearestCentroids: codes has ", codes.size(),
                     " entries for ", m, " tokens"));
  }
  // Centroid indices are int32 inside the kernels.
  constexpr size_t kMaxCentroids = (size_t{1} << 31) - 1;
  if (centroids.size() / dim > kMaxCentroids) {
    return absl::InvalidArgumentError(
        absl::StrCat("AssignNearestCentroids: ", centroids.size() / dim,
                     " centroids, the limit is ", kMaxCentroids));
  }
  return absl::OkStatus();
}

absl::Status ValidateScoreCentroids(int shard, int num_shards,
                                    const PlaidTablesView& tables, int32_t dim,
                                    absl::Span<const float> tokens,
                                    absl::Span<const float> scores,
                                    const BackendLimits& limits) {
  if (shard < 0 || shard >= num_shards) {
    return absl::InvalidArgumentError(absl::StrCat("ScoreCentroids: shard is ",
                                                   shard, ", must be in [0, ",
                                                   num_shards, ")"));
  }
  if (dim < 1 || dim > limits.max_dim) {
    return absl::InvalidArgumentError(absl::StrCat("ScoreCentroids: dim is ",
                                                   dim, ", must be in [1, ",
                                                   limits.max_dim, "]"));
  }
  // Centroid indices are int32 inside the kernels.
  constexpr int64_t kMaxCentroids = (int64_t{1} << 31) - 1;
  if (tables.centroids == nullptr || tables.num_centroids < 1 ||
      tables.num_centroids > kMaxCentroids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ScoreCentroids: tables.num_centroids is ", tables.num_centroids,
        tables.centroids == nullptr ? " and tables.centroids is null" : "",
        "; must be in [1, ", kMaxCentroids, "] with centroids"));
  }
  if (tokens.size() % static_cast<size_t>(dim) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("ScoreCentroids: tokens has ", tokens.size(),
                     " values, not a multiple of dim ", dim));
  }
  const int64_t m = static_cast<int64_t>(tokens.size()) / dim;
  if (m > limits.max_batch_query_tokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ScoreCentroids: tokens has ", m, " rows, the limit is ",
        limits.max_batch_query_tokens, " (max_batch_query_tokens)"));
  }
  if (static_cast<int64_t>(scores.size()) != m * tables.num_centroids) {
    return absl::InvalidArgumentError(absl::StrCat(
        "ScoreCentroids: scores has ", scores.size(), " entries for ", m,
        " rows x ", tables.num_centroids, " centroids"));
  }
  return absl::OkStatus();
}

absl::Status CheckCorpusBudget(const std::string& backend, int64_t held,
                               int64_t bytes, int64_t budget) {
  return CheckBudget("Upload", "--corpus_budget_bytes", backend, held, bytes,
                     budget);
}

absl::Status CheckBudget(const char* what, const char* flag,
                         const std::string& backend, int64_t held,
                         int64_t bytes, int64_t budget) {
  if (budget <= 0 || held + bytes <= budget) return absl::OkStatus();
  return absl::ResourceExhaustedError(absl::StrCat(
      what, ": ", bytes, " more bytes would take the corpora on ", backend,
      " to ", held + bytes, " bytes; ", flag, " is ", budget));
}

}  // namespace maxsimd
