// A reader of the files torch.save writes (PyTorch >= 1.6, "zipfile
// serialization"), for the tensors of a ColBERT PLAID index (index/plaid.h).
//
// Such a file is a zip archive of stored entries (index/zip_reader.h) under
// one top-level folder <archive>/:
//   data.pkl    a pickle (protocol 2) of the saved object, in which each
//               tensor is torch._utils._rebuild_tensor_v2(storage,
//               storage_offset, size, stride, requires_grad, backward_hooks)
//               and each storage a persistent id ('storage', torch.<T>Storage,
//               key, location, numel);
//   data/<key>  the raw little-endian bytes of each storage;
//   version, byteorder ("little"; absent before PyTorch 2.1), and other
//               records this reader does not need.
//
// The pickle is run by a small interpreter that knows only the opcodes and
// globals torch.save emits for tensors, tuples, lists, dicts, strings, ints,
// floats, booleans and None (see torch_file.cc); any other opcode or global
// is refused, so no code named by the file is ever run. Tensors must be
// contiguous (row-major) views of their storage, at any storage offset.
// Storage locations ("cpu", "cuda:0", ...) are ignored: data is read on the
// host.
//
// Errors: NOT_FOUND for a missing file; DATA_LOSS naming the file for a
// malformed archive or pickle (the message names the opcode and its byte
// offset in data.pkl), a missing or short storage record, or a tensor
// outside its storage; INVALID_ARGUMENT for a well-formed file this reader
// does not take (big-endian, non-contiguous strides, a storage type it does
// not know).
// Thread-safety: pure functions; TorchValue is a value type.
#ifndef MAXSIMD_INDEX_TORCH_FILE_H_
#define MAXSIMD_INDEX_TORCH_FILE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace maxsimd {

enum class TorchDType {
  kFloat32,   // FloatStorage
  kFloat16,   // HalfStorage
  kBFloat16,  // BFloat16Storage
  kFloat64,   // DoubleStorage
  kUInt8,     // ByteStorage
  kInt8,      // CharStorage
  kInt16,     // ShortStorage
  kInt32,     // IntStorage
  kInt64,     // LongStorage
  kBool,      // BoolStorage
};

// "float32", "uint8", ...; and bytes per element.
const char* TorchDTypeName(TorchDType dtype);
int64_t TorchDTypeSize(TorchDType dtype);

struct TorchTensor {
  TorchDType dtype = TorchDType::kFloat32;
  std::vector<int64_t> shape;  // outermost first; empty for a 0-d tensor
  // num_elements() x TorchDTypeSize(dtype) little-endian bytes in row-major
  // order: a view into `owner` (the file's bytes), kept alive with it.
  absl::string_view data;
  std::shared_ptr<const std::string> owner;

  int64_t num_elements() const;
};

// The object a file holds.
struct TorchValue {
  enum class Kind {
    kNone,
    kBool,
    kInt,
    kFloat,
    kString,
    kTensor,
    kTuple,
    kList,
    kDict,
  };
  Kind kind = Kind::kNone;
  bool boolean = false;
  int64_t integer = 0;
  double number = 0;
  std::string str;
  TorchTensor tensor;
  // kTuple, kList: the items; kDict: keys and values alternating.
  std::vector<TorchValue> items;
};

// Parses a whole torch.save image; `name` is the file named in messages.
absl::StatusOr<TorchValue> ParseTorchFile(std::string bytes,
                                          absl::string_view name);
absl::StatusOr<TorchValue> ReadTorchFile(const std::string& path);

// A tensor's values widened to fp32 (float32, float16, bfloat16; float64 is
// narrowed) or to int64 (the integer dtypes and bool), in row-major order.
// INVALID_ARGUMENT naming `name` for another dtype.
absl::StatusOr<std::vector<float>> TorchTensorToFloat32(const TorchTensor& t,
                                                        absl::string_view name);
absl::StatusOr<std::vector<int64_t>> TorchTensorToInt64(const TorchTensor& t,
                                                        absl::string_view name);

// Writes a tensor as torch.save(tensor) does, under archive folder
// `archive` (for tests and tools). `t.data` must hold num_elements() values.
std::string SerializeTorchTensor(const TorchTensor& t,
                                 absl::string_view archive);
// The same for a tuple of tensors, as torch.save((a, b, ...)) writes it.
std::string SerializeTorchTensorTuple(const std::vector<TorchTensor>& tensors,
                                      absl::string_view archive);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_TORCH_FILE_H_
