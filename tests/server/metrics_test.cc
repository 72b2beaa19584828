// CorpusCollector (server/metrics.h): the registry's gauges of damaged
// corpora and alias files, and of the corpus count against --max_corpora.
#include "server/metrics.h"

#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "index/registry.h"
#include "index/storage.h"
#include "kernels/maxsim_cpu.h"
#include "tests/support/status_matchers.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::IsOk;

// The value of the sample of family `name` whose labels are `labels`; -1
// when there is none.
double Sample(const std::vector<prometheus::MetricFamily>& families,
              const std::string& name,
              const std::map<std::string, std::string>& labels = {}) {
  for (const prometheus::MetricFamily& f : families) {
    if (f.name != name) continue;
    for (const prometheus::ClientMetric& m : f.metric) {
      std::map<std::string, std::string> got;
      for (const auto& l : m.label) got[l.name] = l.value;
      if (got == labels) return m.gauge.value;
    }
  }
  return -1;
}

TEST(CorpusCollectorTest, ExposesFailedCorporaDamagedAliasesAndTheLimit) {
  std::string dir = absl::StrCat(
      getenv("TEST_TMPDIR") != nullptr ? getenv("TEST_TMPDIR") : "/tmp",
      "/maxsimd_metricsXXXXXX");
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  auto backend = CpuBackend::Create({}).value();
  CorpusLimits limits;
  limits.max_corpora = 5;
  CorpusConfig config;
  config.dim = 4;
  {
    CorpusRegistry r(backend.get(), limits, dir);
    ASSERT_THAT(r.LoadAll(), IsOk());
    for (const char* name : {"good", "bad"}) {
      config.name = name;
      ASSERT_THAT(r.Create(config), IsOk());
    }
    ASSERT_THAT(r.SetAlias("prod", "good"), IsOk());
    CorpusCollector collector(&r);
    const auto sound = collector.Collect();
    EXPECT_EQ(Sample(sound, "maxsimd_corpora"), 2);
    EXPECT_EQ(Sample(sound, "maxsimd_corpora_limit"), 5);
    EXPECT_EQ(Sample(sound, "maxsimd_aliases_damaged"), 0);
    EXPECT_EQ(Sample(sound, "maxsimd_aliases_from_backup"), 0);
    EXPECT_EQ(Sample(sound, "maxsimd_corpus_load_failed", {{"corpus", "bad"}}),
              -1);
  }
  // "bad" loses its manifest; ALIASES is damaged, and then its backup.
  ASSERT_EQ(unlink((dir + "/corpora/bad/MANIFEST").c_str()), 0);
  ASSERT_THAT(WriteFileDurably(dir + "/corpora/bad/seg-9.msd", "x"), IsOk());
  ASSERT_THAT(WriteFileDurably(dir + "/ALIASES", "damaged"), IsOk());
  {
    CorpusRegistry r(backend.get(), limits, dir);
    ASSERT_THAT(r.LoadAll(), IsOk());
    const auto from_backup = CorpusCollector(&r).Collect();
    EXPECT_EQ(Sample(from_backup, "maxsimd_corpora"), 2);
    EXPECT_EQ(
        Sample(from_backup, "maxsimd_corpus_load_failed", {{"corpus", "bad"}}),
        1);
    EXPECT_EQ(Sample(from_backup, "maxsimd_aliases_damaged"), 0);
    EXPECT_EQ(Sample(from_backup, "maxsimd_aliases_from_backup"), 1);
  }
  ASSERT_THAT(WriteFileDurably(dir + "/ALIASES.prev", "damaged"), IsOk());
  CorpusRegistry r(backend.get(), limits, dir);
  ASSERT_THAT(r.LoadAll(), IsOk());
  const auto unknown = CorpusCollector(&r).Collect();
  EXPECT_EQ(Sample(unknown, "maxsimd_aliases_damaged"), 1);
  EXPECT_EQ(Sample(unknown, "maxsimd_aliases_from_backup"), 0);
  EXPECT_EQ(system(absl::StrCat("rm -rf '", dir, "'").c_str()), 0);
}

}  // namespace
}  // namespace maxsimd
