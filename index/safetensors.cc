#include "index/safetensors.h"

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base/status_macros.h"
#include "kernels/element.h"

namespace maxsimd {
namespace {

// The header's JSON: a value is an object, an array, a string or a
// non-negative integer; anything else is malformed.
struct Json {
  enum Kind { kObject, kArray, kString, kInt } kind = kInt;
  std::vector<std::pair<std::string, Json>> members;  // object, in order
  std::vector<Json> items;                            // array
  std::string text;                                   // string
  int64_t number = 0;                                 // integer
};

class JsonParser {
 public:
  JsonParser(absl::string_view text, absl::string_view name)
      : text_(text), name_(name) {}

  absl::StatusOr<Json> ParseDocument() {
    MAXSIMD_ASSIGN_OR_RETURN(Json v, Value(0));
    SkipSpace();
    if (at_ != text_.size()) return Error("bytes after the header object");
    return v;
  }

 private:
  absl::Status Error(absl::string_view what) const {
    return absl::DataLossError(absl::StrCat(
        "file ", name_, ": safetensors header: ", what, " at byte ", at_));
  }
  void SkipSpace() {
    while (at_ < text_.size() && (text_[at_] == ' ' || text_[at_] == '\n' ||
                                  text_[at_] == '\r' || text_[at_] == '\t')) {
      ++at_;
    }
  }
  bool Eat(char c) {
    SkipSpace();
    if (at_ < text_.size() && text_[at_] == c) {
      ++at_;
      return true;
    }
    return false;
  }

  absl::StatusOr<Json> Value(int depth) {
    if (depth > 8) return Error("nesting too deep");
    SkipSpace();
    if (at_ >= text_.size()) return Error("unexpected end");
    const char c = text_[at_];
    Json v;
    if (c == '{') {
      ++at_;
      v.kind = Json::kObject;
      if (Eat('}')) return v;
      do {
        SkipSpace();
        MAXSIMD_ASSIGN_OR_RETURN(std::string key, String());
        if (!Eat(':')) return Error("expected ':'");
        MAXSIMD_ASSIGN_OR_RETURN(Json member, Value(depth + 1));
        v.members.emplace_back(std::move(key), std::move(member));
      } while (Eat(','));
      if (!Eat('}')) return Error("expected ',' or '}'");
      return v;
    }
    if (c == '[') {
      ++at_;
      v.kind = Json::kArray;
      if (Eat(']')) return v;
      do {
        MAXSIMD_ASSIGN_OR_RETURN(Json item, Value(depth + 1));
        v.items.push_back(std::move(item));
      } while (Eat(','));
      if (!Eat(']')) return Error("expected ',' or ']'");
      return v;
    }
    if (c == '"') {
      v.kind = Json::kString;
      MAXSIMD_ASSIGN_OR_RETURN(v.text, String());
      return v;
    }
    if (c >= '0' && c <= '9') {
      v.kind = Json::kInt;
      while (at_ < text_.size() && text_[at_] >= '0' && text_[at_] <= '9') {
        if (v.number > (int64_t{1} << 56)) return Error("integer too large");
        v.number = v.number * 10 + (text_[at_++] - '0');
      }
      return v;
    }
    return Error(
        absl::StrCat("unexpected character '", std::string(1, c), "'"));
  }

  // A JSON string; escapes \" \\ \/ \b \f \n \r \t and \u00XX (the header
  // names are ASCII in practice; other \u escapes are kept as UTF-8).
  absl::StatusOr<std::string> String() {
    if (at_ >= text_.size() || text_[at_] != '"') {
      return Error("expected a string");
    }
    ++at_;
    std::string out;
    while (at_ < text_.size() && text_[at_] != '"') {
      char c = text_[at_++];
      if (c != '\\') {
        out.push_back(c);
        continue;
      }
      if (at_ >= text_.size()) break;
      c = text_[at_++];
      switch (c) {
        case '"':
        case '\\':
        case '/':
          out.push_back(c);
          break;
        case 'b':
          out.push_back('\b');
          break;
        case 'f':
          out.push_back('\f');
          break;
        case 'n':
          out.push_back('\n');
          break;
        case 'r':
          out.push_back('\r');
          break;
        case 't':
          out.push_back('\t');
          break;
        case 'u': {
          if (text_.size() - at_ < 4) return Error("short \\u escape");
          uint32_t cp = 0;
          for (int i = 0; i < 4; ++i) {
            const char h = text_[at_++];
            cp <<= 4;
            if (h >= '0' && h <= '9') {
              cp |= h - '0';
            } else if (h >= 'a' && h <= 'f') {
              cp |= h - 'a' + 10;
            } else if (h >= 'A' && h <= 'F') {
              cp |= h - 'A' + 10;
            } else {
              return Error("bad \\u escape");
            }
          }
          if (cp < 0x80) {
            out.push_back(static_cast<char>(cp));
          } else if (cp < 0x800) {
            out.push_back(static_cast<char>(0xc0 | (cp >> 6)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
          } else {
            out.push_back(static_cast<char>(0xe0 | (cp >> 12)));
            out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3f)));
            out.push_back(static_cast<char>(0x80 | (cp & 0x3f)));
          }
          break;
        }
        default:
          return Error("bad escape");
      }
    }
    if (at_ >= text_.size()) return Error("unterminated string");
    ++at_;  // the closing quote
    return out;
  }

  absl::string_view text_;
  absl::string_view name_;
  size_t at_ = 0;
};

void AppendJsonString(std::string* out, absl::string_view s) {
  out->push_back('"');
  for (char c : s) {
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "\\u%04x", c);
      out->append(buf);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace

int64_t SafetensorsDTypeSize(absl::string_view dtype) {
  static const std::map<std::string, int64_t, std::less<>> kSizes = {
      {"F64", 8}, {"F32", 4}, {"F16", 2}, {"BF16", 2}, {"I64", 8},
      {"I32", 4}, {"I16", 2}, {"I8", 1},  {"U8", 1},   {"U16", 2},
      {"U32", 4}, {"U64", 8}, {"BOOL", 1}};
  const auto it = kSizes.find(dtype);
  return it == kSizes.end() ? 0 : it->second;
}

absl::StatusOr<SafetensorsFile> ParseSafetensors(absl::string_view bytes,
                                                 absl::string_view name) {
  auto loss = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat("file ", name, ": ", what));
  };
  if (bytes.size() < 8) return loss("shorter than the 8-byte header length");
  uint64_t header_len;
  std::memcpy(&header_len, bytes.data(), 8);
  if (header_len > bytes.size() - 8 || header_len > (uint64_t{100} << 20)) {
    return loss(absl::StrCat("header length ", header_len,
                             " runs past the file (", bytes.size(),
                             " bytes) or over 100 MiB"));
  }
  const absl::string_view data = bytes.substr(8 + header_len);
  MAXSIMD_ASSIGN_OR_RETURN(
      Json root, JsonParser(bytes.substr(8, header_len), name).ParseDocument());
  if (root.kind != Json::kObject) return loss("the header is not an object");
  SafetensorsFile out;
  std::set<std::pair<int64_t, int64_t>> spans;
  for (auto& [key, value] : root.members) {
    if (key == "__metadata__") {
      if (value.kind != Json::kObject)
        return loss("__metadata__ is not an object");
      for (auto& [k, v] : value.members) {
        if (v.kind != Json::kString) {
          return loss(
              absl::StrCat("__metadata__ entry '", k, "' is not a string"));
        }
        out.metadata[k] = v.text;
      }
      continue;
    }
    if (value.kind != Json::kObject) {
      return loss(absl::StrCat("tensor '", key, "' is not an object"));
    }
    SafetensorsTensor t;
    const Json* offsets = nullptr;
    bool has_dtype = false, has_shape = false;
    for (auto& [field, v] : value.members) {
      if (field == "dtype" && v.kind == Json::kString) {
        t.dtype = v.text;
        has_dtype = true;
      } else if (field == "shape" && v.kind == Json::kArray) {
        for (const Json& d : v.items) {
          if (d.kind != Json::kInt) {
            return loss(absl::StrCat("tensor '", key, "' has a bad shape"));
          }
          t.shape.push_back(d.number);
        }
        has_shape = true;
      } else if (field == "data_offsets" && v.kind == Json::kArray &&
                 v.items.size() == 2 && v.items[0].kind == Json::kInt &&
                 v.items[1].kind == Json::kInt) {
        offsets = &v;
      } else {
        return loss(
            absl::StrCat("tensor '", key, "' has a bad field '", field, "'"));
      }
    }
    if (!has_dtype || !has_shape || offsets == nullptr) {
      return loss(absl::StrCat("tensor '", key,
                               "' needs dtype, shape and data_offsets"));
    }
    const int64_t size = SafetensorsDTypeSize(t.dtype);
    if (size == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("file ", name, ": tensor '", key, "' has dtype ",
                       t.dtype, ", which this reader does not know"));
    }
    int64_t elements = 1;
    for (int64_t d : t.shape) {
      if (d != 0 && elements > (int64_t{1} << 50) / d) {
        return loss(absl::StrCat("tensor '", key, "' is too large"));
      }
      elements *= d;
    }
    const int64_t begin = offsets->items[0].number;
    const int64_t end = offsets->items[1].number;
    if (begin > end || static_cast<uint64_t>(end) > data.size()) {
      return loss(absl::StrCat("tensor '", key, "' has data_offsets [", begin,
                               ", ", end, "] outside the ", data.size(),
                               " data bytes"));
    }
    if (end - begin != elements * size) {
      return loss(absl::StrCat("tensor '", key, "' has ", end - begin,
                               " bytes; ", t.dtype, " of its shape needs ",
                               elements * size));
    }
    if (begin < end) spans.emplace(begin, end);
    t.data = std::string(data.substr(begin, end - begin));
    out.tensors.emplace(key, std::move(t));
  }
  int64_t last_end = 0;
  for (const auto& [b, e] : spans) {
    if (b < last_end) return loss("two tensors' data overlap");
    last_end = e;
  }
  return out;
}

absl::StatusOr<SafetensorsFile> ReadSafetensors(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat("cannot open ", path));
  std::ostringstream buf;
  buf << in.rdbuf();
  return ParseSafetensors(buf.str(), path);
}

absl::StatusOr<SafetensorsDocuments> DocumentsFromSafetensors(
    const SafetensorsFile& file, absl::string_view name) {
  auto bad = [&](absl::string_view what) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors file ", name, ": ", what));
  };
  const auto tok = file.tensors.find("tokens");
  const auto cu = file.tensors.find("cu_seqlens");
  if (tok == file.tensors.end() || cu == file.tensors.end()) {
    return bad("needs tensors \"tokens\" [T, dim] and \"cu_seqlens\" [N + 1]");
  }
  const SafetensorsTensor& t = tok->second;
  if (t.shape.size() != 2 || t.shape[1] < 1 || t.shape[1] > (1 << 20)) {
    return bad("tensor \"tokens\" must be 2-D [T, dim]");
  }
  SafetensorsDocuments out;
  out.dim = static_cast<int32_t>(t.shape[1]);
  const size_t n = static_cast<size_t>(t.shape[0] * t.shape[1]);
  out.tokens.resize(n);
  if (t.dtype == "F32") {
    std::memcpy(out.tokens.data(), t.data.data(), n * 4);
  } else if (t.dtype == "F16" || t.dtype == "BF16") {
    ConvertToFloat(t.data.data(),
                   t.dtype == "F16" ? DType::kFloat16 : DType::kBFloat16, 0,
                   static_cast<int64_t>(n), out.tokens.data());
    out.float16 = t.dtype == "F16";
  } else {
    return bad(absl::StrCat("tensor \"tokens\" has dtype ", t.dtype,
                            "; expected F32, F16 or BF16"));
  }
  const SafetensorsTensor& c = cu->second;
  if (c.shape.size() != 1 || c.shape[0] < 1 ||
      (c.dtype != "I64" && c.dtype != "I32")) {
    return bad("tensor \"cu_seqlens\" must be 1-D I64 or I32 [N + 1]");
  }
  out.cu_seqlens.resize(static_cast<size_t>(c.shape[0]));
  for (size_t i = 0; i < out.cu_seqlens.size(); ++i) {
    if (c.dtype == "I64") {
      std::memcpy(&out.cu_seqlens[i], c.data.data() + i * 8, 8);
    } else {
      int32_t v;
      std::memcpy(&v, c.data.data() + i * 4, 4);
      out.cu_seqlens[i] = v;
    }
    if (i == 0 ? out.cu_seqlens[0] != 0
               : out.cu_seqlens[i] < out.cu_seqlens[i - 1]) {
      return bad(
          absl::StrCat("tensor \"cu_seqlens\" must start at 0 and not "
                       "decrease (entry ",
                       i, ")"));
    }
  }
  if (out.cu_seqlens.back() != t.shape[0]) {
    return bad(absl::StrCat("tensor \"cu_seqlens\" ends at ",
                            out.cu_seqlens.back(), " but \"tokens\" has ",
                            t.shape[0], " rows"));
  }
  return out;
}

absl::StatusOr<SafetensorsFloatTensor> FloatTensorFromSafetensors(
    const SafetensorsFile& file, absl::string_view tensor,
    absl::string_view name, bool uint16_is_bfloat16) {
  SafetensorsFloatTensor out;
  auto it = file.tensors.end();
  if (!tensor.empty()) {
    it = file.tensors.find(std::string(tensor));
  } else if (file.tensors.count("query") > 0) {
    it = file.tensors.find("query");
  } else if (file.tensors.size() == 1) {
    it = file.tensors.begin();
  }
  if (it == file.tensors.end()) {
    std::string names;
    for (const auto& [key, t] : file.tensors) {
      absl::StrAppend(&names, names.empty() ? "" : ", ", "\"", key, "\"");
    }
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors file ", name, ": ",
        tensor.empty()
            ? "no tensor \"query\" and not exactly one tensor; name one"
            : absl::StrCat("no tensor \"", tensor, "\""),
        " (it has ", names.empty() ? "none" : names, ")"));
  }
  out.tensor = &it->second;
  out.name = it->first;
  const std::string& dtype = it->second.dtype;
  if (dtype == "F32") {
    out.dtype = DType::kFloat32;
  } else if (dtype == "F16") {
    out.dtype = DType::kFloat16;
  } else if (dtype == "BF16" || (dtype == "U16" && uint16_is_bfloat16)) {
    out.dtype = DType::kBFloat16;
  } else {
    return absl::InvalidArgumentError(absl::StrCat(
        "safetensors file ", name, ": tensor \"", it->first, "\" has dtype ",
        dtype, "; expected F32, F16 or BF16",
        uint16_is_bfloat16 ? " (or U16 holding bfloat16 bits)" : ""));
  }
  return out;
}

std::string SerializeSafetensors(const SafetensorsFile& file) {
  std::string header = "{";
  std::string data;
  bool first = true;
  if (!file.metadata.empty()) {
    header += "\"__metadata__\":{";
    for (const auto& [k, v] : file.metadata) {
      if (!first) header += ",";
      first = false;
      AppendJsonString(&header, k);
      header += ":";
      AppendJsonString(&header, v);
    }
    header += "}";
  }
  for (const auto& [key, t] : file.tensors) {
    if (header.size() > 1) header += ",";
    AppendJsonString(&header, key);
    header += absl::StrCat(":{\"dtype\":\"", t.dtype, "\",\"shape\":[");
    for (size_t i = 0; i < t.shape.size(); ++i) {
      absl::StrAppend(&header, i > 0 ? "," : "", t.shape[i]);
    }
    absl::StrAppend(&header, "],\"data_offsets\":[", data.size(), ",",
                    data.size() + t.data.size(), "]}");
    data += t.data;
  }
  header += "}";
  std::string out(8, '\0');
  const uint64_t n = header.size();
  std::memcpy(out.data(), &n, 8);
  return out + header + data;
}

}  // namespace maxsimd
