// Exact top-k selection on the host: a bounded heap in RanksBefore order
// (higher score first, ties to the lower internal index).
//
// Thread-safety: one accumulator per thread; Merge() combines them.
#ifndef MAXSIMD_KERNELS_TOPK_CPU_H_
#define MAXSIMD_KERNELS_TOPK_CPU_H_

#include <algorithm>
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

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_TOPK_CPU_H_
