// The Prometheus text exposition format (0.0.4) as `maxsimctl top` reads it:
// the sample lines of a /metrics body, and quantiles estimated from a
// histogram's buckets.
//
// Thread-safety: pure functions.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_PROMETHEUS_TEXT_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_PROMETHEUS_TEXT_H_

#include <map>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"

namespace maxsimd::ctl {

// One sample of the text format: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// The sample lines of Prometheus text, in order; comments are skipped, and
// so is a line that does not parse (top shows what it understands). A
// sample's timestamp is dropped; +Inf, -Inf and NaN are read as such.
std::vector<Sample> ParsePrometheusText(absl::string_view text);

// A histogram's cumulative buckets (upper bound -> count), sum and count.
struct Histogram {
  std::map<double, double> buckets;
  double sum = 0;
  double count = 0;
};

// Estimates quantile q from cumulative buckets the way PromQL's
// histogram_quantile does: linear within the bucket holding rank q * count,
// from 0 for the first; the highest finite bound for the +Inf bucket. NaN
// when there are no observations.
double EstimateQuantile(const Histogram& h, double q);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_PROMETHEUS_TEXT_H_
