// maxsimctl's commands about the server itself rather than a corpus:
// health (grpc.health.v1 Check) and log-level (Admin.GetLogLevel and
// SetLogLevel).
//
// Thread-safety: run on maxsimctl's one thread.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_SERVER_COMMANDS_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_SERVER_COMMANDS_H_

#include "client/maxsimctl/flags.h"

namespace maxsimd::ctl {

// Flag: service. Exit 0 when it is SERVING, 3 when the server answers
// otherwise, 1 when the call fails.
int RunHealth(const Globals& g, const Flags& f);

// Flag: level (also the positional argument). Prints the level, or sets it
// and prints the new and the previous one. Exit 1 when the call fails.
int RunLogLevel(const Globals& g, const Flags& f);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_SERVER_COMMANDS_H_
