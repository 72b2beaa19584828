// Durable storage (index/FORMAT.md): round trips of the file kinds,
// damaged files (flipped bytes, truncation, wrong magic, kind or version,
// trailing bytes, missing files) reported as DATA_LOSS naming the file and
// the reason, files of another corpus refused by their corpus id, and
// corpora that survive a reopen through CorpusStore, Corpus and
// CorpusRegistry, including a failed write that must change nothing; the
// registry's limit on corpora, its alias files (ALIASES and its backup
// ALIASES.prev, damaged), and the removal of what a crash leaves.
#include "index/storage.h"

#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "index/corpus.h"
#include "index/registry.h"
#include "kernels/base/fault_injection.h"
#include "kernels/element.h"
#include "kernels/maxsim_cpu.h"
#include "tests/support/fault_skip.h"
#include "tests/support/status_matchers.h"
#include "tests/support/temp_dir.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

using ::maxsimd::testing::TempDir;

bool Exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0;
}

// The manifest of the corpus directory `dir`.
Manifest ManifestOf(const std::string& dir) {
  const std::string path = dir + "/MANIFEST";
  absl::StatusOr<std::string> bytes = ReadWholeFile(path);
  EXPECT_THAT(bytes, IsOk());
  absl::StatusOr<Manifest> m = DecodeManifest(bytes.value_or(""), path);
  EXPECT_THAT(m, IsOk());
  return m.value_or(Manifest{});
}

std::vector<std::string> SortedFiles(const std::string& dir) {
  std::vector<std::string> names =
      ListFiles(dir).value_or(std::vector<std::string>{});
  std::sort(names.begin(), names.end());
  return names;
}

// Copies the file `from` over `to`, byte for byte.
void CopyFile(const std::string& from, const std::string& to) {
  absl::StatusOr<std::string> bytes = ReadWholeFile(from);
  ASSERT_THAT(bytes, IsOk());
  ASSERT_THAT(WriteFileDurably(to, *bytes), IsOk());
}

class StorageTest : public ::testing::Test {
 protected:
  StorageTest() : backend_(CpuBackend::Create({}).value()) {
    config_.name = "c";
    config_.dim = 4;
  }

  // `n` documents prefix0.. of 1 + i % 3 tokens, distinct values.
  SegmentData Docs(const std::string& prefix, int n, float seed = 0.f) {
    DocumentBuilder b(config_, limits_);
    std::vector<std::string> ids;
    std::vector<int32_t> counts;
    std::vector<float> tokens;
    for (int i = 0; i < n; ++i) {
      ids.push_back(prefix + std::to_string(i));
      counts.push_back(1 + i % 3);
      for (int t = 0; t < counts.back() * config_.dim; ++t) {
        tokens.push_back(0.125f * static_cast<float>((i * 7 + t) % 11) + seed);
      }
    }
    EXPECT_THAT(b.Add(ids, counts, tokens.data(),
                      static_cast<int64_t>(tokens.size()) / config_.dim,
                      DType::kFloat32, "m"),
                IsOk());
    return b.Take();
  }

  // A corpus persisted in `dir` (which must not exist) holding Docs("a", 3).
  std::shared_ptr<Corpus> PersistedCorpus(const std::string& dir) {
    auto store = CorpusStore::Create(dir, config_);
    EXPECT_THAT(store, IsOk());
    auto corpus =
        Corpus::Create(config_, limits_, backend_.get(), *std::move(store));
    EXPECT_THAT(corpus, IsOk());
    EXPECT_THAT((*corpus)->Append(Docs("a", 3)), IsOk());
    return *corpus;
  }

  // Every live document of a snapshot as (id, its tokens' bytes followed
  // by its int8 scales' bytes), in internal order: what a reopen must
  // reproduce exactly.
  static std::vector<std::pair<std::string, std::string>> Contents(
      const CorpusSnapshot& s) {
    std::vector<std::pair<std::string, std::string>> out;
    for (size_t g = 0; g < s.segments().size(); ++g) {
      const Segment& seg = *s.segments()[g];
      const SegmentView v = seg.HostView(nullptr);
      const size_t row = static_cast<size_t>(v.dim) * DTypeSize(v.dtype);
      for (int64_t d = 0; d < seg.num_docs(); ++d) {
        if (s.tombstones(g) != nullptr && s.tombstones(g)->Contains(d)) {
          continue;
        }
        const char* base = static_cast<const char*>(v.tokens);
        const int64_t rows = v.cu_seqlens[d + 1] - v.cu_seqlens[d];
        std::string bytes(base + v.cu_seqlens[d] * row, rows * row);
        if (v.scales != nullptr) {
          bytes.append(
              reinterpret_cast<const char*>(v.scales + v.cu_seqlens[d]),
              rows * sizeof(float));
        }
        out.emplace_back(seg.id(d), std::move(bytes));
      }
    }
    return out;
  }

  std::unique_ptr<CpuBackend> backend_;
  CorpusConfig config_;
  CorpusLimits limits_;
};

// ---------------------------------------------------------------------------
// Files

TEST_F(StorageTest, SegmentFileRoundTrips) {
  for (DType dtype : {DType::kFloat16, DType::kBFloat16}) {
    config_.storage_dtype = dtype;
    const SegmentData in = Docs("d", 7);
    absl::StatusOr<SegmentData> out =
        DecodeSegmentFile(EncodeSegmentFile(in), "seg-1.msd");
    ASSERT_THAT(out, IsOk());
    EXPECT_EQ(out->dim, in.dim);
    EXPECT_EQ(out->dtype, dtype);
    EXPECT_EQ(out->ids, in.ids);
    EXPECT_EQ(out->cu_seqlens, in.cu_seqlens);
    EXPECT_EQ(out->tokens, in.tokens);
  }
}

// The file CRC is what FORMAT.md says (zlib's crc32 of every byte before
// it), also for a file large enough to be hashed in pieces on several
// threads.
TEST_F(StorageTest, FileCrcCoversEveryByteBeforeItAtAnySize) {
  SegmentData big;
  big.dim = 64;
  big.dtype = DType::kFloat16;
  big.ids = {"only"};
  big.cu_seqlens = {0, 700000};  // 700k x 64 x 2 bytes: ~85 MB
  big.tokens.resize(size_t{700000} * 64 * 2);
  for (size_t i = 0; i < big.tokens.size(); ++i) {
    big.tokens[i] = static_cast<char>((i * 2654435761u) >> 24);
  }
  for (const SegmentData* data : {&big}) {
    const std::string file = EncodeSegmentFile(*data);
    uint32_t stored;
    std::memcpy(&stored, file.data() + file.size() - 4, 4);
    const uint32_t want = static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(file.data()),
              static_cast<uInt>(file.size() - 4)));
    EXPECT_EQ(stored, want);
    absl::StatusOr<SegmentData> back = DecodeSegmentFile(file, "big");
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(back->tokens, data->tokens);
    std::string bad = file;
    bad[file.size() / 3] ^= 1;  // inside the tokens
    EXPECT_THAT(DecodeSegmentFile(bad, "big"),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("checksum mismatch in block 'toks'")));
  }
  const std::string small = EncodeSegmentFile(Docs("d", 3));
  uint32_t stored;
  std::memcpy(&stored, small.data() + small.size() - 4, 4);
  EXPECT_EQ(stored, static_cast<uint32_t>(
                        crc32(0, reinterpret_cast<const Bytef*>(small.data()),
                              static_cast<uInt>(small.size() - 4))));
}

TEST_F(StorageTest, TombstoneFileAndManifestRoundTrip) {
  const std::vector<uint32_t> bits = {0x80000001u, 0x5u};
  absl::StatusOr<std::vector<uint32_t>> got =
      DecodeTombstoneFile(EncodeTombstoneFile(35, bits), 35, "tomb-2.msd");
  ASSERT_THAT(got, IsOk());
  EXPECT_EQ(*got, bits);

  Manifest m;
  m.config = config_;
  m.config.normalize = true;
  m.config.storage_dtype = DType::kBFloat16;
  m.next_file = 42;
  m.segments = {{"seg-3.msd", "", 0, 10, 0},
                {"seg-5.msd", "tomb-9.msd", 10, 4, 2}};
  absl::StatusOr<Manifest> back = DecodeManifest(EncodeManifest(m), "MANIFEST");
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(back->config.name, "c");
  EXPECT_EQ(back->config.dim, 4);
  EXPECT_TRUE(back->config.normalize);
  EXPECT_EQ(back->config.storage_dtype, DType::kBFloat16);
  EXPECT_EQ(back->next_file, 42u);
  ASSERT_EQ(back->segments.size(), 2u);
  EXPECT_EQ(back->segments[1].file, "seg-5.msd");
  EXPECT_EQ(back->segments[1].tombstones, "tomb-9.msd");
  EXPECT_EQ(back->segments[1].base_index, 10);
  EXPECT_EQ(back->segments[1].num_docs, 4);
  EXPECT_EQ(back->segments[1].shard, 2);
}

// A pooling corpus's manifest carries its pool_factor after the layout's
// fields of `conf`; any other manifest is byte for byte what it was, and a
// factor there outside [2, 1024] is DATA_LOSS.
TEST_F(StorageTest, ManifestCarriesThePoolFactorOnlyWhenPooling) {
  Manifest m;
  m.config = config_;
  m.next_file = 3;
  const std::string plain = EncodeManifest(m);
  for (Layout layout : {Layout::kDense, Layout::kInt8, Layout::kPlaid}) {
    m.config.layout = layout;
    m.config.storage_dtype = layout == Layout::kDense  ? DType::kFloat16
                             : layout == Layout::kInt8 ? DType::kInt8
                                                       : PlaidDType(2);
    m.config.pool_factor = 1;
    const std::string unpooled = EncodeManifest(m);
    m.config.pool_factor = 3;
    const std::string pooled = EncodeManifest(m);
    EXPECT_EQ(pooled.size(), unpooled.size() + 4);
    absl::StatusOr<Manifest> back = DecodeManifest(pooled, "MANIFEST");
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(back->config.pool_factor, 3);
    EXPECT_EQ(back->config.layout, layout);
    back = DecodeManifest(unpooled, "MANIFEST");
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(back->config.pool_factor, 1);
    for (int32_t bad : {0, -2, 1025}) {  // written as given, refused read
      m.config.pool_factor = bad;
      EXPECT_THAT(DecodeManifest(EncodeManifest(m), "MANIFEST"),
                  StatusIs(absl::StatusCode::kDataLoss,
                           ::testing::AllOf(HasSubstr("'conf'"),
                                            HasSubstr("pool_factor " +
                                                      std::to_string(bad)))));
    }
  }
  m.config = config_;
  m.config.pool_factor = 1;
  EXPECT_EQ(EncodeManifest(m), plain);
}

TEST_F(StorageTest, EveryFlippedByteIsDataLossNamingTheFile) {
  const std::string good = EncodeSegmentFile(Docs("d", 3));
  // Every byte of the file: a flip anywhere must be caught (by a magic,
  // kind, version or tag check, a block CRC or the file CRC).
  for (size_t at = 0; at < good.size(); ++at) {
    std::string bad = good;
    bad[at] = static_cast<char>(bad[at] ^ 0x10);
    EXPECT_THAT(DecodeSegmentFile(bad, "seg-7.msd"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("seg-7.msd")))
        << "byte " << at;
  }
  // A flip inside the token payload is a block checksum mismatch.
  std::string bad = good;
  bad[good.size() - 20] ^= 1;
  EXPECT_THAT(DecodeSegmentFile(bad, "seg-7.msd"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("checksum mismatch in block 'toks'")));
}

TEST_F(StorageTest, TruncationAtAnyLengthIsDataLoss) {
  const std::string good = EncodeSegmentFile(Docs("d", 3));
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_THAT(DecodeSegmentFile(good.substr(0, len), "seg-1.msd"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("seg-1.msd")))
        << "length " << len;
  }
  EXPECT_THAT(DecodeSegmentFile(good.substr(0, good.size() / 2), "seg-1.msd"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated")));
}

TEST_F(StorageTest, WrongMagicKindVersionAndTrailingBytesAreNamed) {
  const std::string good = EncodeSegmentFile(Docs("d", 2));
  std::string magic = good;
  magic[0] = 'X';
  EXPECT_THAT(DecodeSegmentFile(magic, "f"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad magic")));
  std::string version = good;
  version[12] = 3;  // the u32 after the magic and the kind
  EXPECT_THAT(DecodeSegmentFile(version, "f"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("format version 3 is not supported")));
  EXPECT_THAT(DecodeManifest(good, "MANIFEST"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("kind 1, expected kind 3")));
  EXPECT_THAT(DecodeSegmentFile(good + "x", "f"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("1 bytes follow the end")));
  EXPECT_THAT(DecodeTombstoneFile(EncodeTombstoneFile(33, {0, 1}), 40, "t"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("is for 33 documents; the segment has 40")));
}

TEST_F(StorageTest, CorpusIdsAreVersion2FilesWhoseChecksumsCoverTheId) {
  const std::string id = NewCorpusId();
  ASSERT_EQ(id.size(), 32u);
  EXPECT_EQ(id.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(NewCorpusId(), id);
  auto version = [](const std::string& file) {
    uint32_t v = 0;
    std::memcpy(&v, file.data() + 12, 4);
    return v;
  };
  const SegmentData docs = Docs("d", 3);
  const std::string seg = EncodeSegmentFile(docs, id);
  EXPECT_EQ(version(seg), 2u);
  EXPECT_EQ(version(EncodeSegmentFile(docs)), 1u);
  std::string got = "x";
  absl::StatusOr<SegmentData> back = DecodeSegmentFile(seg, "seg-1.msd", &got);
  ASSERT_THAT(back, IsOk());
  EXPECT_EQ(got, id);
  EXPECT_EQ(back->ids, docs.ids);
  EXPECT_EQ(back->tokens, docs.tokens);
  ASSERT_THAT(DecodeSegmentFile(EncodeSegmentFile(docs), "seg-1.msd", &got),
              IsOk());
  EXPECT_EQ(got, "");
  // The id's bytes (after the header and the block's tag and length) are
  // under the block CRC.
  std::string flipped = seg;
  flipped[16 + 12] ^= 1;
  EXPECT_THAT(DecodeSegmentFile(flipped, "seg-1.msd"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("checksum mismatch in block 'corp'")));

  ASSERT_THAT(DecodeTombstoneFile(EncodeTombstoneFile(3, {2u}, id), 3,
                                  "tomb-2.msd", &got),
              IsOk());
  EXPECT_EQ(got, id);
  PlaidCodec codec;
  codec.dim = 8;
  codec.nbits = 1;
  codec.num_centroids = 2;
  codec.centroids.assign(16, 0.5f);
  codec.bucket_weights = {-0.1f, 0.1f};
  codec.bucket_cutoffs = {0.f};
  ASSERT_THAT(DecodeCodecFile(EncodeCodecFile(codec, id), "codec-3.msd", &got),
              IsOk());
  EXPECT_EQ(got, id);

  Manifest m;
  m.config = config_;
  m.next_file = 9;
  m.corpus_id = id;
  m.legacy_below = 4;
  const std::string manifest = EncodeManifest(m);
  EXPECT_EQ(version(manifest), 2u);
  absl::StatusOr<Manifest> mback = DecodeManifest(manifest, "MANIFEST");
  ASSERT_THAT(mback, IsOk());
  EXPECT_EQ(mback->corpus_id, id);
  EXPECT_EQ(mback->legacy_below, 4u);
  m.legacy_below = 10;  // past the next file number
  EXPECT_THAT(DecodeManifest(EncodeManifest(m), "MANIFEST"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("'lgcy'")));
  // The alias file belongs to no corpus: it has no version 2.
  std::string aliases = EncodeAliases({{"a", "c"}});
  EXPECT_EQ(version(aliases), 1u);
  aliases[12] = 2;
  EXPECT_THAT(DecodeAliases(aliases, "ALIASES"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("format version 2 is not supported")));
}

// A file of FORMAT.md `kind` holding these (tag, payload) blocks, with valid
// CRCs: for payloads that no encoder writes.
std::string FramedFile(
    uint32_t kind,
    const std::vector<std::pair<std::string, std::string>>& blocks) {
  auto crc = [](absl::string_view b) {
    return static_cast<uint32_t>(crc32(0,
                                       reinterpret_cast<const Bytef*>(b.data()),
                                       static_cast<uInt>(b.size())));
  };
  std::string f("MAXSIMD\0", 8);
  auto put = [&f](auto v) {
    f.append(reinterpret_cast<const char*>(&v), sizeof(v));
  };
  put(kind);
  put(uint32_t{1});
  for (const auto& [tag, payload] : blocks) {
    const size_t start = f.size();
    f += tag;
    put(static_cast<uint64_t>(payload.size()));
    f += payload;
    put(crc(absl::string_view(f).substr(start)));
  }
  put(0xffffffffu);
  put(crc(f));
  return f;
}

template <typename... T>
std::string Packed(T... v) {
  std::string out;
  (out.append(reinterpret_cast<const char*>(&v), sizeof(v)), ...);
  return out;
}

// Found by tests/fuzz (storage): counts in 'meta' so large that count x
// element size wraps to the size of the block that follows. They must be
// DATA_LOSS, not an allocation of 2^61 offsets or a segment whose offsets
// run far past its (empty) tokens.
TEST_F(StorageTest, SegmentCountsThatWrapABlockSizeAreDataLoss) {
  const std::string huge_docs = FramedFile(
      1, {{"meta",
           Packed(int32_t{4}, uint32_t{1}, (int64_t{1} << 61) - 1, int64_t{0})},
          {"offs", ""},
          {"ids ", ""},
          {"toks", ""}});
  EXPECT_THAT(DecodeSegmentFile(huge_docs, "seg-1.msd"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("block 'offs' has 0 bytes")));
  // 2^62 float16 tokens of dim 4: 2^65 bytes, 0 modulo 2^64.
  const int64_t tokens = int64_t{1} << 62;
  const std::string huge_tokens = FramedFile(
      1, {{"meta", Packed(int32_t{4}, uint32_t{1}, int64_t{1}, tokens)},
          {"offs", Packed(int64_t{0}, tokens)},
          {"ids ", Packed(uint32_t{1}) + "a"},
          {"toks", ""}});
  EXPECT_THAT(DecodeSegmentFile(huge_tokens, "seg-1.msd"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("block 'toks' has 0 bytes")));
}

// Found by tests/fuzz (storage): a segment entry whose first index plus
// documents overflows int64.
TEST_F(StorageTest, ManifestSegmentRangesThatOverflowAreDataLoss) {
  Manifest m;
  m.config = config_;
  m.segments = {
      {"seg-1.msd", "", std::numeric_limits<int64_t>::max() - 5, 10, 0}};
  EXPECT_THAT(DecodeManifest(EncodeManifest(m), "MANIFEST"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("bad entry for segment 0")));
}

// ---------------------------------------------------------------------------
// CorpusStore and Corpus

TEST_F(StorageTest, CorpusSurvivesReopenWithAppendsAndDeletes) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/c";
  std::vector<std::pair<std::string, std::string>> before;
  {
    auto store = CorpusStore::Create(dir, config_);
    ASSERT_THAT(store, IsOk());
    auto corpus =
        Corpus::Create(config_, limits_, backend_.get(), *std::move(store));
    ASSERT_THAT(corpus, IsOk());
    ASSERT_THAT((*corpus)->Append(Docs("a", 5)), IsOk());
    ASSERT_THAT((*corpus)->Append(Docs("b", 4, 1.f)), IsOk());
    ASSERT_THAT((*corpus)->Delete({"a1", "b3"}, false), IsOk());
    ASSERT_THAT((*corpus)->Delete({"a2"}, false), IsOk());
    before = Contents(*(*corpus)->Snapshot());
    ASSERT_EQ(before.size(), 6u);
  }
  StoredCorpus contents;
  auto store = CorpusStore::Open(dir, &contents);
  ASSERT_THAT(store, IsOk());
  EXPECT_EQ(contents.manifest.config.name, "c");
  ASSERT_EQ(contents.manifest.segments.size(), 2u);
  auto corpus = Corpus::Restore(limits_, backend_.get(), *std::move(store),
                                std::move(contents));
  ASSERT_THAT(corpus, IsOk());
  auto snap = (*corpus)->Snapshot();
  EXPECT_EQ(Contents(*snap), before);
  EXPECT_FALSE(snap->Find("a1").has_value());
  EXPECT_TRUE(snap->Find("a0").has_value());
  EXPECT_EQ(snap->next_index(), 9);
  // Only the manifest and the files it names are left: the first delete's
  // tombstone file was superseded by the second's.
  int files = 0;
  for (const char* f : {"MANIFEST", "seg-1.msd", "seg-2.msd", "tomb-3.msd",
                        "tomb-4.msd", "tomb-5.msd"}) {
    files += Exists(dir + "/" + f) ? 1 : 0;
  }
  EXPECT_EQ(files, 5);  // tomb-3 (a1's first set) is gone
  EXPECT_FALSE(Exists(dir + "/tomb-3.msd"));
  // Writes continue after the reopen, with fresh file numbers.
  ASSERT_THAT((*corpus)->Append(Docs("c", 2)), IsOk());
  EXPECT_TRUE(Exists(dir + "/seg-6.msd"));
}

TEST_F(StorageTest, OpenRemovesGarbageAndReportsMissingOrDamagedFiles) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/c";
  PersistedCorpus(dir);
  // Left by a crash between a file write and its commit.
  ASSERT_THAT(WriteFileDurably(dir + "/seg-9.msd", "partial"), IsOk());
  ASSERT_THAT(WriteFileDurably(dir + "/MANIFEST.tmp", "partial"), IsOk());
  StoredCorpus contents;
  ASSERT_THAT(CorpusStore::Open(dir, &contents), IsOk());
  EXPECT_FALSE(Exists(dir + "/seg-9.msd"));
  EXPECT_FALSE(Exists(dir + "/MANIFEST.tmp"));

  // A flipped byte in the segment file.
  std::string seg = ReadWholeFile(dir + "/seg-1.msd").value();
  seg[seg.size() / 2] ^= 4;
  ASSERT_THAT(WriteFileDurably(dir + "/seg-1.msd", seg), IsOk());
  EXPECT_THAT(CorpusStore::Open(dir, &contents),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("seg-1.msd")));
  // The segment file gone.
  ASSERT_EQ(unlink((dir + "/seg-1.msd").c_str()), 0);
  EXPECT_THAT(
      CorpusStore::Open(dir, &contents),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("missing segment file")));
  // The manifest truncated.
  std::string manifest = ReadWholeFile(dir + "/MANIFEST").value();
  ASSERT_THAT(WriteFileDurably(dir + "/MANIFEST",
                               manifest.substr(0, manifest.size() - 3)),
              IsOk());
  EXPECT_THAT(CorpusStore::Open(dir, &contents),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("MANIFEST")));
}

TEST_F(StorageTest, FailedWriteChangesNothingInMemoryOrOnDisk) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/c";
  std::shared_ptr<Corpus> corpus = PersistedCorpus(dir);
  const auto before = Contents(*corpus->Snapshot());
  // The next file number is 2: a directory of that name makes its write
  // fail (whatever the user's permissions).
  ASSERT_EQ(mkdir((dir + "/seg-2.msd").c_str(), 0755), 0);
  EXPECT_FALSE(corpus->Append(Docs("b", 2)).ok());
  EXPECT_EQ(Contents(*corpus->Snapshot()), before);
  ASSERT_EQ(rmdir((dir + "/seg-2.msd").c_str()), 0);
  StoredCorpus contents;
  auto store = CorpusStore::Open(dir, &contents);
  ASSERT_THAT(store, IsOk());
  auto reopened = Corpus::Restore(limits_, backend_.get(), *std::move(store),
                                  std::move(contents));
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Contents(*(*reopened)->Snapshot()), before);
}

// ---------------------------------------------------------------------------
// CorpusRegistry

TEST_F(StorageTest, RegistryReloadsCorporaAndServesDamagedOnesAsDataLoss) {
  TempDir tmp;
  std::vector<std::pair<std::string, std::string>> kept;
  {
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    ASSERT_THAT(r.LoadAll(), IsOk());
    for (const char* name : {"keep", "broken", "dropped"}) {
      config_.name = name;
      auto c = r.Create(config_);
      ASSERT_THAT(c, IsOk());
      ASSERT_THAT((*c)->Append(Docs(name, 4)), IsOk());
    }
    kept = Contents(*r.Get("keep").value()->Snapshot());
    config_.name = "keep";
    EXPECT_THAT(r.Create(config_), StatusIs(absl::StatusCode::kAlreadyExists));
    ASSERT_THAT(r.Drop("dropped"), IsOk());
  }
  // Left by a crash inside Create (no manifest yet): removed, not reported.
  // A corpus whose manifest is gone but whose segments remain is reported.
  ASSERT_EQ(mkdir((tmp.path() + "/corpora/half").c_str(), 0755), 0);
  ASSERT_THAT(WriteFileDurably(tmp.path() + "/corpora/half/MANIFEST.tmp", "x"),
              IsOk());
  const std::string broken = tmp.path() + "/corpora/broken/seg-1.msd";
  std::string bytes = ReadWholeFile(broken).value();
  bytes[40] ^= 1;
  ASSERT_THAT(WriteFileDurably(broken, bytes), IsOk());

  CorpusRegistry r(backend_.get(), limits_, tmp.path());
  auto report = r.LoadAll();
  ASSERT_THAT(report, IsOk());
  ASSERT_EQ(report->corpora.size(), 2u);  // the dropped one stays dropped
  EXPECT_FALSE(Exists(tmp.path() + "/corpora/half"));
  EXPECT_EQ(report->corpora[0].first, "broken");
  EXPECT_THAT(report->corpora[0].second, StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(report->corpora[1].second, IsOk());
  EXPECT_EQ(Contents(*r.Get("keep").value()->Snapshot()), kept);
  EXPECT_THAT(r.Get("broken"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("seg-1.msd")));
  EXPECT_THAT(r.Get("dropped"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_EQ(r.List().size(), 1u);
  // An operator clears the damaged corpus by dropping it; the name is free.
  ASSERT_THAT(r.Drop("broken"), IsOk());
  EXPECT_FALSE(Exists(tmp.path() + "/corpora/broken"));
  config_.name = "broken";
  EXPECT_THAT(r.Create(config_), IsOk());
}

TEST_F(StorageTest, AliasesSwitchAtomicallyPersistAndGuardTheirCorpus) {
  TempDir tmp;
  std::vector<std::pair<std::string, std::string>> v1_docs, v2_docs;
  {
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    ASSERT_THAT(r.LoadAll(), IsOk());
    for (const char* name : {"v1", "v2"}) {
      config_.name = name;
      auto c = r.Create(config_);
      ASSERT_THAT(c, IsOk());
      ASSERT_THAT((*c)->Append(Docs(name, 3)), IsOk());
    }
    v1_docs = Contents(*r.Get("v1").value()->Snapshot());
    v2_docs = Contents(*r.Get("v2").value()->Snapshot());
    EXPECT_THAT(r.SetAlias("prod", "v1"), IsOk());
    EXPECT_EQ(r.SetAlias("prod", "v1").value(), "v1");
    // A request resolves the alias once and keeps that corpus.
    auto in_flight = r.Get("prod").value()->Snapshot();
    EXPECT_EQ(r.SetAlias("prod", "v2").value(), "v1");
    EXPECT_EQ(Contents(*in_flight), v1_docs);
    EXPECT_EQ(Contents(*r.Get("prod").value()->Snapshot()), v2_docs);

    EXPECT_THAT(r.SetAlias("v1", "v2"),
                StatusIs(absl::StatusCode::kAlreadyExists,
                         HasSubstr("is the name of a corpus")));
    EXPECT_THAT(r.SetAlias("x", "nope"), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(r.SetAlias("x", "prod"), StatusIs(absl::StatusCode::kNotFound,
                                                  HasSubstr("it is an alias")));
    EXPECT_THAT(r.SetAlias(".x", "v1"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("alias: name must be")));
    config_.name = "prod";
    EXPECT_THAT(r.Create(config_), StatusIs(absl::StatusCode::kAlreadyExists));
    EXPECT_THAT(r.Drop("v2"), StatusIs(absl::StatusCode::kFailedPrecondition,
                                       HasSubstr("named by alias prod")));
  }
  {
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    auto report = r.LoadAll();
    ASSERT_THAT(report, IsOk());
    EXPECT_THAT(report->aliases, IsOk());
    EXPECT_EQ(r.Aliases().value(),
              (std::map<std::string, std::string>{{"prod", "v2"}}));
    EXPECT_EQ(Contents(*r.Get("prod").value()->Snapshot()), v2_docs);
    ASSERT_THAT(r.DeleteAlias("prod"), IsOk());
    EXPECT_THAT(r.DeleteAlias("prod"), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(r.Drop("v2"), IsOk());
    ASSERT_THAT(r.SetAlias("prod", "v1"), IsOk());
  }
  // A damaged alias file: the corpora still load; the aliases come from
  // ALIASES.prev, the state before the last change (none).
  const std::string path = tmp.path() + "/ALIASES";
  std::string bytes = ReadWholeFile(path).value();
  bytes[bytes.size() - 9] ^= 1;
  ASSERT_THAT(WriteFileDurably(path, bytes), IsOk());
  CorpusRegistry r(backend_.get(), limits_, tmp.path());
  auto report = r.LoadAll();
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->aliases,
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("ALIASES")));
  EXPECT_THAT(report->aliases_backup, IsOk());
  EXPECT_TRUE(r.Aliases().value().empty());
  EXPECT_EQ(Contents(*r.Get("v1").value()->Snapshot()), v1_docs);
}

TEST_F(StorageTest, SnapshotAndLoadCopyACorpusAsOfTheSnapshot) {
  TempDir tmp;
  const std::string snap = tmp.path() + "/snap";
  std::vector<std::pair<std::string, std::string>> at_snapshot;
  {
    CorpusRegistry r(backend_.get(), limits_);  // in memory
    auto c = r.Create(config_);
    ASSERT_THAT(c, IsOk());
    ASSERT_THAT((*c)->Append(Docs("a", 6)), IsOk());
    ASSERT_THAT((*c)->Append(Docs("b", 3, 1.f)), IsOk());
    ASSERT_THAT((*c)->Delete({"a2", "b0"}, false), IsOk());
    at_snapshot = Contents(*(*c)->Snapshot());
    EXPECT_EQ(r.SnapshotCorpus("c", snap).value(), 7);
    ASSERT_THAT((*c)->Append(Docs("late", 2)), IsOk());  // not in the snapshot
    EXPECT_THAT(r.SnapshotCorpus("c", snap),
                StatusIs(absl::StatusCode::kAlreadyExists));
    EXPECT_TRUE(Exists(snap + "/MANIFEST"));  // the existing one untouched
    // Loaded into memory under another name; the source only read.
    ASSERT_THAT(WriteFileDurably(snap + "/notes.txt", "mine"), IsOk());
    auto copy = r.LoadCorpus(snap, "copy");
    ASSERT_THAT(copy, IsOk());
    EXPECT_EQ((*copy)->config().name, "copy");
    EXPECT_EQ(Contents(*(*copy)->Snapshot()), at_snapshot);
    EXPECT_TRUE(Exists(snap + "/notes.txt"));
    EXPECT_THAT(r.LoadCorpus(snap, "copy"),
                StatusIs(absl::StatusCode::kAlreadyExists));
    EXPECT_THAT(r.LoadCorpus(snap, ""),  // its manifest says "c"
                StatusIs(absl::StatusCode::kAlreadyExists));
  }
  {
    // Into a data directory: persisted, back after a reload.
    CorpusRegistry r(backend_.get(), limits_, tmp.path() + "/data");
    ASSERT_THAT(r.LoadAll(), IsOk());
    ASSERT_THAT(r.LoadCorpus(snap, ""), IsOk());
  }
  CorpusRegistry r(backend_.get(), limits_, tmp.path() + "/data");
  ASSERT_THAT(r.LoadAll(), IsOk());
  EXPECT_EQ(Contents(*r.Get("c").value()->Snapshot()), at_snapshot);
  // A damaged snapshot is refused, naming the file, and leaves nothing.
  std::string bytes = ReadWholeFile(snap + "/seg-1.msd").value();
  bytes[bytes.size() / 2] ^= 2;
  ASSERT_THAT(WriteFileDurably(snap + "/seg-1.msd", bytes), IsOk());
  EXPECT_THAT(r.LoadCorpus(snap, "broken"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("seg-1.msd")));
  EXPECT_THAT(r.Get("broken"), StatusIs(absl::StatusCode::kNotFound));
  EXPECT_FALSE(Exists(tmp.path() + "/data/corpora/broken"));
}

// The attack of a file copied whole from corpus e over the file of the
// same name in corpus f: its own checksums hold, and f's manifest names a
// file of that name with that many documents. f is not served (DATA_LOSS
// naming the file and both corpus ids); e is untouched.
TEST_F(StorageTest, AFileCopiedFromAnotherCorpusIsDataLossNamingIt) {
  for (const char* file : {"seg-1.msd", "tomb-2.msd"}) {
    SCOPED_TRACE(file);
    TempDir tmp;
    std::vector<std::pair<std::string, std::string>> e_docs;
    {
      CorpusRegistry r(backend_.get(), limits_, tmp.path());
      ASSERT_THAT(r.LoadAll(), IsOk());
      for (const char* name : {"e", "f"}) {
        config_.name = name;
        auto c = r.Create(config_);
        ASSERT_THAT(c, IsOk());
        // The same ids and counts, other tokens: alike file for file.
        ASSERT_THAT((*c)->Append(Docs("d", 4, name[0] == 'e' ? 0.f : 1.f)),
                    IsOk());
        ASSERT_THAT((*c)->Delete({name[0] == 'e' ? "d1" : "d2"}, false),
                    IsOk());
      }
      e_docs = Contents(*r.Get("e").value()->Snapshot());
    }
    const std::string e = tmp.path() + "/corpora/e";
    const std::string f = tmp.path() + "/corpora/f";
    const std::string e_id = ManifestOf(e).corpus_id;
    const std::string f_id = ManifestOf(f).corpus_id;
    ASSERT_EQ(e_id.size(), 32u);
    ASSERT_EQ(f_id.size(), 32u);
    ASSERT_NE(e_id, f_id);
    ASSERT_TRUE(Exists(f + "/" + file));
    CopyFile(e + "/" + file, f + "/" + file);

    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    ASSERT_THAT(r.LoadAll(), IsOk());
    EXPECT_THAT(
        r.Get("f"),
        StatusIs(absl::StatusCode::kDataLoss,
                 ::testing::AllOf(HasSubstr(f + "/" + file),
                                  HasSubstr("carries corpus id " + e_id),
                                  HasSubstr("is of corpus id " + f_id))));
    EXPECT_EQ(Contents(*r.Get("e").value()->Snapshot()), e_docs);
  }
}

// A snapshot and a load each write every file anew, under a fresh id: no
// file of one fits another.
TEST_F(StorageTest, SnapshotsAndLoadsGetAFreshCorpusId) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  const std::string snap = tmp.path() + "/snap";
  {
    CorpusRegistry r(backend_.get(), limits_, data);
    ASSERT_THAT(r.LoadAll(), IsOk());
    auto c = r.Create(config_);
    ASSERT_THAT(c, IsOk());
    ASSERT_THAT((*c)->Append(Docs("a", 4)), IsOk());
    ASSERT_THAT((*c)->Delete({"a1"}, false), IsOk());
    ASSERT_THAT(r.SnapshotCorpus("c", snap), IsOk());
    ASSERT_THAT(r.LoadCorpus(snap, "copy"), IsOk());
  }
  const std::string source_id = ManifestOf(data + "/corpora/c").corpus_id;
  const std::string snap_id = ManifestOf(snap).corpus_id;
  const std::string copy_id = ManifestOf(data + "/corpora/copy").corpus_id;
  EXPECT_EQ(snap_id.size(), 32u);
  EXPECT_EQ(copy_id.size(), 32u);
  EXPECT_NE(snap_id, source_id);
  EXPECT_NE(copy_id, source_id);
  EXPECT_NE(copy_id, snap_id);
  // Every file of the snapshot carries its id (Read checks them all).
  StoredCorpus contents;
  EXPECT_THAT(CorpusStore::Read(snap, &contents), IsOk());
  // The snapshot's segment over the source's own: refused.
  CopyFile(snap + "/seg-1.msd", data + "/corpora/c/seg-1.msd");
  CorpusRegistry r(backend_.get(), limits_, data);
  ASSERT_THAT(r.LoadAll(), IsOk());
  EXPECT_THAT(r.Get("c"), StatusIs(absl::StatusCode::kDataLoss,
                                   HasSubstr("carries corpus id " + snap_id)));
  EXPECT_THAT(r.Get("copy"), IsOk());
}

TEST_F(StorageTest, MaxCorporaRefusesCreateAndLoadCountingFailedCorpora) {
  TempDir tmp;
  const std::string data = tmp.path() + "/data";
  const std::string snap = tmp.path() + "/snap";
  limits_.max_corpora = 2;
  {
    CorpusRegistry r(backend_.get(), limits_, data);
    ASSERT_THAT(r.LoadAll(), IsOk());
    for (const char* name : {"a", "b"}) {
      config_.name = name;
      auto c = r.Create(config_);
      ASSERT_THAT(c, IsOk());
      ASSERT_THAT((*c)->Append(Docs(name, 2)), IsOk());
    }
    config_.name = "c";
    EXPECT_THAT(r.Create(config_),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         ::testing::AllOf(HasSubstr("\"c\""),
                                          HasSubstr("holds 2 corpora"),
                                          HasSubstr("--max_corpora is 2"))));
    ASSERT_THAT(r.SnapshotCorpus("a", snap), IsOk());
    EXPECT_THAT(r.LoadCorpus(snap, "c"),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         HasSubstr("--max_corpora is 2")));
    // Nothing of the refused ones on disk.
    EXPECT_EQ(ListFiles(data + "/corpora").value().size(), 2u);
    EXPECT_EQ(r.NumCorpora(), 2);
    // A taken name is still ALREADY_EXISTS.
    config_.name = "a";
    EXPECT_THAT(r.Create(config_), StatusIs(absl::StatusCode::kAlreadyExists));
    ASSERT_THAT(r.Drop("b"), IsOk());
    ASSERT_THAT(r.LoadCorpus(snap, "c"), IsOk());
  }
  // a damaged, and a restart with a limit of 1: both are loaded, and the
  // one that failed to load holds its name and counts.
  const std::string seg = data + "/corpora/a/seg-1.msd";
  std::string bytes = ReadWholeFile(seg).value();
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_THAT(WriteFileDurably(seg, bytes), IsOk());
  limits_.max_corpora = 1;
  CorpusRegistry r(backend_.get(), limits_, data);
  auto report = r.LoadAll();
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->corpora.size(), 2u);
  EXPECT_THAT(r.Get("a"), StatusIs(absl::StatusCode::kDataLoss));
  EXPECT_THAT(r.Get("c"), IsOk());
  EXPECT_EQ(r.NumCorpora(), 2);
  EXPECT_EQ(r.Failed().size(), 1u);
  config_.name = "d";
  EXPECT_THAT(r.Create(config_),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("counting those that failed to load")));
  ASSERT_THAT(r.Drop("a"), IsOk());
  EXPECT_THAT(r.Create(config_), StatusIs(absl::StatusCode::kResourceExhausted,
                                          HasSubstr("holds 1 corpora")));
  ASSERT_THAT(r.Drop("c"), IsOk());
  EXPECT_THAT(r.Create(config_), IsOk());
  // In memory alike.
  CorpusRegistry memory(backend_.get(), limits_);
  EXPECT_THAT(memory.Create(config_), IsOk());
  config_.name = "e";
  EXPECT_THAT(memory.Create(config_),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

// ALIASES.prev holds the aliases as they were before the last change. A
// damaged ALIASES falls back to it (without its aliases that no longer
// fit the corpora), and the next change writes both files anew.
TEST_F(StorageTest, ADamagedAliasFileFallsBackToThePreviousOne) {
  TempDir tmp;
  const std::string path = tmp.path() + "/ALIASES";
  const std::string backup = tmp.path() + "/ALIASES.prev";
  using Map = std::map<std::string, std::string>;
  {
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    ASSERT_THAT(r.LoadAll(), IsOk());
    for (const char* name : {"v1", "v2"}) {
      config_.name = name;
      ASSERT_THAT(r.Create(config_), IsOk());
    }
    ASSERT_THAT(r.SetAlias("prod", "v1"), IsOk());
    ASSERT_THAT(r.SetAlias("x", "v1"), IsOk());
    ASSERT_THAT(r.SetAlias("prod", "v2"), IsOk());
    EXPECT_EQ(DecodeAliases(ReadWholeFile(backup).value(), backup).value(),
              (Map{{"prod", "v1"}, {"x", "v1"}}));
    ASSERT_THAT(r.DeleteAlias("x"), IsOk());
    EXPECT_EQ(DecodeAliases(ReadWholeFile(backup).value(), backup).value(),
              (Map{{"prod", "v2"}, {"x", "v1"}}));
    config_.name = "x";  // free again, and now a corpus
    ASSERT_THAT(r.Create(config_), IsOk());
  }
  std::string bytes = ReadWholeFile(path).value();
  bytes[bytes.size() / 2] ^= 1;
  ASSERT_THAT(WriteFileDurably(path, bytes), IsOk());
  // Left by commits cut short: removed.
  ASSERT_THAT(WriteFileDurably(path + ".tmp", "x"), IsOk());
  ASSERT_THAT(WriteFileDurably(backup + ".tmp", "x"), IsOk());
  {
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    auto report = r.LoadAll();
    ASSERT_THAT(report, IsOk());
    EXPECT_THAT(report->aliases,
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
    EXPECT_THAT(report->aliases_backup, IsOk());
    EXPECT_EQ(report->aliases_dropped, std::vector<std::string>{"x"});
    EXPECT_EQ(r.alias_state(), CorpusRegistry::AliasState::kFromBackup);
    EXPECT_EQ(r.Aliases().value(), (Map{{"prod", "v2"}}));
    EXPECT_EQ(r.Get("prod").value()->config().name, "v2");
    EXPECT_EQ(r.Get("x").value()->config().name, "x");
    EXPECT_FALSE(Exists(path + ".tmp"));
    EXPECT_FALSE(Exists(backup + ".tmp"));
    // The next change rewrites both files.
    ASSERT_THAT(r.SetAlias("dev", "v1"), IsOk());
    EXPECT_EQ(r.alias_state(), CorpusRegistry::AliasState::kSound);
  }
  CorpusRegistry r(backend_.get(), limits_, tmp.path());
  auto report = r.LoadAll();
  ASSERT_THAT(report, IsOk());
  EXPECT_THAT(report->aliases, IsOk());
  EXPECT_EQ(r.alias_state(), CorpusRegistry::AliasState::kSound);
  EXPECT_EQ(r.Aliases().value(), (Map{{"dev", "v1"}, {"prod", "v2"}}));
}

// With ALIASES damaged and ALIASES.prev missing (written by a build
// before it) or damaged too, the alias map is unknown: every call that
// needs it is DATA_LOSS naming the files, corpora still serve by name,
// and the files stay as they are until an operator repairs them and
// restarts the server.
TEST_F(StorageTest, WithBothAliasFilesUnusableAliasCallsAreDataLoss) {
  for (bool backup_missing : {true, false}) {
    SCOPED_TRACE(backup_missing ? "ALIASES.prev missing"
                                : "ALIASES.prev damaged");
    TempDir tmp;
    const std::string path = tmp.path() + "/ALIASES";
    const std::string backup = tmp.path() + "/ALIASES.prev";
    {
      CorpusRegistry r(backend_.get(), limits_, tmp.path());
      ASSERT_THAT(r.LoadAll(), IsOk());
      config_.name = "v1";
      ASSERT_THAT(r.Create(config_), IsOk());
      ASSERT_THAT(r.SetAlias("prod", "v1"), IsOk());
      ASSERT_THAT(r.SetAlias("dev", "v1"), IsOk());
    }
    std::string bytes = ReadWholeFile(path).value();
    bytes[bytes.size() - 9] ^= 1;
    ASSERT_THAT(WriteFileDurably(path, bytes), IsOk());
    if (backup_missing) {
      ASSERT_EQ(unlink(backup.c_str()), 0);
    } else {
      const std::string prev = ReadWholeFile(backup).value();
      ASSERT_THAT(WriteFileDurably(backup, prev.substr(0, prev.size() - 1)),
                  IsOk());
    }
    const std::string backup_bytes =
        backup_missing ? "" : ReadWholeFile(backup).value();
    {
      CorpusRegistry r(backend_.get(), limits_, tmp.path());
      auto report = r.LoadAll();
      ASSERT_THAT(report, IsOk());
      EXPECT_THAT(report->aliases,
                  StatusIs(absl::StatusCode::kDataLoss, HasSubstr(path)));
      EXPECT_THAT(report->aliases_backup,
                  StatusIs(absl::StatusCode::kDataLoss, HasSubstr(backup)));
      EXPECT_EQ(r.alias_state(), CorpusRegistry::AliasState::kUnknown);
      const auto names_both = ::testing::AllOf(
          HasSubstr(path + ":"), HasSubstr(backup), HasSubstr("restart"));
      EXPECT_THAT(r.Aliases(),
                  StatusIs(absl::StatusCode::kDataLoss, names_both));
      EXPECT_THAT(r.Get("prod"),
                  StatusIs(absl::StatusCode::kDataLoss, names_both));
      EXPECT_THAT(r.Get("nope"),  // not NOT_FOUND: it may be a lost alias
                  StatusIs(absl::StatusCode::kDataLoss, names_both));
      EXPECT_THAT(r.Get("v1"), IsOk());
      EXPECT_THAT(r.SetAlias("qa", "v1"),
                  StatusIs(absl::StatusCode::kDataLoss, names_both));
      EXPECT_THAT(r.DeleteAlias("prod"),
                  StatusIs(absl::StatusCode::kDataLoss, names_both));
      config_.name = "prod";  // may be a lost alias's name
      EXPECT_THAT(r.Create(config_),
                  StatusIs(absl::StatusCode::kDataLoss, names_both));
      EXPECT_THAT(r.Drop("v1"),  // a lost alias may name it
                  StatusIs(absl::StatusCode::kDataLoss, names_both));
    }
    // Nothing rewritten meanwhile.
    EXPECT_EQ(ReadWholeFile(path).value(), bytes);
    EXPECT_EQ(ReadWholeFile(backup).value_or(""), backup_bytes);
    // The operator's repair: both files removed (or a sound copy put in
    // place), then a restart.
    ASSERT_EQ(unlink(path.c_str()), 0);
    (void)unlink(backup.c_str());
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    auto report = r.LoadAll();
    ASSERT_THAT(report, IsOk());
    EXPECT_THAT(report->aliases, IsOk());
    EXPECT_EQ(r.alias_state(), CorpusRegistry::AliasState::kSound);
    EXPECT_TRUE(r.Aliases().value().empty());
    EXPECT_THAT(r.Get("prod"), StatusIs(absl::StatusCode::kNotFound));
    EXPECT_THAT(r.SetAlias("prod", "v1"), IsOk());
  }
}

// What a crash leaves in a data directory is removed at start: a load cut
// short (its `.partial-*` directory beside the corpora) and the alias
// files' temporaries.
TEST_F(StorageTest, LoadAllRemovesWhatACrashLeftInTheDataDirectory) {
  TempDir tmp;
  const std::string snap = tmp.path() + "/snap";
  {
    CorpusRegistry r(backend_.get(), limits_, tmp.path() + "/data");
    ASSERT_THAT(r.LoadAll(), IsOk());
    auto c = r.Create(config_);
    ASSERT_THAT(c, IsOk());
    ASSERT_THAT((*c)->Append(Docs("a", 3)), IsOk());
    ASSERT_THAT(r.SnapshotCorpus("c", snap), IsOk());
    // A load leaves nothing beside the corpora.
    ASSERT_THAT(r.LoadCorpus(snap, "copy"), IsOk());
    EXPECT_EQ(SortedFiles(tmp.path() + "/data/corpora"),
              (std::vector<std::string>{"c", "copy"}));
  }
  // A load killed midway: its whole directory under the hidden name.
  const std::string partial = tmp.path() + "/data/corpora/.partial-late-7-0";
  ASSERT_EQ(system(absl::StrCat("cp -r '", snap, "' '", partial, "'").c_str()),
            0);
  CorpusRegistry r(backend_.get(), limits_, tmp.path() + "/data");
  auto report = r.LoadAll();
  ASSERT_THAT(report, IsOk());
  EXPECT_EQ(report->corpora.size(), 2u);
  EXPECT_FALSE(Exists(partial));
  EXPECT_THAT(r.Get("late"), StatusIs(absl::StatusCode::kNotFound));
}

TEST_F(StorageTest, RemovePartialSnapshotsRemovesOnlyPartialDirectories) {
  TempDir tmp;
  const std::string files = tmp.path() + "/files";
  const std::string outside = tmp.path() + "/outside";
  for (const std::string& dir :
       {files + "/.partial-a-1-0/sub", files + "/nightly/.partial-b-2-3",
        files + "/nightly/v1", files + "/keep", outside + "/.partial-c-4-5"}) {
    ASSERT_THAT(MakeDirectories(dir), IsOk());
  }
  for (const std::string& file :
       {files + "/.partial-a-1-0/MANIFEST", files + "/.partial-a-1-0/sub/f",
        files + "/nightly/.partial-b-2-3/seg-1.msd",
        files + "/nightly/v1/MANIFEST", files + "/keep/x.npy",
        files + "/.partial-note", outside + "/.partial-c-4-5/f",
        outside + "/data"}) {
    ASSERT_THAT(WriteFileDurably(file, "x"), IsOk());
  }
  // Links out of the files directory: never followed, never removed.
  ASSERT_EQ(symlink(outside.c_str(), (files + "/link").c_str()), 0);
  ASSERT_EQ(symlink(outside.c_str(), (files + "/.partial-link").c_str()), 0);

  EXPECT_EQ(RemovePartialSnapshots(files).value_or(-1), 2);
  EXPECT_FALSE(Exists(files + "/.partial-a-1-0"));
  EXPECT_FALSE(Exists(files + "/nightly/.partial-b-2-3"));
  for (const std::string& kept :
       {files + "/nightly/v1/MANIFEST", files + "/keep/x.npy",
        files + "/.partial-note", outside + "/.partial-c-4-5/f",
        outside + "/data", files + "/link/data",
        files + "/.partial-link/data"}) {
    EXPECT_TRUE(Exists(kept)) << kept;
  }
  EXPECT_EQ(RemovePartialSnapshots(files).value_or(-1), 0);
  EXPECT_FALSE(RemovePartialSnapshots(tmp.path() + "/none").ok());
}

// Top-10 scan of a fixed query on a snapshot, through the CPU backend.
std::vector<std::pair<std::string, float>> Ranking(const CorpusSnapshot& snap,
                                                   Backend* backend) {
  std::vector<float> q(2 * 4);
  for (size_t i = 0; i < q.size(); ++i) q[i] = 0.25f * (i % 3) - 0.2f;
  SearchBatch search;
  search.dim = 4;
  search.quantize_queries = snap.config().quantize_queries;
  search.refs = snap.SegmentRefs();
  search.AddQuery(q, 10);
  std::vector<std::vector<ScoredDoc>> results(1);
  EXPECT_THAT(
      backend->Search(search.Params(), absl::MakeSpan(results), nullptr),
      IsOk());
  std::vector<std::pair<std::string, float>> out;
  for (const ScoredDoc& d : results[0]) {
    out.emplace_back(snap.IdOf(d.index), d.score);
  }
  return out;
}

TEST_F(StorageTest, CompactionMergesSmallSegmentsAndDropsDeletedDocuments) {
  TempDir tmp;
  const std::string dir = tmp.path() + "/c";
  auto corpus = Corpus::Create(config_, limits_, backend_.get(),
                               CorpusStore::Create(dir, config_).value());
  ASSERT_THAT(corpus, IsOk());
  for (int i = 0; i < 8; ++i) {
    ASSERT_THAT((*corpus)->Append(Docs(absl::StrCat("s", i, "-"), 4, i)),
                IsOk());
  }
  ASSERT_THAT((*corpus)->Delete({"s1-0", "s1-2", "s5-3"}, false), IsOk());
  auto before = (*corpus)->Snapshot();
  ASSERT_EQ(before->segments().size(), 8u);
  const auto contents = Contents(*before);
  const auto ranking = Ranking(*before, backend_.get());

  CompactionOptions o;
  o.seal_bytes = 1 << 20;
  auto rewritten = (*corpus)->Compact(o);
  ASSERT_THAT(rewritten, IsOk());
  EXPECT_EQ(*rewritten, 8);
  auto after = (*corpus)->Snapshot();
  ASSERT_EQ(after->segments().size(), 1u);
  EXPECT_EQ(after->deleted_docs(), 0);
  EXPECT_EQ(Contents(*after), contents);
  EXPECT_EQ(Ranking(*after, backend_.get()), ranking);
  EXPECT_FALSE(after->Find("s1-0").has_value());
  EXPECT_TRUE(after->Find("s7-3").has_value());
  // A reader's snapshot is untouched, and nothing more to do.
  EXPECT_EQ(before->segments().size(), 8u);
  EXPECT_EQ(Contents(*before), contents);
  EXPECT_EQ((*corpus)->Compact(o).value(), 0);

  // The sealed segment is rewritten again only for its tombstones.
  o.seal_bytes = 1;  // everything is "large" now
  ASSERT_THAT((*corpus)->Delete({"s0-0"}, false), IsOk());
  EXPECT_EQ((*corpus)->Compact(o).value(), 0);  // 1 of 29 < 25%
  o.tombstone_ratio = 0.01;
  EXPECT_EQ((*corpus)->Compact(o).value(), 1);
  EXPECT_EQ((*corpus)->Snapshot()->deleted_docs(), 0);

  // On disk: the reopened corpus is the compacted one, old files gone.
  const auto final_contents = Contents(*(*corpus)->Snapshot());
  corpus->reset();
  StoredCorpus stored;
  auto store = CorpusStore::Open(dir, &stored);
  ASSERT_THAT(store, IsOk());
  ASSERT_EQ(stored.manifest.segments.size(), 1u);
  EXPECT_FALSE(Exists(dir + "/seg-1.msd"));
  auto reopened = Corpus::Restore(limits_, backend_.get(), *std::move(store),
                                  std::move(stored));
  ASSERT_THAT(reopened, IsOk());
  EXPECT_EQ(Contents(*(*reopened)->Snapshot()), final_contents);
}

// Readers never see a half-applied write: while one thread appends batches
// of kBatch documents and deletes whole batches, another compacts, and a
// third switches an alias between two such corpora, every snapshot a
// reader takes holds each batch whole or not at all, its id index agrees
// with its contents, and a scan ranks only its live documents.
TEST_F(StorageTest,
       QueriesSeeConsistentSnapshotsDuringWritesCompactionAndAliasSwaps) {
  TempDir tmp;
  CorpusRegistry r(backend_.get(), limits_, tmp.path());
  ASSERT_THAT(r.LoadAll(), IsOk());
  constexpr int kBatch = 4;
  for (const char* name : {"c1", "c2"}) {
    config_.name = name;
    ASSERT_THAT(r.Create(config_), IsOk());
  }
  ASSERT_THAT(r.SetAlias("cur", "c1"), IsOk());
  std::atomic<bool> stop{false};
  std::atomic<int> checked{0};
  std::vector<std::thread> threads;
  for (const char* name : {"c1", "c2"}) {
    threads.emplace_back([&, name] {
      std::shared_ptr<Corpus> c = r.Get(name).value();
      for (int b = 0; b < 120; ++b) {
        const std::string prefix = absl::StrCat(name, "w", b, "-");
        EXPECT_THAT(c->Append(Docs(prefix, kBatch, b)), IsOk());
        if (b % 3 == 1) {  // delete an earlier batch, whole
          std::vector<std::string> ids;
          for (int j = 0; j < kBatch; ++j) {
            ids.push_back(absl::StrCat(name, "w", b - 1, "-", j));
          }
          EXPECT_THAT(c->Delete(ids, false), IsOk());
        }
      }
    });
  }
  threads.emplace_back([&] {  // compactor
    CompactionOptions o;
    o.seal_bytes = 4096;
    o.tombstone_ratio = 0.2;
    while (!stop) {
      for (const char* name : {"c1", "c2"}) {
        EXPECT_THAT(r.Get(name).value()->Compact(o), IsOk());
      }
    }
  });
  threads.emplace_back([&] {  // alias swaps
    for (int i = 0; !stop; ++i) {
      EXPECT_THAT(r.SetAlias("cur", i % 2 == 0 ? "c2" : "c1"), IsOk());
    }
  });
  for (int t = 0; t < 2; ++t) {
    threads.emplace_back([&] {  // readers
      while (!stop) {
        auto snap = r.Get("cur").value()->Snapshot();
        std::map<std::string, int> per_batch;
        for (const auto& [id, tokens] : Contents(*snap)) {
          per_batch[id.substr(0, id.find('-'))] += 1;
          EXPECT_TRUE(snap->Find(id).has_value()) << id;
        }
        for (const auto& [batch, n] : per_batch) {
          EXPECT_EQ(n, kBatch) << batch << " is half there";
        }
        for (const auto& [id, score] : Ranking(*snap, backend_.get())) {
          EXPECT_EQ(per_batch.count(id.substr(0, id.find('-'))), 1u) << id;
        }
        ++checked;
      }
    });
  }
  threads[0].join();
  threads[1].join();
  stop = true;
  for (size_t i = 2; i < threads.size(); ++i) threads[i].join();
  EXPECT_GT(checked.load(), 0);
  // The end state: 120 batches each, 40 of them deleted, all on disk too.
  for (const char* name : {"c1", "c2"}) {
    EXPECT_EQ(r.Get(name).value()->Snapshot()->live_docs(), 80 * kBatch);
  }
  CorpusRegistry reloaded(backend_.get(), limits_, tmp.path());
  ASSERT_THAT(reloaded.LoadAll(), IsOk());
  EXPECT_EQ(Contents(*reloaded.Get("c1").value()->Snapshot()),
            Contents(*r.Get("c1").value()->Snapshot()));
}

// The CPU twin of GpuBackendTest.CorpusBudgetRefusesUploadsPastIt...: a
// write past the budget is RESOURCE_EXHAUSTED naming the flag, and leaves
// the corpus as it was, in memory and on disk; dropping frees the budget.
TEST_F(StorageTest, CorpusBudgetRefusesWritesAndFreesOnDrop) {
  TempDir tmp;
  CpuBackendOptions o;
  o.corpus_budget_bytes = 4096;
  auto budgeted = CpuBackend::Create(o).value();
  CorpusRegistry r(budgeted.get(), limits_, tmp.path());
  ASSERT_THAT(r.LoadAll(), IsOk());
  // Placement gpu: auto would put what does not fit on the host
  // (PlacementTest covers that).
  config_.placement = Placement::kGpu;
  auto c = r.Create(config_);
  ASSERT_THAT(c, IsOk());
  ASSERT_THAT((*c)->Append(Docs("a", 10)), IsOk());  // ~200 token bytes
  const auto before = Contents(*(*c)->Snapshot());
  EXPECT_THAT((*c)->Append(Docs("big", 400)),  // ~8 KB
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr("--corpus_budget_bytes is 4096")));
  EXPECT_EQ(Contents(*(*c)->Snapshot()), before);
  // Nothing of the refused write on disk: the manifest, one segment.
  int files = 0;
  for (const char* f : {"MANIFEST", "seg-1.msd", "seg-2.msd"}) {
    files += Exists(tmp.path() + "/corpora/c/" + f) ? 1 : 0;
  }
  EXPECT_EQ(files, 2);
  // 3,896 bytes: over the budget only while "c" holds its 240.
  EXPECT_THAT((*c)->Append(Docs("fits", 162)),
              StatusIs(absl::StatusCode::kResourceExhausted));
  c->reset();
  ASSERT_THAT(r.Drop("c"), IsOk());
  config_.name = "d";
  auto d = r.Create(config_);
  ASSERT_THAT(d, IsOk());
  EXPECT_THAT((*d)->Append(Docs("fits", 162)), IsOk());
}

// ---------------------------------------------------------------------------
// The int8 layout (FORMAT.md: segment dtype 3 with a 'scal' block, the
// manifest's quantize_queries byte) and the files written before it.

// The blocks of a well-formed file as (tag, payload), and a file framed
// from blocks with correct CRCs: to build files the encoder never writes.
std::vector<std::pair<std::string, std::string>> Blocks(
    const std::string& file) {
  std::vector<std::pair<std::string, std::string>> out;
  size_t at = 16;
  for (;;) {
    uint32_t tag;
    std::memcpy(&tag, file.data() + at, 4);
    if (tag == 0xffffffffu) return out;
    uint64_t len;
    std::memcpy(&len, file.data() + at + 4, 8);
    out.emplace_back(file.substr(at, 4), file.substr(at + 12, len));
    at += 12 + len + 4;
  }
}

std::string Frame(uint32_t kind,
                  const std::vector<std::pair<std::string, std::string>>& b) {
  auto put32 = [](std::string* out, uint32_t v) {
    out->append(reinterpret_cast<const char*>(&v), 4);
  };
  auto crc = [](absl::string_view bytes) {
    return static_cast<uint32_t>(
        crc32(0, reinterpret_cast<const Bytef*>(bytes.data()),
              static_cast<uInt>(bytes.size())));
  };
  std::string out("MAXSIMD\0", 8);
  put32(&out, kind);
  put32(&out, 1);
  for (const auto& [tag, payload] : b) {
    const size_t start = out.size();
    out += tag;
    const uint64_t len = payload.size();
    out.append(reinterpret_cast<const char*>(&len), 8);
    out += payload;
    put32(&out, crc(absl::string_view(out).substr(start)));
  }
  put32(&out, 0xffffffffu);
  put32(&out, crc(out));
  return out;
}

// A segment file and a manifest written by the build before the int8
// layout (commit 19c8cf5): a float16 segment of two documents ("a": one
// token {1, -0.5}; "bc": {0.25, 2}, {-3, 0}) and the manifest of a
// normalised bfloat16 corpus "old" naming it.
constexpr char kOldSegment[] =
    "\x4d\x41\x58\x53\x49\x4d\x44\x00\x01\x00\x00\x00\x01\x00\x00\x00"
    "\x6d\x65\x74\x61\x18\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00"
    "\x01\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00"
    "\x00\x00\x00\x00\x3a\x07\xa4\x0f\x6f\x66\x66\x73\x18\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00"
    "\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x68\x4c\xef\x38"
    "\x69\x64\x73\x20\x0b\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00"
    "\x61\x02\x00\x00\x00\x62\x63\x46\x89\x1a\x31\x74\x6f\x6b\x73\x0c"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x3c\x00\xb8\x00\x34\x00\x40\x00"
    "\xc2\x00\x00\x5c\x3e\xbe\x19\xff\xff\xff\xff\xf7\xfb\x85\xb0";
constexpr char kOldManifest[] =
    "\x4d\x41\x58\x53\x49\x4d\x44\x00\x03\x00\x00\x00\x01\x00\x00\x00"
    "\x63\x6f\x6e\x66\x18\x00\x00\x00\x00\x00\x00\x00\x03\x00\x00\x00"
    "\x6f\x6c\x64\x02\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01"
    "\x02\x00\x00\x00\xf7\x17\x45\xb1\x6e\x65\x78\x74\x08\x00\x00\x00"
    "\x00\x00\x00\x00\x03\x00\x00\x00\x00\x00\x00\x00\x25\x7c\x36\x58"
    "\x73\x65\x67\x73\x29\x00\x00\x00\x00\x00\x00\x00\x01\x00\x00\x00"
    "\x09\x00\x00\x00\x73\x65\x67\x2d\x31\x2e\x6d\x73\x64\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x00\x00\x00\x00\x02\x00\x00\x00\x00\x00\x00"
    "\x00\x00\x00\x00\x00\x3b\x4b\x4a\xde\xff\xff\xff\xff\x74\x28\xd9"
    "\x7f";

TEST_F(StorageTest, FilesWrittenBeforeTheInt8LayoutLoadAndAreWrittenTheSame) {
  const std::string old_segment(kOldSegment, sizeof(kOldSegment) - 1);
  absl::StatusOr<SegmentData> seg = DecodeSegmentFile(old_segment, "seg-1.msd");
  ASSERT_THAT(seg, IsOk());
  EXPECT_EQ(seg->dim, 2);
  EXPECT_EQ(seg->dtype, DType::kFloat16);
  EXPECT_EQ(seg->ids, (std::vector<std::string>{"a", "bc"}));
  EXPECT_EQ(seg->cu_seqlens, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_TRUE(seg->scales.empty());
  std::vector<float> values(6);
  ConvertToFloat(seg->tokens.data(), DType::kFloat16, 0, 6, values.data());
  EXPECT_EQ(values, (std::vector<float>{1.f, -0.5f, 0.25f, 2.f, -3.f, 0.f}));
  EXPECT_EQ(EncodeSegmentFile(*seg), old_segment);

  const std::string old_manifest(kOldManifest, sizeof(kOldManifest) - 1);
  absl::StatusOr<Manifest> m = DecodeManifest(old_manifest, "MANIFEST");
  ASSERT_THAT(m, IsOk());
  EXPECT_EQ(m->config.name, "old");
  EXPECT_EQ(m->config.layout, Layout::kDense);
  EXPECT_EQ(m->config.storage_dtype, DType::kBFloat16);
  EXPECT_TRUE(m->config.normalize);
  EXPECT_FALSE(m->config.quantize_queries);
  ASSERT_EQ(m->segments.size(), 1u);
  EXPECT_EQ(m->segments[0].num_docs, 2);
  EXPECT_EQ(EncodeManifest(*m), old_manifest);
}

// A corpus written before corpus ids (format version 1: kOldManifest,
// and a segment in the bytes that build wrote) loads; its next write gives
// it an id, and its files from then on carry it. Its own old files stay
// legal (numbered below legacy_below); an id-less file anywhere else is
// DATA_LOSS.
TEST_F(StorageTest, CorpusWrittenBeforeCorpusIdsLoadsAndGetsOneOnItsNextWrite) {
  TempDir tmp;
  const std::string old_dir = tmp.path() + "/corpora/old";
  const std::string new_dir = tmp.path() + "/corpora/new";
  ASSERT_THAT(MakeDirectories(old_dir), IsOk());
  ASSERT_THAT(
      WriteFileDurably(old_dir + "/MANIFEST",
                       std::string(kOldManifest, sizeof(kOldManifest) - 1)),
      IsOk());
  config_.name = "old";
  config_.dim = 2;
  config_.storage_dtype = DType::kBFloat16;
  config_.normalize = true;
  ASSERT_THAT(
      WriteFileDurably(old_dir + "/seg-1.msd", EncodeSegmentFile(Docs("o", 2))),
      IsOk());
  {
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    auto report = r.LoadAll();
    ASSERT_THAT(report, IsOk());
    ASSERT_EQ(report->corpora.size(), 1u);
    EXPECT_THAT(report->corpora[0].second, IsOk());
    auto old = r.Get("old");
    ASSERT_THAT(old, IsOk());
    EXPECT_EQ((*old)->Snapshot()->live_docs(), 2);
    EXPECT_TRUE(ManifestOf(old_dir).corpus_id.empty());  // only read
    ASSERT_THAT((*old)->Append(Docs("n", 2)), IsOk());
    const Manifest m = ManifestOf(old_dir);
    EXPECT_EQ(m.corpus_id.size(), 32u);
    EXPECT_EQ(m.legacy_below, 3u);  // kOldManifest's next file number
    std::string id;
    ASSERT_THAT(DecodeSegmentFile(ReadWholeFile(old_dir + "/seg-3.msd").value(),
                                  "seg-3.msd", &id),
                IsOk());
    EXPECT_EQ(id, m.corpus_id);
    config_.name = "new";
    auto fresh = r.Create(config_);
    ASSERT_THAT(fresh, IsOk());
    ASSERT_THAT((*fresh)->Append(Docs("x", 2)), IsOk());
  }
  // The old id-less segment copied over a file that must carry an id.
  CopyFile(old_dir + "/seg-1.msd", new_dir + "/seg-1.msd");
  {
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    ASSERT_THAT(r.LoadAll(), IsOk());
    auto old = r.Get("old");
    ASSERT_THAT(old, IsOk());
    EXPECT_EQ((*old)->Snapshot()->live_docs(), 4);
    EXPECT_THAT(r.Get("new"),
                StatusIs(absl::StatusCode::kDataLoss,
                         ::testing::AllOf(HasSubstr(new_dir + "/seg-1.msd"),
                                          HasSubstr("carries no corpus id"))));
  }
  CopyFile(old_dir + "/seg-1.msd", old_dir + "/seg-3.msd");
  CorpusRegistry r(backend_.get(), limits_, tmp.path());
  ASSERT_THAT(r.LoadAll(), IsOk());
  EXPECT_THAT(r.Get("old"),
              StatusIs(absl::StatusCode::kDataLoss,
                       ::testing::AllOf(HasSubstr(old_dir + "/seg-3.msd"),
                                        HasSubstr("carries no corpus id"))));
}

TEST_F(StorageTest, Int8SegmentFileRoundTripsCodesAndScalesBitForBit) {
  config_.layout = Layout::kInt8;
  config_.storage_dtype = DType::kInt8;
  const SegmentData in = Docs("d", 7, -0.3f);
  ASSERT_EQ(in.scales.size(), static_cast<size_t>(in.cu_seqlens.back()));
  const std::string file = EncodeSegmentFile(in);
  absl::StatusOr<SegmentData> out = DecodeSegmentFile(file, "seg-1.msd");
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ(out->dtype, DType::kInt8);
  EXPECT_EQ(out->ids, in.ids);
  EXPECT_EQ(out->cu_seqlens, in.cu_seqlens);
  EXPECT_EQ(out->tokens, in.tokens);
  ASSERT_EQ(out->scales.size(), in.scales.size());
  EXPECT_EQ(std::memcmp(out->scales.data(), in.scales.data(),
                        in.scales.size() * sizeof(float)),
            0);
  const auto blocks = Blocks(file);
  ASSERT_EQ(blocks.size(), 5u);
  EXPECT_EQ(blocks[4].first, "scal");
  EXPECT_EQ(blocks[3].second.size(), in.tokens.size());  // 1 byte a value

  // Every flipped byte and every truncation is caught, the scales too.
  for (size_t at = 0; at < file.size(); ++at) {
    std::string bad = file;
    bad[at] = static_cast<char>(bad[at] ^ 0x08);
    EXPECT_THAT(DecodeSegmentFile(bad, "seg-7.msd"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("seg-7.msd")))
        << "byte " << at;
  }
  for (size_t len = 0; len < file.size(); ++len) {
    EXPECT_THAT(DecodeSegmentFile(file.substr(0, len), "seg-1.msd"),
                StatusIs(absl::StatusCode::kDataLoss))
        << "length " << len;
  }
  std::string bad = file;
  bad[file.size() - 8 - 4 - 2] ^= 1;  // inside the last scale
  EXPECT_THAT(DecodeSegmentFile(bad, "f"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("checksum mismatch in block 'scal'")));

  // Well-framed files that break the layout's rules.
  auto without_scales = blocks;
  without_scales.pop_back();
  EXPECT_THAT(
      DecodeSegmentFile(Frame(1, without_scales), "f"),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("has 0 of the blocks 'scal', 'code'; it needs 1")));
  auto short_scales = blocks;
  short_scales[4].second.resize(short_scales[4].second.size() - 4);
  EXPECT_THAT(
      DecodeSegmentFile(Frame(1, short_scales), "f"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("block 'scal' has")));
  for (float scale : {-1.f, std::numeric_limits<float>::quiet_NaN(),
                      std::numeric_limits<float>::infinity()}) {
    auto bad_scale = blocks;
    std::memcpy(bad_scale[4].second.data() + 4, &scale, 4);
    EXPECT_THAT(DecodeSegmentFile(Frame(1, bad_scale), "f"),
                StatusIs(absl::StatusCode::kDataLoss,
                         HasSubstr("scales are finite and >= 0")))
        << scale;
  }
  auto bad_code = blocks;
  bad_code[3].second[5] = static_cast<char>(-128);
  EXPECT_THAT(
      DecodeSegmentFile(Frame(1, bad_code), "f"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("int8 code -128")));
  // A float16 segment with a 'scal' block.
  config_.layout = Layout::kDense;
  config_.storage_dtype = DType::kFloat16;
  auto dense = Blocks(EncodeSegmentFile(Docs("d", 2)));
  dense.emplace_back("scal", std::string(4 * 3, '\0'));
  EXPECT_THAT(
      DecodeSegmentFile(Frame(1, dense), "f"),
      StatusIs(absl::StatusCode::kDataLoss,
               HasSubstr("has 1 of the blocks 'scal', 'code'; it needs 0")));
}

TEST_F(StorageTest, Int8ManifestKeepsQuantizeQueries) {
  Manifest m;
  m.config = config_;
  m.config.layout = Layout::kInt8;
  m.config.storage_dtype = DType::kInt8;
  for (bool quantize : {false, true}) {
    m.config.quantize_queries = quantize;
    const std::string file = EncodeManifest(m);
    absl::StatusOr<Manifest> back = DecodeManifest(file, "MANIFEST");
    ASSERT_THAT(back, IsOk());
    EXPECT_EQ(back->config.layout, Layout::kInt8);
    EXPECT_EQ(back->config.storage_dtype, DType::kInt8);
    EXPECT_EQ(back->config.quantize_queries, quantize);
    // The byte is the conf block's last.
    EXPECT_EQ(Blocks(file)[0].second.back(), quantize ? 1 : 0);
  }
  // A dense manifest has no such byte; an int8 layout with a float16 dtype,
  // or a float16 layout with the int8 dtype, is damage.
  auto blocks = Blocks(EncodeManifest(m));
  blocks[0].second.back() = 2;
  EXPECT_THAT(
      DecodeManifest(Frame(3, blocks), "MANIFEST"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("quantize_queries 2")));
  blocks[0].second.back() = 0;
  blocks[0].second[blocks[0].second.size() - 5] = 1;  // storage dtype 1
  EXPECT_THAT(
      DecodeManifest(Frame(3, blocks), "MANIFEST"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("storage dtype 1")));
  Manifest dense;
  dense.config = config_;
  auto dense_blocks = Blocks(EncodeManifest(dense));
  dense_blocks[0].second[dense_blocks[0].second.size() - 4] = 3;  // int8
  EXPECT_THAT(
      DecodeManifest(Frame(3, dense_blocks), "MANIFEST"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("storage dtype 3")));
}

// An int8 corpus reopens with the same ids, codes and scales, bit for bit,
// and ranks the same, before and after a compaction, in both query modes.
TEST_F(StorageTest, Int8CorpusReopensBitIdenticallyIncludingAfterCompaction) {
  for (bool quantize : {false, true}) {
    SCOPED_TRACE(::testing::Message() << "quantize_queries " << quantize);
    TempDir tmp;
    config_.name = "q8";
    config_.layout = Layout::kInt8;
    config_.storage_dtype = DType::kInt8;
    config_.normalize = true;
    config_.quantize_queries = quantize;
    std::vector<std::pair<std::string, std::string>> contents;
    std::vector<std::pair<std::string, float>> ranking;
    {
      CorpusRegistry r(backend_.get(), limits_, tmp.path());
      ASSERT_THAT(r.LoadAll(), IsOk());
      auto c = r.Create(config_);
      ASSERT_THAT(c, IsOk());
      for (int i = 0; i < 5; ++i) {
        ASSERT_THAT((*c)->Append(Docs(absl::StrCat("s", i, "-"), 4, i - 2.f)),
                    IsOk());
      }
      ASSERT_THAT((*c)->Delete({"s1-0", "s3-2", "s3-3"}, false), IsOk());
      contents = Contents(*(*c)->Snapshot());
      ranking = Ranking(*(*c)->Snapshot(), backend_.get());
      ASSERT_EQ(contents.size(), 17u);
      ASSERT_EQ(ranking.size(), 10u);
    }
    {
      CorpusRegistry r(backend_.get(), limits_, tmp.path());
      ASSERT_THAT(r.LoadAll(), IsOk());
      auto c = r.Get("q8");
      ASSERT_THAT(c, IsOk());
      const CorpusConfig& got = (*c)->config();
      EXPECT_EQ(got.layout, Layout::kInt8);
      EXPECT_EQ(got.storage_dtype, DType::kInt8);
      EXPECT_EQ(got.quantize_queries, quantize);
      EXPECT_EQ(Contents(*(*c)->Snapshot()), contents);
      EXPECT_EQ(Ranking(*(*c)->Snapshot(), backend_.get()), ranking);
      CompactionOptions o;
      o.seal_bytes = 1 << 20;
      ASSERT_THAT((*c)->Compact(o), IsOk());
      auto snap = (*c)->Snapshot();
      EXPECT_EQ(snap->segments().size(), 1u);
      EXPECT_EQ(snap->deleted_docs(), 0);
      EXPECT_EQ(Contents(*snap), contents);
      EXPECT_EQ(Ranking(*snap, backend_.get()), ranking);
    }
    CorpusRegistry r(backend_.get(), limits_, tmp.path());
    ASSERT_THAT(r.LoadAll(), IsOk());
    auto snap = r.Get("q8").value()->Snapshot();
    EXPECT_EQ(snap->segments().size(), 1u);
    EXPECT_EQ(Contents(*snap), contents);
    EXPECT_EQ(Ranking(*snap, backend_.get()), ranking);
  }
}

// ---------------------------------------------------------------------------
// A full disk: the fault points storage.write, storage.fsync, storage.rename

class StorageFaultTest : public StorageTest {
 protected:
  void SetUp() override { MAXSIMD_SKIP_WITHOUT_FAULT_INJECTION(); }
  void TearDown() override { fault::DisarmAll(); }

  // The corpus in `dir` as a reopen reads it.
  std::vector<std::pair<std::string, std::string>> Reopened(
      const std::string& dir) {
    StoredCorpus contents;
    auto store = CorpusStore::Open(dir, &contents);
    EXPECT_THAT(store, IsOk());
    if (!store.ok()) return {};
    auto corpus = Corpus::Restore(limits_, backend_.get(), *std::move(store),
                                  std::move(contents));
    EXPECT_THAT(corpus, IsOk());
    if (!corpus.ok()) return {};
    return Contents(*(*corpus)->Snapshot());
  }
};

constexpr const char* kStoragePoints[] = {
    fault::kStorageWrite, fault::kStorageFsync, fault::kStorageRename};

TEST_F(StorageFaultTest, FullDiskFailsAWriteNamingTheFileAndLeavesNoFile) {
  TempDir tmp;
  const std::string path = tmp.path() + "/f";
  for (const char* point : {fault::kStorageWrite, fault::kStorageFsync}) {
    fault::ScopedFault full_disk(point, fault::Schedule::Always());
    EXPECT_THAT(
        WriteFileDurably(path, "data"),
        StatusIs(absl::StatusCode::kResourceExhausted,
                 ::testing::AllOf(HasSubstr(path),
                                  HasSubstr("No space left on device"))))
        << point;
    EXPECT_FALSE(Exists(path)) << point;
  }
  // A replacement failing before its rename leaves the old file and no
  // temporary one.
  ASSERT_THAT(WriteFileDurably(path, "old"), IsOk());
  for (const char* point : kStoragePoints) {
    fault::ScopedFault full_disk(point, fault::Schedule::Once());
    EXPECT_THAT(ReplaceFileDurably(path, "new"),
                StatusIs(absl::StatusCode::kResourceExhausted,
                         HasSubstr("No space left on device")))
        << point;
    EXPECT_EQ(ReadWholeFile(path).value_or(""), "old") << point;
    EXPECT_FALSE(Exists(path + ".tmp")) << point;
  }
}

// Every hit of every point, failing once (a disk that fills, then frees
// space) and failing from then on (a disk that stays full), during an
// append and a delete of a persisted corpus.
TEST_F(StorageFaultTest, FullDiskAtAnyStepOfAWriteLeavesAConsistentCorpus) {
  const std::vector<
      std::pair<const char*, std::function<absl::Status(Corpus&)>>>
      writes = {
          {"append",
           [this](Corpus& c) { return c.Append(Docs("b", 2, 1.f)).status(); }},
          {"delete",
           [](Corpus& c) { return c.Delete({"a1"}, false).status(); }}};
  for (const auto& [what, write] : writes) {
    for (const char* point : kStoragePoints) {
      for (bool stays_full : {false, true}) {
        for (int n = 1;; ++n) {
          SCOPED_TRACE(::testing::Message()
                       << what << ", " << point << " failing at hit " << n
                       << (stays_full ? " and after" : " only"));
          ASSERT_LT(n, 50);
          TempDir tmp;
          const std::string dir = tmp.path() + "/c";
          std::shared_ptr<Corpus> corpus = PersistedCorpus(dir);
          const auto before = Contents(*corpus->Snapshot());
          const auto files = SortedFiles(dir);
          absl::Status s;
          {
            fault::ScopedFault full_disk(
                point, stays_full ? fault::Schedule{n - 1, -1}
                                  : fault::Schedule::NthHit(n));
            s = write(*corpus);
            if (fault::Failures(point) == 0) {
              ASSERT_THAT(s, IsOk());
              break;
            }
          }
          EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted,
                                  HasSubstr("No space left on device")));
          // Unchanged in memory.
          EXPECT_EQ(Contents(*corpus->Snapshot()), before);
          const auto on_disk = Reopened(dir);
          if (!stays_full) {
            // And on disk, without a file left over.
            EXPECT_EQ(on_disk, before);
            EXPECT_EQ(SortedFiles(dir), files);
          } else {
            // Where the new manifest was renamed into place and could not
            // be taken back, a restart reads the write; never a damaged
            // corpus.
            EXPECT_FALSE(on_disk.empty());
          }
          // With room again, writes go on, and a reopen reads them.
          ASSERT_THAT(corpus->Append(Docs("c", 1, 2.f)), IsOk());
          EXPECT_EQ(Reopened(dir), Contents(*corpus->Snapshot()));
        }
      }
    }
  }
}

// A snapshot failing at any hit of any point leaves nothing at its path
// nor beside it, and the earlier snapshot next to it as it was.
TEST_F(StorageFaultTest, FullDiskDuringASnapshotLeavesNoSnapshot) {
  TempDir tmp;
  CorpusRegistry r(backend_.get(), limits_);
  auto c = r.Create(config_);
  ASSERT_THAT(c, IsOk());
  ASSERT_THAT((*c)->Append(Docs("a", 6)), IsOk());
  const std::string snaps = tmp.path() + "/snaps";
  ASSERT_THAT(r.SnapshotCorpus("c", snaps + "/v1"), IsOk());
  const auto v1 = Reopened(snaps + "/v1");
  ASSERT_THAT((*c)->Append(Docs("b", 3, 1.f)), IsOk());
  ASSERT_THAT((*c)->Delete({"a2"}, false), IsOk());
  for (const char* point : kStoragePoints) {
    for (int n = 1;; ++n) {
      SCOPED_TRACE(::testing::Message() << point << " failing at hit " << n);
      ASSERT_LT(n, 50);
      const std::string path = absl::StrCat(snaps, "/v2-", point, "-", n);
      absl::StatusOr<int64_t> s;
      {
        fault::ScopedFault full_disk(point, fault::Schedule::NthHit(n));
        s = r.SnapshotCorpus("c", path);
        if (fault::Failures(point) == 0) {
          ASSERT_THAT(s, IsOk());
          EXPECT_EQ(Reopened(path), Contents(*(*c)->Snapshot()));
          ASSERT_EQ(system(absl::StrCat("rm -rf '", path, "'").c_str()), 0);
          break;
        }
      }
      EXPECT_THAT(
          s, StatusIs(absl::StatusCode::kResourceExhausted,
                      ::testing::AllOf(HasSubstr(path),
                                       HasSubstr("No space left on device"))));
      EXPECT_EQ(ListFiles(snaps).value(), std::vector<std::string>{"v1"});
      EXPECT_EQ(Reopened(snaps + "/v1"), v1);
    }
  }
}

// Switching an alias with the disk full at any step keeps the old target,
// in memory and after a reload.
TEST_F(StorageFaultTest, FullDiskWhileSwitchingAnAliasKeepsTheOldTarget) {
  TempDir tmp;
  CorpusRegistry r(backend_.get(), limits_, tmp.path());
  ASSERT_THAT(r.LoadAll(), IsOk());
  for (const char* name : {"v1", "v2"}) {
    config_.name = name;
    ASSERT_THAT(r.Create(config_), IsOk());
  }
  ASSERT_THAT(r.SetAlias("prod", "v1"), IsOk());
  const std::map<std::string, std::string> before = {{"prod", "v1"}};
  for (const char* point : kStoragePoints) {
    for (int n = 1;; ++n) {
      SCOPED_TRACE(::testing::Message() << point << " failing at hit " << n);
      ASSERT_LT(n, 20);
      absl::StatusOr<std::string> s;
      int64_t failures = 0;
      {
        fault::ScopedFault full_disk(point, fault::Schedule::NthHit(n));
        s = r.SetAlias("prod", "v2");
        failures = fault::Failures(point);
      }
      if (failures == 0) {
        ASSERT_THAT(s, IsOk());
        ASSERT_THAT(r.SetAlias("prod", "v1"), IsOk());  // for the next point
        break;
      }
      EXPECT_THAT(s, StatusIs(absl::StatusCode::kResourceExhausted));
      EXPECT_EQ(r.Aliases().value(), before);
      CorpusRegistry reloaded(backend_.get(), limits_, tmp.path());
      auto report = reloaded.LoadAll();
      ASSERT_THAT(report, IsOk());
      EXPECT_THAT(report->aliases, IsOk());
      EXPECT_EQ(reloaded.Aliases().value(), before);
    }
  }
}

}  // namespace
}  // namespace maxsimd
