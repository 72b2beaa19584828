// Installs a default spdlog logger that writes the server's text lines
// (server/logging.h) to a string at `level`; restores the previous one on
// exit (for tests).
#ifndef MAXSIMD_TESTS_SUPPORT_CAPTURED_LOG_H_
#define MAXSIMD_TESTS_SUPPORT_CAPTURED_LOG_H_

#include <memory>
#include <sstream>
#include <string>

#include "server/logging.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"

namespace maxsimd::testing {

class CapturedLog {
 public:
  explicit CapturedLog(spdlog::level::level_enum level = spdlog::level::trace)
      : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("maxsimd", sink);
    logger->set_formatter(MakeLogFormatter(LogFormat::kText));
    logger->set_level(level);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }
  CapturedLog(const CapturedLog&) = delete;
  CapturedLog& operator=(const CapturedLog&) = delete;

  std::string Text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_CAPTURED_LOG_H_
