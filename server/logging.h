// The server's log lines: their format (spdlog's text lines, or one JSON
// object per line), the level (set by --log_level and changed at run time
// by Admin.SetLogLevel), and the request id of the call a line is written
// for.
//
// A call's request id comes from its `x-request-id` metadata (kRequestIdKey).
// While a call is handled, the code that logs for it holds a ScopedRequestId;
// the formatters installed by ConfigureLogging read it back on the same
// thread. That needs spdlog's synchronous loggers (the default), which format
// each line on the thread that logs it; an asynchronous logger would lose the
// id. A call without the metadata has no id: nothing is generated, the lines
// carry none and nothing is echoed.
//
// Thread-safety: ConfigureLogging must run before any other thread logs
// (main, at start-up). Everything else is safe from any thread: the level is
// atomic in spdlog, and the request id is per thread.
#ifndef MAXSIMD_SERVER_LOGGING_H_
#define MAXSIMD_SERVER_LOGGING_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"
#include "spdlog/formatter.h"
#include "spdlog/spdlog.h"

namespace maxsimd {

// Either format writes exactly one line per log call, whatever the values
// logged hold (a corpus name with a newline cannot forge a line).
enum class LogFormat {
  // spdlog's lines: "[2024-05-01 12:00:00.123] [info] message", with
  // "[request_id=ID] " before the message when the line has one. The
  // message and the id are escaped: a backslash is doubled; newline,
  // carriage return and tab become \n, \r and \t; other C0 controls, DEL
  // and bytes that are not well-formed UTF-8 become \xNN; C1 controls,
  // U+2028..U+202E and U+2066..U+2069 (line separators, bidirectional
  // overrides) become \uXXXX. Other UTF-8 is copied.
  kText,
  // One JSON object per line: {"time":"2024-05-01T12:00:00.123456Z",
  // "level":"info","logger":"maxsimd","thread":123,"message":"...",
  // "request_id":"..."}; "request_id" only when the line has one. Strings
  // are escaped per RFC 8259 (the code points the text format writes as
  // \uXXXX too) and invalid UTF-8 becomes U+FFFD, so every line parses.
  kJson,
};

// "text" or "json"; INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<LogFormat> ParseLogFormat(absl::string_view name,
                                         absl::string_view field);

// "trace", "debug", "info", "warn", "error", "critical" or "off" (also
// "warning" and "err", as spdlog spells them); INVALID_ARGUMENT naming
// `field` and the allowed names otherwise.
absl::StatusOr<spdlog::level::level_enum> ParseLogLevel(
    absl::string_view name, absl::string_view field);

// The canonical name of a level, as ParseLogLevel's first list spells it.
absl::string_view LogLevelName(spdlog::level::level_enum level);

// Renames the default logger "maxsimd" (keeping its sinks) and installs the
// formatter of `format` on every sink. Call once, before other threads log.
void ConfigureLogging(LogFormat format);

// The formatter of `format`, for a sink of one's own (tests).
std::unique_ptr<spdlog::formatter> MakeLogFormatter(LogFormat format);

// The metadata key that carries a request id, and the most bytes of it that
// are kept (a longer value is cut).
inline constexpr char kRequestIdKey[] = "x-request-id";
inline constexpr size_t kMaxRequestIdBytes = 128;

// The call's request id: its x-request-id metadata, cut to
// kMaxRequestIdBytes; "" when absent. If present, the id is also added to
// the call's trailing metadata (trailing rather than initial, so that an
// error still goes out as a trailers-only response, which gRPC's client
// retry policies need). Call from the reaction, before Finish.
std::string TakeRequestId(grpc::ServerContextBase* ctx);

// The request id of the lines this thread logs while the object lives;
// restores the previous one on destruction. `id` must outlive the object.
class ScopedRequestId {
 public:
  explicit ScopedRequestId(absl::string_view id);
  ~ScopedRequestId();
  ScopedRequestId(const ScopedRequestId&) = delete;
  ScopedRequestId& operator=(const ScopedRequestId&) = delete;

 private:
  absl::string_view previous_;
};

// The request id of the lines this thread logs now; "" when none.
absl::string_view CurrentRequestId();

// Logs one finished call: at debug when it succeeded; when it failed, at
// error for a fault of the server (INTERNAL, DATA_LOSS, UNKNOWN), warn for a
// refusal under load or a deadline (RESOURCE_EXHAUSTED, UNAVAILABLE,
// DEADLINE_EXCEEDED, ABORTED) and info for the caller's mistakes and
// cancellations (every other code). Failure lines are rate-limited to
// kMaxFailureLinesPerSecond a second, process-wide; the first line after a
// suppression says how many were dropped. `request_id` may be empty;
// `stream_message_id`, when not empty, names the failed message of a
// stream (its RerankRequest.request_id).
inline constexpr int kMaxFailureLinesPerSecond = 20;
void LogCall(absl::string_view method, absl::string_view request_id,
             double seconds, const absl::Status& status,
             absl::string_view stream_message_id = {});

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_LOGGING_H_
