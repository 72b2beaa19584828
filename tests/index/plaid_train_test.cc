// Training a PLAID codec and compressing with it (index/plaid_train.h):
// hand-built tokens pack into the expected bytes at every nbits and read
// back through PlaidResidualBucket; k-means finds well-separated clusters;
// the buckets are the residuals' quantiles; compress then decompress keeps
// tokens close, closer with more bits; the thread count changes nothing;
// bad options are refused by name. The assignment hook
// (PlaidTrainOptions::assign): its codes are used, UNIMPLEMENTED falls
// back to the host, other errors and codes out of range fail; the options
// a backend with and without k-means gets (PlaidTrainOptionsFor).
#include "index/plaid_train.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <set>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "index/synthetic.h"
#include "kernels/maxsim_cpu.h"
#include "tests/support/forwarding_backend.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::StatusIs;
using ::testing::HasSubstr;

// A codec of one centroid (the origin) over 8 dimensions whose cutoffs
// are the integers 1 .. 2^nbits - 1, so the residual value v + 0.5 falls
// in bucket v.
PlaidCodec IntegerCodec(int nbits) {
  PlaidCodec codec;
  codec.dim = 8;
  codec.nbits = nbits;
  codec.num_centroids = 1;
  codec.centroids.assign(8, 0.f);
  for (int b = 1; b < (1 << nbits); ++b) {
    codec.bucket_cutoffs.push_back(static_cast<float>(b));
  }
  for (int b = 0; b < (1 << nbits); ++b) {
    codec.bucket_weights.push_back(static_cast<float>(b) + 0.5f);
  }
  return codec;
}

// Bucket of dimension d packed by hand: the group of dimension d is the
// (d % (8 / nbits))-th from the byte's most significant end, and holds the
// bucket's bits least significant first.
uint8_t HandByte(const std::vector<int>& buckets, int nbits, int byte) {
  const int per_byte = 8 / nbits;
  uint8_t out = 0;
  for (int s = 0; s < per_byte; ++s) {
    const int b = buckets[byte * per_byte + s];
    for (int t = 0; t < nbits; ++t) {
      const int bit = (b >> t) & 1;
      out |= static_cast<uint8_t>(bit << (7 - s * nbits - t));
    }
  }
  return out;
}

TEST(PlaidTrainTest, PacksBucketsInTheImportersBitOrderAtEveryNbits) {
  for (int nbits : {1, 2, 4, 8}) {
    SCOPED_TRACE(nbits);
    const PlaidCodec codec = IntegerCodec(nbits);
    const std::vector<int> buckets = {0,
                                      (1 << nbits) - 1,
                                      1 % (1 << nbits),
                                      2 % (1 << nbits),
                                      3 % (1 << nbits),
                                      0,
                                      (1 << nbits) - 1,
                                      5 % (1 << nbits)};
    std::vector<float> token(8);
    for (int d = 0; d < 8; ++d) token[d] = buckets[d] + 0.5f;
    int64_t code = -1;
    std::vector<uint8_t> row(nbits);  // 8 dims x nbits / 8 bytes
    CompressPlaidEmbeddings(codec, token.data(), 1, &code, row.data(), 1);
    EXPECT_EQ(code, 0);
    for (int j = 0; j < nbits; ++j) {
      EXPECT_EQ(row[j], HandByte(buckets, nbits, j)) << "byte " << j;
    }
    for (int d = 0; d < 8; ++d) {
      EXPECT_EQ(PlaidResidualBucket(row.data(), nbits, d), buckets[d]) << d;
    }
    // Decompression gives back centroid + weight: the token itself.
    std::vector<float> back(8);
    ASSERT_THAT(DecompressPlaidEmbeddings(codec, {code}, row.data(),
                                          back.data(), "row"),
                ::maxsimd::testing::IsOk());
    // (normalised by the decompressor)
    double norm = 0.0;
    for (float v : token) norm += double{v} * v;
    for (int d = 0; d < 8; ++d) {
      EXPECT_NEAR(back[d], token[d] / std::sqrt(norm), 1e-6) << d;
    }
  }
}

// A residual equal to a cutoff goes below it (torch.bucketize: bucket =
// number of cutoffs strictly below the value).
TEST(PlaidTrainTest, AResidualOnACutoffGoesToTheLowerBucket) {
  const PlaidCodec codec = IntegerCodec(2);
  const std::vector<float> token = {1.f, 2.f, 3.f, 0.f, 0.5f, 1.5f, 9.f, -9.f};
  int64_t code = -1;
  uint8_t row[2];
  CompressPlaidEmbeddings(codec, token.data(), 1, &code, row, 1);
  const int want[8] = {0, 1, 2, 0, 0, 1, 3, 0};
  for (int d = 0; d < 8; ++d) {
    EXPECT_EQ(PlaidResidualBucket(row, 2, d), want[d]) << d;
  }
}

// Tokens around 6 orthogonal directions: every cluster gets its own
// centroid, close to its direction.
TEST(PlaidTrainTest, KMeansSeparatesWellSeparatedClusters) {
  constexpr int kDim = 16, kClusters = 6, kPer = 200;
  std::mt19937_64 rng(5);
  std::normal_distribution<float> noise(0.f, 0.05f);
  std::vector<float> tokens;
  for (int i = 0; i < kClusters * kPer; ++i) {
    std::vector<float> t(kDim);
    for (float& v : t) v = noise(rng);
    t[i % kClusters] += 1.f;
    double norm = 0.0;
    for (float v : t) norm += double{v} * v;
    for (float& v : t) v = static_cast<float>(v / std::sqrt(norm));
    tokens.insert(tokens.end(), t.begin(), t.end());
  }
  PlaidTrainOptions o;
  o.num_centroids = kClusters;
  o.nbits = 2;
  o.seed = 3;
  auto codec = TrainPlaidCodec(tokens.data(), kClusters * kPer, kDim, o);
  ASSERT_THAT(codec, ::maxsimd::testing::IsOk());
  std::vector<int64_t> codes(kClusters * kPer);
  std::vector<uint8_t> rows(kClusters * kPer * kDim * 2 / 8);
  CompressPlaidEmbeddings(*codec, tokens.data(), kClusters * kPer, codes.data(),
                          rows.data(), 2);
  std::set<int64_t> used;
  for (int c = 0; c < kClusters; ++c) {
    std::set<int64_t> of_cluster;
    for (int i = c; i < kClusters * kPer; i += kClusters) {
      of_cluster.insert(codes[i]);
    }
    ASSERT_EQ(of_cluster.size(), 1u) << "cluster " << c;
    used.insert(*of_cluster.begin());
    EXPECT_GT(codec->centroids[*of_cluster.begin() * kDim + c], 0.99f);
  }
  EXPECT_EQ(used.size(), static_cast<size_t>(kClusters));
}

SyntheticCorpus Clustered(int64_t docs) {
  SyntheticCorpusOptions so;
  so.num_docs = docs;
  so.dim = 64;
  so.min_tokens = 8;
  so.max_tokens = 24;
  so.num_clusters = 64;
  so.seed = 11;
  return GenerateSyntheticCorpus(so);
}

// Mean cosine between tokens and their compressed-then-decompressed form.
double RoundTripCosine(const SyntheticCorpus& c, const PlaidCodec& codec) {
  const int64_t n = static_cast<int64_t>(c.tokens.size()) / c.dim;
  std::vector<int64_t> codes(n);
  std::vector<uint8_t> rows(n * c.dim * codec.nbits / 8);
  CompressPlaidEmbeddings(codec, c.tokens.data(), n, codes.data(), rows.data(),
                          2);
  std::vector<float> back(c.tokens.size());
  EXPECT_THAT(
      DecompressPlaidEmbeddings(codec, codes, rows.data(), back.data(), "rt"),
      ::maxsimd::testing::IsOk());
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    double dot = 0.0;
    for (int32_t d = 0; d < c.dim; ++d) {
      dot += double{c.tokens[i * c.dim + d]} * back[i * c.dim + d];
    }
    sum += dot;  // both unit vectors
  }
  return sum / static_cast<double>(n);
}

// The buckets are the residual quantiles (cutoffs between the weights, all
// ascending), and a round trip keeps tokens close, closer at every step up
// in nbits.
TEST(PlaidTrainTest, RoundTripImprovesWithBitsAndBucketsAreQuantiles) {
  const SyntheticCorpus c = Clustered(400);
  const int64_t n = static_cast<int64_t>(c.tokens.size()) / c.dim;
  double previous = 0.0;
  for (int nbits : {1, 2, 4, 8}) {
    SCOPED_TRACE(nbits);
    PlaidTrainOptions o;
    o.nbits = nbits;
    o.num_centroids = 64;
    o.iterations = 8;
    auto codec = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
    ASSERT_THAT(codec, ::maxsimd::testing::IsOk());
    ASSERT_EQ(codec->bucket_weights.size(), size_t{1} << nbits);
    ASSERT_EQ(codec->bucket_cutoffs.size(), (size_t{1} << nbits) - 1);
    for (size_t b = 0; b + 1 < codec->bucket_weights.size(); ++b) {
      EXPECT_LE(codec->bucket_weights[b], codec->bucket_cutoffs[b]);
      EXPECT_LE(codec->bucket_cutoffs[b], codec->bucket_weights[b + 1]);
    }
    const double cosine = RoundTripCosine(c, *codec);
    std::printf("nbits %d: mean round-trip cosine %.4f\n", nbits, cosine);
    EXPECT_GT(cosine, previous);
    // Measured 0.955, 0.977, 0.993, 0.9998.
    const double floor = nbits == 1   ? 0.94
                         : nbits == 2 ? 0.965
                         : nbits == 4 ? 0.985
                                      : 0.999;
    EXPECT_GT(cosine, floor);
    previous = cosine;
  }
}

TEST(PlaidTrainTest, TheThreadCountChangesNothing) {
  const SyntheticCorpus c = Clustered(200);
  const int64_t n = static_cast<int64_t>(c.tokens.size()) / c.dim;
  PlaidTrainOptions o;
  o.num_centroids = 32;
  o.iterations = 5;
  o.max_sample = n / 2;  // a sample, not every token
  o.num_threads = 1;
  auto one = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  o.num_threads = 2;
  auto two = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  ASSERT_THAT(one, ::maxsimd::testing::IsOk());
  ASSERT_THAT(two, ::maxsimd::testing::IsOk());
  EXPECT_EQ(one->centroids, two->centroids);
  EXPECT_EQ(one->bucket_cutoffs, two->bucket_cutoffs);
  EXPECT_EQ(one->bucket_weights, two->bucket_weights);
  o.seed = 2;
  auto other = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  ASSERT_THAT(other, ::maxsimd::testing::IsOk());
  EXPECT_NE(one->centroids, other->centroids);  // the seed does matter
}

TEST(PlaidTrainTest, BadOptionsAreRefusedByName) {
  const std::vector<float> tokens(10 * 8, 0.5f);
  PlaidTrainOptions o;
  o.nbits = 3;
  EXPECT_THAT(TrainPlaidCodec(tokens.data(), 10, 8, o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("nbits is 3; PLAID takes 1, 2, 4 or 8")));
  o.nbits = 1;
  EXPECT_THAT(TrainPlaidCodec(tokens.data(), 10, 4, o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("dim 4 x nbits 1")));
  EXPECT_THAT(
      TrainPlaidCodec(tokens.data(), 0, 8, o),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no tokens")));
  o.num_centroids = 11;
  EXPECT_THAT(TrainPlaidCodec(tokens.data(), 10, 8, o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("num_centroids is 11; between 1 and the 10")));
  o.num_centroids = 2;
  o.iterations = 0;
  EXPECT_THAT(TrainPlaidCodec(tokens.data(), 10, 8, o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("iterations is 0")));
}

// The buckets are exactly the quantiles of the residuals that a full sort
// gives (the trainer selects the order statistics it needs instead).
TEST(PlaidTrainTest, BucketsAreTheQuantilesOfASortOfTheResiduals) {
  const SyntheticCorpus c = Clustered(150);
  const int64_t n = static_cast<int64_t>(c.tokens.size()) / c.dim;
  for (int nbits : {1, 2, 4, 8}) {
    SCOPED_TRACE(nbits);
    PlaidTrainOptions o;
    o.nbits = nbits;
    o.num_centroids = 16;
    o.iterations = 3;
    auto codec = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
    ASSERT_THAT(codec, ::maxsimd::testing::IsOk());
    // Every token is sampled (n < max_sample): the residuals of all.
    std::vector<int64_t> codes(n);
    AssignNearestCentroidsOnHost(c.tokens.data(), n, c.dim,
                                 codec->centroids.data(), 16, codes.data(), 2);
    std::vector<float> r;
    for (int64_t i = 0; i < n; ++i) {
      for (int32_t d = 0; d < c.dim; ++d) {
        r.push_back(c.tokens[i * c.dim + d] -
                    codec->centroids[codes[i] * c.dim + d]);
      }
    }
    std::sort(r.begin(), r.end());
    auto quantile = [&r](double q) {
      const double at = q * static_cast<double>(r.size() - 1);
      const size_t lo = static_cast<size_t>(std::floor(at));
      const size_t hi = std::min(lo + 1, r.size() - 1);
      return static_cast<float>(r[lo] + (at - static_cast<double>(lo)) *
                                            (r[hi] - r[lo]));
    };
    const int buckets = 1 << nbits;
    for (int b = 1; b < buckets; ++b) {
      EXPECT_EQ(codec->bucket_cutoffs[b - 1],
                quantile(static_cast<double>(b) / buckets))
          << "cutoff " << b;
    }
    for (int b = 0; b < buckets; ++b) {
      EXPECT_EQ(codec->bucket_weights[b], quantile((b + 0.5) / buckets))
          << "weight " << b;
    }
  }
}

// A hook that computes the host's assignment and counts its calls.
struct CountingAssign {
  int calls = 0;
  absl::Status status;  // answered when not OK, before computing anything
  PlaidAssignFn Fn() {
    return [this](const float* tokens, int64_t m, int32_t dim,
                  const float* centroids, int64_t k, int64_t* codes) {
      ++calls;
      if (!status.ok()) return status;
      AssignNearestCentroidsOnHost(tokens, m, dim, centroids, k, codes, 1);
      return absl::OkStatus();
    };
  }
};

void ExpectSameCodec(const PlaidCodec& a, const PlaidCodec& b) {
  EXPECT_EQ(a.num_centroids, b.num_centroids);
  EXPECT_EQ(a.centroids, b.centroids);
  EXPECT_EQ(a.bucket_cutoffs, b.bucket_cutoffs);
  EXPECT_EQ(a.bucket_weights, b.bucket_weights);
}

TEST(PlaidTrainTest, TheAssignHookRunsEveryAssignmentAndItsCodesAreUsed) {
  const SyntheticCorpus c = Clustered(200);
  const int64_t n = static_cast<int64_t>(c.tokens.size()) / c.dim;
  for (PlaidSeeding seeding :
       {PlaidSeeding::kKMeansPlusPlus, PlaidSeeding::kRandomTokens}) {
    SCOPED_TRACE(static_cast<int>(seeding));
    PlaidTrainOptions o;
    o.num_centroids = 32;
    o.iterations = 4;
    o.max_sample = n / 2;
    o.seeding = seeding;
    auto host = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
    ASSERT_THAT(host, ::maxsimd::testing::IsOk());
    // The host's rule through the hook: the host's codec.
    CountingAssign counting;
    o.assign = counting.Fn();
    auto hooked = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
    ASSERT_THAT(hooked, ::maxsimd::testing::IsOk());
    EXPECT_EQ(counting.calls, o.iterations + 1);  // + the final assignment
    ExpectSameCodec(*hooked, *host);
  }

  // Another rule through the hook (everything to centroid 0): another codec,
  // so the hook's codes are what the update used.
  PlaidTrainOptions o;
  o.num_centroids = 32;
  o.iterations = 2;
  int calls = 0;
  o.assign = [&calls](const float*, int64_t m, int32_t, const float*, int64_t,
                      int64_t* codes) {
    ++calls;
    std::fill(codes, codes + m, 0);
    return absl::OkStatus();
  };
  auto zero = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  ASSERT_THAT(zero, ::maxsimd::testing::IsOk());
  EXPECT_EQ(calls, 3);
  o.assign = nullptr;
  auto host = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  ASSERT_THAT(host, ::maxsimd::testing::IsOk());
  EXPECT_NE(zero->centroids, host->centroids);

  // Compression takes the hook's codes too, and its residuals follow them.
  std::vector<int64_t> codes(n, -1);
  std::vector<uint8_t> rows(n * c.dim * 2 / 8);
  auto last = [](const float*, int64_t m, int32_t, const float*, int64_t k,
                 int64_t* out) {
    std::fill(out, out + m, k - 1);
    return absl::OkStatus();
  };
  ASSERT_THAT(CompressPlaidEmbeddings(*host, c.tokens.data(), n, codes.data(),
                                      rows.data(), last, 2),
              ::maxsimd::testing::IsOk());
  EXPECT_THAT(codes, ::testing::Each(31));
  // The same rows as a codec whose only centroid is the last one.
  PlaidCodec one = *host;
  one.num_centroids = 1;
  one.centroids.assign(host->centroids.end() - c.dim, host->centroids.end());
  std::vector<int64_t> one_codes(n);
  std::vector<uint8_t> one_rows(rows.size());
  CompressPlaidEmbeddings(one, c.tokens.data(), n, one_codes.data(),
                          one_rows.data(), 2);
  EXPECT_EQ(rows, one_rows);
}

TEST(PlaidTrainTest, AnUnimplementedHookFallsBackToTheHost) {
  const SyntheticCorpus c = Clustered(200);
  const int64_t n = static_cast<int64_t>(c.tokens.size()) / c.dim;
  PlaidTrainOptions o;
  o.num_centroids = 32;
  o.iterations = 4;
  auto host = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  ASSERT_THAT(host, ::maxsimd::testing::IsOk());
  CountingAssign counting;
  counting.status = absl::UnimplementedError("no kernel here");
  o.assign = counting.Fn();
  auto fallback = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  ASSERT_THAT(fallback, ::maxsimd::testing::IsOk());
  EXPECT_EQ(counting.calls, 1);  // asked once, then the host
  ExpectSameCodec(*fallback, *host);

  std::vector<int64_t> want(n), got(n);
  std::vector<uint8_t> want_rows(n * c.dim * 2 / 8), got_rows(want_rows.size());
  CompressPlaidEmbeddings(*host, c.tokens.data(), n, want.data(),
                          want_rows.data(), 2);
  ASSERT_THAT(CompressPlaidEmbeddings(*host, c.tokens.data(), n, got.data(),
                                      got_rows.data(), counting.Fn(), 2),
              ::maxsimd::testing::IsOk());
  EXPECT_EQ(got, want);
  EXPECT_EQ(got_rows, want_rows);
}

TEST(PlaidTrainTest, HookErrorsAndCodesOutOfRangeFailTheTraining) {
  const SyntheticCorpus c = Clustered(50);
  const int64_t n = static_cast<int64_t>(c.tokens.size()) / c.dim;
  PlaidTrainOptions o;
  o.num_centroids = 8;
  o.iterations = 2;
  CountingAssign counting;
  counting.status = absl::UnavailableError("the device has failed");
  o.assign = counting.Fn();
  EXPECT_THAT(TrainPlaidCodec(c.tokens.data(), n, c.dim, o),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("the device has failed")));
  EXPECT_EQ(counting.calls, 1);
  o.assign = [](const float*, int64_t m, int32_t, const float*, int64_t k,
                int64_t* codes) {
    std::fill(codes, codes + m, 0);
    codes[m - 1] = k;
    return absl::OkStatus();
  };
  EXPECT_THAT(TrainPlaidCodec(c.tokens.data(), n, c.dim, o),
              StatusIs(absl::StatusCode::kInternal,
                       HasSubstr("the code 8; there are 8 centroids")));
  auto host = TrainPlaidCodec(c.tokens.data(), n, c.dim, PlaidTrainOptions());
  ASSERT_THAT(host, ::maxsimd::testing::IsOk());
  std::vector<int64_t> codes(n);
  std::vector<uint8_t> rows(n * c.dim * 2 / 8);
  EXPECT_THAT(CompressPlaidEmbeddings(*host, c.tokens.data(), n, codes.data(),
                                      rows.data(), o.assign, 2),
              StatusIs(absl::StatusCode::kInternal));
}

TEST(PlaidTrainTest, RandomSeedingIsDeterministicAndDiffersFromKMeansPlusPlus) {
  const SyntheticCorpus c = Clustered(200);
  const int64_t n = static_cast<int64_t>(c.tokens.size()) / c.dim;
  PlaidTrainOptions o;
  o.num_centroids = 32;
  o.iterations = 3;
  o.seeding = PlaidSeeding::kRandomTokens;
  o.num_threads = 1;
  auto one = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  o.num_threads = 2;
  auto two = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  ASSERT_THAT(one, ::maxsimd::testing::IsOk());
  ASSERT_THAT(two, ::maxsimd::testing::IsOk());
  ExpectSameCodec(*one, *two);
  o.seeding = PlaidSeeding::kKMeansPlusPlus;
  auto plus = TrainPlaidCodec(c.tokens.data(), n, c.dim, o);
  ASSERT_THAT(plus, ::maxsimd::testing::IsOk());
  EXPECT_NE(one->centroids, plus->centroids);
}

// ColBERT's count comes from corpus_tokens when the caller sampled already:
// a sample of 2^19 tokens from a corpus of 2^21 gets 16384 centroids (the
// sample alone would give 8192).
TEST(PlaidTrainTest, CorpusTokensSetColbertsCount) {
  constexpr int64_t kSample = int64_t{1} << 19;
  constexpr int32_t kDim = 8;
  std::vector<float> tokens(kSample * kDim);
  std::mt19937_64 rng(3);
  std::normal_distribution<float> normal;
  for (float& v : tokens) v = normal(rng);
  PlaidTrainOptions o;
  o.max_sample = kSample;
  o.iterations = 1;
  o.seeding = PlaidSeeding::kRandomTokens;
  // A cheap assignment: the count is what is under test.
  o.assign = [](const float*, int64_t m, int32_t, const float*, int64_t k,
                int64_t* codes) {
    for (int64_t i = 0; i < m; ++i) codes[i] = i % k;
    return absl::OkStatus();
  };
  auto from_sample = TrainPlaidCodec(tokens.data(), kSample, kDim, o);
  ASSERT_THAT(from_sample, ::maxsimd::testing::IsOk());
  EXPECT_EQ(from_sample->num_centroids, 8192);
  o.corpus_tokens = int64_t{1} << 21;
  auto from_corpus = TrainPlaidCodec(tokens.data(), kSample, kDim, o);
  ASSERT_THAT(from_corpus, ::maxsimd::testing::IsOk());
  EXPECT_EQ(from_corpus->num_centroids, 16384);
  o.corpus_tokens = int64_t{1} << 30;  // capped at one per 32 sampled
  auto capped = TrainPlaidCodec(tokens.data(), kSample, kDim, o);
  ASSERT_THAT(capped, ::maxsimd::testing::IsOk());
  EXPECT_EQ(capped->num_centroids, kSample / 32);
}

// A CPU backend that claims a k-means kernel (the host's, counted).
class KMeansBackend final : public ::maxsimd::testing::ForwardingBackend {
 public:
  KMeansBackend()
      : ForwardingBackend(std::unique_ptr<Backend>(
            CpuBackend::Create(CpuBackendOptions()).value())) {}
  absl::Status AssignNearestCentroids(absl::Span<const float> tokens,
                                      absl::Span<const float> centroids,
                                      int32_t dim,
                                      absl::Span<int64_t> codes) override {
    ++calls;
    AssignNearestCentroidsOnHost(tokens.data(), tokens.size() / dim, dim,
                                 centroids.data(), centroids.size() / dim,
                                 codes.data(), 1);
    return absl::OkStatus();
  }
  bool AssignsNearestCentroids() const override { return true; }
  int calls = 0;
};

TEST(PlaidTrainTest, OptionsForABackendFollowItsKMeans) {
  auto cpu = CpuBackend::Create(CpuBackendOptions()).value();
  const PlaidTrainOptions host = PlaidTrainOptionsFor(cpu.get());
  EXPECT_FALSE(host.assign);
  EXPECT_EQ(host.max_sample, PlaidTrainOptions().max_sample);
  EXPECT_EQ(host.seeding, PlaidSeeding::kKMeansPlusPlus);
  EXPECT_FALSE(BackendAssignFn(cpu.get()));

  KMeansBackend gpu_like;
  const PlaidTrainOptions gpu = PlaidTrainOptionsFor(&gpu_like);
  ASSERT_TRUE(gpu.assign);
  EXPECT_EQ(gpu.max_sample, kGpuPlaidMaxSample);
  EXPECT_EQ(gpu.seeding, PlaidSeeding::kRandomTokens);
  const std::vector<float> tokens = {1, 0, 0, 1, -1, 0};
  const std::vector<float> centroids = {0, 1, 1, 0};
  std::vector<int64_t> codes(3, -1);
  ASSERT_THAT(
      gpu.assign(tokens.data(), 3, 2, centroids.data(), 2, codes.data()),
      ::maxsimd::testing::IsOk());
  EXPECT_EQ(gpu_like.calls, 1);
  EXPECT_EQ(codes, (std::vector<int64_t>{1, 0, 0}));  // 0 on the tie
}

// Backend's default answer: UNIMPLEMENTED, so a trainer computes on the host.
TEST(PlaidTrainTest, ABackendWithoutKMeansAnswersUnimplemented) {
  auto cpu = CpuBackend::Create(CpuBackendOptions()).value();
  EXPECT_FALSE(cpu->AssignsNearestCentroids());
  const std::vector<float> x = {1, 0};
  std::vector<int64_t> codes(1);
  EXPECT_THAT(cpu->AssignNearestCentroids(x, x, 2, absl::MakeSpan(codes)),
              StatusIs(absl::StatusCode::kUnimplemented));
}

}  // namespace
}  // namespace maxsimd
