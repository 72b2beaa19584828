// The project's one whole-file reader: corpus files, input files of imports,
// secret and certificate files of the server and the client tools all come
// in through it, so a file that cannot be read gets the same status code
// wherever it is read. Callers with a rule of their own (a corpus file that
// is missing is DATA_LOSS, a secret file must be private) apply it around
// the reader.
//
// Errors, each message starting `cannot read "<path>": ` and then the
// reason (errno's text, or the limit):
//   NOT_FOUND           nothing at the path (ENOENT; ENOTDIR, a component
//                       of the path is a file)
//   PERMISSION_DENIED   the file may not be opened or read (EACCES, EPERM)
//   INVALID_ARGUMENT    the path is a directory, or max_bytes < 0
//   RESOURCE_EXHAUSTED  the file holds more than max_bytes bytes (the
//                       message names the limit); nothing past the limit
//                       is read
//   INTERNAL            any other failure of open(2), fstat(2) or read(2)
//
// Thread-safety: the functions are reentrant; they hold no state.
#ifndef MAXSIMD_KERNELS_BASE_FILE_UTIL_H_
#define MAXSIMD_KERNELS_BASE_FILE_UTIL_H_

#include <cstdint>
#include <limits>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace maxsimd {

// max_bytes of a read without a limit.
inline constexpr int64_t kNoFileSizeLimit = std::numeric_limits<int64_t>::max();

// The whole of the file at `path`, read to its end (an empty file is ""):
// a regular file in one allocation of its size, anything else that reads
// as a stream (a pipe, /dev/stdin, a /proc file) in pieces. Errors as
// above.
absl::StatusOr<std::string> ReadFileToString(
    const std::string& path, int64_t max_bytes = kNoFileSizeLimit);

// ReadFileToString for a file the caller opened itself, to check the file
// it opened before reading it (its mode, say): reads `fd` from its current
// offset to its end. `path` only names the file in messages. The caller
// keeps `fd` and closes it.
absl::StatusOr<std::string> ReadOpenFileToString(
    int fd, absl::string_view path, int64_t max_bytes = kNoFileSizeLimit);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_BASE_FILE_UTIL_H_
