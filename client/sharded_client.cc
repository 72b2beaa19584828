#include "client/sharded_client.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <utility>

#include "absl/base/thread_annotations.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {
namespace {

// The state of one fan-out, shared by the caller and the shard calls'
// callbacks: the caller may return at the first failure while other calls
// are still in flight.
class FanOut {
 public:
  explicit FanOut(size_t num_calls)
      : responses_(num_calls), pending_(num_calls) {}

  // Records the answer of call `slot`; runs on a gRPC thread (or inline in
  // RerankAsync when gRPC fails the call at once).
  void Done(size_t slot, absl::StatusOr<v1::RerankResponse> result,
            absl::string_view shard_name) {
    absl::MutexLock lock(&mu_);
    --pending_;
    if (result.ok()) {
      responses_[slot] = *std::move(result);
    } else if (error_.ok()) {
      error_ = absl::Status(
          result.status().code(),
          absl::StrCat(shard_name, ": ", result.status().message()));
    }
  }

  // Blocks until every call has answered or one has failed; returns the
  // answers in call order, or the first failure.
  absl::StatusOr<std::vector<v1::RerankResponse>> Wait() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &FanOut::Finished));
    if (!error_.ok()) return error_;
    return std::move(responses_);
  }

 private:
  // REQUIRES: mu_ held.
  bool Finished() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return pending_ == 0 || !error_.ok();
  }

  absl::Mutex mu_;
  std::vector<v1::RerankResponse> responses_ ABSL_GUARDED_BY(mu_);
  size_t pending_ ABSL_GUARDED_BY(mu_);
  absl::Status error_ ABSL_GUARDED_BY(mu_);  // the first failure
};

// Position of one shard's result in the merge.
struct Ranked {
  float score;
  int shard;  // index into the merged span, which is in target order
  int rank;   // position within that shard's answer
};

// Score descending with NaN last, as numpy's sort of the negated scores in
// the Python client. A strict weak order, so that stable_sort is defined.
bool ScoresBefore(float a, float b) {
  if (std::isnan(a)) return false;
  if (std::isnan(b)) return true;
  return a > b;
}

}  // namespace

// Counts the shard calls in flight, so that the destructor can wait for
// them: each call holds the count from just before it starts until its
// callback has recorded its answer.
class ShardedClient::InFlight {
 public:
  void Add(int n) {
    absl::MutexLock lock(&mu_);
    count_ += n;
  }
  void Release() {
    absl::MutexLock lock(&mu_);
    --count_;
  }
  void WaitForNone() {
    absl::MutexLock lock(&mu_);
    mu_.Await(absl::Condition(this, &InFlight::None));
  }

 private:
  // REQUIRES: mu_ held.
  bool None() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return count_ == 0; }

  absl::Mutex mu_;
  int64_t count_ ABSL_GUARDED_BY(mu_) = 0;
};

uint32_t Crc32(absl::string_view bytes) {
  uLong crc = crc32(0L, Z_NULL, 0);
  while (!bytes.empty()) {
    const size_t n = std::min<size_t>(bytes.size(), size_t{1} << 30);
    crc = crc32(crc, reinterpret_cast<const Bytef*>(bytes.data()),
                static_cast<uInt>(n));
    bytes.remove_prefix(n);
  }
  return static_cast<uint32_t>(crc);
}

int Crc32Shard(absl::string_view id, int num_shards) {
  return static_cast<int>(Crc32(id) % static_cast<uint32_t>(num_shards));
}

v1::RerankResponse MergeRerankResponses(
    absl::Span<const v1::RerankResponse> shards, int32_t top_k) {
  const size_t k = top_k == 0 ? 10 : static_cast<size_t>(std::max(top_k, 0));
  std::vector<Ranked> all;
  for (size_t s = 0; s < shards.size(); ++s) {
    for (int r = 0; r < shards[s].results_size(); ++r) {
      all.push_back({shards[s].results(r).score(), static_cast<int>(s), r});
    }
  }
  // `all` is in (shard, rank) order already, so a stable sort by score
  // alone breaks ties by shard, then by rank.
  std::stable_sort(all.begin(), all.end(),
                   [](const Ranked& a, const Ranked& b) {
                     return ScoresBefore(a.score, b.score);
                   });
  if (all.size() > k) all.resize(k);

  v1::RerankResponse merged;
  if (!shards.empty()) merged.set_request_id(shards[0].request_id());
  for (const Ranked& r : all) {
    *merged.add_results() = shards[r.shard].results(r.rank);
  }
  const v1::RerankResponse* slowest = nullptr;
  for (const v1::RerankResponse& shard : shards) {
    if (shard.has_timing() &&
        (slowest == nullptr ||
         shard.timing().total_ns() > slowest->timing().total_ns())) {
      slowest = &shard;
    }
  }
  if (slowest != nullptr) *merged.mutable_timing() = slowest->timing();
  return merged;
}

ShardedClient::ShardedClient(std::vector<std::string> targets,
                             absl::Duration timeout, ShardFunction shard_of)
    : targets_(std::move(targets)),
      timeout_(timeout),
      shard_of_(std::move(shard_of)),
      in_flight_(std::make_shared<InFlight>()) {}

ShardedClient::~ShardedClient() { in_flight_->WaitForNone(); }

absl::StatusOr<std::unique_ptr<ShardedClient>> ShardedClient::Create(
    const std::vector<std::string>& targets, const ClientOptions& options,
    ShardFunction shard_of) {
  if (targets.empty()) {
    return absl::InvalidArgumentError(
        "ShardedClient::Create: targets is empty; need one per shard");
  }
  std::unique_ptr<ShardedClient> sharded(new ShardedClient(
      targets, options.timeout,
      shard_of != nullptr ? std::move(shard_of) : ShardFunction(Crc32Shard)));
  for (size_t i = 0; i < targets.size(); ++i) {
    ClientOptions shard_options = options;
    shard_options.target = targets[i];
    absl::StatusOr<std::unique_ptr<Client>> client =
        Client::Create(shard_options);
    if (!client.ok()) {
      return absl::Status(
          client.status().code(),
          absl::StrCat("ShardedClient::Create: shard ", i, " ('", targets[i],
                       "'): ", client.status().message()));
    }
    sharded->shards_.push_back(*std::move(client));
  }
  return sharded;
}

absl::StatusOr<int> ShardedClient::ShardOf(absl::string_view id) const {
  const int shard = shard_of_(id, num_shards());
  if (shard < 0 || shard >= num_shards()) {
    return absl::InvalidArgumentError(
        absl::StrCat("ShardedClient: shard_of('", id, "') is ", shard,
                     "; need 0..", num_shards() - 1));
  }
  return shard;
}

absl::StatusOr<std::vector<std::vector<std::string>>> ShardedClient::Partition(
    absl::Span<const std::string> ids) const {
  std::vector<std::vector<std::string>> parts(shards_.size());
  for (const std::string& id : ids) {
    MAXSIMD_ASSIGN_OR_RETURN(const int shard, ShardOf(id));
    parts[shard].push_back(id);
  }
  return parts;
}

absl::StatusOr<v1::RerankResponse> ShardedClient::Rerank(
    const Query& query) const {
  // One deadline for every shard, fixed before any work.
  const absl::Time deadline = absl::Now() + timeout_;

  // The shards to call and, for a rerank, the candidates of each.
  std::vector<int> called;
  std::vector<std::vector<std::string>> parts;
  if (query.candidate_ids.empty()) {
    for (int s = 0; s < num_shards(); ++s) called.push_back(s);
  } else {
    MAXSIMD_ASSIGN_OR_RETURN(parts, Partition(query.candidate_ids));
    for (int s = 0; s < num_shards(); ++s) {
      if (!parts[s].empty()) called.push_back(s);
    }
  }

  // The query is encoded once (every shard Client has the same options);
  // the shards' requests differ only in their candidates.
  v1::RerankRequest base = shards_[0]->ToRequest(query);
  base.clear_candidate_ids();
  auto fan = std::make_shared<FanOut>(called.size());
  in_flight_->Add(static_cast<int>(called.size()));
  for (size_t slot = 0; slot < called.size(); ++slot) {
    const int s = called[slot];
    v1::RerankRequest request =
        slot + 1 == called.size() ? std::move(base) : base;
    if (!parts.empty()) {
      for (std::string& id : parts[s]) request.add_candidate_ids(std::move(id));
    }
    // The callback touches only what it shares: this object may be gone
    // once it has released its count.
    shards_[s]->RerankAsync(
        std::move(request), deadline,
        [fan, slot, in_flight = in_flight_,
         name = absl::StrCat("shard ", s, " (", targets_[s], ")")](
            absl::StatusOr<v1::RerankResponse> result) {
          fan->Done(slot, std::move(result), name);
          in_flight->Release();
        });
  }
  MAXSIMD_ASSIGN_OR_RETURN(std::vector<v1::RerankResponse> responses,
                           fan->Wait());
  return MergeRerankResponses(responses, query.top_k);
}

}  // namespace maxsimd
