// The bit layout of PLAID residual rows, and their decoding on the host.
//
// A residual row holds one bucket index of nbits bits per value, for
// dim * nbits / 8 bytes. Value k lives in byte k / (8 / nbits), in the
// nbits-bit group at position k % (8 / nbits) counted from the byte's most
// significant end; within the group the index is stored bit-reversed (its
// least significant bit in the group's most significant position). This is
// what unpacking torch.bucketize(...)'s bits, least significant first, with
// numpy.packbits (bitorder "big") writes, in both ColBERT v2 and
// fast-plaid, so their files are used as they are.
//
// Thread-safety: pure functions.
#ifndef MAXSIMD_KERNELS_PLAID_BITS_H_
#define MAXSIMD_KERNELS_PLAID_BITS_H_

#include <cstdint>
#include <vector>

#include "kernels/types.h"

namespace maxsimd {

// The bucket index of value `k` of a packed residual row.
inline int PlaidResidualBucket(const uint8_t* row, int nbits, int k) {
  const int per_byte = 8 / nbits;
  const int byte = row[k / per_byte];
  const int top = 7 - (k % per_byte) * nbits;  // the group's highest bit
  int bucket = 0;
  for (int t = 0; t < nbits; ++t) bucket |= ((byte >> (top - t)) & 1) << t;
  return bucket;
}

// Decodes PLAID rows through a table of the residual of every group of
// every byte value: one lookup per byte.
class PlaidRowDecoder {
 public:
  // `bucket_weights` has 1 << nbits entries. REQUIRES: nbits in {1, 2, 4,
  // 8}, dim * nbits a multiple of 8.
  PlaidRowDecoder(const float* bucket_weights, int nbits, int32_t dim);

  // out[k] = centroid[k] + bucket_weights[bucket(row, k)] for k < dim, in
  // fp32.
  void Decode(const float* centroid, const uint8_t* row, float* out) const;

  // Row t of a PLAID host view, decoded (without its scale). REQUIRES:
  // seg.codes[t] in range.
  void DecodeToken(const SegmentView& seg, int64_t t, float* out) const {
    Decode(seg.plaid.centroids + int64_t{seg.codes[t]} * dim_,
           static_cast<const uint8_t*>(seg.tokens) + t * row_bytes_, out);
  }

 private:
  int per_byte_;
  int32_t dim_;
  int64_t row_bytes_;
  std::vector<float> table_;  // [256][per_byte_]
};

// The int8 levels with which the GPU's int8 MMA path scores residuals:
// bucket b becomes levels[b] = round(bucket_weights[b] / step) with step =
// max_b |bucket_weights[b]| / 127 (1 when every weight is 0), so that
// levels[b] * step is within step / 2 of the weight. Returns step; writes
// 1 << nbits levels.
float PlaidLevels(const float* bucket_weights, int nbits, int8_t* levels);

// Levels that are all in [0, 127], over the weights' own range: levels[b]
// = round((bucket_weights[b] - offset) / step) with offset = the least
// weight and step = (the largest - offset) / 127 (1 when every weight is
// the same), so that offset + levels[b] * step is within step / 2 of the
// weight. The PLAID scan at 4 bits needs them (kernels/plaid_scan.cu: a
// byte permute in sign mode then reads 0 for the other half of the
// table); a residual's term is the levels' dot plus offset times the
// query row's sum. Returns step; writes 1 << nbits levels and *offset.
float PlaidOffsetLevels(const float* bucket_weights, int nbits, int8_t* levels,
                        float* offset);

// The levels the GPU's int8 MMA path (kernels/maxsim_tma.h, PlaidMma and
// the PLAID scan) scores residuals with at `nbits`: PlaidOffsetLevels at 4
// bits, PlaidLevels (offset 0) below. Returns step; writes 1 << nbits
// levels and *offset.
float PlaidMmaLevels(const float* bucket_weights, int nbits, int8_t* levels,
                     float* offset);

// The scale a PLAID token of decoded values v[dim] gets in a corpus that
// L2-normalises: 1 / max(||v||_2, 1e-12), the norm summed in fp64 and
// rounded to fp32 (as the importer normalises). Without normalisation the scale
// is 1.
float PlaidInverseNorm(const float* v, int32_t dim);

}  // namespace maxsimd

#endif  // MAXSIMD_KERNELS_PLAID_BITS_H_
