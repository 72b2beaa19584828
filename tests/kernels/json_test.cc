// The JSON reader (kernels/base/json.h): the documents ColBERT and
// fast-plaid write, escapes, numbers, malformed input (DATA_LOSS naming the
// file, never a crash), and the messages of JSON embedded in another format.
#include "kernels/base/json.h"

#include <random>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;
using ::maxsimd::testing::StatusIs;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

TEST(JsonTest, ParsesAColbertMetadataDocument) {
  absl::StatusOr<JsonValue> v = ParseJson(R"({
    "config": {"dim": 128, "nbits": 2, "checkpoint": "colbert-ir/colbertv2.0",
               "index_path": null, "resume": false, "similarity": "cosine",
               "bsize": 64, "lr": 3e-06, "ncells": null},
    "num_chunks": 3,
    "num_partitions": 65536,
    "num_embeddings": 1234567,
    "avg_doclen": 66.25
  })",
                                          "metadata.json");
  ASSERT_THAT(v, IsOk());
  ASSERT_EQ(v->kind, JsonValue::Kind::kObject);
  const JsonValue* config = v->Find("config");
  ASSERT_NE(config, nullptr);
  EXPECT_EQ(config->Find("dim")->integer, 128);
  EXPECT_TRUE(config->Find("dim")->is_integer);
  EXPECT_EQ(config->Find("index_path")->kind, JsonValue::Kind::kNull);
  EXPECT_EQ(config->Find("resume")->kind, JsonValue::Kind::kBool);
  EXPECT_FALSE(config->Find("lr")->is_integer);
  EXPECT_DOUBLE_EQ(config->Find("lr")->number, 3e-06);
  EXPECT_DOUBLE_EQ(v->Find("avg_doclen")->number, 66.25);
  EXPECT_EQ(v->Find("num_embeddings")->integer, 1234567);
  EXPECT_EQ(v->Find("missing"), nullptr);
  EXPECT_EQ(config->Find("dim")->Find("x"), nullptr);  // not an object
}

TEST(JsonTest, StringsAndNumbers) {
  absl::StatusOr<JsonValue> v = ParseJson(
      R"(["a\"b\\c\/\n\t", "\u00e9\ud83d\ude00", -0, -12, 1.5E2, 9223372036854775807, 9223372036854775808, [], {}])",
      "s.json");
  ASSERT_THAT(v, IsOk());
  ASSERT_EQ(v->items.size(), 9u);
  EXPECT_EQ(v->items[0].str, "a\"b\\c/\n\t");
  EXPECT_EQ(v->items[1].str, "\xc3\xa9\xf0\x9f\x98\x80");
  EXPECT_EQ(v->items[2].integer, 0);
  EXPECT_EQ(v->items[3].integer, -12);
  EXPECT_FALSE(v->items[4].is_integer);
  EXPECT_DOUBLE_EQ(v->items[4].number, 150);
  EXPECT_EQ(v->items[5].integer, INT64_MAX);
  EXPECT_FALSE(v->items[6].is_integer);  // past int64: a double
  EXPECT_EQ(v->items[7].kind, JsonValue::Kind::kArray);
  EXPECT_EQ(v->items[8].kind, JsonValue::Kind::kObject);
}

TEST(JsonTest, Int64Arrays) {
  EXPECT_THAT(ParseJsonInt64Array("[3,1, 4 ,0]\n", "d.json").value(),
              ElementsAre(3, 1, 4, 0));
  EXPECT_TRUE(ParseJsonInt64Array(" [ ] ", "d.json").value().empty());
  for (const char* bad :
       {"", "[", "[1,]", "[1.5]", "[\"1\"]", "{}", "[1] x", "[1 2]", "[-]"}) {
    EXPECT_THAT(
        ParseJsonInt64Array(bad, "doclens.0.json"),
        StatusIs(absl::StatusCode::kDataLoss, HasSubstr("doclens.0.json")))
        << bad;
  }
}

TEST(JsonTest, MalformedDocumentsAreDataLossNamingTheFile) {
  for (const char* bad :
       {"",       "{",       "{\"a\"}",   "{\"a\":}", "{\"a\":1,}", "[1,]",
        "01",     "1.",      "-",         "1e",       "tru",        "nul",
        "\"abc",  "\"\\x\"", "\"\\u12\"", "\"a\nb\"", "{} {}",      "[1] 2",
        "{1: 2}", "'a'",     "NaN",       "+1"}) {
    EXPECT_THAT(ParseJson(bad, "bad.json"),
                StatusIs(absl::StatusCode::kDataLoss, HasSubstr("bad.json")))
        << bad;
  }
}

TEST(JsonTest, DeepNestingIsRefused) {
  const std::string deep(kMaxJsonDepth + 1, '[');
  EXPECT_THAT(ParseJson(deep + std::string(kMaxJsonDepth + 1, ']'), "d"),
              StatusIs(absl::StatusCode::kDataLoss, HasSubstr("nesting")));
  const std::string ok(kMaxJsonDepth - 1, '[');
  EXPECT_THAT(ParseJson(ok + std::string(kMaxJsonDepth - 1, ']'), "d"), IsOk());
}

TEST(JsonTest, RandomMutationsNeverCrash) {
  const std::string doc =
      R"({"config": {"dim": 16, "nbits": 2, "s": "x\u0041"}, "l": [1, 2.5, null, true]})";
  std::mt19937 rng(11);
  for (int i = 0; i < 2000; ++i) {
    std::string m = doc;
    const int edits = 1 + static_cast<int>(rng() % 3);
    for (int e = 0; e < edits; ++e) {
      const size_t at = rng() % m.size();
      switch (rng() % 3) {
        case 0:
          m[at] = static_cast<char>(rng());
          break;
        case 1:
          m.erase(at, 1 + rng() % 4);
          break;
        default:
          m.resize(at);
          break;
      }
      if (m.empty()) break;
    }
    absl::StatusOr<JsonValue> v = ParseJson(m, "m.json");
    if (!v.ok()) {
      EXPECT_EQ(v.status().code(), absl::StatusCode::kDataLoss);
    }
  }
}

TEST(JsonTest, MessagesNameTheDocumentAndTheByte) {
  EXPECT_THAT(ParseJson("[1, x]", "plan.json"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("JSON file 'plan.json': unexpected character "
                                 "'x' at byte 4")));
  EXPECT_THAT(ParseJson("{} x", "plan.json"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("bytes after the JSON value at byte 3")));
  // Embedded in another format: the caller's context and value name.
  EXPECT_THAT(ParseJsonIn("{\"a\": 1} x", "file f: header", "header object"),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("file f: header: bytes after the header "
                                 "object at byte 9")));
  absl::StatusOr<JsonValue> v = ParseJsonIn(" {\"a\": 1} ", "c", "v");
  ASSERT_THAT(v, IsOk());
  ASSERT_NE(v->Find("a"), nullptr);
  EXPECT_EQ(v->Find("a")->integer, 1);
}

}  // namespace
}  // namespace maxsimd
