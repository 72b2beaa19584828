// Host helpers of launch_shapes.h.
#include "kernels/launch_shapes.h"

#include <algorithm>
#include <cstring>

namespace maxsimd {

void StageTmaQueryRow(const uint16_t* src, int32_t dim, int32_t dpad,
                      int64_t row, int32_t tile_rows, uint8_t* tiles) {
  const int64_t tile = row / tile_rows;
  const int32_t r = static_cast<int32_t>(row % tile_rows);
  uint8_t* base = tiles + tile * tile_rows * dpad * 2 + r * 128;
  for (int32_t c = 0; c * 8 < dim; ++c) {
    // 16-byte chunk c of the row: half c / 8, chunk c % 8 within the
    // 128-byte line, stored at chunk (c % 8) ^ (r % 8).
    const int32_t n = std::min(8, dim - c * 8);
    uint8_t* dst =
        base + (c / 8) * tile_rows * 128 + (((c % 8) ^ (r % 8)) * 16);
    std::memcpy(dst, src + c * 8, n * 2);
  }
}

}  // namespace maxsimd
