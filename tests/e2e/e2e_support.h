// Helpers shared by the end-to-end test binaries: the real `maxsimd` binary
// run as a child process on 127.0.0.1 (CPU backend, free ports), and reading
// one sample out of its Prometheus text. The same tests run against a server
// on a GPU when $MAXSIMD_E2E_BACKEND is "gpu" (bench/run_gpu.sh service).
//
// Thread-safety: a ServerProcess is started, signalled, waited for and
// destroyed by one thread (the test's); the accessors and NewClient() may be
// called from any thread meanwhile.
#ifndef MAXSIMD_TESTS_E2E_E2E_SUPPORT_H_
#define MAXSIMD_TESTS_E2E_E2E_SUPPORT_H_

#include <sys/types.h>

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace maxsimd::testing {

// True when the tests drive a server on a GPU ($MAXSIMD_E2E_BACKEND=gpu).
bool OnGpu();

// Relative score tolerance against the fp32 scalar reference: the GPU
// stages queries in fp16, the CPU backend scores them in fp32.
double ScoreTolerance();

// The server binary: $MAXSIMD_E2E_SERVER_BIN when set (a bundle on a
// machine with an NVIDIA GPU), else the one this build made.
std::string ServerBinary();

class ServerProcess {
 public:
  // Forks and execs ServerBinary() with --listen and --metrics_listen on
  // free loopback ports, --cpu (--devices=0 when $MAXSIMD_E2E_BACKEND is
  // "gpu") and --log_level=warn, followed by `flags`
  // (each one "--name=value"). Returns once grpc.health.v1 reports SERVING,
  // or an error when the process exits first (retried on fresh ports, in
  // case another process took one) or `startup_timeout` passes. With an
  // `output_path`, the process's stdout and stderr (its log lines) go to
  // that file, truncated at each launch; else they are the test's.
  static absl::StatusOr<std::unique_ptr<ServerProcess>> Start(
      const std::vector<std::string>& flags,
      absl::Duration startup_timeout = absl::Seconds(30),
      const std::string& output_path = "");

  // SIGKILLs and reaps the process unless it has already been reaped.
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  int port() const { return port_; }
  int metrics_port() const { return metrics_port_; }
  pid_t pid() const { return pid_; }
  std::string target() const;

  // A client with a channel of its own; `timeout` is its per-call deadline.
  std::unique_ptr<Client> NewClient(
      absl::Duration timeout = absl::Seconds(60)) const;

  // True while the process has not exited. Reaps it once it has.
  bool Running();

  // Sends `signal` to the process (no-op once reaped).
  void Signal(int signal) const;

  // Waits up to `timeout` for the process to exit. Returns its exit code, or
  // 128 + the signal that ended it; on timeout SIGKILLs it and returns -1.
  int WaitForExit(absl::Duration timeout);

  // Signal(SIGTERM), then WaitForExit(timeout).
  int TerminateAndWait(absl::Duration timeout = absl::Seconds(60));

 private:
  ServerProcess() = default;
  // One fork/exec on fresh ports, waiting for SERVING until `deadline`.
  absl::Status Launch(const std::vector<std::string>& flags,
                      absl::Time deadline, const std::string& output_path);
  // Records a reaped wait status.
  void Reaped(int wait_status);

  pid_t pid_ = -1;
  int port_ = 0;
  int metrics_port_ = 0;
  int exit_code_ = -1;  // valid once pid_ == -1 after a run
};

// The value of one sample in Prometheus text, where `series` is the metric
// name with its label set exactly as exposed, e.g.
// `maxsimd_rejected_total{reason="deadline"}`. 0 when the sample is absent
// (a labelled counter appears on its first increment).
double SampleValue(const std::string& text, const std::string& series);

// Runs a shell command line, returning (exit code, stdout); exit code -1
// when it could not run or did not exit normally.
std::pair<int, std::string> RunCommand(const std::string& cmd);

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_E2E_E2E_SUPPORT_H_
