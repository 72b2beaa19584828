#include "index/token_pooling.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "kernels/base/target_clones.h"
#include "kernels/base/thread_pool.h"
#include "kernels/element.h"

namespace maxsimd {
namespace {

constexpr double kInf = std::numeric_limits<double>::infinity();

// Columns of the Gram matrix one pass of GramRows computes: a fixed trip
// count, so that the inner loop vectorises at -O2.
constexpr int64_t kGramCols = 64;
// Rows that share each load of the transposed tokens.
constexpr int64_t kGramRows = 4;

// One merge of the tree: the clusters in slots a < b (slot s always holds
// token s), at `height`; `monotone` is the largest height in its subtree.
struct Merge {
  int32_t a;
  int32_t b;
  double height;
  double monotone;
};

// Per-thread working memory, grown to the largest document seen.
struct Scratch {
  std::vector<float> transposed;    // [dim, n_pad], zero past n
  std::vector<double> norms;        // [n]
  std::vector<double> dist;         // [n, n]; +inf on the diagonal, dead slots
  std::vector<int32_t> size;        // [n] tokens in the slot's cluster, 0: dead
  std::vector<double> monotone;     // [n] Merge::monotone of the slot's cluster
  std::vector<int32_t> chain;       // [n]
  std::vector<Merge> merges;        // [n - 1]
  std::vector<int32_t> order;       // [n - 1]
  std::vector<int32_t> parent;      // [n] union-find over tokens
  std::vector<int32_t> root_group;  // [n] group of a root, -1: none yet
  std::vector<int32_t> groups;      // [n] group of each token
  std::vector<double> sums;         // [k, dim]
  std::vector<int32_t> counts;      // [k]
};

// dots[r][c] = sum over d of row r * transposed[d][c0 + c], an fp32 sum
// in dimension order, for r < kGramRows and c < kGramCols; rows r >=
// num_rows repeat the last row. The sums are held in a local array with
// fixed trip counts: no aliasing and no remainder loop, so the c loop
// vectorises at -O2 (GCC's very cheap cost model allows no run-time
// alias checks).
MAXSIMD_TARGET_CLONES
void GramTile(const float* rows, int64_t num_rows, int32_t dim,
              const float* transposed, int64_t n_pad, int64_t c0,
              float (*dots)[kGramCols]) {
  const float* row[kGramRows];
  for (int64_t r = 0; r < kGramRows; ++r) {
    row[r] = rows + std::min(r, num_rows - 1) * dim;
  }
  float acc[kGramRows][kGramCols] = {};
  for (int32_t d = 0; d < dim; ++d) {
    const float* t = transposed + d * n_pad + c0;
    for (int64_t r = 0; r < kGramRows; ++r) {
      const float x = row[r][d];
      for (int64_t c = 0; c < kGramCols; ++c) acc[r][c] += x * t[c];
    }
  }
  std::memcpy(dots, acc, sizeof(acc));
}

// s.dist[i][j] = 1 - cos(t_i, t_j) for i != j, +inf on the diagonal.
void CosineDistances(const float* x, int64_t n, int32_t dim, Scratch& s) {
  const int64_t n_pad = (n + kGramCols - 1) / kGramCols * kGramCols;
  s.transposed.assign(static_cast<size_t>(dim) * n_pad, 0.f);
  for (int64_t i = 0; i < n; ++i) {
    for (int32_t d = 0; d < dim; ++d) {
      s.transposed[d * n_pad + i] = x[i * dim + d];
    }
  }
  s.norms.resize(n);
  for (int64_t i = 0; i < n; ++i) {
    double sum = 0.0;
    for (int32_t d = 0; d < dim; ++d) {
      sum += double{x[i * dim + d]} * x[i * dim + d];
    }
    s.norms[i] = std::sqrt(sum);
  }
  s.dist.resize(static_cast<size_t>(n) * n);
  double* dist = s.dist.data();
  float dots[kGramRows][kGramCols];
  for (int64_t i0 = 0; i0 < n; i0 += kGramRows) {
    const int64_t rows = std::min(kGramRows, n - i0);
    // Only the upper triangle: columns from the tile holding i0.
    for (int64_t c0 = i0 / kGramCols * kGramCols; c0 < n; c0 += kGramCols) {
      GramTile(x + i0 * dim, rows, dim, s.transposed.data(), n_pad, c0, dots);
      for (int64_t r = 0; r < rows; ++r) {
        const int64_t i = i0 + r;
        const int64_t c_end = std::min(kGramCols, n - c0);
        for (int64_t c = std::max<int64_t>(0, i + 1 - c0); c < c_end; ++c) {
          const int64_t j = c0 + c;
          const double denom = s.norms[i] * s.norms[j];
          const double cos = denom > 0.0 ? double{dots[r][c]} / denom : 0.0;
          dist[i * n + j] = dist[j * n + i] = 1.0 - cos;
        }
      }
    }
  }
  for (int64_t i = 0; i < n; ++i) dist[i * n + i] = kInf;
}

// scipy's _hierarchy._ward (scipy/cluster/_hierarchy_distance_update.pxi),
// term for term, with a negative radicand taken as 0.
inline double WardUpdate(double d_xi, double d_yi, double d_xy, int32_t n_x,
                         int32_t n_y, int32_t n_i) {
  const double t = 1.0 / (n_x + n_y + n_i);
  const double r = (n_i + n_x) * t * d_xi * d_xi +
                   (n_i + n_y) * t * d_yi * d_yi - n_i * t * d_xy * d_xy;
  return r > 0.0 ? std::sqrt(r) : 0.0;
}

// The n - 1 merges of the Ward tree over s.dist (destroyed), in the order
// scipy's nn_chain finds them, into s.merges.
void WardTree(int64_t n, Scratch& s) {
  double* dist = s.dist.data();
  s.size.assign(n, 1);
  s.monotone.assign(n, -kInf);
  s.chain.resize(n);
  s.merges.clear();
  int32_t* chain = s.chain.data();
  int64_t chain_length = 0;
  int32_t lowest_live = 0;
  for (int64_t step = 0; step + 1 < n; ++step) {
    if (chain_length == 0) {
      while (s.size[lowest_live] == 0) ++lowest_live;
      chain[0] = lowest_live;
      chain_length = 1;
    }
    int32_t x = 0;
    int32_t y = 0;
    double current_min = kInf;
    // Follow nearest neighbours until two are each other's.
    while (true) {
      x = chain[chain_length - 1];
      if (chain_length > 1) {
        y = chain[chain_length - 2];
        current_min = dist[x * n + y];
      } else {
        current_min = kInf;
      }
      // Dead slots and the diagonal hold +inf, so they never win; the
      // strict < keeps the previous chain element, then the lowest index.
      const double* row = dist + x * n;
      for (int64_t i = 0; i < n; ++i) {
        if (row[i] < current_min) {
          current_min = row[i];
          y = static_cast<int32_t>(i);
        }
      }
      if (chain_length > 1 && y == chain[chain_length - 2]) break;
      chain[chain_length++] = y;
    }
    chain_length -= 2;
    if (x > y) std::swap(x, y);
    const int32_t n_x = s.size[x];
    const int32_t n_y = s.size[y];
    const double monotone =
        std::max({current_min, s.monotone[x], s.monotone[y]});
    s.merges.push_back(Merge{x, y, current_min, monotone});
    s.size[x] = 0;
    s.size[y] = n_x + n_y;
    s.monotone[y] = monotone;
    double* row_x = dist + x * n;
    double* row_y = dist + y * n;
    for (int64_t i = 0; i < n; ++i) {
      const int32_t n_i = s.size[i];
      if (n_i == 0 || i == y) continue;
      const double d =
          WardUpdate(row_x[i], row_y[i], current_min, n_x, n_y, n_i);
      row_y[i] = d;
      dist[i * n + y] = d;
    }
    // Slot x is dead: no row scan may pick it again.
    for (int64_t i = 0; i < n; ++i) dist[i * n + x] = kInf;
  }
}

int32_t Find(std::vector<int32_t>& parent, int32_t i) {
  while (parent[i] != i) {
    parent[i] = parent[parent[i]];
    i = parent[i];
  }
  return i;
}

// s.groups[i] = the group of token i for k groups of the n tokens of x,
// numbered by first token. REQUIRES: 1 <= k <= n.
void Groups(const float* x, int64_t n, int32_t dim, int64_t k, Scratch& s) {
  s.groups.resize(n);
  if (k == n) {
    std::iota(s.groups.begin(), s.groups.end(), 0);
    return;
  }
  if (k == 1) {
    std::fill(s.groups.begin(), s.groups.end(), 0);
    return;
  }
  CosineDistances(x, n, dim, s);
  WardTree(n, s);
  // The n - k lowest merges: fcluster's maxclust cut.
  s.order.resize(n - 1);
  std::iota(s.order.begin(), s.order.end(), 0);
  std::stable_sort(s.order.begin(), s.order.end(), [&](int32_t l, int32_t r) {
    return s.merges[l].monotone < s.merges[r].monotone;
  });
  s.parent.resize(n);
  std::iota(s.parent.begin(), s.parent.end(), 0);
  for (int64_t m = 0; m < n - k; ++m) {
    const Merge& merge = s.merges[s.order[m]];
    const int32_t ra = Find(s.parent, merge.a);
    const int32_t rb = Find(s.parent, merge.b);
    s.parent[std::max(ra, rb)] = std::min(ra, rb);
  }
  s.root_group.assign(n, -1);
  int32_t next = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int32_t root = Find(s.parent, static_cast<int32_t>(i));
    if (s.root_group[root] < 0) s.root_group[root] = next++;
    s.groups[i] = s.root_group[root];
  }
}

// Pools the n tokens of x into out [k, dim]. REQUIRES: inputs validated.
void PoolInto(const float* x, int64_t n, int32_t dim, int32_t pool_factor,
              bool normalize, Scratch& s, float* out) {
  const int64_t k = PooledTokenCount(n, pool_factor);
  if (k == n) {
    if (n > 0) std::memcpy(out, x, sizeof(float) * n * dim);
    return;
  }
  Groups(x, n, dim, k, s);
  // Each group's sum, in token order.
  s.sums.resize(static_cast<size_t>(k) * dim);
  std::fill(s.sums.begin(), s.sums.end(), 0.0);
  s.counts.assign(k, 0);
  for (int64_t i = 0; i < n; ++i) {
    const int32_t g = s.groups[i];
    ++s.counts[g];
    double* sum = s.sums.data() + static_cast<int64_t>(g) * dim;
    for (int32_t d = 0; d < dim; ++d) sum[d] += x[i * dim + d];
  }
  for (int64_t g = 0; g < k; ++g) {
    float* row = out + g * dim;
    const double* sum = s.sums.data() + g * dim;
    const int32_t count = s.counts[g];
    double norm2 = 0.0;
    for (int32_t d = 0; d < dim; ++d) {
      row[d] = static_cast<float>(sum[d] / count);
      norm2 += double{row[d]} * row[d];
    }
    if (normalize && count > 1 && norm2 > 0.0) {
      ScaleToUnitNorm(row, dim, norm2);
    }
  }
}

// Checks what every entry point shares; `where` names the caller.
absl::Status CheckShape(absl::string_view where, size_t values, int32_t dim,
                        int32_t pool_factor) {
  if (dim < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": dim is ", dim, "; it must be at least 1"));
  }
  if (pool_factor < 1 || pool_factor > kMaxTokenPoolFactor) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": pool_factor is ", pool_factor,
                     "; it must be in [1, ", kMaxTokenPoolFactor, "]"));
  }
  if (values % static_cast<size_t>(dim) != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": tokens has ", values,
                     " values, not a multiple of dim ", dim));
  }
  return absl::OkStatus();
}

// Checks one document of n tokens at x (document `doc` of a batch, or -1).
absl::Status CheckDocument(absl::string_view where, const float* x, int64_t n,
                           int32_t dim, int32_t pool_factor, int64_t doc) {
  const std::string of_doc =
      doc < 0 ? std::string() : absl::StrCat(" of document ", doc);
  for (int64_t i = 0; i < n * dim; ++i) {
    if (!std::isfinite(x[i])) {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tokens: token ", i / dim, of_doc, " has a value that is ",
          "not finite (", x[i], ") at dimension ", i % dim));
    }
  }
  const int64_t k = PooledTokenCount(n, pool_factor);
  if (k > 1 && k < n && n > kMaxPooledDocumentTokens) {
    return absl::InvalidArgumentError(absl::StrCat(
        where, ": tokens: ",
        doc < 0 ? "the document" : absl::StrCat("document ", doc), " has ", n,
        " tokens; at most ", kMaxPooledDocumentTokens, " can be pooled"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t PooledTokenCount(int64_t n, int32_t pool_factor) {
  return (n + pool_factor - 1) / pool_factor;
}

absl::StatusOr<std::vector<int32_t>> TokenPoolingGroups(
    absl::Span<const float> tokens, int32_t dim, int32_t pool_factor) {
  constexpr absl::string_view kWhere = "TokenPoolingGroups";
  absl::Status st = CheckShape(kWhere, tokens.size(), dim, pool_factor);
  if (!st.ok()) return st;
  const int64_t n = static_cast<int64_t>(tokens.size()) / dim;
  st = CheckDocument(kWhere, tokens.data(), n, dim, pool_factor, -1);
  if (!st.ok()) return st;
  if (n == 0) return std::vector<int32_t>();
  Scratch s;
  Groups(tokens.data(), n, dim, PooledTokenCount(n, pool_factor), s);
  return std::move(s.groups);
}

absl::StatusOr<int64_t> PoolDocumentTokens(absl::Span<const float> tokens,
                                           int32_t dim,
                                           const TokenPoolingOptions& options,
                                           std::vector<float>* out) {
  constexpr absl::string_view kWhere = "PoolDocumentTokens";
  absl::Status st = CheckShape(kWhere, tokens.size(), dim, options.pool_factor);
  if (!st.ok()) return st;
  if (out == nullptr) {
    return absl::InvalidArgumentError(
        absl::StrCat(kWhere, ": out must not be null"));
  }
  const int64_t n = static_cast<int64_t>(tokens.size()) / dim;
  st = CheckDocument(kWhere, tokens.data(), n, dim, options.pool_factor, -1);
  if (!st.ok()) return st;
  const int64_t k = PooledTokenCount(n, options.pool_factor);
  out->assign(static_cast<size_t>(k) * dim, 0.f);
  Scratch s;
  PoolInto(tokens.data(), n, dim, options.pool_factor, options.normalize, s,
           out->data());
  return k;
}

absl::Status PoolTokenBatch(absl::Span<const float> tokens,
                            absl::Span<const int64_t> cu_seqlens, int32_t dim,
                            const TokenPoolingOptions& options,
                            ThreadPool* pool, std::vector<float>* out_tokens,
                            std::vector<int64_t>* out_cu_seqlens) {
  constexpr absl::string_view kWhere = "PoolTokenBatch";
  absl::Status st = CheckShape(kWhere, tokens.size(), dim, options.pool_factor);
  if (!st.ok()) return st;
  if (out_tokens == nullptr || out_cu_seqlens == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhere, ": out_tokens and out_cu_seqlens must not be null"));
  }
  const int64_t total = static_cast<int64_t>(tokens.size()) / dim;
  if (cu_seqlens.empty() || cu_seqlens.front() != 0 ||
      cu_seqlens.back() != total) {
    return absl::InvalidArgumentError(absl::StrCat(
        kWhere, ": cu_seqlens must start at 0 and end at the ", total,
        " tokens given (", cu_seqlens.size(), " entries, from ",
        cu_seqlens.empty() ? 0 : cu_seqlens.front(), " to ",
        cu_seqlens.empty() ? 0 : cu_seqlens.back(), ")"));
  }
  const int64_t num_docs = static_cast<int64_t>(cu_seqlens.size()) - 1;
  std::vector<int64_t> out_cu(cu_seqlens.size(), 0);
  for (int64_t d = 0; d < num_docs; ++d) {
    const int64_t n = cu_seqlens[d + 1] - cu_seqlens[d];
    if (n < 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(kWhere, ": cu_seqlens decreases at entry ", d + 1, " (",
                       cu_seqlens[d], " then ", cu_seqlens[d + 1], ")"));
    }
    st = CheckDocument(kWhere, tokens.data() + cu_seqlens[d] * dim, n, dim,
                       options.pool_factor, d);
    if (!st.ok()) return st;
    out_cu[d + 1] = out_cu[d] + PooledTokenCount(n, options.pool_factor);
  }
  out_tokens->assign(static_cast<size_t>(out_cu.back()) * dim, 0.f);
  auto run = [&](Scratch& s, int64_t begin, int64_t end) {
    for (int64_t d = begin; d < end; ++d) {
      PoolInto(tokens.data() + cu_seqlens[d] * dim,
               cu_seqlens[d + 1] - cu_seqlens[d], dim, options.pool_factor,
               options.normalize, s, out_tokens->data() + out_cu[d] * dim);
    }
  };
  if (pool == nullptr || num_docs <= 1) {
    Scratch s;
    run(s, 0, num_docs);
  } else {
    std::vector<Scratch> scratch(pool->size());
    pool->ParallelFor(num_docs, 1, [&](int worker, int64_t begin, int64_t end) {
      run(scratch[worker], begin, end);
    });
  }
  *out_cu_seqlens = std::move(out_cu);
  return absl::OkStatus();
}

}  // namespace maxsimd
