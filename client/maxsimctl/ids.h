// Document ids as maxsimctl reads them from flags and files. The API takes
// any id of 1 to 256 bytes of UTF-8 (proto3 strings must be UTF-8: the
// server refuses a message that is not) and compares ids byte for byte, so
// maxsimctl passes ids on exactly as it reads them: nothing is trimmed,
// skipped or folded. An id it cannot pass on exactly is refused, naming
// where it came from, never altered (client/README.md, "ids and query
// files").
//
// Thread-safety: pure functions.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_IDS_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_IDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace maxsimd::ctl {

// The ids of --`flag`'s comma-separated value, byte for byte: split at
// every ',' and nowhere else (no trimming; "a, b" is "a" and " b"), so an id
// that holds ',' can only come from a file. An item the API would refuse
// (empty, over 256 bytes or not UTF-8; ",," and a ',' at either end make
// empty ones) is INVALID_ARGUMENT naming the flag, the item's position and
// the id.
absl::StatusOr<std::vector<std::string>> ParseIdList(absl::string_view list,
                                                     absl::string_view flag);

// The ids of the file named by --`flag` (--ids, --candidates-file,
// --ids-file), one per line, byte for byte. A line ends at "\n", and one
// "\r" before it belongs to the line ending (a file written on Windows);
// the last line needs no "\n", and a final "\n" starts no empty line. Every
// other byte, spaces, tabs, '#' and ',' included, is part of an id. So an
// id cannot hold "\n" or end in "\r": a line that still ends in "\r", or
// holds an id the API would refuse (an empty line is an empty id), is
// INVALID_ARGUMENT naming the flag, the file, the line and the id. An empty
// file holds no ids. Errors reading the file are index/importers.h's
// ReadInputFile's, naming the flag.
absl::StatusOr<std::vector<std::string>> ReadIdFile(const std::string& path,
                                                    absl::string_view flag);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_IDS_H_
