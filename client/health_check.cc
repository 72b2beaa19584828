// maxsimd_health: asks a gRPC server's grpc.health.v1.Health/Check whether a
// service is SERVING, for container HEALTHCHECKs and scripts (Debian has no
// grpc_health_probe). It links only gRPC, the generated health stubs and the
// CUDA-free base library (for its file reader), so the runtime image needs
// no more libraries than the server itself.
//
//   maxsimd_health --target=127.0.0.1:50051 --service=maxsimd.v1.Reranker
//
// Exit status, the same as grpc_health_probe's so that probes written for
// it keep their meaning:
//   0  the service is SERVING
//   1  usage error, or a TLS file cannot be read
//   2  no connection within --timeout
//   3  the Check call failed (NOT_FOUND: the server does not know --service)
//   4  the server answered, and the service is not SERVING
#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/grpcpp.h"
#include "kernels/base/file_util.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051",
          "Server address: host:port, or any gRPC target (dns:///...)");
ABSL_FLAG(std::string, service, "",
          "Service to check, e.g. maxsimd.v1.Reranker; empty = the whole "
          "server");
ABSL_FLAG(absl::Duration, timeout, absl::Seconds(5),
          "Deadline for connecting and the Check call together");
ABSL_FLAG(std::string, tls_ca_cert, "",
          "PEM file of root certificates: connect with TLS and verify the "
          "server against them; empty = plaintext");
ABSL_FLAG(std::string, tls_server_name, "",
          "With --tls_ca_cert, the name the server's certificate must carry "
          "when it is not the target's host name");
ABSL_FLAG(std::string, tls_cert, "",
          "With --tls_ca_cert, PEM file of this client's certificate, for a "
          "server with mutual TLS (--tls_client_ca); needs --tls_key");
ABSL_FLAG(std::string, tls_key, "",
          "PEM file of the private key of --tls_cert");

namespace {

constexpr int kExitServing = 0;
constexpr int kExitUsage = 1;
constexpr int kExitNoConnection = 2;
constexpr int kExitRpcFailed = 3;
constexpr int kExitNotServing = 4;

int Fail(int code, const std::string& message) {
  std::fprintf(stderr, "maxsimd_health: %s\n", message.c_str());
  return code;
}

// The contents of the file `path` that --`flag` names; an error naming both
// (and why) when it cannot be read or is empty.
absl::StatusOr<std::string> ReadFlagFile(const char* flag,
                                         const std::string& path) {
  absl::StatusOr<std::string> bytes = maxsimd::ReadFileToString(path);
  if (!bytes.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", bytes.status().message()));
  }
  if (bytes->empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": cannot read \"", path, "\": the file is empty"));
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage(
      "Exits 0 when grpc.health.v1 Check reports SERVING.\n"
      "Usage: maxsimd_health [--target=HOST:PORT] [--service=NAME] "
      "[--timeout=5s] [--tls_ca_cert=FILE [--tls_server_name=NAME] "
      "[--tls_cert=FILE --tls_key=FILE]]\n"
      "Exit status: 0 SERVING, 1 usage, 2 no connection, 3 RPC failed, "
      "4 not SERVING.");
  const std::vector<char*> positional = absl::ParseCommandLine(argc, argv);
  if (positional.size() > 1) {
    return Fail(kExitUsage, std::string("unexpected argument \"") +
                                positional[1] + "\"; flags are --name=value");
  }
  const std::string target = absl::GetFlag(FLAGS_target);
  const std::string service = absl::GetFlag(FLAGS_service);
  const absl::Duration timeout = absl::GetFlag(FLAGS_timeout);
  const std::string ca_file = absl::GetFlag(FLAGS_tls_ca_cert);
  const std::string server_name = absl::GetFlag(FLAGS_tls_server_name);
  const std::string cert_file = absl::GetFlag(FLAGS_tls_cert);
  const std::string key_file = absl::GetFlag(FLAGS_tls_key);
  if (target.empty()) return Fail(kExitUsage, "--target is empty");
  if (timeout <= absl::ZeroDuration()) {
    return Fail(kExitUsage, "--timeout must be positive");
  }
  if (!server_name.empty() && ca_file.empty()) {
    return Fail(kExitUsage, "--tls_server_name needs --tls_ca_cert");
  }
  if (cert_file.empty() != key_file.empty()) {
    return Fail(kExitUsage, "--tls_cert and --tls_key go together");
  }
  if (!cert_file.empty() && ca_file.empty()) {
    return Fail(kExitUsage, "--tls_cert needs --tls_ca_cert");
  }

  std::shared_ptr<grpc::ChannelCredentials> credentials;
  grpc::ChannelArguments args;
  if (ca_file.empty()) {
    credentials = grpc::InsecureChannelCredentials();
  } else {
    grpc::SslCredentialsOptions ssl;
    const struct {
      const char* flag;
      const std::string& path;  // empty: not given
      std::string* pem;
    } files[] = {{"tls_ca_cert", ca_file, &ssl.pem_root_certs},
                 {"tls_cert", cert_file, &ssl.pem_cert_chain},
                 {"tls_key", key_file, &ssl.pem_private_key}};
    for (const auto& file : files) {
      if (file.path.empty()) continue;
      absl::StatusOr<std::string> pem = ReadFlagFile(file.flag, file.path);
      if (!pem.ok()) {
        return Fail(kExitUsage, std::string(pem.status().message()));
      }
      *file.pem = *std::move(pem);
    }
    credentials = grpc::SslCredentials(ssl);
    if (!server_name.empty()) args.SetSslTargetNameOverride(server_name);
  }
  std::shared_ptr<grpc::Channel> channel =
      grpc::CreateCustomChannel(target, credentials, args);

  // One deadline for both steps: a probe must answer within --timeout
  // whatever the connection does.
  const auto deadline = absl::ToChronoTime(absl::Now() + timeout);
  if (!channel->WaitForConnected(deadline)) {
    return Fail(kExitNoConnection, "no connection to " + target + " within " +
                                       absl::FormatDuration(timeout));
  }
  std::unique_ptr<grpc::health::v1::Health::Stub> stub =
      grpc::health::v1::Health::NewStub(channel);
  grpc::health::v1::HealthCheckRequest request;
  request.set_service(service);
  grpc::health::v1::HealthCheckResponse response;
  grpc::ClientContext context;
  context.set_deadline(deadline);
  const grpc::Status status = stub->Check(&context, request, &response);
  const std::string shown = service.empty() ? "(server)" : service;
  if (!status.ok()) {
    return Fail(kExitRpcFailed,
                "Check " + shown + " on " + target + ": " +
                    absl::StatusCodeToString(
                        static_cast<absl::StatusCode>(status.error_code())) +
                    ": " + status.error_message());
  }
  const std::string name =
      grpc::health::v1::HealthCheckResponse::ServingStatus_Name(
          response.status());
  std::printf("%s %s\n", shown.c_str(), name.c_str());
  return response.status() == grpc::health::v1::HealthCheckResponse::SERVING
             ? kExitServing
             : kExitNotServing;
}
