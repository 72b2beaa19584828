#include "index/plaid_codec.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "kernels/base/half.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {
namespace {

bool AllFinite(const std::vector<float>& v) {
  return std::all_of(v.begin(), v.end(),
                     [](float x) { return std::isfinite(x); });
}

}  // namespace

absl::Status ValidatePlaidCodec(const PlaidCodec& c, const char* what) {
  if (PlaidNbits(PlaidDType(c.nbits)) == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": nbits is ", c.nbits, "; must be 1, 2, 4 or 8"));
  }
  if (c.dim < 1 || (int64_t{c.dim} * c.nbits) % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": dim ", c.dim, " x nbits ", c.nbits,
                     " must be a positive multiple of 8"));
  }
  if (c.num_centroids < 1 || c.num_centroids > kMaxPlaidCentroids) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": num_centroids is ", c.num_centroids,
                     ", must be in [1, ", kMaxPlaidCentroids, "]"));
  }
  const size_t buckets = size_t{1} << c.nbits;
  if (c.centroids.size() != static_cast<size_t>(c.num_centroids) * c.dim ||
      c.bucket_weights.size() != buckets ||
      (!c.bucket_cutoffs.empty() && c.bucket_cutoffs.size() != buckets - 1)) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": tables have ", c.centroids.size(), " centroid values, ",
        c.bucket_weights.size(), " bucket_weights and ",
        c.bucket_cutoffs.size(), " bucket_cutoffs; expected ",
        c.num_centroids * c.dim, ", ", buckets, " and ", buckets - 1));
  }
  if (!AllFinite(c.centroids) || !AllFinite(c.bucket_weights) ||
      !AllFinite(c.bucket_cutoffs)) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": the tables hold a value that is not finite"));
  }
  return absl::OkStatus();
}

bool SamePlaidCodec(const PlaidCodec& a, const PlaidCodec& b) {
  return a.dim == b.dim && a.nbits == b.nbits &&
         a.num_centroids == b.num_centroids && a.centroids == b.centroids &&
         a.bucket_weights == b.bucket_weights;
}

CorpusCodec::CorpusCodec(PlaidCodec codec) : codec_(std::move(codec)) {
  centroids_f16_.reserve(codec_.centroids.size());
  for (float v : codec_.centroids) centroids_f16_.push_back(FloatToHalf(v));
}

absl::StatusOr<std::shared_ptr<const CorpusCodec>> CorpusCodec::Create(
    PlaidCodec codec, Backend* backend) {
  MAXSIMD_RETURN_IF_ERROR(ValidatePlaidCodec(codec, "codec"));
  std::shared_ptr<CorpusCodec> c(new CorpusCodec(std::move(codec)));
  const PlaidCodec& k = c->codec_;
  for (int s = 0; s < backend->num_shards(); ++s) {
    Backend* shard = backend->shard(s);
    Resident r;
    MAXSIMD_ASSIGN_OR_RETURN(
        r.centroids,
        shard->Upload(k.centroids.data(), k.centroids.size() * sizeof(float)));
    MAXSIMD_ASSIGN_OR_RETURN(
        r.centroids_f16,
        shard->Upload(c->centroids_f16_.data(),
                      c->centroids_f16_.size() * sizeof(uint16_t)));
    MAXSIMD_ASSIGN_OR_RETURN(
        r.weights, shard->Upload(k.bucket_weights.data(),
                                 k.bucket_weights.size() * sizeof(float)));
    c->resident_.push_back(std::move(r));
  }
  return std::shared_ptr<const CorpusCodec>(std::move(c));
}

PlaidTablesView CorpusCodec::HostTables() const {
  PlaidTablesView v;
  v.centroids = codec_.centroids.data();
  v.centroids_f16 = centroids_f16_.data();
  v.bucket_weights = codec_.bucket_weights.data();
  v.num_centroids = codec_.num_centroids;
  return v;
}

PlaidTablesView CorpusCodec::ResidentTables(int shard) const {
  const Resident& r = resident_[shard];
  PlaidTablesView v;
  v.centroids = static_cast<const float*>(r.centroids->data());
  v.centroids_f16 = static_cast<const uint16_t*>(r.centroids_f16->data());
  v.bucket_weights = static_cast<const float*>(r.weights->data());
  v.num_centroids = codec_.num_centroids;
  return v;
}

}  // namespace maxsimd
