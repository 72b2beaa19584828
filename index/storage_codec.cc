#include "index/storage_codec.h"

#include <zlib.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <type_traits>
#include <utility>

#include "absl/base/macros.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "index/token_pooling.h"
#include "kernels/base/status_macros.h"

namespace maxsimd {
namespace {

constexpr char kMagic[8] = {'M', 'A', 'X', 'S', 'I', 'M', 'D', '\0'};
constexpr size_t kCorpusIdBytes = 16;
constexpr uint32_t kEndTag = 0xffffffffu;
enum FileKind : uint32_t {
  kSegmentKind = 1,
  kTombstoneKind = 2,
  kManifest = 3,
  kAliasesKind = 4,
  kCodecKind = 5
};

constexpr uint32_t Tag(const char (&s)[5]) {
  return static_cast<uint32_t>(static_cast<uint8_t>(s[0])) |
         static_cast<uint32_t>(static_cast<uint8_t>(s[1])) << 8 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[2])) << 16 |
         static_cast<uint32_t>(static_cast<uint8_t>(s[3])) << 24;
}

std::string TagName(uint32_t tag) {
  std::string s(4, ' ');
  for (int i = 0; i < 4; ++i) s[i] = static_cast<char>((tag >> (8 * i)) & 0xff);
  return s;
}

uint32_t CrcSerial(uint32_t crc, absl::string_view bytes) {
  // zlib takes at most 4 GiB - 1 bytes per call.
  constexpr size_t kStep = size_t{1} << 30;
  for (size_t at = 0; at < bytes.size(); at += kStep) {
    const size_t n = std::min(kStep, bytes.size() - at);
    crc = static_cast<uint32_t>(
        crc32(crc, reinterpret_cast<const Bytef*>(bytes.data() + at),
              static_cast<uInt>(n)));
  }
  return crc;
}

// CRC-32 of `bytes`; large inputs in pieces on several threads, joined with
// crc32_combine (the CRC of a concatenation from the pieces' CRCs).
uint32_t Crc(absl::string_view bytes) {
  constexpr size_t kPiece = size_t{32} << 20;
  const size_t cores = std::max(1u, std::thread::hardware_concurrency());
  const size_t pieces = std::min(cores, bytes.size() / kPiece);
  if (pieces < 2) return CrcSerial(0, bytes);
  const size_t step = (bytes.size() + pieces - 1) / pieces;
  std::vector<uint32_t> crcs(pieces);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < pieces; ++i) {
    threads.emplace_back(
        [&, i] { crcs[i] = CrcSerial(0, bytes.substr(i * step, step)); });
  }
  for (std::thread& t : threads) t.join();
  uint32_t crc = crcs[0];
  for (size_t i = 1; i < pieces; ++i) {
    const size_t len = std::min(step, bytes.size() - i * step);
    crc = static_cast<uint32_t>(
        crc32_combine(crc, crcs[i], static_cast<z_off_t>(len)));
  }
  return crc;
}

// The CRC of a + b from their CRCs.
uint32_t CrcJoin(uint32_t crc_a, uint32_t crc_b, size_t len_b) {
  return static_cast<uint32_t>(
      crc32_combine(crc_a, crc_b, static_cast<z_off_t>(len_b)));
}

// ---- encoding

template <typename T>
void Put(std::string* out, T v) {
  static_assert(std::is_trivially_copyable_v<T>);
  char b[sizeof(T)];
  std::memcpy(b, &v, sizeof(T));  // the hosts we build for are little-endian
  out->append(b, sizeof(T));
}

void PutString(std::string* out, absl::string_view s) {
  Put<uint32_t>(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

bool IsCorpusId(absl::string_view id) {
  return id.size() == 2 * kCorpusIdBytes &&
         std::all_of(id.begin(), id.end(), [](char c) {
           return absl::ascii_isdigit(static_cast<unsigned char>(c)) ||
                  (c >= 'a' && c <= 'f');
         });
}

class FileBuilder {
 public:
  // A file of `kind`; with a corpus id, of version 2 and its 'corp' block
  // first.
  explicit FileBuilder(FileKind kind, absl::string_view corpus_id = "") {
    out_.append(kMagic, sizeof(kMagic));
    Put<uint32_t>(&out_, kind);
    Put<uint32_t>(&out_, corpus_id.empty() ? kStorageLegacyFormatVersion
                                           : kStorageFormatVersion);
    if (!corpus_id.empty()) {
      ABSL_ASSERT(IsCorpusId(corpus_id));
      Block(Tag("corp"), absl::HexStringToBytes(corpus_id));
    }
  }
  void Block(uint32_t tag, absl::string_view payload) {
    const size_t start = out_.size();
    Put<uint32_t>(&out_, tag);
    Put<uint64_t>(&out_, payload.size());
    out_.append(payload.data(), payload.size());
    const uint32_t crc = Crc(absl::string_view(out_).substr(start));
    Put<uint32_t>(&out_, crc);
    // The file CRC so far, from the block's: no second pass over it.
    const absl::string_view all(out_);
    file_crc_ = CrcJoin(file_crc_, Crc(all.substr(done_, start - done_)),
                        start - done_);
    file_crc_ = CrcJoin(file_crc_, crc, out_.size() - 4 - start);
    file_crc_ = CrcJoin(file_crc_, Crc(all.substr(out_.size() - 4)), 4);
    done_ = out_.size();
  }
  std::string Finish() {
    Put<uint32_t>(&out_, kEndTag);
    file_crc_ = CrcJoin(file_crc_, Crc(absl::string_view(out_).substr(done_)),
                        out_.size() - done_);
    Put<uint32_t>(&out_, file_crc_);
    return std::move(out_);
  }

 private:
  std::string out_;
  size_t done_ = 0;  // bytes covered by file_crc_
  uint32_t file_crc_ = 0;
};

// ---- decoding

// Reads fixed-size values and strings from a payload; any overrun is
// DATA_LOSS ("block 'xxxx' is malformed").
class Cursor {
 public:
  Cursor(absl::string_view bytes, absl::string_view name, uint32_t tag)
      : bytes_(bytes), name_(name), tag_(tag) {}

  template <typename T>
  absl::StatusOr<T> Get() {
    if (bytes_.size() - at_ < sizeof(T)) return Malformed("too short");
    T v;
    std::memcpy(&v, bytes_.data() + at_, sizeof(T));
    at_ += sizeof(T);
    return v;
  }
  absl::StatusOr<std::string> GetString() {
    MAXSIMD_ASSIGN_OR_RETURN(uint32_t n, Get<uint32_t>());
    if (bytes_.size() - at_ < n) return Malformed("a string runs past its end");
    std::string s(bytes_.substr(at_, n));
    at_ += n;
    return s;
  }
  bool AtEnd() const { return at_ == bytes_.size(); }
  absl::Status ExpectEnd() {
    return at_ == bytes_.size() ? absl::OkStatus()
                                : Malformed("has bytes past its fields");
  }
  absl::Status Malformed(absl::string_view why) const {
    return FileDataLoss(name_,
                        absl::StrCat("block '", TagName(tag_), "' ", why));
  }

 private:
  absl::string_view bytes_;
  absl::string_view name_;
  uint32_t tag_;
  size_t at_ = 0;
};

// Checks the framing of a whole file of `kind` and returns the payloads of
// its blocks, which must carry `tags` in this order, followed by those of
// `optional` (in this order, each present or not) that the file holds. A
// version 2 file's leading 'corp' block is not among them: its id goes to
// *corpus_id (empty for version 1), and a kind that carries no id passes
// null, refusing version 2.
absl::StatusOr<std::vector<absl::string_view>> ParseFile(
    absl::string_view bytes, FileKind kind, const std::vector<uint32_t>& tags,
    absl::string_view name, const std::vector<uint32_t>& optional = {},
    std::string* corpus_id = nullptr) {
  constexpr size_t kHeader = sizeof(kMagic) + 8;
  if (bytes.size() < sizeof(kMagic) ||
      std::memcmp(bytes.data(), kMagic, sizeof(kMagic)) != 0) {
    return FileDataLoss(name, "not a maxsimd file (bad magic)");
  }
  if (bytes.size() < kHeader + 8) return FileDataLoss(name, "truncated header");
  uint32_t got_kind, version;
  std::memcpy(&got_kind, bytes.data() + 8, 4);
  std::memcpy(&version, bytes.data() + 12, 4);
  if (got_kind != kind) {
    return FileDataLoss(name, absl::StrCat("is a file of kind ", got_kind,
                                           ", expected kind ", kind));
  }
  if (version != kStorageLegacyFormatVersion &&
      (version != kStorageFormatVersion || corpus_id == nullptr)) {
    return FileDataLoss(
        name, absl::StrCat("format version ", version,
                           " is not supported (this build reads ",
                           corpus_id == nullptr
                               ? absl::StrCat(kStorageLegacyFormatVersion)
                               : absl::StrCat(kStorageLegacyFormatVersion,
                                              " and ", kStorageFormatVersion),
                           " for kind ", kind, ")"));
  }
  std::vector<absl::string_view> payloads;
  size_t at = kHeader;
  // The file CRC is built from the pieces' CRCs, so that every byte is
  // hashed once.
  uint32_t file_crc = Crc(bytes.substr(0, kHeader));
  auto read_block = [&](uint32_t want) -> absl::Status {
    if (bytes.size() - at < 12 + 4) {
      return FileDataLoss(
          name, absl::StrCat("truncated before block '", TagName(want), "'"));
    }
    uint32_t tag;
    uint64_t len;
    std::memcpy(&tag, bytes.data() + at, 4);
    std::memcpy(&len, bytes.data() + at + 4, 8);
    if (tag != want) {
      return FileDataLoss(
          name, absl::StrCat("found block '", TagName(tag), "' where '",
                             TagName(want), "' was expected"));
    }
    if (len > bytes.size() - at - 12 - 4) {
      return FileDataLoss(
          name, absl::StrCat("truncated in block '", TagName(tag), "' (", len,
                             " payload bytes declared, ",
                             bytes.size() - at - 16, " left)"));
    }
    uint32_t crc;
    std::memcpy(&crc, bytes.data() + at + 12 + len, 4);
    const uint32_t got = Crc(bytes.substr(at, 12 + len));
    if (got != crc) {
      return FileDataLoss(name, absl::StrCat("checksum mismatch in block '",
                                             TagName(tag), "' at offset ", at));
    }
    file_crc = CrcJoin(file_crc, got, 12 + len);
    file_crc = CrcJoin(file_crc, Crc(bytes.substr(at + 12 + len, 4)), 4);
    payloads.push_back(bytes.substr(at + 12, len));
    at += 12 + len + 4;
    return absl::OkStatus();
  };
  if (corpus_id != nullptr) corpus_id->clear();
  if (version == kStorageFormatVersion) {
    MAXSIMD_RETURN_IF_ERROR(read_block(Tag("corp")));
    const absl::string_view id = payloads.back();
    payloads.pop_back();
    if (id.size() != kCorpusIdBytes) {
      return Cursor(id, name, Tag("corp"))
          .Malformed(absl::StrCat("has ", id.size(), " bytes; an id has ",
                                  kCorpusIdBytes));
    }
    *corpus_id = absl::BytesToHexString(id);
  }
  for (uint32_t want : tags) MAXSIMD_RETURN_IF_ERROR(read_block(want));
  for (uint32_t want : optional) {
    // Present when its tag comes next: the end tag is no block's tag, and a
    // damaged tag fails the end-tag check below.
    uint32_t next;
    if (bytes.size() - at < 4) break;
    std::memcpy(&next, bytes.data() + at, 4);
    if (next == want) MAXSIMD_RETURN_IF_ERROR(read_block(want));
  }
  if (bytes.size() - at < 8)
    return FileDataLoss(name, "truncated before its end");
  uint32_t end, stored_crc;
  std::memcpy(&end, bytes.data() + at, 4);
  std::memcpy(&stored_crc, bytes.data() + at + 4, 4);
  if (end != kEndTag)
    return FileDataLoss(name, "has no end tag after its blocks");
  file_crc = CrcJoin(file_crc, Crc(bytes.substr(at, 4)), 4);
  if (file_crc != stored_crc)
    return FileDataLoss(name, "file checksum mismatch");
  if (at + 8 != bytes.size()) {
    return FileDataLoss(name,
                        absl::StrCat(bytes.size() - at - 8,
                                     " bytes follow the end of the file"));
  }
  return payloads;
}

absl::StatusOr<DType> StoredDType(uint32_t v, const Cursor& c) {
  if (v == 1) return DType::kFloat16;
  if (v == 2) return DType::kBFloat16;
  if (v == 3) return DType::kInt8;
  if (v >= 4 && v <= 7) return PlaidDType(1 << (v - 4));
  return c.Malformed(absl::StrCat("has storage dtype ", v));
}

// FORMAT.md's storage dtype codes (not DType's values).
uint32_t StoredDTypeCode(DType d) {
  switch (d) {
    case DType::kBFloat16:
      return 2;
    case DType::kInt8:
      return 3;
    case DType::kPlaid1:
      return 4;
    case DType::kPlaid2:
      return 5;
    case DType::kPlaid4:
      return 6;
    case DType::kPlaid8:
      return 7;
    case DType::kFloat16:
    case DType::kFloat32:  // never stored; a corpus config refuses it
      break;
  }
  return 1;
}

}  // namespace

absl::Status FileDataLoss(absl::string_view name, absl::string_view why) {
  return absl::DataLossError(absl::StrCat("file ", name, ": ", why));
}

// ---------------------------------------------------------------------------
// Segment, codec, tombstone, manifest and alias files

std::string NewCorpusId() {
  std::random_device random;  // the kernel's generator (getrandom)
  std::string bytes;
  while (bytes.size() < kCorpusIdBytes) Put<uint32_t>(&bytes, random());
  return absl::BytesToHexString(bytes);
}

std::string EncodeSegmentFile(const SegmentData& data,
                              absl::string_view corpus_id) {
  FileBuilder f(kSegmentKind, corpus_id);
  const int64_t docs = static_cast<int64_t>(data.ids.size());
  std::string meta;
  Put<int32_t>(&meta, data.dim);
  Put<uint32_t>(&meta, StoredDTypeCode(data.dtype));
  Put<int64_t>(&meta, docs);
  Put<int64_t>(&meta, data.cu_seqlens.back());
  f.Block(Tag("meta"), meta);
  f.Block(
      Tag("offs"),
      absl::string_view(reinterpret_cast<const char*>(data.cu_seqlens.data()),
                        data.cu_seqlens.size() * sizeof(int64_t)));
  std::string ids;
  for (const std::string& id : data.ids) PutString(&ids, id);
  f.Block(Tag("ids "), ids);
  f.Block(Tag("toks"),
          absl::string_view(data.tokens.data(), data.tokens.size()));
  const bool plaid = PlaidNbits(data.dtype) != 0;
  if (data.dtype == DType::kInt8 || plaid) {
    f.Block(Tag("scal"),
            absl::string_view(reinterpret_cast<const char*>(data.scales.data()),
                              data.scales.size() * sizeof(float)));
  }
  if (plaid) {
    f.Block(Tag("code"),
            absl::string_view(reinterpret_cast<const char*>(data.codes.data()),
                              data.codes.size() * sizeof(int32_t)));
  }
  return f.Finish();
}

absl::StatusOr<SegmentData> DecodeSegmentFile(absl::string_view bytes,
                                              absl::string_view name,
                                              std::string* corpus_id) {
  std::string id;
  MAXSIMD_ASSIGN_OR_RETURN(
      std::vector<absl::string_view> b,
      ParseFile(bytes, kSegmentKind,
                {Tag("meta"), Tag("offs"), Tag("ids "), Tag("toks")}, name,
                {Tag("scal"), Tag("code")}, &id));
  if (corpus_id != nullptr) *corpus_id = id;
  SegmentData data;
  Cursor meta(b[0], name, Tag("meta"));
  MAXSIMD_ASSIGN_OR_RETURN(data.dim, meta.Get<int32_t>());
  MAXSIMD_ASSIGN_OR_RETURN(uint32_t dtype, meta.Get<uint32_t>());
  MAXSIMD_ASSIGN_OR_RETURN(data.dtype, StoredDType(dtype, meta));
  MAXSIMD_ASSIGN_OR_RETURN(int64_t docs, meta.Get<int64_t>());
  MAXSIMD_ASSIGN_OR_RETURN(int64_t tokens, meta.Get<int64_t>());
  MAXSIMD_RETURN_IF_ERROR(meta.ExpectEnd());
  if (data.dim < 1 || docs < 0 || tokens < 0) {
    return meta.Malformed(absl::StrCat("has dim ", data.dim, ", ", docs,
                                       " documents, ", tokens, " tokens"));
  }
  // Divided, not multiplied: a huge count must not wrap to the block's size.
  if (b[1].size() % sizeof(int64_t) != 0 ||
      b[1].size() / sizeof(int64_t) != static_cast<uint64_t>(docs) + 1) {
    return Cursor(b[1], name, Tag("offs"))
        .Malformed(absl::StrCat("has ", b[1].size(), " bytes for ", docs,
                                " documents"));
  }
  data.cu_seqlens.resize(static_cast<size_t>(docs + 1));
  std::memcpy(data.cu_seqlens.data(), b[1].data(), b[1].size());
  if (data.cu_seqlens.front() != 0 || data.cu_seqlens.back() != tokens) {
    return Cursor(b[1], name, Tag("offs"))
        .Malformed("does not run from 0 to the token count");
  }
  for (int64_t d = 0; d < docs; ++d) {
    if (data.cu_seqlens[d + 1] < data.cu_seqlens[d]) {
      return Cursor(b[1], name, Tag("offs"))
          .Malformed(absl::StrCat("decreases at document ", d));
    }
  }
  Cursor ids(b[2], name, Tag("ids "));
  data.ids.reserve(static_cast<size_t>(docs));
  absl::flat_hash_set<absl::string_view> seen;
  for (int64_t d = 0; d < docs; ++d) {
    MAXSIMD_ASSIGN_OR_RETURN(std::string id, ids.GetString());
    data.ids.push_back(std::move(id));
  }
  MAXSIMD_RETURN_IF_ERROR(ids.ExpectEnd());
  for (const std::string& id : data.ids) {
    if (!seen.insert(id).second) {
      return ids.Malformed(absl::StrCat("repeats id \"", id, "\""));
    }
  }
  const int nbits = PlaidNbits(data.dtype);
  if ((int64_t{data.dim} * nbits) % 8 != 0) {
    return meta.Malformed(absl::StrCat("has dim ", data.dim, " and nbits ",
                                       nbits, ", not whole bytes per row"));
  }
  const uint64_t row_bytes =
      static_cast<uint64_t>(TokenRowBytes(data.dtype, data.dim));
  const uint64_t want = static_cast<uint64_t>(tokens) * row_bytes;
  // As for 'offs': tokens x row_bytes may wrap, so check by division.
  if (b[3].size() % row_bytes != 0 ||
      b[3].size() / row_bytes != static_cast<uint64_t>(tokens)) {
    return Cursor(b[3], name, Tag("toks"))
        .Malformed(absl::StrCat("has ", b[3].size(), " bytes; ", tokens,
                                " tokens of dim ", data.dim, " need ", want));
  }
  data.tokens.assign(b[3].begin(), b[3].end());
  const bool int8 = data.dtype == DType::kInt8;
  const size_t blocks = int8 ? 5 : nbits != 0 ? 6 : 4;
  if (b.size() != blocks) {
    return meta.Malformed(absl::StrCat(
        "has storage dtype ", dtype, " but the file has ", b.size() - 4,
        " of the blocks 'scal', 'code'; it needs ", blocks - 4));
  }
  if (!int8 && nbits == 0) return data;
  for (size_t i = 0; int8 && i < data.tokens.size(); ++i) {
    if (static_cast<int8_t>(data.tokens[i]) == -128) {
      return Cursor(b[3], name, Tag("toks"))
          .Malformed(absl::StrCat("holds int8 code -128 at element ", i,
                                  "; codes are in [-127, 127]"));
    }
  }
  if (b[4].size() != static_cast<uint64_t>(tokens) * sizeof(float)) {
    return Cursor(b[4], name, Tag("scal"))
        .Malformed(absl::StrCat("has ", b[4].size(), " bytes; ", tokens,
                                " tokens need ", tokens * sizeof(float)));
  }
  data.scales.resize(static_cast<size_t>(tokens));
  std::memcpy(data.scales.data(), b[4].data(), b[4].size());
  for (size_t t = 0; t < data.scales.size(); ++t) {
    if (!(data.scales[t] >= 0.f) || !std::isfinite(data.scales[t])) {
      return Cursor(b[4], name, Tag("scal"))
          .Malformed(absl::StrCat("holds scale ", data.scales[t], " for token ",
                                  t, "; scales are finite and >= 0"));
    }
  }
  if (nbits == 0) return data;
  if (b[5].size() != static_cast<uint64_t>(tokens) * sizeof(int32_t)) {
    return Cursor(b[5], name, Tag("code"))
        .Malformed(absl::StrCat("has ", b[5].size(), " bytes; ", tokens,
                                " tokens need ", tokens * sizeof(int32_t)));
  }
  data.codes.resize(static_cast<size_t>(tokens));
  std::memcpy(data.codes.data(), b[5].data(), b[5].size());
  for (size_t t = 0; t < data.codes.size(); ++t) {
    if (data.codes[t] < 0) {
      return Cursor(b[5], name, Tag("code"))
          .Malformed(absl::StrCat("holds code ", data.codes[t], " for token ",
                                  t, "; codes are >= 0"));
    }
  }
  return data;
}

std::string EncodeCodecFile(const PlaidCodec& codec,
                            absl::string_view corpus_id) {
  FileBuilder f(kCodecKind, corpus_id);
  std::string meta;
  Put<int32_t>(&meta, codec.dim);
  Put<int32_t>(&meta, codec.nbits);
  Put<int64_t>(&meta, codec.num_centroids);
  f.Block(Tag("meta"), meta);
  auto floats = [](const std::vector<float>& v) {
    return absl::string_view(reinterpret_cast<const char*>(v.data()),
                             v.size() * sizeof(float));
  };
  f.Block(Tag("cent"), floats(codec.centroids));
  f.Block(Tag("wght"), floats(codec.bucket_weights));
  f.Block(Tag("cuts"), floats(codec.bucket_cutoffs));
  return f.Finish();
}

absl::StatusOr<PlaidCodec> DecodeCodecFile(absl::string_view bytes,
                                           absl::string_view name,
                                           std::string* corpus_id) {
  std::string id;
  MAXSIMD_ASSIGN_OR_RETURN(
      std::vector<absl::string_view> b,
      ParseFile(bytes, kCodecKind,
                {Tag("meta"), Tag("cent"), Tag("wght"), Tag("cuts")}, name, {},
                &id));
  if (corpus_id != nullptr) *corpus_id = id;
  PlaidCodec c;
  Cursor meta(b[0], name, Tag("meta"));
  MAXSIMD_ASSIGN_OR_RETURN(c.dim, meta.Get<int32_t>());
  MAXSIMD_ASSIGN_OR_RETURN(c.nbits, meta.Get<int32_t>());
  MAXSIMD_ASSIGN_OR_RETURN(c.num_centroids, meta.Get<int64_t>());
  MAXSIMD_RETURN_IF_ERROR(meta.ExpectEnd());
  auto floats = [](absl::string_view p, std::vector<float>* out) {
    out->resize(p.size() / sizeof(float));
    std::memcpy(out->data(), p.data(), out->size() * sizeof(float));
    return p.size() % sizeof(float) == 0;
  };
  if (!floats(b[1], &c.centroids) || !floats(b[2], &c.bucket_weights) ||
      !floats(b[3], &c.bucket_cutoffs)) {
    return meta.Malformed("has a table that is not whole fp32 values");
  }
  if (absl::Status valid = ValidatePlaidCodec(c, "codec"); !valid.ok()) {
    return meta.Malformed(
        absl::StrCat("does not describe a codec (", valid.message(), ")"));
  }
  return c;
}

std::string EncodeTombstoneFile(int64_t num_docs,
                                const std::vector<uint32_t>& bits,
                                absl::string_view corpus_id) {
  FileBuilder f(kTombstoneKind, corpus_id);
  std::string meta;
  Put<int64_t>(&meta, num_docs);
  f.Block(Tag("meta"), meta);
  f.Block(Tag("bits"),
          absl::string_view(reinterpret_cast<const char*>(bits.data()),
                            bits.size() * sizeof(uint32_t)));
  return f.Finish();
}

absl::StatusOr<std::vector<uint32_t>> DecodeTombstoneFile(
    absl::string_view bytes, int64_t num_docs, absl::string_view name,
    std::string* corpus_id) {
  std::string id;
  MAXSIMD_ASSIGN_OR_RETURN(
      std::vector<absl::string_view> b,
      ParseFile(bytes, kTombstoneKind, {Tag("meta"), Tag("bits")}, name, {},
                &id));
  if (corpus_id != nullptr) *corpus_id = id;
  Cursor meta(b[0], name, Tag("meta"));
  MAXSIMD_ASSIGN_OR_RETURN(int64_t docs, meta.Get<int64_t>());
  MAXSIMD_RETURN_IF_ERROR(meta.ExpectEnd());
  if (docs != num_docs) {
    return meta.Malformed(absl::StrCat(
        "is for ", docs, " documents; the segment has ", num_docs));
  }
  const size_t words = static_cast<size_t>((num_docs + 31) / 32);
  if (b[1].size() != words * sizeof(uint32_t)) {
    return Cursor(b[1], name, Tag("bits"))
        .Malformed(absl::StrCat("has ", b[1].size(), " bytes for ", num_docs,
                                " documents"));
  }
  std::vector<uint32_t> bits(words);
  std::memcpy(bits.data(), b[1].data(), b[1].size());
  if (num_docs % 32 != 0 && (bits.back() >> (num_docs % 32)) != 0) {
    return Cursor(b[1], name, Tag("bits"))
        .Malformed("marks documents past the segment's end");
  }
  return bits;
}

std::string EncodeManifest(const Manifest& m) {
  FileBuilder f(kManifest, m.corpus_id);
  std::string conf;
  PutString(&conf, m.config.name);
  Put<int32_t>(&conf, m.config.dim);
  Put<uint32_t>(&conf, static_cast<uint32_t>(m.config.layout));
  Put<uint32_t>(&conf, static_cast<uint32_t>(m.config.placement));
  Put<uint8_t>(&conf, m.config.normalize ? 1 : 0);
  Put<uint32_t>(&conf, StoredDTypeCode(m.config.storage_dtype));
  // Only an int8 corpus has the byte, so that a dense corpus's manifest is
  // what builds before the int8 layout wrote.
  if (m.config.layout == Layout::kInt8) {
    Put<uint8_t>(&conf, m.config.quantize_queries ? 1 : 0);
  }
  if (m.config.layout == Layout::kPlaid) {
    Put<int64_t>(&conf, m.config.plaid_centroids);
    PutString(&conf, m.codec_file);
  }
  // Only a pooling corpus has the field, so that other manifests are what
  // builds before token pooling wrote, and those builds refuse this one
  // (its `conf` has bytes past their fields) instead of adding unpooled
  // documents to it.
  if (m.config.pool_factor != 1) Put<int32_t>(&conf, m.config.pool_factor);
  f.Block(Tag("conf"), conf);
  std::string next;
  Put<uint64_t>(&next, m.next_file);
  f.Block(Tag("next"), next);
  std::string segs;
  Put<uint32_t>(&segs, static_cast<uint32_t>(m.segments.size()));
  for (const StoredSegment& s : m.segments) {
    PutString(&segs, s.file);
    PutString(&segs, s.tombstones);
    Put<int64_t>(&segs, s.base_index);
    Put<int64_t>(&segs, s.num_docs);
    Put<int32_t>(&segs, s.shard);
  }
  f.Block(Tag("segs"), segs);
  if (!m.corpus_id.empty() && m.legacy_below > 0) {
    std::string legacy;
    Put<uint64_t>(&legacy, m.legacy_below);
    f.Block(Tag("lgcy"), legacy);
  }
  return f.Finish();
}

absl::StatusOr<Manifest> DecodeManifest(absl::string_view bytes,
                                        absl::string_view name) {
  Manifest m;
  MAXSIMD_ASSIGN_OR_RETURN(
      std::vector<absl::string_view> b,
      ParseFile(bytes, kManifest, {Tag("conf"), Tag("next"), Tag("segs")}, name,
                {Tag("lgcy")}, &m.corpus_id));
  Cursor conf(b[0], name, Tag("conf"));
  MAXSIMD_ASSIGN_OR_RETURN(m.config.name, conf.GetString());
  MAXSIMD_ASSIGN_OR_RETURN(m.config.dim, conf.Get<int32_t>());
  MAXSIMD_ASSIGN_OR_RETURN(uint32_t layout, conf.Get<uint32_t>());
  MAXSIMD_ASSIGN_OR_RETURN(uint32_t placement, conf.Get<uint32_t>());
  MAXSIMD_ASSIGN_OR_RETURN(uint8_t normalize, conf.Get<uint8_t>());
  MAXSIMD_ASSIGN_OR_RETURN(uint32_t dtype, conf.Get<uint32_t>());
  uint8_t quantize_queries = 0;
  if (layout == 1) {  // int8
    MAXSIMD_ASSIGN_OR_RETURN(quantize_queries, conf.Get<uint8_t>());
  }
  if (layout == 2) {  // plaid
    MAXSIMD_ASSIGN_OR_RETURN(m.config.plaid_centroids, conf.Get<int64_t>());
    MAXSIMD_ASSIGN_OR_RETURN(m.codec_file, conf.GetString());
  }
  if (!conf.AtEnd()) {
    MAXSIMD_ASSIGN_OR_RETURN(m.config.pool_factor, conf.Get<int32_t>());
    if (m.config.pool_factor < 2 ||
        m.config.pool_factor > kMaxTokenPoolFactor) {
      return conf.Malformed(
          absl::StrCat("has pool_factor ", m.config.pool_factor,
                       "; it must be in [2, ", kMaxTokenPoolFactor, "]"));
    }
  }
  MAXSIMD_RETURN_IF_ERROR(conf.ExpectEnd());
  if (layout > 2 || placement > 2 || normalize > 1 || quantize_queries > 1 ||
      (layout == 1) != (dtype == 3) || (layout == 2) != (dtype >= 4) ||
      m.config.plaid_centroids < 0 || absl::StrContains(m.codec_file, "/")) {
    return conf.Malformed(
        absl::StrCat("has layout ", layout, ", placement ", placement,
                     ", normalize ", normalize, ", storage dtype ", dtype,
                     ", quantize_queries ", quantize_queries));
  }
  m.config.quantize_queries = quantize_queries == 1;
  m.config.layout = static_cast<Layout>(layout);
  m.config.placement = static_cast<Placement>(placement);
  m.config.normalize = normalize == 1;
  MAXSIMD_ASSIGN_OR_RETURN(m.config.storage_dtype, StoredDType(dtype, conf));
  Cursor next(b[1], name, Tag("next"));
  MAXSIMD_ASSIGN_OR_RETURN(m.next_file, next.Get<uint64_t>());
  MAXSIMD_RETURN_IF_ERROR(next.ExpectEnd());
  Cursor segs(b[2], name, Tag("segs"));
  MAXSIMD_ASSIGN_OR_RETURN(uint32_t count, segs.Get<uint32_t>());
  int64_t min_base = 0;
  for (uint32_t i = 0; i < count; ++i) {
    StoredSegment s;
    MAXSIMD_ASSIGN_OR_RETURN(s.file, segs.GetString());
    MAXSIMD_ASSIGN_OR_RETURN(s.tombstones, segs.GetString());
    MAXSIMD_ASSIGN_OR_RETURN(s.base_index, segs.Get<int64_t>());
    MAXSIMD_ASSIGN_OR_RETURN(s.num_docs, segs.Get<int64_t>());
    MAXSIMD_ASSIGN_OR_RETURN(s.shard, segs.Get<int32_t>());
    // base_index >= min_base >= 0 when the sum is checked: it cannot wrap.
    if (s.file.empty() || s.base_index < min_base || s.num_docs < 0 ||
        s.num_docs > std::numeric_limits<int64_t>::max() - s.base_index ||
        s.shard < 0 || absl::StrContains(s.file, "/") ||
        absl::StrContains(s.tombstones, "/")) {
      return segs.Malformed(absl::StrCat("has a bad entry for segment ", i));
    }
    min_base = s.base_index + s.num_docs;
    m.segments.push_back(std::move(s));
  }
  MAXSIMD_RETURN_IF_ERROR(segs.ExpectEnd());
  if (b.size() > 3) {
    Cursor legacy(b[3], name, Tag("lgcy"));
    if (m.corpus_id.empty()) {
      return legacy.Malformed("is in a version 1 manifest");
    }
    MAXSIMD_ASSIGN_OR_RETURN(m.legacy_below, legacy.Get<uint64_t>());
    MAXSIMD_RETURN_IF_ERROR(legacy.ExpectEnd());
    if (m.legacy_below == 0 || m.legacy_below > m.next_file) {
      return legacy.Malformed(absl::StrCat("has ", m.legacy_below,
                                           "; it must be in [1, next file ",
                                           m.next_file, "]"));
    }
  }
  return m;
}

std::string EncodeAliases(const std::map<std::string, std::string>& aliases) {
  FileBuilder f(kAliasesKind);
  std::string alis;
  Put<uint32_t>(&alis, static_cast<uint32_t>(aliases.size()));
  for (const auto& [alias, corpus] : aliases) {
    PutString(&alis, alias);
    PutString(&alis, corpus);
  }
  f.Block(Tag("alis"), alis);
  return f.Finish();
}

absl::StatusOr<std::map<std::string, std::string>> DecodeAliases(
    absl::string_view bytes, absl::string_view name) {
  MAXSIMD_ASSIGN_OR_RETURN(std::vector<absl::string_view> b,
                           ParseFile(bytes, kAliasesKind, {Tag("alis")}, name));
  Cursor c(b[0], name, Tag("alis"));
  MAXSIMD_ASSIGN_OR_RETURN(uint32_t count, c.Get<uint32_t>());
  std::map<std::string, std::string> out;
  for (uint32_t i = 0; i < count; ++i) {
    MAXSIMD_ASSIGN_OR_RETURN(std::string alias, c.GetString());
    MAXSIMD_ASSIGN_OR_RETURN(std::string corpus, c.GetString());
    if (alias.empty() || corpus.empty() || !out.emplace(alias, corpus).second) {
      return c.Malformed(absl::StrCat("has a bad or repeated alias entry ", i));
    }
  }
  MAXSIMD_RETURN_IF_ERROR(c.ExpectEnd());
  return out;
}
}  // namespace maxsimd
