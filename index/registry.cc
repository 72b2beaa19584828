#include "index/registry.h"

#include "absl/strings/str_cat.h"
#include "kernels/status_macros.h"

namespace maxsimd {

CorpusRegistry::CorpusRegistry(Backend* backend, const CorpusLimits& limits)
    : backend_(backend), limits_(limits) {}

absl::StatusOr<std::shared_ptr<Corpus>> CorpusRegistry::Create(
    const CorpusConfig& config) {
  MAXSIMD_ASSIGN_OR_RETURN(std::shared_ptr<Corpus> corpus,
                           Corpus::Create(config, limits_, backend_));
  absl::MutexLock lock(&mu_);
  if (!corpora_.emplace(config.name, corpus).second) {
    return absl::AlreadyExistsError(
        absl::StrCat("name: corpus \"", config.name, "\" already exists"));
  }
  return corpus;
}

absl::StatusOr<std::shared_ptr<Corpus>> CorpusRegistry::Get(
    const std::string& name) const {
  absl::MutexLock lock(&mu_);
  auto it = corpora_.find(name);
  if (it == corpora_.end()) {
    return absl::NotFoundError(
        absl::StrCat("corpus: \"", name.substr(0, 160), "\" does not exist"));
  }
  return it->second;
}

absl::Status CorpusRegistry::Drop(const std::string& name) {
  std::shared_ptr<Corpus> dropped;  // freed outside the lock
  absl::MutexLock lock(&mu_);
  auto it = corpora_.find(name);
  if (it == corpora_.end()) {
    return absl::NotFoundError(absl::StrCat(
        "name: corpus \"", name.substr(0, 160), "\" does not exist"));
  }
  dropped = std::move(it->second);
  corpora_.erase(it);
  return absl::OkStatus();
}

std::vector<std::shared_ptr<Corpus>> CorpusRegistry::List() const {
  absl::MutexLock lock(&mu_);
  std::vector<std::shared_ptr<Corpus>> out;
  for (const auto& [name, corpus] : corpora_) out.push_back(corpus);
  return out;
}

}  // namespace maxsimd
