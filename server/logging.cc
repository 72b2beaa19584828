#include "server/logging.h"

#include <time.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string_view>

#include "absl/strings/str_cat.h"
#include "spdlog/pattern_formatter.h"

namespace maxsimd {
namespace {

// The request id of the call this thread is logging for. A string_view is
// constant-initialised, so reading it costs no TLS guard.
thread_local absl::string_view current_request_id;

constexpr absl::string_view kLevelNames[] = {
    "trace", "debug", "info", "warn", "error", "critical", "off"};
constexpr char kAllowedLevels[] =
    "trace, debug, info, warn, error, critical or off";

// fmt knows std::string_view, not absl's (a type of its own in Debian's
// Abseil).
std::string_view Std(absl::string_view s) { return {s.data(), s.size()}; }

void Append(spdlog::memory_buf_t& dest, absl::string_view s) {
  dest.append(s.data(), s.data() + s.size());
}

// The length of the well-formed UTF-8 sequence at s[i] (RFC 3629: no
// overlong forms, no surrogates, nothing past U+10FFFF), or 0.
size_t Utf8SequenceLength(absl::string_view s, size_t i) {
  const auto byte = [&](size_t k) { return static_cast<unsigned char>(s[k]); };
  const unsigned char c = byte(i);
  size_t n;
  unsigned char lo = 0x80, hi = 0xBF;  // bounds of the second byte
  if (c >= 0xC2 && c <= 0xDF) {
    n = 2;
  } else if (c >= 0xE0 && c <= 0xEF) {
    n = 3;
    if (c == 0xE0) lo = 0xA0;
    if (c == 0xED) hi = 0x9F;
  } else if (c >= 0xF0 && c <= 0xF4) {
    n = 4;
    if (c == 0xF0) lo = 0x90;
    if (c == 0xF4) hi = 0x8F;
  } else {
    return 0;
  }
  if (i + n > s.size()) return 0;
  if (byte(i + 1) < lo || byte(i + 1) > hi) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (byte(i + k) < 0x80 || byte(i + k) > 0xBF) return 0;
  }
  return n;
}

// The code point of the well-formed UTF-8 sequence of `n` bytes at s[i].
uint32_t DecodeUtf8(absl::string_view s, size_t i, size_t n) {
  static constexpr unsigned char kLeadMask[] = {0, 0x7F, 0x1F, 0x0F, 0x07};
  uint32_t cp = static_cast<unsigned char>(s[i]) & kLeadMask[n];
  for (size_t k = 1; k < n; ++k) {
    cp = (cp << 6) | (static_cast<unsigned char>(s[i + k]) & 0x3F);
  }
  return cp;
}

// Whether a code point above U+007F is written as an escape rather than
// copied: the C1 controls (U+0085 NEL among them), the line and paragraph
// separators, which some readers take for line ends, and the bidirectional
// overrides and isolates, which reorder what a terminal shows.
bool EscapesCodePoint(uint32_t cp) {
  return (cp >= 0x80 && cp <= 0x9F) || (cp >= 0x2028 && cp <= 0x202E) ||
         (cp >= 0x2066 && cp <= 0x2069);
}

constexpr char kHex[] = "0123456789abcdef";

// Appends "\uXXXX" for a code point of the Basic Multilingual Plane.
void AppendUnicodeEscape(spdlog::memory_buf_t& dest, uint32_t cp) {
  const char esc[] = {'\\',
                      'u',
                      kHex[(cp >> 12) & 15],
                      kHex[(cp >> 8) & 15],
                      kHex[(cp >> 4) & 15],
                      kHex[cp & 15]};
  dest.append(esc, esc + sizeof(esc));
}

// Appends "\xNN" for one byte.
void AppendByteEscape(spdlog::memory_buf_t& dest, unsigned char c) {
  const char esc[] = {'\\', 'x', kHex[c >> 4], kHex[c & 15]};
  dest.append(esc, esc + sizeof(esc));
}

enum class EscapeStyle { kText, kJson };

// Appends `s` escaped so that it stays on one line and reads back
// unambiguously. Printable ASCII and well-formed UTF-8 are copied, except
// that a backslash is doubled (and, for JSON, a quote escaped); newline,
// carriage return and tab become \n, \r and \t; the code points of
// EscapesCodePoint become \uXXXX. Every other C0 control and DEL becomes
// \xNN in text and \u00NN in JSON; a byte that is not part of well-formed
// UTF-8 becomes \xNN in text and U+FFFD in JSON.
void AppendEscaped(spdlog::memory_buf_t& dest, absl::string_view s,
                   EscapeStyle style) {
  const bool json = style == EscapeStyle::kJson;
  // Most values need nothing: copy them in one append.
  size_t clean = 0;
  while (clean < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[clean]);
    if (c < 0x20 || c >= 0x7F || c == '\\' || (json && c == '"')) break;
    ++clean;
  }
  Append(dest, s.substr(0, clean));
  size_t i = clean;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x80) {
      const size_t n = Utf8SequenceLength(s, i);
      if (n == 0) {
        if (json) {
          Append(dest, "\\ufffd");
        } else {
          AppendByteEscape(dest, c);
        }
        ++i;
        continue;
      }
      const uint32_t cp = DecodeUtf8(s, i, n);
      if (EscapesCodePoint(cp)) {
        AppendUnicodeEscape(dest, cp);
      } else {
        Append(dest, s.substr(i, n));
      }
      i += n;
      continue;
    }
    switch (c) {
      case '\\':
        Append(dest, "\\\\");
        break;
      case '\n':
        Append(dest, "\\n");
        break;
      case '\r':
        Append(dest, "\\r");
        break;
      case '\t':
        Append(dest, "\\t");
        break;
      default:
        if (json && c == '"') {
          Append(dest, "\\\"");
        } else if (c < 0x20 || c == 0x7F) {
          if (json) {
            AppendUnicodeEscape(dest, c);
          } else {
            AppendByteEscape(dest, c);
          }
        } else {
          dest.push_back(static_cast<char>(c));
        }
    }
    ++i;
  }
}

// `s` for a text line (AppendEscaped).
void AppendTextValue(spdlog::memory_buf_t& dest, absl::string_view s) {
  AppendEscaped(dest, s, EscapeStyle::kText);
}

// `s` as a JSON string, quoted (AppendEscaped): still the same string to a
// JSON reader, but for bytes that are not well-formed UTF-8.
void AppendJsonString(spdlog::memory_buf_t& dest, absl::string_view s) {
  dest.push_back('"');
  AppendEscaped(dest, s, EscapeStyle::kJson);
  dest.push_back('"');
}

// One JSON object per line (LogFormat::kJson). Each sink owns a clone and
// calls it under the sink's lock, so the cached second needs no lock.
class JsonFormatter final : public spdlog::formatter {
 public:
  void format(const spdlog::details::log_msg& msg,
              spdlog::memory_buf_t& dest) override {
    const auto since_epoch = msg.time.time_since_epoch();
    const auto secs =
        std::chrono::duration_cast<std::chrono::seconds>(since_epoch);
    const auto micros = std::chrono::duration_cast<std::chrono::microseconds>(
        since_epoch - secs);
    if (secs.count() != cached_second_) {
      cached_second_ = secs.count();
      const time_t t = static_cast<time_t>(cached_second_);
      tm utc{};
      gmtime_r(&t, &utc);
      std::snprintf(cached_time_, sizeof(cached_time_),
                    "%04d-%02d-%02dT%02d:%02d:%02d", utc.tm_year + 1900,
                    utc.tm_mon + 1, utc.tm_mday, utc.tm_hour, utc.tm_min,
                    utc.tm_sec);
    }
    char fraction[32];
    std::snprintf(fraction, sizeof(fraction), ".%06dZ",
                  static_cast<int>(micros.count()));
    Append(dest, "{\"time\":\"");
    Append(dest, cached_time_);
    Append(dest, fraction);
    Append(dest, "\",\"level\":\"");
    Append(dest, LogLevelName(msg.level));
    Append(dest, "\",\"logger\":");
    AppendJsonString(dest, absl::string_view(msg.logger_name.data(),
                                             msg.logger_name.size()));
    Append(dest, ",\"thread\":");
    Append(dest, absl::StrCat(msg.thread_id));
    Append(dest, ",\"message\":");
    AppendJsonString(dest,
                     absl::string_view(msg.payload.data(), msg.payload.size()));
    if (!current_request_id.empty()) {
      Append(dest, ",\"request_id\":");
      AppendJsonString(dest, current_request_id);
    }
    Append(dest, "}\n");
  }

  std::unique_ptr<spdlog::formatter> clone() const override {
    return std::make_unique<JsonFormatter>();
  }

 private:
  int64_t cached_second_ = -1;
  char cached_time_[64] = {};  // room for any int the format could print
};

// The %Q flag of the text pattern: "[request_id=ID] " when the line has an
// id. Escaped like the message: gRPC keeps metadata printable ASCII, but a
// ScopedRequestId may hold any string.
class RequestIdFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg&, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    if (current_request_id.empty()) return;
    Append(dest, "[request_id=");
    AppendTextValue(dest, current_request_id);
    Append(dest, "] ");
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<RequestIdFlag>();
  }
};

// The %V flag of the text pattern, in place of spdlog's %v: the message,
// escaped by AppendTextValue. Values reach spdlog already formatted into the
// message, so escaping here covers every value of every call.
class EscapedMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    AppendTextValue(dest,
                    absl::string_view(msg.payload.data(), msg.payload.size()));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<EscapedMessageFlag>();
  }
};

// The %N flag of the text pattern: the level's name as the JSON lines and
// the log-level RPCs spell it ("warn", not spdlog's "warning").
class LevelNameFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    Append(dest, LogLevelName(msg.level));
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<LevelNameFlag>();
  }
};

// Process-wide budget of failure lines: kMaxFailureLinesPerSecond per
// second of the steady clock. Approximate under races (two threads may
// both reset a new second), which only shifts a line or two.
struct FailureLineBudget {
  std::atomic<int64_t> second{-1};
  std::atomic<int> lines{0};
  std::atomic<int64_t> suppressed{0};
};
FailureLineBudget failure_budget;

// Whether one more failure line may be written now; if so, *dropped is the
// number suppressed since the last one written.
bool TakeFailureLine(int64_t* dropped) {
  const int64_t now = std::chrono::duration_cast<std::chrono::seconds>(
                          std::chrono::steady_clock::now().time_since_epoch())
                          .count();
  int64_t seen = failure_budget.second.load(std::memory_order_relaxed);
  if (seen != now && failure_budget.second.compare_exchange_strong(seen, now)) {
    failure_budget.lines.store(0, std::memory_order_relaxed);
  }
  if (failure_budget.lines.fetch_add(1, std::memory_order_relaxed) >=
      kMaxFailureLinesPerSecond) {
    failure_budget.suppressed.fetch_add(1, std::memory_order_relaxed);
    return false;
  }
  *dropped = failure_budget.suppressed.exchange(0, std::memory_order_relaxed);
  return true;
}

spdlog::level::level_enum FailureLevel(absl::StatusCode code) {
  switch (code) {
    case absl::StatusCode::kInternal:
    case absl::StatusCode::kDataLoss:
    case absl::StatusCode::kUnknown:
      return spdlog::level::err;
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kAborted:
      return spdlog::level::warn;
    default:
      return spdlog::level::info;
  }
}

}  // namespace

absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name,
                                         absl::string_view field) {
  if (name == "text") return LogFormat::kText;
  if (name == "json") return LogFormat::kJson;
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is \"", name.substr(0, 64), "\"; must be text or json"));
}

absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(
    absl::string_view name, absl::string_view field) {
  for (size_t i = 0; i < std::size(kLevelNames); ++i) {
    if (name == kLevelNames[i]) {
      return static_cast<spdlog::level::level_enum>(i);
    }
  }
  if (name == "warning") return spdlog::level::warn;
  if (name == "err") return spdlog::level::err;
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is \"", name.substr(0, 64), "\"; must be ", kAllowedLevels));
}

absl::string_view LogLevelName(spdlog::level::level_enum level) {
  const size_t i = static_cast<size_t>(level);
  return i < std::size(kLevelNames) ? kLevelNames[i] : "unknown";
}

std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format) {
  if (format == LogFormat::kJson) return std::make_unique<JsonFormatter>();
  auto text = std::make_unique<spdlog::pattern_formatter>();
  text->add_flag<RequestIdFlag>('Q')
      .add_flag<LevelNameFlag>('N')
      .add_flag<EscapedMessageFlag>('V')
      .set_pattern("[%Y-%m-%d %H:%M:%S.%e] [%^%N%$] %Q%V");
  return text;
}

void ConfigureLogging(LogFormat format) {
  std::shared_ptr<spdlog::logger> logger =
      spdlog::default_logger()->clone("maxsimd");
  logger->set_formatter(MakeLogFormatter(format));
  spdlog::set_default_logger(std::move(logger));
}

std::string TakeRequestId(grpc::ServerContextBase* ctx) {
  const auto& metadata = ctx->client_metadata();
  const auto it = metadata.find(kRequestIdKey);
  if (it == metadata.end() || it->second.empty()) return std::string();
  std::string id(it->second.data(),
                 std::min(it->second.size(), kMaxRequestIdBytes));
  ctx->AddTrailingMetadata(kRequestIdKey, id);
  return id;
}

ScopedRequestId::ScopedRequestId(absl::string_view id)
    : previous_(current_request_id) {
  current_request_id = id;
}

ScopedRequestId::~ScopedRequestId() { current_request_id = previous_; }

absl::string_view CurrentRequestId() { return current_request_id; }

void LogCall(absl::string_view method, absl::string_view request_id,
             double seconds, const absl::Status& status,
             absl::string_view stream_message_id) {
  if (status.ok()) {
    if (!spdlog::should_log(spdlog::level::debug)) return;
    ScopedRequestId scope(request_id);
    spdlog::debug("{} OK {:.3f} ms", Std(method), seconds * 1e3);
    return;
  }
  const spdlog::level::level_enum level = FailureLevel(status.code());
  int64_t dropped = 0;
  if (!spdlog::should_log(level) || !TakeFailureLine(&dropped)) return;
  ScopedRequestId scope(request_id);
  const std::string code = absl::StatusCodeToString(status.code());
  spdlog::log(level, "{}{}{}{} {} {:.3f} ms: {}{}{}{}", Std(method),
              stream_message_id.empty() ? "" : " message \"",
              Std(stream_message_id), stream_message_id.empty() ? "" : "\"",
              code, seconds * 1e3, Std(status.message()),
              dropped > 0 ? " (" : "",
              dropped > 0 ? absl::StrCat(dropped) : std::string(),
              dropped > 0 ? " failure lines suppressed before this one)" : "");
}

}  // namespace maxsimd
