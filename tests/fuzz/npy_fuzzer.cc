// Fuzzes the .npy reader (index/npy.h) the way the importers use it:
// ParseNpy, then the typed views of the result. A parsed array must
// serialise and parse back to itself.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "index/npy.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<maxsimd::NpyArray> array = maxsimd::ParseNpy(bytes, "fuzz");
  if (!array.ok()) return 0;
  // What ParseNpy promises: a known descr, and data of exactly the shape.
  MAXSIMD_FUZZ_CHECK(array->element_size() > 0);
  MAXSIMD_FUZZ_CHECK(array->num_elements() * array->element_size() ==
                     static_cast<int64_t>(array->data.size()));
  (void)maxsimd::NpyToInt64(*array, "fuzz");
  (void)maxsimd::NpyToFloat32(*array, "fuzz");
  absl::StatusOr<maxsimd::NpyArray> again =
      maxsimd::ParseNpy(maxsimd::SerializeNpy(*array), "again");
  MAXSIMD_FUZZ_CHECK(again.ok() && again->descr == array->descr &&
                     again->shape == array->shape &&
                     again->data == array->data);
  return 0;
}
