// A fresh directory under the system's temporary directory, removed with
// the object (for tests).
#ifndef MAXSIMD_TESTS_SUPPORT_TEMP_DIR_H_
#define MAXSIMD_TESTS_SUPPORT_TEMP_DIR_H_

#include <stdlib.h>

#include <filesystem>
#include <string>
#include <system_error>

namespace maxsimd::testing {

class TempDir {
 public:
  // `prefix` starts the directory's name; path() is "" when mkdtemp failed.
  explicit TempDir(const std::string& prefix = "maxsimd-test-") {
    std::string pattern =
        (std::filesystem::temp_directory_path() / (prefix + "XXXXXX")).string();
    path_ = mkdtemp(pattern.data()) != nullptr ? pattern : "";
  }
  ~TempDir() {
    std::error_code ignored;
    if (!path_.empty()) std::filesystem::remove_all(path_, ignored);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_TEMP_DIR_H_
