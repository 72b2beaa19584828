// Durable file I/O, the layer below the corpus commit protocol (storage.h)
// and above the disk: whole files written and fsynced before they count,
// replacement of a file by rename with its directory fsynced after, whole
// files read back, and the directory operations of a data directory. It
// knows nothing of what the files hold (storage_codec.h).
//
// Errors: an I/O failure is INTERNAL, or RESOURCE_EXHAUSTED for a full disk
// (ENOSPC, EDQUOT), with a message naming the call and the path
// (ErrnoStatus); a write that fails removes what it wrote. ReadWholeFile's
// errors are its own (below).
//
// Tests fail the writes, fsyncs and renames here at will, as a full disk
// does, through the fault points fault::kStorageWrite, kStorageFsync and
// kStorageRename (kernels/base/fault_injection.h).
//
// Thread-safety: the functions are reentrant and hold no state; keeping two
// writers off one path is the caller's job.
#ifndef MAXSIMD_INDEX_DURABLE_FILE_H_
#define MAXSIMD_INDEX_DURABLE_FILE_H_

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace maxsimd {

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
absl::Status SyncDirectory(const std::string& dir);

// The whole file at `path`, through ReadFileToString
// (kernels/base/file_util.h) and with its errors, except that a missing
// file is DATA_LOSS ("file <path> is missing"): the files read here are
// ones a corpus directory must hold.
absl::StatusOr<std::string> ReadWholeFile(const std::string& path);

// rename(2) through the fault point fault::kStorageRename (failed as with
// ENOSPC): 0, or -1 with errno set. For a rename that a commit depends on,
// so that tests fail it as they fail the writes.
int RenamePath(const std::string& from, const std::string& to);

// mkdir -p.
absl::Status MakeDirectories(const std::string& path);
// The names in a directory (files and subdirectories, not . and ..).
absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir);
// rm -r: removes `path` and, for a directory, everything in it; a symbolic
// link is removed, never followed. OK when `path` does not exist.
absl::Status RemoveTree(const std::string& path);

// `dir` + "/" + `file`.
std::string JoinPath(const std::string& dir, absl::string_view file);
// The directory holding `path` ("." for a bare name).
std::string ParentDir(const std::string& path);

// The status of the failed call `what` on `path`, from errno:
// RESOURCE_EXHAUSTED for a full disk (ENOSPC, EDQUOT), INTERNAL otherwise;
// the message is "<what> <path>: <errno's text>".
absl::Status ErrnoStatus(absl::string_view what, const std::string& path);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_DURABLE_FILE_H_
