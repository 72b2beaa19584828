#include "kernels/base/json.h"

#include <cstdlib>
#include <limits>
#include <string>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {
namespace {

bool IsSpace(char c) { return c == ' ' || c == '\n' || c == '\r' || c == '\t'; }

// Appends code point `cp` (at most 0x10FFFF) as UTF-8.
void AppendUtf8(uint32_t cp, std::string* out) {
  if (cp < 0x80) {
    out->push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out->push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out->push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out->push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out->push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

class Parser {
 public:
  // `context` opens every message; `value_name` names the document's value
  // in the message for bytes after it.
  Parser(absl::string_view text, std::string context,
         absl::string_view value_name)
      : text_(text), context_(std::move(context)), value_name_(value_name) {}

  absl::StatusOr<JsonValue> Document() {
    JsonValue v;
    MAXSIMD_RETURN_IF_ERROR(Value(0, &v));
    SkipSpace();
    if (at_ != text_.size()) {
      return Error(absl::StrCat("bytes after the ", value_name_));
    }
    return v;
  }

  absl::StatusOr<std::vector<int64_t>> Int64Array() {
    std::vector<int64_t> out;
    if (!Eat('[')) return Error("expected '['");
    if (!Eat(']')) {
      do {
        SkipSpace();
        JsonValue v;
        MAXSIMD_RETURN_IF_ERROR(Number(&v));
        if (!v.is_integer) return Error("expected an integer");
        out.push_back(v.integer);
      } while (Eat(','));
      if (!Eat(']')) return Error("expected ',' or ']'");
    }
    SkipSpace();
    if (at_ != text_.size()) {
      return Error(absl::StrCat("bytes after the ", value_name_));
    }
    return out;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(
        absl::StrCat(context_, ": ", what, " at byte ", at_));
  }
  void SkipSpace() {
    while (at_ < text_.size() && IsSpace(text_[at_])) ++at_;
  }
  bool Eat(char c) {
    SkipSpace();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }
  bool EatWord(absl::string_view word) {
    if (text_.substr(at_, word.size()) != word) return false;
    at_ += word.size();
    return true;
  }

  absl::Status Value(int depth, JsonValue* v) {
    if (depth >= kMaxJsonDepth) {
      return Error(absl::StrCat("nesting deeper than ", kMaxJsonDepth));
    }
    SkipSpace();
    if (at_ >= text_.size()) return Error("unexpected end");
    const char c = text_[at_];
    if (c == '{') {
      ++at_;
      v->kind = JsonValue::Kind::kObject;
      if (Eat('}')) return absl::OkStatus();
      do {
        SkipSpace();
        std::string key;
        MAXSIMD_RETURN_IF_ERROR(String(&key));
        if (!Eat(':')) return Error("expected ':'");
        JsonValue member;
        MAXSIMD_RETURN_IF_ERROR(Value(depth + 1, &member));
        v->members.emplace_back(std::move(key), std::move(member));
      } while (Eat(','));
      if (!Eat('}')) return Error("expected ',' or '}'");
      return absl::OkStatus();
    }
    if (c == '[') {
      ++at_;
      v->kind = JsonValue::Kind::kArray;
      if (Eat(']')) return absl::OkStatus();
      do {
        JsonValue item;
        MAXSIMD_RETURN_IF_ERROR(Value(depth + 1, &item));
        v->items.push_back(std::move(item));
      } while (Eat(','));
      if (!Eat(']')) return Error("expected ',' or ']'");
      return absl::OkStatus();
    }
    if (c == '"') {
      v->kind = JsonValue::Kind::kString;
      return String(&v->str);
    }
    if (c == '-' || (c >= '0' && c <= '9')) return Number(v);
    if (EatWord("true")) {
      v->kind = JsonValue::Kind::kBool;
      v->boolean = true;
      return absl::OkStatus();
    }
    if (EatWord("false")) {
      v->kind = JsonValue::Kind::kBool;
      return absl::OkStatus();
    }
    if (EatWord("null")) {
      v->kind = JsonValue::Kind::kNull;
      return absl::OkStatus();
    }
    return Error(
        absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  // RFC 8259 number grammar: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
  absl::Status Number(JsonValue* v) {
    const size_t start = at_;
    auto digits = [&]() {
      const size_t from = at_;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        ++at_;
      }
      return at_ - from;
    };
    if (at_ < text_.size() && text_[at_] == '-') ++at_;
    if (at_ < text_.size() && text_[at_] == '0') {
      ++at_;
    } else if (digits() == 0) {
      return Error("malformed number");
    }
    bool integral = true;
    if (at_ < text_.size() && text_[at_] == '.') {
      ++at_;
      integral = false;
      if (digits() == 0) return Error("malformed number");
    }
    if (at_ < text_.size() && (text_[at_] == 'e' || text_[at_] == 'E')) {
      ++at_;
      integral = false;
      if (at_ < text_.size() && (text_[at_] == '+' || text_[at_] == '-')) ++at_;
      if (digits() == 0) return Error("malformed number");
    }
    const absl::string_view token = text_.substr(start, at_ - start);
    v->kind = JsonValue::Kind::kNumber;
    v->is_integer = integral && absl::SimpleAtoi(token, &v->integer);
    if (v->is_integer) {
      v->number = static_cast<double>(v->integer);
    } else if (!absl::SimpleAtod(token, &v->number)) {
      // Out of double range: strtod's convention.
      v->number = token[0] == '-' ? -std::numeric_limits<double>::infinity()
                                  : std::numeric_limits<double>::infinity();
    }
    return absl::OkStatus();
  }

  absl::Status Hex4(uint32_t* out) {
    if (text_.size() - at_ < 4) return Error("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      const char h = text_[at_++];
      v <<= 4;
      if (h >= '0' && h <= '9') {
        v |= static_cast<uint32_t>(h - '0');
      } else if (h >= 'a' && h <= 'f') {
        v |= static_cast<uint32_t>(h - 'a' + 10);
      } else if (h >= 'A' && h <= 'F') {
        v |= static_cast<uint32_t>(h - 'A' + 10);
      } else {
        return Error("bad \\u escape");
      }
    }
    *out = v;
    return absl::OkStatus();
  }

  absl::Status String(std::string* out) {
    if (at_ >= text_.size() || text_[at_] != '"') {
      return Error("expected a string");
    }
    ++at_;
    while (true) {
      if (at_ >= text_.size()) return Error("unterminated string");
      const char c = text_[at_++];
      if (c == '"') return absl::OkStatus();
      if (static_cast<unsigned char>(c) < 0x20) {
        return Error("control character in a string");
      }
      if (c != '\\') {
        out->push_back(c);
        continue;
      }
      if (at_ >= text_.size()) return Error("unterminated string");
      const char e = text_[at_++];
      switch (e) {
        case '"':
        case '\\':
        case '/':
          out->push_back(e);
          break;
        case 'b':
          out->push_back('\b');
          break;
        case 'f':
          out->push_back('\f');
          break;
        case 'n':
          out->push_back('\n');
          break;
        case 'r':
          out->push_back('\r');
          break;
        case 't':
          out->push_back('\t');
          break;
        case 'u': {
          uint32_t cp = 0;
          MAXSIMD_RETURN_IF_ERROR(Hex4(&cp));
          // A surrogate pair makes one code point; a lone surrogate becomes
          // U+FFFD.
          if (cp >= 0xD800 && cp < 0xDC00 && text_.substr(at_, 2) == "\\u") {
            at_ += 2;
            uint32_t low = 0;
            MAXSIMD_RETURN_IF_ERROR(Hex4(&low));
            cp = (low >= 0xDC00 && low < 0xE000)
                     ? 0x10000 + ((cp - 0xD800) << 10) + (low - 0xDC00)
                     : 0xFFFD;
          } else if (cp >= 0xD800 && cp < 0xE000) {
            cp = 0xFFFD;
          }
          AppendUtf8(cp, out);
          break;
        }
        default:
          return Error("bad escape");
      }
    }
  }

  absl::string_view text_;
  std::string context_;
  absl::string_view value_name_;
  size_t at_ = 0;
};

// The messages of a whole JSON file.
std::string FileContext(absl::string_view name) {
  return absl::StrCat("JSON file '", name, "'");
}

}  // namespace

const JsonValue* JsonValue::Find(absl::string_view key) const {
  if (kind != Kind::kObject) return nullptr;
  const JsonValue* found = nullptr;
  for (const auto& [k, v] : members) {
    if (k == key) found = &v;
  }
  return found;
}

absl::StatusOr<JsonValue> ParseJson(absl::string_view text,
                                    absl::string_view name) {
  return Parser(text, FileContext(name), "JSON value").Document();
}

absl::StatusOr<JsonValue> ParseJsonIn(absl::string_view text,
                                      absl::string_view context,
                                      absl::string_view value_name) {
  return Parser(text, std::string(context), value_name).Document();
}

absl::StatusOr<std::vector<int64_t>> ParseJsonInt64Array(
    absl::string_view text, absl::string_view name) {
  return Parser(text, FileContext(name), "array").Int64Array();
}

}  // namespace maxsimd
