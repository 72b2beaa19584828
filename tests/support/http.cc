#include "tests/support/http.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "absl/strings/str_cat.h"

namespace maxsimd::testing {
namespace {

sockaddr_in Loopback(int port) {
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  return addr;
}

}  // namespace

int FreePort() {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = Loopback(0);
  bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
  socklen_t len = sizeof(addr);
  getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  close(fd);
  return ntohs(addr.sin_port);
}

bool AcceptsConnections(int port) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr = Loopback(port);
  const bool ok =
      connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0;
  close(fd);
  return ok;
}

absl::StatusOr<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0) return absl::UnavailableError("socket failed");
  sockaddr_in addr = Loopback(port);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("connect to port ", port));
  }
  const std::string req =
      absl::StrCat("GET ", path, " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n");
  if (write(fd, req.data(), req.size()) != static_cast<ssize_t>(req.size())) {
    close(fd);
    return absl::UnavailableError("write failed");
  }
  std::string resp;
  char buf[8192];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) resp.append(buf, n);
  close(fd);
  if (resp.rfind("HTTP/1.", 0) != 0 ||
      resp.find(" 200 ") == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat("bad answer: ", resp.substr(0, 80)));
  }
  const size_t body = resp.find("\r\n\r\n");
  if (body == std::string::npos) return absl::DataLossError("no header end");
  return resp.substr(body + 4);
}

std::string CheckPrometheusText(const std::string& text) {
  static const std::regex kSample(
      R"(^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{([a-zA-Z_][a-zA-Z0-9_]*="([^"\\]|\\.)*",?)*\})? )"
      R"(([-+]?([0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?|[Ii]nf|N[Aa][Nn]))( [0-9]+)?$)");
  static const std::regex kType(
      R"(^# TYPE ([a-zA-Z_:][a-zA-Z0-9_:]*) (counter|gauge|histogram|summary|untyped)$)");
  std::set<std::string> typed;
  std::istringstream in(text);
  std::string line;
  int samples = 0;
  for (int n = 1; std::getline(in, line); ++n) {
    if (line.empty()) continue;
    std::smatch m;
    if (line[0] == '#') {
      if (line.rfind("# TYPE", 0) == 0) {
        if (!std::regex_match(line, m, kType)) {
          return absl::StrCat("line ", n, ": bad TYPE line: ", line);
        }
        typed.insert(m[1]);
      }
      continue;
    }
    if (!std::regex_match(line, m, kSample)) {
      return absl::StrCat("line ", n, ": not a sample: ", line);
    }
    std::string family = m[1];
    for (const char* suffix : {"_bucket", "_sum", "_count"}) {
      const std::string s(suffix);
      if (!typed.count(family) && family.size() > s.size() &&
          family.compare(family.size() - s.size(), s.size(), s) == 0) {
        family.resize(family.size() - s.size());
      }
    }
    if (!typed.count(family)) {
      return absl::StrCat("line ", n, ": no # TYPE for ", family);
    }
    ++samples;
  }
  return samples > 0 ? "" : "no samples";
}

std::string PromtoolCheck(const std::string& text, bool* ran) {
  *ran = std::system("command -v promtool >/dev/null 2>&1") == 0;
  if (!*ran) return "";
  char path[] = "/tmp/maxsimd_metrics_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) return "mkstemp failed";
  close(fd);
  std::ofstream(path) << text;
  const std::string cmd =
      absl::StrCat("promtool check metrics < ", path, " 2>&1");
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (fgets(buf, sizeof(buf), p)) out += buf;
    const int rc = pclose(p);
    std::remove(path);
    return rc == 0 ? "" : absl::StrCat("promtool: ", out);
  }
  std::remove(path);
  return "popen failed";
}

}  // namespace maxsimd::testing
