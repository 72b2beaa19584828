// The set of named corpora a server holds.
//
// Thread-safety: thread-safe. Lookups copy a shared_ptr under mu_, so a
// corpus dropped while a query uses it stays alive until that query ends.
#ifndef MAXSIMD_INDEX_REGISTRY_H_
#define MAXSIMD_INDEX_REGISTRY_H_

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "index/corpus.h"

namespace maxsimd {

class CorpusRegistry {
 public:
  // `backend` must outlive the registry and every corpus it hands out.
  CorpusRegistry(Backend* backend, const CorpusLimits& limits);

  // Errors: INVALID_ARGUMENT for a bad config, ALREADY_EXISTS for a taken
  // name.
  absl::StatusOr<std::shared_ptr<Corpus>> Create(const CorpusConfig& config)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown name.
  absl::StatusOr<std::shared_ptr<Corpus>> Get(const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Drop(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // Every corpus, sorted by name.
  std::vector<std::shared_ptr<Corpus>> List() const ABSL_LOCKS_EXCLUDED(mu_);

  Backend* backend() const { return backend_; }
  const CorpusLimits& limits() const { return limits_; }

 private:
  Backend* const backend_;
  const CorpusLimits limits_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Corpus>> corpora_ ABSL_GUARDED_BY(mu_);
};

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_REGISTRY_H_
