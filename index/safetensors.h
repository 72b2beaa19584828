// A reader of the safetensors format: an 8-byte little-endian header
// length N, N bytes of JSON describing each tensor ({"name": {"dtype":
// "F16", "shape": [rows, cols], "data_offsets": [begin, end]}, ... and an
// optional "__metadata__" object of strings}), then the tensors' bytes,
// offsets relative to the end of the header. The header is read by the
// project's JSON reader (kernels/base/json.h) and may hold objects, arrays,
// strings and integers in [0, 2^56] only, nested at most 8 deep; null,
// true, false or any other number is malformed wherever it is.
//
// Errors: NOT_FOUND for a missing file; DATA_LOSS naming the file for a
// malformed header, offsets outside the data or overlapping, or a size that
// does not match dtype x shape; INVALID_ARGUMENT for a dtype this reader
// does not know.
// Thread-safety: pure functions.
#ifndef MAXSIMD_INDEX_SAFETENSORS_H_
#define MAXSIMD_INDEX_SAFETENSORS_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/types.h"

namespace maxsimd {

struct SafetensorsTensor {
  std::string dtype;  // "F32", "F16", "BF16", "I64", "I32", ...
  std::vector<int64_t> shape;
  std::string data;  // the raw little-endian bytes
};

struct SafetensorsFile {
  std::map<std::string, SafetensorsTensor> tensors;
  std::map<std::string, std::string> metadata;
};

// Bytes per element of a safetensors dtype; 0 for an unknown one.
int64_t SafetensorsDTypeSize(absl::string_view dtype);

absl::StatusOr<SafetensorsFile> ParseSafetensors(absl::string_view bytes,
                                                 absl::string_view name);
absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path);

// Documents stored as safetensors: tensor "tokens" [T, dim] (F32, F16 or
// BF16) and tensor "cu_seqlens" [N + 1] (I64 or I32, from 0, non-decreasing,
// ending at T). Ids come from elsewhere (a text file). Tokens are returned
// as fp32 (exact for all three dtypes); `float16` tells whether they were
// F16 (so a client may send them as fp16 without loss). INVALID_ARGUMENT
// naming the tensor for anything else.
struct SafetensorsDocuments {
  int32_t dim = 0;
  std::vector<float> tokens;
  std::vector<int64_t> cu_seqlens;
  bool float16 = false;
};
absl::StatusOr<SafetensorsDocuments> DocumentsFromSafetensors(
    const SafetensorsFile& file, absl::string_view name);

// The one tensor of float embeddings a caller reads from a file
// (maxsimctl's query): `tensor` names it; "" picks the tensor "query" when
// the file has one, else the file's only tensor. Its dtype must be F32,
// F16 or BF16 (native in safetensors: the top half of each binary32), or
// U16 holding bfloat16 bits when `uint16_is_bfloat16`; `dtype` says which,
// and the tensor's bytes are left as they are. INVALID_ARGUMENT naming the
// file and the tensor (or, when none is picked, the tensors it has)
// otherwise. The pointer is into `file`.
struct SafetensorsFloatTensor {
  const SafetensorsTensor* tensor = nullptr;
  std::string name;
  DType dtype = DType::kFloat32;
};
absl::StatusOr<SafetensorsFloatTensor> FloatTensorFromSafetensors(
    const SafetensorsFile& file, absl::string_view tensor,
    absl::string_view name, bool uint16_is_bfloat16);

// Serialises tensors (for tests and tools); offsets in name order.
std::string SerializeSafetensors(const SafetensorsFile& file);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_SAFETENSORS_H_
