// Fuzzes our JSON reader (kernels/base/json.h), which parses the metadata and
// doclens files of PLAID indexes: the whole-document parser and the
// integer-array fast path. When both accept an input, they must agree.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "kernels/base/json.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<maxsimd::JsonValue> doc = maxsimd::ParseJson(text, "fuzz");
  absl::StatusOr<std::vector<int64_t>> ints =
      maxsimd::ParseJsonInt64Array(text, "fuzz");
  if (doc.ok()) {
    (void)doc->Find("config");
    (void)doc->Find("num_chunks");
  }
  if (doc.ok() && ints.ok()) {
    MAXSIMD_FUZZ_CHECK(doc->kind == maxsimd::JsonValue::Kind::kArray &&
                       doc->items.size() == ints->size());
    for (size_t i = 0; i < ints->size(); ++i) {
      MAXSIMD_FUZZ_CHECK(doc->items[i].is_integer &&
                         doc->items[i].integer == (*ints)[i]);
    }
  }
  return 0;
}
