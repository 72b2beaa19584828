#include "tests/e2e/e2e_support.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "tests/support/http.h"

namespace maxsimd::testing {
namespace {

constexpr int kLaunchAttempts = 3;
constexpr auto kPollInterval = std::chrono::milliseconds(20);

}  // namespace

bool OnGpu() {
  const char* backend = std::getenv("MAXSIMD_E2E_BACKEND");
  return backend != nullptr && std::string(backend) == "gpu";
}

double ScoreTolerance() { return OnGpu() ? 2e-3 : 1e-4; }

std::string ServerBinary() {
  const char* bin = std::getenv("MAXSIMD_E2E_SERVER_BIN");
  return bin != nullptr ? bin : MAXSIMD_SERVER_BIN;
}

absl::StatusOr<std::unique_ptr<ServerProcess>> ServerProcess::Start(
    const std::vector<std::string>& flags, absl::Duration startup_timeout,
    const std::string& output_path) {
  std::unique_ptr<ServerProcess> server(new ServerProcess);
  const absl::Time deadline = absl::Now() + startup_timeout;
  absl::Status status;
  for (int attempt = 0; attempt < kLaunchAttempts; ++attempt) {
    status = server->Launch(flags, deadline, output_path);
    // Only an early exit (say, a port taken meanwhile) is worth a retry.
    if (status.ok() || server->pid_ > 0) break;
  }
  if (!status.ok()) return status;
  return server;
}

absl::Status ServerProcess::Launch(const std::vector<std::string>& flags,
                                   absl::Time deadline,
                                   const std::string& output_path) {
  port_ = FreePort();
  do {
    metrics_port_ = FreePort();
  } while (metrics_port_ == port_);
  // The argument strings are built before fork(): the child of a threaded
  // process may only call async-signal-safe functions before exec.
  std::vector<std::string> args = {
      ServerBinary(),
      absl::StrCat("--listen=127.0.0.1:", port_),
      absl::StrCat("--metrics_listen=127.0.0.1:", metrics_port_),
      OnGpu() ? "--devices=0" : "--cpu",
      "--log_level=warn",
  };
  args.insert(args.end(), flags.begin(), flags.end());
  std::vector<char*> argv;
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  pid_ = fork();
  if (pid_ == 0) {
    if (!output_path.empty()) {
      const int fd =
          open(output_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      if (fd < 0) _exit(126);
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
      close(fd);
    }
    execv(argv[0], argv.data());
    _exit(127);
  }
  if (pid_ < 0) return absl::InternalError("fork failed");

  auto failure = [&](absl::StatusCode code, absl::string_view what) {
    return absl::Status(
        code, absl::StrCat("maxsimd ", absl::StrJoin(flags, " "), " ", what));
  };
  // Wait for the listener before the first RPC: a channel whose first
  // connection is refused backs off for a second or more.
  while (!AcceptsConnections(port_)) {
    if (!Running()) {
      return failure(absl::StatusCode::kUnavailable,
                     absl::StrCat("exited with status ", exit_code_));
    }
    if (absl::Now() >= deadline) {
      return failure(absl::StatusCode::kDeadlineExceeded, "did not listen");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  std::unique_ptr<Client> client = NewClient(absl::Seconds(5));
  for (;;) {
    absl::StatusOr<int> health = client->CheckHealth("");
    if (health.ok() && *health == 1) return absl::OkStatus();
    if (!Running()) {
      return failure(absl::StatusCode::kUnavailable,
                     absl::StrCat("exited with status ", exit_code_));
    }
    if (absl::Now() >= deadline) {
      return failure(absl::StatusCode::kDeadlineExceeded,
                     "did not report SERVING");
    }
    std::this_thread::sleep_for(kPollInterval);
  }
}

ServerProcess::~ServerProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
}

std::string ServerProcess::target() const {
  return absl::StrCat("127.0.0.1:", port_);
}

std::unique_ptr<Client> ServerProcess::NewClient(absl::Duration timeout) const {
  ClientOptions o;
  o.target = target();
  o.timeout = timeout;
  return Client::Create(o).value();
}

void ServerProcess::Reaped(int wait_status) {
  pid_ = -1;
  exit_code_ = WIFEXITED(wait_status) ? WEXITSTATUS(wait_status)
                                      : 128 + WTERMSIG(wait_status);
}

bool ServerProcess::Running() {
  if (pid_ <= 0) return false;
  int wait_status = 0;
  if (waitpid(pid_, &wait_status, WNOHANG) != pid_) return true;
  Reaped(wait_status);
  return false;
}

void ServerProcess::Signal(int signal) const {
  if (pid_ > 0) kill(pid_, signal);
}

int ServerProcess::WaitForExit(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (Running()) {
    if (absl::Now() >= deadline) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
      exit_code_ = -1;
      break;
    }
    std::this_thread::sleep_for(kPollInterval);
  }
  return exit_code_;
}

int ServerProcess::TerminateAndWait(absl::Duration timeout) {
  Signal(SIGTERM);
  return WaitForExit(timeout);
}

double SampleValue(const std::string& text, const std::string& series) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.size() > series.size() &&
        line.compare(0, series.size(), series) == 0 &&
        line[series.size()] == ' ') {
      return std::strtod(line.c_str() + series.size() + 1, nullptr);
    }
  }
  return 0.0;
}

std::pair<int, std::string> RunCommand(const std::string& cmd) {
  std::string out;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return {-1, ""};
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) out.append(buf, n);
  const int status = pclose(p);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

}  // namespace maxsimd::testing
