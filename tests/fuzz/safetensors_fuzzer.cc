// Fuzzes the safetensors reader (index/safetensors.h) the way the
// importers use it: ParseSafetensors, then DocumentsFromSafetensors. A
// parsed file must serialise and parse back to the same tensors.
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "index/safetensors.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const absl::string_view bytes(reinterpret_cast<const char*>(data), size);
  absl::StatusOr<maxsimd::SafetensorsFile> file =
      maxsimd::ParseSafetensors(bytes, "fuzz");
  if (!file.ok()) return 0;
  absl::StatusOr<maxsimd::SafetensorsDocuments> docs =
      maxsimd::DocumentsFromSafetensors(*file, "fuzz");
  if (docs.ok()) {
    MAXSIMD_FUZZ_CHECK(docs->dim >= 1 && !docs->cu_seqlens.empty());
    MAXSIMD_FUZZ_CHECK(docs->tokens.size() ==
                       static_cast<size_t>(docs->cu_seqlens.back()) *
                           docs->dim);
  }
  absl::StatusOr<maxsimd::SafetensorsFile> again =
      maxsimd::ParseSafetensors(maxsimd::SerializeSafetensors(*file), "again");
  MAXSIMD_FUZZ_CHECK(again.ok() &&
                     again->tensors.size() == file->tensors.size() &&
                     again->metadata == file->metadata);
  for (const auto& [name, t] : file->tensors) {
    const auto it = again->tensors.find(name);
    MAXSIMD_FUZZ_CHECK(
        it != again->tensors.end() && it->second.dtype == t.dtype &&
        it->second.shape == t.shape && it->second.data == t.data);
  }
  return 0;
}
