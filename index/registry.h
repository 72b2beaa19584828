// The set of named corpora a server holds, and aliases naming them,
// optionally persisted under a data directory (index/FORMAT.md): then every
// corpus lives in <data_dir>/corpora/<name>/, the aliases in
// <data_dir>/ALIASES, LoadAll() brings them back at start, and Create, Drop
// and alias changes commit to disk before they return.
//
// Names: corpora and aliases share one namespace. Get() resolves an alias
// to its corpus once, so a request keeps the corpus it started with when
// the alias is switched.
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
  // if needed), and the aliases. A corpus whose files are damaged is not
  // served: Get() of its name returns the DATA_LOSS that names the file,
  // and Drop() may remove it; a damaged alias file leaves no aliases.
  // Fails only when the directory itself is unusable.
  struct LoadReport {
    // One status per corpus directory found (OK or the error), by name.
    std::vector<std::pair<std::string, absl::Status>> corpora;
    absl::Status aliases;  // of the alias file, OK when there is none
  };
  absl::StatusOr<LoadReport> LoadAll() ABSL_LOCKS_EXCLUDED(mu_);

  // Errors: INVALID_ARGUMENT for a bad config, UNIMPLEMENTED for a layout
  // the backend does not score (CheckBackendServes), ALREADY_EXISTS for a
  // taken name, and with a data directory the storage errors.
  absl::StatusOr<std::shared_ptr<Corpus>> Create(const CorpusConfig& config)
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown name; a corpus that failed to load returns
  // its load error.
  absl::StatusOr<std::shared_ptr<Corpus>> Get(const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  absl::Status Drop(const std::string& name) ABSL_LOCKS_EXCLUDED(mu_);
  // Every corpus being served, sorted by name.
  std::vector<std::shared_ptr<Corpus>> List() const ABSL_LOCKS_EXCLUDED(mu_);

  // Writes a snapshot of corpus `name` (or alias) as it is now to `dir`,
  // a corpus directory in the format of index/FORMAT.md (which must not
  // exist). Writes that land meanwhile are not in it. Returns the
  // snapshot's live document count.
  absl::StatusOr<int64_t> SnapshotCorpus(const std::string& name,
                                         const std::string& dir)
      ABSL_LOCKS_EXCLUDED(mu_);
  // Loads the corpus directory `dir` (a snapshot, or a corpus directory
  // copied from another server) as a new corpus `name` ("" = the name in
  // its manifest); with a data directory it is persisted there first. The
  // source is only read. Errors: DATA_LOSS naming a damaged or missing
  // file, ALREADY_EXISTS for a taken name, the backend's upload errors.
  absl::StatusOr<std::shared_ptr<Corpus>> LoadCorpus(const std::string& dir,
                                                     const std::string& name)
      ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);

  // Points `alias` at `corpus` (a corpus name, served or failed to load),
  // creating or switching it; returns the corpus it named before ("" if
  // new). Errors: INVALID_ARGUMENT for a bad alias name, NOT_FOUND for an
  // unknown corpus (or one given by alias), ALREADY_EXISTS when the alias
  // is a corpus's name, and the storage errors (nothing changes).
  absl::StatusOr<std::string> SetAlias(const std::string& alias,
                                       const std::string& corpus)
      ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);
  // NOT_FOUND when there is no such alias.
  absl::Status DeleteAlias(const std::string& alias)
      ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);
  std::map<std::string, std::string> Aliases() const ABSL_LOCKS_EXCLUDED(mu_);

  Backend* backend() const { return backend_; }
  const CorpusLimits& limits() const { return limits_; }
  const std::string& data_dir() const { return data_dir_; }

 private:
  std::string CorpusDir(const std::string& name) const;
  absl::Status CheckFreeLocked(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes `aliases` the alias map, on disk first.
  absl::Status CommitAliases(std::map<std::string, std::string> aliases)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(alias_mu_) ABSL_LOCKS_EXCLUDED(mu_);

  Backend* const backend_;
  const CorpusLimits limits_;
  const std::string data_dir_;
  // Serialises the changes of names (Create, Drop, alias changes), so that
  // their disk writes happen outside mu_. Ordered before mu_.
  absl::Mutex alias_mu_;
  mutable absl::Mutex mu_;
  std::map<std::string, std::shared_ptr<Corpus>> corpora_ ABSL_GUARDED_BY(mu_);
  // Corpora on disk that failed to load, with the error.
  std::map<std::string, absl::Status> failed_ ABSL_GUARDED_BY(mu_);
  // Names being created or dropped (their directory is changing).
  std::set<std::string> busy_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::string> aliases_ ABSL_GUARDED_BY(mu_);
};

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_REGISTRY_H_
