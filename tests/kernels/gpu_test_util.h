// Helpers of the GPU backend tests: a shared backend, device copies of host
// test segments, batches, and the comparison against the scalar oracle.
//
// The GPU backend rounds fp32 queries to the corpus dtype before the tensor
// cores see them, so the oracle is run on queries rounded the same way: that
// is the exact function the kernels compute. Int8 corpora are the exception:
// the oracle itself rounds the queries to fp16 or quantises them, as
// SearchParams::quantize_queries says (backend.h's int8 formulas), so it is
// given the unrounded queries. Separately, scores are checked against the
// unrounded fp32 oracle (ExpectCloseToFp32Reference).
#ifndef MAXSIMD_TESTS_KERNELS_GPU_TEST_UTIL_H_
#define MAXSIMD_TESTS_KERNELS_GPU_TEST_UTIL_H_

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/element.h"
#include "kernels/gpu_backend.h"
#include "kernels/maxsim_reference.h"
#include "tests/support/plaid_segment.h"
#include "tests/support/ranking.h"
#include "tests/support/status_matchers.h"

namespace maxsimd::testing {

#define MAXSIMD_SKIP_WITHOUT_GPU()                      \
  do {                                                  \
    if (::maxsimd::GpuBackend::DeviceCount() == 0) {    \
      GTEST_SKIP() << "no CUDA device on this machine"; \
    }                                                   \
  } while (0)

// Limits small enough that Create() is quick, large enough for every test.
// MAXSIMD_TEST_KERNELS=mma runs the suites on the mma.sync kernels instead
// of the TMA kernels (bench/run_gpu.sh runs both). use_tma is also false
// where the TMA kernels do not run (a GPU other than Hopper, or a build
// without sm_90a code), as the backend itself then decides, so that the
// suites expect what the backend serves.
inline GpuBackendOptions TestOptions() {
  GpuBackendOptions o;
  const char* kernels = std::getenv("MAXSIMD_TEST_KERNELS");
  static const bool tma_available = GpuBackend::TmaKernelsAvailable(0);
  o.use_tma =
      tma_available && (kernels == nullptr || std::string(kernels) != "mma");
  o.num_workers = 2;
  o.limits.max_batch_queries = 256;
  o.limits.max_batch_query_tokens = 1 << 16;
  o.limits.max_batch_candidates = 1 << 18;
  o.max_query_elements = 1 << 22;
  return o;
}

inline std::unique_ptr<Backend> MakeGpuBackend(
    const GpuBackendOptions& options = TestOptions()) {
  auto b = GpuBackend::Create(options);
  EXPECT_TRUE(b.ok()) << b.status();
  return b.ok() ? std::move(b).value() : nullptr;
}

// One backend with TestOptions() for the whole test binary, created on
// first use (only by tests that have a GPU) and kept until exit.
inline Backend& SharedGpuBackend() {
  static Backend* backend = MakeGpuBackend().release();
  return *backend;
}

// A host segment and its device copy; the SegmentRef pairs the two views.
// `scales` is set for int8 segments only.
struct DeviceSegment {
  std::unique_ptr<ResidentBuffer> tokens, scales, cu_seqlens, tombstones;
  SegmentRef ref;
};

// The device copy of `s`; with `streamed`, the tokens stay in s's host
// memory, pinned (Backend::Pin), and the search streams them. An int8
// segment's scales are uploaded either way: like cu_seqlens they are per-row
// metadata, a fraction of the tokens' bytes.
inline DeviceSegment Upload(Backend& backend, const HostSegment& s,
                            bool streamed = false) {
  DeviceSegment d;
  const SegmentView host = s.View();
  const size_t token_bytes =
      static_cast<size_t>(host.num_tokens) * host.dim * DTypeSize(host.dtype);
  d.tokens = (streamed ? backend.Pin(host.tokens, token_bytes)
                       : backend.Upload(host.tokens, token_bytes))
                 .value();
  d.cu_seqlens =
      backend.Upload(s.cu_seqlens.data(), s.cu_seqlens.size() * sizeof(int64_t))
          .value();
  SegmentView res = host;
  res.tokens = d.tokens->data();
  res.cu_seqlens = static_cast<const int64_t*>(d.cu_seqlens->data());
  res.scales = nullptr;
  if (host.dtype == DType::kInt8) {
    d.scales = backend.Upload(s.scales.data(), s.scales.size() * sizeof(float))
                   .value();
    res.scales = static_cast<const float*>(d.scales->data());
  }
  res.tombstones = nullptr;
  if (!s.tombstones.empty()) {
    d.tombstones =
        backend
            .Upload(s.tombstones.data(), s.tombstones.size() * sizeof(uint32_t))
            .value();
    res.tombstones = static_cast<const uint32_t*>(d.tombstones->data());
  }
  d.ref = {host, res, 0, streamed};
  return d;
}

// The device copy of a PLAID segment: residual rows, codes, scales, offsets,
// tombstones, and the codec tables, which segments of one batch share on
// the GPU (one codec per batch, as an index uploads it once): `codec` is
// the first segment's DevicePlaid whose tables to reuse, or null to upload
// this segment's. The host view is s.View(base_index).
struct DevicePlaid {
  std::vector<std::unique_ptr<ResidentBuffer>> buffers;
  PlaidTablesView tables;  // device
  SegmentRef ref;
};

inline DevicePlaid UploadPlaid(Backend& backend, const PlaidSegment& s,
                               int64_t base_index,
                               const DevicePlaid* codec = nullptr) {
  DevicePlaid d;
  auto up = [&](const void* p, size_t bytes) -> const void* {
    // A zero-byte upload still yields an aligned, valid pointer.
    d.buffers.push_back(backend.Upload(p, std::max<size_t>(bytes, 16)).value());
    return d.buffers.back()->data();
  };
  const SegmentView host = s.View(base_index);
  SegmentView res = host;
  // Copies padded to 16 bytes read past short host vectors: stage them.
  auto padded = [](const auto& v) {
    std::vector<uint8_t> out(std::max<size_t>(v.size() * sizeof(v[0]), 16));
    if (!v.empty()) std::memcpy(out.data(), v.data(), v.size() * sizeof(v[0]));
    return out;
  };
  const auto residuals = padded(s.residuals);
  const auto codes = padded(s.codes);
  const auto scales = padded(s.scales);
  res.tokens = up(residuals.data(), residuals.size());
  res.codes = static_cast<const int32_t*>(up(codes.data(), codes.size()));
  res.scales = static_cast<const float*>(up(scales.data(), scales.size()));
  res.cu_seqlens = static_cast<const int64_t*>(
      up(s.cu_seqlens.data(), s.cu_seqlens.size() * sizeof(int64_t)));
  res.tombstones = nullptr;
  if (!s.tombstones.empty()) {
    res.tombstones = static_cast<const uint32_t*>(
        up(s.tombstones.data(), s.tombstones.size() * sizeof(uint32_t)));
  }
  if (codec != nullptr) {
    d.tables = codec->tables;
  } else {
    d.tables.centroids = static_cast<const float*>(
        up(s.centroids.data(), s.centroids.size() * sizeof(float)));
    d.tables.centroids_f16 = static_cast<const uint16_t*>(
        up(s.centroids_f16.data(), s.centroids_f16.size() * sizeof(uint16_t)));
    const auto weights = padded(s.bucket_weights);
    d.tables.bucket_weights =
        static_cast<const float*>(up(weights.data(), weights.size()));
    d.tables.num_centroids = s.num_centroids();
  }
  res.plaid = d.tables;
  d.ref = {host, res, 0, false};
  return d;
}

// Appends one query's candidate list to `batch`: `count` distinct documents
// drawn from segment 0 (n_a documents) and segment 1 (n_b).
inline void AddCandidates(std::mt19937_64& rng, Batch& batch, int64_t n_a,
                          int64_t n_b, int count) {
  std::vector<DocRef> all;
  for (int64_t d = 0; d < n_a; ++d) all.push_back({0, d});
  for (int64_t d = 0; d < n_b; ++d) all.push_back({1, d});
  std::shuffle(all.begin(), all.end(), rng);
  if (batch.cand_offsets.empty()) batch.cand_offsets = {0};
  for (int c = 0; c < count && c < static_cast<int>(all.size()); ++c) {
    batch.candidates.push_back(all[c]);
  }
  batch.cand_offsets.push_back(static_cast<int64_t>(batch.candidates.size()));
}

// `tokens` rounded to `dtype` and back: what the GPU multiplies.
// REQUIRES: dtype is kFloat16 or kBFloat16 (the 16-bit staging buffer).
inline std::vector<float> RoundTo(const std::vector<float>& tokens,
                                  DType dtype) {
  std::vector<uint16_t> half(tokens.size());
  ConvertFromFloat(tokens.data(), static_cast<int64_t>(tokens.size()), dtype,
                   half.data());
  std::vector<float> out(tokens.size());
  ConvertToFloat(half.data(), dtype, 0, static_cast<int64_t>(half.size()),
                 out.data());
  return out;
}

inline std::vector<std::vector<ScoredDoc>> GpuSearch(Backend& backend,
                                                     const SearchParams& p) {
  std::vector<std::vector<ScoredDoc>> got(p.num_queries);
  SearchTiming timing;
  const absl::Status st = backend.Search(p, absl::MakeSpan(got), &timing);
  EXPECT_TRUE(st.ok()) << st;
  return got;
}

// The oracle's ranking of `batch` on the queries the GPU scores: rounded
// to a dense corpus's `dtype`; for kInt8, the fp32 queries, which the
// oracle rounds to fp16 or quantises itself (batch.quantize_queries).
inline std::vector<std::vector<ScoredDoc>> GpuReferenceSearch(
    const Batch& batch, DType dtype) {
  if (dtype == DType::kInt8) return ReferenceSearch(batch.Params());
  Batch rounded = batch;
  rounded.tokens = RoundTo(batch.tokens, dtype);
  return ReferenceSearch(rounded.Params());
}

// The GPU ranking against the oracle on the queries the GPU scores
// (GpuReferenceSearch). `dtype` is the segments' dtype.
inline void ExpectMatchesReference(Backend& backend, const Batch& batch,
                                   DType dtype, double tol = 1e-3) {
  const SearchParams p = batch.Params();
  const auto got = GpuSearch(backend, p);
  const auto want = GpuReferenceSearch(batch, dtype);
  for (int32_t q = 0; q < p.num_queries; ++q) {
    EXPECT_EQ(CompareRanking(got[q], want[q], tol), "")
        << "query " << q << " of " << p.num_queries;
  }
}

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_KERNELS_GPU_TEST_UTIL_H_
