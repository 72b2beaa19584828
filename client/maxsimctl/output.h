// maxsimctl's output: JSON values written by hand (one object a line, for
// --json), the text of a corpus, and aligned text tables.
//
// Thread-safety: pure functions, except that the Print* functions write to
// stdout.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_OUTPUT_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_OUTPUT_H_

#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "maxsimd/v1/admin.pb.h"
#include "maxsimd/v1/types.pb.h"

namespace maxsimd::ctl {

// `s` as a JSON string: quotes, backslashes and control characters escaped,
// UTF-8 passed through.
std::string JsonString(absl::string_view s);

// `v` as a JSON number (%.9g); JSON has no NaN or infinity, so they become
// null.
std::string JsonNumber(double v);

// The names maxsimctl prints for the API's enums ("unspecified" for values
// it does not know).
const char* DTypeLabel(v1::DType t);
const char* LayoutLabel(v1::Layout l);

// A corpus as one JSON object, and as "key value" lines on stdout.
std::string CorpusJson(const v1::CorpusInfo& c);
void PrintCorpusText(const v1::CorpusInfo& c);

// Prints `header` and `rows` to stdout as columns two spaces apart, each as
// wide as its widest cell: right-aligned where `right_align` says (numbers),
// else left-aligned. Every row has header.size() cells.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows,
                const std::vector<bool>& right_align);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_OUTPUT_H_
