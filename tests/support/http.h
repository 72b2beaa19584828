// Loopback helpers for tests that talk to a server over 127.0.0.1: a free
// port, whether a port accepts connections, a minimal HTTP/1.0 GET for
// scraping /metrics, and a checker for the Prometheus text exposition
// format.
#ifndef MAXSIMD_TESTS_SUPPORT_HTTP_H_
#define MAXSIMD_TESTS_SUPPORT_HTTP_H_

#include <string>

#include "absl/status/statusor.h"

namespace maxsimd::testing {

// A TCP port on 127.0.0.1 that was free a moment ago.
int FreePort();

// Whether a TCP connection to 127.0.0.1:port is accepted.
bool AcceptsConnections(int port);

// Body of GET http://127.0.0.1:<port><path>; error on a non-200 answer.
absl::StatusOr<std::string> HttpGet(int port, const std::string& path);

// Checks Prometheus text format 0.0.4: every sample line is
// `name{label="value",...} number`, every sample's family has a # TYPE line
// before it, and names are valid. Returns "" or the first problem.
std::string CheckPrometheusText(const std::string& text);

// Runs `promtool check metrics` on the text when promtool is installed.
// Returns "" when it passes or is absent (see *ran), else its output.
std::string PromtoolCheck(const std::string& text, bool* ran);

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_HTTP_H_
