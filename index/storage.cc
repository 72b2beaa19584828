#include "index/storage.h"

#include <errno.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstdio>
#include <set>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {
namespace {

constexpr absl::string_view kManifestName = "MANIFEST";

// The number n of a corpus file named "<prefix>-<n>.msd"; false for any
// other name.
bool FileNumber(absl::string_view file, uint64_t* number) {
  if (!absl::ConsumeSuffix(&file, ".msd")) return false;
  const size_t dash = file.find_last_of('-');
  if (dash == absl::string_view::npos) return false;
  const absl::string_view digits = file.substr(dash + 1);
  return !digits.empty() &&
         std::all_of(digits.begin(), digits.end(),
                     [](char c) { return c >= '0' && c <= '9'; }) &&
         absl::SimpleAtoi(digits, number);
}

}  // namespace

CorpusStore::CorpusStore(std::string dir, Manifest manifest)
    : dir_(std::move(dir)), manifest_(std::move(manifest)) {}

absl::StatusOr<std::unique_ptr<CorpusStore>> CorpusStore::Create(
    const std::string& dir, const CorpusConfig& config) {
  if (mkdir(dir.c_str(), 0755) != 0) {
    if (errno == EEXIST) {
      return absl::AlreadyExistsError(absl::StrCat(dir, " already exists"));
    }
    return ErrnoStatus("mkdir", dir);
  }
  Manifest m;
  m.config = config;
  m.corpus_id = NewCorpusId();
  std::unique_ptr<CorpusStore> store(new CorpusStore(dir, m));
  absl::Status s = store->Commit({});
  // The new directory's entry in its parent.
  if (s.ok()) s = SyncDirectory(ParentDir(dir));
  if (!s.ok()) {
    (void)RemoveTree(dir);
    return s;
  }
  return store;
}

absl::StatusOr<std::unique_ptr<CorpusStore>> CorpusStore::Open(
    const std::string& dir, StoredCorpus* contents) {
  MAXSIMD_RETURN_IF_ERROR(Read(dir, contents));
  Manifest& m = contents->manifest;
  if (m.corpus_id.empty()) {
    // Written before corpus ids: the files there now stay id-less legacy
    // files; every file from here on, and the next manifest, carry the id.
    m.corpus_id = NewCorpusId();
    m.legacy_below = m.next_file;
  }
  std::unique_ptr<CorpusStore> store(new CorpusStore(dir, m));
  store->CollectGarbage();
  return store;
}

absl::Status CorpusStore::Read(const std::string& dir, StoredCorpus* contents) {
  const std::string manifest_path = JoinPath(dir, kManifestName);
  MAXSIMD_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(manifest_path));
  MAXSIMD_ASSIGN_OR_RETURN(Manifest m, DecodeManifest(bytes, manifest_path));
  // A named file must be this corpus's: a file copied in from another
  // corpus (whole, so its own checksums hold) carries that corpus's id.
  auto check_id = [&](const std::string& file, const std::string& path,
                      const std::string& id) -> absl::Status {
    if (id == m.corpus_id) return absl::OkStatus();
    if (id.empty()) {
      uint64_t number = 0;
      if (FileNumber(file, &number) && number < m.legacy_below) {
        return absl::OkStatus();  // written before the corpus had its id
      }
      return FileDataLoss(
          path, absl::StrCat("carries no corpus id (format version ",
                             kStorageLegacyFormatVersion, "), but ",
                             manifest_path, " is of corpus id ", m.corpus_id,
                             ": it is not this corpus's file"));
    }
    return FileDataLoss(
        path, absl::StrCat("carries corpus id ", id, ", but ", manifest_path,
                           m.corpus_id.empty()
                               ? " carries none"
                               : absl::StrCat(" is of corpus id ", m.corpus_id),
                           ": it is another corpus's file"));
  };
  contents->segments.clear();
  contents->tombstones.clear();
  contents->codec.reset();
  // A file the manifest names: missing is DATA_LOSS saying so.
  auto read_named = [&](absl::string_view what, const std::string& path) {
    absl::StatusOr<std::string> bytes = ReadWholeFile(path);
    if (!bytes.ok() && absl::IsDataLoss(bytes.status())) {
      return absl::StatusOr<std::string>(
          absl::DataLossError(absl::StrCat("missing ", what, " file ", path,
                                           " (named by ", manifest_path, ")")));
    }
    return bytes;
  };
  if (!m.codec_file.empty()) {
    const std::string path = JoinPath(dir, m.codec_file);
    MAXSIMD_ASSIGN_OR_RETURN(std::string codec_bytes,
                             read_named("codec", path));
    std::string id;
    MAXSIMD_ASSIGN_OR_RETURN(PlaidCodec codec,
                             DecodeCodecFile(codec_bytes, path, &id));
    MAXSIMD_RETURN_IF_ERROR(check_id(m.codec_file, path, id));
    if (codec.dim != m.config.dim ||
        PlaidDType(codec.nbits) != m.config.storage_dtype) {
      return FileDataLoss(
          path, absl::StrCat("is a codec of dim ", codec.dim, " and nbits ",
                             codec.nbits, "; the manifest's corpus differs"));
    }
    contents->codec = std::move(codec);
  } else if (m.config.layout == Layout::kPlaid && !m.segments.empty()) {
    return FileDataLoss(manifest_path,
                        "names PLAID segments but no codec file");
  }
  for (const StoredSegment& s : m.segments) {
    const std::string path = JoinPath(dir, s.file);
    MAXSIMD_ASSIGN_OR_RETURN(std::string seg_bytes,
                             read_named("segment", path));
    std::string id;
    MAXSIMD_ASSIGN_OR_RETURN(SegmentData data,
                             DecodeSegmentFile(seg_bytes, path, &id));
    MAXSIMD_RETURN_IF_ERROR(check_id(s.file, path, id));
    if (static_cast<int64_t>(data.ids.size()) != s.num_docs ||
        data.dim != m.config.dim || data.dtype != m.config.storage_dtype) {
      return FileDataLoss(
          path, absl::StrCat("holds ", data.ids.size(), " documents of dim ",
                             data.dim, "; the manifest expects ", s.num_docs,
                             " of dim ", m.config.dim));
    }
    for (int32_t code : data.codes) {
      if (code >= contents->codec->num_centroids) {
        return FileDataLoss(path,
                            absl::StrCat("holds code ", code, " outside the ",
                                         contents->codec->num_centroids,
                                         " centroids of its codec"));
      }
    }
    contents->segments.push_back(std::move(data));
    std::vector<uint32_t> bits;
    if (!s.tombstones.empty()) {
      const std::string tpath = JoinPath(dir, s.tombstones);
      MAXSIMD_ASSIGN_OR_RETURN(std::string tomb_bytes,
                               read_named("tombstone", tpath));
      MAXSIMD_ASSIGN_OR_RETURN(
          bits, DecodeTombstoneFile(tomb_bytes, s.num_docs, tpath, &id));
      MAXSIMD_RETURN_IF_ERROR(check_id(s.tombstones, tpath, id));
    }
    contents->tombstones.push_back(std::move(bits));
  }
  contents->manifest = std::move(m);
  return absl::OkStatus();
}

std::string CorpusStore::NewFileName(absl::string_view prefix) {
  return absl::StrCat(prefix, "-", manifest_.next_file++, ".msd");
}

absl::StatusOr<std::string> CorpusStore::WriteSegment(const SegmentData& data) {
  std::string name = NewFileName("seg");
  MAXSIMD_RETURN_IF_ERROR(WriteFileDurably(
      JoinPath(dir_, name), EncodeSegmentFile(data, manifest_.corpus_id)));
  return name;
}

absl::StatusOr<std::string> CorpusStore::WriteTombstones(
    int64_t num_docs, const std::vector<uint32_t>& bits) {
  std::string name = NewFileName("tomb");
  MAXSIMD_RETURN_IF_ERROR(WriteFileDurably(
      JoinPath(dir_, name),
      EncodeTombstoneFile(num_docs, bits, manifest_.corpus_id)));
  return name;
}

absl::Status CorpusStore::WriteCodec(const PlaidCodec& codec) {
  std::string name = NewFileName("codec");
  MAXSIMD_RETURN_IF_ERROR(WriteFileDurably(
      JoinPath(dir_, name), EncodeCodecFile(codec, manifest_.corpus_id)));
  pending_codec_ = std::move(name);
  return absl::OkStatus();
}

absl::Status CorpusStore::WriteAndCommit(
    const std::vector<SegmentToWrite>& segments, const PlaidCodec* codec) {
  if (codec != nullptr) MAXSIMD_RETURN_IF_ERROR(WriteCodec(*codec));
  std::vector<StoredSegment> entries;
  for (const SegmentToWrite& w : segments) {
    StoredSegment e;
    e.base_index = w.base_index;
    e.num_docs = static_cast<int64_t>(w.data->ids.size());
    e.shard = w.shard;
    MAXSIMD_ASSIGN_OR_RETURN(e.file, WriteSegment(*w.data));
    if (w.deleted != nullptr && !w.deleted->empty()) {
      MAXSIMD_ASSIGN_OR_RETURN(e.tombstones,
                               WriteTombstones(e.num_docs, *w.deleted));
    }
    entries.push_back(std::move(e));
  }
  return Commit(std::move(entries));
}

absl::Status CorpusStore::Commit(std::vector<StoredSegment> segments) {
  Manifest next = manifest_;
  next.segments = std::move(segments);
  if (!pending_codec_.empty()) next.codec_file = pending_codec_;
  // ReplaceFileDurably's steps, to tell a failure before the rename (the
  // committed manifest is untouched) from one after it.
  const std::string path = JoinPath(dir_, kManifestName);
  const std::string tmp = path + ".tmp";
  MAXSIMD_RETURN_IF_ERROR(WriteFileDurably(tmp, EncodeManifest(next)));
  if (RenamePath(tmp, path) != 0) {
    absl::Status s = ErrnoStatus("rename", tmp);
    (void)unlink(tmp.c_str());
    return s;
  }
  absl::Status synced = SyncDirectory(dir_);
  if (!synced.ok()) {
    // `next` is in place, perhaps not durably. The commit failed, so put
    // the committed manifest back; until that is durable too, either may
    // be what a restart reads, so CollectGarbage keeps the files of both.
    if (!ReplaceFileDurably(path, EncodeManifest(manifest_)).ok()) {
      unsure_ = std::move(next);
    }
    return synced;
  }
  manifest_ = std::move(next);
  unsure_.reset();
  pending_codec_.clear();
  return absl::OkStatus();
}

void CorpusStore::CollectGarbage() {
  absl::StatusOr<std::vector<std::string>> names = ListFiles(dir_);
  if (!names.ok()) return;
  // A codec no commit took is dropped with the write that wrote it.
  pending_codec_.clear();
  std::set<std::string> keep = {std::string(kManifestName)};
  for (const Manifest* m : {&manifest_, unsure_ ? &*unsure_ : nullptr}) {
    if (m == nullptr) continue;
    if (!m->codec_file.empty()) keep.insert(m->codec_file);
    for (const StoredSegment& s : m->segments) {
      keep.insert(s.file);
      if (!s.tombstones.empty()) keep.insert(s.tombstones);
    }
  }
  for (const std::string& n : *names) {
    if (keep.count(n) == 0) (void)unlink(JoinPath(dir_, n).c_str());
  }
}

absl::StatusOr<std::unique_ptr<CorpusStore>> CorpusStore::CreateWhole(
    const std::string& dir, const CorpusConfig& config,
    const std::vector<SegmentToWrite>& segments, const PlaidCodec* codec) {
  const std::string parent = ParentDir(dir);
  MAXSIMD_RETURN_IF_ERROR(MakeDirectories(parent));
  struct stat st;
  if (lstat(dir.c_str(), &st) == 0) {
    return absl::AlreadyExistsError(absl::StrCat(dir, " already exists"));
  }
  // Written under a hidden name next to `dir`, then renamed into place
  // whole: `dir` never holds part of a corpus, even after a crash (which
  // leaves the hidden directory behind).
  static std::atomic<uint64_t> partials{0};
  const size_t slash = dir.find_last_of('/');
  const std::string partial = JoinPath(
      parent,
      absl::StrCat(".partial-",
                   slash == std::string::npos ? dir : dir.substr(slash + 1),
                   "-", getpid(), "-", partials++));
  auto write_all = [&]() -> absl::StatusOr<std::unique_ptr<CorpusStore>> {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<CorpusStore> store,
                             Create(partial, config));
    MAXSIMD_RETURN_IF_ERROR(store->WriteAndCommit(segments, codec));
    if (RenamePath(partial, dir) != 0) {
      // A directory of the same name that finished first.
      if (errno == EEXIST || errno == ENOTEMPTY) {
        return absl::AlreadyExistsError(absl::StrCat(dir, " already exists"));
      }
      return ErrnoStatus("rename", partial);
    }
    absl::Status synced = SyncDirectory(parent);
    if (!synced.ok()) {
      (void)RemoveTree(dir);  // not durably in place
      return synced;
    }
    return std::unique_ptr<CorpusStore>(new CorpusStore(dir, store->manifest_));
  };
  absl::StatusOr<std::unique_ptr<CorpusStore>> store = write_all();
  if (!store.ok()) (void)RemoveTree(partial);
  return store;
}

absl::Status WriteCorpusDirectory(const std::string& dir,
                                  const CorpusSnapshot& snapshot) {
  std::vector<CorpusStore::SegmentToWrite> segments;
  for (size_t i = 0; i < snapshot.segments().size(); ++i) {
    const Segment& seg = *snapshot.segments()[i];
    const TombstoneSet* dead = snapshot.tombstones(i);
    segments.push_back({&seg.data(), dead != nullptr ? &dead->bits() : nullptr,
                        seg.base_index(), seg.shard()});
  }
  absl::Status s =
      CorpusStore::CreateWhole(
          dir, snapshot.config(), segments,
          snapshot.codec() != nullptr ? &snapshot.codec()->codec() : nullptr)
          .status();
  // ALREADY_EXISTS names `dir` already.
  if (s.ok() || absl::IsAlreadyExists(s)) return s;
  return absl::Status(s.code(),
                      absl::StrCat("snapshot ", dir, ": ", s.message()));
}

absl::Status DestroyCorpusDirectory(const std::string& dir) {
  const std::string parent = ParentDir(dir);
  const size_t slash = dir.find_last_of('/');
  const std::string base =
      slash == std::string::npos ? dir : dir.substr(slash + 1);
  std::string trash;
  for (int n = 0;; ++n) {
    trash = JoinPath(parent, absl::StrCat(".dropped-", base, "-", n));
    struct stat st;
    if (lstat(trash.c_str(), &st) != 0) break;
  }
  if (rename(dir.c_str(), trash.c_str()) != 0)
    return ErrnoStatus("rename", dir);
  MAXSIMD_RETURN_IF_ERROR(SyncDirectory(parent));
  return RemoveTree(trash);
}

absl::Status RemoveDroppedCorpora(const std::string& corpora_dir) {
  MAXSIMD_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           ListFiles(corpora_dir));
  for (const std::string& n : names) {
    if (absl::StartsWith(n, ".dropped-") || absl::StartsWith(n, ".partial-")) {
      MAXSIMD_RETURN_IF_ERROR(RemoveTree(JoinPath(corpora_dir, n)));
    }
  }
  return absl::OkStatus();
}

namespace {

// RemovePartialSnapshots below `dir`, adding to *removed.
absl::Status RemovePartialsUnder(const std::string& dir, int* removed) {
  MAXSIMD_ASSIGN_OR_RETURN(std::vector<std::string> names, ListFiles(dir));
  for (const std::string& n : names) {
    const std::string path = JoinPath(dir, n);
    struct stat st;
    // lstat: a symbolic link is never followed, nor removed.
    if (lstat(path.c_str(), &st) != 0) {
      if (errno == ENOENT) continue;
      return ErrnoStatus("stat", path);
    }
    if (!S_ISDIR(st.st_mode)) continue;
    if (absl::StartsWith(n, ".partial-")) {
      MAXSIMD_RETURN_IF_ERROR(RemoveTree(path));
      ++*removed;
    } else {
      MAXSIMD_RETURN_IF_ERROR(RemovePartialsUnder(path, removed));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<int> RemovePartialSnapshots(const std::string& files_dir) {
  int removed = 0;
  MAXSIMD_RETURN_IF_ERROR(RemovePartialsUnder(files_dir, &removed));
  return removed;
}

absl::StatusOr<std::vector<std::string>> ListCorpusDirectories(
    const std::string& corpora_dir) {
  MAXSIMD_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           ListFiles(corpora_dir));
  std::vector<std::string> out;
  for (const std::string& n : names) {
    if (absl::StartsWith(n, ".")) continue;
    struct stat st;
    if (stat(JoinPath(corpora_dir, n).c_str(), &st) == 0 &&
        S_ISDIR(st.st_mode)) {
      out.push_back(n);
    }
  }
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace maxsimd
