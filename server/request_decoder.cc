#include "server/request_decoder.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "index/plaid_search.h"
#include "kernels/base/status_macros.h"
#include "kernels/element.h"

namespace maxsimd {
namespace {

constexpr float kMaxFloat16 = 65504.f;

std::string Field(absl::string_view prefix, absl::string_view name) {
  return prefix.empty() ? std::string(name) : absl::StrCat(prefix, ".", name);
}

// A set of resolved documents, sized for `n` of them: open addressing over
// (segment, row) packed in 64 bits, at most half full. A request's
// candidates all fit in the cache, so a multiplicative hash and a linear
// probe beat a general-purpose set here.
class DocRefSet {
 public:
  explicit DocRefSet(size_t n) {
    int bits = 4;
    while ((size_t{1} << bits) < 2 * n) ++bits;
    shift_ = 64 - bits;
    slots_.assign(size_t{1} << bits, kEmpty);
  }
  // False when `ref` was inserted before. Rows lie below 2^32
  // (IdIndex::kMaxRows) and segments are not negative.
  bool Insert(const DocRef& ref) {
    const uint64_t key = (static_cast<uint64_t>(ref.segment) << 32) |
                         static_cast<uint64_t>(ref.doc);
    const size_t mask = slots_.size() - 1;
    for (size_t i = (key * 0x9E3779B97F4A7C15ull) >> shift_;;
         i = (i + 1) & mask) {
      if (slots_[i] == key) return false;
      if (slots_[i] == kEmpty) {
        slots_[i] = key;
        return true;
      }
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~uint64_t{0};
  std::vector<uint64_t> slots_;
  int shift_ = 0;
};

}  // namespace

absl::StatusOr<DType> DecodeDType(maxsimd::v1::DType dtype,
                                  absl::string_view field) {
  switch (dtype) {
    case v1::DTYPE_FLOAT32:
      return DType::kFloat32;
    case v1::DTYPE_FLOAT16:
      return DType::kFloat16;
    case v1::DTYPE_BFLOAT16:
      return DType::kBFloat16;
    case v1::DTYPE_INT8:
    case v1::DTYPE_PLAID:
      return absl::InvalidArgumentError(
          absl::StrCat(field, " is ", v1::DType_Name(dtype),
                       ", a storage dtype only; tensors must be DTYPE_FLOAT32, "
                       "DTYPE_FLOAT16 or DTYPE_BFLOAT16"));
    default:
      return absl::InvalidArgumentError(absl::StrCat(
          field, " is ", static_cast<int>(dtype),
          "; must be DTYPE_FLOAT32, DTYPE_FLOAT16 or DTYPE_BFLOAT16"));
  }
}

absl::StatusOr<TensorView> DecodeTensor(const maxsimd::v1::Tensor& tensor,
                                        int32_t dim, int64_t min_rows,
                                        int64_t max_rows,
                                        absl::string_view field) {
  TensorView view;
  MAXSIMD_ASSIGN_OR_RETURN(view.dtype,
                           DecodeDType(tensor.dtype(), Field(field, "dtype")));
  if (tensor.shape_size() != 2) {
    return absl::InvalidArgumentError(
        absl::StrCat(Field(field, "shape"), " has ", tensor.shape_size(),
                     " dimensions; must be [tokens, dim]"));
  }
  const int64_t rows = tensor.shape(0);
  if (tensor.shape(1) != dim) {
    return absl::InvalidArgumentError(
        absl::StrCat(Field(field, "shape"), "[1] is ", tensor.shape(1),
                     "; the corpus has dim ", dim));
  }
  if (rows < min_rows || rows > max_rows) {
    return absl::InvalidArgumentError(
        absl::StrCat(Field(field, "shape"), "[0] is ", rows, "; must be in [",
                     min_rows, ", ", max_rows, "]"));
  }
  // rows <= max_rows and dim <= max_dim keep this product far from overflow.
  const uint64_t want = static_cast<uint64_t>(rows) *
                        static_cast<uint64_t>(dim) * DTypeSize(view.dtype);
  if (tensor.data().size() != want) {
    return absl::InvalidArgumentError(absl::StrCat(
        Field(field, "data"), " has ", tensor.data().size(), " bytes; shape [",
        rows, ", ", dim, "] of ", DTypeName(view.dtype), " needs ", want));
  }
  view.rows = rows;
  view.data = tensor.data().data();
  return view;
}

namespace {

// A PLAID corpus's request without candidates: validates its `plaid` field
// and records the candidate generation it asks for in out->plaid_search,
// for the executor that runs its batch (server/scheduler.h), unless it asks
// for an exhaustive scan.
absl::Status ResolvePlaidSearch(const v1::RerankRequest& req,
                                const CorpusSnapshot& snapshot,
                                const RequestLimits& limits,
                                absl::string_view field, DecodedQuery* out) {
  const CorpusConfig& config = snapshot.config();
  const bool plaid = config.layout == Layout::kPlaid;
  if (!req.has_plaid() && !(plaid && out->scan)) return absl::OkStatus();
  if (!plaid) {
    return absl::InvalidArgumentError(
        absl::StrCat(Field(field, "plaid"), " is set; corpus \"", config.name,
                     "\" is not a LAYOUT_PLAID corpus"));
  }
  if (!out->scan) {
    return absl::InvalidArgumentError(
        absl::StrCat(Field(field, "plaid"),
                     " is set with candidate_ids; it applies only to a "
                     "request without them"));
  }
  const v1::PlaidSearch& ps = req.plaid();
  if (ps.exhaustive()) return absl::OkStatus();
  PlaidSearchParams params = DefaultPlaidSearchParams(out->top_k);
  if (ps.n_ivf_probe() < 0 || ps.n_ivf_probe() > kMaxIvfProbe) {
    return absl::InvalidArgumentError(absl::StrCat(
        Field(field, "plaid.n_ivf_probe"), " is ", ps.n_ivf_probe(),
        "; must be in [1, ", kMaxIvfProbe, "] (0: the default)"));
  }
  const int32_t max_full = std::min(kMaxFullScores, limits.max_candidates);
  if (ps.n_full_scores() < 0 || ps.n_full_scores() > max_full) {
    return absl::InvalidArgumentError(
        absl::StrCat(Field(field, "plaid.n_full_scores"), " is ",
                     ps.n_full_scores(), "; must be in [1, ", max_full,
                     "] (0: the default; --max_candidates bounds it)"));
  }
  if (ps.n_ivf_probe() > 0) params.n_ivf_probe = ps.n_ivf_probe();
  if (ps.n_full_scores() > 0) params.n_full_scores = ps.n_full_scores();
  // Never fewer than top_k, a given value included: ranking fewer exactly
  // would return fewer than top_k results.
  params.n_full_scores =
      std::min(std::max(params.n_full_scores, out->top_k), max_full);
  out->plaid_search = params;
  out->scan = false;
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<DecodedQuery> DecodeQuery(const maxsimd::v1::RerankRequest& req,
                                         const CorpusSnapshot& snapshot,
                                         const RequestLimits& limits,
                                         absl::string_view field) {
  const CorpusConfig& config = snapshot.config();
  DecodedQuery out;
  MAXSIMD_ASSIGN_OR_RETURN(
      TensorView view,
      DecodeTensor(req.query(), config.dim, 1, limits.max_query_tokens,
                   Field(field, "query")));
  out.num_tokens = view.rows;
  // An int8 corpus that does not quantise queries scores them rounded to
  // float16 (kernels/backend.h), so they must be within its range.
  const bool fp16_queries =
      config.layout == Layout::kInt8 && !config.quantize_queries;
  out.tokens.resize(static_cast<size_t>(view.rows) * config.dim);
  ConvertToFloat(view.data, view.dtype, 0, view.rows * config.dim,
                 out.tokens.data());
  for (int64_t r = 0; r < view.rows; ++r) {
    float* row = out.tokens.data() + r * config.dim;
    double norm2 = 0.0;
    for (int32_t j = 0; j < config.dim; ++j) {
      if (!std::isfinite(row[j])) {
        return absl::InvalidArgumentError(
            absl::StrCat(Field(field, "query.data"), " row ", r, " column ", j,
                         " is ", row[j], "; values must be finite"));
      }
      norm2 += static_cast<double>(row[j]) * row[j];
    }
    if (config.normalize && norm2 > 0.0) {
      ScaleToUnitNorm(row, config.dim, norm2);
    }
    for (int32_t j = 0; fp16_queries && j < config.dim; ++j) {
      if (std::fabs(row[j]) > kMaxFloat16) {
        return absl::InvalidArgumentError(absl::StrCat(
            Field(field, "query.data"), " row ", r, " column ", j, " is ",
            row[j], ", outside the float16 range (|x| <= ", kMaxFloat16,
            ") that queries of int8 corpus \"", config.name,
            "\" are rounded to"));
      }
    }
  }

  out.top_k = req.top_k() == 0 ? kDefaultTopK : req.top_k();
  if (out.top_k < 1 || out.top_k > limits.max_top_k) {
    return absl::InvalidArgumentError(absl::StrCat(
        Field(field, "top_k"), " is ", req.top_k(), "; must be in [1, ",
        limits.max_top_k, "] (0 means ", kDefaultTopK, ")"));
  }
  out.priority = req.priority();
  if (out.priority < -kMaxPriority || out.priority > kMaxPriority) {
    return absl::InvalidArgumentError(
        absl::StrCat(Field(field, "priority"), " is ", req.priority(),
                     "; must be in [", -kMaxPriority, ", ", kMaxPriority, "]"));
  }

  out.scan = req.candidate_ids_size() == 0;
  if (req.candidate_ids_size() > limits.max_candidates) {
    return absl::InvalidArgumentError(absl::StrCat(
        Field(field, "candidate_ids"), " has ", req.candidate_ids_size(),
        " ids; the limit is ", limits.max_candidates));
  }
  const int n = req.candidate_ids_size();
  std::vector<absl::string_view> ids(req.candidate_ids().begin(),
                                     req.candidate_ids().end());
  std::vector<DocRef> refs(n);
  if (snapshot.FindMany(ids, refs.data()) != n) {
    const int i = static_cast<int>(
        std::find_if(refs.begin(), refs.end(),
                     [](const DocRef& r) { return r.segment < 0; }) -
        refs.begin());
    return absl::NotFoundError(absl::StrCat(
        Field(field, "candidate_ids"), "[", i, "]: \"", ids[i].substr(0, 256),
        "\" is not a document of corpus \"", config.name, "\""));
  }
  // Repeated ids count once.
  DocRefSet seen(refs.size());
  out.candidates.reserve(refs.size());
  for (const DocRef& ref : refs) {
    if (seen.Insert(ref)) out.candidates.push_back(ref);
  }
  MAXSIMD_RETURN_IF_ERROR(
      ResolvePlaidSearch(req, snapshot, limits, field, &out));
  return out;
}

}  // namespace maxsimd
