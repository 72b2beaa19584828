// Reader and writer for NumPy .npy files (format versions 1.0, 2.0, 3.0),
// used by maxsimctl and the importers to exchange token arrays.
//
// Supported element types: little-endian float32 ('<f4'), float16 ('<f2'),
// int64 ('<i8'), int32 ('<i4'), uint16 ('<u2'), 2-byte voids ('<V2',
// '|V2': bfloat16, see NpyFloatDType) and uint8 ('|u1', also read as '<u1';
// fast-plaid's packed residuals, index/plaid.h). C order only;
// Fortran-order arrays are rejected.
//
// Errors: NOT_FOUND for a missing file, DATA_LOSS for a malformed or
// truncated file (the message names the file and what is wrong),
// INVALID_ARGUMENT for an unsupported dtype or order.
// Thread-safety: pure functions.
#ifndef MAXSIMD_INDEX_NPY_H_
#define MAXSIMD_INDEX_NPY_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "kernels/types.h"

namespace maxsimd {

struct NpyArray {
  std::string descr;           // numpy dtype string, e.g. "<f4"
  std::vector<int64_t> shape;  // outermost first
  std::vector<char> data;      // raw little-endian C-order bytes

  int64_t num_elements() const;
  int64_t element_size() const;  // bytes per element from descr
};

// Parses a whole .npy image held in memory; `name` is used in messages.
absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes,
                                  absl::string_view name);
absl::StatusOr<NpyArray> ReadNpy(const std::string& path);

// Serialises an array as a version 1.0 .npy image (2.0 if the header needs it).
std::string SerializeNpy(const NpyArray& array);
absl::Status WriteNpy(const std::string& path, const NpyArray& array);

// Convenience: builds an NpyArray from typed values. product(shape) must
// equal values.size().
NpyArray MakeNpyFloat32(const std::vector<float>& values,
                        std::vector<int64_t> shape);
// Rounds each value to fp16 (round to nearest even), descr '<f2'.
NpyArray MakeNpyFloat16(const std::vector<float>& values,
                        std::vector<int64_t> shape);
NpyArray MakeNpyInt64(const std::vector<int64_t>& values,
                      std::vector<int64_t> shape);

// Reads a 1-D integer array ('<i8' or '<i4') as int64 values.
absl::StatusOr<std::vector<int64_t>> NpyToInt64(const NpyArray& array,
                                                absl::string_view name);

// Reads an array of any shape ('<f4' or '<f2') as fp32 values in C order.
absl::StatusOr<std::vector<float>> NpyToFloat32(const NpyArray& array,
                                                absl::string_view name);

// The element type of an array of float embeddings as the file holds it,
// for a caller that passes the bytes on unconverted (maxsimctl sends a
// query in its file's precision): '<f4' kFloat32, '<f2' kFloat16, and
// kBFloat16, which numpy has no type of its own for, in the encodings that
// reach .npy files:
//   - '<V2': np.save of an ml_dtypes.bfloat16 array (ml_dtypes registers
//     bfloat16 as a 2-byte type of kind 'V', and np.save writes that type
//     string; '>V2' would be a big-endian host's, and is refused);
//   - '|V2': such a file loaded with np.load, which yields plain 2-byte
//     voids, and saved again;
//   - '<u2': the bits as uint16 (`a.view(np.uint16)`, or torch's
//     `t.view(torch.uint16).numpy()`), only when `uint16_is_bfloat16`: a
//     uint16 array is integers unless the caller says otherwise.
// The bytes are bfloat16's in every case: the top half of each binary32,
// little-endian. INVALID_ARGUMENT naming `name` and the descr otherwise.
absl::StatusOr<DType> NpyFloatDType(const NpyArray& array,
                                    absl::string_view name,
                                    bool uint16_is_bfloat16);

// Documents stored as two .npy arrays: `tokens` [T, dim] ('<f4' or '<f2',
// 1 <= dim <= 2^20) and `cu_seqlens` [N + 1] ('<i8' or '<i4', from 0 to T);
// the names are used in messages. Ids come from elsewhere. Tokens are
// returned as fp32 (exact for both dtypes); `float16` tells whether they
// were '<f2' (so a client may send them as fp16 without loss).
// INVALID_ARGUMENT naming the file for anything else.
struct NpyDocuments {
  int32_t dim = 0;
  std::vector<float> tokens;  // [cu_seqlens.back(), dim], row-major
  std::vector<int64_t> cu_seqlens;
  bool float16 = false;
};
absl::StatusOr<NpyDocuments> DocumentsFromNpy(const NpyArray& tokens,
                                              absl::string_view tokens_name,
                                              const NpyArray& cu_seqlens,
                                              absl::string_view cu_name);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_NPY_H_
