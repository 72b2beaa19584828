// crash_client: the writer and the checker of the crash test
// (tests/e2e/crash_test.sh), on the client library.
//
//   crash_client create --target=H:P --corpus=NAME
//   crash_client write  --target=H:P --corpus=NAME --log=PATH [--seed=N]
//   crash_client verify --target=H:P --corpus=NAME --log=PATH
//
// `write` streams batches, each an AddDocuments of a few documents or a
// DeleteDocuments of a few live ones, until a call fails (the server was
// killed). Before sending batch b it appends "try b ..." to the log, and
// after the server acknowledges it "ok b", each line fsynced, so the log
// always tells acknowledged writes from the one that may have been in
// flight. Document ids and tokens are a pure function of (batch, index), so
// `verify` recomputes every score.
//
// `verify` checks the restarted server against the log: every acknowledged
// add is present and every acknowledged delete absent, the batch in flight
// at the kill (if any) is all applied or not at all, the live count
// matches, and every live document's score equals the reference (values are
// multiples of 1/8 with few terms, so fp16 storage and fp32 sums are
// exact). It prints what it checked; exit 0 when all holds, 1 otherwise.
#include <fcntl.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <map>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "client/client.h"

ABSL_FLAG(std::string, target, "127.0.0.1:50051", "Server address");
ABSL_FLAG(std::string, corpus, "crash", "Corpus name");
ABSL_FLAG(std::string, log, "", "The write log (write appends, verify reads)");
ABSL_FLAG(uint64_t, seed, 1, "Seed of the write mix");

namespace maxsimd {
namespace {

constexpr int kDim = 8;
constexpr int kDocsPerAdd = 5;

std::string DocId(int64_t batch, int j) {
  return absl::StrCat("b", batch, "-", j);
}
int DocTokens(int64_t batch, int j) {
  return 1 + static_cast<int>((batch * 7 + j) % 4);
}
float TokenValue(int64_t batch, int j, int t, int c) {
  return 0.125f * static_cast<float>((batch * 13 + j * 5 + t * 3 + c) % 9) -
         0.5f;
}

// One query, fixed: multiples of 1/8.
std::vector<float> QueryTokens() {
  std::vector<float> q(3 * kDim);
  for (size_t i = 0; i < q.size(); ++i) {
    q[i] = 0.125f * static_cast<float>(i % 5) - 0.25f;
  }
  return q;
}

double ReferenceScore(const std::string& id) {
  // id = b<batch>-<j>
  const std::vector<std::string> parts = absl::StrSplit(id.substr(1), '-');
  const int64_t batch = std::stoll(parts[0]);
  const int j = std::stoi(parts[1]);
  const std::vector<float> q = QueryTokens();
  double total = 0;
  for (int r = 0; r < 3; ++r) {
    double best = -INFINITY;
    for (int t = 0; t < DocTokens(batch, j); ++t) {
      double dot = 0;
      for (int c = 0; c < kDim; ++c) {
        dot += double{q[r * kDim + c]} * TokenValue(batch, j, t, c);
      }
      best = std::max(best, dot);
    }
    total += best;
  }
  return total;
}

// The log, parsed: per batch, its kind, its ids, and whether acknowledged.
struct Batch {
  bool add = false;
  std::vector<std::string> ids;
  bool acked = false;
};

std::map<int64_t, Batch> ReadLog(const std::string& path) {
  std::map<int64_t, Batch> batches;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream s(line);
    std::string what;
    int64_t b;
    if (!(s >> what >> b)) continue;  // a torn last line
    if (what == "try") {
      std::string kind;
      s >> kind;
      Batch& batch = batches[b];
      batch.add = kind == "add";
      std::string id;
      while (s >> id) batch.ids.push_back(id);
    } else if (what == "ok") {
      batches[b].acked = true;
    }
  }
  return batches;
}

class Log {
 public:
  explicit Log(const std::string& path)
      : fd_(open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644)) {}
  ~Log() {
    if (fd_ >= 0) close(fd_);
  }
  bool ok() const { return fd_ >= 0; }
  bool Append(const std::string& line) {
    const std::string l = line + "\n";
    return write(fd_, l.data(), l.size()) == static_cast<ssize_t>(l.size()) &&
           fsync(fd_) == 0;
  }

 private:
  int fd_;
};

std::unique_ptr<Client> Connect() {
  ClientOptions o;
  o.target = absl::GetFlag(FLAGS_target);
  o.timeout = absl::Seconds(10);
  auto c = Client::Create(o);
  if (!c.ok()) {
    std::fprintf(stderr, "crash_client: %s\n", c.status().ToString().c_str());
    std::exit(2);
  }
  return *std::move(c);
}

int Create() {
  v1::CreateCorpusRequest r;
  r.set_name(absl::GetFlag(FLAGS_corpus));
  r.set_dim(kDim);
  auto got = Connect()->CreateCorpus(r);
  if (!got.ok()) {
    std::fprintf(stderr, "crash_client create: %s\n",
                 got.status().ToString().c_str());
    return 1;
  }
  return 0;
}

int Write() {
  const std::string corpus = absl::GetFlag(FLAGS_corpus);
  const std::string path = absl::GetFlag(FLAGS_log);
  std::map<int64_t, Batch> batches = ReadLog(path);
  // Documents known to be live: acknowledged adds minus acknowledged
  // deletes.
  std::set<std::string> live;
  for (const auto& [b, batch] : batches) {
    for (const std::string& id : batch.ids) {
      // The ids of a batch that was in flight are never touched again, so
      // that its outcome stays what the server made of it.
      if (batch.acked && batch.add) {
        live.insert(id);
      } else {
        live.erase(id);
      }
    }
  }
  int64_t next = batches.empty() ? 0 : batches.rbegin()->first + 1;
  Log log(path);
  if (!log.ok()) {
    std::fprintf(stderr, "crash_client: cannot open %s\n", path.c_str());
    return 2;
  }
  std::mt19937_64 rng(absl::GetFlag(FLAGS_seed) + static_cast<uint64_t>(next));
  std::unique_ptr<Client> client = Connect();
  for (;; ++next) {
    const bool add = live.size() < 8 || rng() % 10 < 7;
    std::vector<std::string> ids;
    if (add) {
      for (int j = 0; j < kDocsPerAdd; ++j) ids.push_back(DocId(next, j));
    } else {
      std::vector<std::string> pool(live.begin(), live.end());
      std::shuffle(pool.begin(), pool.end(), rng);
      ids.assign(pool.begin(), pool.begin() + 1 + rng() % 3);
    }
    if (!log.Append(absl::StrCat("try ", next, add ? " add " : " del ",
                                 absl::StrJoin(ids, " ")))) {
      return 2;
    }
    absl::Status status;
    if (add) {
      DocumentBatch docs;
      docs.dim = kDim;
      docs.cu_seqlens = {0};
      for (int j = 0; j < kDocsPerAdd; ++j) {
        docs.ids.push_back(ids[j]);
        for (int t = 0; t < DocTokens(next, j); ++t) {
          for (int c = 0; c < kDim; ++c) {
            docs.tokens.push_back(TokenValue(next, j, t, c));
          }
        }
        docs.cu_seqlens.push_back(docs.cu_seqlens.back() + DocTokens(next, j));
      }
      status = client->AddDocuments(corpus, docs).status();
    } else {
      status = client->DeleteDocuments(corpus, ids).status();
    }
    if (!status.ok()) {
      // The server is gone (or going): the batch stays unacknowledged.
      std::printf("crash_client write: stopped at batch %lld: %s\n",
                  static_cast<long long>(next), status.ToString().c_str());
      return 0;
    }
    if (!log.Append(absl::StrCat("ok ", next))) return 2;
    for (const std::string& id : ids) {
      if (add) {
        live.insert(id);
      } else {
        live.erase(id);
      }
    }
  }
}

// Score of `ids` on the server: OK with one score per id, or the error
// (NOT_FOUND when one of them is not a live document).
absl::StatusOr<std::map<std::string, float>> Scores(
    Client& client, const std::vector<std::string>& ids) {
  Query q;
  q.corpus = absl::GetFlag(FLAGS_corpus);
  q.dim = kDim;
  q.tokens = QueryTokens();
  q.candidate_ids = ids;
  q.top_k = static_cast<int32_t>(ids.size());
  auto got = client.Rerank(q);
  if (!got.ok()) return got.status();
  std::map<std::string, float> out;
  for (const auto& r : got->results()) out[r.id()] = r.score();
  return out;
}

int Verify() {
  const std::map<int64_t, Batch> batches = ReadLog(absl::GetFlag(FLAGS_log));
  std::unique_ptr<Client> client = Connect();
  std::set<std::string> live, deleted;
  int failures = 0;
  auto fail = [&failures](const std::string& what) {
    std::fprintf(stderr, "crash_client verify: %s\n", what.c_str());
    ++failures;
  };
  int64_t acked = 0, in_flight = 0, in_flight_applied = 0;
  for (const auto& [b, batch] : batches) {
    if (batch.acked) {
      ++acked;
      for (const std::string& id : batch.ids) {
        if (batch.add) {
          live.insert(id);
          deleted.erase(id);
        } else {
          live.erase(id);
          deleted.insert(id);
        }
      }
      continue;
    }
    // In flight at a kill: all or nothing. Each id alone tells whether it
    // is live now.
    ++in_flight;
    int present = 0;
    for (const std::string& id : batch.ids) {
      present += Scores(*client, {id}).ok() ? 1 : 0;
    }
    const int n = static_cast<int>(batch.ids.size());
    const bool applied = batch.add ? present == n : present == 0;
    const bool untouched = batch.add ? present == 0 : present == n;
    if (!applied && !untouched) {
      fail(absl::StrCat("batch ", b, " was half applied: ", present, " of ", n,
                        " ids live"));
      continue;
    }
    if (applied) ++in_flight_applied;
    // Later batches never touch its ids, so its outcome is final.
    for (const std::string& id : batch.ids) {
      if (applied == batch.add) {
        live.insert(id);
        deleted.erase(id);
      } else {
        live.erase(id);
        deleted.insert(id);
      }
    }
  }
  const std::vector<std::string> want(live.begin(), live.end());
  for (size_t at = 0; at < want.size(); at += 500) {
    const std::vector<std::string> chunk(
        want.begin() + at, want.begin() + std::min(want.size(), at + 500));
    auto scores = Scores(*client, chunk);
    if (!scores.ok()) {
      fail(absl::StrCat("acknowledged documents missing: ",
                        scores.status().ToString()));
      continue;
    }
    for (const std::string& id : chunk) {
      const double ref = ReferenceScore(id);
      if (std::fabs((*scores)[id] - ref) > 1e-6) {
        fail(absl::StrCat(id, " scores ", (*scores)[id], ", reference ", ref));
      }
    }
  }
  for (const std::string& id : deleted) {
    if (Scores(*client, {id}).ok()) fail(absl::StrCat(id, " was deleted"));
  }
  auto info = client->GetCorpus(absl::GetFlag(FLAGS_corpus));
  if (!info.ok()) {
    fail(info.status().ToString());
  } else if (info->num_documents() != static_cast<int64_t>(live.size())) {
    fail(absl::StrCat("the corpus has ", info->num_documents(),
                      " documents; the log says ", live.size()));
  }
  std::printf(
      "crash_client verify: %lld acknowledged batches, %zu live documents "
      "scored, %zu deleted ones absent, %lld batches in flight at a kill "
      "(%lld applied): %s\n",
      static_cast<long long>(acked), live.size(), deleted.size(),
      static_cast<long long>(in_flight),
      static_cast<long long>(in_flight_applied), failures == 0 ? "OK" : "FAIL");
  return failures == 0 ? 0 : 1;
}

}  // namespace
}  // namespace maxsimd

int main(int argc, char** argv) {
  std::vector<char*> args = absl::ParseCommandLine(argc, argv);
  const std::string cmd = args.size() > 1 ? args[1] : "";
  if (cmd == "create") return maxsimd::Create();
  if (cmd == "write") return maxsimd::Write();
  if (cmd == "verify") return maxsimd::Verify();
  std::fprintf(stderr,
               "usage: crash_client create|write|verify --target=... "
               "--corpus=... --log=...\n");
  return 2;
}
