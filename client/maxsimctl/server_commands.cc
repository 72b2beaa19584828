#include "client/maxsimctl/server_commands.h"

#include <cstdio>
#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "client/maxsimctl/output.h"
#include "kernels/base/status_macros.h"

namespace maxsimd::ctl {

int RunHealth(const Globals& g, const Flags& f) {
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(g);
  if (!client.ok()) return PrintError(client.status(), kExitError);
  absl::StatusOr<int> status = (*client)->CheckHealth(f.Get("service"));
  if (!status.ok()) return PrintError(status.status(), kExitError);
  // grpc.health.v1.HealthCheckResponse.ServingStatus.
  const char* name = *status == 1   ? "SERVING"
                     : *status == 2 ? "NOT_SERVING"
                     : *status == 3 ? "SERVICE_UNKNOWN"
                                    : "UNKNOWN";
  if (g.json) {
    std::printf("{\"service\":%s,\"status\":\"%s\"}\n",
                JsonString(f.Get("service")).c_str(), name);
  } else {
    std::printf("%s\n", name);
  }
  return *status == 1 ? kExitOk : kExitNotServing;
}

int RunLogLevel(const Globals& g, const Flags& f) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    const std::string level = f.Get("level");
    if (level.empty()) {
      MAXSIMD_ASSIGN_OR_RETURN(std::string current, client->GetLogLevel());
      if (g.json) {
        std::printf("{\"level\":%s}\n", JsonString(current).c_str());
      } else {
        std::printf("%s\n", current.c_str());
      }
      return absl::OkStatus();
    }
    MAXSIMD_ASSIGN_OR_RETURN(v1::SetLogLevelResponse response,
                             client->SetLogLevel(level));
    if (g.json) {
      std::printf("{\"level\":%s,\"previous_level\":%s}\n",
                  JsonString(response.level()).c_str(),
                  JsonString(response.previous_level()).c_str());
    } else {
      std::printf("log level %s (was %s)\n", response.level().c_str(),
                  response.previous_level().c_str());
    }
    return absl::OkStatus();
  }());
}

}  // namespace maxsimd::ctl
