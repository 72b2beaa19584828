// maxsimctl's corpus commands: create, drop, list, get, alias, unalias,
// aliases, snapshot and load, each one Admin call (client/client.h).
//
// Thread-safety: run on maxsimctl's one thread.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_CORPUS_COMMANDS_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_CORPUS_COMMANDS_H_

#include "client/maxsimctl/flags.h"

namespace maxsimd::ctl {

// Each returns the exit status: 1 for an RPC error, 2 for a flag value out
// of range (create); the flags are those of main.cc's table.
int RunCreate(const Globals& g, const Flags& f);
int RunDrop(const Globals& g, const Flags& f);
int RunList(const Globals& g, const Flags& f);
int RunGet(const Globals& g, const Flags& f);
int RunAlias(const Globals& g, const Flags& f);
int RunUnalias(const Globals& g, const Flags& f);
int RunAliases(const Globals& g, const Flags& f);
int RunSnapshot(const Globals& g, const Flags& f);
int RunLoad(const Globals& g, const Flags& f);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_CORPUS_COMMANDS_H_
