#include "index/registry.h"

#include <unistd.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "index/storage.h"
#include "kernels/status_macros.h"

namespace maxsimd {

CorpusRegistry::CorpusRegistry(Backend* backend, const CorpusLimits& limits,
                               std::string data_dir)
    : backend_(backend), limits_(limits), data_dir_(std::move(data_dir)) {}

std::string CorpusRegistry::CorpusDir(const std::string& name) const {
  return absl::StrCat(data_dir_, "/corpora/", name);
}

namespace {

constexpr absl::string_view kAliasesFile = "ALIASES";

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
  if (access(aliases_path.c_str(), F_OK) == 0) {
    absl::StatusOr<std::string> bytes = ReadWholeFile(aliases_path);
    absl::StatusOr<std::map<std::string, std::string>> aliases =
        bytes.ok() ? DecodeAliases(*bytes, aliases_path)
                   : absl::StatusOr<std::map<std::string, std::string>>(
                         bytes.status());
    if (aliases.ok()) {
      absl::MutexLock lock(&mu_);
      aliases_ = *std::move(aliases);
    }
    report.aliases = aliases.status();
  }
  return report;
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
    MAXSIMD_RETURN_IF_ERROR(CheckFreeLocked(config.name));
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
  return absl::NotFoundError(
      absl::StrCat("corpus: \"", name.substr(0, 160), "\" does not exist"));
}

absl::Status CorpusRegistry::Drop(const std::string& name) {
  std::shared_ptr<Corpus> dropped;  // freed outside the lock
  bool failed_only = false;
  absl::MutexLock names(&alias_mu_);
  {
    absl::MutexLock lock(&mu_);
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
    MAXSIMD_RETURN_IF_ERROR(CheckFreeLocked(target));
    busy_.insert(target);
  }
  auto load = [&]() -> absl::StatusOr<std::shared_ptr<Corpus>> {
    std::unique_ptr<CorpusStore> store;
    if (!data_dir_.empty()) {
      MAXSIMD_ASSIGN_OR_RETURN(store,
                               CorpusStore::Create(CorpusDir(target), config));
      std::vector<CorpusStore::SegmentToWrite> segments;
      for (size_t i = 0; i < contents.segments.size(); ++i) {
        const StoredSegment& s = contents.manifest.segments[i];
        segments.push_back({&contents.segments[i], &contents.tombstones[i],
                            s.base_index, s.shard});
      }
      MAXSIMD_RETURN_IF_ERROR(store->WriteAndCommit(
          segments, contents.codec ? &*contents.codec : nullptr));
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
    absl::Status s = ReplaceFileDurably(path, EncodeAliases(aliases));
    if (!s.ok()) {
      // The new file may be in place (its directory's sync failed after
      // the rename): put the committed aliases back, best effort.
      std::map<std::string, std::string> committed;
      {
        absl::MutexLock lock(&mu_);
        committed = aliases_;
      }
      (void)ReplaceFileDurably(path, EncodeAliases(committed));
      return s;
    }
  }
  absl::MutexLock lock(&mu_);
  aliases_ = std::move(aliases);
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
    if (aliases_.count(alias) == 0) {
      return absl::NotFoundError(
          absl::StrCat("alias: \"", alias.substr(0, 160), "\" does not exist"));
    }
    next = aliases_;
  }
  next.erase(alias);
  return CommitAliases(std::move(next));
}

std::map<std::string, std::string> CorpusRegistry::Aliases() const {
  absl::MutexLock lock(&mu_);
  return aliases_;
}

std::vector<std::shared_ptr<Corpus>> CorpusRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Corpus>> out;
  for (const auto& [name, corpus] : corpora_) out.push_back(corpus);
  return out;
}

}  // namespace maxsimd
