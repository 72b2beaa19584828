// rerank_example: one Rerank call with the C++ client library alone, a
// starting point to copy into a program of your own. It links maxsimd_client
// and nothing else of maxsimd, so it builds without the CUDA toolkit (the
// client library needs only gRPC, protobuf and Abseil).
//
//   rerank_example TARGET CORPUS QUERY.f32 DIM TOP_K [ID ...]
//
// QUERY.f32 holds the query's token embeddings as raw little-endian float32,
// [Lq, DIM] row-major, as numpy writes them with
// `q.astype('<f4').tofile('query.f32')`. With candidate ids the server
// reranks those documents; without, it scans the whole corpus. The ranked
// ids and their MaxSim scores go to stdout.
//
// Exit status: 0 ranked; 1 the file or the call failed; 2 a usage error.

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iterator>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "client/client.h"

namespace {

constexpr char kUsage[] =
    "Usage: rerank_example TARGET CORPUS QUERY.f32 DIM TOP_K [ID ...]\n"
    "\n"
    "Sends one Rerank to the maxsimd server at TARGET and prints the ranked\n"
    "ids with their MaxSim scores.\n"
    "\n"
    "  TARGET     the server's gRPC address, host:port (e.g. 127.0.0.1:50051)\n"
    "  CORPUS     the corpus (or alias) to rank\n"
    "  QUERY.f32  the query's token embeddings: raw little-endian float32,\n"
    "             [Lq, DIM] row-major (numpy: "
    "q.astype('<f4').tofile('query.f32'))\n"
    "  DIM        the embedding dimension, the corpus's\n"
    "  TOP_K      how many results to return (1 to 4096)\n"
    "  ID ...     candidate document ids to rerank; none: scan the whole "
    "corpus\n"
    "\n"
    "Exit status: 0 ranked; 1 the file or the call failed; 2 usage error.\n";

// `text` as an integer in [min, max]; false otherwise.
bool ParseInt(const char* text, long min, long max, long* value) {
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || end == text || *end != '\0' || v < min || v > max) {
    return false;
  }
  *value = v;
  return true;
}

// The float32 values of `path`: whole rows of `dim` values, at least one.
absl::StatusOr<std::vector<float>> ReadQuery(const std::string& path,
                                             int32_t dim) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError("cannot open '" + path + "'");
  const std::string bytes((std::istreambuf_iterator<char>(in)),
                          std::istreambuf_iterator<char>());
  if (in.bad()) return absl::DataLossError("cannot read '" + path + "'");
  const size_t row_bytes = sizeof(float) * static_cast<size_t>(dim);
  if (bytes.empty() || bytes.size() % row_bytes != 0) {
    return absl::InvalidArgumentError(
        "'" + path + "' holds " + std::to_string(bytes.size()) +
        " bytes; expected whole rows of " + std::to_string(dim) +
        " float32 values (" + std::to_string(row_bytes) + " bytes each)");
  }
  std::vector<float> values(bytes.size() / sizeof(float));
  std::memcpy(values.data(), bytes.data(), bytes.size());  // little-endian
  return values;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc >= 2 && (std::strcmp(argv[1], "--help") == 0 ||
                    std::strcmp(argv[1], "-h") == 0)) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  long dim = 0, top_k = 0;
  if (argc < 6 || !ParseInt(argv[4], 1, 1 << 20, &dim) ||
      !ParseInt(argv[5], 1, 4096, &top_k)) {
    std::fputs(kUsage, stderr);
    return 2;
  }

  maxsimd::ClientOptions options;
  options.target = argv[1];
  options.timeout = absl::Seconds(10);  // the deadline of the call
  // The server's other options (TLS, a bearer token, round_robin over
  // replicas) are fields of ClientOptions too: see client/client.h.
  absl::StatusOr<std::unique_ptr<maxsimd::Client>> client =
      maxsimd::Client::Create(options);
  if (!client.ok()) {
    std::fprintf(stderr, "rerank_example: %s\n",
                 client.status().ToString().c_str());
    return 1;
  }

  maxsimd::Query query;
  query.corpus = argv[2];
  query.dim = static_cast<int32_t>(dim);
  query.top_k = static_cast<int32_t>(top_k);
  absl::StatusOr<std::vector<float>> tokens = ReadQuery(argv[3], query.dim);
  if (!tokens.ok()) {
    std::fprintf(stderr, "rerank_example: %s\n",
                 tokens.status().ToString().c_str());
    return 1;
  }
  query.tokens = *std::move(tokens);
  query.candidate_ids.assign(argv + 6, argv + argc);

  absl::StatusOr<maxsimd::v1::RerankResponse> response =
      (*client)->Rerank(query);
  if (!response.ok()) {
    // The server's status code and message: NOT_FOUND for an unknown
    // corpus or id, INVALID_ARGUMENT for a query of another dimension, ...
    std::fprintf(stderr, "rerank_example: %s\n",
                 response.status().ToString().c_str());
    return 1;
  }
  for (int i = 0; i < response->results_size(); ++i) {
    const maxsimd::v1::ScoredDocument& result = response->results(i);
    std::printf("%d\t%s\t%.5f\n", i + 1, result.id().c_str(), result.score());
  }
  std::fprintf(stderr, "%d results in %.3f ms on the server\n",
               response->results_size(),
               static_cast<double>(response->timing().total_ns()) / 1e6);
  return 0;
}
