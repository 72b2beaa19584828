#include "index/durable_file.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "kernels/base/fault_injection.h"
#include "kernels/base/file_util.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {
namespace {

// The write(2) and fsync(2) of durable files, each with its fault point
// (kernels/base/fault_injection.h): an armed point fails the call with
// ENOSPC, as a full disk does. RenamePath is the third.
ssize_t WriteSome(int fd, const char* data, size_t bytes) {
  if (MAXSIMD_FAULT_POINT(fault::kStorageWrite)) {
    errno = ENOSPC;
    return -1;
  }
  return write(fd, data, bytes);
}

int Fsync(int fd) {
  if (MAXSIMD_FAULT_POINT(fault::kStorageFsync)) {
    errno = ENOSPC;
    return -1;
  }
  return fsync(fd);
}

}  // namespace

std::string JoinPath(const std::string& dir, absl::string_view file) {
  return absl::StrCat(dir, "/", file);
}

std::string ParentDir(const std::string& path) {
  const size_t slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

absl::Status ErrnoStatus(absl::string_view what, const std::string& path) {
  const int e = errno;
  const std::string msg = absl::StrCat(what, " ", path, ": ", strerror(e));
  if (e == ENOSPC || e == EDQUOT) return absl::ResourceExhaustedError(msg);
  return absl::InternalError(msg);
}

int RenamePath(const std::string& from, const std::string& to) {
  if (MAXSIMD_FAULT_POINT(fault::kStorageRename)) {
    errno = ENOSPC;
    return -1;
  }
  return rename(from.c_str(), to.c_str());
}

absl::StatusOr<std::vector<std::string>> ListFiles(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (d == nullptr) return ErrnoStatus("opendir", dir);
  std::vector<std::string> names;
  while (struct dirent* e = readdir(d)) {
    const std::string n = e->d_name;
    if (n != "." && n != "..") names.push_back(n);
  }
  closedir(d);
  return names;
}

absl::Status RemoveTree(const std::string& path) {
  struct stat st;
  if (lstat(path.c_str(), &st) != 0) {
    return errno == ENOENT ? absl::OkStatus() : ErrnoStatus("stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    MAXSIMD_ASSIGN_OR_RETURN(std::vector<std::string> names, ListFiles(path));
    for (const std::string& n : names) {
      MAXSIMD_RETURN_IF_ERROR(RemoveTree(JoinPath(path, n)));
    }
    if (rmdir(path.c_str()) != 0) return ErrnoStatus("rmdir", path);
    return absl::OkStatus();
  }
  if (unlink(path.c_str()) != 0) return ErrnoStatus("unlink", path);
  return absl::OkStatus();
}

absl::Status MakeDirectories(const std::string& path) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i < path.size() && path[i] != '/') continue;
    const std::string prefix = path.substr(0, i);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return ErrnoStatus("mkdir", prefix);
    }
  }
  return absl::OkStatus();
}

absl::Status WriteFileDurably(const std::string& path, absl::string_view data) {
  const int fd =
      open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoStatus("open", path);
  // A failed write removes what it wrote: on a full disk, the space.
  auto fail = [&](const char* what) {
    absl::Status s = ErrnoStatus(what, path);
    close(fd);
    (void)unlink(path.c_str());
    return s;
  };
  size_t at = 0;
  while (at < data.size()) {
    const ssize_t n = WriteSome(fd, data.data() + at, data.size() - at);
    if (n < 0) {
      if (errno == EINTR) continue;
      return fail("write");
    }
    at += static_cast<size_t>(n);
  }
  if (Fsync(fd) != 0) return fail("fsync");
  if (close(fd) != 0) {
    absl::Status s = ErrnoStatus("close", path);
    (void)unlink(path.c_str());
    return s;
  }
  return absl::OkStatus();
}

absl::Status ReplaceFileDurably(const std::string& path,
                                absl::string_view data) {
  const std::string tmp = path + ".tmp";
  MAXSIMD_RETURN_IF_ERROR(WriteFileDurably(tmp, data));
  if (RenamePath(tmp, path) != 0) {
    absl::Status s = ErrnoStatus("rename", tmp);
    (void)unlink(tmp.c_str());
    return s;
  }
  return SyncDirectory(ParentDir(path));
}

absl::StatusOr<std::string> ReadWholeFile(const std::string& path) {
  absl::StatusOr<std::string> bytes = ReadFileToString(path);
  if (absl::IsNotFound(bytes.status())) {
    return absl::DataLossError(absl::StrCat("file ", path, " is missing"));
  }
  return bytes;
}

absl::Status SyncDirectory(const std::string& dir) {
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return ErrnoStatus("open", dir);
  const int rc = Fsync(fd);
  absl::Status s = rc == 0 ? absl::OkStatus() : ErrnoStatus("fsync", dir);
  close(fd);
  return s;
}

}  // namespace maxsimd
