// Fuzzes the stored-zip reader (index/zip_reader.h) under torch.save
// files: every entry it returns must lie inside the archive.
//
// Input: one option byte, then the archive. Option bit 0: first recompute
// the entry CRCs (fuzz_support.h's FixZipCrcs), so that archives whose
// entries were mutated still reach the end of the reader.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "index/zip_reader.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string bytes(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) maxsimd::fuzz::FixZipCrcs(&bytes);
  const absl::string_view archive(bytes);
  absl::StatusOr<std::vector<maxsimd::ZipEntry>> entries =
      maxsimd::ParseStoredZip(archive, "fuzz");
  if (!entries.ok()) return 0;
  for (const maxsimd::ZipEntry& e : *entries) {
    if (e.data.empty()) continue;
    if (e.data.data() < archive.data() ||
        e.data.data() + e.data.size() > archive.data() + archive.size()) {
      std::abort();
    }
  }
  return 0;
}
