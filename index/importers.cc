#include "index/importers.h"

#include <filesystem>
#include <system_error>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "index/npy.h"
#include "index/plaid.h"
#include "index/safetensors.h"
#include "kernels/base/file_util.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {
namespace {

// ReadFileToString's errors in these readers' words: NOT_FOUND "cannot open"
// for a file that is not there or may not be opened, INVALID_ARGUMENT for a
// directory, DATA_LOSS "error reading" for any other failure.
absl::Status InputFileError(const std::string& path, const absl::Status& s) {
  if (absl::IsNotFound(s) || absl::IsPermissionDenied(s)) {
    return absl::NotFoundError(absl::StrCat("cannot open '", path, "'"));
  }
  if (absl::IsInvalidArgument(s)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  }
  return absl::DataLossError(absl::StrCat("error reading '", path, "'"));
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ReadLines(const std::string& path) {
  absl::StatusOr<std::string> text = ReadFileToString(path);
  if (!text.ok()) return InputFileError(path, text.status());
  std::vector<std::string> lines;
  for (absl::string_view line : absl::StrSplit(*text, '\n')) {
    absl::string_view trimmed = absl::StripAsciiWhitespace(line);
    if (!trimmed.empty()) lines.emplace_back(trimmed);
  }
  return lines;
}

absl::StatusOr<std::string> ReadInputFile(const std::string& path) {
  // Only a regular file: a FIFO would block the read until a writer came,
  // and a device such as /dev/zero would never end.
  std::error_code ec;
  if (std::filesystem::exists(path, ec) &&
      !std::filesystem::is_regular_file(path, ec)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' is not a regular file"));
  }
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (!bytes.ok()) return InputFileError(path, bytes.status());
  return bytes;
}

absl::StatusOr<ImportedDocuments> ReadDocumentFiles(const DocumentFiles& f) {
  const bool npy = !f.tokens_npy.empty() || !f.cu_seqlens_npy.empty();
  const int sources =
      int{npy} + int{!f.safetensors.empty()} + int{!f.plaid_dir.empty()};
  if (sources != 1 ||
      (npy && (f.tokens_npy.empty() || f.cu_seqlens_npy.empty()))) {
    return absl::InvalidArgumentError(
        "give one of: a safetensors file, both a tokens and a cu_seqlens "
        ".npy file, or a PLAID index directory");
  }
  if (!f.plaid_dir.empty()) {
    PlaidOptions options;
    options.ids = f.ids;
    options.max_token_values = f.max_token_values;
    return ReadPlaidIndex(f.plaid_dir, options);
  }
  if (f.ids.empty()) return absl::InvalidArgumentError("an ids file is needed");
  ImportedDocuments out;
  if (!npy) {
    MAXSIMD_ASSIGN_OR_RETURN(SafetensorsFile file,
                             ReadSafetensors(f.safetensors));
    MAXSIMD_ASSIGN_OR_RETURN(SafetensorsDocuments docs,
                             DocumentsFromSafetensors(file, f.safetensors));
    out.dim = docs.dim;
    out.tokens = std::move(docs.tokens);
    out.cu_seqlens = std::move(docs.cu_seqlens);
    out.float16 = docs.float16;
  } else {
    MAXSIMD_ASSIGN_OR_RETURN(NpyArray tokens, ReadNpy(f.tokens_npy));
    if (tokens.shape.size() != 2 || tokens.shape[1] < 1 ||
        tokens.shape[1] > (1 << 20)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", f.tokens_npy, "' must be a 2-D [tokens, dim] array"));
    }
    MAXSIMD_ASSIGN_OR_RETURN(NpyArray cu, ReadNpy(f.cu_seqlens_npy));
    MAXSIMD_ASSIGN_OR_RETURN(out.cu_seqlens, NpyToInt64(cu, f.cu_seqlens_npy));
    if (out.cu_seqlens.empty() || out.cu_seqlens.front() != 0 ||
        out.cu_seqlens.back() != tokens.shape[0]) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", f.cu_seqlens_npy, "' must run from 0 to the ",
                       tokens.shape[0], " token rows of '", f.tokens_npy, "'"));
    }
    out.dim = static_cast<int32_t>(tokens.shape[1]);
    MAXSIMD_ASSIGN_OR_RETURN(out.tokens, NpyToFloat32(tokens, f.tokens_npy));
    out.float16 = tokens.descr == "<f2";
  }
  MAXSIMD_ASSIGN_OR_RETURN(out.ids, ReadLines(f.ids));
  if (out.cu_seqlens.size() != out.ids.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the offsets have ", out.cu_seqlens.size(), " entries but '", f.ids,
        "' has ", out.ids.size(), " ids; expected ids + 1 offsets"));
  }
  return out;
}

}  // namespace maxsimd
