#include "tests/support/ranking.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels/element.h"
#include "kernels/quantize.h"

namespace maxsimd::testing {

SegmentView HostSegment::View() const {
  SegmentView v;
  v.tokens =
      dtype == DType::kFloat32 ? static_cast<const void*>(tokens32.data())
      : dtype == DType::kInt8  ? static_cast<const void*>(tokens8.data())
                               : static_cast<const void*>(tokens16.data());
  v.scales = dtype == DType::kInt8 ? scales.data() : nullptr;
  v.cu_seqlens = cu_seqlens.data();
  v.tombstones = tombstones.empty() ? nullptr : tombstones.data();
  v.num_docs = num_docs();
  v.num_tokens = cu_seqlens.back();
  v.dim = dim;
  v.dtype = dtype;
  v.base_index = base_index;
  return v;
}

void HostSegment::Delete(int64_t doc) {
  if (tombstones.empty()) tombstones.assign((num_docs() + 31) / 32, 0u);
  tombstones[doc >> 5] |= 1u << (doc & 31);
}

HostSegment RandomSegment(std::mt19937_64& rng, int64_t num_docs,
                          int32_t min_len, int32_t max_len, int32_t dim,
                          DType dtype, int64_t base_index) {
  std::uniform_int_distribution<int32_t> len(min_len, max_len);
  std::vector<int32_t> lengths(static_cast<size_t>(num_docs));
  for (int32_t& l : lengths) l = len(rng);
  return SegmentWithLengths(rng, lengths, dim, dtype, base_index);
}

HostSegment SegmentWithLengths(std::mt19937_64& rng,
                               const std::vector<int32_t>& lengths, int32_t dim,
                               DType dtype, int64_t base_index) {
  HostSegment seg;
  seg.dim = dim;
  seg.dtype = dtype;
  seg.base_index = base_index;
  seg.cu_seqlens.assign(1, 0);
  for (int32_t l : lengths) seg.cu_seqlens.push_back(seg.cu_seqlens.back() + l);
  const int64_t n = seg.cu_seqlens.back() * dim;
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> values(static_cast<size_t>(n));
  for (float& v : values) v = normal(rng);
  if (dtype == DType::kFloat32) {
    seg.tokens32 = std::move(values);
  } else if (dtype == DType::kInt8) {
    seg.tokens8.resize(static_cast<size_t>(n));
    seg.scales.resize(static_cast<size_t>(seg.cu_seqlens.back()));
    QuantizeInt8Rows(values.data(), seg.cu_seqlens.back(), dim,
                     seg.tokens8.data(), seg.scales.data());
  } else {
    seg.tokens16.resize(static_cast<size_t>(n));
    ConvertFromFloat(values.data(), n, dtype, seg.tokens16.data());
  }
  return seg;
}

std::vector<float> RandomQuery(std::mt19937_64& rng, int64_t lq, int32_t dim) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::vector<float> q(static_cast<size_t>(lq * dim));
  for (float& v : q) v = normal(rng);
  return q;
}

uint64_t TestSeed() {
  uint64_t seed;
  if (const char* env = std::getenv("MAXSIMD_TEST_SEED")) {
    seed = std::strtoull(env, nullptr, 10);
  } else {
    seed = static_cast<uint64_t>(
        std::chrono::steady_clock::now().time_since_epoch().count());
  }
  std::printf("MAXSIMD_TEST_SEED=%llu\n",
              static_cast<unsigned long long>(seed));
  return seed;
}

std::string CompareRanking(const std::vector<ScoredDoc>& actual,
                           const std::vector<ScoredDoc>& expected,
                           double rel_tol, bool repeats) {
  if (actual.size() != expected.size()) {
    return absl::StrCat("size ", actual.size(), " != expected ",
                        expected.size());
  }
  auto close = [&](double a, double b) {
    if (std::isinf(a) || std::isinf(b)) return a == b;
    return std::fabs(a - b) <= rel_tol * std::max(1.0, std::fabs(b));
  };
  std::set<int64_t> seen;
  for (size_t i = 0; i < actual.size(); ++i) {
    if (!close(actual[i].score, expected[i].score)) {
      return absl::StrCat("rank ", i, ": score ", actual[i].score, " (index ",
                          actual[i].index, ") != expected ", expected[i].score,
                          " (index ", expected[i].index, ")");
    }
    if (!seen.insert(actual[i].index).second && !repeats) {
      return absl::StrCat("rank ", i, ": index ", actual[i].index,
                          " appears twice");
    }
  }
  // Runs of near-equal expected scores must hold the same documents, except
  // a run that reaches the end of the list, which top-k may have cut.
  size_t begin = 0;
  while (begin < expected.size()) {
    size_t end = begin + 1;
    while (end < expected.size() &&
           close(expected[end].score, expected[end - 1].score)) {
      ++end;
    }
    if (end < expected.size()) {
      std::multiset<int64_t> want, got;
      for (size_t i = begin; i < end; ++i) {
        want.insert(expected[i].index);
        got.insert(actual[i].index);
      }
      if (want != got) {
        return absl::StrCat("ranks ", begin, "..", end - 1,
                            ": documents differ (first expected index ",
                            expected[begin].index, ", got ",
                            actual[begin].index, ")");
      }
    }
    begin = end;
  }
  return "";
}

}  // namespace maxsimd::testing
