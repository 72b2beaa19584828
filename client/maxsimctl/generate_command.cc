#include "client/maxsimctl/generate_command.h"

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/maxsimctl/output.h"
#include "index/npy.h"
#include "index/synthetic.h"
#include "kernels/base/status_macros.h"

namespace maxsimd::ctl {
namespace {

// generate's flags, checked.
struct GenerateOptions {
  SyntheticCorpusOptions corpus;
  int64_t num_queries = 0;
  int64_t query_tokens = 0;
};

// The flags into GenerateOptions; the first usage error (a value out of
// range, min over max tokens, a corpus past 4e9 values) otherwise.
absl::StatusOr<GenerateOptions> GenerateOptionsOf(const Flags& f) {
  GenerateOptions out;
  SyntheticCorpusOptions& options = out.corpus;
  absl::Status status;
  auto get = [&](const char* name, int64_t min, int64_t max) -> int64_t {
    absl::StatusOr<int64_t> v = ParseInt(f, name, min, max);
    if (!v.ok()) {
      if (status.ok()) status = v.status();
      return min;
    }
    return *v;
  };
  options.num_docs = get("docs", 1, 100000000);
  options.dim = static_cast<int32_t>(get("dim", 1, 65536));
  options.min_tokens = static_cast<int32_t>(get("min-tokens", 1, 1 << 20));
  options.max_tokens = static_cast<int32_t>(get("max-tokens", 1, 1 << 20));
  options.num_clusters = static_cast<int32_t>(get("clusters", 1, 1 << 20));
  out.num_queries = get("queries", 0, 100000);
  out.query_tokens = get("query-tokens", 1, 1 << 16);
  options.seed = static_cast<uint64_t>(
      get("seed", 0, std::numeric_limits<int64_t>::max()));
  if (status.ok() && options.min_tokens > options.max_tokens) {
    status = UsageError(absl::StrCat("--min-tokens (", options.min_tokens,
                                     ") exceeds --max-tokens (",
                                     options.max_tokens, ")"));
  }
  const double expected_values =
      static_cast<double>(options.num_docs) * options.max_tokens * options.dim;
  if (status.ok() && expected_values > 4e9) {
    status = UsageError(
        "--docs * --max-tokens * --dim exceeds 4e9 values (16 GB of fp32)");
  }
  if (!status.ok()) return status;
  return out;
}

// The whole of `text`, written to `path` (replacing it).
absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

// Uniform in [0, n) from the raw engine, which is the same on every
// platform (std::uniform_int_distribution is not).
uint64_t Below(std::mt19937_64& rng, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * n) >>
                               64);
}

// Writes the corpus's tokens.npy, cu_seqlens.npy and ids.txt under `dir`.
absl::Status WriteCorpus(const std::string& dir,
                         const SyntheticCorpus& corpus) {
  const int64_t num_tokens = corpus.cu_seqlens.back();
  const int64_t num_docs = static_cast<int64_t>(corpus.ids.size());
  MAXSIMD_RETURN_IF_ERROR(
      WriteNpy(dir + "/tokens.npy",
               MakeNpyFloat16(corpus.tokens, {num_tokens, corpus.dim})));
  MAXSIMD_RETURN_IF_ERROR(
      WriteNpy(dir + "/cu_seqlens.npy",
               MakeNpyInt64(corpus.cu_seqlens, {num_docs + 1})));
  std::string ids;
  for (const std::string& id : corpus.ids) absl::StrAppend(&ids, id, "\n");
  return WriteText(dir + "/ids.txt", ids);
}

// Writes query_<i>.npy, query_<i>.source and candidates_<i>.txt under
// `dir` for each query; returns the ids of the queries' source documents.
absl::StatusOr<std::vector<std::string>> WriteQueries(
    const std::string& dir, const SyntheticCorpus& corpus,
    const GenerateOptions& options) {
  const int64_t num_docs = static_cast<int64_t>(corpus.ids.size());
  const uint64_t seed = options.corpus.seed;
  // Sources and candidates come from their own stream so that changing
  // --queries does not change the corpus.
  std::mt19937_64 rng(seed ^ 0x5eed0f0123456789ull);
  std::vector<std::string> written;
  for (int64_t i = 0; i < options.num_queries; ++i) {
    const int64_t source = static_cast<int64_t>(Below(rng, num_docs));
    const std::vector<float> query = GenerateQueryForDocument(
        corpus, source, static_cast<int32_t>(options.query_tokens),
        options.corpus.noise, seed + 1000003 * static_cast<uint64_t>(i + 1));
    const std::string stem = absl::StrCat(dir, "/query_", i);
    MAXSIMD_RETURN_IF_ERROR(
        WriteNpy(stem + ".npy",
                 MakeNpyFloat32(query, {options.query_tokens, corpus.dim})));
    MAXSIMD_RETURN_IF_ERROR(
        WriteText(stem + ".source", corpus.ids[source] + "\n"));
    // 100 distinct candidates (all documents when there are fewer), the
    // source among them at a random position.
    const int64_t want = std::min<int64_t>(100, num_docs);
    std::set<int64_t> picked = {source};
    while (static_cast<int64_t>(picked.size()) < want) {
      picked.insert(static_cast<int64_t>(Below(rng, num_docs)));
    }
    std::vector<int64_t> order(picked.begin(), picked.end());
    for (size_t k = order.size(); k > 1; --k) {
      std::swap(order[k - 1], order[Below(rng, k)]);
    }
    std::string lines;
    for (int64_t d : order) absl::StrAppend(&lines, corpus.ids[d], "\n");
    MAXSIMD_RETURN_IF_ERROR(
        WriteText(absl::StrCat(dir, "/candidates_", i, ".txt"), lines));
    written.push_back(corpus.ids[source]);
  }
  return written;
}

void PrintGenerated(const Globals& g, const std::string& dir,
                    const SyntheticCorpus& corpus,
                    const GenerateOptions& options,
                    const std::vector<std::string>& written) {
  const long long num_tokens = corpus.cu_seqlens.back();
  const long long num_docs = static_cast<long long>(corpus.ids.size());
  if (g.json) {
    std::string sources;
    for (size_t i = 0; i < written.size(); ++i) {
      absl::StrAppend(&sources, i > 0 ? "," : "", JsonString(written[i]));
    }
    std::printf(
        "{\"out\":%s,\"documents\":%lld,\"tokens\":%lld,\"dim\":%d,"
        "\"queries\":%lld,\"query_sources\":[%s]}\n",
        JsonString(dir).c_str(), num_docs, num_tokens, corpus.dim,
        static_cast<long long>(options.num_queries), sources.c_str());
    return;
  }
  std::printf(
      "wrote %s/tokens.npy (float16 [%lld, %d]), cu_seqlens.npy, ids.txt: "
      "%lld documents\n",
      dir.c_str(), num_tokens, corpus.dim, num_docs);
  for (size_t i = 0; i < written.size(); ++i) {
    std::printf(
        "wrote %s/query_%zu.npy (float32 [%lld, %d]) from document %s, "
        "candidates_%zu.txt\n",
        dir.c_str(), i, static_cast<long long>(options.query_tokens),
        corpus.dim, written[i].c_str(), i);
  }
}

}  // namespace

int RunGenerate(const Globals& g, const Flags& f) {
  absl::StatusOr<GenerateOptions> options = GenerateOptionsOf(f);
  if (!options.ok()) return PrintError(options.status(), kExitUsage);
  const std::string dir = f.Get("out");
  return Finish([&]() -> absl::Status {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create '", dir, "': ", ec.message()));
    }
    const SyntheticCorpus corpus = GenerateSyntheticCorpus(options->corpus);
    MAXSIMD_RETURN_IF_ERROR(WriteCorpus(dir, corpus));
    MAXSIMD_ASSIGN_OR_RETURN(std::vector<std::string> written,
                             WriteQueries(dir, corpus, *options));
    PrintGenerated(g, dir, corpus, *options, written);
    return absl::OkStatus();
  }());
}

}  // namespace maxsimd::ctl
