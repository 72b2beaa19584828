// The base of test doubles that change one behaviour of a real backend:
// every call Backend requires goes to `inner`; the optional ones
// (SupportsDType, StreamsDType, shards, Memory) keep Backend's defaults
// unless a subclass overrides them.
#ifndef MAXSIMD_TESTS_SUPPORT_FORWARDING_BACKEND_H_
#define MAXSIMD_TESTS_SUPPORT_FORWARDING_BACKEND_H_

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "kernels/backend.h"

namespace maxsimd::testing {

class ForwardingBackend : public Backend {
 public:
  explicit ForwardingBackend(std::unique_ptr<Backend> inner)
      : inner_(std::move(inner)) {}

  std::string name() const override { return inner_->name(); }
  std::string description() const override { return inner_->description(); }
  const BackendLimits& limits() const override { return inner_->limits(); }
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Upload(
      const void* host, size_t bytes) override {
    return inner_->Upload(host, bytes);
  }
  absl::StatusOr<std::unique_ptr<ResidentBuffer>> Pin(const void* host,
                                                      size_t bytes) override {
    return inner_->Pin(host, bytes);
  }
  absl::Status Search(const SearchParams& params,
                      absl::Span<std::vector<ScoredDoc>> results,
                      SearchTiming* timing) override {
    return inner_->Search(params, results, timing);
  }
  bool healthy() const override { return inner_->healthy(); }

 protected:
  Backend& inner() { return *inner_; }

 private:
  std::unique_ptr<Backend> inner_;
};

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SUPPORT_FORWARDING_BACKEND_H_
