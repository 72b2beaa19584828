// Durable corpus storage: the files of index/FORMAT.md (segment, tombstone
// and manifest files with per-block and per-file CRC-32) and CorpusStore,
// which commits a corpus's state to its directory through an atomic
// manifest rename.
//
// Errors: every damaged, truncated or missing file is DATA_LOSS with a
// message naming the file and the reason; I/O failures while writing are
// INTERNAL (or RESOURCE_EXHAUSTED for a full disk, the message naming the
// file and the call) and leave the committed state as it was.
//
// Tests fail the writes, fsyncs and renames here at will, as a full disk
// does, through the fault points fault::kStorageWrite, kStorageFsync and
// kStorageRename (kernels/fault_injection.h).
//
// Thread-safety: the free functions are reentrant; a CorpusStore is used by
// one writer at a time (its Corpus serialises writes).
#ifndef MAXSIMD_INDEX_STORAGE_H_
#define MAXSIMD_INDEX_STORAGE_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "index/corpus.h"
#include "index/segment.h"

namespace maxsimd {

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
};

// Encoders and decoders of the three file kinds. `name` only labels error
// messages. Decoders check everything FORMAT.md lists.
std::string EncodeSegmentFile(const SegmentData& data);
absl::StatusOr<SegmentData> DecodeSegmentFile(absl::string_view bytes,
                                              absl::string_view name);
std::string EncodeCodecFile(const PlaidCodec& codec);
absl::StatusOr<PlaidCodec> DecodeCodecFile(absl::string_view bytes,
                                           absl::string_view name);
std::string EncodeTombstoneFile(int64_t num_docs,
                                const std::vector<uint32_t>& bits);
absl::StatusOr<std::vector<uint32_t>> DecodeTombstoneFile(
    absl::string_view bytes, int64_t num_docs, absl::string_view name);
std::string EncodeManifest(const Manifest& manifest);
absl::StatusOr<Manifest> DecodeManifest(absl::string_view bytes,
                                        absl::string_view name);

// The alias file of a data directory: alias -> corpus name.
std::string EncodeAliases(const std::map<std::string, std::string>& aliases);
absl::StatusOr<std::map<std::string, std::string>> DecodeAliases(
    absl::string_view bytes, absl::string_view name);
// Replaces `path` durably: writes path + ".tmp", fsyncs it, renames it over
// `path` and fsyncs the directory. A failure before the rename leaves
// `path` as it was and removes the ".tmp" file; one after it (the
// directory's fsync) leaves `path` holding `data`, perhaps not durably, so
// a caller that reports the failure writes the previous contents back.
absl::Status ReplaceFileDurably(const std::string& path,
                                absl::string_view data);

// Whole-file I/O. WriteFileDurably writes, fsyncs and closes `path`
// (replacing it), and removes it when that fails (so a full disk gets its
// space back); SyncDirectory fsyncs a directory so that entries created or
// renamed in it are durable.
absl::Status WriteFileDurably(const std::string& path, absl::string_view data);
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);
absl::Status SyncDirectory(const std::string& dir);

// The contents of a corpus directory, as Open() read them.
struct StoredCorpus {
  Manifest manifest;
  std::optional<PlaidCodec> codec;    // PLAID, once it has documents
  std::vector<SegmentData> segments;  // parallel to manifest
  std::vector<std::vector<uint32_t>> tombstones;  // empty: none
};

class CorpusStore {
 public:
  // Makes `dir` holding `config` and no documents; ALREADY_EXISTS if `dir`
  // exists.
  static absl::StatusOr<std::unique_ptr<CorpusStore>> Create(
      const std::string& dir, const CorpusConfig& config);
  // Reads `dir`'s manifest and every file it names into *contents, and
  // removes files the manifest does not name. DATA_LOSS names the file.
  static absl::StatusOr<std::unique_ptr<CorpusStore>> Open(
      const std::string& dir, StoredCorpus* contents);

  // Open() without the garbage collection: reads a corpus directory that
  // is not ours (a snapshot to load), changing nothing in it.
  static absl::Status Read(const std::string& dir, StoredCorpus* contents);

  const std::string& dir() const { return dir_; }
  const Manifest& manifest() const { return manifest_; }

  // Step 1 of a commit: writes a new segment or tombstone file (durably)
  // and returns its name. Until a Commit names it, it is garbage.
  absl::StatusOr<std::string> WriteSegment(const SegmentData& data);
  absl::StatusOr<std::string> WriteTombstones(
      int64_t num_docs, const std::vector<uint32_t>& bits);

  // One segment for WriteAndCommit: its arrays, its deleted-document bits
  // (null or empty: none), where it starts and which shard holds it.
  struct SegmentToWrite {
    const SegmentData* data = nullptr;
    const std::vector<uint32_t>* deleted = nullptr;
    int64_t base_index = 0;
    int32_t shard = 0;
  };
  // Writes a PLAID codec file (durably); the next Commit names it in the
  // manifest, and a CollectGarbage before that drops it.
  absl::Status WriteCodec(const PlaidCodec& codec);

  // Writes every segment's files (and `codec`, if not null), then commits
  // them as the whole state (the steps below, for a corpus written at once:
  // a snapshot, a load).
  absl::Status WriteAndCommit(const std::vector<SegmentToWrite>& segments,
                              const PlaidCodec* codec = nullptr);

  // Steps 2 and 3: makes `segments` the committed state. On error the
  // previous state stays committed (on disk and in manifest()): when the
  // new manifest was renamed into place but its directory could not be
  // synced, the previous manifest is written back.
  absl::Status Commit(std::vector<StoredSegment> segments);

  // Removes the files in the directory that the committed manifest does
  // not name (best effort; after a failed or superseding commit). Files of
  // a failed commit whose manifest could not be put back (see Commit) are
  // kept until the next commit succeeds, since a restart may read it.
  void CollectGarbage();

 private:
  CorpusStore(std::string dir, Manifest manifest);
  std::string NewFileName(absl::string_view prefix);

  const std::string dir_;
  Manifest manifest_;
  std::string pending_codec_;  // written, not yet committed
  // The manifest of a failed commit that may be on disk (see Commit).
  std::optional<Manifest> unsure_;
};

// Writes a complete corpus directory at `dir` (which must not exist; its
// parents are created as needed): one
// segment file per segment, tombstone files where documents are deleted,
// and the manifest, every file fsynced. Used for snapshots. The files are
// written into a hidden sibling directory (".partial-<name>-<pid>-<n>")
// renamed to `dir` once complete, so `dir` holds a whole snapshot or
// nothing: a failed write (a full disk: RESOURCE_EXHAUSTED naming the file)
// removes everything it wrote, and a crash leaves only the hidden
// directory. ALREADY_EXISTS if `dir` exists.
absl::Status WriteCorpusDirectory(const std::string& dir,
                                  const CorpusSnapshot& snapshot);

// Removes a corpus directory: renames it to a `.dropped-*` sibling, syncs
// the parent, then deletes it.
absl::Status DestroyCorpusDirectory(const std::string& dir);
// Deletes the `.dropped-*` directories a crash left in `corpora_dir`.
absl::Status RemoveDroppedCorpora(const std::string& corpora_dir);
// The corpus directories in `corpora_dir` (names not starting with '.'),
// sorted.
absl::StatusOr<std::vector<std::string>> ListCorpusDirectories(
    const std::string& corpora_dir);
// mkdir -p.
absl::Status MakeDirectories(const std::string& path);
// The names in a directory (files and subdirectories, not . and ..).
absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_STORAGE_H_
