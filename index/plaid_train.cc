#include "index/plaid_train.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/types/span.h"
#include "kernels/base/thread_pool.h"
#include "kernels/element.h"

namespace maxsimd {
namespace {

// Index of the row of `centroids` [k, dim] with the largest dot product
// with x (the lowest index on a tie).
int64_t Nearest(const float* x, const float* centroids, int64_t k,
                int32_t dim) {
  int64_t best = 0;
  float best_dot = -std::numeric_limits<float>::infinity();
  for (int64_t c = 0; c < k; ++c) {
    const float* y = centroids + c * dim;
    float dot = 0.f;
    for (int32_t d = 0; d < dim; ++d) dot += x[d] * y[d];
    if (dot > best_dot) {
      best_dot = dot;
      best = c;
    }
  }
  return best;
}

// codes[i] = Nearest(tokens[i]) for i < n, on the pool.
void Assign(ThreadPool& pool, const float* tokens, int64_t n, int32_t dim,
            const float* centroids, int64_t k, int64_t* codes) {
  pool.ParallelFor(n, 256, [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      codes[i] = Nearest(tokens + i * dim, centroids, k, dim);
    }
  });
}

// The assignments of one training or compression: through the hook while
// it answers, on the pool once it has answered UNIMPLEMENTED (or when
// there is none).
class Assigner {
 public:
  Assigner(const PlaidAssignFn& hook, ThreadPool& pool)
      : hook_(hook), pool_(pool), use_hook_(hook != nullptr) {}

  absl::Status Run(const float* tokens, int64_t n, int32_t dim,
                   const float* centroids, int64_t k, int64_t* codes) {
    if (n == 0) return absl::OkStatus();
    if (use_hook_) {
      const absl::Status st = hook_(tokens, n, dim, centroids, k, codes);
      if (st.ok()) {
        for (int64_t i = 0; i < n; ++i) {
          if (codes[i] < 0 || codes[i] >= k) {
            return absl::InternalError(absl::StrCat(
                "PlaidTrainOptions::assign gave token ", i, " the code ",
                codes[i], "; there are ", k, " centroids"));
          }
        }
        return absl::OkStatus();
      }
      if (st.code() != absl::StatusCode::kUnimplemented) return st;
      use_hook_ = false;
    }
    Assign(pool_, tokens, n, dim, centroids, k, codes);
    return absl::OkStatus();
  }

 private:
  const PlaidAssignFn& hook_;
  ThreadPool& pool_;
  bool use_hook_;
};

// Scales x[dim] to unit length (a zero vector stays zero).
void Normalize(float* x, int32_t dim) {
  double norm = 0.0;
  for (int32_t d = 0; d < dim; ++d) norm += double{x[d]} * x[d];
  if (norm > 0.0) ScaleToUnitNorm(x, dim, norm);
}

// The q-quantile of sorted values, by linear interpolation between order
// statistics (torch.quantile's default). Reads only the positions
// QuantilePositions() lists.
float Quantile(const std::vector<float>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = at - static_cast<double>(lo);
  return static_cast<float>(sorted[lo] + frac * (sorted[hi] - sorted[lo]));
}

// The positions Quantile(sorted, q) reads for every q of `qs`, ascending
// and distinct.
std::vector<size_t> QuantilePositions(size_t size,
                                      const std::vector<double>& qs) {
  std::vector<size_t> out;
  for (double q : qs) {
    const size_t lo =
        static_cast<size_t>(std::floor(q * static_cast<double>(size - 1)));
    out.push_back(lo);
    out.push_back(std::min(lo + 1, size - 1));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

// Puts into v[p], for every p of [first, last) (ascending positions in
// [lo, hi)), the value a sort of v[lo, hi) puts there, by nested
// partitions: O(n log #positions) instead of a sort's O(n log n), which at
// the GPU's sample (2^26 residual values) saves seconds of host time.
void PlaceOrderStatistics(std::vector<float>& v, size_t lo, size_t hi,
                          const size_t* first, const size_t* last) {
  if (first == last) return;
  const size_t* mid = first + (last - first) / 2;
  std::nth_element(v.begin() + lo, v.begin() + *mid, v.begin() + hi);
  PlaceOrderStatistics(v, lo, *mid, first, mid);
  PlaceOrderStatistics(v, *mid + 1, hi, mid + 1, last);
}

// k-means++ seeding of k centroids from the m sample tokens: the first
// uniformly, each next one with probability proportional to the squared
// distance 2 - 2 <x, y> (unit vectors) to its nearest chosen centroid.
void SeedCentroids(ThreadPool& pool, const std::vector<float>& sample,
                   int64_t m, int32_t dim, int64_t k, std::mt19937_64& rng,
                   float* centroids) {
  std::vector<double> dist(static_cast<size_t>(m),
                           std::numeric_limits<double>::infinity());
  std::uniform_int_distribution<int64_t> first(0, m - 1);
  int64_t next = first(rng);
  for (int64_t c = 0; c < k; ++c) {
    const float* y = sample.data() + next * dim;
    std::copy(y, y + dim, centroids + c * dim);
    if (c + 1 == k) break;
    pool.ParallelFor(m, 1024, [&](int, int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        const float* x = sample.data() + i * dim;
        float dot = 0.f;
        for (int32_t d = 0; d < dim; ++d) dot += x[d] * y[d];
        dist[i] = std::min(dist[i], std::max(0.0, 2.0 - 2.0 * dot));
      }
    });
    double total = 0.0;
    for (double v : dist) total += v;
    if (total <= 0.0) {  // fewer distinct tokens than centroids
      next = first(rng);
      continue;
    }
    double at = std::uniform_real_distribution<double>(0.0, total)(rng);
    next = m - 1;
    for (int64_t i = 0; i < m; ++i) {
      at -= dist[i];
      if (at < 0.0 && dist[i] > 0.0) {
        next = i;
        break;
      }
    }
  }
}

// k distinct sample tokens drawn uniformly (a partial Fisher-Yates
// shuffle of their indices), as faiss's k-means starts.
void SeedRandomTokens(const std::vector<float>& sample, int64_t m, int32_t dim,
                      int64_t k, std::mt19937_64& rng, float* centroids) {
  std::vector<int64_t> order(static_cast<size_t>(m));
  std::iota(order.begin(), order.end(), 0);
  for (int64_t c = 0; c < k; ++c) {
    std::uniform_int_distribution<int64_t> u(c, m - 1);
    std::swap(order[c], order[u(rng)]);
    const float* x = sample.data() + order[c] * dim;
    std::copy(x, x + dim, centroids + c * dim);
  }
}

}  // namespace

void AssignNearestCentroidsOnHost(const float* tokens, int64_t n, int32_t dim,
                                  const float* centroids, int64_t k,
                                  int64_t* codes, int num_threads) {
  if (n <= 0) return;
  ThreadPool pool(num_threads);
  Assign(pool, tokens, n, dim, centroids, k, codes);
}

PlaidAssignFn BackendAssignFn(Backend* backend) {
  if (backend == nullptr || !backend->AssignsNearestCentroids()) return {};
  return [backend](const float* tokens, int64_t m, int32_t dim,
                   const float* centroids, int64_t k, int64_t* codes) {
    return backend->AssignNearestCentroids(
        absl::MakeConstSpan(tokens, static_cast<size_t>(m) * dim),
        absl::MakeConstSpan(centroids, static_cast<size_t>(k) * dim), dim,
        absl::MakeSpan(codes, static_cast<size_t>(m)));
  };
}

PlaidTrainOptions PlaidTrainOptionsFor(Backend* backend) {
  PlaidTrainOptions o;
  o.assign = BackendAssignFn(backend);
  if (o.assign != nullptr) {
    o.max_sample = kGpuPlaidMaxSample;
    o.seeding = PlaidSeeding::kRandomTokens;
  }
  return o;
}

absl::StatusOr<PlaidCodec> TrainPlaidCodec(const float* tokens, int64_t n,
                                           int32_t dim,
                                           const PlaidTrainOptions& o) {
  if (o.nbits != 1 && o.nbits != 2 && o.nbits != 4 && o.nbits != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("nbits is ", o.nbits, "; PLAID takes 1, 2, 4 or 8"));
  }
  if (dim <= 0 || (int64_t{dim} * o.nbits) % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("dim ", dim, " x nbits ", o.nbits,
                     " is not a whole number of bytes per residual row"));
  }
  if (n <= 0) return absl::InvalidArgumentError("no tokens to train on");
  if (o.iterations < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("iterations is ", o.iterations, "; at least 1"));
  }
  // The sample: every token, or a uniform choice of max_sample of them
  // (a partial Fisher-Yates shuffle), kept in corpus order.
  std::mt19937_64 rng(o.seed);
  std::vector<int64_t> pick(static_cast<size_t>(n));
  std::iota(pick.begin(), pick.end(), 0);
  const int64_t m = std::min(n, std::max<int64_t>(o.max_sample, 1));
  for (int64_t i = 0; i < m && m < n; ++i) {
    std::uniform_int_distribution<int64_t> u(i, n - 1);
    std::swap(pick[i], pick[u(rng)]);
  }
  pick.resize(static_cast<size_t>(m));
  std::sort(pick.begin(), pick.end());
  std::vector<float> sample(static_cast<size_t>(m) * dim);
  for (int64_t i = 0; i < m; ++i) {
    std::copy(tokens + pick[i] * dim, tokens + (pick[i] + 1) * dim,
              sample.begin() + i * dim);
  }
  int64_t k = o.num_centroids;
  if (k == 0) {
    const int64_t population = std::max(n, o.corpus_tokens);
    k = int64_t{1} << static_cast<int>(std::floor(
            std::log2(16.0 * std::sqrt(static_cast<double>(population)))));
    k = std::min(k, std::max<int64_t>(1, m / 32));
  }
  if (k < 1 || k > m) {
    return absl::InvalidArgumentError(absl::StrCat(
        "num_centroids is ", k, "; between 1 and the ", m, " sampled tokens"));
  }

  PlaidCodec codec;
  codec.dim = dim;
  codec.nbits = o.nbits;
  codec.num_centroids = k;
  codec.centroids.resize(static_cast<size_t>(k) * dim);
  ThreadPool pool(o.num_threads);
  if (o.seeding == PlaidSeeding::kRandomTokens) {
    SeedRandomTokens(sample, m, dim, k, rng, codec.centroids.data());
  } else {
    SeedCentroids(pool, sample, m, dim, k, rng, codec.centroids.data());
  }
  Assigner assigner(o.assign, pool);
  std::vector<int64_t> codes(static_cast<size_t>(m));
  std::vector<double> sums(static_cast<size_t>(k) * dim);
  std::vector<int64_t> counts(static_cast<size_t>(k));
  for (int32_t it = 0; it < o.iterations; ++it) {
    if (absl::Status st = assigner.Run(sample.data(), m, dim,
                                       codec.centroids.data(), k, codes.data());
        !st.ok()) {
      return st;
    }
    // The update: each centroid's sum in token order, whatever the split
    // of the centroids over threads, so no result depends on it.
    pool.ParallelFor(k, 64, [&](int, int64_t c_begin, int64_t c_end) {
      std::fill(sums.begin() + c_begin * dim, sums.begin() + c_end * dim, 0.0);
      std::fill(counts.begin() + c_begin, counts.begin() + c_end, 0);
      for (int64_t i = 0; i < m; ++i) {
        if (codes[i] < c_begin || codes[i] >= c_end) continue;
        double* s = &sums[codes[i] * dim];
        const float* x = &sample[i * dim];
        for (int32_t d = 0; d < dim; ++d) s[d] += x[d];
        ++counts[codes[i]];
      }
    });
    std::uniform_int_distribution<int64_t> any(0, m - 1);
    for (int64_t c = 0; c < k; ++c) {
      float* y = &codec.centroids[c * dim];
      if (counts[c] == 0) {
        const int64_t i = any(rng);
        std::copy(sample.begin() + i * dim, sample.begin() + (i + 1) * dim, y);
        continue;
      }
      for (int32_t d = 0; d < dim; ++d) {
        y[d] = static_cast<float>(sums[c * dim + d] / counts[c]);
      }
      Normalize(y, dim);
    }
  }

  // Buckets from the residuals of the sample against the final centroids.
  if (absl::Status st = assigner.Run(sample.data(), m, dim,
                                     codec.centroids.data(), k, codes.data());
      !st.ok()) {
    return st;
  }
  std::vector<float> residuals(sample.size());
  for (int64_t i = 0; i < m; ++i) {
    for (int32_t d = 0; d < dim; ++d) {
      residuals[i * dim + d] =
          sample[i * dim + d] - codec.centroids[codes[i] * dim + d];
    }
  }
  const int buckets = 1 << o.nbits;
  std::vector<double> cutoff_q, weight_q;
  for (int b = 1; b < buckets; ++b) {
    cutoff_q.push_back(static_cast<double>(b) / buckets);
  }
  for (int b = 0; b < buckets; ++b) {
    weight_q.push_back((static_cast<double>(b) + 0.5) / buckets);
  }
  std::vector<double> all_q = cutoff_q;
  all_q.insert(all_q.end(), weight_q.begin(), weight_q.end());
  const std::vector<size_t> positions =
      QuantilePositions(residuals.size(), all_q);
  PlaceOrderStatistics(residuals, 0, residuals.size(), positions.data(),
                       positions.data() + positions.size());
  for (double q : cutoff_q) {
    codec.bucket_cutoffs.push_back(Quantile(residuals, q));
  }
  for (double q : weight_q) {
    codec.bucket_weights.push_back(Quantile(residuals, q));
  }
  return codec;
}

void CompressPlaidEmbeddings(const PlaidCodec& codec, const float* tokens,
                             int64_t n, int64_t* codes, uint8_t* residuals,
                             int num_threads) {
  const absl::Status st = CompressPlaidEmbeddings(
      codec, tokens, n, codes, residuals, PlaidAssignFn(), num_threads);
  (void)st;  // the host's assignment cannot fail
}

absl::Status CompressPlaidEmbeddings(const PlaidCodec& codec,
                                     const float* tokens, int64_t n,
                                     int64_t* codes, uint8_t* residuals,
                                     const PlaidAssignFn& assign,
                                     int num_threads) {
  const int32_t dim = codec.dim;
  const int nbits = codec.nbits;
  const int per_byte = 8 / nbits;
  const int64_t row_bytes = int64_t{dim} * nbits / 8;
  ThreadPool pool(num_threads);
  Assigner assigner(assign, pool);
  if (absl::Status st = assigner.Run(tokens, n, dim, codec.centroids.data(),
                                     codec.num_centroids, codes);
      !st.ok()) {
    return st;
  }
  pool.ParallelFor(n, 256, [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      const float* x = tokens + i * dim;
      const float* c = codec.centroids.data() + codes[i] * dim;
      uint8_t* row = residuals + i * row_bytes;
      std::fill(row, row + row_bytes, uint8_t{0});
      for (int32_t d = 0; d < dim; ++d) {
        const float r = x[d] - c[d];
        // #{cutoffs < r}: the cutoffs ascend.
        const int bucket =
            static_cast<int>(std::lower_bound(codec.bucket_cutoffs.begin(),
                                              codec.bucket_cutoffs.end(), r) -
                             codec.bucket_cutoffs.begin());
        // Bit t of the bucket at the group's highest bit minus t (the
        // layout PlaidResidualBucket reads).
        const int top = 7 - (d % per_byte) * nbits;
        for (int t = 0; t < nbits; ++t) {
          row[d / per_byte] |=
              static_cast<uint8_t>(((bucket >> t) & 1) << (top - t));
        }
      }
    }
  });
  return absl::OkStatus();
}

}  // namespace maxsimd
