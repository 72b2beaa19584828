// The PLAID importer: the fixture index in ColBERT's and in fast-plaid's
// layout decodes to the embeddings tests/data/plaid/make_fixtures.py
// computed from the bucket indices before packing; the residual bit order
// for every nbits; and corrupted copies of the fixtures (truncated zip, bad
// pickle opcode, code out of range, wrong residual width, doclens that do
// not add up, ...), each with the right status and a message naming the
// file and the limit.
#include "index/plaid.h"

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/importers.h"
#include "index/npy.h"
#include "index/torch_file.h"
#include "index/zip_reader.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

namespace fs = std::filesystem;
using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

constexpr int kDim = 16;
constexpr int kDocs = 5;

std::string Fixture(absl::string_view name) {
  return absl::StrCat(MAXSIMD_PLAID_TESTDATA, "/", name);
}

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

// A writable copy of one fixture index, removed at the end.
class IndexCopy {
 public:
  explicit IndexCopy(absl::string_view layout) {
    const char* base = std::getenv("TEST_TMPDIR");
    std::string pattern =
        absl::StrCat(base != nullptr ? base : "/tmp", "/maxsimd_plaidXXXXXX");
    std::vector<char> buf(pattern.begin(), pattern.end());
    buf.push_back('\0');
    EXPECT_NE(mkdtemp(buf.data()), nullptr);
    root_ = buf.data();
    dir_ = root_ + "/index";
    fs::copy(Fixture(layout), dir_, fs::copy_options::recursive);
  }
  ~IndexCopy() {
    std::error_code ec;
    fs::remove_all(root_, ec);
  }
  const std::string& dir() const { return dir_; }
  std::string file(absl::string_view name) const {
    return absl::StrCat(dir_, "/", name);
  }
  std::string root_file(absl::string_view name) const {
    return absl::StrCat(root_, "/", name);
  }

 private:
  std::string root_, dir_;
};

struct Expected {
  std::vector<float> tokens;
  std::vector<int64_t> cu_seqlens;
};

const Expected& Reference() {
  static const Expected* expected = [] {
    auto* e = new Expected;
    e->tokens =
        NpyToFloat32(ReadNpy(Fixture("expected_tokens.npy")).value(), "t")
            .value();
    e->cu_seqlens =
        NpyToInt64(ReadNpy(Fixture("expected_cu_seqlens.npy")).value(), "c")
            .value();
    return e;
  }();
  return *expected;
}

void ExpectFixtureDocuments(const ImportedDocuments& docs) {
  EXPECT_EQ(docs.dim, kDim);
  EXPECT_FALSE(docs.float16);
  EXPECT_EQ(docs.cu_seqlens, Reference().cu_seqlens);
  EXPECT_THAT(docs.cu_seqlens, ElementsAre(0, 3, 4, 8, 10, 15));
  ASSERT_EQ(docs.tokens.size(), Reference().tokens.size());
  for (size_t i = 0; i < docs.tokens.size(); ++i) {
    // The reference is fp32 arithmetic on the same stored values.
    ASSERT_NEAR(docs.tokens[i], Reference().tokens[i], 2e-6)
        << "token " << i / kDim << " dim " << i % kDim;
  }
  for (size_t t = 0; t * kDim < docs.tokens.size(); ++t) {
    double norm = 0;
    for (int d = 0; d < kDim; ++d) {
      norm += docs.tokens[t * kDim + d] * docs.tokens[t * kDim + d];
    }
    EXPECT_NEAR(norm, 1.0, 1e-5);
  }
}

TEST(PlaidTest, DetectsTheWriter) {
  EXPECT_EQ(DetectPlaidWriter(Fixture("colbert")).value(),
            PlaidWriter::kColbert);
  EXPECT_EQ(DetectPlaidWriter(Fixture("fast_plaid")).value(),
            PlaidWriter::kFastPlaid);
  EXPECT_STREQ(PlaidWriterName(PlaidWriter::kFastPlaid), "fast-plaid");
  EXPECT_THAT(DetectPlaidWriter(Fixture("nonexistent")),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("nonexistent")));
  EXPECT_THAT(
      DetectPlaidWriter(Fixture("torch")),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("neither centroids.pt")));
}

TEST(PlaidTest, DecodesTheColbertLayout) {
  absl::StatusOr<ImportedDocuments> docs = ReadPlaidIndex(Fixture("colbert"));
  ASSERT_THAT(docs, IsOk());
  ExpectFixtureDocuments(*docs);
  EXPECT_THAT(docs->ids, ElementsAre("0", "1", "2", "3", "4"));
}

TEST(PlaidTest, DecodesTheFastPlaidLayout) {
  absl::StatusOr<ImportedDocuments> docs =
      ReadPlaidIndex(Fixture("fast_plaid"));
  ASSERT_THAT(docs, IsOk());
  ExpectFixtureDocuments(*docs);
  EXPECT_THAT(docs->ids, ElementsAre("0", "1", "2", "3", "4"));
}

TEST(PlaidTest, ReadDocumentFilesDispatchesWithOrWithoutIds) {
  IndexCopy copy("colbert");
  WriteFile(copy.root_file("ids.txt"), "a\nb\n\nc\nd\ne\n");
  DocumentFiles files;
  files.plaid_dir = copy.dir();
  files.ids = copy.root_file("ids.txt");
  absl::StatusOr<ImportedDocuments> docs = ReadDocumentFiles(files);
  ASSERT_THAT(docs, IsOk());
  ExpectFixtureDocuments(*docs);
  EXPECT_THAT(docs->ids, ElementsAre("a", "b", "c", "d", "e"));

  files.ids.clear();
  docs = ReadDocumentFiles(files);
  ASSERT_THAT(docs, IsOk());
  EXPECT_EQ(docs->ids.size(), 5u);

  WriteFile(copy.root_file("ids.txt"), "a\nb\n");
  files.ids = copy.root_file("ids.txt");
  EXPECT_THAT(ReadDocumentFiles(files),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("ids.txt"), HasSubstr("2 ids"),
                             HasSubstr("5 documents"))));
  files.ids = copy.root_file("missing.txt");
  EXPECT_THAT(ReadDocumentFiles(files),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing.txt")));

  files.ids.clear();
  files.safetensors = "x.safetensors";
  EXPECT_THAT(ReadDocumentFiles(files),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("PLAID index directory")));
}

TEST(PlaidTest, MaxTokenValuesIsResourceExhausted) {
  PlaidOptions options;
  options.max_token_values = 15 * kDim;
  EXPECT_THAT(ReadPlaidIndex(Fixture("fast_plaid"), options), IsOk());
  options.max_token_values = 15 * kDim - 1;
  EXPECT_THAT(ReadPlaidIndex(Fixture("fast_plaid"), options),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       HasSubstr(absl::StrCat(15 * kDim - 1))));
}

// Bucket indices packed the way both writers do: each index's nbits bits,
// least significant first, dimension after dimension, packed most
// significant bit first (numpy.packbits).
std::vector<uint8_t> PackLikeTheWriters(const std::vector<int>& buckets,
                                        int nbits) {
  std::vector<int> bits;
  for (int b : buckets) {
    for (int t = 0; t < nbits; ++t) bits.push_back((b >> t) & 1);
  }
  std::vector<uint8_t> out(bits.size() / 8);
  for (size_t i = 0; i < bits.size(); ++i) {
    out[i / 8] |= static_cast<uint8_t>(bits[i] << (7 - i % 8));
  }
  return out;
}

TEST(PlaidTest, ResidualBitOrderForEveryNbits) {
  // Hand-checked bytes: dimension 0 in the high bits, each index reversed.
  const uint8_t two = 0b01101100;  // groups 01 10 11 00
  EXPECT_EQ(PlaidResidualBucket(&two, 2, 0), 2);
  EXPECT_EQ(PlaidResidualBucket(&two, 2, 1), 1);
  EXPECT_EQ(PlaidResidualBucket(&two, 2, 2), 3);
  EXPECT_EQ(PlaidResidualBucket(&two, 2, 3), 0);
  const uint8_t one = 0b10000001;
  EXPECT_EQ(PlaidResidualBucket(&one, 1, 0), 1);
  EXPECT_EQ(PlaidResidualBucket(&one, 1, 1), 0);
  EXPECT_EQ(PlaidResidualBucket(&one, 1, 7), 1);
  const uint8_t four = 0x12;  // 0001 0010
  EXPECT_EQ(PlaidResidualBucket(&four, 4, 0), 8);
  EXPECT_EQ(PlaidResidualBucket(&four, 4, 1), 4);
  const uint8_t eight = 0x01;
  EXPECT_EQ(PlaidResidualBucket(&eight, 8, 0), 128);

  std::mt19937 rng(17);
  for (int nbits : {1, 2, 4, 8}) {
    SCOPED_TRACE(nbits);
    const int dim = 32;
    std::vector<int> buckets(dim);
    for (int& b : buckets) b = static_cast<int>(rng() % (1u << nbits));
    const std::vector<uint8_t> row = PackLikeTheWriters(buckets, nbits);
    ASSERT_EQ(row.size(), static_cast<size_t>(dim * nbits / 8));
    for (int d = 0; d < dim; ++d) {
      EXPECT_EQ(PlaidResidualBucket(row.data(), nbits, d), buckets[d]) << d;
    }
    // And through the table-driven decoder.
    PlaidCodec codec;
    codec.dim = dim;
    codec.nbits = nbits;
    codec.num_centroids = 1;
    codec.centroids.assign(dim, 0.0f);
    for (int b = 0; b < (1 << nbits); ++b) {
      codec.bucket_weights.push_back(static_cast<float>(b + 1));
    }
    std::vector<float> out(dim);
    MAXSIMD_ASSERT_OK(
        DecompressPlaidEmbeddings(codec, {0}, row.data(), out.data(), "c"));
    double norm = 0;
    for (int b : buckets) norm += (b + 1.0) * (b + 1.0);
    for (int d = 0; d < dim; ++d) {
      EXPECT_NEAR(out[d], (buckets[d] + 1) / std::sqrt(norm), 1e-6) << d;
    }
  }
}

TEST(PlaidTest, ZeroVectorIsNotDividedByZero) {
  PlaidCodec codec;
  codec.dim = 8;
  codec.nbits = 1;
  codec.num_centroids = 1;
  codec.centroids.assign(8, 0.5f);
  codec.bucket_weights = {-0.5f, 0.5f};
  const uint8_t row = 0;  // every dimension in bucket 0: v = 0
  std::vector<float> out(8, 1.0f);
  MAXSIMD_ASSERT_OK(
      DecompressPlaidEmbeddings(codec, {0}, &row, out.data(), "z"));
  EXPECT_THAT(out, ::testing::Each(0.0f));
}

// --- corruption ------------------------------------------------------------

TEST(PlaidTest, TruncatedZipIsDataLossNamingTheFile) {
  IndexCopy copy("colbert");
  const std::string bytes = ReadInputFile(copy.file("1.codes.pt")).value();
  WriteFile(copy.file("1.codes.pt"), bytes.substr(0, bytes.size() / 2));
  EXPECT_THAT(ReadPlaidIndex(copy.dir()),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("1.codes.pt")));
}

TEST(PlaidTest, BadPickleOpcodeIsDataLossNamingFileAndOpcode) {
  IndexCopy copy("colbert");
  WriteFile(copy.file("centroids.pt"),
            SerializeStoredZip({{"centroids/data.pkl",
                                 "\x80\x02"
                                 "b."},
                                {"centroids/version", "3\n"}}));
  EXPECT_THAT(
      ReadPlaidIndex(copy.dir()),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr("centroids.pt"), HasSubstr("BUILD (0x62)"))));
}

TorchTensor Int32Tensor(const std::vector<int32_t>& values,
                        std::string* storage) {
  storage->assign(reinterpret_cast<const char*>(values.data()),
                  values.size() * 4);
  TorchTensor t;
  t.dtype = TorchDType::kInt32;
  t.shape = {static_cast<int64_t>(values.size())};
  t.data = *storage;
  return t;
}

TEST(PlaidTest, CodeOutOfRangeIsDataLossNamingFileAndLimit) {
  {
    IndexCopy copy("fast_plaid");
    WriteFile(copy.file("1.codes.npy"),
              SerializeNpy(MakeNpyInt64({0, 1, 2, 3, 4, 5, 8}, {7})));
    EXPECT_THAT(ReadPlaidIndex(copy.dir()),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr("1.codes.npy"), HasSubstr("code 8"),
                               HasSubstr("8 centroids"))));
  }
  {
    IndexCopy copy("colbert");
    std::string storage;
    WriteFile(copy.file("0.codes.pt"),
              SerializeTorchTensor(
                  Int32Tensor({0, 1, -1, 3, 4, 5, 6, 7}, &storage), "0"));
    EXPECT_THAT(ReadPlaidIndex(copy.dir()),
                StatusIs(absl::StatusCode::kDataLoss,
                         AllOf(HasSubstr("0.codes.pt"), HasSubstr("code -1"),
                               HasSubstr("[0, 8)"))));
  }
}

TEST(PlaidTest, WrongResidualWidthIsInvalidArgument) {
  {
    IndexCopy copy("fast_plaid");
    NpyArray residuals;
    residuals.descr = "|u1";
    residuals.shape = {8, 3};
    residuals.data.assign(24, 0);
    WriteFile(copy.file("0.residuals.npy"), SerializeNpy(residuals));
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("0.residuals.npy"), HasSubstr("(8, 3)"),
                       HasSubstr("16 x 2 / 8 = 4 bytes"))));
  }
  {
    IndexCopy copy("colbert");
    const std::string bytes(7 * 5, '\0');
    TorchTensor t;
    t.dtype = TorchDType::kUInt8;
    t.shape = {7, 5};
    t.data = bytes;
    WriteFile(copy.file("1.residuals.pt"), SerializeTorchTensor(t, "1"));
    EXPECT_THAT(ReadPlaidIndex(copy.dir()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("1.residuals.pt"),
                               HasSubstr("4 bytes wide"))));
    // Residuals that are not uint8.
    t.dtype = TorchDType::kInt8;
    t.shape = {7, 4};
    t.data = absl::string_view(bytes).substr(0, 28);
    WriteFile(copy.file("1.residuals.pt"), SerializeTorchTensor(t, "1"));
    EXPECT_THAT(ReadPlaidIndex(copy.dir()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("1.residuals.pt"),
                               HasSubstr("expected uint8"))));
  }
}

TEST(PlaidTest, ResidualRowsMustMatchCodes) {
  IndexCopy copy("fast_plaid");
  NpyArray residuals;
  residuals.descr = "|u1";
  residuals.shape = {6, 4};
  residuals.data.assign(24, 0);
  WriteFile(copy.file("1.residuals.npy"), SerializeNpy(residuals));
  EXPECT_THAT(ReadPlaidIndex(copy.dir()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("1.residuals.npy"), HasSubstr("6 rows"),
                             HasSubstr("7 codes"))));
}

TEST(PlaidTest, DoclensMismatchIsInvalidArgumentNamingTheFile) {
  for (const char* layout : {"colbert", "fast_plaid"}) {
    SCOPED_TRACE(layout);
    IndexCopy copy(layout);
    WriteFile(copy.file("doclens.0.json"), "[3, 1, 5]");
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("doclens.0.json"), HasSubstr("more than 8"),
                       HasSubstr("8 embeddings"))));
    WriteFile(copy.file("doclens.0.json"), "[3, 1]");
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("doclens.0.json"), HasSubstr("sum to 4"))));
    WriteFile(copy.file("doclens.0.json"), "[3, -1, 6]");
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kDataLoss,
                 AllOf(HasSubstr("doclens.0.json"), HasSubstr("negative"))));
    WriteFile(copy.file("doclens.0.json"), "[3, 1, 4");
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kDataLoss, HasSubstr("doclens.0.json")));
  }
}

TEST(PlaidTest, ChunkMetadataMustAgree) {
  IndexCopy copy("colbert");
  WriteFile(copy.file("1.metadata.json"),
            R"({"passage_offset": 3, "num_passages": 2, "num_embeddings": 6})");
  EXPECT_THAT(ReadPlaidIndex(copy.dir()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("1.metadata.json"),
                             HasSubstr("num_embeddings"))));
}

TEST(PlaidTest, CodecProblemsAreInvalidArgument) {
  {
    IndexCopy copy("fast_plaid");
    WriteFile(copy.file("metadata.json"), R"({"num_chunks": 2, "nbits": 3})");
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("nbits is 3"), HasSubstr("{1, 2, 4, 8}"))));
    WriteFile(copy.file("metadata.json"), R"({"num_chunks": 2, "nbits": 9})");
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("metadata.json"), HasSubstr("[1, 8]"))));
    WriteFile(copy.file("metadata.json"), R"({"num_chunks": 2})");
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kDataLoss,
                 AllOf(HasSubstr("metadata.json"), HasSubstr("'nbits'"))));
    WriteFile(copy.file("metadata.json"), R"({"num_chunks": 2, "nbits": 4})");
    EXPECT_THAT(ReadPlaidIndex(copy.dir()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("bucket_weights has 4 entries"),
                               HasSubstr("needs 16"))));
  }
  {
    IndexCopy copy("colbert");
    std::string meta = ReadInputFile(copy.file("metadata.json")).value();
    meta.replace(meta.find("\"dim\": 16"), 9, "\"dim\": 24");
    WriteFile(copy.file("metadata.json"), meta);
    EXPECT_THAT(
        ReadPlaidIndex(copy.dir()),
        StatusIs(absl::StatusCode::kInvalidArgument,
                 AllOf(HasSubstr("centroids.pt"), HasSubstr("config.dim 24"))));
  }
  {
    IndexCopy copy("colbert");
    WriteFile(copy.file("centroids.npy"), "");
    EXPECT_THAT(ReadPlaidIndex(copy.dir()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("both centroids.pt")));
  }
}

TEST(PlaidTest, MissingChunkFileIsNotFoundNamingIt) {
  IndexCopy copy("fast_plaid");
  fs::remove(copy.file("1.residuals.npy"));
  EXPECT_THAT(
      ReadPlaidIndex(copy.dir()),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("1.residuals.npy")));
  IndexCopy colbert("colbert");
  fs::remove(colbert.file("doclens.1.json"));
  EXPECT_THAT(
      ReadPlaidIndex(colbert.dir()),
      StatusIs(absl::StatusCode::kNotFound, HasSubstr("doclens.1.json")));
}

// Random byte flips and truncations of the fixture files: the importer
// returns OK or an error, never crashes.
TEST(PlaidTest, RandomCorruptionNeverCrashes) {
  std::mt19937 rng(23);
  for (const char* layout : {"colbert", "fast_plaid"}) {
    std::vector<std::string> names;
    for (const auto& e : fs::directory_iterator(Fixture(layout))) {
      names.push_back(e.path().filename().string());
    }
    IndexCopy copy(layout);
    for (int i = 0; i < 150; ++i) {
      const std::string name = names[rng() % names.size()];
      const std::string original =
          ReadInputFile(Fixture(absl::StrCat(layout, "/", name))).value();
      std::string m = original;
      if (!m.empty()) {
        if (rng() % 3 == 0) {
          m.resize(rng() % m.size());
        } else {
          for (int e = 0; e < 2; ++e) {
            m[rng() % m.size()] = static_cast<char>(rng());
          }
        }
      }
      WriteFile(copy.file(name), m);
      absl::StatusOr<ImportedDocuments> docs = ReadPlaidIndex(copy.dir());
      if (docs.ok()) {
        EXPECT_EQ(docs->tokens.size(),
                  static_cast<size_t>(docs->cu_seqlens.back() * docs->dim));
        EXPECT_EQ(docs->ids.size() + 1, docs->cu_seqlens.size());
      }
      WriteFile(copy.file(name), original);
    }
  }
  EXPECT_EQ(kDocs, 5);
}

}  // namespace
}  // namespace maxsimd
