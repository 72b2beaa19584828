// maxsimctl generate: a synthetic clustered corpus and queries written as
// .npy and text files (index/synthetic.h), for demos and benchmarks; it
// needs no server.
//
// Thread-safety: runs on maxsimctl's one thread.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_GENERATE_COMMAND_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_GENERATE_COMMAND_H_

#include "client/maxsimctl/flags.h"

namespace maxsimd::ctl {

// Flags: out, docs, dim, min-tokens, max-tokens, clusters, queries,
// query-tokens, seed. Writes tokens.npy, cu_seqlens.npy and ids.txt, and
// per query query_<i>.npy, query_<i>.source and candidates_<i>.txt, the
// same bytes for the same flags on every platform. Exit 1 when a file cannot
// be written, 2 for a flag value out of range.
int RunGenerate(const Globals& g, const Flags& f);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_GENERATE_COMMAND_H_
