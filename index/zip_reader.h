// A reader of zip archives whose entries are stored uncompressed (method 0),
// which is what torch.save writes (index/torch_file.h). It reads the end of
// central directory record (and the zip64 one where the 32-bit fields are
// saturated), then each central directory entry and its local header, and
// checks every entry's CRC-32. Compressed, encrypted or multi-disk archives
// are refused. The input is untrusted: every offset and size is checked
// against the archive before it is used.
//
// Errors: DATA_LOSS naming the archive for anything malformed, truncated or
// failing its CRC; INVALID_ARGUMENT for a well-formed archive this reader
// does not take (a compressed or encrypted entry, several disks).
// Thread-safety: pure functions.
#ifndef MAXSIMD_INDEX_ZIP_READER_H_
#define MAXSIMD_INDEX_ZIP_READER_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace maxsimd {

struct ZipEntry {
  std::string name;        // as stored, '/'-separated
  absl::string_view data;  // a view into the archive's bytes
};

// The entries of `archive` in central directory order. The views point into
// `archive`, which must outlive them. `name` is the file named in messages.
absl::StatusOr<std::vector<ZipEntry>> ParseStoredZip(absl::string_view archive,
                                                     absl::string_view name);

// Builds a zip of stored entries, in the given order, with each entry's data
// starting on a 64-byte boundary as torch.save does (for tests and tools).
// No zip64: the archive must stay under 4 GiB and 65535 entries.
std::string SerializeStoredZip(
    const std::vector<std::pair<std::string, std::string>>& entries);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_ZIP_READER_H_
