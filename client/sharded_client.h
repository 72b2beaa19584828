// Client-side sharding: one logical corpus split by document over several
// maxsimd servers (shards), queried as if it were one.
//
// Serving a corpus larger than one host: run the shards as the pods of a
// StatefulSet (deploy/k8s/shards.yaml), each holding a disjoint part of the
// documents. A ShardedClient sends each query to every shard at once; each
// shard answers with its own top-k and the client merges them. MaxSim scores
// a document independently of every other document, so the top-k of the
// shards' top-k lists is exactly the top-k of the whole corpus. Replicas of
// one shard are not listed here: give the shard's target as one name that
// resolves to all of them (a headless Service per shard,
// `dns:///maxsimd-shard-0.<namespace>.svc.cluster.local:50051`) with
// ClientOptions::lb_policy = "round_robin", and gRPC spreads the calls over
// them. client/README.md has the whole picture.
//
// The merge and the placement of documents match the Python client's
// ShardedClient (client/python/maxsimd/sharded.py), so both clients can serve
// the same shards:
//   - order: score descending; equal scores go to the shard listed first,
//     then keep that shard's own order (the order in which its documents were
//     added). This matches one server holding every document when the
//     documents were added shard by shard in the order of the targets.
//   - placement: document `id` lives on shard Crc32Shard(id, num_shards),
//     crc32 of the id's bytes mod the number of shards, unless the caller
//     supplies its own ShardFunction.
//
// Thread-safety: a ShardedClient may be used from many threads at once; it
// holds the per-shard Clients (themselves thread-safe), immutable
// configuration, and a count of shard calls in flight (behind its own
// mutex). Rerank blocks the calling thread until the merged answer or the
// first failure; the shard calls complete on gRPC's callback threads, which
// only record the answer and never run caller code. A Rerank that returns
// early with a failure leaves the other shards' calls to finish in the
// background (a gRPC call already sent cannot be taken back). The destructor
// waits for those (each ends by its deadline at the latest), so that a
// channel is never destroyed under a call of its own or on a gRPC thread.
#ifndef MAXSIMD_CLIENT_SHARDED_CLIENT_H_
#define MAXSIMD_CLIENT_SHARDED_CLIENT_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/client.h"
#include "maxsimd/v1/reranker.pb.h"

namespace maxsimd {

// The CRC-32 (IEEE 802.3, as zlib's crc32 and Python's zlib.crc32) of
// `bytes`.
uint32_t Crc32(absl::string_view bytes);

// The default placement: Crc32(id) % num_shards (id as UTF-8 bytes).
// REQUIRES: num_shards >= 1.
int Crc32Shard(absl::string_view id, int num_shards);

// Merges the answers of the shards to one query into the best `top_k`
// (0 means 10, as in RerankRequest; fewer when the shards ranked fewer).
// `shards` holds the answers of the shards that were called, in target
// order. The merge order is the one stated at the top of this file. The
// merged timing is the slowest shard's (largest total_ns, the first among
// equals), which bounds the query's latency; the request_id is the first
// answer's.
v1::RerankResponse MergeRerankResponses(
    absl::Span<const v1::RerankResponse> shards, int32_t top_k);

class ShardedClient {
 public:
  // (id, num_shards) -> the index of the shard that holds document `id`, in
  // [0, num_shards). Called concurrently from the threads that call
  // Rerank and Partition, so it must be thread-safe.
  using ShardFunction = std::function<int(absl::string_view id, int)>;

  // One Client per target, each with `options` (target replaced). The
  // shard's index is its position in `targets`. `shard_of` defaults to
  // Crc32Shard. INVALID_ARGUMENT for no targets or options that
  // Client::Create rejects (naming the shard).
  static absl::StatusOr<std::unique_ptr<ShardedClient>> Create(
      const std::vector<std::string>& targets, const ClientOptions& options,
      ShardFunction shard_of = nullptr);

  int num_shards() const { return static_cast<int>(shards_.size()); }
  const std::string& target(int shard) const { return targets_[shard]; }
  // The Client of one shard, for calls that go to one shard (creating a
  // corpus, adding the documents Partition placed there).
  // REQUIRES: 0 <= shard < num_shards().
  Client& shard(int shard) const { return *shards_[shard]; }

  // The shard that holds (or will hold) document `id`. INVALID_ARGUMENT when
  // the ShardFunction answers outside [0, num_shards()).
  absl::StatusOr<int> ShardOf(absl::string_view id) const;

  // Splits ids by shard: result[s] holds the ids of shard s in their order
  // in `ids`. Errors as ShardOf.
  absl::StatusOr<std::vector<std::vector<std::string>>> Partition(
      absl::Span<const std::string> ids) const;

  // Client::Rerank over the whole sharded corpus. A scan (no candidate_ids)
  // goes to every shard; a rerank sends each shard only the candidates it
  // holds (a shard answers NOT_FOUND for an id it does not hold) and calls
  // only the shards that hold some. The calls run concurrently and share one
  // deadline, ClientOptions::timeout from the start of this call. The
  // answers are merged by MergeRerankResponses.
  //
  // Errors: the first shard call to fail ends the call with its code and
  // its message prefixed by "shard <index> (<target>): ". Errors of
  // placement as Partition.
  absl::StatusOr<v1::RerankResponse> Rerank(const Query& query) const;

  // Waits until no shard call is in flight, then closes the channels.
  ~ShardedClient();
  ShardedClient(const ShardedClient&) = delete;
  ShardedClient& operator=(const ShardedClient&) = delete;

 private:
  class InFlight;  // the count of shard calls in flight

  ShardedClient(std::vector<std::string> targets, absl::Duration timeout,
                ShardFunction shard_of);

  const std::vector<std::string> targets_;
  const absl::Duration timeout_;
  const ShardFunction shard_of_;
  // Shared with the callbacks of the calls in flight, which release it after
  // their last use of it, possibly after the destructor has returned.
  const std::shared_ptr<InFlight> in_flight_;
  std::vector<std::unique_ptr<Client>> shards_;  // set by Create only
};

}  // namespace maxsimd

#endif  // MAXSIMD_CLIENT_SHARDED_CLIENT_H_
