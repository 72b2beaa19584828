// Arena blocks for the messages of one Rerank call, shared by the client
// library (its request) and the server (request and response): the first
// block holds a request of about a thousand short candidate ids (a string
// object and a cleanup entry each, ~48 bytes) with its response, so that
// those strings take no heap allocation each; larger requests add blocks of
// up to 1 MiB. The arena allocates on first use only.
#ifndef MAXSIMD_PROTO_CALL_ARENA_H_
#define MAXSIMD_PROTO_CALL_ARENA_H_

#include "google/protobuf/arena.h"

namespace maxsimd {

inline google::protobuf::ArenaOptions CallArenaOptions() {
  google::protobuf::ArenaOptions options;
  options.start_block_size = 64 << 10;
  options.max_block_size = 1 << 20;
  return options;
}

}  // namespace maxsimd

#endif  // MAXSIMD_PROTO_CALL_ARENA_H_
