// Fuzzes the PLAID index importer (index/plaid.h), which reads a directory
// of ColBERT or fast-plaid files (metadata and doclens JSON, .npy or
// torch.save tensors). The input is the directory, in fuzz_support.h's
// multi-file container; the first option byte picks the call:
//   bit 0: ReadPlaidIndexCompressed (a PLAID corpus's import) instead of
//          ReadPlaidIndex (decompressed, a dense corpus's import);
//   bit 1: pass an ids file (the content of the file named "ids.txt");
//   bit 2: no max_token_values (the client tools' call) instead of the
//          server's bound for a 4 GiB stream into a dim-128 fp16 corpus;
//   bit 3: recompute the zip entry CRCs of every .pt file (FixZipCrcs), so
//          that mutated ColBERT tensors reach the pickle reader.
// Every file the input names is written into a scratch directory, which
// the importer then reads as a user's index.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "absl/strings/match.h"
#include "index/plaid.h"
#include "tests/fuzz/fuzz_support.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static maxsimd::fuzz::ScratchDir dir;
  const maxsimd::fuzz::FileSet set = maxsimd::fuzz::SplitFiles(
      absl::string_view(reinterpret_cast<const char*>(data), size));
  const uint8_t mode =
      set.options.empty() ? 0 : static_cast<uint8_t>(set.options[0]);
  dir.Reset();
  for (const auto& [name, content] : set.files) {
    if ((mode & 8) && absl::EndsWith(name, ".pt")) {
      std::string fixed = content;
      maxsimd::fuzz::FixZipCrcs(&fixed);
      dir.Write(name, fixed);
    } else {
      dir.Write(name, content);
    }
  }

  maxsimd::PlaidOptions options;
  if (mode & 2) options.ids = dir.path() + "/ids.txt";
  // --max_add_stream_bytes (4 GiB) of fp16 rows: 2^31 token values.
  if (!(mode & 4)) options.max_token_values = int64_t{1} << 31;
  if (mode & 1) {
    absl::StatusOr<maxsimd::CompressedPlaidDocuments> docs =
        maxsimd::ReadPlaidIndexCompressed(dir.path(), options);
    if (!docs.ok()) return 0;
    const maxsimd::PlaidCodec& c = docs->codec;
    MAXSIMD_FUZZ_CHECK(docs->cu_seqlens.size() == docs->ids.size() + 1);
    MAXSIMD_FUZZ_CHECK(static_cast<int64_t>(docs->codes.size()) ==
                       docs->cu_seqlens.back());
    MAXSIMD_FUZZ_CHECK(docs->residuals.size() ==
                       docs->codes.size() * static_cast<size_t>(c.dim) *
                           c.nbits / 8);
    for (int32_t code : docs->codes) {
      MAXSIMD_FUZZ_CHECK(code >= 0 && code < c.num_centroids);
    }
    return 0;
  }
  absl::StatusOr<maxsimd::ImportedDocuments> docs =
      maxsimd::ReadPlaidIndex(dir.path(), options);
  if (!docs.ok()) return 0;
  MAXSIMD_FUZZ_CHECK(docs->cu_seqlens.size() == docs->ids.size() + 1);
  MAXSIMD_FUZZ_CHECK(docs->tokens.size() ==
                     static_cast<size_t>(docs->cu_seqlens.back()) * docs->dim);
  return 0;
}
