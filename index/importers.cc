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

// INVALID_ARGUMENT unless `f` names exactly one source: a safetensors
// file, both .npy files, or a PLAID index directory.
absl::Status CheckOneSource(const DocumentFiles& f) {
  const bool npy = !f.tokens_npy.empty() || !f.cu_seqlens_npy.empty();
  const int sources =
      int{npy} + int{!f.safetensors.empty()} + int{!f.plaid_dir.empty()};
  if (sources != 1 ||
      (npy && (f.tokens_npy.empty() || f.cu_seqlens_npy.empty()))) {
    return absl::InvalidArgumentError(
        "give one of: a safetensors file, both a tokens and a cu_seqlens "
        ".npy file, or a PLAID index directory");
  }
  return absl::OkStatus();
}

// ReadDocumentTokens, except that a PLAID index is given `plaid_ids` as its
// ids file (PlaidOptions::ids; empty: its passage ids).
absl::StatusOr<ImportedDocuments> ReadTokens(const DocumentFiles& f,
                                             const std::string& plaid_ids) {
  MAXSIMD_RETURN_IF_ERROR(CheckOneSource(f));
  if (!f.plaid_dir.empty()) {
    PlaidOptions options;
    options.ids = plaid_ids;
    options.max_token_values = f.max_token_values;
    return ReadPlaidIndex(f.plaid_dir, options);
  }
  ImportedDocuments out;
  if (!f.safetensors.empty()) {
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
    MAXSIMD_ASSIGN_OR_RETURN(NpyArray cu, ReadNpy(f.cu_seqlens_npy));
    MAXSIMD_ASSIGN_OR_RETURN(
        NpyDocuments docs,
        DocumentsFromNpy(tokens, f.tokens_npy, cu, f.cu_seqlens_npy));
    out.dim = docs.dim;
    out.tokens = std::move(docs.tokens);
    out.cu_seqlens = std::move(docs.cu_seqlens);
    out.float16 = docs.float16;
  }
  return out;
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

absl::StatusOr<ImportedDocuments> ReadDocumentTokens(const DocumentFiles& f) {
  return ReadTokens(f, /*plaid_ids=*/"");
}

absl::StatusOr<ImportedDocuments> ReadDocumentFiles(const DocumentFiles& f) {
  MAXSIMD_RETURN_IF_ERROR(CheckOneSource(f));
  // The PLAID reader takes the ids file itself, so that a missing or short
  // one fails before the index is decoded, with a message naming the index.
  if (!f.plaid_dir.empty()) return ReadTokens(f, f.ids);
  if (f.ids.empty()) return absl::InvalidArgumentError("an ids file is needed");
  MAXSIMD_ASSIGN_OR_RETURN(ImportedDocuments out, ReadDocumentTokens(f));
  MAXSIMD_ASSIGN_OR_RETURN(out.ids, ReadLines(f.ids));
  if (out.cu_seqlens.size() != out.ids.size() + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the offsets have ", out.cu_seqlens.size(), " entries but '", f.ids,
        "' has ", out.ids.size(), " ids; expected ids + 1 offsets"));
  }
  return out;
}

}  // namespace maxsimd
