// The set of named corpora a server holds, optionally persisted under a
// data directory (index/FORMAT.md): then every corpus lives in
// <data_dir>/corpora/<name>/, LoadAll() brings them back at start, and
// Create/Drop commit to disk before they return.
//
// Thread-safety: thread-safe. Lookups copy a shared_ptr under mu_, so a
// corpus dropped while a query uses it stays alive until that query ends.
#ifndef MAXSIMD_INDEX_REGISTRY_H_
#define MAXSIMD_INDEX_REGISTRY_H_

#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "index/corpus.h"

namespace maxsimd {

class CorpusRegistry {
 public:
  // `backend` must outlive the registry and every corpus it hands out.
  // `data_dir` empty: corpora live in memory only.
  CorpusRegistry(Backend* backend, const CorpusLimits& limits,
                 std::string data_dir = "");

  // Opens every corpus under the data directory (creating the directory
  // if needed). A corpus whose files are damaged is not served: Get() of
  // its name returns the DATA_LOSS that names the file, and Drop() may
  // remove it. Returns one status per corpus directory found (OK or the
  // error), in name order; fails only when the directory itself is
  // unusable.
  absl::StatusOr<std::vector<std::pair<std::string, absl::Status>>> LoadAll()
      ABSL_LOCKS_EXCLUDED(mu_);

  // Errors: INVALID_ARGUMENT for a bad config, ALREADY_EXISTS for a taken
  // name, and with a data directory the storage errors.
  absl::StatusOr<std::shared_ptr<Corpus>> Create(const CorpusConfig& config)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown name; a corpus that failed to load returns
  // its load error.
  absl::StatusOr<std::shared_ptr<Corpus>> Get(const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Drop(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // Every corpus being served, sorted by name.
  std::vector<std::shared_ptr<Corpus>> List() const ABSL_LOCKS_EXCLUDED(mu_);

  Backend* backend() const { return backend_; }
  const CorpusLimits& limits() const { return limits_; }
  const std::string& data_dir() const { return data_dir_; }

 private:
  std::string CorpusDir(const std::string& name) const;
  absl::Status CheckFreeLocked(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  Backend* const backend_;
  const CorpusLimits limits_;
  const std::string data_dir_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Corpus>> corpora_ ABSL_GUARDED_BY(mu_);
  // Corpora on disk that failed to load, with the error.
  std::map<std::string, absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  // Names being created or dropped (their directory is changing).
  std::set<std::string> busy_ ABSL_GUARDED_BY(mu_);
};

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_REGISTRY_H_
