// Validation and decoding of query requests: turns a RerankRequest into the
// fp32 query tokens, resolved candidates and top_k that a search batch takes.
// A PLAID corpus's query without candidates is validated here but its
// candidates are not generated: the decoded query records the generation
// it asks for (DecodedQuery::plaid_search), which an executor runs for its
// whole batch (server/scheduler.h), so decoding stays cheap enough for a
// handler thread that never blocks.
//
// Every error is a Status whose message starts with the field path
// (e.g. "queries[2].query.shape") and states the limit it broke. Nothing
// here touches the queue or any shared state, so a bad request is rejected
// before anything is enqueued.
// Thread-safety: pure functions over the request and an immutable snapshot.
#ifndef MAXSIMD_SERVER_REQUEST_DECODER_H_
#define MAXSIMD_SERVER_REQUEST_DECODER_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "index/corpus.h"
#include "index/plaid_search.h"
#include "maxsimd/v1/reranker.pb.h"
#include "maxsimd/v1/types.pb.h"

namespace maxsimd {

// Request limits, from the server's flags.
struct RequestLimits {
  int32_t max_query_tokens = 1024;
  int32_t max_candidates = 100000;
  int32_t max_top_k = 4096;  // at most kMaxTopK
  int32_t max_batch_queries = 256;
  // Most requests of one RerankStream read and not yet answered (submitted,
  // or answered but not yet written to the client). At the limit the server
  // reads that stream's next request only once a response is written, so a
  // client that stops reading holds at most this many responses in the
  // server's memory; its further writes wait in the transport.
  int32_t max_stream_in_flight = 1024;
};

inline constexpr int32_t kDefaultTopK = 10;

// A query ready for a search batch.
// Scheduling priorities a request may ask for lie in [-kMaxPriority,
// kMaxPriority].
inline constexpr int32_t kMaxPriority = 100;

struct DecodedQuery {
  std::vector<float> tokens;  // [num_tokens, dim] fp32, normalised if asked
  int64_t num_tokens = 0;
  bool scan = true;                // false: rerank `candidates`
  std::vector<DocRef> candidates;  // de-duplicated, first occurrence kept
  // Set for a PLAID corpus's query without candidate_ids (and not
  // plaid.exhaustive): a rerank (scan false) whose `candidates`, empty
  // until then, PLAID candidate generation finds with these parameters
  // (n_full_scores already in [top_k, min(kMaxFullScores,
  // max_candidates)]) when its batch runs.
  std::optional<PlaidSearchParams> plaid_search;
  int32_t top_k = kDefaultTopK;
  int32_t priority = 0;  // in [-kMaxPriority, kMaxPriority]
};

// A tensor's element type and rows after shape and length checks; `data`
// points into the message.
struct TensorView {
  DType dtype = DType::kFloat32;
  int64_t rows = 0;
  const void* data = nullptr;
};

// Maps the wire dtype of a tensor; INVALID_ARGUMENT naming `field` for an
// unknown one and for DTYPE_INT8 (a storage dtype, never a tensor's).
absl::StatusOr<DType> DecodeDType(maxsimd::v1::DType dtype,
                                  absl::string_view field);

// Checks that `tensor` is [rows, dim] with rows in [min_rows, max_rows] and
// exactly rows * dim * size(dtype) bytes.
absl::StatusOr<TensorView> DecodeTensor(const maxsimd::v1::Tensor& tensor,
                                        int32_t dim, int64_t min_rows,
                                        int64_t max_rows,
                                        absl::string_view field);

// Validates and decodes one request against the corpus snapshot it will run
// on. `field` prefixes error messages ("" for a top-level request). Cheap:
// never searches the corpus beyond looking candidate ids up.
// Errors: INVALID_ARGUMENT (shape, dtype, length, values, limits; for an
// int8 corpus that rounds queries to float16, values past its range; the
// `plaid` field on a corpus that is not LAYOUT_PLAID, with candidate_ids, or
// out of range), NOT_FOUND (a candidate id that is not a live document).
absl::StatusOr<DecodedQuery> DecodeQuery(const maxsimd::v1::RerankRequest& req,
                                         const CorpusSnapshot& snapshot,
                                         const RequestLimits& limits,
                                         absl::string_view field);

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_REQUEST_DECODER_H_
