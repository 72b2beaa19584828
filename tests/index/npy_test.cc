#include "index/npy.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kernels/base/half.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// A .npy image with a hand-written header (padded to `align`), as numpy or
// another writer might produce it.
std::string Image(absl::string_view header_dict, absl::string_view data,
                  int major = 1, size_t align = 64) {
  const size_t len_width = major == 1 ? 2 : 4;
  std::string header(header_dict);
  const size_t unpadded = 8 + len_width + header.size() + 1;
  header.append((align - unpadded % align) % align, ' ');
  header.push_back('\n');
  std::string out("\x93NUMPY", 6);
  out.push_back(static_cast<char>(major));
  out.push_back(0);
  for (size_t i = 0; i < len_width; ++i) {
    out.push_back(static_cast<char>((header.size() >> (8 * i)) & 0xff));
  }
  return out + header + std::string(data);
}

std::string Floats(const std::vector<float>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()),
                     v.size() * sizeof(float));
}

std::string TempPath(absl::string_view stem) {
  const char* dir = std::getenv("TMPDIR");
  return absl::StrCat(dir != nullptr ? dir : "/tmp", "/maxsimd_npy_test_",
                      getpid(), "_", stem, ".npy");
}

TEST(NpyTest, Float32RoundTripThroughFile) {
  const std::vector<float> values = {1.f, -2.5f, 3.25f, 0.f, -0.f, 1e-30f};
  const NpyArray array = MakeNpyFloat32(values, {2, 3});
  const std::string path = TempPath("f32");
  MAXSIMD_ASSERT_OK(WriteNpy(path, array));
  absl::StatusOr<NpyArray> read = ReadNpy(path);
  std::remove(path.c_str());
  MAXSIMD_ASSERT_OK(read);
  EXPECT_EQ(read->descr, "<f4");
  EXPECT_THAT(read->shape, ElementsAre(2, 3));
  EXPECT_EQ(read->num_elements(), 6);
  EXPECT_EQ(read->element_size(), 4);
  absl::StatusOr<std::vector<float>> floats = NpyToFloat32(*read, path);
  MAXSIMD_ASSERT_OK(floats);
  ASSERT_EQ(floats->size(), values.size());
  EXPECT_EQ(std::memcmp(floats->data(), values.data(), 6 * sizeof(float)), 0);
}

TEST(NpyTest, SerializedHeaderIsAlignedAndNumpyShaped) {
  const std::string image = SerializeNpy(MakeNpyInt64({7, 8, 9}, {3}));
  ASSERT_GE(image.size(), 10u);
  EXPECT_EQ(image.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  const size_t header_len = static_cast<unsigned char>(image[8]) |
                            (static_cast<unsigned char>(image[9]) << 8);
  EXPECT_EQ((10 + header_len) % 64, 0u);
  EXPECT_EQ(image[10 + header_len - 1], '\n');
  EXPECT_THAT(image.substr(10, header_len), HasSubstr("'shape': (3,)"));
  EXPECT_EQ(image.size(), 10 + header_len + 3 * 8);
}

TEST(NpyTest, Int64AndInt32ReadAsInt64) {
  absl::StatusOr<NpyArray> i8 = ParseNpy(
      SerializeNpy(MakeNpyInt64({0, 5, -3, int64_t{1} << 40}, {4})), "i8");
  MAXSIMD_ASSERT_OK(i8);
  absl::StatusOr<std::vector<int64_t>> v8 = NpyToInt64(*i8, "i8");
  MAXSIMD_ASSERT_OK(v8);
  EXPECT_THAT(*v8, ElementsAre(0, 5, -3, int64_t{1} << 40));

  const int32_t raw[] = {1, -2, 2147483647};
  absl::StatusOr<NpyArray> i4 = ParseNpy(
      Image("{'descr': '<i4', 'fortran_order': False, 'shape': (3,), }",
            absl::string_view(reinterpret_cast<const char*>(raw), sizeof(raw))),
      "i4");
  MAXSIMD_ASSERT_OK(i4);
  absl::StatusOr<std::vector<int64_t>> v4 = NpyToInt64(*i4, "i4");
  MAXSIMD_ASSERT_OK(v4);
  EXPECT_THAT(*v4, ElementsAre(1, -2, 2147483647));

  // A 2-D or float array is not a list of offsets.
  EXPECT_THAT(NpyToInt64(MakeNpyInt64({1, 2}, {1, 2}), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("1-D")));
  EXPECT_THAT(NpyToInt64(MakeNpyFloat32({1.f}, {1}), "x"),
              StatusIs(absl::StatusCode::kInvalidArgument));
}

TEST(NpyTest, Float16DecodesExactly) {
  const std::vector<float> values = {1.f, -0.5f, 65504.f, 6.1035156e-05f};
  absl::StatusOr<NpyArray> array =
      ParseNpy(SerializeNpy(MakeNpyFloat16(values, {2, 2})), "f16");
  MAXSIMD_ASSERT_OK(array);
  EXPECT_EQ(array->descr, "<f2");
  EXPECT_EQ(array->element_size(), 2);
  absl::StatusOr<std::vector<float>> floats = NpyToFloat32(*array, "f16");
  MAXSIMD_ASSERT_OK(floats);
  EXPECT_EQ(*floats, values);  // all exactly representable in fp16
}

TEST(NpyTest, HeaderVariantsParse) {
  const std::string four = Floats({1.f, 2.f, 3.f, 4.f});
  struct Case {
    std::string header;
    std::vector<int64_t> shape;
  };
  const std::vector<Case> cases = {
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", {4}},
      {"{'descr':'<f4','fortran_order':False,'shape':(4,)}", {4}},
      {"{ \"descr\" : \"<f4\" ,\n 'fortran_order' : False,\t'shape': ( 2 , 2 ) "
       "}",
       {2, 2}},
      {"{'shape': (2, 2,), 'fortran_order': False, 'descr': '<f4'}", {2, 2}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (1, 4, 1), }",
       {1, 4, 1}},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (4L,), }", {4}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    for (int major : {1, 2, 3}) {
      absl::StatusOr<NpyArray> array =
          ParseNpy(Image(c.header, four, major), "variant");
      MAXSIMD_ASSERT_OK(array);
      EXPECT_EQ(array->shape, c.shape);
      EXPECT_EQ(array->data.size(), 16u);
    }
  }
  // Older numpy aligned to 16 bytes; readers must not insist on 64.
  MAXSIMD_EXPECT_OK(ParseNpy(
      Image("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four,
            1, 16),
      "align16"));
}

TEST(NpyTest, ZeroDimensionalAndEmptyArrays) {
  absl::StatusOr<NpyArray> scalar =
      ParseNpy(Image("{'descr': '<f4', 'fortran_order': False, 'shape': (), }",
                     Floats({42.f})),
               "scalar");
  MAXSIMD_ASSERT_OK(scalar);
  EXPECT_TRUE(scalar->shape.empty());
  EXPECT_EQ(scalar->num_elements(), 1);

  absl::StatusOr<NpyArray> empty = ParseNpy(
      Image("{'descr': '<f4', 'fortran_order': False, 'shape': (0, 128), }",
            ""),
      "empty");
  MAXSIMD_ASSERT_OK(empty);
  EXPECT_THAT(empty->shape, ElementsAre(0, 128));
  EXPECT_EQ(empty->num_elements(), 0);

  // Serialising a 0-d array writes "()" and reads back the same.
  NpyArray zero_d = MakeNpyFloat32({7.f}, {});
  absl::StatusOr<NpyArray> back = ParseNpy(SerializeNpy(zero_d), "0d");
  MAXSIMD_ASSERT_OK(back);
  EXPECT_TRUE(back->shape.empty());
  EXPECT_EQ(back->data, zero_d.data);
}

TEST(NpyTest, ManyDimensionsUseVersion2) {
  // 30,000 dimensions of size 1: the header no longer fits a 16-bit length.
  NpyArray array = MakeNpyFloat32({5.f}, std::vector<int64_t>(30000, 1));
  const std::string image = SerializeNpy(array);
  EXPECT_EQ(image[6], 2);
  absl::StatusOr<NpyArray> back = ParseNpy(image, "v2");
  MAXSIMD_ASSERT_OK(back);
  EXPECT_EQ(back->shape.size(), 30000u);
  EXPECT_EQ(back->data, array.data);
}

TEST(NpyTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadNpy("/nonexistent/dir/x.npy"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("x.npy")));
}

TEST(NpyTest, EveryMagicByteFlipIsDataLoss) {
  const std::string good = SerializeNpy(MakeNpyFloat32({1.f, 2.f}, {2}));
  for (size_t i = 0; i < 6; ++i) {
    std::string bad = good;
    bad[i] ^= 0x20;
    EXPECT_THAT(ParseNpy(bad, "flipped.npy"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("flipped.npy")))
        << "byte " << i;
  }
}

TEST(NpyTest, UnsupportedVersionIsDataLoss) {
  std::string bad = SerializeNpy(MakeNpyFloat32({1.f}, {1}));
  bad[6] = 4;
  EXPECT_THAT(ParseNpy(bad, "v4"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("version 4.0")));
  bad[6] = 1;
  bad[7] = 1;
  EXPECT_THAT(ParseNpy(bad, "v1.1"), StatusIs(absl::StatusCode::kDataLoss));
}

TEST(NpyTest, EveryTruncationIsDataLoss) {
  const std::string good =
      SerializeNpy(MakeNpyFloat32({1.f, 2.f, 3.f, 4.f, 5.f, 6.f}, {3, 2}));
  for (size_t len = 0; len < good.size(); ++len) {
    EXPECT_THAT(ParseNpy(absl::string_view(good).substr(0, len), "cut.npy"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut.npy")))
        << "truncated to " << len << " of " << good.size() << " bytes";
  }
  // The last cut names what is missing.
  EXPECT_THAT(
      ParseNpy(absl::string_view(good).substr(0, good.size() - 1), "cut.npy"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated data")));
}

TEST(NpyTest, TrailingBytesAreDataLoss) {
  const std::string good = SerializeNpy(MakeNpyFloat32({1.f}, {1}));
  EXPECT_THAT(ParseNpy(good + "x", "long.npy"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("trailing")));
}

TEST(NpyTest, HeaderLengthPastEndIsDataLoss) {
  std::string bad = SerializeNpy(MakeNpyFloat32({1.f}, {1}));
  bad[8] = static_cast<char>(0xff);
  bad[9] = static_cast<char>(0xff);
  EXPECT_THAT(
      ParseNpy(bad, "hdr.npy"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated header")));
}

TEST(NpyTest, MalformedHeadersAreDataLoss) {
  const std::string data = Floats({1.f, 2.f});
  const std::vector<std::string> headers = {
      "",
      "not a dict",
      "{",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)",
      "{'descr': '<f4', 'fortran_order': False}",
      "{'descr': '<f4', 'shape': (2,)}",
      "{'fortran_order': False, 'shape': (2,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,), 'x': 1}",
      "{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2,)}",
      "{'descr': '<f4', 'fortran_order': 0, 'shape': (2,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': [2]}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2 2)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (x,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2,)} trailing",
      "{'descr: '<f4', 'fortran_order': False, 'shape': (2,)}",
      "{'descr': '<f\\x34', 'fortran_order': False, 'shape': (2,)}",
      "{'descr': '<f4' 'fortran_order': False, 'shape': (2,)}",
      "{'descr': '<f4', 'fortran_order': Falsey, 'shape': (2,)}",
      std::string("{'descr': '<f4', 'fortran_order': False, 'shape': (2,)}\0",
                  56),
      "{'descr': [[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]], "
      "'fortran_order': False, 'shape': (2,)}",
      "{'descr': [1, 2, 'fortran_order': False, 'shape': (2,)}",
      "{'descr': '<f4', 'fortran_order': False, 'shape': ('2',)}",
  };
  for (const std::string& header : headers) {
    EXPECT_THAT(ParseNpy(Image(header, data), "bad.npy"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad.npy")))
        << header;
  }
}

// fast-plaid's packed residuals: numpy writes uint8 as '|u1', tch-rs as
// '<u1'; both read as raw bytes.
TEST(NpyTest, Uint8ReadsAsRawBytes) {
  for (const char* descr : {"|u1", "<u1"}) {
    absl::StatusOr<NpyArray> a = ParseNpy(
        Image(absl::StrCat("{'descr': '", descr,
                           "', 'fortran_order': False, 'shape': (2, 3), }"),
              std::string("\x00\x01\x7f\x80\xfe\xff", 6)),
        "u1.npy");
    ASSERT_THAT(a, IsOk()) << descr;
    EXPECT_EQ(a->element_size(), 1);
    EXPECT_EQ(a->num_elements(), 6);
    EXPECT_EQ(std::string(a->data.begin(), a->data.end()),
              std::string("\x00\x01\x7f\x80\xfe\xff", 6));
  }
}

// bfloat16 in .npy files. np.save of an ml_dtypes.bfloat16 array writes
// exactly this header ('<V2': ml_dtypes' type of kind 'V' with the host's
// byte order); np.load of it gives plain 2-byte voids, which save again as
// '|V2'; `a.view(np.uint16)` saves as '<u2'. All three read with their bytes
// untouched; '<u2' is bfloat16 only when the caller says so.
TEST(NpyTest, Bfloat16EncodingsKeepTheirBytes) {
  // 1, -2.5, 0.15625, -0, 3.3895314e38 (bfloat16's largest finite), the
  // smallest normal.
  const std::string bits("\x80\x3f\x20\xc0\x20\x3e\x00\x80\x7f\x7f\x80\x00",
                         12);
  struct Case {
    const char* descr;
    bool uint16_is_bfloat16;
  };
  for (const Case& c :
       {Case{"<V2", false}, Case{"|V2", false}, Case{"<u2", true}}) {
    SCOPED_TRACE(c.descr);
    absl::StatusOr<NpyArray> a = ParseNpy(
        Image(absl::StrCat("{'descr': '", c.descr,
                           "', 'fortran_order': False, 'shape': (2, 3), }"),
              bits),
        "bf16.npy");
    ASSERT_THAT(a, IsOk());
    EXPECT_EQ(a->element_size(), 2);
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(std::string(a->data.begin(), a->data.end()), bits);
    absl::StatusOr<DType> dtype =
        NpyFloatDType(*a, "bf16.npy", c.uint16_is_bfloat16);
    ASSERT_THAT(dtype, IsOk());
    EXPECT_EQ(*dtype, DType::kBFloat16);
    // A round trip through the writer keeps the descr and the bytes.
    absl::StatusOr<NpyArray> again = ParseNpy(SerializeNpy(*a), "again.npy");
    ASSERT_THAT(again, IsOk());
    EXPECT_EQ(again->descr, c.descr);
    EXPECT_EQ(again->data, a->data);
  }
  // Unflagged uint16 is integers, not bfloat16; the message names the file
  // and the descr.
  absl::StatusOr<NpyArray> u2 = ParseNpy(
      Image("{'descr': '<u2', 'fortran_order': False, 'shape': (6,), }", bits),
      "u2.npy");
  ASSERT_THAT(u2, IsOk());
  EXPECT_THAT(
      NpyFloatDType(*u2, "u2.npy", false),
      StatusIs(absl::StatusCode::kInvalidArgument,
               ::testing::AllOf(HasSubstr("u2.npy"), HasSubstr("got '<u2'"))));
  // A big-endian host's bfloat16 is not read.
  EXPECT_THAT(
      ParseNpy(Image("{'descr': '>V2', 'fortran_order': False, 'shape': (6,), "
                     "}",
                     bits),
               "be.npy"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("unsupported dtype '>V2'")));
}

TEST(NpyTest, FloatDTypeOfEveryFloatEncoding) {
  EXPECT_EQ(NpyFloatDType(MakeNpyFloat32({1.f}, {1}), "a", false).value(),
            DType::kFloat32);
  EXPECT_EQ(NpyFloatDType(MakeNpyFloat16({1.f}, {1}), "a", false).value(),
            DType::kFloat16);
  EXPECT_EQ(NpyFloatDType(MakeNpyFloat16({1.f}, {1}), "a", true).value(),
            DType::kFloat16);
  for (const NpyArray& other :
       {MakeNpyInt64({1}, {1}), NpyArray{"|u1", {1}, {'\0'}},
        NpyArray{"<i4", {1}, std::vector<char>(4)}}) {
    EXPECT_THAT(NpyFloatDType(other, "ints.npy", true),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         ::testing::AllOf(HasSubstr("ints.npy"),
                                          HasSubstr(other.descr))));
  }
}

TEST(NpyTest, DocumentsFromTokensAndOffsets) {
  const std::vector<float> values = {1, -2, 0.5f, 4, -0.25f, 8};
  for (const bool half : {false, true}) {
    SCOPED_TRACE(half);
    const NpyArray tokens =
        half ? MakeNpyFloat16(values, {3, 2}) : MakeNpyFloat32(values, {3, 2});
    absl::StatusOr<NpyDocuments> docs = DocumentsFromNpy(
        tokens, "t.npy", MakeNpyInt64({0, 1, 3}, {3}), "cu.npy");
    ASSERT_THAT(docs, IsOk());
    EXPECT_EQ(docs->dim, 2);
    EXPECT_EQ(docs->tokens, values);
    EXPECT_EQ(docs->cu_seqlens, (std::vector<int64_t>{0, 1, 3}));
    EXPECT_EQ(docs->float16, half);
  }
  const NpyArray tokens = MakeNpyFloat32(values, {3, 2});
  EXPECT_THAT(DocumentsFromNpy(MakeNpyFloat32(values, {6}), "t.npy",
                               MakeNpyInt64({0, 6}, {2}), "cu.npy"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("'t.npy' must be a 2-D")));
  EXPECT_THAT(
      DocumentsFromNpy(tokens, "t.npy", MakeNpyInt64({0, 2}, {2}), "cu.npy"),
      StatusIs(absl::StatusCode::kInvalidArgument,
               HasSubstr("'cu.npy' must run from 0 to the 3 token "
                         "rows of 't.npy'")));
  EXPECT_THAT(
      DocumentsFromNpy(tokens, "t.npy", MakeNpyFloat32({0, 3}, {2}), "cu.npy"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("cu.npy")));
  NpyArray bf16 = tokens;
  bf16.descr = "<V2";
  bf16.data.resize(12);
  EXPECT_THAT(
      DocumentsFromNpy(bf16, "t.npy", MakeNpyInt64({0, 3}, {2}), "cu.npy"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("<V2")));
}

TEST(NpyTest, UnsupportedDescrIsInvalidArgument) {
  for (const char* descr : {"<f8", ">f4", "|i1", "<c8", "float32", ""}) {
    const std::string header = absl::StrCat(
        "{'descr': '", descr, "', 'fortran_order': False, 'shape': (2,), }");
    EXPECT_THAT(ParseNpy(Image(header, Floats({1.f, 2.f})), "descr.npy"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         HasSubstr("unsupported dtype")))
        << descr;
  }
  // A structured dtype (a list) is understood and refused the same way.
  EXPECT_THAT(
      ParseNpy(Image("{'descr': [('a', '<f4'), ('b', '<i8', (2,))], "
                     "'fortran_order': False, 'shape': (2,), }",
                     Floats({1.f, 2.f})),
               "rec.npy"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("structured")));
}

TEST(NpyTest, FortranOrderIsInvalidArgument) {
  EXPECT_THAT(
      ParseNpy(
          Image("{'descr': '<f4', 'fortran_order': True, 'shape': (1, 2), }",
                Floats({1.f, 2.f})),
          "f.npy"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Fortran")));
}

TEST(NpyTest, OverflowingShapesAreDataLossNotCrashes) {
  const std::vector<std::string> shapes = {
      "(9223372036854775807, 2)",  // product overflows
      "(4611686018427387904, 4)",  // product overflows by bytes
      "(3037000500, 3037000500, 3037000500)",
      "(99999999999999999999,)",  // does not fit in int64
      "(9223372036854775808,)",
      "(2305843009213693952,)",  // fits, times 4 bytes overflows
      "(-9223372036854775808,)",
  };
  for (const std::string& shape : shapes) {
    const std::string header = absl::StrCat(
        "{'descr': '<f4', 'fortran_order': False, 'shape': ", shape, ", }");
    EXPECT_THAT(ParseNpy(Image(header, Floats({1.f})), "huge.npy"),
                StatusIs(absl::StatusCode::kDataLoss))
        << shape;
  }
}

// Random byte mutations of a valid image never crash and never return OK
// with data that disagrees with the shape.
TEST(NpyTest, RandomMutationsAreRejectedOrConsistent) {
  const std::string good =
      SerializeNpy(MakeNpyFloat32(std::vector<float>(24, 1.f), {4, 6}));
  std::mt19937_64 rng(12345);
  int rejected = 0;
  for (int iter = 0; iter < 20000; ++iter) {
    std::string bad = good;
    const int edits = 1 + static_cast<int>(rng() % 4);
    for (int e = 0; e < edits; ++e) {
      const size_t pos = rng() % bad.size();
      bad[pos] = static_cast<char>(rng());
    }
    if (rng() % 4 == 0) bad.resize(rng() % bad.size());
    absl::StatusOr<NpyArray> result = ParseNpy(bad, "fuzz");
    if (!result.ok()) {
      ++rejected;
      continue;
    }
    EXPECT_EQ(static_cast<int64_t>(result->data.size()),
              result->num_elements() * result->element_size());
  }
  EXPECT_GT(rejected, 0);
}

}  // namespace
}  // namespace maxsimd
