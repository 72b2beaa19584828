// The importers (index/importers.h): ReadDocumentTokens reads each source
// kind (.npy pair, safetensors, PLAID index) without touching the ids file,
// and ReadDocumentFiles adds the ids of ReadLines with its count check. The
// PLAID index is tests/data/plaid's fixture, found through
// MAXSIMD_PLAID_TESTDATA.
#include "index/importers.h"

#include <cstdint>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/npy.h"
#include "index/safetensors.h"
#include "tests/support/status_matchers.h"
#include "tests/support/temp_dir.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::TempDir;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// Three documents of 1, 2 and 1 tokens, dim 2; values exact in fp16.
const std::vector<float> kValues = {1, -2, 0.5f, 4, -0.25f, 8, 3, 0};
const std::vector<int64_t> kCuSeqlens = {0, 1, 3, 4};

void WriteFile(const std::string& path, absl::string_view bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

// Each source kind's files in a temporary directory; `ids` names a file
// that does not exist, so that reading it would fail.
class ImportersTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(dir_.path().empty());
    ASSERT_THAT(WriteNpy(Path("t.npy"), MakeNpyFloat16(kValues, {4, 2})),
                IsOk());
    ASSERT_THAT(WriteNpy(Path("cu.npy"), MakeNpyInt64(kCuSeqlens, {4})),
                IsOk());
    SafetensorsFile st;
    st.tensors["tokens"] = {"F32", {4, 2}, Bytes(kValues)};
    st.tensors["cu_seqlens"] = {"I64", {4}, Bytes(kCuSeqlens)};
    WriteFile(Path("d.safetensors"), SerializeSafetensors(st));
  }

  std::string Path(absl::string_view name) const {
    return absl::StrCat(dir_.path(), "/", name);
  }
  DocumentFiles Npy() const {
    DocumentFiles files;
    files.tokens_npy = Path("t.npy");
    files.cu_seqlens_npy = Path("cu.npy");
    files.ids = Path("missing_ids.txt");
    return files;
  }
  DocumentFiles Safetensors() const {
    DocumentFiles files;
    files.safetensors = Path("d.safetensors");
    files.ids = Path("missing_ids.txt");
    return files;
  }
  DocumentFiles Plaid() const {
    DocumentFiles files;
    files.plaid_dir = absl::StrCat(MAXSIMD_PLAID_TESTDATA, "/colbert");
    files.ids = Path("missing_ids.txt");
    return files;
  }

  TempDir dir_{"maxsimd_importers_"};
};

TEST_F(ImportersTest, ReadDocumentTokensReadsEachSourceWithoutIds) {
  for (const bool safetensors : {false, true}) {
    SCOPED_TRACE(safetensors ? "safetensors" : "npy");
    absl::StatusOr<ImportedDocuments> docs =
        ReadDocumentTokens(safetensors ? Safetensors() : Npy());
    ASSERT_THAT(docs, IsOk());
    EXPECT_EQ(docs->dim, 2);
    EXPECT_EQ(docs->tokens, kValues);
    EXPECT_EQ(docs->cu_seqlens, kCuSeqlens);
    EXPECT_EQ(docs->float16, !safetensors);
    EXPECT_THAT(docs->ids, IsEmpty());
  }
  absl::StatusOr<ImportedDocuments> docs = ReadDocumentTokens(Plaid());
  ASSERT_THAT(docs, IsOk());
  EXPECT_EQ(docs->dim, 16);
  EXPECT_THAT(docs->cu_seqlens, ElementsAre(0, 3, 4, 8, 10, 15));
  EXPECT_EQ(docs->tokens.size(), 15u * 16);
  EXPECT_THAT(docs->ids, ElementsAre("0", "1", "2", "3", "4"));

  // ReadDocumentFiles does read the ids file.
  for (const DocumentFiles& files : {Npy(), Safetensors(), Plaid()}) {
    EXPECT_THAT(
        ReadDocumentFiles(files),
        StatusIs(absl::StatusCode::kNotFound, HasSubstr("missing_ids.txt")));
  }
}

TEST_F(ImportersTest, ReadDocumentTokensKeepsTheImportersErrors) {
  DocumentFiles files = Npy();
  files.safetensors = Path("d.safetensors");
  EXPECT_THAT(ReadDocumentTokens(files),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("give one of: a safetensors file")));
  files = Npy();
  files.cu_seqlens_npy.clear();
  EXPECT_THAT(ReadDocumentTokens(files),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("PLAID index directory")));
  EXPECT_THAT(ReadDocumentTokens(DocumentFiles{}),
              StatusIs(absl::StatusCode::kInvalidArgument));

  ASSERT_THAT(WriteNpy(Path("t1.npy"), MakeNpyFloat32(kValues, {8})), IsOk());
  files = Npy();
  files.tokens_npy = Path("t1.npy");
  EXPECT_THAT(ReadDocumentTokens(files),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("t1.npy' must be a 2-D [tokens, dim] array")));
  files = Npy();
  files.cu_seqlens_npy = Path("missing_cu.npy");
  EXPECT_THAT(ReadDocumentTokens(files), StatusIs(absl::StatusCode::kNotFound,
                                                  HasSubstr("missing_cu.npy")));

  files = Plaid();
  files.max_token_values = 15 * 16 - 1;
  EXPECT_THAT(ReadDocumentTokens(files),
              StatusIs(absl::StatusCode::kResourceExhausted));
}

TEST_F(ImportersTest, ReadDocumentFilesReadsTrimmedIdsAndCountsThem) {
  WriteFile(Path("ids.txt"), "  a\n\nb \r\nc\n");
  DocumentFiles files = Npy();
  files.ids = Path("ids.txt");
  absl::StatusOr<ImportedDocuments> docs = ReadDocumentFiles(files);
  ASSERT_THAT(docs, IsOk());
  EXPECT_THAT(docs->ids, ElementsAre("a", "b", "c"));
  EXPECT_EQ(docs->cu_seqlens, kCuSeqlens);

  WriteFile(Path("ids.txt"), "a\nb\n");
  EXPECT_THAT(ReadDocumentFiles(files),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("the offsets have 4 entries"),
                             HasSubstr("ids.txt' has 2 ids"))));
  files.ids.clear();
  EXPECT_THAT(
      ReadDocumentFiles(files),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("ids file")));
  // Without ids, a PLAID index keeps its passage ids.
  files = Plaid();
  files.ids.clear();
  docs = ReadDocumentFiles(files);
  ASSERT_THAT(docs, IsOk());
  EXPECT_THAT(docs->ids, ElementsAre("0", "1", "2", "3", "4"));
}

}  // namespace
}  // namespace maxsimd
