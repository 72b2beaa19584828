// The log formats (every JSON line parses back to the message logged, with
// the request id of its scope; every text line is one line whatever the
// values hold), level and format names, and LogCall's levels and rate
// limit.
#include "server/logging.h"

#include <algorithm>
#include <chrono>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "google/protobuf/struct.pb.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "spdlog/sinks/ostream_sink.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Parses one JSON object; fails the test when it does not parse.
google::protobuf::Struct ParseJson(const std::string& line) {
  google::protobuf::Struct out;
  const auto status = google::protobuf::util::JsonStringToMessage(line, &out);
  EXPECT_TRUE(status.ok()) << status.ToString() << "\n" << line;
  return out;
}

std::string Field(const google::protobuf::Struct& s, const std::string& key) {
  auto it = s.fields().find(key);
  return it == s.fields().end() ? "<absent>" : it->second.string_value();
}

// Installs a default logger named "maxsimd" that writes to a string stream
// in `format` at `level`; restores the previous default logger on exit.
class CapturedLog {
 public:
  CapturedLog(LogFormat format, spdlog::level::level_enum level)
      : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    auto logger = std::make_shared<spdlog::logger>("maxsimd", sink);
    logger->set_formatter(MakeLogFormatter(format));
    logger->set_level(level);
    spdlog::set_default_logger(logger);
  }
  ~CapturedLog() { spdlog::set_default_logger(previous_); }

  std::vector<std::string> Lines() const {
    return absl::StrSplit(out_.str(), '\n', absl::SkipEmpty());
  }
  std::string Text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

// The default logger as main() sets it up: ConfigureLogging(format) over a
// logger whose one sink writes to a string; restores the previous default
// logger on exit.
class ConfiguredLog {
 public:
  explicit ConfiguredLog(LogFormat format)
      : previous_(spdlog::default_logger()) {
    auto sink = std::make_shared<spdlog::sinks::ostream_sink_mt>(out_);
    spdlog::set_default_logger(
        std::make_shared<spdlog::logger>("captured", sink));
    ConfigureLogging(format);
    spdlog::default_logger()->set_level(spdlog::level::info);
  }
  ~ConfiguredLog() { spdlog::set_default_logger(previous_); }
  std::string Text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::logger> previous_;
};

// A value that tries to end its line and forge one of its own.
constexpr char kForgery[] = "docs\n2026-01-01 [error] forged";

TEST(LogInjectionTest, TextLineWithANewlineInAValueStaysOneLine) {
  ConfiguredLog log(LogFormat::kText);
  spdlog::info("corpus \"{}\" not found", kForgery);
  const std::string text = log.Text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  ASSERT_FALSE(text.empty());
  EXPECT_EQ(text.back(), '\n');
  EXPECT_THAT(text, ::testing::EndsWith(
                        "] [info] corpus \"docs\\n2026-01-01 [error] forged\" "
                        "not found\n"))
      << text;
  EXPECT_THAT(text, Not(HasSubstr("\n2026-01-01")));
}

TEST(LogInjectionTest, TextEscapesControlsBackslashesAndBadUtf8) {
  ConfiguredLog log(LogFormat::kText);
  // Each piece, then what the line shows for it.
  const std::pair<std::string, std::string> pieces[] = {
      {"plain ascii", "plain ascii"},
      {"cr\r", "cr\\r"},
      {"tab\t", "tab\\t"},
      {"lf\n", "lf\\n"},
      {std::string("nul\0", 4), "nul\\x00"},
      {"esc\x1b[31m", "esc\\x1b[31m"},  // a terminal colour sequence
      {"vt\x0b ff\x0c fs\x1c", "vt\\x0b ff\\x0c fs\\x1c"},
      {"del\x7f", "del\\x7f"},
      // A literal backslash-n is not confused with an escaped newline.
      {"back\\n", "back\\\\n"},
      // C1 NEL, line separator, right-to-left override.
      {"nel\xc2\x85", "nel\\u0085"},
      {"ls\xe2\x80\xa8", "ls\\u2028"},
      {"rlo\xe2\x80\xae", "rlo\\u202e"},
      // A stray continuation byte, a truncated sequence, an overlong '/',
      // a byte that never starts UTF-8.
      {"bad\x80 \xe2\x82 \xc0\xaf \xff",
       "bad\\x80 \\xe2\\x82 \\xc0\\xaf \\xff"},
      // Well-formed UTF-8 is copied.
      {"utf8 \xc3\xa9 \xf0\x9f\x98\x80", "utf8 \xc3\xa9 \xf0\x9f\x98\x80"},
  };
  std::string logged, shown;
  for (const auto& [piece, escaped] : pieces) {
    logged += piece + "|";
    shown += escaped + "|";
  }
  {
    ScopedRequestId scope("rid\nforged");
    spdlog::warn("{}", logged);
  }
  const std::string text = log.Text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  for (size_t i = 0; i + 1 < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    EXPECT_TRUE(c >= 0x20 && c != 0x7f) << "raw control byte at " << i;
  }
  EXPECT_THAT(text, ::testing::EndsWith(absl::StrCat(
                        "] [warn] [request_id=rid\\nforged] ", shown, "\n")))
      << text;
}

TEST(LogInjectionTest, JsonLineWithANewlineInAValueStaysOneObject) {
  ConfiguredLog log(LogFormat::kJson);
  const std::string value = absl::StrCat(
      kForgery, " nel\xc2\x85 ls\xe2\x80\xa8 ps\xe2\x80\xa9 rlo\xe2\x80\xae");
  {
    ScopedRequestId scope("rid\r\nforged");
    spdlog::info("corpus \"{}\" not found", value);
  }
  const std::string text = log.Text();
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;
  // Separators that some readers split lines at are escaped too.
  EXPECT_THAT(text, AllOf(HasSubstr("nel\\u0085"), HasSubstr("ls\\u2028"),
                          HasSubstr("ps\\u2029"), HasSubstr("rlo\\u202e")));
  const std::vector<std::string> lines =
      absl::StrSplit(text, '\n', absl::SkipEmpty());
  ASSERT_EQ(lines.size(), 1u);
  const google::protobuf::Struct line = ParseJson(lines[0]);
  EXPECT_EQ(Field(line, "message"),
            absl::StrCat("corpus \"", value, "\" not found"));
  EXPECT_EQ(Field(line, "request_id"), "rid\r\nforged");
  EXPECT_EQ(Field(line, "logger"), "maxsimd");
}

TEST(LogFormatTest, JsonLinesParseBackToTheMessage) {
  CapturedLog log(LogFormat::kJson, spdlog::level::trace);
  const std::string tricky =
      "quote \" backslash \\ newline \n tab \t cr \r bell \x07 del \x7f "
      "utf8 \xc3\xa9 \xf0\x9f\x98\x80 end";
  spdlog::warn("{}", tricky);
  {
    ScopedRequestId scope("req-\"7\\");
    spdlog::info("second");
  }
  spdlog::error("third");
  // Each record is one line: nothing below 0x20 but the final newline.
  const std::string text = log.Text();
  for (size_t i = 0; i < text.size(); ++i) {
    const unsigned char c = static_cast<unsigned char>(text[i]);
    EXPECT_TRUE(c >= 0x20 || c == '\n') << "raw control byte at " << i;
  }
  const std::vector<std::string> lines = log.Lines();
  ASSERT_EQ(lines.size(), 3u) << text;

  const google::protobuf::Struct first = ParseJson(lines[0]);
  EXPECT_EQ(Field(first, "message"), tricky);
  EXPECT_EQ(Field(first, "level"), "warn");
  EXPECT_EQ(Field(first, "logger"), "maxsimd");
  EXPECT_TRUE(
      std::regex_match(Field(first, "time"),
                       std::regex(R"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
      << Field(first, "time");
  EXPECT_GT(first.fields().at("thread").number_value(), 0);
  EXPECT_EQ(first.fields().count("request_id"), 0u);

  const google::protobuf::Struct second = ParseJson(lines[1]);
  EXPECT_EQ(Field(second, "message"), "second");
  EXPECT_EQ(Field(second, "level"), "info");
  EXPECT_EQ(Field(second, "request_id"), "req-\"7\\");

  // The scope ended: no id on the next line.
  const google::protobuf::Struct third = ParseJson(lines[2]);
  EXPECT_EQ(Field(third, "level"), "error");
  EXPECT_EQ(third.fields().count("request_id"), 0u);
}

TEST(LogFormatTest, InvalidUtf8BecomesTheReplacementCharacter) {
  CapturedLog log(LogFormat::kJson, spdlog::level::info);
  // A stray continuation byte, a truncated sequence, an overlong '/', a
  // surrogate and a byte that never starts UTF-8.
  spdlog::info("a\x80z \xe2\x82 \xc0\xaf \xed\xa0\x80 \xff!");
  const std::vector<std::string> lines = log.Lines();
  ASSERT_EQ(lines.size(), 1u);
  const std::string r = "\xef\xbf\xbd";  // U+FFFD
  EXPECT_EQ(
      Field(ParseJson(lines[0]), "message"),
      "a" + r + "z " + r + r + " " + r + r + " " + r + r + r + " " + r + "!");
}

TEST(LogFormatTest, TextLinesNameTheRequestIdOnlyInsideItsScope) {
  CapturedLog log(LogFormat::kText, spdlog::level::info);
  spdlog::info("before");
  {
    ScopedRequestId outer("outer");
    {
      ScopedRequestId inner("inner");
      spdlog::info("nested");
    }
    spdlog::info("restored");
  }
  spdlog::info("after");
  spdlog::warn("last");
  std::vector<std::string> lines = log.Lines();
  ASSERT_EQ(lines.size(), 5u);
  // Levels are named as in the JSON lines and the log-level RPCs.
  EXPECT_THAT(lines[4], ::testing::HasSubstr("] [warn] last")) << lines[4];
  lines.pop_back();
  const std::regex prefix(
      R"(^\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d{3}\] \[info\] )");
  for (const std::string& line : lines) {
    EXPECT_TRUE(std::regex_search(line, prefix)) << line;
  }
  EXPECT_THAT(lines[0], ::testing::EndsWith("] before"));
  EXPECT_THAT(lines[1], ::testing::EndsWith("] [request_id=inner] nested"));
  EXPECT_THAT(lines[2], ::testing::EndsWith("] [request_id=outer] restored"));
  EXPECT_THAT(lines[3], ::testing::EndsWith("] after"));
  EXPECT_EQ(CurrentRequestId(), "");
}

TEST(LogNamesTest, LevelsAndFormatsParseByNameAndRefuseOthers) {
  const std::pair<const char*, spdlog::level::level_enum> levels[] = {
      {"trace", spdlog::level::trace},  {"debug", spdlog::level::debug},
      {"info", spdlog::level::info},    {"warn", spdlog::level::warn},
      {"warning", spdlog::level::warn}, {"error", spdlog::level::err},
      {"err", spdlog::level::err},      {"critical", spdlog::level::critical},
      {"off", spdlog::level::off}};
  for (const auto& [name, level] : levels) {
    absl::StatusOr<spdlog::level::level_enum> parsed =
        ParseLogLevel(name, "level");
    ASSERT_TRUE(parsed.ok()) << name;
    EXPECT_EQ(*parsed, level) << name;
  }
  EXPECT_EQ(LogLevelName(spdlog::level::warn), "warn");
  EXPECT_EQ(LogLevelName(spdlog::level::err), "error");
  for (const char* bad : {"", "INFO", "verbose", "5"}) {
    EXPECT_THAT(ParseLogLevel(bad, "level"),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr("level is \""),
                               HasSubstr("trace, debug, info, warn, error, "
                                         "critical or off"))))
        << bad;
  }
  EXPECT_EQ(*ParseLogFormat("text", "--log_format"), LogFormat::kText);
  EXPECT_EQ(*ParseLogFormat("json", "--log_format"), LogFormat::kJson);
  EXPECT_THAT(ParseLogFormat("xml", "--log_format"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--log_format is \"xml\"; must be text or "
                                 "json")));
}

TEST(LogCallTest, LevelFollowsTheCodeAndCarriesTheRequestId) {
  CapturedLog log(LogFormat::kJson, spdlog::level::debug);
  LogCall("Rerank", "id-1", 0.0012, absl::OkStatus());
  LogCall("Rerank", "id-2", 0.001, absl::NotFoundError("no corpus"));
  LogCall("Rerank", "", 0.001, absl::ResourceExhaustedError("queue full"));
  LogCall("Rerank", "id-4", 0.001, absl::InternalError("bug"));
  LogCall("RerankStream", "id-5", 0.001, absl::InvalidArgumentError("bad"),
          "m7");
  const std::vector<std::string> lines = log.Lines();
  ASSERT_EQ(lines.size(), 5u) << log.Text();
  const google::protobuf::Struct ok = ParseJson(lines[0]);
  EXPECT_EQ(Field(ok, "level"), "debug");
  EXPECT_EQ(Field(ok, "message"), "Rerank OK 1.200 ms");
  EXPECT_EQ(Field(ok, "request_id"), "id-1");
  const google::protobuf::Struct missing = ParseJson(lines[1]);
  EXPECT_EQ(Field(missing, "level"), "info");
  EXPECT_EQ(Field(missing, "message"), "Rerank NOT_FOUND 1.000 ms: no corpus");
  EXPECT_EQ(Field(missing, "request_id"), "id-2");
  const google::protobuf::Struct full = ParseJson(lines[2]);
  EXPECT_EQ(Field(full, "level"), "warn");
  EXPECT_EQ(full.fields().count("request_id"), 0u);
  EXPECT_EQ(Field(ParseJson(lines[3]), "level"), "error");
  EXPECT_EQ(Field(ParseJson(lines[4]), "message"),
            "RerankStream message \"m7\" INVALID_ARGUMENT 1.000 ms: bad");

  // Below the level nothing is written (and no budget is spent).
  spdlog::default_logger()->set_level(spdlog::level::warn);
  LogCall("Rerank", "id-6", 0.001, absl::OkStatus());
  LogCall("Rerank", "id-7", 0.001, absl::NotFoundError("no corpus"));
  EXPECT_EQ(log.Lines().size(), 5u);
}

TEST(LogCallTest, FailureLinesAreRateLimitedAndTheDropIsReported) {
  CapturedLog log(LogFormat::kText, spdlog::level::info);
  // Start at the beginning of a steady-clock second so the flood falls in
  // one budget window.
  const auto now = std::chrono::steady_clock::now().time_since_epoch();
  std::this_thread::sleep_for(
      std::chrono::seconds(1) -
      (now - std::chrono::duration_cast<std::chrono::seconds>(now)));
  for (int i = 0; i < 3 * kMaxFailureLinesPerSecond; ++i) {
    LogCall("Rerank", "", 0.001, absl::ResourceExhaustedError("queue full"));
  }
  EXPECT_EQ(log.Lines().size(), static_cast<size_t>(kMaxFailureLinesPerSecond));
  std::this_thread::sleep_for(std::chrono::milliseconds(1100));
  LogCall("Rerank", "", 0.001, absl::ResourceExhaustedError("queue full"));
  const std::vector<std::string> lines = log.Lines();
  ASSERT_EQ(lines.size(), static_cast<size_t>(kMaxFailureLinesPerSecond) + 1);
  EXPECT_THAT(lines.back(),
              HasSubstr(absl::StrCat("(", 2 * kMaxFailureLinesPerSecond,
                                     " failure lines suppressed before this "
                                     "one)")));
}

}  // namespace
}  // namespace maxsimd
