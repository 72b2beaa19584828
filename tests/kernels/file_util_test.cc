#include "kernels/base/file_util.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <fstream>
#include <string>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"
#include "tests/support/temp_dir.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::StartsWith;

class FileUtilTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_FALSE(dir_.path().empty()); }

  // Writes `bytes` to `name` in the test's directory; returns its path.
  std::string Write(const std::string& name, const std::string& bytes) {
    const std::string path = dir_.path() + "/" + name;
    std::ofstream out(path, std::ios::binary);
    out << bytes;
    EXPECT_TRUE(out.good()) << path;
    return path;
  }

  testing::TempDir dir_;
};

// Every byte value, and more than one read piece's worth.
std::string Pattern(size_t n) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) s[i] = static_cast<char>((i * 7919) & 0xff);
  return s;
}

TEST_F(FileUtilTest, ReadsAWholeFile) {
  for (size_t n : {size_t{1}, size_t{4096}, size_t{200000}}) {
    const std::string bytes = Pattern(n);
    const std::string path = Write("f" + std::to_string(n), bytes);
    absl::StatusOr<std::string> got = ReadFileToString(path);
    ASSERT_THAT(got, IsOk()) << n;
    EXPECT_EQ(*got, bytes) << n;
  }
}

TEST_F(FileUtilTest, ReadsAFileOfExactlyTheLimit) {
  const std::string path = Write("f", "0123456789");
  absl::StatusOr<std::string> got = ReadFileToString(path, 10);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, "0123456789");
}

TEST_F(FileUtilTest, EmptyFileIsEmptyString) {
  const std::string path = Write("empty", "");
  absl::StatusOr<std::string> got = ReadFileToString(path);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, "");
  EXPECT_THAT(ReadFileToString(path, 0), IsOk());
}

TEST_F(FileUtilTest, MissingFileIsNotFound) {
  const std::string path = dir_.path() + "/missing";
  EXPECT_THAT(ReadFileToString(path),
              StatusIs(absl::StatusCode::kNotFound,
                       AllOf(StartsWith("cannot read \"" + path + "\": "),
                             HasSubstr("No such file"))));
  // A path through a regular file names nothing either.
  const std::string file = Write("file", "x");
  EXPECT_THAT(ReadFileToString(file + "/below"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr(file)));
}

TEST_F(FileUtilTest, OverTheLimitIsResourceExhaustedNamingTheLimit) {
  const std::string path = Write("big", Pattern(1000));
  EXPECT_THAT(
      ReadFileToString(path, 999),
      StatusIs(absl::StatusCode::kResourceExhausted,
               AllOf(HasSubstr(path), HasSubstr("limit of 999 bytes"))));
  EXPECT_THAT(ReadFileToString(path, 0),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(FileUtilTest, StreamOverTheLimitIsResourceExhausted) {
  // A pipe has no size: the limit is checked as the pieces come.
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const std::string bytes = Pattern(5000);
  ASSERT_EQ(write(fds[1], bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
  close(fds[1]);
  EXPECT_THAT(ReadOpenFileToString(fds[0], "pipe", 4999),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("limit of 4999 bytes")));
  close(fds[0]);

  ASSERT_EQ(pipe(fds), 0);
  ASSERT_EQ(write(fds[1], bytes.data(), bytes.size()),
            static_cast<ssize_t>(bytes.size()));
  close(fds[1]);
  absl::StatusOr<std::string> got = ReadOpenFileToString(fds[0], "pipe", 5000);
  close(fds[0]);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, bytes);
}

TEST_F(FileUtilTest, DirectoryIsInvalidArgument) {
  EXPECT_THAT(
      ReadFileToString(dir_.path()),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr(dir_.path()), HasSubstr("Is a directory"))));
}

TEST_F(FileUtilTest, UnreadableFileIsPermissionDenied) {
  if (geteuid() == 0) GTEST_SKIP() << "root reads files of any mode";
  const std::string path = Write("private", "secret");
  ASSERT_EQ(chmod(path.c_str(), 0), 0);
  EXPECT_THAT(ReadFileToString(path),
              StatusIs(absl::StatusCode::kPermissionDenied, HasSubstr(path)));
}

TEST_F(FileUtilTest, OpenFileIsReadFromItsOffset) {
  const std::string path = Write("f", "headerbody");
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(lseek(fd, 6, SEEK_SET), 6);
  absl::StatusOr<std::string> got = ReadOpenFileToString(fd, path, 4);
  close(fd);
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, "body");
}

TEST_F(FileUtilTest, NegativeLimitIsInvalidArgument) {
  const std::string path = Write("f", "x");
  EXPECT_THAT(ReadFileToString(path, -1),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("ReadFileToString"),
                             HasSubstr("max_bytes is -1"))));
}

}  // namespace
}  // namespace maxsimd
