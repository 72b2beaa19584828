#include "index/registry.h"

#include <unistd.h>

#include <iterator>
#include <map>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "index/storage.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {

CorpusRegistry::CorpusRegistry(Backend* backend, const CorpusLimits& limits,
                               std::string data_dir)
    : backend_(backend), limits_(limits), data_dir_(std::move(data_dir)) {}

std::string CorpusRegistry::CorpusDir(const std::string& name) const {
  return absl::StrCat(data_dir_, "/corpora/", name);
}

namespace {

constexpr absl::string_view kAliasesFile = "ALIASES";
// The aliases as they were before the last change (FORMAT.md).
constexpr absl::string_view kAliasesBackupFile = "ALIASES.prev";

// The alias map in the alias file `path`: its DATA_LOSS (or I/O error)
// when it is unusable, DATA_LOSS "missing" when it is absent.
absl::StatusOr<std::map<std::string, std::string>> ReadAliasFile(
    const std::string& path) {
  MAXSIMD_ASSIGN_OR_RETURN(std::string bytes, ReadWholeFile(path));
  return DecodeAliases(bytes, path);
}

// A corpus directory left by a crash inside CorpusStore::Create: no
// manifest, and nothing but a manifest being written (a real corpus that
// lost its manifest still has segment files, and is DATA_LOSS instead).
bool UnfinishedCreate(const std::string& dir) {
  if (access(absl::StrCat(dir, "/MANIFEST").c_str(), F_OK) == 0) return false;
  absl::StatusOr<std::vector<std::string>> files = ListFiles(dir);
  if (!files.ok()) return false;
  for (const std::string& f : *files) {
    if (f != "MANIFEST.tmp") return false;
  }
  return true;
}

}  // namespace

absl::StatusOr<CorpusRegistry::LoadReport> CorpusRegistry::LoadAll() {
  LoadReport report;
  if (data_dir_.empty()) return report;
  const std::string root = absl::StrCat(data_dir_, "/corpora");
  MAXSIMD_RETURN_IF_ERROR(MakeDirectories(root));
  MAXSIMD_RETURN_IF_ERROR(RemoveDroppedCorpora(root));
  MAXSIMD_ASSIGN_OR_RETURN(std::vector<std::string> names,
                           ListCorpusDirectories(root));
  for (const std::string& name : names) {
    if (UnfinishedCreate(CorpusDir(name))) {
      // A crash inside Create(), which never returned OK: nothing to keep.
      (void)DestroyCorpusDirectory(CorpusDir(name));
      continue;
    }
    StoredCorpus contents;
    absl::StatusOr<std::shared_ptr<Corpus>> corpus;
    absl::StatusOr<std::unique_ptr<CorpusStore>> store =
        CorpusStore::Open(CorpusDir(name), &contents);
    if (store.ok() && contents.manifest.config.name != name) {
      store = absl::DataLossError(absl::StrCat(
          "file ", CorpusDir(name), "/MANIFEST names corpus \"",
          contents.manifest.config.name, "\", not its directory's name"));
    }
    if (store.ok()) {
      corpus = Corpus::Restore(limits_, backend_, *std::move(store),
                               std::move(contents));
    } else {
      corpus = store.status();
    }
    absl::MutexLock lock(&mu_);
    if (corpus.ok()) {
      corpora_[name] = *corpus;
      failed_.erase(name);
    } else {
      failed_[name] = corpus.status();
    }
    report.corpora.emplace_back(name, corpus.status());
  }
  const std::string aliases_path = absl::StrCat(data_dir_, "/", kAliasesFile);
  const std::string backup_path =
      absl::StrCat(data_dir_, "/", kAliasesBackupFile);
  // Commits that a crash interrupted before their rename; never read.
  for (const std::string& path : {aliases_path, backup_path}) {
    (void)unlink(absl::StrCat(path, ".tmp").c_str());
  }
  if (access(aliases_path.c_str(), F_OK) != 0) return report;
  absl::StatusOr<std::map<std::string, std::string>> aliases =
      ReadAliasFile(aliases_path);
  report.aliases = aliases.status();
  if (!aliases.ok()) {
    aliases = ReadAliasFile(backup_path);
    report.aliases_backup = aliases.status();
  }
  absl::MutexLock name_changes(&alias_mu_);
  absl::MutexLock lock(&mu_);
  if (aliases.ok()) {
    aliases_ = *std::move(aliases);
    alias_state_ = AliasState::kSound;
    if (!report.aliases.ok()) {
      // A backup may be older than the corpora: an alias whose name became
      // a corpus's, or whose corpus was dropped since, is not restored.
      alias_state_ = AliasState::kFromBackup;
      for (auto it = aliases_.begin(); it != aliases_.end();) {
        const bool stale =
            corpora_.count(it->first) > 0 || failed_.count(it->first) > 0 ||
            (corpora_.count(it->second) == 0 && failed_.count(it->second) == 0);
        if (stale) report.aliases_dropped.push_back(it->first);
        it = stale ? aliases_.erase(it) : std::next(it);
      }
    }
    return report;
  }
  aliases_.clear();
  alias_state_ = AliasState::kUnknown;
  aliases_unknown_ = absl::DataLossError(absl::StrCat(
      "the aliases are unknown: ", report.aliases.message(),
      "; the backup: ", report.aliases_backup.message(), ". Repair or restore ",
      aliases_path, " (or remove it and ", backup_path,
      " to start without aliases), then restart the server"));
  return report;
}

absl::Status CorpusRegistry::CheckAliasesKnownLocked() const {
  return alias_state_ == AliasState::kUnknown ? aliases_unknown_
                                              : absl::OkStatus();
}

absl::Status CorpusRegistry::CheckNewNameLocked(const std::string& name) const {
  MAXSIMD_RETURN_IF_ERROR(CheckAliasesKnownLocked());
  MAXSIMD_RETURN_IF_ERROR(CheckFreeLocked(name));
  // Name changes hold alias_mu_, so busy_ is empty here: corpora_ and
  // failed_ (disjoint) are every name held.
  const int64_t held = static_cast<int64_t>(corpora_.size() + failed_.size());
  if (held >= limits_.max_corpora) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "name: corpus \"", name, "\" would exceed the limit: the server holds ",
        held, " corpora (counting those that failed to load) and ",
        "--max_corpora is ", limits_.max_corpora, "; drop one first"));
  }
  return absl::OkStatus();
}

absl::Status CorpusRegistry::CheckFreeLocked(const std::string& name) const {
  if (corpora_.count(name) > 0 || failed_.count(name) > 0 ||
      busy_.count(name) > 0 || aliases_.count(name) > 0) {
    return absl::AlreadyExistsError(
        absl::StrCat("name: corpus \"", name, "\" already exists"));
  }
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<Corpus>> CorpusRegistry::Create(
    const CorpusConfig& config) {
  MAXSIMD_RETURN_IF_ERROR(ValidateCorpusConfig(config, limits_));
  // Before the directory exists: a refused corpus leaves nothing behind.
  MAXSIMD_RETURN_IF_ERROR(CheckBackendServes(config, *backend_));
  absl::MutexLock names(&alias_mu_);
  {
    absl::MutexLock lock(&mu_);
    MAXSIMD_RETURN_IF_ERROR(CheckNewNameLocked(config.name));
    busy_.insert(config.name);
  }
  absl::StatusOr<std::shared_ptr<Corpus>> corpus;
  if (data_dir_.empty()) {
    corpus = Corpus::Create(config, limits_, backend_);
  } else {
    absl::StatusOr<std::unique_ptr<CorpusStore>> store =
        CorpusStore::Create(CorpusDir(config.name), config);
    corpus = store.ok()
                 ? Corpus::Create(config, limits_, backend_, *std::move(store))
                 : store.status();
  }
  absl::MutexLock lock(&mu_);
  busy_.erase(config.name);
  if (corpus.ok()) corpora_.emplace(config.name, *corpus);
  return corpus;
}

absl::StatusOr<std::shared_ptr<Corpus>> CorpusRegistry::Get(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto alias = aliases_.find(name);
  const std::string& target = alias != aliases_.end() ? alias->second : name;
  auto it = corpora_.find(target);
  if (it != corpora_.end()) return it->second;
  auto failed = failed_.find(target);
  if (failed != failed_.end()) {
    return absl::Status(
        failed->second.code(),
        absl::StrCat("corpus \"", name,
                     "\" could not be loaded: ", failed->second.message()));
  }
  if (alias_state_ == AliasState::kUnknown) {
    return absl::DataLossError(
        absl::StrCat("corpus: \"", name.substr(0, 160),
                     "\" is not a corpus, and may be an alias: ",
                     aliases_unknown_.message()));
  }
  return absl::NotFoundError(
      absl::StrCat("corpus: \"", name.substr(0, 160), "\" does not exist"));
}

absl::Status CorpusRegistry::Drop(const std::string& name) {
  std::shared_ptr<Corpus> dropped;  // freed outside the lock
  bool failed_only = false;
  absl::MutexLock names(&alias_mu_);
  {
    absl::MutexLock lock(&mu_);
    MAXSIMD_RETURN_IF_ERROR(CheckAliasesKnownLocked());
    std::vector<std::string> naming;
    for (const auto& [alias, corpus] : aliases_) {
      if (corpus == name) naming.push_back(alias);
    }
    if (!naming.empty()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "name: corpus \"", name, "\" is named by alias",
          naming.size() > 1 ? "es " : " ", absl::StrJoin(naming, ", "),
          "; move or delete ", naming.size() > 1 ? "them" : "it", " first"));
    }
    auto it = corpora_.find(name);
    failed_only = it == corpora_.end() && failed_.count(name) > 0;
    if ((it == corpora_.end() && !failed_only) || busy_.count(name) > 0) {
      return absl::NotFoundError(absl::StrCat(
          "name: corpus \"", name.substr(0, 160), "\" does not exist"));
    }
    if (!failed_only) dropped = it->second;
    busy_.insert(name);
  }
  // The directory goes first: a drop that returns OK does not come back
  // after a restart.
  absl::Status destroyed = failed_only ? DestroyCorpusDirectory(CorpusDir(name))
                                       : dropped->DestroyStorage();
  absl::MutexLock lock(&mu_);
  busy_.erase(name);
  if (!destroyed.ok()) return destroyed;
  corpora_.erase(name);
  failed_.erase(name);
  return absl::OkStatus();
}

absl::StatusOr<int64_t> CorpusRegistry::SnapshotCorpus(const std::string& name,
                                                       const std::string& dir) {
  MAXSIMD_ASSIGN_OR_RETURN(std::shared_ptr<Corpus> corpus, Get(name));
  const std::shared_ptr<const CorpusSnapshot> snapshot = corpus->Snapshot();
  MAXSIMD_RETURN_IF_ERROR(WriteCorpusDirectory(dir, *snapshot));
  return snapshot->live_docs();
}

absl::StatusOr<std::shared_ptr<Corpus>> CorpusRegistry::LoadCorpus(
    const std::string& dir, const std::string& name) {
  StoredCorpus contents;
  MAXSIMD_RETURN_IF_ERROR(CorpusStore::Read(dir, &contents));
  CorpusConfig& config = contents.manifest.config;
  if (!name.empty()) config.name = name;
  MAXSIMD_RETURN_IF_ERROR(ValidateCorpusConfig(config, limits_));
  MAXSIMD_RETURN_IF_ERROR(CheckBackendServes(config, *backend_));
  const std::string target = config.name;
  absl::MutexLock names(&alias_mu_);
  {
    absl::MutexLock lock(&mu_);
    MAXSIMD_RETURN_IF_ERROR(CheckNewNameLocked(target));
    busy_.insert(target);
  }
  auto load = [&]() -> absl::StatusOr<std::shared_ptr<Corpus>> {
    std::unique_ptr<CorpusStore> store;
    if (!data_dir_.empty()) {
      // Whole or not at all: a crash midway leaves a `.partial-*`
      // directory that LoadAll removes, never a corpus of part of it.
      std::vector<CorpusStore::SegmentToWrite> segments;
      for (size_t i = 0; i < contents.segments.size(); ++i) {
        const StoredSegment& s = contents.manifest.segments[i];
        segments.push_back({&contents.segments[i], &contents.tombstones[i],
                            s.base_index, s.shard});
      }
      MAXSIMD_ASSIGN_OR_RETURN(
          store, CorpusStore::CreateWhole(
                     CorpusDir(target), config, segments,
                     contents.codec ? &*contents.codec : nullptr));
    }
    return Corpus::Restore(limits_, backend_, std::move(store),
                           std::move(contents));
  };
  absl::StatusOr<std::shared_ptr<Corpus>> corpus = load();
  if (!corpus.ok() && !data_dir_.empty() &&
      access(CorpusDir(target).c_str(), F_OK) == 0) {
    (void)DestroyCorpusDirectory(CorpusDir(target));
  }
  absl::MutexLock lock(&mu_);
  busy_.erase(target);
  if (corpus.ok()) corpora_.emplace(target, *corpus);
  return corpus;
}

absl::Status CorpusRegistry::CommitAliases(
    std::map<std::string, std::string> aliases) {
  if (!data_dir_.empty()) {
    const std::string path = absl::StrCat(data_dir_, "/", kAliasesFile);
    std::map<std::string, std::string> committed;
    {
      absl::MutexLock lock(&mu_);
      committed = aliases_;
    }
    // The backup first: at every moment one of the two files holds a
    // committed state, and after this commit ALIASES.prev the one before.
    MAXSIMD_RETURN_IF_ERROR(
        ReplaceFileDurably(absl::StrCat(data_dir_, "/", kAliasesBackupFile),
                           EncodeAliases(committed)));
    absl::Status s = ReplaceFileDurably(path, EncodeAliases(aliases));
    if (!s.ok()) {
      // The new file may be in place (its directory's sync failed after
      // the rename): put the committed aliases back, best effort.
      (void)ReplaceFileDurably(path, EncodeAliases(committed));
      return s;
    }
  }
  absl::MutexLock lock(&mu_);
  aliases_ = std::move(aliases);
  alias_state_ = AliasState::kSound;
  return absl::OkStatus();
}

absl::StatusOr<std::string> CorpusRegistry::SetAlias(
    const std::string& alias, const std::string& corpus) {
  CorpusConfig probe;  // the alias must be a valid name, like a corpus's
  probe.name = alias;
  probe.dim = 1;
  absl::Status valid = ValidateCorpusConfig(probe, limits_);
  if (!valid.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("alias: ", valid.message()));
  }
  absl::MutexLock names(&alias_mu_);
  std::map<std::string, std::string> next;
  std::string previous;
  {
    absl::MutexLock lock(&mu_);
    MAXSIMD_RETURN_IF_ERROR(CheckAliasesKnownLocked());
    if (corpora_.count(alias) > 0 || failed_.count(alias) > 0 ||
        busy_.count(alias) > 0) {
      return absl::AlreadyExistsError(
          absl::StrCat("alias: \"", alias, "\" is the name of a corpus"));
    }
    if (corpora_.count(corpus) == 0 && failed_.count(corpus) == 0) {
      return absl::NotFoundError(absl::StrCat(
          "corpus: \"", corpus.substr(0, 160), "\" is not a corpus",
          aliases_.count(corpus) > 0 ? " (it is an alias)" : ""));
    }
    next = aliases_;
    auto it = next.find(alias);
    if (it != next.end()) previous = it->second;
    next[alias] = corpus;
  }
  MAXSIMD_RETURN_IF_ERROR(CommitAliases(std::move(next)));
  return previous;
}

absl::Status CorpusRegistry::DeleteAlias(const std::string& alias) {
  absl::MutexLock names(&alias_mu_);
  std::map<std::string, std::string> next;
  {
    absl::MutexLock lock(&mu_);
    MAXSIMD_RETURN_IF_ERROR(CheckAliasesKnownLocked());
    if (aliases_.count(alias) == 0) {
      return absl::NotFoundError(
          absl::StrCat("alias: \"", alias.substr(0, 160), "\" does not exist"));
    }
    next = aliases_;
  }
  next.erase(alias);
  return CommitAliases(std::move(next));
}

absl::StatusOr<std::map<std::string, std::string>> CorpusRegistry::Aliases()
    const {
  absl::MutexLock lock(&mu_);
  MAXSIMD_RETURN_IF_ERROR(CheckAliasesKnownLocked());
  return aliases_;
}

CorpusRegistry::AliasState CorpusRegistry::alias_state() const {
  absl::MutexLock lock(&mu_);
  return alias_state_;
}

std::map<std::string, absl::Status> CorpusRegistry::Failed() const {
  absl::MutexLock lock(&mu_);
  return failed_;
}

int64_t CorpusRegistry::NumCorpora() const {
  absl::MutexLock lock(&mu_);
  return static_cast<int64_t>(corpora_.size() + failed_.size());
}

std::vector<std::shared_ptr<Corpus>> CorpusRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Corpus>> out;
  for (const auto& [name, corpus] : corpora_) out.push_back(corpus);
  return out;
}

}  // namespace maxsimd
