#include "client/maxsimctl/output.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace maxsimd::ctl {
namespace {

const char* PlacementLabel(v1::Placement p) {
  switch (p) {
    case v1::PLACEMENT_AUTO:
      return "auto";
    case v1::PLACEMENT_GPU:
      return "gpu";
    case v1::PLACEMENT_HOST:
      return "host";
    default:
      return "unspecified";
  }
}

}  // namespace

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(static_cast<char>(c));  // UTF-8 passes through
        }
    }
  }
  return out + "\"";
}

std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

const char* DTypeLabel(v1::DType t) {
  switch (t) {
    case v1::DTYPE_FLOAT32:
      return "float32";
    case v1::DTYPE_FLOAT16:
      return "float16";
    case v1::DTYPE_BFLOAT16:
      return "bfloat16";
    case v1::DTYPE_INT8:
      return "int8";
    case v1::DTYPE_PLAID:
      return "plaid";
    default:
      return "unspecified";
  }
}

const char* LayoutLabel(v1::Layout l) {
  switch (l) {
    case v1::LAYOUT_DENSE:
      return "dense";
    case v1::LAYOUT_INT8:
      return "int8";
    case v1::LAYOUT_PLAID:
      return "plaid";
    default:
      return "unspecified";
  }
}

std::string CorpusJson(const v1::CorpusInfo& c) {
  return absl::StrCat(
      "{\"name\":", JsonString(c.name()), ",\"dim\":", c.dim(),
      ",\"layout\":", JsonString(LayoutLabel(c.layout())),
      ",\"placement\":", JsonString(PlacementLabel(c.placement())),
      ",\"normalize\":", c.normalize() ? "true" : "false",
      ",\"storage_dtype\":", JsonString(DTypeLabel(c.storage_dtype())),
      ",\"quantize_queries\":", c.quantize_queries() ? "true" : "false",
      ",\"pool_factor\":", std::max(1, c.pool_factor()),
      ",\"num_documents\":", c.num_documents(),
      ",\"num_tokens\":", c.num_tokens(), ",\"bytes\":", c.bytes(),
      ",\"streamed_bytes\":", c.streamed_bytes(),
      ",\"num_segments\":", c.num_segments(),
      ",\"num_deleted\":", c.num_deleted(),
      ",\"resident_on\":", JsonString(c.resident_on()), "}");
}

void PrintCorpusText(const v1::CorpusInfo& c) {
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"name", c.name()},
      {"dim", absl::StrCat(c.dim())},
      {"layout", LayoutLabel(c.layout())},
      {"storage_dtype", DTypeLabel(c.storage_dtype())},
      {"quantize_queries", c.quantize_queries() ? "true" : "false"},
      {"placement", PlacementLabel(c.placement())},
      {"resident_on", c.resident_on()},
      {"normalize", c.normalize() ? "true" : "false"},
      {"pool_factor", absl::StrCat(std::max(1, c.pool_factor()))},
      {"documents", absl::StrCat(c.num_documents())},
      {"tokens", absl::StrCat(c.num_tokens())},
      {"deleted", absl::StrCat(c.num_deleted())},
      {"segments", absl::StrCat(c.num_segments())},
      {"bytes", absl::StrCat(c.bytes())},
      {"streamed_bytes", absl::StrCat(c.streamed_bytes())},
  };
  for (const auto& [key, value] : rows) {
    std::printf("%-16s %s\n", key.c_str(), value.c_str());
  }
}

void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows,
                const std::vector<bool>& right_align) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool last = c + 1 == row.size();
      line += right_align[c] ? pad + row[c] : (last ? row[c] : row[c] + pad);
    }
    std::printf("%s\n", line.c_str());
  };
  print_row(header);
  for (const auto& row : rows) print_row(row);
}

}  // namespace maxsimd::ctl
