// Exact top-k selection on the host: a bounded heap in RanksBefore order
// (higher score first, ties to the lower internal index).
//
// MergeRanked() merges ranked lists: a search's segments (the GPU backend's
// per-segment results) and shards (ShardedBackend) alike.
//
// Thread-safety: one accumulator per thread; Merge() combines them.
#ifndef MAXSIMD_KERNELS_TOPK_CPU_H_
#define MAXSIMD_KERNELS_TOPK_CPU_H_

#include <algorithm>
#include <cstdint>
#include <iterator>
#include <vector>

#include "kernels/types.h"

namespace maxsimd {

class TopKAccumulator {
 public:
  explicit TopKAccumulator(int k = 0) { Reset(k); }

  void Reset(int k) {
    k_ = k;
    heap_.clear();
    heap_.reserve(static_cast<size_t>(k));
  }

  // O(log k). The heap's front is the entry that ranks last.
  void Push(const ScoredDoc& d) {
    if (static_cast<int>(heap_.size()) < k_) {
      heap_.push_back(d);
      std::push_heap(heap_.begin(), heap_.end(), RanksBefore);
    } else if (k_ > 0 && RanksBefore(d, heap_.front())) {
      std::pop_heap(heap_.begin(), heap_.end(), RanksBefore);
      heap_.back() = d;
      std::push_heap(heap_.begin(), heap_.end(), RanksBefore);
    }
  }

  void Merge(const TopKAccumulator& other) {
    for (const ScoredDoc& d : other.heap_) Push(d);
  }

  // The kept entries, best first. Leaves the accumulator empty.
  std::vector<ScoredDoc> TakeSorted() {
    std::sort_heap(heap_.begin(), heap_.end(), RanksBefore);
    std::vector<ScoredDoc> out;
    out.swap(heap_);
    return out;
  }

 private:
  int k_ = 0;
  std::vector<ScoredDoc> heap_;
};

// Merges `part` (in RanksBefore order) into `*into` (in that order too),
// keeping the best `k`.
inline void MergeRanked(std::vector<ScoredDoc>* into,
                        std::vector<ScoredDoc> part, int64_t k) {
  if (part.empty()) return;
  if (into->empty()) {
    *into = std::move(part);
  } else {
    std::vector<ScoredDoc> merged;
    merged.reserve(into->size() + part.size());
    std::merge(into->begin(), into->end(), part.begin(), part.end(),
               std::back_inserter(merged), RanksBefore);
    *into = std::move(merged);
  }
  if (static_cast<int64_t>(into->size()) > k) into->resize(k);
}

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_TOPK_CPU_H_
