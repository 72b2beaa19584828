// Fuzzes the torch.save reader (index/torch_file.h: a stored zip and a
// restricted pickle interpreter), then widens every tensor it returns, as
// the PLAID importer does.
//
// Input: one option byte, then the file. Option bit 0: first recompute the
// archive's entry CRCs (fuzz_support.h's FixZipCrcs), so that mutations of
// data.pkl reach the pickle interpreter instead of failing the CRC check.
#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>

#include "index/torch_file.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

void Visit(const maxsimd::TorchValue& v, int depth) {
  if (depth > 100) return;
  if (v.kind == maxsimd::TorchValue::Kind::kTensor) {
    (void)maxsimd::TorchTensorToFloat32(v.tensor, "fuzz");
    (void)maxsimd::TorchTensorToInt64(v.tensor, "fuzz");
  }
  for (const maxsimd::TorchValue& item : v.items) Visit(item, depth + 1);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  std::string file(reinterpret_cast<const char*>(data) + 1, size - 1);
  if (data[0] & 1) maxsimd::fuzz::FixZipCrcs(&file);
  absl::StatusOr<maxsimd::TorchValue> value =
      maxsimd::ParseTorchFile(std::move(file), "fuzz");
  if (value.ok()) Visit(*value, 0);
  return 0;
}
