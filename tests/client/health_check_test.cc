// maxsimd_health (client/health_check.cc) run as a process, as a container
// HEALTHCHECK runs it: against the real server for every service it
// registers, against an in-process health service switched to NOT_SERVING,
// against a port nobody listens on, over TLS, and with bad flags. Every exit
// status of its contract is reached at least once.
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "grpcpp/generic/async_generic_service.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/health_check_service_interface.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_support.h"
#include "tests/support/http.h"

namespace maxsimd {
namespace {

constexpr int kServing = 0;
constexpr int kUsage = 1;
constexpr int kNoConnection = 2;
constexpr int kRpcFailed = 3;
constexpr int kNotServing = 4;

struct Result {
  int code = -1;
  std::string output;  // stdout and stderr together
};

// Runs maxsimd_health with `args` (already shell-quoted where needed).
Result RunHealth(const std::string& args) {
  const std::string cmd = absl::StrCat(MAXSIMD_HEALTH_BIN, " ", args, " 2>&1");
  Result r;
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return r;
  char buf[4096];
  for (size_t n; (n = fread(buf, 1, sizeof(buf), p)) > 0;) {
    r.output.append(buf, n);
  }
  const int status = pclose(p);
  r.code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// A gRPC server in this process with only the default health service, whose
// statuses the test sets directly. The generic service (every call
// UNIMPLEMENTED) is there because gRPC starts no server without a service of
// its own.
class HealthOnlyServer {
 public:
  explicit HealthOnlyServer(
      std::shared_ptr<grpc::ServerCredentials> credentials =
          grpc::InsecureServerCredentials()) {
    grpc::EnableDefaultHealthCheckService(true);
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", std::move(credentials), &port_);
    builder.RegisterCallbackGenericService(&generic_);
    server_ = builder.BuildAndStart();
  }
  ~HealthOnlyServer() {
    if (server_ != nullptr) server_->Shutdown();
  }

  bool ok() const { return server_ != nullptr && port_ > 0; }
  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }
  void Set(const std::string& service, bool serving) {
    server_->GetHealthCheckService()->SetServingStatus(service, serving);
  }

 private:
  grpc::CallbackGenericService generic_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
};

TEST(HealthCheckTest, ServingForEveryServiceTheServerRegisters) {
  auto server = testing::ServerProcess::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = (*server)->target();
  for (const std::string service :
       {"", "maxsimd.v1.Reranker", "maxsimd.v1.Admin"}) {
    const Result r =
        RunHealth(absl::StrCat("--target=", target, " --service=", service));
    EXPECT_EQ(r.code, kServing)
        << "service \"" << service << "\": " << r.output;
    EXPECT_NE(r.output.find("SERVING"), std::string::npos) << r.output;
  }
}

TEST(HealthCheckTest, UnknownServiceIsAFailedCall) {
  auto server = testing::ServerProcess::Start({});
  ASSERT_TRUE(server.ok()) << server.status();
  const Result r = RunHealth(absl::StrCat(
      "--target=", (*server)->target(), " --service=maxsimd.v1.NoSuchService"));
  EXPECT_EQ(r.code, kRpcFailed) << r.output;
  EXPECT_NE(r.output.find("NOT_FOUND"), std::string::npos) << r.output;
}

TEST(HealthCheckTest, NotServingIsAFailure) {
  HealthOnlyServer server;
  ASSERT_TRUE(server.ok());
  server.Set("svc", false);
  Result r =
      RunHealth(absl::StrCat("--target=", server.target(), " --service=svc"));
  EXPECT_EQ(r.code, kNotServing) << r.output;
  EXPECT_NE(r.output.find("NOT_SERVING"), std::string::npos) << r.output;

  server.Set("svc", true);
  r = RunHealth(absl::StrCat("--target=", server.target(), " --service=svc"));
  EXPECT_EQ(r.code, kServing) << r.output;
}

TEST(HealthCheckTest, NoListenerFailsWithinTheTimeout) {
  const int port = testing::FreePort();
  const absl::Time start = absl::Now();
  const Result r =
      RunHealth(absl::StrCat("--target=127.0.0.1:", port, " --timeout=1s"));
  EXPECT_EQ(r.code, kNoConnection) << r.output;
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
}

TEST(HealthCheckTest, BadFlagsAreUsageErrors) {
  EXPECT_EQ(RunHealth("--timeout=0s").code, kUsage);
  EXPECT_EQ(RunHealth("--no_such_flag=1").code, kUsage);
  EXPECT_EQ(RunHealth("127.0.0.1:50051").code, kUsage);
  EXPECT_EQ(RunHealth("--target=").code, kUsage);
  EXPECT_EQ(RunHealth("--tls_server_name=localhost").code, kUsage);
  EXPECT_EQ(RunHealth("--tls_ca_cert=/nonexistent/ca.pem").code, kUsage);
}

// Reads a whole file; "" when it cannot.
std::string ReadFile(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(HealthCheckTest, TlsVerifiesTheServerCertificate) {
  if (std::system("command -v openssl >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "openssl is not installed";
  }
  const std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      absl::StrCat("maxsimd_health_tls_", getpid());
  std::filesystem::create_directories(dir);
  const std::string key = (dir / "key.pem").string();
  const std::string cert = (dir / "cert.pem").string();
  // A self-signed certificate for "localhost", which is not the IP address
  // the probe dials: verification passes only with --tls_server_name.
  ASSERT_EQ(std::system(absl::StrCat(
                            "openssl req -x509 -newkey rsa:2048 -nodes -days 2 "
                            "-subj /CN=localhost "
                            "-addext subjectAltName=DNS:localhost -keyout ",
                            key, " -out ", cert, " >/dev/null 2>&1")
                            .c_str()),
            0);
  grpc::SslServerCredentialsOptions ssl;
  ssl.pem_key_cert_pairs.push_back({ReadFile(key), ReadFile(cert)});
  HealthOnlyServer server(grpc::SslServerCredentials(ssl));
  ASSERT_TRUE(server.ok());
  server.Set("", true);

  const std::string base =
      absl::StrCat("--target=", server.target(), " --timeout=3s");
  Result r = RunHealth(absl::StrCat(base, " --tls_ca_cert=", cert,
                                    " --tls_server_name=localhost"));
  EXPECT_EQ(r.code, kServing) << r.output;
  // The certificate does not name 127.0.0.1.
  r = RunHealth(absl::StrCat(base, " --tls_ca_cert=", cert));
  EXPECT_EQ(r.code, kNoConnection) << r.output;
  // Plaintext against a TLS listener never completes a handshake.
  r = RunHealth(base);
  EXPECT_EQ(r.code, kNoConnection) << r.output;
  std::filesystem::remove_all(dir);
}

}  // namespace
}  // namespace maxsimd
