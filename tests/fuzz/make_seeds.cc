// Writes the seed corpus of the fuzz targets, tests/fuzz/corpus/<target>/
// seed-*, from the project's own encoders and the PLAID fixtures of
// tests/data/plaid. Deterministic; run it when a format changes:
//
//   build-fuzz/tests/fuzz/fuzz_make_seeds <repository root>
//
// Crash reproducers (crash-*) in the same folders are kept as they are.
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "index/corpus.h"
#include "index/npy.h"
#include "index/safetensors.h"
#include "index/storage.h"
#include "index/synthetic.h"
#include "index/torch_file.h"
#include "index/zip_reader.h"
#include "kernels/base/half.h"
#include "kernels/maxsim_cpu.h"
#include "tests/fuzz/fuzz_support.h"
#ifdef MAXSIMD_FUZZ_PROTO
#include "maxsimd/v1/admin.pb.h"
#include "maxsimd/v1/reranker.pb.h"
#endif

namespace maxsimd {
namespace {

std::string g_root;

void Die(const std::string& what) {
  std::fprintf(stderr, "fuzz_make_seeds: %s\n", what.c_str());
  std::exit(1);
}

template <typename T>
T Must(absl::StatusOr<T> v) {
  if (!v.ok()) Die(v.status().ToString());
  return *std::move(v);
}

void Must(const absl::Status& s) {
  if (!s.ok()) Die(s.ToString());
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) Die("cannot read " + path);
  std::ostringstream buf;
  buf << in.rdbuf();
  return buf.str();
}

void Seed(const std::string& target, const std::string& name,
          const std::string& bytes) {
  const std::string dir = absl::StrCat(g_root, "/tests/fuzz/corpus/", target);
  Must(MakeDirectories(dir));
  const std::string path = absl::StrCat(dir, "/seed-", name);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << bytes;
  if (!out) Die("cannot write " + path);
}

std::string Fixture(const std::string& rel) {
  return ReadFile(absl::StrCat(g_root, "/tests/data/plaid/", rel));
}

std::vector<float> Ramp(size_t n) {
  std::vector<float> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = 0.125f * static_cast<float>(i % 13);
  return v;
}

void NpySeeds() {
  Seed("npy", "f4-2d", SerializeNpy(MakeNpyFloat32(Ramp(12), {3, 4})));
  Seed("npy", "f2-2d", SerializeNpy(MakeNpyFloat16(Ramp(8), {2, 4})));
  Seed("npy", "i8-1d", SerializeNpy(MakeNpyInt64({0, 3, 5, 9}, {4})));
  Seed("npy", "f4-0d", SerializeNpy(MakeNpyFloat32({1.5f}, {})));
  NpyArray i4;
  i4.descr = "<i4";
  i4.shape = {3};
  i4.data = {1, 0, 0, 0, 2, 0, 0, 0, 7, 0, 0, 0};
  Seed("npy", "i4-1d", SerializeNpy(i4));
  NpyArray u1;
  u1.descr = "|u1";
  u1.shape = {2, 3};
  u1.data = {1, 2, 3, 4, 5, 6};
  Seed("npy", "u1-2d", SerializeNpy(u1));
  // Format 2.0 (a 4-byte header length) and a header numpy also writes.
  const std::string dict =
      "{'descr': '<f4', 'fortran_order': False, 'shape': (2, 1), }";
  std::string v2 = "\x93NUMPY\x02";
  v2.push_back('\0');
  const uint32_t len = static_cast<uint32_t>(dict.size() + 1);
  v2.append(reinterpret_cast<const char*>(&len), 4);
  v2 += dict + "\n";
  v2.append(8, '\0');
  Seed("npy", "v2-header", v2);
  Seed("npy", "fast-plaid-codes", Fixture("fast_plaid/0.codes.npy"));
}

void SafetensorsSeeds() {
  SafetensorsFile f;
  SafetensorsTensor tokens;
  tokens.dtype = "F16";
  tokens.shape = {3, 2};
  for (float v : Ramp(6)) {
    const uint16_t h = FloatToHalf(v);
    tokens.data.append(reinterpret_cast<const char*>(&h), 2);
  }
  SafetensorsTensor cu;
  cu.dtype = "I64";
  cu.shape = {3};
  for (int64_t v : {0, 1, 3}) {
    cu.data.append(reinterpret_cast<const char*>(&v), 8);
  }
  f.tensors["tokens"] = tokens;
  f.tensors["cu_seqlens"] = cu;
  f.metadata["format"] = "pt";
  Seed("safetensors", "f16-i64", SerializeSafetensors(f));
  f.metadata.clear();
  f.tensors["tokens"].dtype = "BF16";
  SafetensorsTensor cu32;
  cu32.dtype = "I32";
  cu32.shape = {2};
  for (int32_t v : {0, 3}) {
    cu32.data.append(reinterpret_cast<const char*>(&v), 4);
  }
  f.tensors["cu_seqlens"] = cu32;
  Seed("safetensors", "bf16-i32", SerializeSafetensors(f));
  SafetensorsTensor f32;
  f32.dtype = "F32";
  f32.shape = {1, 3};
  for (float v : Ramp(3)) f32.data.append(reinterpret_cast<const char*>(&v), 4);
  f.tensors["tokens"] = f32;
  f.tensors["cu_seqlens"] = cu32;
  f.tensors["cu_seqlens"].shape = {2};
  f.tensors["cu_seqlens"].data.replace(4, 4, std::string("\x01\0\0\0", 4));
  Seed("safetensors", "f32-i32", SerializeSafetensors(f));
}

void JsonSeeds() {
  Seed("json", "colbert-metadata", Fixture("colbert/metadata.json"));
  Seed("json", "fast-plaid-metadata", Fixture("fast_plaid/metadata.json"));
  Seed("json", "chunk-metadata", Fixture("colbert/0.metadata.json"));
  Seed("json", "plan", Fixture("colbert/plan.json"));
  Seed("json", "doclens", Fixture("colbert/doclens.0.json"));
  Seed("json", "literals",
       "{\"a\": [true, false, null, -0, 1.5e-3, 9223372036854775807, "
       "-9223372036854775808, 1E400], \"s\": \"tab\\t\\u00e9\\ud83d\\ude00\"}");
}

// Zip and torch.save seeds: an option byte (zip_fuzzer.cc,
// torch_file_fuzzer.cc; 1 = fix the CRCs), then the archive.
void ZipAndTorchSeeds() {
  auto both = [](const std::string& target, const std::string& name,
                 const std::string& archive) {
    Seed(target, name, std::string(1, '\0') + archive);
    Seed(target, name + "-fix", std::string(1, '\1') + archive);
  };
  both("zip", "two-entries",
       SerializeStoredZip({{"archive/data.pkl", "\x80\x02K\x01."},
                           {"archive/version", "3\n"}}));
  Seed("zip", "empty", std::string(1, '\0') + SerializeStoredZip({}));
  both("zip", "colbert-buckets", Fixture("colbert/buckets.pt"));
  for (const char* f :
       {"ordered_dict", "scalars", "views", "transposed", "dtypes"}) {
    both("torch_file", f, Fixture(absl::StrCat("torch/", f, ".pt")));
  }
  both("torch_file", "colbert-buckets", Fixture("colbert/buckets.pt"));
  both("torch_file", "colbert-codes", Fixture("colbert/0.codes.pt"));
  auto owner = std::make_shared<std::string>();
  for (float v : Ramp(6)) owner->append(reinterpret_cast<const char*>(&v), 4);
  TorchTensor t;
  t.dtype = TorchDType::kFloat32;
  t.shape = {2, 3};
  t.data = *owner;
  t.owner = owner;
  both("torch_file", "tuple", SerializeTorchTensorTuple({t, t}, "archive"));
}

// A PLAID index directory as one input: option byte, then the files.
void PlaidSeed(const std::string& name, char mode, const std::string& dir,
               const std::vector<std::string>& files, bool ids) {
  fuzz::FileSet set;
  set.options = std::string(1, mode);
  for (const std::string& f : files) {
    set.files.emplace_back(f, Fixture(absl::StrCat(dir, "/", f)));
  }
  if (ids) set.files.emplace_back("ids.txt", "a\nb\nc\nd\ne\n");
  Seed("plaid", name, fuzz::JoinFiles(set));
}

void PlaidSeeds() {
  const std::vector<std::string> fast = {
      "metadata.json",   "centroids.npy",  "bucket_weights.npy",
      "doclens.0.json",  "0.codes.npy",    "0.residuals.npy",
      "0.metadata.json", "doclens.1.json", "1.codes.npy",
      "1.residuals.npy", "1.metadata.json"};
  const std::vector<std::string> colbert = {
      "metadata.json", "centroids.pt",   "buckets.pt",      "doclens.0.json",
      "0.codes.pt",    "0.residuals.pt", "0.metadata.json", "doclens.1.json",
      "1.codes.pt",    "1.residuals.pt", "1.metadata.json"};
  PlaidSeed("fast-plaid", 0, "fast_plaid", fast, false);
  PlaidSeed("fast-plaid-compressed-ids", 3, "fast_plaid", fast, true);
  PlaidSeed("colbert", 0, "colbert", colbert, false);
  PlaidSeed("colbert-fix", 8, "colbert", colbert, false);
  PlaidSeed("colbert-compressed-unbounded-fix", 13, "colbert", colbert, false);
}

SegmentData Docs(const CorpusConfig& config, int64_t n, uint64_t seed,
                 const std::string& prefix = "doc-") {
  SyntheticCorpusOptions so;
  so.num_docs = n;
  so.dim = config.dim;
  so.min_tokens = 1;
  so.max_tokens = 4;
  so.num_clusters = 4;
  so.seed = seed;
  so.id_prefix = prefix;
  SyntheticCorpus s = GenerateSyntheticCorpus(so);
  std::vector<int32_t> counts;
  for (int64_t i = 0; i < n; ++i) {
    counts.push_back(
        static_cast<int32_t>(s.cu_seqlens[i + 1] - s.cu_seqlens[i]));
  }
  DocumentBuilder b(config, CorpusLimits{});
  Must(b.Add(s.ids, counts, s.tokens.data(), s.cu_seqlens.back(),
             DType::kFloat32, "seed"));
  return b.Take();
}

// Storage seeds: 4 option bytes (storage_fuzzer.cc), then the file.
std::string StorageInput(int kind, bool fix, uint32_t param,
                         const std::string& file) {
  std::string s(4, '\0');
  s[0] = static_cast<char>(kind | (fix ? 8 : 0));
  s[1] = static_cast<char>(param & 0xff);
  s[2] = static_cast<char>((param >> 8) & 0xff);
  s[3] = static_cast<char>((param >> 16) & 0xff);
  return s + file;
}

void StorageSeeds() {
  CorpusConfig dense;
  dense.name = "dense";
  dense.dim = 4;
  const SegmentData d = Docs(dense, 3, 1);
  Seed("storage", "segment-f16",
       StorageInput(0, false, 0, EncodeSegmentFile(d)));
  SegmentData bf = d;
  bf.dtype = DType::kBFloat16;
  Seed("storage", "segment-bf16-fix",
       StorageInput(0, true, 0, EncodeSegmentFile(bf)));
  CorpusConfig int8 = dense;
  int8.name = "int8";
  int8.layout = Layout::kInt8;
  int8.storage_dtype = DType::kInt8;
  Seed("storage", "segment-int8-fix",
       StorageInput(0, true, 0, EncodeSegmentFile(Docs(int8, 3, 2))));
  Seed("storage", "tombstones",
       StorageInput(1, false, 40, EncodeTombstoneFile(40, {0x5u, 0x80u})));
  Seed("storage", "tombstones-fix",
       StorageInput(1, true, 3, EncodeTombstoneFile(3, {0x2u})));
  Manifest m;
  m.config = dense;
  m.next_file = 4;
  m.segments.push_back({"seg-1.msd", "", 0, 3, 0});
  m.segments.push_back({"seg-2.msd", "tomb-3.msd", 3, 5, 1});
  Seed("storage", "manifest-dense",
       StorageInput(2, false, 0, EncodeManifest(m)));
  m.config = int8;
  m.config.quantize_queries = true;
  Seed("storage", "manifest-int8-fix",
       StorageInput(2, true, 0, EncodeManifest(m)));
  Seed("storage", "aliases",
       StorageInput(4, false, 0,
                    EncodeAliases({{"prod", "dense"}, {"b", "c"}})));

  // A PLAID corpus and a dense one, written by the server's own code path
  // (Corpus with a CorpusStore), packed as directory inputs.
  CpuBackendOptions o;
  o.num_threads = 1;
  std::unique_ptr<CpuBackend> backend = Must(CpuBackend::Create(o));
  char tmpl[] = "/tmp/maxsimd-seeds-XXXXXX";
  if (mkdtemp(tmpl) == nullptr) Die("mkdtemp");
  CorpusConfig plaid = dense;
  plaid.name = "plaid";
  plaid.dim = 8;
  plaid.layout = Layout::kPlaid;
  plaid.storage_dtype = PlaidDType(2);
  plaid.plaid_centroids = 4;
  for (const CorpusConfig& config : {dense, plaid}) {
    const std::string dir = absl::StrCat(tmpl, "/", config.name);
    auto corpus = Must(Corpus::Create(config, CorpusLimits{}, backend.get(),
                                      Must(CorpusStore::Create(dir, config))));
    SegmentData docs = Docs(config, 6, 3);
    std::optional<PlaidCodec> none;
    Must(corpus->Append(std::move(docs), none).status());
    Must(corpus->Append(Docs(config, 2, 4, "more-")).status());
    Must(corpus->Delete({"doc-1"}, false).status());
    fuzz::FileSet set;
    set.options = StorageInput(5, false, 0, "");
    fuzz::FileSet fixed = set;
    fixed.options[0] |= 8;
    for (const std::string& f : Must(ListFiles(dir))) {
      const std::string bytes = Must(ReadWholeFile(absl::StrCat(dir, "/", f)));
      set.files.emplace_back(f, bytes);
      fixed.files.emplace_back(f, bytes);
      if (config.layout == Layout::kPlaid && f.rfind("seg-", 0) == 0) {
        Seed("storage", "segment-plaid2", StorageInput(0, true, 0, bytes));
      }
      if (f.rfind("codec-", 0) == 0) {
        Seed("storage", "codec", StorageInput(3, false, 0, bytes));
      }
    }
    std::sort(set.files.begin(), set.files.end());
    std::sort(fixed.files.begin(), fixed.files.end());
    Seed("storage", absl::StrCat("directory-", config.name),
         fuzz::JoinFiles(set));
    Seed("storage", absl::StrCat("directory-", config.name, "-fix"),
         fuzz::JoinFiles(fixed));
    Must(DestroyCorpusDirectory(dir));
  }
  rmdir(tmpl);
}

#ifdef MAXSIMD_FUZZ_PROTO
// Request seeds: the option byte (request_fuzzer.cc), then the message.
std::string RequestInput(int mode, int corpus,
                         const google::protobuf::Message& m) {
  return std::string(1, static_cast<char>(mode | corpus << 2)) +
         m.SerializeAsString();
}

v1::RerankRequest Query(v1::DType dtype, int rows) {
  v1::RerankRequest r;
  r.set_corpus("c");
  r.mutable_query()->set_dtype(dtype);
  r.mutable_query()->add_shape(rows);
  r.mutable_query()->add_shape(8);
  std::string data;
  for (float v : Ramp(rows * 8)) {
    if (dtype == v1::DTYPE_FLOAT32) {
      data.append(reinterpret_cast<const char*>(&v), 4);
    } else {
      const uint16_t h =
          dtype == v1::DTYPE_FLOAT16 ? FloatToHalf(v) : FloatToBFloat16(v);
      data.append(reinterpret_cast<const char*>(&h), 2);
    }
  }
  r.mutable_query()->set_data(data);
  return r;
}

void RequestSeeds() {
  for (int corpus = 0; corpus < 3; ++corpus) {
    const std::string c = absl::StrCat("-corpus", corpus);
    Seed("request", "scan-f32" + c,
         RequestInput(0, corpus, Query(v1::DTYPE_FLOAT32, 2)));
    v1::RerankRequest r = Query(v1::DTYPE_FLOAT16, 3);
    r.add_candidate_ids("d0");
    r.add_candidate_ids("d5");
    r.add_candidate_ids("d0");
    r.set_top_k(5);
    r.set_priority(-3);
    r.set_request_id("r1");
    Seed("request", "rerank-f16" + c, RequestInput(0, corpus, r));
    v1::RerankBatchRequest batch;
    *batch.add_queries() = Query(v1::DTYPE_BFLOAT16, 1);
    *batch.add_queries() = r;
    Seed("request", "batch" + c, RequestInput(1, corpus, batch));
    v1::AddDocumentsRequest add;
    add.set_corpus("c");
    add.add_ids("new-0");
    add.add_ids("new-1");
    add.add_token_counts(1);
    add.add_token_counts(2);
    *add.mutable_tokens() = Query(v1::DTYPE_FLOAT32, 3).query();
    Seed("request", "add" + c, RequestInput(2, corpus, add));
  }
  v1::RerankRequest p = Query(v1::DTYPE_FLOAT32, 4);
  p.mutable_plaid()->set_n_ivf_probe(2);
  p.mutable_plaid()->set_n_full_scores(16);
  p.set_top_k(3);
  Seed("request", "plaid-search", RequestInput(0, 2, p));
  p.mutable_plaid()->set_exhaustive(true);
  Seed("request", "plaid-exhaustive", RequestInput(0, 2, p));
}
#endif

}  // namespace
}  // namespace maxsimd

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: %s <repository root>\n", argv[0]);
    return 2;
  }
  maxsimd::g_root = argv[1];
  maxsimd::NpySeeds();
  maxsimd::SafetensorsSeeds();
  maxsimd::JsonSeeds();
  maxsimd::ZipAndTorchSeeds();
  maxsimd::PlaidSeeds();
  maxsimd::StorageSeeds();
#ifdef MAXSIMD_FUZZ_PROTO
  maxsimd::RequestSeeds();
#endif
  return 0;
}
