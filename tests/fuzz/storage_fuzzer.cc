// Fuzzes the decoders of the on-disk corpus format (index/FORMAT.md,
// index/storage.h) and what a load builds from their output
// (index/segment.h, Corpus::Restore).
//
// Input: 4 option bytes, then the file (or, in directory mode, the
// directory in fuzz_support.h's multi-file container).
//   byte 0, bits 0-2: 0 segment file, 1 tombstone file, 2 manifest,
//                     3 codec file, 4 aliases file, 5 (and 6, 7) a whole
//                     corpus directory read by CorpusStore::Read and
//                     loaded by Corpus::Restore, as a server start does;
//   byte 0, bit 3:    before decoding, set the header (magic, the kind
//                     expected, version) and recompute every block CRC and
//                     the file CRC that the framing lets us find, so that
//                     the fuzzer explores the payload decoders instead of
//                     stopping at checksum mismatches;
//   bytes 1-3:        tombstone mode: the segment's document count (u24).
#include <zlib.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "absl/strings/match.h"
#include "index/corpus.h"
#include "index/plaid_codec.h"
#include "index/segment.h"
#include "index/storage.h"
#include "kernels/maxsim_cpu.h"
#include "kernels/types.h"
#include "tests/fuzz/fuzz_support.h"

namespace {

using maxsimd::Backend;

uint32_t Get32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

void Put32(std::string* s, size_t at, uint32_t v) {
  std::memcpy(s->data() + at, &v, 4);
}

uint32_t Crc(const std::string& s, size_t begin, size_t len) {
  return static_cast<uint32_t>(
      crc32(0, reinterpret_cast<const Bytef*>(s.data() + begin),
            static_cast<uInt>(len)));
}

// FORMAT.md's framing, made valid wherever it can be followed: header,
// block CRCs, and the file CRC after the end tag.
void FixFraming(std::string* f, uint32_t kind) {
  if (f->size() < 16) return;
  std::memcpy(f->data(), "MAXSIMD\0", 8);
  Put32(f, 8, kind);
  // Format version 1, or 2 (with the corpus id block) when the input has
  // it, so both versions' paths are fuzzed.
  Put32(f, 12, Get32(*f, 12) == 2 ? 2 : 1);
  size_t at = 16;
  while (f->size() - at >= 8) {
    if (Get32(*f, at) == 0xffffffffu) {
      Put32(f, at + 4, Crc(*f, 0, at + 4));
      return;
    }
    if (f->size() - at < 16) return;
    uint64_t len;
    std::memcpy(&len, f->data() + at + 4, 8);
    if (len > f->size() - at - 16) return;
    Put32(f, at + 12 + len, Crc(*f, at, 12 + len));
    at += 16 + len;
  }
}

Backend* TheBackend() {
  static Backend* backend = [] {
    maxsimd::CpuBackendOptions o;
    o.num_threads = 1;
    return maxsimd::CpuBackend::Create(o).value().release();
  }();
  return backend;
}

// A codec that every code of `data` fits, when one is small enough to
// make (a PLAID segment decoded alone has none).
std::shared_ptr<const maxsimd::CorpusCodec> CodecFor(
    const maxsimd::SegmentData& data) {
  maxsimd::PlaidCodec c;
  c.dim = data.dim;
  c.nbits = maxsimd::PlaidNbits(data.dtype);
  int32_t max_code = 0;
  for (int32_t code : data.codes) max_code = std::max(max_code, code);
  c.num_centroids = int64_t{max_code} + 1;
  if (c.num_centroids * c.dim > (1 << 20)) return nullptr;
  c.centroids.assign(static_cast<size_t>(c.num_centroids * c.dim), 0.5f);
  for (int b = 0; b < (1 << c.nbits); ++b) c.bucket_weights.push_back(b);
  absl::StatusOr<std::shared_ptr<const maxsimd::CorpusCodec>> codec =
      maxsimd::CorpusCodec::Create(std::move(c), TheBackend());
  return codec.ok() ? *codec : nullptr;
}

void Segment(std::string bytes) {
  absl::StatusOr<maxsimd::SegmentData> data =
      maxsimd::DecodeSegmentFile(bytes, "seg-1.msd");
  if (!data.ok()) return;
  const int64_t tokens = data->cu_seqlens.back();
  MAXSIMD_FUZZ_CHECK(data->dim >= 1 &&
                     data->cu_seqlens.size() == data->ids.size() + 1 &&
                     static_cast<uint64_t>(data->tokens.size()) ==
                         static_cast<uint64_t>(tokens) *
                             maxsimd::TokenRowBytes(data->dtype, data->dim));
  std::shared_ptr<const maxsimd::CorpusCodec> codec;
  if (maxsimd::PlaidNbits(data->dtype) != 0) {
    codec = CodecFor(*data);
    if (codec == nullptr) return;
  }
  const std::vector<std::string> ids = data->ids;
  absl::StatusOr<std::shared_ptr<const maxsimd::Segment>> seg =
      maxsimd::Segment::Create(std::move(*data), 0, TheBackend(), 0,
                               maxsimd::Placement::kGpu, codec);
  if (!seg.ok()) return;
  for (size_t i = 0; i < ids.size(); ++i) {
    MAXSIMD_FUZZ_CHECK((*seg)->Find(ids[i]) == static_cast<int64_t>(i));
  }
  (void)(*seg)->HostView(nullptr);
}

void Tombstones(const std::string& bytes, int64_t num_docs) {
  absl::StatusOr<std::vector<uint32_t>> bits =
      maxsimd::DecodeTombstoneFile(bytes, num_docs, "tomb-2.msd");
  if (!bits.ok()) return;
  absl::StatusOr<std::shared_ptr<const maxsimd::TombstoneSet>> set =
      maxsimd::TombstoneSet::FromBits(std::move(*bits), TheBackend());
  if (set.ok()) MAXSIMD_FUZZ_CHECK((*set)->count() <= num_docs);
}

void Manifest(const std::string& bytes) {
  absl::StatusOr<maxsimd::Manifest> m =
      maxsimd::DecodeManifest(bytes, "MANIFEST");
  if (!m.ok()) return;
  (void)maxsimd::ValidateCorpusConfig(m->config, maxsimd::CorpusLimits{});
  for (const maxsimd::StoredSegment& s : m->segments) {
    MAXSIMD_FUZZ_CHECK(!absl::StrContains(s.file, "/") &&
                       !absl::StrContains(s.tombstones, "/"));
  }
}

void Codec(const std::string& bytes) {
  absl::StatusOr<maxsimd::PlaidCodec> c =
      maxsimd::DecodeCodecFile(bytes, "codec-3.msd");
  if (!c.ok()) return;
  MAXSIMD_FUZZ_CHECK(
      maxsimd::CorpusCodec::Create(std::move(*c), TheBackend()).ok());
}

void Directory(const std::string& input) {
  static maxsimd::fuzz::ScratchDir dir;
  maxsimd::fuzz::FileSet set = maxsimd::fuzz::SplitFiles(input);
  dir.Reset();
  const bool fix = !set.options.empty() && (set.options[0] & 8);
  for (auto& [name, content] : set.files) {
    if (fix) {
      const uint32_t kind = name == "MANIFEST"                 ? 3
                            : absl::StartsWith(name, "seg-")   ? 1
                            : absl::StartsWith(name, "tomb-")  ? 2
                            : absl::StartsWith(name, "codec-") ? 5
                                                               : 0;
      if (kind != 0) FixFraming(&content, kind);
    }
    dir.Write(name, content);
  }
  maxsimd::StoredCorpus contents;
  if (!maxsimd::CorpusStore::Read(dir.path(), &contents).ok()) return;
  absl::StatusOr<std::shared_ptr<maxsimd::Corpus>> corpus =
      maxsimd::Corpus::Restore(maxsimd::CorpusLimits{}, TheBackend(), nullptr,
                               std::move(contents));
  if (!corpus.ok()) return;
  std::shared_ptr<const maxsimd::CorpusSnapshot> snap = (*corpus)->Snapshot();
  for (const auto& seg : snap->segments()) {
    for (int64_t d = 0; d < seg->num_docs(); ++d) {
      (void)snap->Find(seg->id(d));
    }
  }
  (void)snap->SegmentRefs();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const int kind = data[0] & 7;
  const bool fix = (data[0] & 8) != 0;
  std::string file(reinterpret_cast<const char*>(data) + 4, size - 4);
  // Each single-file kind, with its FORMAT.md kind number.
  static constexpr uint32_t kKinds[] = {1, 2, 3, 5, 4};
  if (kind < 5 && fix) FixFraming(&file, kKinds[kind]);
  switch (kind) {
    case 0:
      Segment(std::move(file));
      break;
    case 1:
      Tombstones(file, data[1] | data[2] << 8 | data[3] << 16);
      break;
    case 2:
      Manifest(file);
      break;
    case 3:
      Codec(file);
      break;
    case 4:
      (void)maxsimd::DecodeAliases(file, "ALIASES");
      break;
    default:
      // The options of the container are the 4 bytes already read.
      Directory(std::string(reinterpret_cast<const char*>(data), size));
      break;
  }
  return 0;
}
