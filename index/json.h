// A small JSON reader for the metadata files of the index importers
// (index/plaid.h): ColBERT's and fast-plaid's metadata.json, plan.json,
// {i}.metadata.json and doclens.{i}.json. It takes RFC 8259 JSON (objects,
// arrays, strings with escapes, numbers, true, false, null) and nothing
// else; input is untrusted, so nesting is limited to kMaxJsonDepth and every
// read is bounds-checked.
//
// Errors: DATA_LOSS naming the file and the byte offset for malformed JSON,
// NOT_FOUND for a missing file.
// Thread-safety: pure functions.
#ifndef MAXSIMD_INDEX_JSON_H_
#define MAXSIMD_INDEX_JSON_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace maxsimd {

inline constexpr int kMaxJsonDepth = 64;

struct JsonValue {
  enum class Kind { kNull, kBool, kNumber, kString, kArray, kObject };
  Kind kind = Kind::kNull;
  bool boolean = false;
  double number = 0;
  // For a number written as an integer (no fraction or exponent) that fits
  // in int64: is_integer and its exact value.
  bool is_integer = false;
  int64_t integer = 0;
  std::string str;
  std::vector<JsonValue> items;                            // kArray
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject

  // The member named `key` of an object (the last one if repeated), or
  // nullptr when absent or when this is not an object.
  const JsonValue* Find(absl::string_view key) const;
};

// Parses one JSON document (surrounding whitespace allowed); `name` is the
// file named in messages.
absl::StatusOr<JsonValue> ParseJson(absl::string_view text,
                                    absl::string_view name);
absl::StatusOr<JsonValue> ReadJsonFile(const std::string& path);

// A JSON array of integers (ColBERT's doclens.{i}.json), read without
// building a JsonValue per element. DATA_LOSS for anything else.
absl::StatusOr<std::vector<int64_t>> ParseJsonInt64Array(
    absl::string_view text, absl::string_view name);

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_JSON_H_
