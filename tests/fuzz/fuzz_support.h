// Helpers shared by the fuzz targets of tests/fuzz.
//
// Readers of a directory (a PLAID index, a corpus directory) are fuzzed
// from one input holding several files. The container is text-delimited
// so that libFuzzer's mutations (which insert, erase and copy byte runs)
// keep it mostly intact:
//
//   <options>@@FILE <name>\n<content>@@FILE <name>\n<content>...
//
// `options` (the bytes before the first marker) is for the target to
// interpret; a content runs to the next marker or to the end. Names are
// kept only if they are 1 to 64 characters of [A-Za-z0-9._-] and not "."
// or "..", so that no input can write outside the scratch directory.
//
// Thread-safety: none; each fuzzer process runs its inputs one at a time.
#ifndef MAXSIMD_TESTS_FUZZ_FUZZ_SUPPORT_H_
#define MAXSIMD_TESTS_FUZZ_FUZZ_SUPPORT_H_

#include <cstdio>
#include <cstdlib>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"

// An invariant of a reader's result: on failure, names it and aborts, which
// libFuzzer reports as a crash.
#define MAXSIMD_FUZZ_CHECK(cond)                                            \
  do {                                                                      \
    if (!(cond)) {                                                          \
      std::fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, \
                   #cond);                                                  \
      std::abort();                                                         \
    }                                                                       \
  } while (0)

namespace maxsimd::fuzz {

inline constexpr absl::string_view kFileMarker = "@@FILE ";

struct FileSet {
  std::string options;
  std::vector<std::pair<std::string, std::string>> files;  // name, content
};

// Splits an input as above; entries with a bad name are dropped, and of a
// repeated name the last one is kept.
FileSet SplitFiles(absl::string_view input);
// The inverse, for the seed corpus.
std::string JoinFiles(const FileSet& set);

// Rewrites the CRC-32 of every entry of a zip archive that its central
// directory lets us find (zip64 fields are left alone), so that mutated
// entry data get past the archive's checks to the entry's reader (a
// torch.save pickle). Anything it cannot follow is left as it is.
void FixZipCrcs(std::string* zip);

// A directory private to this process, removed at exit, made under
// $MAXSIMD_FUZZ_SCRATCH, else /dev/shm, else $TMPDIR or /tmp. Files are written
// with plain stdio (no fsync): a fuzzer writes thousands per second.
class ScratchDir {
 public:
  ScratchDir();
  ~ScratchDir();
  ScratchDir(const ScratchDir&) = delete;
  ScratchDir& operator=(const ScratchDir&) = delete;

  const std::string& path() const { return path_; }
  // Removes every file written since the last Reset.
  void Reset();
  // Writes <path>/<name>; aborts on an I/O error (the machine's fault, not
  // the input's).
  void Write(const std::string& name, absl::string_view content);

 private:
  std::string path_;
  std::vector<std::string> written_;
};

}  // namespace maxsimd::fuzz

#endif  // MAXSIMD_TESTS_FUZZ_FUZZ_SUPPORT_H_
