// The set of named corpora a server holds, and aliases naming them,
// optionally persisted under a data directory (index/FORMAT.md): then every
// corpus lives in <data_dir>/corpora/<name>/, the aliases in
// <data_dir>/ALIASES (with the previous version in ALIASES.prev), LoadAll()
// brings them back at start, and Create, Drop and alias changes commit to
// disk before they return.
//
// Names: corpora and aliases share one namespace. Get() resolves an alias
// to its corpus once, so a request keeps the corpus it started with when
// the alias is switched. The registry holds at most
// CorpusLimits::max_corpora corpora, counting those that failed to load.
//
// Damaged alias files: when ALIASES is damaged at start, the aliases come
// from ALIASES.prev (the state before the last alias change); when that is
// unusable too, the alias map is unknown (AliasState::kUnknown) until an
// operator repairs the files and restarts the server: meanwhile every call
// that needs the map (alias lookups and changes, and the name changes
// Create, LoadCorpus and Drop, which could collide with a lost alias) fails
// with DATA_LOSS naming the files, while corpora keep serving by name.
//
// Thread-safety: thread-safe. Lookups copy a shared_ptr under mu_, so a
// corpus dropped while a query uses it stays alive until that query ends.
#ifndef MAXSIMD_INDEX_REGISTRY_H_
#define MAXSIMD_INDEX_REGISTRY_H_

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
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
  // and Drop() may remove it. Every corpus found is loaded, even past
  // max_corpora (they all held a name before the restart); Create and
  // LoadCorpus then refuse until enough are dropped. A damaged ALIASES
  // falls back to ALIASES.prev, and when that is unusable too leaves the
  // alias map unknown (see the file comment). Removes what a crash left:
  // `.dropped-*` and `.partial-*` directories, a create that never
  // finished, the alias files' `.tmp` files. Fails only when the directory
  // itself is unusable.
  struct LoadReport {
    // One status per corpus directory found (OK or the error), by name.
    std::vector<std::pair<std::string, absl::Status>> corpora;
    // Of ALIASES: OK when it is sound or absent, else its error.
    absl::Status aliases;
    // When `aliases` is not OK, of ALIASES.prev: OK when the aliases were
    // restored from it (alias_state() kFromBackup), else its error (a
    // missing file is DATA_LOSS too; alias_state() kUnknown).
    absl::Status aliases_backup;
    // Aliases of ALIASES.prev not restored, since their name is now a
    // corpus's or their corpus no longer exists.
    std::vector<std::string> aliases_dropped;
  };
  absl::StatusOr<LoadReport> LoadAll() ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);

  // Errors: INVALID_ARGUMENT for a bad config, UNIMPLEMENTED for a layout
  // the backend does not score (CheckBackendServes), ALREADY_EXISTS for a
  // taken name, RESOURCE_EXHAUSTED naming --max_corpora when the registry
  // holds max_corpora corpora, DATA_LOSS while the alias map is unknown,
  // and with a data directory the storage errors.
  absl::StatusOr<std::shared_ptr<Corpus>> Create(const CorpusConfig& config)
      ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);
  // NOT_FOUND for an unknown name (DATA_LOSS naming the alias files while
  // the alias map is unknown, since the name may be a lost alias); a
  // corpus that failed to load returns its load error.
  absl::StatusOr<std::shared_ptr<Corpus>> Get(const std::string& name) const
      ABSL_LOCKS_EXCLUDED(mu_);
  // NOT_FOUND for an unknown corpus, FAILED_PRECONDITION while an alias
  // names it, DATA_LOSS while the alias map is unknown.
  absl::Status Drop(const std::string& name)
      ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);
  // Every corpus being served, sorted by name.
  std::vector<std::shared_ptr<Corpus>> List() const ABSL_LOCKS_EXCLUDED(mu_);
  // The corpora on disk that failed to load, with their errors, by name.
  std::map<std::string, absl::Status> Failed() const ABSL_LOCKS_EXCLUDED(mu_);
  // Corpora held, served or failed to load: what max_corpora bounds.
  int64_t NumCorpora() const ABSL_LOCKS_EXCLUDED(mu_);

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
  // source is only read; the copy gets a fresh corpus id. Errors:
  // DATA_LOSS naming a damaged or missing file (or one of another corpus),
  // ALREADY_EXISTS for a taken name, RESOURCE_EXHAUSTED naming
  // --max_corpora as Create, DATA_LOSS while the alias map is unknown, the
  // backend's upload errors.
  absl::StatusOr<std::shared_ptr<Corpus>> LoadCorpus(const std::string& dir,
                                                     const std::string& name)
      ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);

  // Points `alias` at `corpus` (a corpus name, served or failed to load),
  // creating or switching it; returns the corpus it named before ("" if
  // new). Errors: INVALID_ARGUMENT for a bad alias name, NOT_FOUND for an
  // unknown corpus (or one given by alias), ALREADY_EXISTS when the alias
  // is a corpus's name, DATA_LOSS while the alias map is unknown, and the
  // storage errors (nothing changes). With a data directory the change is
  // committed as index/FORMAT.md says: ALIASES.prev gets the aliases as
  // they were, then ALIASES the new ones.
  absl::StatusOr<std::string> SetAlias(const std::string& alias,
                                       const std::string& corpus)
      ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);
  // NOT_FOUND when there is no such alias; DATA_LOSS and the storage errors
  // as SetAlias.
  absl::Status DeleteAlias(const std::string& alias)
      ABSL_LOCKS_EXCLUDED(alias_mu_, mu_);
  // Every alias and its corpus; DATA_LOSS naming the alias files while the
  // map is unknown.
  absl::StatusOr<std::map<std::string, std::string>> Aliases() const
      ABSL_LOCKS_EXCLUDED(mu_);

  // The alias files as LoadAll found them. kFromBackup: ALIASES was
  // damaged and the aliases came from ALIASES.prev (the last change before
  // the restart may be lost); the next alias change rewrites both files
  // and makes it kSound. kUnknown: neither file was usable.
  enum class AliasState { kSound, kFromBackup, kUnknown };
  AliasState alias_state() const ABSL_LOCKS_EXCLUDED(mu_);

  Backend* backend() const { return backend_; }
  const CorpusLimits& limits() const { return limits_; }
  const std::string& data_dir() const { return data_dir_; }

 private:
  std::string CorpusDir(const std::string& name) const;
  absl::Status CheckFreeLocked(const std::string& name) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // DATA_LOSS while the alias map is unknown.
  absl::Status CheckAliasesKnownLocked() const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The checks of a new corpus name: the alias map known, `name` free, room
  // under max_corpora.
  absl::Status CheckNewNameLocked(const std::string& name) const
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
  AliasState alias_state_ ABSL_GUARDED_BY(mu_) = AliasState::kSound;
  // kUnknown: the DATA_LOSS that alias calls return.
  absl::Status aliases_unknown_ ABSL_GUARDED_BY(mu_);
};

}  // namespace maxsimd

#endif  // MAXSIMD_INDEX_REGISTRY_H_
