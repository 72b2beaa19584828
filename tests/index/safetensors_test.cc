// The safetensors reader: round trips of every dtype the importer takes,
// headers with escapes and whitespace, malformed files (DATA_LOSS naming the
// file), unknown dtypes, documents read as tokens + cu_seqlens, and a
// query's tensor read in its own dtype.
#include "index/safetensors.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/base/half.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(T));
}

SafetensorsFile Documents(const std::string& token_dtype) {
  SafetensorsFile f;
  // Three documents of 1, 2 and 1 tokens, dim 2; values exact in fp16/bf16.
  const std::vector<float> values = {1, -2, 0.5f, 4, -0.25f, 8, 3, 0};
  SafetensorsTensor tokens;
  tokens.dtype = token_dtype;
  tokens.shape = {4, 2};
  if (token_dtype == "F32") {
    tokens.data = Bytes(values);
  } else {
    std::vector<uint16_t> h;
    for (float v : values) {
      uint32_t bits;
      std::memcpy(&bits, &v, 4);
      h.push_back(token_dtype == "F16" ? FloatToHalf(v)
                                       : static_cast<uint16_t>(bits >> 16));
    }
    tokens.data = Bytes(h);
  }
  f.tensors["tokens"] = tokens;
  SafetensorsTensor cu;
  cu.dtype = "I64";
  cu.shape = {4};
  cu.data = Bytes(std::vector<int64_t>{0, 1, 3, 4});
  f.tensors["cu_seqlens"] = cu;
  f.metadata["model"] = "colbert \"v2\"\n";
  return f;
}

TEST(SafetensorsTest, RoundTripsTensorsAndMetadata) {
  const SafetensorsFile in = Documents("F32");
  absl::StatusOr<SafetensorsFile> out =
      ParseSafetensors(SerializeSafetensors(in), "a.safetensors");
  ASSERT_THAT(out, IsOk());
  EXPECT_EQ(out->metadata, in.metadata);
  ASSERT_EQ(out->tensors.size(), 2u);
  EXPECT_EQ(out->tensors.at("tokens").shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(out->tensors.at("tokens").data, in.tensors.at("tokens").data);
  EXPECT_EQ(out->tensors.at("cu_seqlens").data,
            in.tensors.at("cu_seqlens").data);
}

TEST(SafetensorsTest, DocumentsFromEveryTokenDtype) {
  for (const std::string dtype : {"F32", "F16", "BF16"}) {
    SCOPED_TRACE(dtype);
    absl::StatusOr<SafetensorsDocuments> docs =
        DocumentsFromSafetensors(Documents(dtype), "d");
    ASSERT_THAT(docs, IsOk());
    EXPECT_EQ(docs->dim, 2);
    EXPECT_EQ(docs->cu_seqlens, (std::vector<int64_t>{0, 1, 3, 4}));
    EXPECT_EQ(docs->tokens,
              (std::vector<float>{1, -2, 0.5f, 4, -0.25f, 8, 3, 0}));
    EXPECT_EQ(docs->float16, dtype == "F16");
  }
  SafetensorsFile bad = Documents("F32");
  bad.tensors.at("cu_seqlens").data = Bytes(std::vector<int64_t>{0, 2, 1, 4});
  EXPECT_THAT(
      DocumentsFromSafetensors(bad, "d"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not decrease")));
  bad = Documents("F32");
  bad.tensors.erase("cu_seqlens");
  EXPECT_THAT(
      DocumentsFromSafetensors(bad, "d"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cu_seqlens")));
  bad = Documents("F32");
  bad.tensors.at("tokens").dtype = "I32";
  EXPECT_THAT(DocumentsFromSafetensors(bad, "d"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("expected F32, F16 or BF16")));
}

// A query read as it is stored: the tensor "query", else the only one, or
// the one named; BF16 (native in safetensors) comes back as bfloat16 with
// its bytes untouched, as do F32 and F16.
TEST(SafetensorsTest, FloatTensorKeepsTheFilesDtypeAndBytes) {
  // 1, -2.5, 0.15625, -0 as bfloat16.
  const std::string bits =
      Bytes(std::vector<uint16_t>{0x3f80, 0xc020, 0x3e20, 0x8000});
  SafetensorsTensor bf16;
  bf16.dtype = "BF16";
  bf16.shape = {2, 2};
  bf16.data = bits;
  SafetensorsFile file;
  file.tensors["query"] = bf16;
  file.tensors["other"] = Documents("F32").tensors.at("tokens");
  absl::StatusOr<SafetensorsFile> parsed =
      ParseSafetensors(SerializeSafetensors(file), "q.safetensors");
  ASSERT_THAT(parsed, IsOk());

  absl::StatusOr<SafetensorsFloatTensor> q =
      FloatTensorFromSafetensors(*parsed, "", "q.safetensors", false);
  ASSERT_THAT(q, IsOk());
  EXPECT_EQ(q->name, "query");
  EXPECT_EQ(q->dtype, DType::kBFloat16);
  EXPECT_EQ(q->tensor->shape, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(q->tensor->data, bits);
  EXPECT_EQ(q->tensor, &parsed->tensors.at("query"));  // not a copy

  q = FloatTensorFromSafetensors(*parsed, "other", "q.safetensors", false);
  ASSERT_THAT(q, IsOk());
  EXPECT_EQ(q->name, "other");
  EXPECT_EQ(q->dtype, DType::kFloat32);

  // One tensor of any name is the query.
  for (const std::string dtype : {"F32", "F16", "BF16"}) {
    SafetensorsFile one;
    one.tensors["embeddings"] = Documents(dtype).tensors.at("tokens");
    q = FloatTensorFromSafetensors(one, "", "one", false);
    ASSERT_THAT(q, IsOk()) << dtype;
    EXPECT_EQ(q->name, "embeddings");
    EXPECT_EQ(q->dtype, dtype == "F32"   ? DType::kFloat32
                        : dtype == "F16" ? DType::kFloat16
                                         : DType::kBFloat16);
    EXPECT_EQ(q->tensor->data, one.tensors.at("embeddings").data);
  }
}

TEST(SafetensorsTest, FloatTensorRefusalsNameTheFileAndTensor) {
  SafetensorsFile two = Documents("F32");  // "tokens" and "cu_seqlens"
  EXPECT_THAT(FloatTensorFromSafetensors(two, "", "two.safetensors", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       ::testing::AllOf(HasSubstr("two.safetensors"),
                                        HasSubstr("no tensor \"query\""),
                                        HasSubstr("\"cu_seqlens\", "
                                                  "\"tokens\""))));
  EXPECT_THAT(FloatTensorFromSafetensors(two, "q", "two.safetensors", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("no tensor \"q\"")));
  EXPECT_THAT(
      FloatTensorFromSafetensors(two, "cu_seqlens", "two.safetensors", false),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("tensor \"cu_seqlens\" has dtype I64; expected "
                         "F32, F16 or BF16")));
  EXPECT_THAT(
      FloatTensorFromSafetensors(SafetensorsFile(), "", "e", false),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("it has none")));
  // U16 holds bfloat16 bits only when the caller says so.
  SafetensorsFile u16;
  u16.tensors["query"].dtype = "U16";
  u16.tensors["query"].shape = {1, 2};
  u16.tensors["query"].data = Bytes(std::vector<uint16_t>{0x3f80, 0xc020});
  EXPECT_THAT(
      FloatTensorFromSafetensors(u16, "", "u", false),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("has dtype U16")));
  absl::StatusOr<SafetensorsFloatTensor> q =
      FloatTensorFromSafetensors(u16, "", "u", true);
  ASSERT_THAT(q, IsOk());
  EXPECT_EQ(q->dtype, DType::kBFloat16);
}

// A file written by hand: whitespace, escapes, the order of fields.
TEST(SafetensorsTest, ParsesAHandWrittenHeader) {
  const std::string header =
      " { \"__metadata__\" : { \"format\" : \"pt\" } ,\n"
      "   \"a\\u0062\" : { \"shape\" : [ 2 ] , \"data_offsets\" : [ 0 , 8 ],"
      " \"dtype\" : \"I32\" } } ";
  std::string file(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(file.data(), &n, 8);
  file += header + Bytes(std::vector<int32_t>{7, -1});
  absl::StatusOr<SafetensorsFile> f = ParseSafetensors(file, "h");
  ASSERT_THAT(f, IsOk());
  EXPECT_EQ(f->metadata.at("format"), "pt");
  ASSERT_EQ(f->tensors.count("ab"), 1u);
  EXPECT_EQ(f->tensors.at("ab").data, Bytes(std::vector<int32_t>{7, -1}));
}

TEST(SafetensorsTest, MalformedFilesAreDataLossNamingTheFile) {
  const std::string good = SerializeSafetensors(Documents("F32"));
  uint64_t header_len;
  std::memcpy(&header_len, good.data(), 8);
  const std::string header = good.substr(8, header_len);
  const std::string data = good.substr(8 + header_len);
  auto with_header = [&](const std::string& h, const std::string& d) {
    std::string f(8, '\0');
    const uint64_t n = h.size();
    std::memcpy(f.data(), &n, 8);
    return f + h + d;
  };
  struct Case {
    std::string file;
    std::string why;
  };
  const Case cases[] = {
      {good.substr(0, 5), "shorter than"},
      {good.substr(0, 8 + header_len / 2), "runs past the file"},
      {with_header("{\"x\": tru}", ""), "unexpected character"},
      {with_header("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], "
                   "\"data_offsets\": [0, 8]}}",
                   std::string(8, '\0')),
       "has 8 bytes; F32 of its shape needs 4"},
      {with_header("{\"x\": {\"dtype\": \"F32\", \"shape\": [1], "
                   "\"data_offsets\": [0, 4]}}",
                   ""),
       "outside the 0 data bytes"},
      {with_header("{\"x\": {\"dtype\": \"F32\", \"shape\": [2], "
                   "\"data_offsets\": [0, 8]}, \"y\": {\"dtype\": \"F32\", "
                   "\"shape\": [1], \"data_offsets\": [4, 8]}}",
                   std::string(8, '\0')),
       "overlap"},
      {with_header(header + " x", data), "bytes after the header object"},
  };
  for (const Case& c : cases) {
    EXPECT_THAT(ParseSafetensors(c.file, "bad.safetensors"),
                StatusIs(absl::StatusCode::kDataLoss,
                         ::testing::AllOf(HasSubstr("bad.safetensors"),
                                          HasSubstr(c.why))))
        << c.why;
  }
  EXPECT_THAT(
      ParseSafetensors(with_header("{\"x\": {\"dtype\": \"F8_E4M3\", "
                                   "\"shape\": [1], \"data_offsets\": [0, 1]}}",
                                   std::string(1, '\0')),
                       "f"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("F8_E4M3")));
  EXPECT_THAT(ReadSafetensors("/nonexistent/x.safetensors"),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace maxsimd
