// Importers of documents from the files users already have, shared by
// maxsimctl (client side) and the admin API's ImportDocuments (server side):
//   - a .npy token array [T, dim] (float32 or float16) with a cu_seqlens
//     .npy [N + 1] (int64 or int32),
//   - or one safetensors file with tensors "tokens" and "cu_seqlens"
//     (index/safetensors.h),
//   - or a PLAID index directory written by ColBERT v2 or fast-plaid,
//     decompressed into dense tokens (index/plaid.h),
// and the ids in a text file, one per line (blank lines skipped); a PLAID
// index may go without one (its passage ids "0", "1", ... are used).
//
// Errors: NOT_FOUND for a missing file, DATA_LOSS for a malformed one,
// INVALID_ARGUMENT for shapes, dtypes or counts that do not fit together
// (the message names the file), RESOURCE_EXHAUSTED past max_token_values.
// Thread-safety: pure functions.
#ifndef MAXSIMD_INDEX_IMPORTERS_H_
#define MAXSIMD_INDEX_IMPORTERS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"

namespace maxsimd {

struct DocumentFiles {
  std::string tokens_npy;      // with cu_seqlens_npy, or
  std::string cu_seqlens_npy;  //
  std::string safetensors;     // instead of both, or
  std::string plaid_dir;       // a PLAID index directory instead
  std::string ids;             // required, except with plaid_dir
  // When > 0, a PLAID index that would decompress to more token values
  // (tokens x dim) is refused with RESOURCE_EXHAUSTED before it is decoded.
  // The other sources are bounded by their file sizes already.
  int64_t max_token_values = 0;
};

struct ImportedDocuments {
  int32_t dim = 0;
  std::vector<float> tokens;  // [cu_seqlens.back(), dim] fp32
  std::vector<int64_t> cu_seqlens;
  std::vector<std::string> ids;
  bool float16 = false;  // the source held fp16 values (exact in fp16)
};

// The tokens and offsets of `files`' one source, under ReadDocumentFiles'
// rules, without reading `files.ids`: `ids` is empty for .npy and
// safetensors sources; a PLAID index gives its passage ids "0", "1", ...
// For a caller with its own ids reader (maxsimctl's byte-exact one).
absl::StatusOr<ImportedDocuments> ReadDocumentTokens(
    const DocumentFiles& files);

// ReadDocumentTokens, and the ids of `files.ids` read with ReadLines, one
// per document (INVALID_ARGUMENT naming the file otherwise). A PLAID index
// takes the ids file through PlaidOptions::ids instead: it is read and
// counted before the index is decoded.
absl::StatusOr<ImportedDocuments> ReadDocumentFiles(const DocumentFiles& files);

// The non-blank lines of a text file, trimmed.
absl::StatusOr<std::vector<std::string>> ReadLines(const std::string& path);

// The whole of a user-given file: NOT_FOUND when it does not exist,
// INVALID_ARGUMENT when it is not a regular file (a directory), DATA_LOSS
// naming it when it cannot be read. (durable_file.h's ReadWholeFile
// says DATA_LOSS for a missing file, as a corpus directory must be whole.)
absl::StatusOr<std::string> ReadInputFile(const std::string& path);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_IMPORTERS_H_
