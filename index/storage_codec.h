// The file formats of index/FORMAT.md, as bytes in memory: encoders and
// decoders of the segment, tombstone, codec, manifest and alias files (a
// header, tagged blocks with a CRC-32 each, an end tag and a file CRC-32),
// and the corpus id that ties one directory's files together. Nothing here
// touches a disk: durable_file.h writes and reads the bytes, and storage.h
// decides which files a corpus directory holds.
//
// Errors: a decoder refuses a file as DATA_LOSS with a message naming it
// and the reason ("file <name>: ..."), for everything FORMAT.md lists;
// FileDataLoss words the same for checks that span files (storage.h's).
//
// Thread-safety: the functions are reentrant. Encoding or decoding a large
// file computes its CRCs on threads that the call starts and joins before
// it returns.
#ifndef MAXSIMD_INDEX_STORAGE_CODEC_H_
#define MAXSIMD_INDEX_STORAGE_CODEC_H_

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "index/corpus.h"
#include "index/segment.h"

namespace maxsimd {

// Format versions (FORMAT.md, "Common file layout"). Version 2 is version 1
// with a leading 'corp' block (the corpus id) in the per-corpus kinds; a
// file without an id is written as version 1.
inline constexpr uint32_t kStorageFormatVersion = 2;
inline constexpr uint32_t kStorageLegacyFormatVersion = 1;

// One segment as the manifest records it.
struct StoredSegment {
  std::string file;        // segment file name, relative to the corpus dir
  std::string tombstones;  // tombstone file name; empty: nothing deleted
  int64_t base_index = 0;  // internal index of its first document
  int64_t num_docs = 0;
  int32_t shard = 0;
};

struct Manifest {
  CorpusConfig config;
  uint64_t next_file = 1;
  std::vector<StoredSegment> segments;
  // PLAID: the codec file; empty before the corpus's first documents.
  std::string codec_file;
  // The corpus id (NewCorpusId) that every file the manifest names carries;
  // empty in a format version 1 manifest, which has none.
  std::string corpus_id;
  // Files numbered below this may be version 1 files without an id (a
  // corpus written before ids existed, migrated when this id was given to
  // it); 0: every file carries the id.
  uint64_t legacy_below = 0;
};

// A fresh corpus id: 128 random bits as 32 lowercase hex digits. The id
// names one corpus directory's set of files (index/FORMAT.md, "Corpus
// id"), so that a file copied in from another corpus is DATA_LOSS.
std::string NewCorpusId();

// Encoders and decoders of the file kinds. `name` only labels error
// messages. Decoders check everything FORMAT.md lists. An encoder given a
// `corpus_id` (NewCorpusId's form) writes format version 2, which carries
// it; without one, version 1 (what builds before the id wrote). A decoder
// stores the id a file carries in *corpus_id when that is not null (empty
// for a version 1 file); checking it against the manifest's is
// CorpusStore::Read's job.
std::string EncodeSegmentFile(const SegmentData& data,
                              absl::string_view corpus_id = "");
absl::StatusOr<SegmentData> DecodeSegmentFile(absl::string_view bytes,
                                              absl::string_view name,
                                              std::string* corpus_id = nullptr);
std::string EncodeCodecFile(const PlaidCodec& codec,
                            absl::string_view corpus_id = "");
absl::StatusOr<PlaidCodec> DecodeCodecFile(absl::string_view bytes,
                                           absl::string_view name,
                                           std::string* corpus_id = nullptr);
std::string EncodeTombstoneFile(int64_t num_docs,
                                const std::vector<uint32_t>& bits,
                                absl::string_view corpus_id = "");
absl::StatusOr<std::vector<uint32_t>> DecodeTombstoneFile(
    absl::string_view bytes, int64_t num_docs, absl::string_view name,
    std::string* corpus_id = nullptr);
// The manifest carries its own id (Manifest::corpus_id).
std::string EncodeManifest(const Manifest& manifest);
absl::StatusOr<Manifest> DecodeManifest(absl::string_view bytes,
                                        absl::string_view name);

// The alias file of a data directory: alias -> corpus name.
std::string EncodeAliases(const std::map<std::string, std::string>& aliases);
absl::StatusOr<std::map<std::string, std::string>> DecodeAliases(
    absl::string_view bytes, absl::string_view name);

// The DATA_LOSS of a damaged file, as the decoders word it: "file <name>:
// <why>".
absl::Status FileDataLoss(absl::string_view name, absl::string_view why);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_STORAGE_CODEC_H_
