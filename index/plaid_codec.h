// The residual codec of a PLAID corpus, held once per corpus: the host
// tables (index/plaid.h's PlaidCodec, plus the centroids rounded to
// float16) and a resident copy on every shard of the backend, which every
// segment's views point at (kernels/types.h, PlaidTablesView).
//
// Thread-safety: immutable after Create; share it through
// shared_ptr<const CorpusCodec>.
#ifndef MAXSIMD_INDEX_PLAID_CODEC_H_
#define MAXSIMD_INDEX_PLAID_CODEC_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "index/plaid.h"
#include "kernels/backend.h"

namespace maxsimd {

// Checks a codec's shape: nbits in {1, 2, 4, 8}, dim * nbits a multiple of
// 8, 1 <= num_centroids <= kMaxPlaidCentroids, table sizes, finite values,
// cutoffs (when present) and weights ascending. INVALID_ARGUMENT naming
// `what` and the field.
absl::Status ValidatePlaidCodec(const PlaidCodec& codec, const char* what);

// Whether two codecs decode every row alike: same shape, centroids and
// bucket weights (the cutoffs only matter for compressing).
bool SamePlaidCodec(const PlaidCodec& a, const PlaidCodec& b);

// Most centroids a codec may have.
inline constexpr int64_t kMaxPlaidCentroids = int64_t{1} << 22;

class CorpusCodec {
 public:
  // Uploads the tables to every shard of `backend`. Errors:
  // ValidatePlaidCodec's, and the backend's upload errors.
  static absl::StatusOr<std::shared_ptr<const CorpusCodec>> Create(
      PlaidCodec codec, Backend* backend);

  const PlaidCodec& codec() const { return codec_; }
  int nbits() const { return codec_.nbits; }
  // Tables in host memory, and resident on shard `shard`.
  PlaidTablesView HostTables() const;
  PlaidTablesView ResidentTables(int shard) const;

 private:
  explicit CorpusCodec(PlaidCodec codec);

  PlaidCodec codec_;
  std::vector<uint16_t> centroids_f16_;
  struct Resident {
    std::unique_ptr<ResidentBuffer> centroids, centroids_f16, weights;
  };
  std::vector<Resident> resident_;  // one per shard
};

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_PLAID_CODEC_H_
