#include "client/maxsimctl/top_command.h"

#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/maxsimctl/http.h"
#include "client/maxsimctl/output.h"
#include "client/maxsimctl/prometheus_text.h"

namespace maxsimd::ctl {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// What top shows, from one scrape or the difference of two.
struct MetricsView {
  std::string version, backend;
  double start_time = kNaN;  // unix s
  // method -> code -> finished calls.
  std::map<std::string, std::map<std::string, double>> calls;
  std::map<std::string, Histogram> method_latency;  // request_duration
  std::map<std::string, Histogram> stage_latency;   // stage_duration
  Histogram batch;                                  // batch_queries
  std::map<std::string, double> rejected;           // reason -> queries
  double queue_depth = 0, queue_bytes = 0;          // gauges: never diffed
};

std::string Label(const Sample& s, const char* key) {
  auto it = s.labels.find(key);
  return it == s.labels.end() ? std::string() : it->second;
}

// One sample of a histogram family: `suffix` is "_bucket", "_sum" or
// "_count".
void AddHistogramSample(Histogram& h, const Sample& s,
                        absl::string_view suffix) {
  if (suffix == "_bucket") {
    double le;
    const std::string text = Label(s, "le");
    if (text == "+Inf") {
      le = std::numeric_limits<double>::infinity();
    } else if (!absl::SimpleAtod(text, &le)) {
      return;
    }
    h.buckets[le] = s.value;
  } else if (suffix == "_sum") {
    h.sum = s.value;
  } else if (suffix == "_count") {
    h.count = s.value;
  }
}

MetricsView ViewOf(const std::vector<Sample>& samples) {
  MetricsView v;
  for (const Sample& s : samples) {
    absl::string_view name = s.name;
    if (name == "maxsimd_requests_total") {
      v.calls[Label(s, "method")][Label(s, "code")] += s.value;
    } else if (name == "maxsimd_queue_depth") {
      v.queue_depth = s.value;
    } else if (name == "maxsimd_queue_bytes") {
      v.queue_bytes = s.value;
    } else if (name == "maxsimd_rejected_total") {
      v.rejected[Label(s, "reason")] += s.value;
    } else if (name == "maxsimd_build_info") {
      v.version = Label(s, "version");
      v.backend = Label(s, "backend");
    } else if (name == "process_start_time_seconds") {
      v.start_time = s.value;
    } else {
      for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
        absl::string_view base = name;
        if (!absl::ConsumeSuffix(&base, suffix)) continue;
        if (base == "maxsimd_request_duration_seconds") {
          AddHistogramSample(v.method_latency[Label(s, "method")], s, suffix);
        } else if (base == "maxsimd_stage_duration_seconds") {
          AddHistogramSample(v.stage_latency[Label(s, "stage")], s, suffix);
        } else if (base == "maxsimd_batch_queries") {
          AddHistogramSample(v.batch, s, suffix);
        }
        break;
      }
    }
  }
  return v;
}

// cur - prev for counters and histograms (a counter that went down means
// the server restarted: cur is taken whole); gauges are cur's.
Histogram Minus(const Histogram& cur, const Histogram* prev) {
  if (prev == nullptr || cur.count < prev->count) return cur;
  Histogram d = cur;
  d.sum -= prev->sum;
  d.count -= prev->count;
  for (auto& [le, n] : d.buckets) {
    auto it = prev->buckets.find(le);
    if (it != prev->buckets.end()) n -= it->second;
  }
  return d;
}

MetricsView Minus(const MetricsView& cur, const MetricsView& prev) {
  MetricsView d = cur;
  for (auto& [method, codes] : d.calls) {
    for (auto& [code, n] : codes) {
      auto m = prev.calls.find(method);
      if (m == prev.calls.end()) continue;
      auto c = m->second.find(code);
      if (c != m->second.end() && c->second <= n) n -= c->second;
    }
  }
  auto minus_all = [](std::map<std::string, Histogram>& out,
                      const std::map<std::string, Histogram>& before) {
    for (auto& [key, h] : out) {
      auto it = before.find(key);
      h = Minus(h, it == before.end() ? nullptr : &it->second);
    }
  };
  minus_all(d.method_latency, prev.method_latency);
  minus_all(d.stage_latency, prev.stage_latency);
  d.batch = Minus(cur.batch, &prev.batch);
  for (auto& [reason, n] : d.rejected) {
    auto it = prev.rejected.find(reason);
    if (it != prev.rejected.end() && it->second <= n) n -= it->second;
  }
  return d;
}

std::string FormatMs(double seconds) {
  if (std::isnan(seconds)) return "-";
  return absl::StrFormat("%.3f", seconds * 1e3);
}

std::string FormatRate(double n, double window) {
  if (!(window > 0)) return "-";
  return absl::StrFormat("%.1f", n / window);
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0)) return "-";
  if (seconds < 1) return "0s";
  return absl::FormatDuration(absl::Seconds(std::floor(seconds)));
}

double Mean(const Histogram& h) { return h.count > 0 ? h.sum / h.count : kNaN; }

// One frame's figures: `window` seconds of a MetricsView (since_start when
// it counts from the server's start), summed over codes and reasons.
struct Frame {
  struct MethodRow {
    std::string method;
    double calls = 0, errors = 0;
    Histogram latency;
  };
  std::string address;
  double window = 0, uptime = 0;
  bool since_start = false;
  double requests = 0, errors = 0, rejected = 0;
  double mean_batch = kNaN;
  Histogram total;  // the "total" stage: one observation per query
  std::vector<MethodRow> methods;
  std::vector<std::pair<std::string, Histogram>> stages;  // pipeline order

  double PerSecond(double n) const { return window > 0 ? n / window : kNaN; }
};

Frame FrameOf(const MetricsView& v) {
  Frame f;
  for (const auto& [method, codes] : v.calls) {
    Frame::MethodRow row;
    row.method = method;
    for (const auto& [code, n] : codes) {
      row.calls += n;
      if (code != "OK") row.errors += n;
    }
    auto it = v.method_latency.find(method);
    if (it != v.method_latency.end()) row.latency = it->second;
    f.requests += row.calls;
    f.errors += row.errors;
    f.methods.push_back(std::move(row));
  }
  for (const auto& [reason, n] : v.rejected) f.rejected += n;
  static const char* kStageOrder[] = {"queue", "compute", "h2d",  "kernel",
                                      "topk",  "d2h",     "total"};
  for (const char* stage : kStageOrder) {
    auto it = v.stage_latency.find(stage);
    if (it != v.stage_latency.end()) f.stages.emplace_back(stage, it->second);
  }
  if (auto it = v.stage_latency.find("total"); it != v.stage_latency.end()) {
    f.total = it->second;
  }
  if (v.batch.count > 0) f.mean_batch = v.batch.sum / v.batch.count;
  return f;
}

std::string FrameJson(const MetricsView& v, const Frame& f) {
  auto ms = [](double s) { return JsonNumber(s * 1e3); };
  const Histogram& t = f.total;
  std::string out = absl::StrCat(
      "{\"metrics\":", JsonString(f.address),
      ",\"version\":", JsonString(v.version),
      ",\"backend\":", JsonString(v.backend),
      ",\"uptime_seconds\":", JsonNumber(f.uptime),
      ",\"window_seconds\":", JsonNumber(f.window),
      ",\"since_start\":", f.since_start ? "true" : "false",
      ",\"requests\":", JsonNumber(f.requests),
      ",\"qps\":", JsonNumber(f.PerSecond(f.requests)),
      ",\"errors\":", JsonNumber(f.errors),
      ",\"errors_per_second\":", JsonNumber(f.PerSecond(f.errors)),
      ",\"queries\":", JsonNumber(t.count),
      ",\"latency_p50_ms\":", ms(EstimateQuantile(t, 0.5)),
      ",\"latency_p99_ms\":", ms(EstimateQuantile(t, 0.99)),
      ",\"latency_mean_ms\":", ms(Mean(t)),
      ",\"queue_depth\":", JsonNumber(v.queue_depth),
      ",\"queue_bytes\":", JsonNumber(v.queue_bytes),
      ",\"rejected\":", JsonNumber(f.rejected),
      ",\"rejected_per_second\":", JsonNumber(f.PerSecond(f.rejected)),
      ",\"batch_mean_queries\":", JsonNumber(f.mean_batch),
      ",\"rejected_by_reason\":{");
  bool first = true;
  for (const auto& [reason, n] : v.rejected) {
    absl::StrAppend(&out, first ? "" : ",", JsonString(reason), ":",
                    JsonNumber(n));
    first = false;
  }
  out += "},\"methods\":[";
  for (size_t i = 0; i < f.methods.size(); ++i) {
    const Frame::MethodRow& m = f.methods[i];
    const Histogram& h = m.latency;
    absl::StrAppend(&out, i > 0 ? "," : "",
                    "{\"method\":", JsonString(m.method),
                    ",\"requests\":", JsonNumber(m.calls),
                    ",\"qps\":", JsonNumber(f.PerSecond(m.calls)),
                    ",\"errors\":", JsonNumber(m.errors),
                    ",\"p50_ms\":", ms(EstimateQuantile(h, 0.5)),
                    ",\"p99_ms\":", ms(EstimateQuantile(h, 0.99)),
                    ",\"mean_ms\":", ms(Mean(h)), "}");
  }
  out += "],\"stages\":[";
  for (size_t i = 0; i < f.stages.size(); ++i) {
    const Histogram& h = f.stages[i].second;
    absl::StrAppend(&out, i > 0 ? "," : "",
                    "{\"stage\":", JsonString(f.stages[i].first),
                    ",\"queries\":", JsonNumber(h.count),
                    ",\"p50_ms\":", ms(EstimateQuantile(h, 0.5)),
                    ",\"p99_ms\":", ms(EstimateQuantile(h, 0.99)),
                    ",\"mean_ms\":", ms(Mean(h)), "}");
  }
  return out + "]}\n";
}

// The screen: a summary, then a table of methods and one of stages; `ansi`
// sets the headings in bold.
std::string FrameText(const MetricsView& v, const Frame& f, bool ansi) {
  const double window = f.window;
  const Histogram& t = f.total;
  const std::string bold = ansi ? "\x1b[1m" : "";
  const std::string plain = ansi ? "\x1b[0m" : "";
  std::string out = absl::StrFormat(
      "%smaxsimd %s (%s)%s at %s   up %s   %s\n", bold, v.version, v.backend,
      plain, f.address, FormatDuration(f.uptime),
      f.since_start ? "averages since start"
                    : absl::StrFormat("last %.1fs", window));
  absl::StrAppendFormat(&out, "requests  %s/s   errors %s/s   (%.0f, %.0f)\n",
                        FormatRate(f.requests, window),
                        FormatRate(f.errors, window), f.requests, f.errors);
  absl::StrAppendFormat(
      &out, "latency   p50 %s ms   p99 %s ms   mean %s ms   (%.0f queries)\n",
      FormatMs(EstimateQuantile(t, 0.5)), FormatMs(EstimateQuantile(t, 0.99)),
      FormatMs(Mean(t)), t.count);
  std::string reasons;
  for (const auto& [reason, n] : v.rejected) {
    if (n > 0) absl::StrAppendFormat(&reasons, " %s=%.0f", reason, n);
  }
  absl::StrAppendFormat(
      &out, "queue     %.0f queries, %.0f bytes   rejected %s/s (%.0f%s)\n",
      v.queue_depth, v.queue_bytes, FormatRate(f.rejected, window), f.rejected,
      reasons.empty() ? "" : absl::StrCat(":", reasons));
  absl::StrAppendFormat(&out, "batches   mean %s queries\n\n",
                        std::isnan(f.mean_batch)
                            ? std::string("-")
                            : absl::StrFormat("%.1f", f.mean_batch));
  absl::StrAppendFormat(&out, "%s%-16s %9s %9s %10s %10s %10s%s\n", bold,
                        "METHOD", "REQ/S", "ERR/S", "P50 MS", "P99 MS",
                        "MEAN MS", plain);
  for (const Frame::MethodRow& m : f.methods) {
    if (!f.since_start && m.calls == 0) continue;  // idle in this interval
    const Histogram& h = m.latency;
    absl::StrAppendFormat(
        &out, "%-16s %9s %9s %10s %10s %10s\n", m.method,
        FormatRate(m.calls, window), FormatRate(m.errors, window),
        FormatMs(EstimateQuantile(h, 0.5)), FormatMs(EstimateQuantile(h, 0.99)),
        FormatMs(Mean(h)));
  }
  absl::StrAppendFormat(&out, "\n%s%-16s %9s %9s %10s %10s %10s%s\n", bold,
                        "STAGE", "QUERIES", "QUERY/S", "P50 MS", "P99 MS",
                        "MEAN MS", plain);
  for (const auto& [stage, h] : f.stages) {
    // Stages the backend does not time (h2d, topk and d2h on the CPU) are
    // observed as 0 s: left out, as are stages idle in this interval.
    if (h.count == 0 || h.sum == 0) continue;
    absl::StrAppendFormat(
        &out, "%-16s %9.0f %9s %10s %10s %10s\n", stage, h.count,
        FormatRate(h.count, window), FormatMs(EstimateQuantile(h, 0.5)),
        FormatMs(EstimateQuantile(h, 0.99)), FormatMs(Mean(h)));
  }
  return out;
}

// One frame: `window` seconds of `v`; since_start when v counts from the
// server's start.
std::string TopFrame(const MetricsView& v, const std::string& address,
                     double window, double uptime, bool since_start, bool json,
                     bool ansi) {
  Frame f = FrameOf(v);
  f.address = address;
  f.window = window;
  f.uptime = uptime;
  f.since_start = since_start;
  return json ? FrameJson(v, f) : FrameText(v, f, ansi);
}

// The metrics address: --metrics, else --target's host at port 9464.
absl::StatusOr<std::string> MetricsAddress(const Globals& g, const Flags& f) {
  std::string address = f.Get("metrics");
  if (!address.empty()) return address;
  std::string host, port;
  if (!SplitHostPort(g.options.target, &host, &port)) {
    return UsageError(
        absl::StrCat("cannot tell the metrics address from --target '",
                     g.options.target, "'; give --metrics"));
  }
  return absl::StrCat(
      host.find(':') != std::string::npos ? absl::StrCat("[", host, "]") : host,
      ":9464");
}

}  // namespace

int RunTop(const Globals& g, const Flags& f) {
  absl::StatusOr<std::string> metrics_address = MetricsAddress(g, f);
  if (!metrics_address.ok()) {
    return PrintError(metrics_address.status(), kExitUsage);
  }
  const std::string address = *std::move(metrics_address);
  absl::Duration interval;
  if (!absl::ParseDuration(f.Get("interval"), &interval) ||
      interval <= absl::ZeroDuration()) {
    return PrintError(
        UsageError(absl::StrCat("--interval must be a positive duration such "
                                "as 500ms or 2s, got '",
                                f.Get("interval"), "'")),
        kExitUsage);
  }
  absl::StatusOr<int64_t> iterations =
      ParseInt(f, "iterations", 0, std::numeric_limits<int32_t>::max());
  if (!iterations.ok()) return PrintError(iterations.status(), kExitUsage);
  if (f.Bool("once")) *iterations = 1;
  const bool ansi = !g.json && *iterations != 1 && isatty(fileno(stdout));
  std::string token;
  if (!f.Get("metrics-token-file").empty()) {
    absl::StatusOr<std::string> read =
        ReadFirstToken(f.Get("metrics-token-file"), "metrics-token-file");
    if (!read.ok()) return PrintError(read.status(), kExitUsage);
    token = *std::move(read);
  }

  std::optional<MetricsView> previous;
  absl::Time previous_time;
  for (int64_t frame = 0; *iterations == 0 || frame < *iterations; ++frame) {
    if (frame > 0) absl::SleepFor(interval);
    absl::StatusOr<std::string> body =
        HttpGetMetrics(address, g.options.timeout, token);
    if (!body.ok()) return PrintError(body.status(), kExitError);
    const absl::Time now = absl::Now();
    MetricsView view = ViewOf(ParsePrometheusText(*body));
    if (view.version.empty()) {
      return PrintError(absl::UnavailableError(absl::StrCat(
                            address,
                            "/metrics has no maxsimd_build_info: not a maxsimd "
                            "metrics endpoint")),
                        kExitError);
    }
    const double uptime =
        absl::ToDoubleSeconds(now - absl::UnixEpoch()) - view.start_time;
    std::string text;
    if (previous.has_value()) {
      text = TopFrame(Minus(view, *previous), address,
                      absl::ToDoubleSeconds(now - previous_time), uptime,
                      /*since_start=*/false, g.json, ansi);
    } else {
      text = TopFrame(view, address, uptime, uptime, /*since_start=*/true,
                      g.json, ansi);
    }
    if (ansi) {
      std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear screen
    } else if (frame > 0 && !g.json) {
      std::fputs("\n", stdout);
    }
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    previous = std::move(view);
    previous_time = now;
  }
  return kExitOk;
}

}  // namespace maxsimd::ctl
