#include "kernels/base/file_util.h"

#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace maxsimd {
namespace {

// The most one read(2) asks for: Linux moves at most 2^31 - 4096 bytes a
// call.
constexpr size_t kMaxRead = size_t{1} << 30;

std::string CannotRead(absl::string_view path) {
  return absl::StrCat("cannot read \"", path, "\": ");
}

// The status of a failed call, from its errno `e` (file_util.h's table).
absl::Status ErrnoError(int e, absl::string_view path) {
  std::string msg = absl::StrCat(CannotRead(path), std::strerror(e));
  switch (e) {
    case ENOENT:
    case ENOTDIR:
      return absl::NotFoundError(msg);
    case EACCES:
    case EPERM:
      return absl::PermissionDeniedError(msg);
    case EISDIR:
      return absl::InvalidArgumentError(msg);
    default:
      return absl::InternalError(msg);
  }
}

absl::Status TooLarge(absl::string_view path, int64_t max_bytes) {
  return absl::ResourceExhaustedError(absl::StrCat(
      CannotRead(path), "larger than the limit of ", max_bytes, " bytes"));
}

absl::Status BadLimit(absl::string_view function, absl::string_view path,
                      int64_t max_bytes) {
  return absl::InvalidArgumentError(absl::StrCat(CannotRead(path), function,
                                                 ": max_bytes is ", max_bytes,
                                                 "; it must be >= 0"));
}

// read(2) of at most `n` bytes, retried when a signal interrupts it: the
// bytes read (0 at the end of the file), or -1 with errno set.
ssize_t ReadSome(int fd, char* data, size_t n) {
  while (true) {
    const ssize_t got = read(fd, data, std::min(n, kMaxRead));
    if (got >= 0 || errno != EINTR) return got;
  }
}

}  // namespace

absl::StatusOr<std::string> ReadOpenFileToString(int fd, absl::string_view path,
                                                 int64_t max_bytes) {
  if (max_bytes < 0) return BadLimit("ReadOpenFileToString", path, max_bytes);
  struct stat st;
  if (fstat(fd, &st) != 0) return ErrnoError(errno, path);
  // A directory opens, and its read(2) fails (EISDIR): say so up front.
  if (S_ISDIR(st.st_mode)) return ErrnoError(EISDIR, path);
  const uint64_t limit = static_cast<uint64_t>(max_bytes);
  // What is left of a regular file comes in one allocation of its size. A
  // file that shrinks meanwhile ends early; one that grows, and anything
  // without a size (a pipe, a /proc file), is read on in pieces below.
  uint64_t size = 0;
  if (S_ISREG(st.st_mode)) {
    const off_t at = lseek(fd, 0, SEEK_CUR);
    if (at >= 0 && st.st_size > at) {
      size = static_cast<uint64_t>(st.st_size - at);
    }
  }
  if (size > limit) return TooLarge(path, max_bytes);
  std::string out(static_cast<size_t>(size), '\0');
  size_t done = 0;
  while (done < out.size()) {
    const ssize_t n = ReadSome(fd, out.data() + done, out.size() - done);
    if (n < 0) return ErrnoError(errno, path);
    if (n == 0) {
      out.resize(done);
      return out;
    }
    done += static_cast<size_t>(n);
  }
  // To the end: for a regular file that kept its size, one read of 0 bytes.
  // The pieces go through a buffer of their own, so that this read does not
  // grow (and copy) a whole file's string.
  char piece[64 << 10];
  while (true) {
    // One byte past the limit tells a file over it.
    const uint64_t room = limit - out.size() + 1;
    const ssize_t n =
        ReadSome(fd, piece,
                 static_cast<size_t>(std::min<uint64_t>(sizeof(piece), room)));
    if (n < 0) return ErrnoError(errno, path);
    if (n == 0) return out;
    if (out.size() + static_cast<uint64_t>(n) > limit) {
      return TooLarge(path, max_bytes);
    }
    out.append(piece, static_cast<size_t>(n));
  }
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path,
                                             int64_t max_bytes) {
  if (max_bytes < 0) return BadLimit("ReadFileToString", path, max_bytes);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError(errno, path);
  absl::StatusOr<std::string> out = ReadOpenFileToString(fd, path, max_bytes);
  close(fd);
  return out;
}

}  // namespace maxsimd
