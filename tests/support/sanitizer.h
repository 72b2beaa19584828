// Whether this test binary is built with a sanitizer that slows it down,
// and by about how much: tests with wall-clock budgets shrink their
// workloads by kSanitizerSlowdown instead of raising the budgets, so a
// sanitizer job runs in about the release build's time.
#ifndef MAXSIMD_TESTS_SUPPORT_SANITIZER_H_
#define MAXSIMD_TESTS_SUPPORT_SANITIZER_H_

namespace maxsimd::testing {

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif

// The CPU backend's scoring under AddressSanitizer and UndefinedBehavior-
// Sanitizer, measured against the release build (tests/sanitizers/README.md).
inline constexpr int kSanitizerSlowdown = kSanitized ? 20 : 1;

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_SANITIZER_H_
