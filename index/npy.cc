#include "index/npy.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <optional>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "kernels/base/half.h"
#include "kernels/base/status_macros.h"

// The format (numpy/lib/format.py, NEP 1):
//
//   "\x93NUMPY" major minor | header length (u16 LE for 1.0, u32 LE for 2.0
//   and 3.0) | header: a Python dict literal with exactly the keys 'descr',
//   'fortran_order' and 'shape', padded with spaces and ending in '\n' so
//   that the data starts on a 64-byte boundary | data.
//
// The header is parsed with a small recursive-descent reader of the few
// Python literals numpy writes (strings, True/False, tuples of integers),
// never with a general evaluator: the input is untrusted and will be fuzzed,
// so every read is bounds-checked and every integer is overflow-checked.
//
// Data is copied as raw bytes; the supported descrs are all little-endian,
// which is the byte order of every host this project targets (x86-64 and
// aarch64).

namespace maxsimd {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
constexpr size_t kMagicLen = 6;
// Data starts on this boundary (numpy >= 1.15 writes 64; older versions
// wrote 16, and readers accept any alignment).
constexpr size_t kHeaderAlign = 64;

// Bytes per element of a supported descr, or 0 when unsupported.
int64_t DescrSize(absl::string_view descr) {
  if (descr == "<f4" || descr == "<i4") return 4;
  if (descr == "<f2" || descr == "<u2") return 2;
  // numpy's type string of ml_dtypes.bfloat16, and of plain 2-byte voids
  // (NpyFloatDType).
  if (descr == "<V2" || descr == "|V2") return 2;
  if (descr == "<i8") return 8;
  if (descr == "|u1" || descr == "<u1") return 1;  // fast-plaid residuals
  return 0;
}

absl::Status Corrupt(absl::string_view name, absl::string_view what) {
  return absl::DataLossError(absl::StrCat("npy file '", name, "': ", what));
}

// One value of the header dict.
struct HeaderValue {
  // kOther: a well-formed literal this reader has no use for, e.g. the list
  // of fields of a structured dtype.
  enum class Kind { kString, kBool, kTuple, kOther } kind = Kind::kString;
  std::string str;
  bool boolean = false;
  std::vector<int64_t> ints;
};

// Reads the header dict. All methods return false (and set error_) on the
// first thing they do not understand; none of them reads past text_.
class HeaderParser {
 public:
  explicit HeaderParser(absl::string_view text) : text_(text) {}

  bool ParseDict(std::vector<std::pair<std::string, HeaderValue>>* out) {
    SkipSpace();
    if (!Consume('{')) return Fail("header does not start with '{'");
    while (true) {
      SkipSpace();
      if (Consume('}')) break;
      std::string key;
      if (!ParseString(&key)) return false;
      SkipSpace();
      if (!Consume(':')) return Fail("expected ':' after a key");
      SkipSpace();
      HeaderValue value;
      if (!ParseValue(&value)) return false;
      out->emplace_back(std::move(key), std::move(value));
      SkipSpace();
      if (Consume(',')) continue;  // a trailing comma is legal Python
      SkipSpace();
      if (Consume('}')) break;
      return Fail("expected ',' or '}' in the header dict");
    }
    SkipSpace();
    if (pos_ != text_.size()) return Fail("unexpected text after the dict");
    return true;
  }

  const std::string& error() const { return error_; }

 private:
  bool Fail(absl::string_view what) {
    error_ = absl::StrCat(what, " (header offset ", pos_, ")");
    return false;
  }
  bool AtEnd() const { return pos_ >= text_.size(); }
  char Peek() const { return AtEnd() ? '\0' : text_[pos_]; }
  bool Consume(char c) {
    if (AtEnd() || text_[pos_] != c) return false;
    ++pos_;
    return true;
  }
  bool ConsumeWord(absl::string_view word) {
    if (text_.substr(pos_, word.size()) != word) return false;
    pos_ += word.size();
    return true;
  }
  void SkipSpace() {
    while (!AtEnd() &&
           absl::ascii_isspace(static_cast<unsigned char>(text_[pos_]))) {
      ++pos_;
    }
  }

  bool ParseValue(HeaderValue* value) {
    const char c = Peek();
    if (c == '\'' || c == '"') {
      value->kind = HeaderValue::Kind::kString;
      return ParseString(&value->str);
    }
    if (c == '(') {
      // Shapes are tuples of integers; anything else in parentheses is
      // skipped as an "other" literal.
      const size_t start = pos_;
      value->kind = HeaderValue::Kind::kTuple;
      if (ParseIntTuple(&value->ints)) return true;
      pos_ = start;
      value->kind = HeaderValue::Kind::kOther;
      return SkipLiteral(0);
    }
    if (c == '[') {
      value->kind = HeaderValue::Kind::kOther;
      return SkipLiteral(0);
    }
    if (ConsumeWord("True")) {
      value->kind = HeaderValue::Kind::kBool;
      value->boolean = true;
      return true;
    }
    if (ConsumeWord("False")) {
      value->kind = HeaderValue::Kind::kBool;
      value->boolean = false;
      return true;
    }
    return Fail(
        "unsupported value in the header (not a string, bool or "
        "tuple of integers)");
  }

  // Skips a literal made of strings, integers, True/False/None, tuples and
  // lists. Depth is bounded so that hostile input cannot exhaust the stack.
  bool SkipLiteral(int depth) {
    if (depth > kMaxDepth) return Fail("header nested too deeply");
    SkipSpace();
    const char c = Peek();
    if (c == '\'' || c == '"') {
      std::string ignored;
      return ParseString(&ignored);
    }
    if (c == '-' || absl::ascii_isdigit(static_cast<unsigned char>(c))) {
      int64_t ignored;
      return ParseInt(&ignored);
    }
    if (ConsumeWord("True") || ConsumeWord("False") || ConsumeWord("None")) {
      return true;
    }
    if (c != '(' && c != '[') return Fail("unsupported value in the header");
    const char close = c == '(' ? ')' : ']';
    ++pos_;
    while (true) {
      SkipSpace();
      if (Consume(close)) return true;
      if (!SkipLiteral(depth + 1)) return false;
      SkipSpace();
      if (Consume(',')) continue;
      if (Consume(close)) return true;
      return Fail("expected ',' or a closing bracket");
    }
  }

  // A quoted string without escapes: numpy's dtype strings never need any,
  // so a backslash means the file is not one this reader understands.
  bool ParseString(std::string* out) {
    const char quote = Peek();
    if (quote != '\'' && quote != '"') return Fail("expected a quoted string");
    ++pos_;
    const size_t end = text_.find(quote, pos_);
    if (end == absl::string_view::npos) return Fail("unterminated string");
    const absl::string_view body = text_.substr(pos_, end - pos_);
    if (body.find('\\') != absl::string_view::npos) {
      return Fail("escape sequences are not supported in header strings");
    }
    out->assign(body.data(), body.size());
    pos_ = end + 1;
    return true;
  }

  // "()", "(5,)", "(3, 4)", "(3, 4,)"; Python 2 numpy wrote "5L".
  bool ParseIntTuple(std::vector<int64_t>* out) {
    if (!Consume('(')) return Fail("expected '('");
    while (true) {
      SkipSpace();
      if (Consume(')')) {
        // "(5)" is an int, not a tuple, in Python.
        if (out->size() == 1 && !saw_comma_after_last_) {
          return Fail("shape '(n)' is not a tuple; expected '(n,)'");
        }
        return true;
      }
      int64_t v = 0;
      if (!ParseInt(&v)) return false;
      out->push_back(v);
      saw_comma_after_last_ = false;
      SkipSpace();
      if (Consume(',')) {
        saw_comma_after_last_ = true;
        continue;
      }
      SkipSpace();
      if (Peek() == ')') continue;
      return Fail("expected ',' or ')' in the shape tuple");
    }
  }

  bool ParseInt(int64_t* out) {
    bool negative = false;
    if (Consume('-')) negative = true;
    if (AtEnd() || !absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
      return Fail("expected an integer in the shape");
    }
    // Accumulate as a negative number so that INT64_MIN is representable;
    // dimensions that do not fit are corrupt, not wrapped.
    int64_t v = 0;
    while (!AtEnd() &&
           absl::ascii_isdigit(static_cast<unsigned char>(Peek()))) {
      const int digit = Peek() - '0';
      if (v < (std::numeric_limits<int64_t>::min() + digit) / 10) {
        return Fail("shape dimension does not fit in 64 bits");
      }
      v = v * 10 - digit;
      ++pos_;
    }
    Consume('L');
    if (!negative) {
      if (v == std::numeric_limits<int64_t>::min()) {
        return Fail("shape dimension does not fit in 64 bits");
      }
      v = -v;
    }
    *out = v;
    return true;
  }

  static constexpr int kMaxDepth = 16;
  absl::string_view text_;
  size_t pos_ = 0;
  bool saw_comma_after_last_ = false;
  std::string error_;
};

uint32_t ReadLe(absl::string_view bytes, size_t offset, size_t width) {
  uint32_t v = 0;
  for (size_t i = 0; i < width; ++i) {
    v |= static_cast<uint32_t>(static_cast<unsigned char>(bytes[offset + i]))
         << (8 * i);
  }
  return v;
}

std::string FormatShape(const std::vector<int64_t>& shape) {
  if (shape.size() == 1) return absl::StrCat("(", shape[0], ",)");
  return absl::StrCat("(", absl::StrJoin(shape, ", "), ")");
}

// Product of `shape` times `element_size`, or nullopt on a negative
// dimension or on overflow of int64.
std::optional<int64_t> CheckedBytes(const std::vector<int64_t>& shape,
                                    int64_t element_size) {
  int64_t total = element_size;
  for (int64_t dim : shape) {
    if (dim < 0) return std::nullopt;
    if (dim != 0 && total > std::numeric_limits<int64_t>::max() / dim) {
      return std::nullopt;
    }
    total *= dim;
  }
  return total;
}

}  // namespace

int64_t NpyArray::num_elements() const {
  int64_t n = 1;
  for (int64_t dim : shape) n *= dim;
  return n;
}

int64_t NpyArray::element_size() const { return DescrSize(descr); }

absl::StatusOr<NpyArray> ParseNpy(absl::string_view bytes,
                                  absl::string_view name) {
  if (bytes.size() < kMagicLen + 2 ||
      bytes.substr(0, kMagicLen) != absl::string_view(kMagic, kMagicLen)) {
    return Corrupt(name, "missing the \\x93NUMPY magic");
  }
  const int major = static_cast<unsigned char>(bytes[kMagicLen]);
  const int minor = static_cast<unsigned char>(bytes[kMagicLen + 1]);
  if (major < 1 || major > 3 || minor != 0) {
    return Corrupt(
        name, absl::StrCat("unsupported format version ", major, ".", minor));
  }
  const size_t len_width = major == 1 ? 2 : 4;
  const size_t prefix = kMagicLen + 2 + len_width;
  if (bytes.size() < prefix) {
    return Corrupt(name, "truncated before the header length");
  }
  const uint64_t header_len = ReadLe(bytes, kMagicLen + 2, len_width);
  if (header_len > bytes.size() - prefix) {
    return Corrupt(name, absl::StrCat("truncated header: ", header_len,
                                      " bytes declared, ",
                                      bytes.size() - prefix, " present"));
  }
  absl::string_view header = bytes.substr(prefix, header_len);
  // Versions 1.0 and 2.0 headers are latin-1, 3.0 is UTF-8; both are parsed
  // as bytes, and only ASCII matters to the grammar.
  if (header.find('\0') != absl::string_view::npos) {
    return Corrupt(name, "NUL byte in the header");
  }

  std::vector<std::pair<std::string, HeaderValue>> entries;
  HeaderParser parser(header);
  if (!parser.ParseDict(&entries)) {
    return Corrupt(name, absl::StrCat("malformed header: ", parser.error()));
  }
  const HeaderValue* descr = nullptr;
  const HeaderValue* fortran = nullptr;
  const HeaderValue* shape = nullptr;
  for (const auto& [key, value] : entries) {
    const HeaderValue** slot = key == "descr"           ? &descr
                               : key == "fortran_order" ? &fortran
                               : key == "shape"         ? &shape
                                                        : nullptr;
    if (slot == nullptr) {
      return Corrupt(name, absl::StrCat("unexpected header key '", key, "'"));
    }
    if (*slot != nullptr) {
      return Corrupt(name, absl::StrCat("duplicate header key '", key, "'"));
    }
    *slot = &value;
  }
  if (descr == nullptr || fortran == nullptr || shape == nullptr) {
    return Corrupt(name,
                   "header lacks one of 'descr', 'fortran_order', 'shape'");
  }
  if (descr->kind != HeaderValue::Kind::kString) {
    // A list here is a structured dtype: well-formed, just not supported.
    return absl::InvalidArgumentError(
        absl::StrCat("npy file '", name,
                     "': unsupported dtype (structured dtypes are not "
                     "supported)"));
  }
  if (fortran->kind != HeaderValue::Kind::kBool) {
    return Corrupt(name, "'fortran_order' is not True or False");
  }
  if (shape->kind != HeaderValue::Kind::kTuple) {
    return Corrupt(name, "'shape' is not a tuple");
  }
  NpyArray array;
  array.descr = descr->str;
  array.shape = shape->ints;
  const int64_t element_size = DescrSize(array.descr);
  if (element_size == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy file '", name, "': unsupported dtype '", array.descr,
                     "' (supported: <f4, <f2, <u2, <V2, |V2, <i8, <i4, "
                     "|u1)"));
  }
  if (fortran->boolean) {
    return absl::InvalidArgumentError(absl::StrCat(
        "npy file '", name,
        "': Fortran-order arrays are not supported; save a C-order copy "
        "(numpy.ascontiguousarray)"));
  }
  const std::optional<int64_t> data_bytes =
      CheckedBytes(array.shape, element_size);
  if (!data_bytes.has_value()) {
    return Corrupt(name,
                   absl::StrCat("invalid shape ", FormatShape(array.shape),
                                " (negative or overflows 64 bits)"));
  }
  const size_t available = bytes.size() - prefix - header_len;
  if (static_cast<uint64_t>(*data_bytes) != available) {
    return Corrupt(
        name,
        absl::StrCat(available < static_cast<uint64_t>(*data_bytes)
                         ? "truncated data: "
                         : "trailing bytes after the data: ",
                     "shape ", FormatShape(array.shape), " of '", array.descr,
                     "' needs ", *data_bytes, " bytes, file has ", available));
  }
  const absl::string_view data = bytes.substr(prefix + header_len);
  array.data.assign(data.begin(), data.end());
  return array;
}

absl::StatusOr<NpyArray> ReadNpy(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno, absl::StrCat("cannot open '", path, "'"));
  }
  std::string bytes;
  char buf[1 << 16];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) bytes.append(buf, n);
  const bool failed = std::ferror(f) != 0;
  const int err = errno;
  std::fclose(f);
  if (failed) {
    return absl::ErrnoToStatus(err, absl::StrCat("cannot read '", path, "'"));
  }
  return ParseNpy(bytes, path);
}

std::string SerializeNpy(const NpyArray& array) {
  std::string dict =
      absl::StrCat("{'descr': '", array.descr, "', 'fortran_order': False, ",
                   "'shape': ", FormatShape(array.shape), ", }");
  // Pad with spaces and a final newline so the data is 64-byte aligned.
  auto build = [&](int major, size_t len_width) {
    const size_t unpadded = kMagicLen + 2 + len_width + dict.size() + 1;
    const size_t padding =
        (kHeaderAlign - unpadded % kHeaderAlign) % kHeaderAlign;
    const size_t header_len = dict.size() + padding + 1;
    std::string out(kMagic, kMagicLen);
    out.push_back(static_cast<char>(major));
    out.push_back(0);
    for (size_t i = 0; i < len_width; ++i) {
      out.push_back(static_cast<char>((header_len >> (8 * i)) & 0xff));
    }
    out += dict;
    out.append(padding, ' ');
    out.push_back('\n');
    out.append(array.data.begin(), array.data.end());
    return out;
  };
  // Version 1.0 stores the header length in 16 bits; only a shape with
  // thousands of dimensions needs 2.0.
  if (dict.size() + kHeaderAlign + 1 <= 0xffff) return build(1, 2);
  return build(2, 4);
}

absl::Status WriteNpy(const std::string& path, const NpyArray& array) {
  const std::string bytes = SerializeNpy(array);
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (f == nullptr) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot create '", path, "'"));
  }
  const size_t written = std::fwrite(bytes.data(), 1, bytes.size(), f);
  const int write_err = errno;
  if (std::fclose(f) != 0 || written != bytes.size()) {
    return absl::ErrnoToStatus(written != bytes.size() ? write_err : errno,
                               absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

NpyArray MakeNpyFloat32(const std::vector<float>& values,
                        std::vector<int64_t> shape) {
  NpyArray array;
  array.descr = "<f4";
  array.shape = std::move(shape);
  array.data.resize(values.size() * sizeof(float));
  if (!values.empty()) {
    std::memcpy(array.data.data(), values.data(), array.data.size());
  }
  return array;
}

NpyArray MakeNpyFloat16(const std::vector<float>& values,
                        std::vector<int64_t> shape) {
  NpyArray array;
  array.descr = "<f2";
  array.shape = std::move(shape);
  array.data.resize(values.size() * sizeof(uint16_t));
  for (size_t i = 0; i < values.size(); ++i) {
    const uint16_t h = FloatToHalf(values[i]);
    std::memcpy(array.data.data() + i * sizeof(h), &h, sizeof(h));
  }
  return array;
}

NpyArray MakeNpyInt64(const std::vector<int64_t>& values,
                      std::vector<int64_t> shape) {
  NpyArray array;
  array.descr = "<i8";
  array.shape = std::move(shape);
  array.data.resize(values.size() * sizeof(int64_t));
  if (!values.empty()) {
    std::memcpy(array.data.data(), values.data(), array.data.size());
  }
  return array;
}

absl::StatusOr<std::vector<int64_t>> NpyToInt64(const NpyArray& array,
                                                absl::string_view name) {
  if (array.shape.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy file '", name,
                     "': expected a 1-D integer array, got "
                     "shape ",
                     FormatShape(array.shape)));
  }
  const int64_t n = array.shape[0];
  std::vector<int64_t> out(static_cast<size_t>(n));
  if (array.descr == "<i8" && array.data.size() == out.size() * 8) {
    if (n > 0) std::memcpy(out.data(), array.data.data(), array.data.size());
  } else if (array.descr == "<i4" && array.data.size() == out.size() * 4) {
    for (int64_t i = 0; i < n; ++i) {
      int32_t v;
      std::memcpy(&v, array.data.data() + i * 4, sizeof(v));
      out[i] = v;
    }
  } else {
    return absl::InvalidArgumentError(
        absl::StrCat("npy file '", name, "': expected dtype <i8 or <i4 with ",
                     n, " elements, got '", array.descr, "' with ",
                     array.data.size(), " bytes"));
  }
  return out;
}

absl::StatusOr<std::vector<float>> NpyToFloat32(const NpyArray& array,
                                                absl::string_view name) {
  const int64_t element_size = array.element_size();
  const std::optional<int64_t> expected =
      CheckedBytes(array.shape, element_size == 0 ? 1 : element_size);
  if (array.descr != "<f4" && array.descr != "<f2") {
    return absl::InvalidArgumentError(
        absl::StrCat("npy file '", name, "': expected dtype <f4 or <f2, got '",
                     array.descr, "'"));
  }
  if (!expected.has_value() ||
      static_cast<uint64_t>(*expected) != array.data.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("npy file '", name, "': data size ", array.data.size(),
                     " does not match shape ", FormatShape(array.shape)));
  }
  const size_t n = array.data.size() / static_cast<size_t>(element_size);
  std::vector<float> out(n);
  if (array.descr == "<f4") {
    if (n > 0) std::memcpy(out.data(), array.data.data(), array.data.size());
  } else {
    for (size_t i = 0; i < n; ++i) {
      uint16_t h;
      std::memcpy(&h, array.data.data() + i * sizeof(h), sizeof(h));
      out[i] = HalfToFloat(h);
    }
  }
  return out;
}

absl::StatusOr<DType> NpyFloatDType(const NpyArray& array,
                                    absl::string_view name,
                                    bool uint16_is_bfloat16) {
  if (array.descr == "<f4") return DType::kFloat32;
  if (array.descr == "<f2") return DType::kFloat16;
  if (array.descr == "<V2" || array.descr == "|V2") return DType::kBFloat16;
  if (array.descr == "<u2" && uint16_is_bfloat16) return DType::kBFloat16;
  return absl::InvalidArgumentError(absl::StrCat(
      "npy file '", name,
      "': expected float32 '<f4', float16 '<f2' or bfloat16 ('<V2' or "
      "'|V2', as np.save writes ml_dtypes.bfloat16",
      uint16_is_bfloat16 ? ", or its bits as '<u2'" : "", "), got '",
      array.descr, "'"));
}

absl::StatusOr<NpyDocuments> DocumentsFromNpy(const NpyArray& tokens,
                                              absl::string_view tokens_name,
                                              const NpyArray& cu_seqlens,
                                              absl::string_view cu_name) {
  if (tokens.shape.size() != 2 || tokens.shape[1] < 1 ||
      tokens.shape[1] > (1 << 20)) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", tokens_name, "' must be a 2-D [tokens, dim] array"));
  }
  NpyDocuments out;
  MAXSIMD_ASSIGN_OR_RETURN(out.cu_seqlens, NpyToInt64(cu_seqlens, cu_name));
  if (out.cu_seqlens.empty() || out.cu_seqlens.front() != 0 ||
      out.cu_seqlens.back() != tokens.shape[0]) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", cu_name, "' must run from 0 to the ", tokens.shape[0],
                     " token rows of '", tokens_name, "'"));
  }
  out.dim = static_cast<int32_t>(tokens.shape[1]);
  MAXSIMD_ASSIGN_OR_RETURN(out.tokens, NpyToFloat32(tokens, tokens_name));
  out.float16 = tokens.descr == "<f2";
  return out;
}

}  // namespace maxsimd
