// The torch.save reader: files PyTorch wrote (every dtype, storage offsets,
// shared storages, scalars, dicts; tests/data/plaid/make_fixtures.py),
// round trips of our own writer, and malformed pickles and archives, each
// with the right status and a message naming the file (and the opcode).
#include "index/torch_file.h"

#include <cstdint>
#include <cstring>
#include <iterator>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/importers.h"
#include "index/zip_reader.h"
#include "kernels/base/half.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string Fixture(absl::string_view name) {
  return absl::StrCat(MAXSIMD_PLAID_TESTDATA, "/", name);
}

// A torch.save-like archive around a hand-written pickle.
std::string Pt(std::string pickle,
               std::vector<std::pair<std::string, std::string>> records = {}) {
  records.insert(records.begin(), {"t/data.pkl", std::move(pickle)});
  return SerializeStoredZip(records);
}

// Opcodes, spelled out for the hand-written pickles.
const std::string kProto = "\x80\x02";
const std::string kRebuild = "ctorch._utils\n_rebuild_tensor_v2\n";
const std::string kHooks = "ccollections\nOrderedDict\n)R";

std::string Unicode(absl::string_view s) {
  std::string out = "X";
  for (int i = 0; i < 4; ++i)
    out.push_back(static_cast<char>(s.size() >> (8 * i)));
  return out + std::string(s);
}
std::string Int1(int v) { return std::string("K") + static_cast<char>(v); }

// _rebuild_tensor_v2 of a FloatStorage of `numel` at key "0".
std::string FloatTensorPickle(int numel, int offset, int size, int stride) {
  return kProto + kRebuild + "((" + Unicode("storage") +
         "ctorch\nFloatStorage\n" + Unicode("0") + Unicode("cpu") +
         Int1(numel) + "tQ" + Int1(offset) + Int1(size) + "\x85" +
         Int1(stride) + "\x85" + "\x89" + kHooks + "tR.";
}

std::string Floats(std::vector<float> v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * 4);
}

TEST(TorchFileTest, ReadsEveryDtypeTorchWrites) {
  absl::StatusOr<TorchValue> v = ReadTorchFile(Fixture("torch/dtypes.pt"));
  ASSERT_THAT(v, IsOk());
  ASSERT_EQ(v->kind, TorchValue::Kind::kList);
  const TorchDType expected[] = {TorchDType::kFloat32,  TorchDType::kFloat16,
                                 TorchDType::kBFloat16, TorchDType::kFloat64,
                                 TorchDType::kInt8,     TorchDType::kInt16,
                                 TorchDType::kInt32,    TorchDType::kInt64,
                                 TorchDType::kUInt8,    TorchDType::kBool};
  ASSERT_EQ(v->items.size(), std::size(expected));
  for (size_t i = 0; i < v->items.size(); ++i) {
    SCOPED_TRACE(TorchDTypeName(expected[i]));
    ASSERT_EQ(v->items[i].kind, TorchValue::Kind::kTensor);
    const TorchTensor& t = v->items[i].tensor;
    EXPECT_EQ(t.dtype, expected[i]);
    EXPECT_THAT(t.shape, ElementsAre(2, 3));
    EXPECT_EQ(t.data.size(), 6u * TorchDTypeSize(t.dtype));
    if (i < 4) {
      EXPECT_THAT(TorchTensorToFloat32(t, "f").value(),
                  ElementsAre(-2, -1, 0, 1, 2, 3));
      EXPECT_THAT(TorchTensorToInt64(t, "f"),
                  StatusIs(absl::StatusCode::kInvalidArgument));
    } else if (i < 8) {
      EXPECT_THAT(TorchTensorToInt64(t, "i").value(),
                  ElementsAre(-2, -1, 0, 1, 2, 3));
      EXPECT_THAT(TorchTensorToFloat32(t, "i"),
                  StatusIs(absl::StatusCode::kInvalidArgument,
                           HasSubstr("floating-point")));
    } else if (i == 8) {
      EXPECT_THAT(TorchTensorToInt64(t, "u").value(),
                  ElementsAre(0, 1, 2, 3, 4, 5));
    } else {
      EXPECT_THAT(TorchTensorToInt64(t, "b").value(),
                  ElementsAre(0, 0, 0, 1, 1, 1));
    }
  }
}

TEST(TorchFileTest, ViewsAtStorageOffsetsShareTheFileBytes) {
  absl::StatusOr<TorchValue> v = ReadTorchFile(Fixture("torch/views.pt"));
  ASSERT_THAT(v, IsOk());
  ASSERT_EQ(v->kind, TorchValue::Kind::kTuple);
  ASSERT_EQ(v->items.size(), 3u);
  EXPECT_THAT(TorchTensorToInt64(v->items[0].tensor, "v").value(),
              ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(TorchTensorToInt64(v->items[1].tensor, "v").value(),
              ElementsAre(3, 4, 5, 6));
  EXPECT_THAT(TorchTensorToInt64(v->items[2].tensor, "v").value(),
              ElementsAre(8, 9));
  // One storage record: the views point into the same bytes.
  EXPECT_EQ(v->items[0].tensor.data.data(), v->items[1].tensor.data.data());
  EXPECT_EQ(v->items[2].tensor.data.data() - v->items[0].tensor.data.data(),
            5 * 8);
  EXPECT_EQ(v->items[0].tensor.owner, v->items[2].tensor.owner);
}

TEST(TorchFileTest, ScalarsStringsDictsAndZeroDimTensors) {
  absl::StatusOr<TorchValue> v = ReadTorchFile(Fixture("torch/scalars.pt"));
  ASSERT_THAT(v, IsOk());
  ASSERT_EQ(v->items.size(), 10u);
  EXPECT_EQ(v->items[0].integer, 1);
  EXPECT_EQ(v->items[1].integer, -70000);
  EXPECT_EQ(v->items[2].integer, int64_t{1} << 40);
  EXPECT_EQ(v->items[3].integer, -(int64_t{1} << 40));
  EXPECT_EQ(v->items[4].kind, TorchValue::Kind::kFloat);
  EXPECT_EQ(v->items[4].number, 0.5);
  EXPECT_TRUE(v->items[5].boolean);
  EXPECT_EQ(v->items[6].kind, TorchValue::Kind::kBool);
  EXPECT_FALSE(v->items[6].boolean);
  EXPECT_EQ(v->items[7].kind, TorchValue::Kind::kNone);
  EXPECT_EQ(v->items[8].str, "s");
  const TorchValue& dict = v->items[9];
  ASSERT_EQ(dict.kind, TorchValue::Kind::kDict);
  ASSERT_EQ(dict.items.size(), 2u);
  EXPECT_EQ(dict.items[0].str, "k");
  EXPECT_THAT(dict.items[1].tensor.shape, ElementsAre(0, 4));
  EXPECT_EQ(dict.items[1].tensor.num_elements(), 0);

  absl::StatusOr<TorchValue> od =
      ReadTorchFile(Fixture("torch/ordered_dict.pt"));
  ASSERT_THAT(od, IsOk());
  ASSERT_EQ(od->kind, TorchValue::Kind::kDict);
  ASSERT_EQ(od->items.size(), 2u);
  EXPECT_EQ(od->items[0].str, "a");
  EXPECT_THAT(TorchTensorToFloat32(od->items[1].tensor, "od").value(),
              ElementsAre(1, 1));

  absl::StatusOr<TorchValue> avg =
      ReadTorchFile(Fixture("colbert/avg_residual.pt"));
  ASSERT_THAT(avg, IsOk());
  EXPECT_EQ(avg->tensor.dtype, TorchDType::kFloat16);
  EXPECT_TRUE(avg->tensor.shape.empty());
  EXPECT_EQ(avg->tensor.num_elements(), 1);
}

TEST(TorchFileTest, NonContiguousTensorsAreInvalidArgument) {
  EXPECT_THAT(ReadTorchFile(Fixture("torch/transposed.pt")),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("transposed.pt"),
                             HasSubstr("non-contiguous strides (1,3)"))));
}

TEST(TorchFileTest, SerializedTensorsRoundTrip) {
  TorchTensor a;
  a.dtype = TorchDType::kFloat16;
  a.shape = {2, 2};
  std::string bytes;
  for (float f : {1.f, -0.5f, 2.f, 1024.f}) {
    const uint16_t h = FloatToHalf(f);
    bytes.append(reinterpret_cast<const char*>(&h), 2);
  }
  a.data = bytes;
  absl::StatusOr<TorchValue> one =
      ParseTorchFile(SerializeTorchTensor(a, "one"), "one.pt");
  ASSERT_THAT(one, IsOk());
  EXPECT_EQ(one->tensor.dtype, TorchDType::kFloat16);
  EXPECT_THAT(TorchTensorToFloat32(one->tensor, "one").value(),
              ElementsAre(1, -0.5, 2, 1024));

  TorchTensor b;
  b.dtype = TorchDType::kInt32;
  b.shape = {3};
  const std::vector<int32_t> ints = {7, -8, 1 << 30};
  const std::string int_bytes(reinterpret_cast<const char*>(ints.data()), 12);
  b.data = int_bytes;
  absl::StatusOr<TorchValue> tuple =
      ParseTorchFile(SerializeTorchTensorTuple({a, b}, "two"), "two.pt");
  ASSERT_THAT(tuple, IsOk());
  ASSERT_EQ(tuple->kind, TorchValue::Kind::kTuple);
  ASSERT_EQ(tuple->items.size(), 2u);
  EXPECT_THAT(TorchTensorToInt64(tuple->items[1].tensor, "b").value(),
              ElementsAre(7, -8, 1 << 30));
}

TEST(TorchFileTest, HandWrittenTensorPickleParses) {
  absl::StatusOr<TorchValue> v = ParseTorchFile(
      Pt(FloatTensorPickle(4, 1, 2, 1), {{"t/data/0", Floats({0, 1, 2, 3})}}),
      "h.pt");
  ASSERT_THAT(v, IsOk());
  EXPECT_THAT(TorchTensorToFloat32(v->tensor, "h").value(), ElementsAre(1, 2));
}

TEST(TorchFileTest, BadOpcodesAreDataLossNamingFileAndOpcode) {
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "o."), "obj.pt"),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("obj.pt"), HasSubstr("OBJ (0x6f)"),
                             HasSubstr("at byte 2"))));
  EXPECT_THAT(
      ParseTorchFile(Pt(kProto + "\xff."), "ff.pt"),
      StatusIs(absl::StatusCode::kDataLoss,
               AllOf(HasSubstr("ff.pt"), HasSubstr("unknown opcode 0xff"))));
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "cos\nsystem\n)R."), "g.pt"),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("g.pt"), HasSubstr("'os.system'"))));
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "ctorch\nFloatStorage\n)R."), "r.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("REDUCE")));
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "N"), "nostop.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("without STOP")));
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "NN."), "two.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("STOP")));
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "t."), "nomark.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("no MARK")));
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "h\x05."), "memo.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("memo entry 5")));
  EXPECT_THAT(
      ParseTorchFile(Pt(kProto + "X\xff\xff\xff\x7f"
                                 "abc."),
                     "s.pt"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("truncated argument")));
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "(N\x30."), "popmark.pt"),
              StatusIs(absl::StatusCode::kDataLoss));
}

TEST(TorchFileTest, StorageProblemsAreDataLoss) {
  // The storage record is missing.
  EXPECT_THAT(ParseTorchFile(Pt(FloatTensorPickle(4, 0, 4, 1)), "m.pt"),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("m.pt"), HasSubstr("t/data/0"))));
  // The record is shorter than numel x 4 bytes.
  EXPECT_THAT(ParseTorchFile(Pt(FloatTensorPickle(4, 0, 4, 1),
                                {{"t/data/0", Floats({1, 2, 3})}}),
                             "short.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("12 bytes")));
  // The tensor runs past its storage.
  EXPECT_THAT(
      ParseTorchFile(Pt(FloatTensorPickle(4, 2, 3, 1),
                        {{"t/data/0", Floats({1, 2, 3, 4})}}),
                     "past.pt"),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("outside its storage")));
  // A bare storage is not a value.
  EXPECT_THAT(ParseTorchFile(Pt(kProto + "(" + Unicode("storage") +
                                "ctorch\nFloatStorage\n" + Unicode("0") +
                                Unicode("cpu") + Int1(0) + "tQ."),
                             "bare.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bare")));
}

TEST(TorchFileTest, VariantsThisReaderDoesNotTakeAreInvalidArgument) {
  EXPECT_THAT(
      ParseTorchFile(Pt(FloatTensorPickle(1, 0, 1, 1),
                        {{"t/data/0", Floats({1})}, {"t/byteorder", "big"}}),
                     "be.pt"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("'big'")));
  EXPECT_THAT(ParseTorchFile(kProto + "\x8a\x0alegacy", "old.pt"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("old.pt"), HasSubstr("legacy"))));
  EXPECT_THAT(ParseTorchFile(SerializeStoredZip({{"x/other", "1"}}), "np.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("data.pkl")));
}

TEST(TorchFileTest, NestingAndSharingAreBounded) {
  std::string deep = kProto + ")";
  for (int i = 0; i < 40; ++i) deep += "\x85";  // TUPLE1
  EXPECT_THAT(ParseTorchFile(Pt(deep + "."), "deep.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("nested")));
  // (x, x) nested 30 times shares 30 values but would expand to 2^30.
  std::string wide = kProto + ")";
  for (int i = 0; i < 30; ++i) wide += "2\x86";  // DUP, TUPLE2
  EXPECT_THAT(ParseTorchFile(Pt(wide + "."), "wide.pt"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("more than")));
  // A list appended to itself is copied, not made a cycle.
  absl::StatusOr<TorchValue> self =
      ParseTorchFile(Pt(kProto + std::string("]q\0h\0a.", 7)), "self.pt");
  ASSERT_THAT(self, IsOk());
  ASSERT_EQ(self->items.size(), 1u);
  EXPECT_TRUE(self->items[0].items.empty());
}

TEST(TorchFileTest, EveryTruncationIsDataLossNamingTheFile) {
  absl::StatusOr<std::string> bytes =
      ReadInputFile(Fixture("colbert/buckets.pt"));
  ASSERT_THAT(bytes, IsOk());
  for (size_t n = 0; n < bytes->size(); n += 7) {
    absl::StatusOr<TorchValue> v =
        ParseTorchFile(bytes->substr(0, n), "cut.pt");
    EXPECT_THAT(v, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("cut.pt")))
        << n;
  }
}

TEST(TorchFileTest, RandomPickleMutationsNeverCrash) {
  absl::StatusOr<std::string> bytes =
      ReadInputFile(Fixture("torch/scalars.pt"));
  ASSERT_THAT(bytes, IsOk());
  std::vector<std::pair<std::string, std::string>> records;
  std::string pickle;
  const std::vector<ZipEntry> entries = ParseStoredZip(*bytes, "s").value();
  for (const ZipEntry& e : entries) {
    records.emplace_back(e.name, std::string(e.data));
    if (e.name == "scalars/data.pkl") pickle = std::string(e.data);
  }
  ASSERT_FALSE(pickle.empty());
  std::mt19937 rng(3);
  for (int i = 0; i < 3000; ++i) {
    std::string m = pickle;
    for (int e = 0; e < 2; ++e) {
      const size_t at = rng() % m.size();
      if (rng() % 4 == 0) {
        m.erase(at, 1);
      } else {
        m[at] = static_cast<char>(rng());
      }
    }
    auto mutated = records;
    for (auto& [name, data] : mutated) {
      if (name == "scalars/data.pkl") data = m;
    }
    absl::StatusOr<TorchValue> v =
        ParseTorchFile(SerializeStoredZip(mutated), "m.pt");
    if (!v.ok()) {
      EXPECT_THAT(v.status().code(),
                  ::testing::AnyOf(absl::StatusCode::kDataLoss,
                                   absl::StatusCode::kInvalidArgument));
    }
  }
}

TEST(TorchFileTest, MissingFileIsNotFound) {
  EXPECT_THAT(ReadTorchFile("/nonexistent/x.pt"),
              StatusIs(absl::StatusCode::kNotFound));
}

}  // namespace
}  // namespace maxsimd
