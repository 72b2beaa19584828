// IdIndex: a segment's external ids to their rows, built for lookups of many
// ids at a time (a rerank request names up to --max_candidates of them).
//
// An open-addressing table of 8-byte slots (a 32-bit tag from the id's hash
// and the row), at most half full, that keeps no copy of the ids: a probe
// compares the id with the segment's own string only when the tags match.
// The caller hashes each id once (Hash) and can overlap the cache misses of
// many lookups: Prefetch(hash) loads the slot a lookup starts at, and
// PrefetchId(hash) (after that slot has arrived) the id string the lookup
// will compare with.
//
// Thread-safety: immutable after construction; concurrent lookups are safe.
#ifndef MAXSIMD_INDEX_ID_INDEX_H_
#define MAXSIMD_INDEX_ID_INDEX_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/hash/hash.h"
#include "absl/strings/string_view.h"

namespace maxsimd {

class IdIndex {
 public:
  // Most rows an index holds.
  static constexpr int64_t kMaxRows = (int64_t{1} << 32) - 2;

  // An index of nothing: every Find misses.
  IdIndex();
  // Indexes ids[i] -> i. `ids` must outlive the index, stay unchanged, hold
  // unique strings and at most kMaxRows of them.
  explicit IdIndex(const std::vector<std::string>* ids);

  // The hash every other method takes (the process's absl::Hash).
  static uint64_t Hash(absl::string_view id) { return absl::HashOf(id); }

  // Row of `id` (whose Hash is `hash`), or -1.
  int64_t Find(absl::string_view id, uint64_t hash) const;
  void Prefetch(uint64_t hash) const {
    __builtin_prefetch(&slots_[hash & mask_]);
  }
  void PrefetchId(uint64_t hash) const;

 private:
  struct Slot {
    uint32_t tag = 0;
    uint32_t row_plus_one = 0;  // 0: empty
  };
  static uint32_t Tag(uint64_t hash) {
    return static_cast<uint32_t>(hash >> 32);
  }

  const std::vector<std::string>* ids_ = nullptr;
  std::vector<Slot> slots_;
  uint64_t mask_ = 0;
};

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_ID_INDEX_H_
