// maxsimctl's document commands: add (documents read here from .npy,
// safetensors or PLAID index files, streamed to the server), import (files
// the server reads under its --files_dir) and delete (by id).
//
// Thread-safety: run on maxsimctl's one thread.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_DOCUMENT_COMMANDS_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_DOCUMENT_COMMANDS_H_

#include "client/maxsimctl/flags.h"

namespace maxsimd::ctl {

// Each returns the exit status: 1 for an RPC, file or data error, 2 for
// flags that do not go together or a malformed id list; the flags are those
// of main.cc's table.
int RunAdd(const Globals& g, const Flags& f);
int RunImport(const Globals& g, const Flags& f);
int RunDelete(const Globals& g, const Flags& f);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_DOCUMENT_COMMANDS_H_
