#include "index/safetensors.h"

#include <cstring>
#include <fstream>
#include <set>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "kernels/base/json.h"
#include "kernels/base/status_macros.h"
#include "kernels/element.h"

namespace maxsimd {
namespace {

// The largest integer the header may hold (a dimension, an offset): no
// tensor has 2^56 elements or bytes.
constexpr int64_t kMaxHeaderInteger = int64_t{1} << 56;

// Deepest nesting of a header: the format needs 3 (object, tensor, shape).
constexpr int kMaxHeaderDepth = 8;

// A dimension or an offset of the header: a non-negative integer.
bool IsHeaderInteger(const JsonValue& v) {
  return v.kind == JsonValue::Kind::kNumber && v.is_integer && v.integer >= 0 &&
         v.integer <= kMaxHeaderInteger;
}

// The header holds objects, arrays, strings and non-negative integers only,
// nested at most kMaxHeaderDepth deep: anything else is malformed wherever
// it is, before any tensor is looked at.
absl::Status CheckHeaderValues(const JsonValue& v, int depth,
                               absl::string_view name) {
  auto loss = [&](absl::string_view what) {
    return absl::DataLossError(
        absl::StrCat("file ", name, ": safetensors header: ", what));
  };
  if (depth > kMaxHeaderDepth) return loss("nesting too deep");
  switch (v.kind) {
    case JsonValue::Kind::kObject:
      for (const auto& [key, member] : v.members) {
        MAXSIMD_RETURN_IF_ERROR(CheckHeaderValues(member, depth + 1, name));
      }
      return absl::OkStatus();
    case JsonValue::Kind::kArray:
      for (const JsonValue& item : v.items) {
        MAXSIMD_RETURN_IF_ERROR(CheckHeaderValues(item, depth + 1, name));
      }
      return absl::OkStatus();
    case JsonValue::Kind::kString:
      return absl::OkStatus();
    case JsonValue::Kind::kNumber:
      if (IsHeaderInteger(v)) return absl::OkStatus();
      return loss("a number that is not an integer in [0, 2^56]");
    case JsonValue::Kind::kNull:
    case JsonValue::Kind::kBool:
      break;
  }
  return loss("null, true or false, which the format does not use");
}

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
      JsonValue root,
      ParseJsonIn(bytes.substr(8, header_len),
                  absl::StrCat("file ", name, ": safetensors header"),
                  "header object"));
  MAXSIMD_RETURN_IF_ERROR(CheckHeaderValues(root, 0, name));
  if (root.kind != JsonValue::Kind::kObject) {
    return loss("the header is not an object");
  }
  SafetensorsFile out;
  std::set<std::pair<int64_t, int64_t>> spans;
  for (auto& [key, value] : root.members) {
    if (key == "__metadata__") {
      if (value.kind != JsonValue::Kind::kObject) {
        return loss("__metadata__ is not an object");
      }
      for (auto& [k, v] : value.members) {
        if (v.kind != JsonValue::Kind::kString) {
          return loss(
              absl::StrCat("__metadata__ entry '", k, "' is not a string"));
        }
        out.metadata[k] = v.str;
      }
      continue;
    }
    if (value.kind != JsonValue::Kind::kObject) {
      return loss(absl::StrCat("tensor '", key, "' is not an object"));
    }
    SafetensorsTensor t;
    const JsonValue* offsets = nullptr;
    bool has_dtype = false, has_shape = false;
    for (auto& [field, v] : value.members) {
      if (field == "dtype" && v.kind == JsonValue::Kind::kString) {
        t.dtype = v.str;
        has_dtype = true;
      } else if (field == "shape" && v.kind == JsonValue::Kind::kArray) {
        for (const JsonValue& d : v.items) {
          if (!IsHeaderInteger(d)) {
            return loss(absl::StrCat("tensor '", key, "' has a bad shape"));
          }
          t.shape.push_back(d.integer);
        }
        has_shape = true;
      } else if (field == "data_offsets" && v.kind == JsonValue::Kind::kArray &&
                 v.items.size() == 2 && IsHeaderInteger(v.items[0]) &&
                 IsHeaderInteger(v.items[1])) {
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
    const int64_t begin = offsets->items[0].integer;
    const int64_t end = offsets->items[1].integer;
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
