#include "index/id_index.h"

namespace maxsimd {

IdIndex::IdIndex() : slots_(1), mask_(0) {}

IdIndex::IdIndex(const std::vector<std::string>* ids) : ids_(ids) {
  // A power of two at least twice the ids: probe runs stay short.
  uint64_t capacity = 8;
  while (capacity < 2 * ids->size()) capacity *= 2;
  slots_.resize(capacity);
  mask_ = capacity - 1;
  for (size_t row = 0; row < ids->size(); ++row) {
    const uint64_t hash = Hash((*ids)[row]);
    uint64_t i = hash & mask_;
    while (slots_[i].row_plus_one != 0) i = (i + 1) & mask_;
    slots_[i] = {Tag(hash), static_cast<uint32_t>(row + 1)};
  }
}

int64_t IdIndex::Find(absl::string_view id, uint64_t hash) const {
  const uint32_t tag = Tag(hash);
  for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot s = slots_[i];
    if (s.row_plus_one == 0) return -1;
    if (s.tag == tag && (*ids_)[s.row_plus_one - 1] == id) {
      return static_cast<int64_t>(s.row_plus_one) - 1;
    }
  }
}

void IdIndex::PrefetchId(uint64_t hash) const {
  const uint32_t tag = Tag(hash);
  for (uint64_t i = hash & mask_;; i = (i + 1) & mask_) {
    const Slot s = slots_[i];
    if (s.row_plus_one == 0) return;
    if (s.tag == tag) {
      __builtin_prefetch(&(*ids_)[s.row_plus_one - 1]);
      return;
    }
  }
}

}  // namespace maxsimd
