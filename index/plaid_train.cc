#include "index/plaid_train.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "absl/strings/str_cat.h"
#include "kernels/thread_pool.h"

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
            const std::vector<float>& centroids, int64_t* codes) {
  const int64_t k = static_cast<int64_t>(centroids.size()) / dim;
  pool.ParallelFor(n, 256, [&](int, int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      codes[i] = Nearest(tokens + i * dim, centroids.data(), k, dim);
    }
  });
}

// Scales x[dim] to unit length (a zero vector stays zero).
void Normalize(float* x, int32_t dim) {
  double norm = 0.0;
  for (int32_t d = 0; d < dim; ++d) norm += double{x[d]} * x[d];
  if (norm <= 0.0) return;
  const float inv = static_cast<float>(1.0 / std::sqrt(norm));
  for (int32_t d = 0; d < dim; ++d) x[d] *= inv;
}

// The q-quantile of sorted values, by linear interpolation between order
// statistics (torch.quantile's default).
float Quantile(const std::vector<float>& sorted, double q) {
  const double at = q * static_cast<double>(sorted.size() - 1);
  const size_t lo = static_cast<size_t>(std::floor(at));
  const size_t hi = std::min(lo + 1, sorted.size() - 1);
  const double frac = at - static_cast<double>(lo);
  return static_cast<float>(sorted[lo] + frac * (sorted[hi] - sorted[lo]));
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

}  // namespace

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
    k = int64_t{1} << static_cast<int>(
            std::floor(std::log2(16.0 * std::sqrt(static_cast<double>(n)))));
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
  SeedCentroids(pool, sample, m, dim, k, rng, codec.centroids.data());
  std::vector<int64_t> codes(static_cast<size_t>(m));
  std::vector<double> sums(static_cast<size_t>(k) * dim);
  std::vector<int64_t> counts(static_cast<size_t>(k));
  for (int32_t it = 0; it < o.iterations; ++it) {
    Assign(pool, sample.data(), m, dim, codec.centroids, codes.data());
    // The update in token order, on one thread: the sums do not depend on
    // how the assignment was split.
    std::fill(sums.begin(), sums.end(), 0.0);
    std::fill(counts.begin(), counts.end(), 0);
    for (int64_t i = 0; i < m; ++i) {
      double* s = &sums[codes[i] * dim];
      const float* x = &sample[i * dim];
      for (int32_t d = 0; d < dim; ++d) s[d] += x[d];
      ++counts[codes[i]];
    }
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
  Assign(pool, sample.data(), m, dim, codec.centroids, codes.data());
  std::vector<float> residuals(sample.size());
  for (int64_t i = 0; i < m; ++i) {
    for (int32_t d = 0; d < dim; ++d) {
      residuals[i * dim + d] =
          sample[i * dim + d] - codec.centroids[codes[i] * dim + d];
    }
  }
  std::sort(residuals.begin(), residuals.end());
  const int buckets = 1 << o.nbits;
  for (int b = 1; b < buckets; ++b) {
    codec.bucket_cutoffs.push_back(
        Quantile(residuals, static_cast<double>(b) / buckets));
  }
  for (int b = 0; b < buckets; ++b) {
    codec.bucket_weights.push_back(
        Quantile(residuals, (static_cast<double>(b) + 0.5) / buckets));
  }
  return codec;
}

void CompressPlaidEmbeddings(const PlaidCodec& codec, const float* tokens,
                             int64_t n, int64_t* codes, uint8_t* residuals,
                             int num_threads) {
  const int32_t dim = codec.dim;
  const int nbits = codec.nbits;
  const int per_byte = 8 / nbits;
  const int64_t row_bytes = int64_t{dim} * nbits / 8;
  ThreadPool pool(num_threads);
  Assign(pool, tokens, n, dim, codec.centroids, codes);
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
}

}  // namespace maxsimd
