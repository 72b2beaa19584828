#include "index/plaid.h"

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <initializer_list>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "index/npy.h"
#include "index/torch_file.h"
#include "kernels/base/json.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {
namespace {

constexpr int64_t kMaxChunks = 1 << 20;
constexpr int64_t kMaxDim = 1 << 16;

std::string Join(const std::string& dir, absl::string_view file) {
  return absl::StrCat(dir, "/", file);
}

bool IsFile(const std::string& path) {
  std::error_code ec;
  return std::filesystem::is_regular_file(path, ec);
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    absl::StrAppend(&s, i > 0 ? ", " : "", shape[i]);
  }
  return s + ")";
}

// The integer at `path` (e.g. {"config", "nbits"}) of a JSON document;
// DATA_LOSS naming the file when absent, INVALID_ARGUMENT outside
// [min, max].
absl::StatusOr<int64_t> JsonInt(const JsonValue& doc,
                                std::initializer_list<const char*> path,
                                const std::string& file, int64_t min,
                                int64_t max) {
  const JsonValue* v = &doc;
  std::string key;
  for (const char* part : path) {
    absl::StrAppend(&key, key.empty() ? "" : ".", part);
    v = v->Find(part);
    if (v == nullptr) break;
  }
  if (v == nullptr || v->kind != JsonValue::Kind::kNumber || !v->is_integer) {
    return absl::DataLossError(
        absl::StrCat("'", file, "' has no integer '", key, "'"));
  }
  if (v->integer < min || v->integer > max) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", file, "': ", key, " is ", v->integer,
                     "; this importer takes [", min, ", ", max, "]"));
  }
  return v->integer;
}

// A tensor from a .pt file holding exactly one.
absl::StatusOr<TorchTensor> ReadTorchTensor(const std::string& path) {
  MAXSIMD_ASSIGN_OR_RETURN(TorchValue v, ReadTorchFile(path));
  if (v.kind != TorchValue::Kind::kTensor) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' does not hold a single tensor"));
  }
  return std::move(v.tensor);
}

// What one writer's files give for the codec and for one chunk.
struct Chunk {
  std::vector<int64_t> codes;
  std::vector<uint8_t> residuals;  // [codes.size(), row_bytes]
  int64_t rows = 0;
  int64_t row_bytes = 0;
  std::string codes_path, residuals_path;
};

absl::Status CheckFloatMatrix(const std::vector<int64_t>& shape,
                              const std::string& path) {
  if (shape.size() != 2 || shape[0] < 1 || shape[1] < 1 || shape[1] > kMaxDim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", path, "' must be a [num_centroids, dim] matrix with 1 <= dim <= ",
        kMaxDim, ", got shape ", ShapeString(shape)));
  }
  return absl::OkStatus();
}

absl::Status LoadColbertCodec(const std::string& dir, const JsonValue& meta,
                              const std::string& meta_path, PlaidCodec* codec) {
  MAXSIMD_ASSIGN_OR_RETURN(
      int64_t dim, JsonInt(meta, {"config", "dim"}, meta_path, 1, kMaxDim));
  MAXSIMD_ASSIGN_OR_RETURN(int64_t nbits,
                           JsonInt(meta, {"config", "nbits"}, meta_path, 1, 8));
  codec->dim = static_cast<int32_t>(dim);
  codec->nbits = static_cast<int32_t>(nbits);

  const std::string centroids_path = Join(dir, "centroids.pt");
  MAXSIMD_ASSIGN_OR_RETURN(TorchTensor centroids,
                           ReadTorchTensor(centroids_path));
  MAXSIMD_RETURN_IF_ERROR(CheckFloatMatrix(centroids.shape, centroids_path));
  if (centroids.shape[1] != dim) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", centroids_path, "' has dim ", centroids.shape[1],
                     "; '", meta_path, "' says config.dim ", dim));
  }
  codec->num_centroids = centroids.shape[0];
  MAXSIMD_ASSIGN_OR_RETURN(codec->centroids,
                           TorchTensorToFloat32(centroids, centroids_path));

  // buckets.pt: the tuple (bucket_cutoffs [2^nbits - 1], bucket_weights
  // [2^nbits]).
  const std::string buckets_path = Join(dir, "buckets.pt");
  MAXSIMD_ASSIGN_OR_RETURN(TorchValue buckets, ReadTorchFile(buckets_path));
  if ((buckets.kind != TorchValue::Kind::kTuple &&
       buckets.kind != TorchValue::Kind::kList) ||
      buckets.items.size() != 2 ||
      buckets.items[1].kind != TorchValue::Kind::kTensor) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", buckets_path,
                     "' must hold the tuple (bucket_cutoffs, bucket_weights)"));
  }
  const TorchTensor& weights = buckets.items[1].tensor;
  if (weights.shape.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", buckets_path, "': bucket_weights has shape ",
                     ShapeString(weights.shape), "; expected 1-D"));
  }
  MAXSIMD_ASSIGN_OR_RETURN(codec->bucket_weights,
                           TorchTensorToFloat32(weights, buckets_path));
  return absl::OkStatus();
}

absl::Status LoadFastPlaidCodec(const std::string& dir, const JsonValue& meta,
                                const std::string& meta_path,
                                PlaidCodec* codec) {
  MAXSIMD_ASSIGN_OR_RETURN(int64_t nbits,
                           JsonInt(meta, {"nbits"}, meta_path, 1, 8));
  codec->nbits = static_cast<int32_t>(nbits);
  const std::string centroids_path = Join(dir, "centroids.npy");
  MAXSIMD_ASSIGN_OR_RETURN(NpyArray centroids, ReadNpy(centroids_path));
  MAXSIMD_RETURN_IF_ERROR(CheckFloatMatrix(centroids.shape, centroids_path));
  codec->dim = static_cast<int32_t>(centroids.shape[1]);
  codec->num_centroids = centroids.shape[0];
  MAXSIMD_ASSIGN_OR_RETURN(codec->centroids,
                           NpyToFloat32(centroids, centroids_path));
  const std::string weights_path = Join(dir, "bucket_weights.npy");
  MAXSIMD_ASSIGN_OR_RETURN(NpyArray weights, ReadNpy(weights_path));
  if (weights.shape.size() != 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", weights_path, "' has shape ",
                     ShapeString(weights.shape), "; expected 1-D"));
  }
  MAXSIMD_ASSIGN_OR_RETURN(codec->bucket_weights,
                           NpyToFloat32(weights, weights_path));
  return absl::OkStatus();
}

absl::Status CheckCodec(const PlaidCodec& codec, const std::string& dir) {
  const int nbits = codec.nbits;
  if (nbits != 1 && nbits != 2 && nbits != 4 && nbits != 8) {
    return absl::InvalidArgumentError(
        absl::StrCat("PLAID index '", dir, "': nbits is ", nbits,
                     "; residuals are packed with nbits in {1, 2, 4, 8}"));
  }
  if ((static_cast<int64_t>(codec.dim) * nbits) % 8 != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("PLAID index '", dir, "': dim ", codec.dim, " x nbits ",
                     nbits, " is not a multiple of 8 bits"));
  }
  if (codec.bucket_weights.size() != (size_t{1} << nbits)) {
    return absl::InvalidArgumentError(
        absl::StrCat("PLAID index '", dir, "': bucket_weights has ",
                     codec.bucket_weights.size(), " entries; nbits ", nbits,
                     " needs ", 1 << nbits));
  }
  return absl::OkStatus();
}

// Codes and residuals of chunk i, with their counts checked against each
// other and the codec.
absl::Status LoadChunk(PlaidWriter writer, const std::string& dir, int64_t i,
                       const PlaidCodec& codec, Chunk* chunk) {
  const int64_t row_bytes = static_cast<int64_t>(codec.dim) * codec.nbits / 8;
  std::vector<int64_t> residual_shape;
  if (writer == PlaidWriter::kColbert) {
    chunk->codes_path = Join(dir, absl::StrCat(i, ".codes.pt"));
    chunk->residuals_path = Join(dir, absl::StrCat(i, ".residuals.pt"));
    MAXSIMD_ASSIGN_OR_RETURN(TorchTensor codes,
                             ReadTorchTensor(chunk->codes_path));
    if (codes.shape.size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", chunk->codes_path, "' has shape ",
                       ShapeString(codes.shape), "; expected 1-D codes"));
    }
    MAXSIMD_ASSIGN_OR_RETURN(chunk->codes,
                             TorchTensorToInt64(codes, chunk->codes_path));
    MAXSIMD_ASSIGN_OR_RETURN(TorchTensor residuals,
                             ReadTorchTensor(chunk->residuals_path));
    if (residuals.dtype != TorchDType::kUInt8) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", chunk->residuals_path, "' holds ",
                       TorchDTypeName(residuals.dtype), "; expected uint8"));
    }
    residual_shape = residuals.shape;
    chunk->residuals.assign(residuals.data.begin(), residuals.data.end());
  } else {
    chunk->codes_path = Join(dir, absl::StrCat(i, ".codes.npy"));
    chunk->residuals_path = Join(dir, absl::StrCat(i, ".residuals.npy"));
    MAXSIMD_ASSIGN_OR_RETURN(NpyArray codes, ReadNpy(chunk->codes_path));
    MAXSIMD_ASSIGN_OR_RETURN(chunk->codes,
                             NpyToInt64(codes, chunk->codes_path));
    MAXSIMD_ASSIGN_OR_RETURN(NpyArray residuals,
                             ReadNpy(chunk->residuals_path));
    if (residuals.element_size() != 1) {
      return absl::InvalidArgumentError(
          absl::StrCat("'", chunk->residuals_path, "' holds '", residuals.descr,
                       "'; expected uint8 ('|u1')"));
    }
    residual_shape = residuals.shape;
    chunk->residuals.assign(residuals.data.begin(), residuals.data.end());
  }
  chunk->rows = static_cast<int64_t>(chunk->codes.size());
  chunk->row_bytes = row_bytes;
  if (residual_shape.size() != 2 || residual_shape[1] != row_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", chunk->residuals_path, "' has shape ", ShapeString(residual_shape),
        "; residual rows must be dim x nbits / 8 = ", codec.dim, " x ",
        codec.nbits, " / 8 = ", row_bytes, " bytes wide"));
  }
  if (residual_shape[0] != chunk->rows) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", chunk->residuals_path, "' has ", residual_shape[0], " rows but '",
        chunk->codes_path, "' has ", chunk->rows, " codes"));
  }
  return absl::OkStatus();
}

// Cross-checks the optional {i}.metadata.json against the chunk.
absl::Status CheckChunkMetadata(const std::string& dir, int64_t i,
                                int64_t documents, int64_t embeddings,
                                int64_t passage_offset) {
  const std::string path = Join(dir, absl::StrCat(i, ".metadata.json"));
  if (!IsFile(path)) return absl::OkStatus();
  MAXSIMD_ASSIGN_OR_RETURN(std::string meta_text, ReadInputFile(path));
  MAXSIMD_ASSIGN_OR_RETURN(JsonValue meta, ParseJson(meta_text, path));
  auto check = [&](const char* key, int64_t actual) -> absl::Status {
    const JsonValue* v = meta.Find(key);
    if (v == nullptr) return absl::OkStatus();
    if (v->kind != JsonValue::Kind::kNumber || !v->is_integer ||
        v->integer != actual) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", path, "': ", key, " does not match the chunk's ", actual));
    }
    return absl::OkStatus();
  };
  MAXSIMD_RETURN_IF_ERROR(check("num_embeddings", embeddings));
  MAXSIMD_RETURN_IF_ERROR(check("num_passages", documents));   // ColBERT
  MAXSIMD_RETURN_IF_ERROR(check("num_documents", documents));  // fast-plaid
  return check("passage_offset", passage_offset);              // ColBERT
}

}  // namespace

const char* PlaidWriterName(PlaidWriter writer) {
  switch (writer) {
    case PlaidWriter::kColbert:
      return "colbert";
    case PlaidWriter::kFastPlaid:
      return "fast-plaid";
  }
  return "unknown";
}

absl::StatusOr<PlaidWriter> DetectPlaidWriter(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    return absl::NotFoundError(
        absl::StrCat("PLAID index directory '", dir, "' does not exist"));
  }
  const bool pt = IsFile(Join(dir, "centroids.pt"));
  const bool npy = IsFile(Join(dir, "centroids.npy"));
  if (pt && npy) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PLAID index '", dir,
        "' holds both centroids.pt (ColBERT) and centroids.npy (fast-plaid)"));
  }
  if (!pt && !npy) {
    return absl::NotFoundError(absl::StrCat(
        "'", dir,
        "' is not a PLAID index: it has neither centroids.pt (ColBERT) nor "
        "centroids.npy (fast-plaid)"));
  }
  return pt ? PlaidWriter::kColbert : PlaidWriter::kFastPlaid;
}

namespace {

// DATA_LOSS naming the codes file for embedding i's code outside
// [0, num_centroids).
absl::Status CheckPlaidCode(int64_t code, size_t i, int64_t num_centroids,
                            absl::string_view codes_name) {
  if (code >= 0 && code < num_centroids) return absl::OkStatus();
  return absl::DataLossError(
      absl::StrCat("'", codes_name, "': code ", code, " of embedding ", i,
                   " is outside the ", num_centroids, " centroids [0, ",
                   num_centroids, ")"));
}

}  // namespace

absl::Status DecompressPlaidEmbeddings(const PlaidCodec& codec,
                                       const std::vector<int64_t>& codes,
                                       const uint8_t* residuals, float* out,
                                       absl::string_view codes_name) {
  const int dim = codec.dim;
  const int64_t row_bytes = static_cast<int64_t>(dim) * codec.nbits / 8;
  const PlaidRowDecoder decoder(codec.bucket_weights.data(), codec.nbits, dim);
  for (size_t i = 0; i < codes.size(); ++i) {
    const int64_t code = codes[i];
    MAXSIMD_RETURN_IF_ERROR(
        CheckPlaidCode(code, i, codec.num_centroids, codes_name));
    float* v = out + static_cast<int64_t>(i) * dim;
    decoder.Decode(codec.centroids.data() + code * dim,
                   residuals + static_cast<int64_t>(i) * row_bytes, v);
    const float scale = PlaidInverseNorm(v, dim);
    for (int d = 0; d < dim; ++d) v[d] *= scale;
  }
  return absl::OkStatus();
}

namespace {

// Walks an index: its codec, then every chunk in order with the documents'
// lengths appended to *cu_seqlens; `take(chunk, first_row)` consumes each
// chunk's codes and residuals. Ids go to *ids (the passage ids when the
// options name no file).
absl::Status WalkPlaidIndex(
    const std::string& dir, const PlaidOptions& options, PlaidCodec* codec,
    std::vector<int64_t>* cu_seqlens, std::vector<std::string>* ids,
    const std::function<absl::Status(Chunk&, int64_t)>& take) {
  MAXSIMD_ASSIGN_OR_RETURN(PlaidWriter writer, DetectPlaidWriter(dir));
  const std::string meta_path = Join(dir, "metadata.json");
  MAXSIMD_ASSIGN_OR_RETURN(std::string meta_text, ReadInputFile(meta_path));
  MAXSIMD_ASSIGN_OR_RETURN(JsonValue meta, ParseJson(meta_text, meta_path));
  if (meta.kind != JsonValue::Kind::kObject) {
    return absl::DataLossError(
        absl::StrCat("'", meta_path, "' is not a JSON object"));
  }
  if (writer == PlaidWriter::kColbert) {
    MAXSIMD_RETURN_IF_ERROR(LoadColbertCodec(dir, meta, meta_path, codec));
  } else {
    MAXSIMD_RETURN_IF_ERROR(LoadFastPlaidCodec(dir, meta, meta_path, codec));
  }
  MAXSIMD_RETURN_IF_ERROR(CheckCodec(*codec, dir));
  MAXSIMD_ASSIGN_OR_RETURN(
      int64_t num_chunks,
      JsonInt(meta, {"num_chunks"}, meta_path, 0, kMaxChunks));
  if (!options.ids.empty()) {
    MAXSIMD_ASSIGN_OR_RETURN(*ids, ReadLines(options.ids));
  }
  *cu_seqlens = {0};
  for (int64_t i = 0; i < num_chunks; ++i) {
    const std::string doclens_path =
        Join(dir, absl::StrCat("doclens.", i, ".json"));
    MAXSIMD_ASSIGN_OR_RETURN(std::string text, ReadInputFile(doclens_path));
    MAXSIMD_ASSIGN_OR_RETURN(std::vector<int64_t> doclens,
                             ParseJsonInt64Array(text, doclens_path));
    Chunk chunk;
    MAXSIMD_RETURN_IF_ERROR(LoadChunk(writer, dir, i, *codec, &chunk));
    int64_t sum = 0;
    bool over = false;
    for (size_t k = 0; k < doclens.size() && !over; ++k) {
      if (doclens[k] < 0) {
        return absl::DataLossError(
            absl::StrCat("'", doclens_path, "': document ", k,
                         " has negative length ", doclens[k]));
      }
      over = doclens[k] > chunk.rows - sum;
      if (!over) sum += doclens[k];
    }
    if (over || sum != chunk.rows) {
      return absl::InvalidArgumentError(absl::StrCat(
          "'", doclens_path, "': document lengths sum to ",
          over ? absl::StrCat("more than ", chunk.rows) : absl::StrCat(sum),
          " but '", chunk.codes_path, "' has ", chunk.rows, " embeddings"));
    }
    MAXSIMD_RETURN_IF_ERROR(CheckChunkMetadata(
        dir, i, static_cast<int64_t>(doclens.size()), chunk.rows,
        static_cast<int64_t>(cu_seqlens->size()) - 1));
    const int64_t before = cu_seqlens->back();
    if (options.max_token_values > 0 &&
        (before + chunk.rows) > options.max_token_values / codec->dim) {
      return absl::ResourceExhaustedError(absl::StrCat(
          "PLAID index '", dir, "' decompresses to more than ",
          options.max_token_values, " token values (", before + chunk.rows,
          " embeddings x dim ", codec->dim, " by chunk ", i, ")"));
    }
    MAXSIMD_RETURN_IF_ERROR(take(chunk, before));
    for (int64_t len : doclens) {
      cu_seqlens->push_back(cu_seqlens->back() + len);
    }
  }
  const size_t num_docs = cu_seqlens->size() - 1;
  if (options.ids.empty()) {
    ids->reserve(num_docs);
    for (size_t k = 0; k < num_docs; ++k) ids->push_back(absl::StrCat(k));
  } else if (ids->size() != num_docs) {
    return absl::InvalidArgumentError(absl::StrCat(
        "'", options.ids, "' has ", ids->size(), " ids but PLAID index '", dir,
        "' has ", num_docs, " documents"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ImportedDocuments> ReadPlaidIndex(const std::string& dir,
                                                 const PlaidOptions& options) {
  ImportedDocuments out;
  PlaidCodec codec;
  MAXSIMD_RETURN_IF_ERROR(WalkPlaidIndex(
      dir, options, &codec, &out.cu_seqlens, &out.ids,
      [&](Chunk& chunk, int64_t before) {
        out.tokens.resize(
            static_cast<size_t>((before + chunk.rows) * codec.dim));
        return DecompressPlaidEmbeddings(
            codec, chunk.codes, chunk.residuals.data(),
            out.tokens.data() + before * codec.dim, chunk.codes_path);
      }));
  out.dim = codec.dim;
  return out;
}

absl::StatusOr<CompressedPlaidDocuments> ReadPlaidIndexCompressed(
    const std::string& dir, const PlaidOptions& options) {
  CompressedPlaidDocuments out;
  MAXSIMD_RETURN_IF_ERROR(WalkPlaidIndex(
      dir, options, &out.codec, &out.cu_seqlens, &out.ids,
      [&](Chunk& chunk, int64_t) -> absl::Status {
        for (size_t i = 0; i < chunk.codes.size(); ++i) {
          MAXSIMD_RETURN_IF_ERROR(CheckPlaidCode(
              chunk.codes[i], i, out.codec.num_centroids, chunk.codes_path));
          out.codes.push_back(static_cast<int32_t>(chunk.codes[i]));
        }
        out.residuals.insert(out.residuals.end(), chunk.residuals.begin(),
                             chunk.residuals.end());
        return absl::OkStatus();
      }));
  return out;
}

}  // namespace maxsimd
