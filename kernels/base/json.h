// The project's one JSON reader, for the JSON that arrives inside files we
// import: the metadata files of PLAID indexes (ColBERT's and fast-plaid's
// metadata.json, plan.json, {i}.metadata.json, doclens.{i}.json; see
// index/plaid.h) and the header of a safetensors file (index/safetensors.h).
// It takes RFC 8259 JSON (objects, arrays, strings with escapes, numbers,
// true, false, null) and nothing else; input is untrusted, so nesting is
// limited to kMaxJsonDepth and every read is bounds-checked. It reads text
// the caller already holds: reading the file is the caller's (the importers
// use ReadInputFile, index/importers.h), and so is checking that the value
// has the shape the format wants.
//
// Errors: DATA_LOSS for malformed JSON, the message naming the document and
// the byte offset of the fault.
// Thread-safety: pure functions.
#ifndef MAXSIMD_KERNELS_BASE_JSON_H_
#define MAXSIMD_KERNELS_BASE_JSON_H_

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
  std::vector<std::pair<std::string, JsonValue>> members;  // kObject, in order

  // The member named `key` of an object (the last one if repeated), or
  // nullptr when absent or when this is not an object.
  const JsonValue* Find(absl::string_view key) const;
};

// Parses one JSON document (surrounding whitespace allowed); `name` is the
// file named in messages: "JSON file '<name>': <what> at byte <offset>".
absl::StatusOr<JsonValue> ParseJson(absl::string_view text,
                                    absl::string_view name);

// ParseJson for JSON embedded in a format of its own (the safetensors
// header): every message reads "<context>: <what> at byte <offset>", the
// offset from the start of `text`, and bytes other than whitespace after
// the value are "bytes after the <value_name>".
absl::StatusOr<JsonValue> ParseJsonIn(absl::string_view text,
                                      absl::string_view context,
                                      absl::string_view value_name);

// A JSON array of integers (ColBERT's doclens.{i}.json), read without
// building a JsonValue per element; `name` as in ParseJson. DATA_LOSS for
// anything else.
absl::StatusOr<std::vector<int64_t>> ParseJsonInt64Array(
    absl::string_view text, absl::string_view name);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_BASE_JSON_H_
