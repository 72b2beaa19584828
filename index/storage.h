// Durable corpus storage, the corpus commit protocol of index/FORMAT.md:
// CorpusStore commits a corpus's state to its directory through an atomic
// manifest rename, reads it back at start, and writes, loads and drops
// whole corpus directories. It is the top of three layers:
//   storage_codec.h  the file formats: encoding, decoding, checksums
//   durable_file.h   durable file I/O, with the fault points of disk faults
//   storage.h        the commit protocol: manifests, snapshots, commit
//                    ordering, recovery
// It includes the other two, so that one header gives the storage API.
//
// Errors: every damaged, truncated or missing file is DATA_LOSS with a
// message naming the file and the reason; I/O failures while writing are
// INTERNAL (or RESOURCE_EXHAUSTED for a full disk, the message naming the
// file and the call) and leave the committed state as it was.
//
// Thread-safety: the free functions are reentrant; a CorpusStore is used by
// one writer at a time (its Corpus serialises writes).
#ifndef MAXSIMD_INDEX_STORAGE_H_
#define MAXSIMD_INDEX_STORAGE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "index/corpus.h"
#include "index/durable_file.h"
#include "index/segment.h"
#include "index/storage_codec.h"

namespace maxsimd {

// The contents of a corpus directory, as Open() read them.
struct StoredCorpus {
  Manifest manifest;
  std::optional<PlaidCodec> codec;    // PLAID, once it has documents
  std::vector<SegmentData> segments;  // parallel to manifest
  std::vector<std::vector<uint32_t>> tombstones;  // empty: none
};

class CorpusStore {
 public:
  // Makes `dir` holding `config` and no documents, under a fresh corpus
  // id; ALREADY_EXISTS if `dir` exists.
  static absl::StatusOr<std::unique_ptr<CorpusStore>> Create(
      const std::string& dir, const CorpusConfig& config);
  // Reads `dir`'s manifest and every file it names into *contents, and
  // removes files the manifest does not name. DATA_LOSS names the file. A
  // version 1 manifest (no corpus id) gets a fresh id here, which the
  // store's next commit writes (its files already there stay legacy files,
  // Manifest::legacy_below).
  static absl::StatusOr<std::unique_ptr<CorpusStore>> Open(
      const std::string& dir, StoredCorpus* contents);

  // Open() without the garbage collection: reads a corpus directory that
  // is not ours (a snapshot to load), changing nothing in it. A file whose
  // corpus id is not its manifest's (a file of another corpus) is
  // DATA_LOSS naming the file and both ids.
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

  // Writes a whole corpus directory at `dir` (which must not exist; its
  // parents are created as needed) holding `segments` (and `codec`) under
  // a fresh corpus id, every file fsynced, and returns its store. The
  // files are written into a hidden sibling directory
  // (".partial-<name>-<pid>-<n>") renamed to `dir` once complete, so `dir`
  // holds the whole corpus or nothing: a failed write (a full disk:
  // RESOURCE_EXHAUSTED naming the file) removes everything it wrote, and a
  // crash leaves only the hidden directory (deleted at start by
  // RemoveDroppedCorpora in a data directory, RemovePartialSnapshots in a
  // files directory).
  // ALREADY_EXISTS if `dir` exists.
  static absl::StatusOr<std::unique_ptr<CorpusStore>> CreateWhole(
      const std::string& dir, const CorpusConfig& config,
      const std::vector<SegmentToWrite>& segments,
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

// Writes a complete corpus directory of `snapshot` at `dir` through
// CorpusStore::CreateWhole (so under a fresh corpus id, and whole or not
// at all): one segment file per segment, tombstone files where documents
// are deleted, and the manifest. Used for snapshots. Errors name the
// snapshot's path; ALREADY_EXISTS if `dir` exists.
absl::Status WriteCorpusDirectory(const std::string& dir,
                                  const CorpusSnapshot& snapshot);

// Removes a corpus directory: renames it to a `.dropped-*` sibling, syncs
// the parent, then deletes it.
absl::Status DestroyCorpusDirectory(const std::string& dir);
// Deletes the `.dropped-*` directories (drops) and `.partial-*` directories
// (loads, CorpusStore::CreateWhole) that a crash left in `corpora_dir`,
// directly under it.
absl::Status RemoveDroppedCorpora(const std::string& corpora_dir);
// Deletes every `.partial-*` directory that a crash during a snapshot
// (WriteCorpusDirectory) left under `files_dir`, at any depth, since a
// snapshot's path may be nested; returns how many. Only directories so
// named are removed, with everything in them; the walk never follows a
// symbolic link (a link named `.partial-*` is left alone). Call it while
// no snapshot is being written into `files_dir` (at start): it cannot tell
// a crashed snapshot from one in progress. Errors: those of reading or
// removing a directory, naming it (what was removed before stays removed).
absl::StatusOr<int> RemovePartialSnapshots(const std::string& files_dir);
// The corpus directories in `corpora_dir` (names not starting with '.'),
// sorted.
absl::StatusOr<std::vector<std::string>> ListCorpusDirectories(
    const std::string& corpora_dir);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_STORAGE_H_
