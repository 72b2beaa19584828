#include "index/zip_reader.h"

#include <zlib.h>

#include <algorithm>
#include <cstdint>
#include <set>

#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"

// The records read (APPNOTE.TXT 6.3; all integers little-endian):
//
//   local header    PK\3\4  ver flags method time date crc csize usize
//                           name_len extra_len | name | extra | data
//   central entry   PK\1\2  made ver flags method time date crc csize usize
//                           name_len extra_len comment_len disk iattr eattr
//                           local_offset | name | extra | comment
//   zip64 end       PK\6\6  size made ver disk cd_disk n_disk n cd_size
//                           cd_offset
//   zip64 locator   PK\6\7  disk zip64_end_offset disks
//   end             PK\5\6  disk cd_disk n_disk n cd_size cd_offset
//                           comment_len | comment
//
// Sizes and offsets of 0xFFFFFFFF (and counts of 0xFFFF) in the central
// entry or the end record defer to the zip64 extra field (id 1) or to the
// zip64 end record.

namespace maxsimd {
namespace {

constexpr uint32_t kLocalSig = 0x04034b50;
constexpr uint32_t kCentralSig = 0x02014b50;
constexpr uint32_t kEndSig = 0x06054b50;
constexpr uint32_t kZip64EndSig = 0x06064b50;
constexpr uint32_t kZip64LocatorSig = 0x07064b50;
constexpr size_t kLocalSize = 30;
constexpr size_t kCentralSize = 46;
constexpr size_t kEndSize = 22;
constexpr size_t kZip64EndSize = 56;
constexpr size_t kZip64LocatorSize = 20;
constexpr uint16_t kZip64ExtraId = 0x0001;
constexpr uint32_t kSaturated32 = 0xFFFFFFFFu;
constexpr size_t kAlign = 64;

uint16_t Get16(absl::string_view b, size_t at) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[at]) |
                               (static_cast<uint8_t>(b[at + 1]) << 8));
}
uint32_t Get32(absl::string_view b, size_t at) {
  return static_cast<uint32_t>(Get16(b, at)) |
         (static_cast<uint32_t>(Get16(b, at + 2)) << 16);
}
uint64_t Get64(absl::string_view b, size_t at) {
  return static_cast<uint64_t>(Get32(b, at)) |
         (static_cast<uint64_t>(Get32(b, at + 4)) << 32);
}

void Put16(uint16_t v, std::string* out) {
  out->push_back(static_cast<char>(v & 0xFF));
  out->push_back(static_cast<char>(v >> 8));
}
void Put32(uint32_t v, std::string* out) {
  Put16(static_cast<uint16_t>(v & 0xFFFF), out);
  Put16(static_cast<uint16_t>(v >> 16), out);
}

uint32_t Crc32(absl::string_view data) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!data.empty()) {
    const size_t n = std::min<size_t>(data.size(), size_t{1} << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(data.data()),
                static_cast<uInt>(n));
    data.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

class Reader {
 public:
  Reader(absl::string_view archive, absl::string_view name)
      : b_(archive), name_(name) {}

  absl::StatusOr<std::vector<ZipEntry>> Entries() {
    MAXSIMD_RETURN_IF_ERROR(FindDirectory());
    std::vector<ZipEntry> entries;
    std::set<std::string> names;
    size_t at = cd_offset_;
    const size_t cd_end = cd_offset_ + cd_size_;
    for (uint64_t i = 0; i < num_entries_; ++i) {
      ZipEntry entry;
      MAXSIMD_RETURN_IF_ERROR(Entry(&at, cd_end, &entry));
      if (!names.insert(entry.name).second) {
        return Corrupt(absl::StrCat("entry '", entry.name, "' appears twice"));
      }
      entries.push_back(std::move(entry));
    }
    if (at != cd_end) {
      return Corrupt(absl::StrCat("the central directory holds ", cd_end - at,
                                  " bytes after its ", num_entries_,
                                  " entries"));
    }
    return entries;
  }

 private:
  absl::Status Corrupt(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat("zip archive '", name_, "': ", what));
  }
  // Whether [at, at + n) lies inside the archive.
  bool Inside(uint64_t at, uint64_t n) const {
    return at <= b_.size() && n <= b_.size() - at;
  }

  absl::Status FindDirectory() {
    if (b_.size() < kEndSize) {
      return Corrupt(absl::StrCat("truncated: ", b_.size(),
                                  " bytes, shorter than an end record"));
    }
    // The end record is the last thing in the file, followed only by its
    // comment (at most 65535 bytes); search backwards for its signature.
    size_t end = b_.size() - kEndSize;
    const size_t lowest =
        b_.size() > kEndSize + 0xFFFF ? b_.size() - kEndSize - 0xFFFF : 0;
    while (true) {
      if (Get32(b_, end) == kEndSig &&
          end + kEndSize + Get16(b_, end + 20) == b_.size()) {
        break;
      }
      if (end == lowest) {
        return Corrupt(
            "no end of central directory record (not a zip archive, or "
            "truncated)");
      }
      --end;
    }
    if (Get16(b_, end + 4) != 0 || Get16(b_, end + 6) != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          "zip archive '", name_, "': multi-disk archives are not supported"));
    }
    num_entries_ = Get16(b_, end + 10);
    cd_size_ = Get32(b_, end + 12);
    cd_offset_ = Get32(b_, end + 16);
    if (num_entries_ == 0xFFFF || cd_size_ == kSaturated32 ||
        cd_offset_ == kSaturated32) {
      if (end < kZip64LocatorSize ||
          Get32(b_, end - kZip64LocatorSize) != kZip64LocatorSig) {
        return Corrupt("saturated end record without a zip64 locator");
      }
      const uint64_t z = Get64(b_, end - kZip64LocatorSize + 8);
      if (!Inside(z, kZip64EndSize) || Get32(b_, z) != kZip64EndSig) {
        return Corrupt("the zip64 locator points outside a zip64 end record");
      }
      num_entries_ = Get64(b_, z + 32);
      cd_size_ = Get64(b_, z + 40);
      cd_offset_ = Get64(b_, z + 48);
    }
    if (!Inside(cd_offset_, cd_size_)) {
      return Corrupt(absl::StrCat("the central directory [", cd_offset_, ", +",
                                  cd_size_, ") lies outside the ", b_.size(),
                                  " bytes of the file (truncated?)"));
    }
    if (num_entries_ > cd_size_ / kCentralSize) {
      return Corrupt(absl::StrCat(num_entries_, " entries cannot fit in a ",
                                  cd_size_, "-byte central directory"));
    }
    return absl::OkStatus();
  }

  absl::Status Entry(size_t* at, size_t cd_end, ZipEntry* entry) {
    const size_t c = *at;
    if (cd_end - c < kCentralSize || Get32(b_, c) != kCentralSig) {
      return Corrupt(absl::StrCat("bad central directory entry at byte ", c));
    }
    const uint16_t flags = Get16(b_, c + 8);
    const uint16_t method = Get16(b_, c + 10);
    const uint32_t crc = Get32(b_, c + 16);
    uint64_t csize = Get32(b_, c + 20);
    uint64_t usize = Get32(b_, c + 24);
    const size_t name_len = Get16(b_, c + 28);
    const size_t extra_len = Get16(b_, c + 30);
    const size_t comment_len = Get16(b_, c + 32);
    uint64_t local = Get32(b_, c + 42);
    if (cd_end - c - kCentralSize < name_len + extra_len + comment_len) {
      return Corrupt(absl::StrCat("central directory entry at byte ", c,
                                  " overruns the directory"));
    }
    entry->name = std::string(b_.substr(c + kCentralSize, name_len));
    // The zip64 extra field holds, in this order, the fields saturated in
    // the fixed part.
    absl::string_view extra = b_.substr(c + kCentralSize + name_len, extra_len);
    while (extra.size() >= 4) {
      const uint16_t id = Get16(extra, 0);
      const size_t len = Get16(extra, 2);
      if (extra.size() - 4 < len) break;
      if (id == kZip64ExtraId) {
        absl::string_view z = extra.substr(4, len);
        for (uint64_t* field : {&usize, &csize, &local}) {
          if (*field != kSaturated32) continue;
          if (z.size() < 8) return Corrupt("short zip64 extra field");
          *field = Get64(z, 0);
          z.remove_prefix(8);
        }
      }
      extra.remove_prefix(4 + len);
    }
    *at = c + kCentralSize + name_len + extra_len + comment_len;

    const std::string what = absl::StrCat("entry '", entry->name, "'");
    if (flags & 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("zip archive '", name_, "': ", what, " is encrypted"));
    }
    if (method != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("zip archive '", name_, "': ", what,
                       " is compressed (method ", method,
                       "); only stored entries are supported, as torch.save "
                       "writes them"));
    }
    if (csize != usize) {
      return Corrupt(absl::StrCat(what, " is stored but its sizes differ (",
                                  csize, " vs ", usize, ")"));
    }
    if (!Inside(local, kLocalSize) || Get32(b_, local) != kLocalSig) {
      return Corrupt(absl::StrCat(what, ": no local header at byte ", local));
    }
    const size_t local_name = Get16(b_, local + 26);
    const size_t local_extra = Get16(b_, local + 28);
    const uint64_t data = local + kLocalSize + local_name + local_extra;
    if (!Inside(local + kLocalSize, local_name + local_extra) ||
        b_.substr(local + kLocalSize, local_name) != entry->name) {
      return Corrupt(absl::StrCat(
          what, ": the local header does not match the central directory"));
    }
    if (!Inside(data, csize)) {
      return Corrupt(absl::StrCat(what, ": its ", csize, " bytes at byte ",
                                  data, " run past the end of the ", b_.size(),
                                  "-byte file (truncated?)"));
    }
    entry->data = b_.substr(data, csize);
    const uint32_t actual = Crc32(entry->data);
    if (actual != crc) {
      return Corrupt(absl::StrCat(what, ": CRC-32 mismatch (stored ", crc,
                                  ", computed ", actual, ")"));
    }
    return absl::OkStatus();
  }

  absl::string_view b_;
  absl::string_view name_;
  uint64_t num_entries_ = 0;
  uint64_t cd_size_ = 0;
  uint64_t cd_offset_ = 0;
};

}  // namespace

absl::StatusOr<std::vector<ZipEntry>> ParseStoredZip(absl::string_view archive,
                                                     absl::string_view name) {
  return Reader(archive, name).Entries();
}

std::string SerializeStoredZip(
    const std::vector<std::pair<std::string, std::string>>& entries) {
  std::string out;
  std::string directory;
  for (const auto& [name, data] : entries) {
    const uint32_t offset = static_cast<uint32_t>(out.size());
    const uint32_t crc = Crc32(data);
    // Pad the local header with an extra field (id "FB", like torch) so
    // that the data starts on a 64-byte boundary.
    size_t pad =
        (kAlign - (out.size() + kLocalSize + name.size()) % kAlign) % kAlign;
    if (pad > 0 && pad < 4) pad += kAlign;
    Put32(kLocalSig, &out);
    Put16(20, &out);  // version needed
    Put16(0, &out);   // flags
    Put16(0, &out);   // stored
    Put16(0, &out);   // time
    Put16(0, &out);   // date
    Put32(crc, &out);
    Put32(static_cast<uint32_t>(data.size()), &out);
    Put32(static_cast<uint32_t>(data.size()), &out);
    Put16(static_cast<uint16_t>(name.size()), &out);
    Put16(static_cast<uint16_t>(pad), &out);
    out += name;
    if (pad > 0) {
      Put16(0x4246, &out);
      Put16(static_cast<uint16_t>(pad - 4), &out);
      out.append(pad - 4, 'Z');
    }
    out += data;

    Put32(kCentralSig, &directory);
    Put16(20, &directory);  // made by
    Put16(20, &directory);  // version needed
    Put16(0, &directory);
    Put16(0, &directory);
    Put16(0, &directory);
    Put16(0, &directory);
    Put32(crc, &directory);
    Put32(static_cast<uint32_t>(data.size()), &directory);
    Put32(static_cast<uint32_t>(data.size()), &directory);
    Put16(static_cast<uint16_t>(name.size()), &directory);
    Put16(0, &directory);  // extra
    Put16(0, &directory);  // comment
    Put16(0, &directory);  // disk
    Put16(0, &directory);  // internal attributes
    Put32(0, &directory);  // external attributes
    Put32(offset, &directory);
    directory += name;
  }
  const uint32_t cd_offset = static_cast<uint32_t>(out.size());
  out += directory;
  Put32(kEndSig, &out);
  Put16(0, &out);
  Put16(0, &out);
  Put16(static_cast<uint16_t>(entries.size()), &out);
  Put16(static_cast<uint16_t>(entries.size()), &out);
  Put32(static_cast<uint32_t>(directory.size()), &out);
  Put32(cd_offset, &out);
  Put16(0, &out);
  return out;
}

}  // namespace maxsimd
