#include "tests/fuzz/fuzz_support.h"

#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"

namespace maxsimd::fuzz {
namespace {

bool GoodName(absl::string_view name) {
  if (name.empty() || name.size() > 64 || name == "." || name == "..") {
    return false;
  }
  return std::all_of(name.begin(), name.end(), [](char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') ||
           (c >= '0' && c <= '9') || c == '.' || c == '_' || c == '-';
  });
}

uint32_t Le(const std::string& b, size_t at, int bytes) {
  uint32_t v = 0;
  for (int i = 0; i < bytes; ++i) {
    v |= static_cast<uint32_t>(static_cast<uint8_t>(b[at + i])) << (8 * i);
  }
  return v;
}

}  // namespace

void FixZipCrcs(std::string* zip) {
  const std::string& b = *zip;
  constexpr size_t kEnd = 22, kCentral = 46, kLocal = 30;
  if (b.size() < kEnd) return;
  size_t end = b.size() - kEnd;
  while (Le(b, end, 4) != 0x06054b50u) {
    if (end == 0) return;
    --end;
  }
  const uint32_t entries = Le(b, end + 10, 2);
  size_t c = Le(b, end + 16, 4);
  for (uint32_t i = 0; i < entries; ++i) {
    if (c > b.size() || b.size() - c < kCentral || Le(b, c, 4) != 0x02014b50u) {
      return;
    }
    const uint64_t size = Le(b, c + 20, 4);
    const uint64_t local = Le(b, c + 42, 4);
    const size_t next =
        c + kCentral + Le(b, c + 28, 2) + Le(b, c + 30, 2) + Le(b, c + 32, 2);
    if (local <= b.size() && b.size() - local >= kLocal) {
      const uint64_t data =
          local + kLocal + Le(b, local + 26, 2) + Le(b, local + 28, 2);
      if (data <= b.size() && size <= b.size() - data) {
        const uint32_t crc = static_cast<uint32_t>(
            crc32(0, reinterpret_cast<const Bytef*>(b.data() + data),
                  static_cast<uInt>(size)));
        for (int k = 0; k < 4; ++k) {
          (*zip)[c + 16 + k] = static_cast<char>((crc >> (8 * k)) & 0xff);
        }
      }
    }
    c = next;
  }
}

FileSet SplitFiles(absl::string_view input) {
  FileSet set;
  size_t at = input.find(kFileMarker);
  set.options = std::string(input.substr(0, at));
  while (at != absl::string_view::npos) {
    const size_t name_start = at + kFileMarker.size();
    const size_t next = input.find(kFileMarker, name_start);
    const absl::string_view piece = input.substr(
        name_start, next == absl::string_view::npos ? absl::string_view::npos
                                                    : next - name_start);
    const size_t newline = piece.find('\n');
    at = next;
    if (newline == absl::string_view::npos) continue;
    const absl::string_view name = piece.substr(0, newline);
    if (!GoodName(name)) continue;
    const std::string content(piece.substr(newline + 1));
    auto same = std::find_if(set.files.begin(), set.files.end(),
                             [&](const auto& f) { return f.first == name; });
    if (same != set.files.end()) {
      same->second = content;
    } else {
      set.files.emplace_back(std::string(name), content);
    }
  }
  return set;
}

std::string JoinFiles(const FileSet& set) {
  std::string out = set.options;
  for (const auto& [name, content] : set.files) {
    absl::StrAppend(&out, kFileMarker, name, "\n", content);
  }
  return out;
}

ScratchDir::ScratchDir() {
  // scripts/fuzz.sh names a directory it removes at the end, also after a
  // crash (which skips our destructor); /dev/shm keeps the thousands of
  // writes a second off the disk.
  const char* base = std::getenv("MAXSIMD_FUZZ_SCRATCH");
  if (base == nullptr && access("/dev/shm", W_OK) == 0) base = "/dev/shm";
  if (base == nullptr) base = std::getenv("TMPDIR");
  if (base == nullptr) base = "/tmp";
  std::string templ = absl::StrCat(base, "/maxsimd-fuzz-XXXXXX");
  if (mkdtemp(templ.data()) == nullptr) {
    std::perror("mkdtemp");
    std::abort();
  }
  path_ = templ;
}

ScratchDir::~ScratchDir() {
  Reset();
  rmdir(path_.c_str());
}

void ScratchDir::Reset() {
  for (const std::string& name : written_) {
    unlink(absl::StrCat(path_, "/", name).c_str());
  }
  written_.clear();
}

void ScratchDir::Write(const std::string& name, absl::string_view content) {
  const std::string path = absl::StrCat(path_, "/", name);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr ||
      std::fwrite(content.data(), 1, content.size(), f) != content.size() ||
      std::fclose(f) != 0) {
    std::perror(path.c_str());
    std::abort();
  }
  written_.push_back(name);
}

}  // namespace maxsimd::fuzz
