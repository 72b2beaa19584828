// GoogleTest matchers for absl::Status and absl::StatusOr, which Debian's
// Abseil (20220623) does not ship.
#ifndef MAXSIMD_TESTS_SUPPORT_STATUS_MATCHERS_H_
#define MAXSIMD_TESTS_SUPPORT_STATUS_MATCHERS_H_

#include <ostream>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "gmock/gmock.h"

namespace maxsimd::testing {

inline const absl::Status& GetStatus(const absl::Status& s) { return s; }
template <typename T>
const absl::Status& GetStatus(const absl::StatusOr<T>& s) {
  return s.status();
}

MATCHER(IsOk, "is OK") {
  const absl::Status& s = GetStatus(arg);
  if (!s.ok()) *result_listener << "status is " << s;
  return s.ok();
}

// StatusIs(code) or StatusIs(code, message_matcher).
MATCHER_P(StatusIs, code, "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code;
}

MATCHER_P2(StatusIs, code, message_matcher,
           "has code " + absl::StatusCodeToString(code)) {
  const absl::Status& s = GetStatus(arg);
  *result_listener << "status is " << s;
  return s.code() == code &&
         ::testing::ExplainMatchResult(
             message_matcher, std::string(s.message()), result_listener);
}

}  // namespace maxsimd::testing

#define MAXSIMD_ASSERT_OK(expr) ASSERT_THAT((expr), ::maxsimd::testing::IsOk())
#define MAXSIMD_EXPECT_OK(expr) EXPECT_THAT((expr), ::maxsimd::testing::IsOk())

#endif  // MAXSIMD_TESTS_SUPPORT_STATUS_MATCHERS_H_
