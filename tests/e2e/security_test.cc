// End to end, the security of the gRPC port with the real binaries: bad
// TLS or token flags stop start-up with a message naming the flag; admin
// tokens (two in one file, for a rotation) and --query_auth=token through
// `maxsimctl --token-file`; TLS and mutual TLS through `maxsimctl --tls-*`
// and `maxsimd_health --tls_*`, with certificates made by `openssl` at test
// time; and the server's whole output never holds a token.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/e2e/e2e_support.h"
#include "tests/server/test_certs.h"
#include "tests/support/http.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::ReadTestFile;
using ::maxsimd::testing::RunCommand;
using ::maxsimd::testing::ServerBinary;
using ::maxsimd::testing::ServerProcess;
using ::maxsimd::testing::TestCerts;
using ::maxsimd::testing::WithTestCerts;
using ::maxsimd::testing::WriteTestFile;
using ::testing::HasSubstr;
using ::testing::Not;

constexpr char kAdminToken[] = "e2e-admin-token-0123456789abcdef";
constexpr char kRotatedToken[] = "e2e-rotated-token-fedcba98765432";
constexpr char kQueryToken[] = "e2e-query-token-00112233445566778";
constexpr char kWrongToken[] = "e2e-wrong-token-zzzzzzzzzzzzzzzzz";
// 64 synthetic documents of 16 tokens at dim 32.
constexpr char kDemoCorpus[] = "--demo_corpus=demo:64:16:32";

std::string Ctl(const std::string& target, const std::string& args) {
  const char* ctl = std::getenv("MAXSIMD_E2E_CTL_BIN");
  return absl::StrCat(ctl != nullptr ? ctl : MAXSIMCTL_BIN,
                      " --target=", target, " ", args, " 2>&1");
}

std::string Health(const std::string& args) {
  return absl::StrCat(MAXSIMD_HEALTH_BIN, " ", args, " 2>&1");
}

class SecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = std::filesystem::temp_directory_path() /
           absl::StrCat("maxsimd-security-", getpid(), "-", counter_++);
    std::filesystem::create_directories(dir_);
  }
  void TearDown() override { std::filesystem::remove_all(dir_); }

  std::string Write(const std::string& name, const std::string& text) {
    const std::string path = (dir_ / name).string();
    EXPECT_TRUE(WriteTestFile(path, text)) << path;
    // Private to the owner: the server refuses secret files others can read.
    std::filesystem::permissions(path, std::filesystem::perms::owner_read |
                                           std::filesystem::perms::owner_write);
    return path;
  }
  std::string Path(const std::string& name) const {
    return (dir_ / name).string();
  }

  static inline int counter_ = 0;
  std::filesystem::path dir_;
};

// ---------------------------------------------------------------------------
// Start-up

TEST_F(SecurityTest, BadFlagsStopStartUpNamingTheFlag) {
  const std::string token_file = Write("tokens", kAdminToken);
  const std::string missing = Path("missing.pem");
  const std::string garbage = Write("garbage.pem", "no certificate here\n");
  const std::string readable_tokens = Write("readable-tokens", kAdminToken);
  std::filesystem::permissions(readable_tokens,
                               std::filesystem::perms::owner_read |
                                   std::filesystem::perms::owner_write |
                                   std::filesystem::perms::group_read |
                                   std::filesystem::perms::others_read);
  struct Case {
    std::string flags;
    int exit_code;
    std::vector<std::string> expected;
  };
  const Case cases[] = {
      {absl::StrCat("--tls_cert=", missing, " --tls_key=", garbage),
       1,
       {"--tls_cert", missing}},
      {absl::StrCat("--tls_cert=", garbage, " --tls_key=", garbage),
       1,
       {"--tls_cert", "no PEM certificate"}},
      {absl::StrCat("--tls_cert=", garbage), 1, {"--tls_cert and --tls_key"}},
      {absl::StrCat("--tls_client_ca=", garbage), 1, {"--tls_client_ca"}},
      {absl::StrCat("--admin_token_file=", missing),
       1,
       {"--admin_token_file", missing}},
      {absl::StrCat("--admin_token_file=", Write("short", "too-short\n")),
       1,
       {"--admin_token_file", "line 1"}},
      {"--admin_client_names=ops", 1, {"--admin_client_names needs"}},
      {"--query_auth=tokens", 2, {"--query_auth"}},
      {"--query_auth=token", 1, {"--query_auth=token needs"}},
      {absl::StrCat("--query_token_file=", token_file),
       1,
       {"--query_token_file"}},
      // A token file others can read, as the binary reports it.
      {absl::StrCat("--admin_token_file=", readable_tokens),
       1,
       {"--admin_token_file", "mode 0644", "--allow_readable_secret_files"}},
  };
  for (const Case& c : cases) {
    // `timeout` in case a start-up that should fail serves instead.
    const auto [rc, out] = RunCommand(absl::StrCat(
        "timeout 30 ", ServerBinary(),
        " --listen=127.0.0.1:0 --metrics_listen= --cpu ", c.flags, " 2>&1"));
    EXPECT_EQ(rc, c.exit_code) << c.flags << "\n" << out;
    for (const std::string& part : c.expected) {
      EXPECT_THAT(out, HasSubstr(part)) << c.flags;
    }
    EXPECT_THAT(out, Not(HasSubstr("too-short"))) << c.flags;
  }
}

// ---------------------------------------------------------------------------
// Tokens

TEST_F(SecurityTest, TokensThroughMaxsimctlAndNeverInTheOutput) {
  const std::string admin_tokens = Write(
      "admin-tokens", absl::StrCat(kAdminToken, "\n", kRotatedToken, "\n"));
  const std::string query_tokens = Write("query-tokens", kQueryToken);
  const std::string log_path = Path("server.log");
  auto server = ServerProcess::Start(
      {kDemoCorpus, "--log_level=debug",
       absl::StrCat("--admin_token_file=", admin_tokens), "--query_auth=token",
       absl::StrCat("--query_token_file=", query_tokens)},
      absl::Seconds(30), log_path);
  ASSERT_TRUE(server.ok()) << server.status();
  const std::string target = (*server)->target();
  // maxsimctl reads the first token of a file; files of one token each.
  const std::string admin = Write("admin", kAdminToken);
  const std::string rotated =
      Write("rotated", absl::StrCat("# the new one\n", kRotatedToken, "\n"));
  const std::string query = Write("query", kQueryToken);
  const std::string wrong = Write("wrong", kWrongToken);

  // Admin: none, wrong, query token refused and nothing created.
  auto [rc, out] = RunCommand(Ctl(target, "create --name c --dim 32"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("UNAUTHENTICATED"));
  std::tie(rc, out) =
      RunCommand(Ctl(target, absl::StrCat("--token-file=", wrong,
                                          " create --name c --dim 32")));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("UNAUTHENTICATED"));
  std::tie(rc, out) =
      RunCommand(Ctl(target, absl::StrCat("--token-file=", query,
                                          " create --name c --dim 32")));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("PERMISSION_DENIED"));
  std::tie(rc, out) = RunCommand(
      Ctl(target, absl::StrCat("--token-file=", admin, " --json list")));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, Not(HasSubstr("\"c\"")));

  // Both tokens of the rotation work; --token_file is spelled either way.
  std::tie(rc, out) =
      RunCommand(Ctl(target, absl::StrCat("--token-file=", admin,
                                          " create --name c --dim 32")));
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      RunCommand(Ctl(target, absl::StrCat("--token_file=", rotated,
                                          " create --name d --dim 32")));
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = RunCommand(
      Ctl(target, absl::StrCat("--token-file=", rotated, " log-level")));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("debug"));
  std::tie(rc, out) = RunCommand(Ctl(target, "log-level"));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("UNAUTHENTICATED"));

  // Queries need a query (or admin) token under --query_auth=token.
  std::tie(rc, out) = RunCommand(Ctl(
      target, absl::StrCat("generate --out ", Path("gen"),
                           " --docs 8 --dim 32 --queries 1 --query-tokens 4")));
  ASSERT_EQ(rc, 0) << out;
  const std::string query_cmd = absl::StrCat(
      "query --corpus demo --top-k 3 --query ", Path("gen/query_0.npy"));
  std::tie(rc, out) = RunCommand(Ctl(target, query_cmd));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("UNAUTHENTICATED"));
  std::tie(rc, out) = RunCommand(
      Ctl(target, absl::StrCat("--token-file=", query, " --json ", query_cmd)));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("doc-"));
  // Health stays open.
  std::tie(rc, out) = RunCommand(Ctl(target, "health"));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("SERVING"));

  EXPECT_EQ((*server)->TerminateAndWait(), 0);
  const std::string log = ReadTestFile(log_path);
  EXPECT_THAT(log, HasSubstr("CreateCorpus UNAUTHENTICATED"));
  EXPECT_THAT(log, HasSubstr("CreateCorpus PERMISSION_DENIED"));
  EXPECT_THAT(log, HasSubstr("Rerank OK"));
  for (const char* token :
       {kAdminToken, kRotatedToken, kQueryToken, kWrongToken}) {
    EXPECT_THAT(log, Not(HasSubstr(token))) << token;
  }
}

// ---------------------------------------------------------------------------
// TLS and mutual TLS

// A maxsimd child process on TLS (ServerProcess waits for health over
// plaintext, so it cannot start one): waits until maxsimd_health, with the
// client certificate of `certs`, reports SERVING.
class TlsServer {
 public:
  TlsServer(const TestCerts& certs, const std::vector<std::string>& flags)
      : port_(::maxsimd::testing::FreePort()) {
    std::vector<std::string> args = {
        ServerBinary(),
        absl::StrCat("--listen=127.0.0.1:", port_),
        "--metrics_listen=",
        "--cpu",
        "--log_level=warn",
        absl::StrCat("--tls_cert=", certs.server_cert),
        absl::StrCat("--tls_key=", certs.server_key),
    };
    args.insert(args.end(), flags.begin(), flags.end());
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    pid_ = fork();
    if (pid_ == 0) {
      execv(argv[0], argv.data());
      _exit(127);
    }
    const std::string probe = Health(absl::StrCat(
        "--target=", target(), " --timeout=1s --tls_ca_cert=", certs.ca_cert,
        " --tls_cert=", certs.query_cert, " --tls_key=", certs.query_key));
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (absl::Now() < deadline && !serving_) {
      if (waitpid(pid_, nullptr, WNOHANG) == pid_) {
        pid_ = -1;
        break;
      }
      serving_ = RunCommand(probe).first == 0;
      if (!serving_) std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  ~TlsServer() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }
  bool serving() const { return serving_; }
  std::string target() const { return absl::StrCat("127.0.0.1:", port_); }

 private:
  int port_;
  pid_t pid_ = -1;
  bool serving_ = false;
};

class TlsSecurityTest : public WithTestCerts<TlsSecurityTest, SecurityTest> {
 protected:
  // maxsimctl's flags for TLS with the client certificate `name` ("admin",
  // "query", "rogue"; "" = none).
  static std::string TlsFlags(const std::string& name) {
    std::string flags = absl::StrCat("--tls-ca=", certs_->ca_cert);
    if (!name.empty()) {
      absl::StrAppend(&flags, " --tls-cert=", certs_->dir, "/", name,
                      ".pem --tls_key=", certs_->dir, "/", name, ".key");
    }
    return flags;
  }
};

TEST_F(TlsSecurityTest, MaxsimctlAndHealthOverMutualTls) {
  const std::string admin_token = Write("admin", kAdminToken);
  TlsServer server(
      *certs_, {absl::StrCat("--tls_client_ca=", certs_->ca_cert),
                "--admin_client_names=admin-client",
                absl::StrCat("--admin_token_file=", admin_token), kDemoCorpus});
  ASSERT_TRUE(server.serving());
  const std::string target = server.target();

  // The admin certificate administers; the other needs the token.
  auto [rc, out] = RunCommand(
      Ctl(target, absl::StrCat(TlsFlags("admin"), " create --name a --dim 8")));
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = RunCommand(
      Ctl(target, absl::StrCat(TlsFlags("query"), " create --name b --dim 8")));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(out, HasSubstr("--admin_client_names"));
  std::tie(rc, out) = RunCommand(
      Ctl(target, absl::StrCat(TlsFlags("query"), " --token-file=", admin_token,
                               " create --name b --dim 8")));
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) =
      RunCommand(Ctl(target, absl::StrCat(TlsFlags("admin"), " --json list")));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("\"b\""));
  // The server name may differ from the target's host.
  std::tie(rc, out) = RunCommand(Ctl(
      target,
      absl::StrCat(TlsFlags("query"), " --tls-server-name=localhost health")));
  EXPECT_EQ(rc, 0) << out;

  // Without a client certificate, with one of another CA, or in plaintext,
  // nothing gets through (the handshake fails: UNAVAILABLE).
  for (const std::string& flags :
       {TlsFlags(""), TlsFlags("rogue"), std::string()}) {
    std::tie(rc, out) = RunCommand(Ctl(
        target, absl::StrCat(flags, " --timeout=5s create --name x --dim 8")));
    EXPECT_EQ(rc, 1) << flags << "\n" << out;
    EXPECT_THAT(out, HasSubstr("UNAVAILABLE")) << flags;
  }
  std::tie(rc, out) =
      RunCommand(Ctl(target, absl::StrCat(TlsFlags("admin"), " --json list")));
  EXPECT_THAT(out, Not(HasSubstr("\"x\"")));

  // maxsimd_health: exit 0 with a client certificate, 2 (no connection)
  // without one.
  const std::string health = absl::StrCat(
      "--target=", target, " --timeout=3s --tls_ca_cert=", certs_->ca_cert);
  std::tie(rc, out) =
      RunCommand(Health(absl::StrCat(health, " --tls_cert=", certs_->query_cert,
                                     " --tls_key=", certs_->query_key)));
  EXPECT_EQ(rc, 0) << out;
  std::tie(rc, out) = RunCommand(Health(health));
  EXPECT_EQ(rc, 2) << out;
  std::tie(rc, out) = RunCommand(
      Health(absl::StrCat(health, " --tls_cert=", certs_->query_cert)));
  EXPECT_EQ(rc, 1) << out;  // usage: --tls_key missing
  EXPECT_THAT(out, HasSubstr("--tls_key"));
}

TEST_F(TlsSecurityTest, MaxsimctlOverTlsWithoutClientCertificates) {
  TlsServer server(*certs_, {kDemoCorpus});
  ASSERT_TRUE(server.serving());
  const std::string target = server.target();
  auto [rc, out] =
      RunCommand(Ctl(target, absl::StrCat(TlsFlags(""), " --json list")));
  EXPECT_EQ(rc, 0) << out;
  EXPECT_THAT(out, HasSubstr("\"demo\""));
  // A client that does not trust the server's CA, or speaks plaintext.
  std::tie(rc, out) =
      RunCommand(Ctl(target, absl::StrCat("--tls-ca=", certs_->other_ca_cert,
                                          " --timeout=5s list")));
  EXPECT_EQ(rc, 1) << out;
  EXPECT_THAT(out, HasSubstr("UNAVAILABLE"));
  std::tie(rc, out) = RunCommand(Ctl(target, "--timeout=5s list"));
  EXPECT_EQ(rc, 1) << out;
  // Usage errors name the flag.
  std::tie(rc, out) = RunCommand(
      Ctl(target, absl::StrCat("--tls-ca=", Path("missing.pem"), " list")));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_THAT(out, HasSubstr("--tls-ca"));
  std::tie(rc, out) = RunCommand(
      Ctl(target, absl::StrCat("--tls-cert=", certs_->admin_cert, " list")));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_THAT(out, HasSubstr("--tls-key"));
  std::tie(rc, out) = RunCommand(
      Ctl(target,
          absl::StrCat("--token-file=", Write("empty", "# none\n"), " list")));
  EXPECT_EQ(rc, 2) << out;
  EXPECT_THAT(out, HasSubstr("--token-file"));
}

}  // namespace
}  // namespace maxsimd
