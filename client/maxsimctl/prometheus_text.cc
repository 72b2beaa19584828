#include "client/maxsimctl/prometheus_text.h"

#include <cmath>
#include <limits>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"

namespace maxsimd::ctl {
namespace {

// Reads the labels of `line` from `*i`, just past its '{', into `labels`,
// and leaves `*i` just past the closing '}'; false when they do not parse.
bool ParseLabels(absl::string_view line, size_t* i,
                 std::map<std::string, std::string>* labels) {
  size_t pos = *i;
  while (pos < line.size() && line[pos] != '}') {
    const size_t eq = line.find('=', pos);
    if (eq == absl::string_view::npos || eq + 1 >= line.size() ||
        line[eq + 1] != '"') {
      return false;
    }
    std::string key(absl::StripAsciiWhitespace(line.substr(pos, eq - pos)));
    std::string value;
    size_t k = eq + 2;
    for (; k < line.size() && line[k] != '"'; ++k) {
      if (line[k] == '\\' && k + 1 < line.size()) {
        ++k;
        value.push_back(line[k] == 'n' ? '\n' : line[k]);
      } else {
        value.push_back(line[k]);
      }
    }
    if (k >= line.size()) return false;
    (*labels)[key] = std::move(value);
    pos = k + 1;
    if (pos < line.size() && line[pos] == ',') ++pos;
  }
  if (pos >= line.size()) return false;
  *i = pos + 1;  // past '}'
  return true;
}

}  // namespace

std::vector<Sample> ParsePrometheusText(absl::string_view text) {
  std::vector<Sample> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    if (s.name.empty()) continue;
    if (i < line.size() && line[i] == '{') {
      ++i;
      if (!ParseLabels(line, &i, &s.labels)) continue;
    }
    absl::string_view rest = absl::StripAsciiWhitespace(line.substr(i));
    rest = rest.substr(0, rest.find(' '));  // drop a timestamp
    if (rest == "+Inf" || rest == "Inf") {
      s.value = std::numeric_limits<double>::infinity();
    } else if (rest == "-Inf") {
      s.value = -std::numeric_limits<double>::infinity();
    } else if (rest == "NaN") {
      s.value = std::numeric_limits<double>::quiet_NaN();
    } else if (!absl::SimpleAtod(rest, &s.value)) {
      continue;
    }
    out.push_back(std::move(s));
  }
  return out;
}

double EstimateQuantile(const Histogram& h, double q) {
  double total = 0;
  if (!h.buckets.empty()) total = h.buckets.rbegin()->second;
  if (!(total > 0)) return std::numeric_limits<double>::quiet_NaN();
  const double rank = q * total;
  double lower = 0, below = 0;
  for (const auto& [le, cumulative] : h.buckets) {
    if (cumulative >= rank) {
      if (std::isinf(le)) return lower;
      if (cumulative == below) return le;
      return lower + (le - lower) * (rank - below) / (cumulative - below);
    }
    lower = le;
    below = cumulative;
  }
  return lower;
}

}  // namespace maxsimd::ctl
