#include "client/maxsimctl/query_command.h"

#include <cstdint>
#include <cstdio>
#include <limits>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/notification.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "client/maxsimctl/ids.h"
#include "client/maxsimctl/output.h"
#include "index/importers.h"
#include "index/npy.h"
#include "index/safetensors.h"
#include "kernels/base/status_macros.h"
#include "kernels/element.h"
#include "kernels/types.h"

namespace maxsimd::ctl {
namespace {

// A query file's array as the file stores it: product(shape) elements of
// `dtype`, little-endian, row-major, in `data`.
struct QueryArray {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string data;
};

constexpr absl::string_view kFlagHint(
    "; for bfloat16 bits in a uint16 array give --query-dtype=bfloat16");

// The array of a .npy file's `bytes`, in its own dtype (NpyFloatDType).
absl::StatusOr<QueryArray> NpyQuery(const std::string& bytes,
                                    const std::string& path,
                                    const std::string& tensor,
                                    bool bfloat16_flag, std::string* found) {
  if (!tensor.empty()) {
    return UsageError(absl::StrCat("--query-tensor is for safetensors files; '",
                                   path, "' is .npy"));
  }
  MAXSIMD_ASSIGN_OR_RETURN(NpyArray array, ParseNpy(bytes, path));
  absl::StatusOr<DType> dtype = NpyFloatDType(array, path, bfloat16_flag);
  if (!dtype.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(
        dtype.status().message(), array.descr == "<u2" ? kFlagHint : ""));
  }
  QueryArray out;
  out.dtype = *dtype;
  out.shape = std::move(array.shape);
  out.data.assign(array.data.begin(), array.data.end());
  *found = absl::StrCat("'", array.descr, "'");
  return out;
}

// The tensor `tensor` names of a safetensors file's `bytes`, in its own
// dtype (FloatTensorFromSafetensors).
absl::StatusOr<QueryArray> SafetensorsQuery(const std::string& bytes,
                                            const std::string& path,
                                            const std::string& tensor,
                                            bool bfloat16_flag,
                                            std::string* found) {
  absl::StatusOr<SafetensorsFile> file = ParseSafetensors(bytes, path);
  if (!file.ok()) {
    return absl::Status(
        file.status().code(),
        absl::StrCat("--query: '", path,
                     "' is not .npy (no \\x93NUMPY magic), and not "
                     "safetensors: ",
                     file.status().message()));
  }
  // U16 is taken here to say what the flag would do; refused below
  // without it.
  MAXSIMD_ASSIGN_OR_RETURN(
      SafetensorsFloatTensor t,
      FloatTensorFromSafetensors(*file, tensor, path,
                                 /*uint16_is_bfloat16=*/true));
  if (t.tensor->dtype == "U16" && !bfloat16_flag) {
    return absl::InvalidArgumentError(
        absl::StrCat("safetensors file ", path, ": tensor \"", t.name,
                     "\" has dtype U16; expected F32, F16 or BF16", kFlagHint));
  }
  QueryArray out;
  out.dtype = t.dtype;
  out.shape = t.tensor->shape;
  out.data = t.tensor->data;
  *found = t.tensor->dtype;
  return out;
}

// --query: a .npy file (told by its magic, whatever its name) or else a
// safetensors file (the tensor --query-tensor names, index/safetensors.h's
// FloatTensorFromSafetensors), read in its own dtype: float32, float16 or
// bfloat16 (NpyFloatDType: ml_dtypes' '<V2' or '|V2'; with
// `bfloat16_flag`, --query-dtype=bfloat16, also 16-bit unsigned integers as
// bfloat16 bits, and then nothing but bfloat16). [Lq, dim] or
// [Nq, Lq, dim]. INVALID_ARGUMENT naming the file otherwise.
absl::StatusOr<QueryArray> ReadQueryFile(const std::string& path,
                                         const std::string& tensor,
                                         bool bfloat16_flag) {
  absl::StatusOr<std::string> bytes = ReadInputFile(path);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("--query: ", bytes.status().message()));
  }
  constexpr absl::string_view kNpyMagic("\x93NUMPY", 6);
  std::string found;  // the file's own name of its dtype, for messages
  MAXSIMD_ASSIGN_OR_RETURN(
      QueryArray out,
      absl::StartsWith(*bytes, kNpyMagic)
          ? NpyQuery(*bytes, path, tensor, bfloat16_flag, &found)
          : SafetensorsQuery(*bytes, path, tensor, bfloat16_flag, &found));
  if (bfloat16_flag && out.dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--query-dtype=bfloat16, but '", path, "' holds ",
                     DTypeName(out.dtype), " (", found, ")"));
  }
  if (out.shape.size() != 2 && out.shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' must be [Lq, dim] or [Nq, Lq, dim], got ",
                     out.shape.size(), " dimensions"));
  }
  const int64_t dim = out.shape.back();
  if (dim < 1 || dim > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' has dim ", dim));
  }
  return out;
}

v1::DType WireDType(DType t) {
  switch (t) {
    case DType::kFloat16:
      return v1::DTYPE_FLOAT16;
    case DType::kBFloat16:
      return v1::DTYPE_BFLOAT16;
    default:
      return v1::DTYPE_FLOAT32;
  }
}

// Rerank of a request built here: through the request form of RerankAsync,
// since a Query holds fp32 values and this request's tensor is in its
// file's dtype.
absl::StatusOr<v1::RerankResponse> SendRerank(Client& client,
                                              v1::RerankRequest request,
                                              absl::Duration timeout) {
  absl::Notification done;
  absl::StatusOr<v1::RerankResponse> result;
  client.RerankAsync(std::move(request), absl::Now() + timeout,
                     [&](absl::StatusOr<v1::RerankResponse> response) {
                       result = std::move(response);
                       done.Notify();
                     });
  done.WaitForNotification();
  return result;
}

// The responses to the queries of `array` ([Lq, dim] or [Nq, Lq, dim]);
// `query` holds everything but the tokens.
absl::StatusOr<std::vector<v1::RerankResponse>> SendQueries(const Globals& g,
                                                            const Query& query,
                                                            QueryArray array) {
  std::vector<v1::RerankResponse> responses;
  if (array.shape.size() == 2) {
    // One query goes as the file holds it: its bytes, its dtype.
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    v1::RerankRequest request = client->ToRequest(query);
    v1::Tensor* tensor = request.mutable_query();
    tensor->set_dtype(WireDType(array.dtype));
    tensor->clear_shape();
    for (int64_t d : array.shape) tensor->add_shape(d);
    tensor->set_data(std::move(array.data));
    MAXSIMD_ASSIGN_OR_RETURN(
        v1::RerankResponse r,
        SendRerank(*client, std::move(request), g.options.timeout));
    responses.push_back(std::move(r));
    return responses;
  }
  // A batch goes in one RerankBatch call, built from Queries, which carry
  // fp32 values: float16 is sent as float16 (exact), and bfloat16 as
  // float32, exact too (a bfloat16 is the top half of a binary32), so the
  // server ranks the same values, for twice the bytes.
  const int64_t num_queries = array.shape[0];
  const int64_t per_query = array.shape[1] * array.shape.back();
  std::vector<float> values(static_cast<size_t>(num_queries * per_query));
  ConvertToFloat(array.data.data(), array.dtype, 0,
                 static_cast<int64_t>(values.size()), values.data());
  std::vector<Query> queries(static_cast<size_t>(num_queries), query);
  for (int64_t i = 0; i < num_queries; ++i) {
    queries[i].tokens.assign(values.begin() + i * per_query,
                             values.begin() + (i + 1) * per_query);
    queries[i].request_id = num_queries > 1 ? absl::StrCat("q", i) : "";
  }
  MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                           Connect(g, array.dtype == DType::kFloat16));
  return client->RerankBatch(queries);
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

std::string ResponseJson(const v1::RerankResponse& r) {
  std::string out = absl::StrCat("{\"request_id\":", JsonString(r.request_id()),
                                 ",\"results\":[");
  for (int i = 0; i < r.results_size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, "{\"rank\":", i + 1,
                    ",\"id\":", JsonString(r.results(i).id()),
                    ",\"score\":", JsonNumber(r.results(i).score()), "}");
  }
  const v1::Timing& t = r.timing();
  absl::StrAppend(&out,
                  "],\"timing\":{\"queue_ms\":", JsonNumber(Ms(t.queue_ns())),
                  ",\"compute_ms\":", JsonNumber(Ms(t.compute_ns())),
                  ",\"total_ms\":", JsonNumber(Ms(t.total_ns())),
                  ",\"h2d_ms\":", JsonNumber(Ms(t.h2d_ns())),
                  ",\"kernel_ms\":", JsonNumber(Ms(t.kernel_ns())),
                  ",\"topk_ms\":", JsonNumber(Ms(t.topk_ns())),
                  ",\"batch_queries\":", t.batch_queries(), "}}");
  return out;
}

void PrintResponseText(const v1::RerankResponse& r) {
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < r.results_size(); ++i) {
    rows.push_back({absl::StrCat(i + 1), r.results(i).id(),
                    absl::StrFormat("%.5f", r.results(i).score())});
  }
  PrintTable({"rank", "id", "score"}, rows, {true, false, true});
  const v1::Timing& t = r.timing();
  std::printf(
      "timing: queue %.3f ms, compute %.3f ms, total %.3f ms "
      "(batch of %d quer%s)\n",
      Ms(t.queue_ns()), Ms(t.compute_ns()), Ms(t.total_ns()), t.batch_queries(),
      t.batch_queries() == 1 ? "y" : "ies");
}

// Prints `responses` to the queries of an array of `shape` ([Lq, dim]: one
// response; [Nq, Lq, dim]: one each), as JSON or as text tables.
void PrintResponses(const Globals& g, const Query& query, DType dtype,
                    const std::vector<int64_t>& shape,
                    const std::vector<v1::RerankResponse>& responses) {
  if (g.json) {
    if (shape.size() == 2) {
      std::printf("%s\n", ResponseJson(responses[0]).c_str());
      return;
    }
    std::string out = "{\"responses\":[";
    for (size_t i = 0; i < responses.size(); ++i) {
      if (i > 0) out += ",";
      out += ResponseJson(responses[i]);
    }
    std::printf("%s]}\n", out.c_str());
    return;
  }
  const std::string mode =
      query.candidate_ids.empty()
          ? "scan of the whole corpus"
          : absl::StrCat("rerank of ", query.candidate_ids.size(),
                         " candidates");
  for (size_t i = 0; i < responses.size(); ++i) {
    if (shape.size() == 3) {
      std::printf("%squery %zu of %zu (%s)\n", i > 0 ? "\n" : "", i + 1,
                  responses.size(), mode.c_str());
    } else {
      std::printf("query: %s, top %lld (%s [%lld, %lld])\n", mode.c_str(),
                  static_cast<long long>(query.top_k), DTypeName(dtype),
                  static_cast<long long>(shape[0]),
                  static_cast<long long>(shape.back()));
    }
    PrintResponseText(responses[i]);
  }
}

}  // namespace

int RunQuery(const Globals& g, const Flags& f) {
  absl::StatusOr<int64_t> top_k = ParseInt(f, "top-k", 1, kMaxTopK);
  if (!top_k.ok()) return PrintError(top_k.status(), kExitUsage);
  const std::string query_dtype = f.Get("query-dtype");
  if (query_dtype != "auto" && query_dtype != "bfloat16" &&
      query_dtype != "bf16") {
    return PrintError(
        UsageError(
            absl::StrCat("--query-dtype must be auto or bfloat16 (bf16), got '",
                         query_dtype, "'")),
        kExitUsage);
  }
  std::vector<std::string> candidates;
  if (f.Has("candidates")) {
    absl::StatusOr<std::vector<std::string>> listed =
        ParseIdList(f.Get("candidates"), "candidates");
    if (!listed.ok()) return PrintError(listed.status(), kExitUsage);
    candidates = *std::move(listed);
  }
  return Finish([&]() -> absl::Status {
    if (f.Has("candidates-file")) {
      MAXSIMD_ASSIGN_OR_RETURN(
          std::vector<std::string> more,
          ReadIdFile(f.Get("candidates-file"), "candidates-file"));
      if (more.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--candidates-file: '", f.Get("candidates-file"),
                         "' holds no ids; leave it out for a scan"));
      }
      candidates.insert(candidates.end(), more.begin(), more.end());
    }
    MAXSIMD_ASSIGN_OR_RETURN(
        QueryArray array, ReadQueryFile(f.Get("query"), f.Get("query-tensor"),
                                        query_dtype != "auto"));
    Query query;
    query.corpus = f.Get("corpus");
    query.dim = static_cast<int32_t>(array.shape.back());
    query.candidate_ids = std::move(candidates);
    query.top_k = static_cast<int32_t>(*top_k);
    const DType dtype = array.dtype;
    const std::vector<int64_t> shape = array.shape;
    MAXSIMD_ASSIGN_OR_RETURN(std::vector<v1::RerankResponse> responses,
                             SendQueries(g, query, std::move(array)));
    PrintResponses(g, query, dtype, shape, responses);
    return absl::OkStatus();
  }());
}

}  // namespace maxsimd::ctl
