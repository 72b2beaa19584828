// Reader and writer for NumPy .npy files (format versions 1.0, 2.0, 3.0),
// used by maxsimctl and the importers to exchange token arrays.
//
// Supported element types: little-endian float32 ('<f4'), float16 ('<f2'),
// int64 ('<i8'), int32 ('<i4'), bfloat16 stored as uint16 ('<u2') when
// the caller says so, and uint8 ('|u1', also read as '<u1'; fast-plaid's
// packed residuals, index/plaid.h). C order only; Fortran-order arrays are
// rejected.
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

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_NPY_H_
