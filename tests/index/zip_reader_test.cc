// The stored-zip reader under torch.save files: round trips, an archive
// torch itself wrote, zip64 records, and corruption (truncation, CRC, bad
// offsets, compressed entries), each with the right status naming the file.
#include "index/zip_reader.h"

#include <cstdint>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/importers.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

using Entries = std::vector<std::pair<std::string, std::string>>;

const Entries& Sample() {
  static const Entries* entries = new Entries{
      {"archive/data.pkl", std::string("\x80\x02]q\0.", 6)},
      {"archive/data/0", std::string(100, '\x7f')},
      {"archive/empty", ""},
      {"archive/version", "3\n"},
  };
  return *entries;
}

void Put16(std::string* s, size_t at, uint16_t v) {
  (*s)[at] = static_cast<char>(v & 0xFF);
  (*s)[at + 1] = static_cast<char>(v >> 8);
}
void Put32(std::string* s, size_t at, uint32_t v) {
  Put16(s, at, static_cast<uint16_t>(v & 0xFFFF));
  Put16(s, at + 2, static_cast<uint16_t>(v >> 16));
}
void Append16(std::string* s, uint16_t v) {
  s->push_back(static_cast<char>(v & 0xFF));
  s->push_back(static_cast<char>(v >> 8));
}
void Append32(std::string* s, uint32_t v) {
  Append16(s, static_cast<uint16_t>(v & 0xFFFF));
  Append16(s, static_cast<uint16_t>(v >> 16));
}
void Append64(std::string* s, uint64_t v) {
  Append32(s, static_cast<uint32_t>(v));
  Append32(s, static_cast<uint32_t>(v >> 32));
}
uint32_t Get32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = (v << 8) | static_cast<uint8_t>(s[at + i]);
  return v;
}

// Rewrites a SerializeStoredZip archive into its zip64 form: every central
// entry's local offset moves into a zip64 extra field, and the end record
// is saturated and preceded by a zip64 end record and locator.
std::string ToZip64(const std::string& zip, size_t num_entries) {
  const size_t end = zip.size() - 22;
  const uint32_t cd_offset = Get32(zip, end + 16);
  std::string out = zip.substr(0, cd_offset);
  size_t at = cd_offset;
  for (size_t i = 0; i < num_entries; ++i) {
    const size_t name_len = static_cast<uint8_t>(zip[at + 28]) |
                            (static_cast<uint8_t>(zip[at + 29]) << 8);
    std::string entry = zip.substr(at, 46 + name_len);
    const uint32_t local = Get32(entry, 42);
    Put32(&entry, 42, 0xFFFFFFFFu);
    Put16(&entry, 30, 12);  // extra length
    Append16(&entry, 0x0001);
    Append16(&entry, 8);
    Append64(&entry, local);
    out += entry;
    at += 46 + name_len;
  }
  const uint64_t cd_size = out.size() - cd_offset;
  const uint64_t zip64_end = out.size();
  Append32(&out, 0x06064b50);
  Append64(&out, 44);
  Append16(&out, 45);
  Append16(&out, 45);
  Append32(&out, 0);
  Append32(&out, 0);
  Append64(&out, num_entries);
  Append64(&out, num_entries);
  Append64(&out, cd_size);
  Append64(&out, cd_offset);
  Append32(&out, 0x07064b50);
  Append32(&out, 0);
  Append64(&out, zip64_end);
  Append32(&out, 1);
  Append32(&out, 0x06054b50);
  Append16(&out, 0);
  Append16(&out, 0);
  Append16(&out, 0xFFFF);
  Append16(&out, 0xFFFF);
  Append32(&out, 0xFFFFFFFFu);
  Append32(&out, 0xFFFFFFFFu);
  Append16(&out, 0);
  return out;
}

void ExpectSample(const std::string& archive) {
  absl::StatusOr<std::vector<ZipEntry>> entries =
      ParseStoredZip(archive, "a.zip");
  ASSERT_THAT(entries, IsOk());
  ASSERT_EQ(entries->size(), Sample().size());
  for (size_t i = 0; i < entries->size(); ++i) {
    EXPECT_EQ((*entries)[i].name, Sample()[i].first);
    EXPECT_EQ((*entries)[i].data, Sample()[i].second);
  }
}

TEST(ZipReaderTest, RoundTripsWithAlignedData) {
  const std::string zip = SerializeStoredZip(Sample());
  ExpectSample(zip);
  const std::vector<ZipEntry> entries = ParseStoredZip(zip, "a.zip").value();
  for (const ZipEntry& e : entries) {
    EXPECT_EQ((e.data.data() - zip.data()) % 64, 0) << e.name;
  }
}

TEST(ZipReaderTest, ReadsZip64Records) {
  ExpectSample(ToZip64(SerializeStoredZip(Sample()), Sample().size()));
}

TEST(ZipReaderTest, ReadsAnArchiveTorchWrote) {
  // torch.save sets the data-descriptor flag and pads local headers with
  // an extra field; see tests/data/plaid/make_fixtures.py.
  const std::string path =
      absl::StrCat(MAXSIMD_PLAID_TESTDATA, "/colbert/centroids.pt");
  absl::StatusOr<std::string> bytes = ReadInputFile(path);
  ASSERT_THAT(bytes, IsOk());
  absl::StatusOr<std::vector<ZipEntry>> entries = ParseStoredZip(*bytes, path);
  ASSERT_THAT(entries, IsOk());
  std::vector<std::string> names;
  for (const ZipEntry& e : *entries) names.push_back(e.name);
  EXPECT_THAT(names,
              ::testing::IsSupersetOf({"centroids/data.pkl", "centroids/data/0",
                                       "centroids/version"}));
  for (const ZipEntry& e : *entries) {
    if (e.name == "centroids/data/0") {
      EXPECT_EQ(e.data.size(), 8u * 16 * 2);
    }
  }
}

TEST(ZipReaderTest, EveryTruncationIsDataLossNamingTheFile) {
  const std::string zip = SerializeStoredZip(Sample());
  for (size_t n = 0; n < zip.size(); ++n) {
    EXPECT_THAT(ParseStoredZip(zip.substr(0, n), "cut.pt"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut.pt")))
        << n;
  }
}

TEST(ZipReaderTest, CrcMismatchIsDataLoss) {
  std::string zip = SerializeStoredZip(Sample());
  const ZipEntry e = ParseStoredZip(zip, "a").value()[1];
  zip[e.data.data() - zip.data() + 5] ^= 1;
  EXPECT_THAT(ParseStoredZip(zip, "flip.pt"),
              StatusIs(absl::StatusCode::kDataLoss,
                       ::testing::AllOf(HasSubstr("flip.pt"),
                                        HasSubstr("archive/data/0"),
                                        HasSubstr("CRC"))));
}

TEST(ZipReaderTest, CompressedOrEncryptedEntriesAreInvalidArgument) {
  const std::string zip = SerializeStoredZip(Sample());
  const size_t cd = Get32(zip, zip.size() - 22 + 16);
  std::string compressed = zip;
  Put16(&compressed, cd + 10, 8);  // deflate
  EXPECT_THAT(ParseStoredZip(compressed, "c.pt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("compressed (method 8)")));
  std::string encrypted = zip;
  Put16(&encrypted, cd + 8, 1);
  EXPECT_THAT(
      ParseStoredZip(encrypted, "e.pt"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("encrypted")));
}

TEST(ZipReaderTest, BadOffsetsAreDataLoss) {
  const std::string zip = SerializeStoredZip(Sample());
  const size_t end = zip.size() - 22;
  const size_t cd = Get32(zip, end + 16);
  std::string s = zip;
  Put32(&s, end + 16, 0x7FFFFFF0);  // directory offset past the end
  EXPECT_THAT(ParseStoredZip(s, "o.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("o.pt")));
  s = zip;
  Put32(&s, cd + 42, 0xFFFFFF00);  // local header past the end
  EXPECT_THAT(
      ParseStoredZip(s, "o.pt"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no local header")));
  s = zip;
  Put32(&s, cd + 20, 0x7FFFFFF0);  // sizes past the end
  Put32(&s, cd + 24, 0x7FFFFFF0);
  EXPECT_THAT(ParseStoredZip(s, "o.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
  s = zip;
  Put16(&s, end + 10, 60000);  // more entries than the directory holds
  EXPECT_THAT(ParseStoredZip(s, "o.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("entries")));
  s = zip;
  Put16(&s, end + 10, 0xFFFF);  // saturated without zip64 records
  EXPECT_THAT(ParseStoredZip(s, "o.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("zip64")));
  EXPECT_THAT(ParseStoredZip("not a zip archive at all, no", "x.pt"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("no end of central directory")));
}

TEST(ZipReaderTest, DuplicateNamesAreDataLoss) {
  EXPECT_THAT(
      ParseStoredZip(SerializeStoredZip({{"a/x", "1"}, {"a/x", "2"}}), "d.pt"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("twice")));
}

TEST(ZipReaderTest, RandomMutationsNeverCrash) {
  const std::string zip = SerializeStoredZip(Sample());
  const std::string zip64 = ToZip64(zip, Sample().size());
  std::mt19937 rng(5);
  for (int i = 0; i < 3000; ++i) {
    std::string m = i % 2 == 0 ? zip : zip64;
    for (int e = 0; e < 3; ++e) m[rng() % m.size()] = static_cast<char>(rng());
    absl::StatusOr<std::vector<ZipEntry>> r = ParseStoredZip(m, "m.pt");
    if (r.ok()) {
      for (const ZipEntry& entry : *r) {
        ASSERT_GE(entry.data.data(), m.data());
        ASSERT_LE(entry.data.data() + entry.data.size(), m.data() + m.size());
      }
    } else {
      EXPECT_THAT(r.status().code(),
                  ::testing::AnyOf(absl::StatusCode::kDataLoss,
                                   absl::StatusCode::kInvalidArgument));
    }
  }
}

}  // namespace
}  // namespace maxsimd
