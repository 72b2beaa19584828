// A backend over several shards: one child backend per GPU (or several per
// GPU, or CPU backends in tests), each holding a document range of every
// corpus that is split across them.
//
// Search() splits a batch by shard: every shard scans its own segments, or
// ranks the candidates that live in it, and the per-shard top-k lists are
// merged into one in RanksBefore order. Internal document indices are global
// to the corpus, so the merged ranking equals the one a single backend
// holding every segment returns.
//
// Executors: every shard has its own threads (`threads_per_shard`, one per
// worker slot of the child), which run that shard's part of each search;
// each child GPU backend gives every concurrent search its own stream and
// workspace, so the copies of one batch overlap the kernels of another. The
// calling thread runs one shard's part itself and waits for the others.
//
// Ownership: owns the children. Upload(), Pin() and AssignNearestCentroids()
// go to shard 0; a corpus places each segment on a shard by uploading
// through shard(i). ScoreCentroids(shard, ...) goes to the shard named,
// whose memory holds the tables (every shard holds a copy of a PLAID
// codec's), and runs on the calling thread.
//
// Thread-safety: as Backend.
#ifndef MAXSIMD_KERNELS_SHARDED_BACKEND_H_
#define MAXSIMD_KERNELS_SHARDED_BACKEND_H_

#include <memory>
#include <string>
#include <vector>

#include "kernels/backend.h"

namespace maxsimd {

class ShardedBackend final : public Backend {
 public:
  // Errors: INVALID_ARGUMENT for no children, a null child, or
  // threads_per_shard < 1. The children's limits must be equal; the first
  // child's are used.
  static absl::StatusOr<std::unique_ptr<Backend>> Create(
      std::vector<std::unique_ptr<Backend>> shards, int threads_per_shard);
  ~ShardedBackend() override;

  std::string name() const override;
  std::string description() const override;
  const BackendLimits& limits() const override;
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Upload(const void* host,
                                                         size_t bytes) override;
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Pin(const void* host,
                                                      size_t bytes) override;
  absl::Status Search(const SearchParams& params,
                      absl::Span<std::vector<ScoredDoc>> results,
                      SearchTiming* timing) override;
  bool healthy() const override;
  // True when every shard scores `dtype`.
  bool SupportsDType(DType dtype, int32_t dim) const override;
  bool StreamsDType(DType dtype) const override;
  // Where every shard prefers them.
  bool PrefersQuantizedQueries(int32_t dim) const override;
  int num_shards() const override;
  Backend* shard(int i) override;
  // One entry per device: shards on one GPU add up their corpus and
  // workspace bytes.
  std::vector<DeviceMemory> Memory() const override;
  // Shard 0's: training runs on one device, whatever the shards.
  absl::Status AssignNearestCentroids(absl::Span<const float> tokens,
                                      absl::Span<const float> centroids,
                                      int32_t dim,
                                      absl::Span<int64_t> codes) override;
  bool AssignsNearestCentroids() const override;
  // Shard `shard`'s, with the tables in its memory.
  absl::Status ScoreCentroids(int shard, const PlaidTablesView& tables,
                              int32_t dim, absl::Span<const float> tokens,
                              absl::Span<float> scores) override;
  // True when every shard scores centroids.
  bool ScoresCentroids() const override;

 private:
  class Executor;  // the threads of one shard
  ShardedBackend() = default;

  std::vector<std::unique_ptr<Backend>> shards_;
  std::vector<std::unique_ptr<Executor>> executors_;  // parallel to shards_
};

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_SHARDED_BACKEND_H_
