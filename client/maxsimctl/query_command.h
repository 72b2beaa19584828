// maxsimctl query: ranks a corpus's documents for the queries of a .npy or
// safetensors file (client/README.md, "Query files"), as a rerank of
// candidate ids or a scan of the whole corpus.
//
// Thread-safety: runs on maxsimctl's one thread.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_QUERY_COMMAND_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_QUERY_COMMAND_H_

#include "client/maxsimctl/flags.h"

namespace maxsimd::ctl {

// Flags: corpus, query, query-tensor, query-dtype, candidates,
// candidates-file, top-k. One query ([Lq, dim]) goes in one Rerank, in its
// file's dtype; a batch ([Nq, Lq, dim]) in one RerankBatch. Exit 1 for an
// RPC, file or data error, 2 for a flag value out of range or a malformed
// --candidates.
int RunQuery(const Globals& g, const Flags& f);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_QUERY_COMMAND_H_
