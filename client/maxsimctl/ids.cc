#include "client/maxsimctl/ids.h"

#include <cstddef>

#include "absl/status/status.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "client/maxsimctl/flags.h"
#include "index/importers.h"

namespace maxsimd::ctl {
namespace {

constexpr size_t kMaxIdBytes = 256;  // AddDocumentsRequest.ids

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), the check protobuf applies.
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;  // bounds of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    } else {
      return false;
    }
    if (s.size() - i < n) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// `id` for a message: quoted, with C escapes for control characters (a tab
// shows as \t) and for any byte of an id that is not UTF-8; a long id is
// cut after 64 bytes, with its length.
std::string ShowId(absl::string_view id) {
  const bool utf8 = IsUtf8(id);
  absl::string_view shown = id;
  if (shown.size() > 64) {
    size_t cut = 64;
    while (utf8 && cut > 0 &&
           (static_cast<unsigned char>(id[cut]) & 0xc0) == 0x80) {
      --cut;  // not inside a character
    }
    shown = id.substr(0, cut);
  }
  return absl::StrCat(
      "\"", utf8 ? absl::Utf8SafeCHexEscape(shown) : absl::CHexEscape(shown),
      shown.size() < id.size() ? absl::StrCat("...\" (", id.size(), " bytes)")
                               : "\"");
}

// Why the API would refuse `id`; "" when it takes it.
std::string IdProblem(absl::string_view id) {
  if (id.empty()) return "is empty";
  if (id.size() > kMaxIdBytes) {
    return absl::StrCat("is over the API's limit of ", kMaxIdBytes, " bytes");
  }
  if (!IsUtf8(id)) return "is not UTF-8";
  return "";
}

}  // namespace

absl::StatusOr<std::vector<std::string>> ParseIdList(absl::string_view list,
                                                     absl::string_view flag) {
  if (list.empty()) {
    return UsageError(
        absl::StrCat("--", flag, " is empty: give at least one id"));
  }
  std::vector<std::string> ids;
  for (absl::string_view id : absl::StrSplit(list, ',')) {
    const std::string problem = IdProblem(id);
    if (!problem.empty()) {
      return UsageError(absl::StrCat(
          "--", flag, ": id ", ids.size() + 1, " ", ShowId(id), " ", problem,
          id.empty() ? " (ids are separated by single commas; an id that "
                       "holds ',' goes in a file, one per line)"
                     : ""));
    }
    ids.emplace_back(id);
  }
  return ids;
}

absl::StatusOr<std::vector<std::string>> ReadIdFile(const std::string& path,
                                                    absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadInputFile(path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("--", flag, ": ", text.status().message()));
  }
  std::vector<std::string> ids;
  absl::string_view lines = *text;
  if (lines.empty()) return ids;
  absl::ConsumeSuffix(&lines, "\n");
  for (absl::string_view id : absl::StrSplit(lines, '\n')) {
    absl::ConsumeSuffix(&id, "\r");
    std::string problem = IdProblem(id);
    if (problem.empty() && absl::EndsWith(id, "\r")) {
      problem =
          "ends in \"\\r\", which an ids file cannot carry (one \"\\r\" "
          "before \"\\n\" is part of the line ending)";
    }
    if (!problem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", path, "' line ", ids.size() + 1,
                       ": id ", ShowId(id), " ", problem));
    }
    ids.emplace_back(id);
  }
  return ids;
}

}  // namespace maxsimd::ctl
