// server/auth.cc: the constant-time compare, token files, TLS files, the
// modes of secret files, and the rules of Authenticator, then a server
// in-process over loopback sockets: refused Admin calls change nothing, every
// Admin method is covered, queries are open unless --query_auth says otherwise,
// health and reflection stay open, tokens never reach the log, and TLS and
// mutual TLS with certificates made by `openssl` at test time (test_certs.h).
#include "server/auth.h"

#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "client/client.h"
#include "grpc/health/v1/health.grpc.pb.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "index/registry.h"
#include "maxsimd/v1/admin.grpc.pb.h"
#include "server/logging.h"
#include "server/server.h"
#include "spdlog/sinks/ostream_sink.h"
#include "spdlog/spdlog.h"
#include "tests/server/test_certs.h"
#include "tests/support/captured_log.h"
#include "tests/support/status_matchers.h"
#include "tests/support/temp_dir.h"

namespace maxsimd {
namespace {

using ::maxsimd::testing::ReadTestFile;
using ::maxsimd::testing::StatusIs;
using ::maxsimd::testing::WithTestCerts;
using ::maxsimd::testing::WriteTestFile;
using ::testing::AllOf;
using ::testing::HasSubstr;
using ::testing::Not;

// Tokens of at least 16 characters, as the server requires.
constexpr char kAdminToken[] = "admin-token-0123456789abcdef";
constexpr char kRotatedToken[] = "rotated-token-fedcba9876543210";
constexpr char kQueryToken[] = "query-token-00112233445566778899";
constexpr char kWrongToken[] = "wrong-token-aaaaaaaaaaaaaaaaaaaa";

// A fresh directory for one test's token files, removed with the object.
class TokenDir : public ::maxsimd::testing::TempDir {
 public:
  TokenDir() : TempDir("maxsimd-auth-") {}
  // Writes `text` to `name` in the directory with `mode` (private by
  // default, as the server wants token files) and returns its path.
  std::string Write(const std::string& name, const std::string& text,
                    mode_t mode = 0600) const {
    const std::string file = absl::StrCat(path(), "/", name);
    EXPECT_TRUE(WriteTestFile(file, text)) << file;
    EXPECT_EQ(::chmod(file.c_str(), mode), 0) << file;
    return file;
  }
};

using ::maxsimd::testing::CapturedLog;

// ---------------------------------------------------------------------------
// ConstantTimeEquals

TEST(ConstantTimeEqualsTest, EqualStringsAreEqual) {
  EXPECT_TRUE(ConstantTimeEquals(kAdminToken, kAdminToken));
  EXPECT_TRUE(
      ConstantTimeEquals(std::string(kAdminToken), std::string(kAdminToken)));
  EXPECT_TRUE(ConstantTimeEquals("", ""));
  EXPECT_TRUE(ConstantTimeEquals("x", "x"));
}

TEST(ConstantTimeEqualsTest, EveryByteCounts) {
  const std::string secret = kAdminToken;
  for (size_t i = 0; i < secret.size(); ++i) {
    std::string given = secret;
    given[i] ^= 0x01;
    EXPECT_FALSE(ConstantTimeEquals(given, secret)) << "byte " << i;
    given[i] = static_cast<char>(0x80 | secret[i]);  // high bit only
    EXPECT_FALSE(ConstantTimeEquals(given, secret)) << "byte " << i;
  }
}

TEST(ConstantTimeEqualsTest, LengthsMustMatch) {
  const std::string secret = kAdminToken;
  EXPECT_FALSE(ConstantTimeEquals(secret.substr(0, secret.size() - 1), secret));
  EXPECT_FALSE(ConstantTimeEquals(secret.substr(0, 1), secret));
  EXPECT_FALSE(ConstantTimeEquals(secret + "x", secret));
  // Longer than the secret, comparing equal byte for byte while it cycles.
  EXPECT_FALSE(ConstantTimeEquals(secret + secret, secret));
  EXPECT_FALSE(ConstantTimeEquals("", secret));
  EXPECT_FALSE(ConstantTimeEquals(secret, ""));
  // A NUL is a byte like any other.
  EXPECT_FALSE(ConstantTimeEquals(std::string("ab\0", 3), "ab"));
}

// ---------------------------------------------------------------------------
// Token files

TEST(ReadTokenFileTest, ReadsEveryTokenSkippingCommentsAndBlankLines) {
  TokenDir dir;
  const std::string path =
      dir.Write("tokens", absl::StrCat("# rotation: new first\n\n  ",
                                       kRotatedToken, "  \r\n", kAdminToken));
  absl::StatusOr<std::vector<std::string>> tokens =
      ReadTokenFile(path, "admin_token_file", false);
  MAXSIMD_ASSERT_OK(tokens);
  EXPECT_EQ(*tokens, (std::vector<std::string>{kRotatedToken, kAdminToken}));
}

TEST(ReadTokenFileTest, UnreadableOrEmptyFilesNameTheFlagAndThePath) {
  TokenDir dir;
  const std::string missing = dir.path() + "/missing";
  EXPECT_THAT(ReadTokenFile(missing, "admin_token_file", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--admin_token_file"),
                             HasSubstr(missing), HasSubstr("No such file"))));
  EXPECT_THAT(
      ReadTokenFile(dir.Write("empty", ""), "query_token_file", false),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("--query_token_file"), HasSubstr("empty"))));
  EXPECT_THAT(ReadTokenFile(dir.Write("comments", "# none yet\n\n"),
                            "admin_token_file", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("holds no token")));
  EXPECT_THAT(ReadTokenFile(dir.path(), "admin_token_file", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--admin_token_file")));
}

TEST(ReadTokenFileTest, BadTokensNameTheLineButNotTheToken) {
  TokenDir dir;
  const std::string short_token = "short-secret";
  EXPECT_THAT(ReadTokenFile(dir.Write("short", absl::StrCat(kAdminToken, "\n",
                                                            short_token, "\n")),
                            "admin_token_file", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("line 2"), HasSubstr("16 to 4096"),
                             Not(HasSubstr(short_token)))));
  const std::string spaced = "a token with spaces in it";
  EXPECT_THAT(
      ReadTokenFile(dir.Write("spaced", spaced), "admin_token_file", false),
      StatusIs(absl::StatusCode::kInvalidArgument,
               AllOf(HasSubstr("line 1"), Not(HasSubstr(spaced)))));
}

// ---------------------------------------------------------------------------
// Secret files: judged by their mode bits, never by trying to read them, so
// that the tests hold when run as root (who reads any file).

// Modes that grant group or others some access, each refused.
constexpr mode_t kOpenModes[] = {0644, 0666, 0604, 0640, 0620, 0602, 0660};

std::string Octal(mode_t mode) {
  char buf[16];
  std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(mode));
  return buf;
}

TEST(SecretFileModeTest, OpenModesAreRefusedNamingFlagFileModeAndFixes) {
  TokenDir dir;
  for (mode_t mode : kOpenModes) {
    const std::string path =
        dir.Write(absl::StrCat("tokens-", Octal(mode)), kAdminToken, mode);
    const auto expected =
        StatusIs(absl::StatusCode::kFailedPrecondition,
                 AllOf(HasSubstr("--admin_token_file"), HasSubstr(path),
                       HasSubstr(absl::StrCat("mode ", Octal(mode))),
                       HasSubstr("chmod 600"),
                       HasSubstr("--allow_readable_secret_files"),
                       Not(HasSubstr("symlink")), Not(HasSubstr(kAdminToken))));
    EXPECT_THAT(CheckSecretFileMode(path, "admin_token_file", false), expected);
    EXPECT_THAT(ReadTokenFile(path, "admin_token_file", false), expected);
  }
}

TEST(SecretFileModeTest, ASymlinkIsJudgedByItsTarget) {
  TokenDir dir;
  const std::string open_target = dir.Write("open-target", kAdminToken, 0644);
  const std::string open_link = dir.path() + "/open-link";
  ASSERT_EQ(::symlink(open_target.c_str(), open_link.c_str()), 0);
  const auto refused = StatusIs(
      absl::StatusCode::kFailedPrecondition,
      AllOf(HasSubstr("--query_token_file"), HasSubstr(open_link),
            HasSubstr(absl::StrCat("a symlink to \"", open_target, "\"")),
            HasSubstr("mode 0644")));
  EXPECT_THAT(CheckSecretFileMode(open_link, "query_token_file", false),
              refused);
  EXPECT_THAT(ReadTokenFile(open_link, "query_token_file", false), refused);
  // The link's own mode (0777 on Linux) does not count: a link to a
  // private file is fine.
  const std::string private_target =
      dir.Write("private-target", kAdminToken, 0600);
  const std::string private_link = dir.path() + "/private-link";
  ASSERT_EQ(::symlink(private_target.c_str(), private_link.c_str()), 0);
  MAXSIMD_EXPECT_OK(
      CheckSecretFileMode(private_link, "query_token_file", false));
  MAXSIMD_EXPECT_OK(ReadTokenFile(private_link, "query_token_file", false));
  // A link to nothing cannot be read.
  const std::string dangling = dir.path() + "/dangling";
  ASSERT_EQ(::symlink((dir.path() + "/none").c_str(), dangling.c_str()), 0);
  EXPECT_THAT(CheckSecretFileMode(dangling, "query_token_file", false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--query_token_file"),
                             HasSubstr("No such file"))));
}

TEST(SecretFileModeTest, OwnerOnlyModesAreAccepted) {
  TokenDir dir;
  for (mode_t mode : {0600, 0400, 0700}) {
    const std::string path =
        dir.Write(absl::StrCat("tokens-", Octal(mode)), kAdminToken, mode);
    MAXSIMD_EXPECT_OK(CheckSecretFileMode(path, "admin_token_file", false))
        << Octal(mode);
    absl::StatusOr<std::vector<std::string>> tokens =
        ReadTokenFile(path, "admin_token_file", false);
    MAXSIMD_ASSERT_OK(tokens) << Octal(mode);
    EXPECT_EQ(*tokens, std::vector<std::string>{kAdminToken});
  }
}

TEST(SecretFileModeTest, AllowAcceptsOpenModesWithAWarning) {
  TokenDir dir;
  for (mode_t mode : kOpenModes) {
    CapturedLog log(spdlog::level::warn);
    const std::string path =
        dir.Write(absl::StrCat("tokens-", Octal(mode)), kAdminToken, mode);
    MAXSIMD_EXPECT_OK(CheckSecretFileMode(path, "admin_token_file", true));
    absl::StatusOr<std::vector<std::string>> tokens =
        ReadTokenFile(path, "admin_token_file", true);
    MAXSIMD_ASSERT_OK(tokens);
    EXPECT_EQ(*tokens, std::vector<std::string>{kAdminToken});
    const std::string text = log.Text();
    EXPECT_THAT(text, AllOf(HasSubstr("[warn] --admin_token_file"),
                            HasSubstr(path), HasSubstr("mode " + Octal(mode)),
                            HasSubstr("--allow_readable_secret_files"),
                            Not(HasSubstr(kAdminToken))));
  }
}

TEST(SecretFileModeTest, AuthenticatorRefusesOpenTokenFilesUnlessAllowed) {
  TokenDir dir;
  AuthOptions admin;
  admin.admin_token_file = dir.Write("admin", kAdminToken, 0644);
  EXPECT_THAT(Authenticator::Create(admin, false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("--admin_token_file"),
                             HasSubstr(admin.admin_token_file))));
  admin.allow_readable_secrets = true;
  MAXSIMD_EXPECT_OK(Authenticator::Create(admin, false));

  AuthOptions query;
  query.admin_tokens = {kAdminToken};
  query.query_auth = QueryAuth::kToken;
  query.query_token_file = dir.Write("query", kQueryToken, 0640);
  EXPECT_THAT(Authenticator::Create(query, false),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("--query_token_file"),
                             HasSubstr(query.query_token_file),
                             HasSubstr("mode 0640"))));
  query.allow_readable_secrets = true;
  MAXSIMD_EXPECT_OK(Authenticator::Create(query, false));
}

// ---------------------------------------------------------------------------
// TLS files

class MakeServerCredentialsTest
    : public WithTestCerts<MakeServerCredentialsTest> {};

TEST_F(MakeServerCredentialsTest, NoFilesIsPlaintext) {
  MAXSIMD_EXPECT_OK(MakeServerCredentials(TlsOptions()));
}

TEST_F(MakeServerCredentialsTest, GoodFilesMakeTlsAndMutualTls) {
  TlsOptions tls;
  tls.cert_file = certs_->server_cert;
  tls.key_file = certs_->server_key;
  MAXSIMD_EXPECT_OK(MakeServerCredentials(tls));
  tls.client_ca_file = certs_->ca_cert;
  MAXSIMD_EXPECT_OK(MakeServerCredentials(tls));
}

TEST_F(MakeServerCredentialsTest, OpenKeyFileIsRefusedUnlessAllowed) {
  TokenDir dir;
  const std::string key = ReadTestFile(certs_->server_key);
  ASSERT_FALSE(key.empty());
  TlsOptions tls;
  tls.cert_file = certs_->server_cert;  // 0644, and that is fine
  for (mode_t mode : {0644, 0640, 0604}) {
    tls.key_file = dir.Write(absl::StrCat("key-", Octal(mode)), key, mode);
    tls.allow_readable_secrets = false;
    EXPECT_THAT(MakeServerCredentials(tls),
                StatusIs(absl::StatusCode::kFailedPrecondition,
                         AllOf(HasSubstr("--tls_key"), HasSubstr(tls.key_file),
                               HasSubstr("mode " + Octal(mode)))));
    tls.allow_readable_secrets = true;
    MAXSIMD_EXPECT_OK(MakeServerCredentials(tls));
  }
  // A symlink to an open key is refused too, and one to a private key not.
  const std::string link = dir.path() + "/key-link";
  ASSERT_EQ(::symlink(dir.Write("open-key", key, 0644).c_str(), link.c_str()),
            0);
  tls.key_file = link;
  tls.allow_readable_secrets = false;
  EXPECT_THAT(MakeServerCredentials(tls),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr("--tls_key"), HasSubstr("symlink"))));
  tls.key_file = dir.Write("private-key", key, 0400);
  MAXSIMD_EXPECT_OK(MakeServerCredentials(tls));
}

TEST_F(MakeServerCredentialsTest, BadFilesNameTheFlag) {
  TokenDir dir;
  const std::string missing = dir.path() + "/missing.pem";
  const std::string garbage = dir.Write("garbage.pem", "not a certificate\n");
  struct Case {
    std::string cert, key, ca;
    std::vector<std::string> expected;  // substrings of the message
  };
  const Case cases[] = {
      {certs_->server_cert, "", "", {"--tls_cert and --tls_key", "--tls_cert"}},
      {"", certs_->server_key, "", {"--tls_cert and --tls_key", "--tls_key"}},
      {"", "", certs_->ca_cert, {"--tls_client_ca needs --tls_cert"}},
      {missing, certs_->server_key, "", {"--tls_cert", missing}},
      {certs_->server_cert, missing, "", {"--tls_key", missing}},
      {garbage, certs_->server_key, "", {"--tls_cert", "no PEM certificate"}},
      {certs_->server_cert, garbage, "", {"--tls_key", "no PEM private key"}},
      {certs_->server_cert, certs_->admin_key, "", {"--tls_key", "not belong"}},
      {certs_->server_cert,
       certs_->server_key,
       missing,
       {"--tls_client_ca", missing}},
      {certs_->server_cert,
       certs_->server_key,
       garbage,
       {"--tls_client_ca", "no PEM certificate"}},
  };
  for (const Case& c : cases) {
    TlsOptions tls;
    tls.cert_file = c.cert;
    tls.key_file = c.key;
    tls.client_ca_file = c.ca;
    const absl::Status status = MakeServerCredentials(tls).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument)
        << c.cert << " " << c.key << " " << c.ca << ": " << status;
    for (const std::string& part : c.expected) {
      EXPECT_THAT(std::string(status.message()), HasSubstr(part));
    }
  }
}

// ---------------------------------------------------------------------------
// Authenticator's rules, on credentials as a call would present them

PresentedCredentials Bearer(const std::string& token) {
  PresentedCredentials c;
  c.authorization_entries = 1;
  c.authorization = absl::StrCat("Bearer ", token);
  return c;
}

PresentedCredentials Certificate(std::vector<std::string> names) {
  PresentedCredentials c;
  c.certificate_verified = true;
  c.certificate_names = std::move(names);
  return c;
}

std::unique_ptr<Authenticator> MakeAuthenticator(const AuthOptions& options,
                                                 bool mutual_tls) {
  absl::StatusOr<std::unique_ptr<Authenticator>> a =
      Authenticator::Create(options, mutual_tls);
  EXPECT_TRUE(a.ok()) << a.status();
  return a.ok() ? *std::move(a) : nullptr;
}

TEST(AuthenticatorTest, OpenWithoutCredentials) {
  auto auth = MakeAuthenticator(AuthOptions(), /*mutual_tls=*/false);
  ASSERT_NE(auth, nullptr);
  EXPECT_FALSE(auth->Protects(Scope::kAdmin));
  EXPECT_FALSE(auth->Protects(Scope::kQuery));
  MAXSIMD_EXPECT_OK(
      auth->Authorize(PresentedCredentials(), Scope::kAdmin, "Admin.X"));
  // Even a wrong token does not matter when nothing is protected.
  MAXSIMD_EXPECT_OK(
      auth->Authorize(Bearer(kWrongToken), Scope::kAdmin, "Admin.X"));
}

TEST(AuthenticatorTest, AdminTokenRules) {
  TokenDir dir;
  AuthOptions o;
  o.admin_tokens = {kAdminToken};
  o.query_auth = QueryAuth::kToken;
  o.query_token_file = dir.Write("query", kQueryToken);
  auto auth = MakeAuthenticator(o, /*mutual_tls=*/false);
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->Protects(Scope::kAdmin));
  MAXSIMD_EXPECT_OK(
      auth->Authorize(Bearer(kAdminToken), Scope::kAdmin, "Admin.Drop"));
  PresentedCredentials lower = Bearer(kAdminToken);
  lower.authorization = absl::StrCat("bearer ", kAdminToken);
  MAXSIMD_EXPECT_OK(auth->Authorize(lower, Scope::kAdmin, "Admin.Drop"));

  EXPECT_THAT(
      auth->Authorize(PresentedCredentials(), Scope::kAdmin, "Admin.Drop"),
      StatusIs(absl::StatusCode::kUnauthenticated,
               AllOf(HasSubstr("Admin.Drop"), HasSubstr("no credential"))));
  EXPECT_THAT(
      auth->Authorize(Bearer(kWrongToken), Scope::kAdmin, "Admin.Drop"),
      StatusIs(absl::StatusCode::kUnauthenticated,
               AllOf(HasSubstr("not valid"), Not(HasSubstr(kWrongToken)))));
  // A prefix or an extension of a valid token is just as wrong.
  EXPECT_THAT(auth->Authorize(Bearer(std::string(kAdminToken).substr(0, 20)),
                              Scope::kAdmin, "Admin.Drop"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(auth->Authorize(Bearer(absl::StrCat(kAdminToken, "x")),
                              Scope::kAdmin, "Admin.Drop"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  PresentedCredentials basic;
  basic.authorization_entries = 1;
  basic.authorization = absl::StrCat("Basic ", kAdminToken);
  EXPECT_THAT(auth->Authorize(basic, Scope::kAdmin, "Admin.Drop"),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("Bearer <token>")));
  PresentedCredentials twice = Bearer(kAdminToken);
  twice.authorization_entries = 2;
  EXPECT_THAT(auth->Authorize(twice, Scope::kAdmin, "Admin.Drop"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  // Known, but not allowed: a query token on Admin.
  EXPECT_THAT(
      auth->Authorize(Bearer(kQueryToken), Scope::kAdmin, "Admin.Drop"),
      StatusIs(absl::StatusCode::kPermissionDenied,
               AllOf(HasSubstr("query token"), Not(HasSubstr(kQueryToken)))));
}

TEST(AuthenticatorTest, QueryTokenRules) {
  TokenDir dir;
  AuthOptions o;
  o.admin_token_file = dir.Write("admin", kAdminToken);
  auto open_queries = MakeAuthenticator(o, /*mutual_tls=*/false);
  ASSERT_NE(open_queries, nullptr);
  EXPECT_FALSE(open_queries->Protects(Scope::kQuery));
  MAXSIMD_EXPECT_OK(open_queries->Authorize(PresentedCredentials(),
                                            Scope::kQuery, "Reranker.Rerank"));

  o.query_auth = QueryAuth::kToken;
  o.query_token_file = dir.Write("query", kQueryToken);
  auto auth = MakeAuthenticator(o, /*mutual_tls=*/false);
  ASSERT_NE(auth, nullptr);
  EXPECT_TRUE(auth->Protects(Scope::kQuery));
  MAXSIMD_EXPECT_OK(
      auth->Authorize(Bearer(kQueryToken), Scope::kQuery, "Reranker.Rerank"));
  MAXSIMD_EXPECT_OK(
      auth->Authorize(Bearer(kAdminToken), Scope::kQuery, "Reranker.Rerank"));
  EXPECT_THAT(
      auth->Authorize(PresentedCredentials(), Scope::kQuery, "Reranker.Rerank"),
      StatusIs(absl::StatusCode::kUnauthenticated, HasSubstr("a query token")));
  EXPECT_THAT(
      auth->Authorize(Bearer(kWrongToken), Scope::kQuery, "Reranker.Rerank"),
      StatusIs(absl::StatusCode::kUnauthenticated));
}

TEST(AuthenticatorTest, ClientCertificateRules) {
  // Mutual TLS alone: every verified certificate may administer.
  auto any_certificate = MakeAuthenticator(AuthOptions(), /*mutual_tls=*/true);
  ASSERT_NE(any_certificate, nullptr);
  EXPECT_TRUE(any_certificate->Protects(Scope::kAdmin));
  MAXSIMD_EXPECT_OK(any_certificate->Authorize(Certificate({"query-client"}),
                                               Scope::kAdmin, "Admin.Drop"));
  // An unverified one counts for nothing.
  PresentedCredentials unverified = Certificate({"admin-client"});
  unverified.certificate_verified = false;
  EXPECT_THAT(
      any_certificate->Authorize(unverified, Scope::kAdmin, "Admin.Drop"),
      StatusIs(absl::StatusCode::kUnauthenticated));

  AuthOptions o;
  o.admin_client_names = {"admin-client", "spiffe://example/ops"};
  o.admin_tokens = {kAdminToken};
  o.query_auth = QueryAuth::kToken;
  auto auth = MakeAuthenticator(o, /*mutual_tls=*/true);
  ASSERT_NE(auth, nullptr);
  // The CN or any SAN may be the listed name.
  MAXSIMD_EXPECT_OK(auth->Authorize(Certificate({"admin-client"}),
                                    Scope::kAdmin, "Admin.Drop"));
  MAXSIMD_EXPECT_OK(
      auth->Authorize(Certificate({"ops-7", "spiffe://example/ops"}),
                      Scope::kAdmin, "Admin.Drop"));
  // A certificate that may administer may query.
  MAXSIMD_EXPECT_OK(auth->Authorize(Certificate({"admin-client"}),
                                    Scope::kQuery, "Reranker.Rerank"));
  EXPECT_THAT(auth->Authorize(Certificate({"query-client"}), Scope::kAdmin,
                              "Admin.Drop"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("query-client"),
                             HasSubstr("--admin_client_names"))));
  EXPECT_THAT(auth->Authorize(Certificate({"query-client"}), Scope::kQuery,
                              "Reranker.Rerank"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  // A token still works next to an unlisted certificate.
  PresentedCredentials both = Certificate({"query-client"});
  both.authorization_entries = 1;
  both.authorization = absl::StrCat("Bearer ", kAdminToken);
  MAXSIMD_EXPECT_OK(auth->Authorize(both, Scope::kAdmin, "Admin.Drop"));
}

TEST(AuthenticatorTest, CreateRefusesInconsistentOptions) {
  TokenDir dir;
  AuthOptions names;
  names.admin_client_names = {"admin-client"};
  EXPECT_THAT(Authenticator::Create(names, /*mutual_tls=*/false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--admin_client_names needs")));
  AuthOptions query_file;
  query_file.query_token_file = dir.Write("query", kQueryToken);
  EXPECT_THAT(Authenticator::Create(query_file, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--query_auth is not token")));
  AuthOptions no_tokens;
  no_tokens.query_auth = QueryAuth::kToken;
  EXPECT_THAT(Authenticator::Create(no_tokens, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--query_auth=token needs")));
  AuthOptions short_token;
  short_token.admin_tokens = {kAdminToken, "short"};
  EXPECT_THAT(Authenticator::Create(short_token, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--admin_tokens: token 2"),
                             Not(HasSubstr("short ")))));
  AuthOptions missing;
  missing.admin_token_file = dir.path() + "/missing";
  EXPECT_THAT(Authenticator::Create(missing, false),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("--admin_token_file")));
  EXPECT_THAT(
      ParseQueryAuth("tokens", "--query_auth"),
      StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("--query_auth")));
}

// ---------------------------------------------------------------------------
// A server in-process

ServerOptions BaseOptions() {
  ServerOptions o;
  o.listen = "127.0.0.1:0";
  o.metrics_listen = "";
  o.backend = BackendChoice::kCpu;
  o.cpu_threads = 1;
  o.drain_timeout = absl::Seconds(2);
  o.compaction_interval = absl::ZeroDuration();
  return o;
}

std::unique_ptr<MaxsimServer> StartServer(const ServerOptions& o) {
  absl::StatusOr<std::unique_ptr<MaxsimServer>> s = MaxsimServer::Start(o);
  EXPECT_TRUE(s.ok()) << s.status();
  return s.ok() ? *std::move(s) : nullptr;
}

// A plaintext client of `server` sending `token` ("" = none).
std::unique_ptr<Client> PlainClient(const MaxsimServer& server,
                                    const std::string& token = "") {
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", server.port());
  o.timeout = absl::Seconds(20);
  o.token = token;
  return Client::Create(o).value();
}

v1::CreateCorpusRequest CorpusRequest(const std::string& name) {
  v1::CreateCorpusRequest r;
  r.set_name(name);
  r.set_dim(4);
  return r;
}

// Three documents of two tokens each, dim 4.
DocumentBatch ThreeDocs() {
  DocumentBatch b;
  b.dim = 4;
  b.ids = {"a", "b", "c"};
  b.cu_seqlens = {0, 2, 4, 6};
  for (int i = 0; i < 6 * 4; ++i) b.tokens.push_back(0.1f * (i % 7) - 0.3f);
  return b;
}

Query QueryFor(const std::string& corpus) {
  Query q;
  q.corpus = corpus;
  q.dim = 4;
  q.tokens = {0.5f, -0.25f, 0.125f, 1.0f};
  q.top_k = 2;
  return q;
}

// The live documents of a corpus on the server; -1 when it does not exist.
int64_t LiveDocs(const MaxsimServer& server, const std::string& name) {
  absl::StatusOr<std::shared_ptr<Corpus>> corpus = server.corpora()->Get(name);
  return corpus.ok() ? (*corpus)->Snapshot()->live_docs() : -1;
}

// One call of `method` ("/maxsimd.v1.Admin/DropCorpus") through the generic
// stub with an empty request message, whatever the method's kind (unary or
// client streaming), with `metadata`; returns its status.
grpc::Status GenericCall(
    const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
    const std::vector<std::pair<std::string, std::string>>& metadata) {
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(20)));
  for (const auto& [key, value] : metadata) ctx.AddMetadata(key, value);
  auto call = stub.PrepareCall(&ctx, method, &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  grpc::Slice slice("", 0);
  grpc::ByteBuffer request(&slice, 1);
  call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
  return status;
}

// A server whose Admin needs one of two tokens of a file, with queries
// open.
class AuthServerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ServerOptions o = BaseOptions();
    o.auth.admin_token_file = dir_.Write(
        "admin-tokens", absl::StrCat("# old and new, during a rotation\n",
                                     kAdminToken, "\n", kRotatedToken, "\n"));
    server_ = StartServer(o);
    ASSERT_NE(server_, nullptr);
    admin_ = PlainClient(*server_, kAdminToken);
  }

  TokenDir dir_;
  std::unique_ptr<MaxsimServer> server_;
  std::unique_ptr<Client> admin_;
};

TEST_F(AuthServerTest, AdminWithoutTokenIsUnauthenticatedAndNotPerformed) {
  std::unique_ptr<Client> anonymous = PlainClient(*server_);
  EXPECT_THAT(anonymous->CreateCorpus(CorpusRequest("c")),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("Admin.CreateCorpus")));
  EXPECT_EQ(LiveDocs(*server_, "c"), -1);  // not created

  MAXSIMD_ASSERT_OK(admin_->CreateCorpus(CorpusRequest("c")));
  EXPECT_THAT(anonymous->AddDocuments("c", ThreeDocs()),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("Admin.AddDocuments")));
  EXPECT_EQ(LiveDocs(*server_, "c"), 0);  // nothing added
  MAXSIMD_ASSERT_OK(admin_->AddDocuments("c", ThreeDocs()));
  EXPECT_EQ(LiveDocs(*server_, "c"), 3);

  EXPECT_THAT(anonymous->DeleteDocuments("c", {"a"}),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(anonymous->SetLogLevel("off"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(anonymous->ListCorpora(),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(LiveDocs(*server_, "c"), 3);
  EXPECT_NE(spdlog::get_level(), spdlog::level::off);
}

TEST_F(AuthServerTest, WrongTokenIsUnauthenticatedAndNotPerformed) {
  MAXSIMD_ASSERT_OK(admin_->CreateCorpus(CorpusRequest("keep")));
  MAXSIMD_ASSERT_OK(admin_->AddDocuments("keep", ThreeDocs()));
  std::unique_ptr<Client> wrong = PlainClient(*server_, kWrongToken);
  EXPECT_THAT(
      wrong->DropCorpus("keep"),
      StatusIs(absl::StatusCode::kUnauthenticated,
               AllOf(HasSubstr("Admin.DropCorpus"), HasSubstr("not valid"),
                     Not(HasSubstr(kWrongToken)))));
  EXPECT_THAT(wrong->DeleteDocuments("keep", {"a", "b"}),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(wrong->AddDocuments("keep", ThreeDocs()),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_THAT(wrong->SetAlias("prod", "keep"),
              StatusIs(absl::StatusCode::kUnauthenticated));
  EXPECT_EQ(LiveDocs(*server_, "keep"), 3);  // still there, unchanged
  const auto aliases = server_->corpora()->Aliases();
  MAXSIMD_ASSERT_OK(aliases);
  EXPECT_TRUE(aliases->empty());
  MAXSIMD_EXPECT_OK(admin_->DropCorpus("keep"));
  EXPECT_EQ(LiveDocs(*server_, "keep"), -1);
}

TEST_F(AuthServerTest, BothTokensOfTheFileWork) {
  std::unique_ptr<Client> rotated = PlainClient(*server_, kRotatedToken);
  MAXSIMD_EXPECT_OK(admin_->CreateCorpus(CorpusRequest("old")));
  MAXSIMD_EXPECT_OK(rotated->CreateCorpus(CorpusRequest("new")));
  MAXSIMD_EXPECT_OK(rotated->AddDocuments("old", ThreeDocs()));
  absl::StatusOr<std::vector<v1::CorpusInfo>> list = admin_->ListCorpora();
  MAXSIMD_ASSERT_OK(list);
  EXPECT_EQ(list->size(), 2u);
  EXPECT_EQ(LiveDocs(*server_, "old"), 3);
}

TEST_F(AuthServerTest, EveryAdminMethodNeedsAToken) {
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                          grpc::InsecureChannelCredentials());
  // Every method the service declares, so that a method added later without
  // its check fails here.
  const google::protobuf::ServiceDescriptor* admin =
      v1::CreateCorpusRequest::descriptor()->file()->FindServiceByName("Admin");
  ASSERT_NE(admin, nullptr);
  EXPECT_GE(admin->method_count(), 14);
  for (int i = 0; i < admin->method_count(); ++i) {
    const std::string method =
        absl::StrCat("/maxsimd.v1.Admin/", admin->method(i)->name());
    EXPECT_EQ(GenericCall(channel, method, {}).error_code(),
              grpc::StatusCode::UNAUTHENTICATED)
        << method;
    EXPECT_EQ(
        GenericCall(channel, method,
                    {{"authorization", absl::StrCat("Bearer ", kWrongToken)}})
            .error_code(),
        grpc::StatusCode::UNAUTHENTICATED)
        << method;
    // With the token the call gets past authentication (an empty request
    // may still be refused for what it lacks).
    const grpc::Status with_token =
        GenericCall(channel, method,
                    {{"authorization", absl::StrCat("Bearer ", kAdminToken)}});
    EXPECT_NE(with_token.error_code(), grpc::StatusCode::UNAUTHENTICATED)
        << method << ": " << with_token.error_message();
    EXPECT_NE(with_token.error_code(), grpc::StatusCode::PERMISSION_DENIED)
        << method;
  }
}

TEST_F(AuthServerTest, QueriesStayOpenByDefault) {
  MAXSIMD_ASSERT_OK(admin_->CreateCorpus(CorpusRequest("q")));
  MAXSIMD_ASSERT_OK(admin_->AddDocuments("q", ThreeDocs()));
  std::unique_ptr<Client> anonymous = PlainClient(*server_);
  absl::StatusOr<v1::RerankResponse> r = anonymous->Rerank(QueryFor("q"));
  MAXSIMD_ASSERT_OK(r);
  EXPECT_EQ(r->results_size(), 2);
  MAXSIMD_EXPECT_OK(anonymous->RerankBatch({QueryFor("q"), QueryFor("q")}));
  MAXSIMD_EXPECT_OK(anonymous->RerankStream({QueryFor("q")}));
}

TEST_F(AuthServerTest, HealthAndReflectionStayOpen) {
  std::unique_ptr<Client> anonymous = PlainClient(*server_);
  absl::StatusOr<int> health = anonymous->CheckHealth("maxsimd.v1.Admin");
  MAXSIMD_ASSERT_OK(health);
  EXPECT_EQ(*health, 1);  // SERVING
  auto channel =
      grpc::CreateChannel(absl::StrCat("127.0.0.1:", server_->port()),
                          grpc::InsecureChannelCredentials());
  // ServerReflectionRequest.list_services (field 7) = "*": answered, not
  // refused.
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  grpc::ClientContext ctx;
  auto call = stub.PrepareCall(
      &ctx, "/grpc.reflection.v1alpha.ServerReflection/ServerReflectionInfo",
      &cq);
  void* tag;
  bool ok;
  call->StartCall(reinterpret_cast<void*>(1));
  cq.Next(&tag, &ok);
  const std::string list_services = std::string("\x3a\x01*", 3);
  grpc::Slice slice(list_services);
  grpc::ByteBuffer request(&slice, 1);
  call->WriteLast(request, grpc::WriteOptions(), reinterpret_cast<void*>(2));
  cq.Next(&tag, &ok);
  grpc::ByteBuffer response;
  call->Read(&response, reinterpret_cast<void*>(3));
  cq.Next(&tag, &ok);
  EXPECT_TRUE(ok);
  std::vector<grpc::Slice> slices;
  std::string body;
  if (ok && response.Dump(&slices).ok()) {
    for (const auto& s : slices) {
      body.append(reinterpret_cast<const char*>(s.begin()), s.size());
    }
  }
  EXPECT_THAT(body, HasSubstr("maxsimd.v1.Admin"));
  grpc::Status status;
  call->Finish(&status, reinterpret_cast<void*>(4));
  cq.Next(&tag, &ok);
  EXPECT_TRUE(status.ok()) << status.error_message();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }
}

TEST(AuthLogTest, TokensNeverReachTheLog) {
  // Failure lines are capped per second of the steady clock, process-wide
  // (logging.h); start in a fresh second, which earlier tests of this
  // binary cannot have spent.
  std::this_thread::sleep_until(
      std::chrono::time_point_cast<std::chrono::seconds>(
          std::chrono::steady_clock::now()) +
      std::chrono::seconds(1));
  CapturedLog log(spdlog::level::trace);
  TokenDir dir;
  ServerOptions o = BaseOptions();
  o.auth.admin_token_file = dir.Write("admin", kAdminToken);
  o.auth.query_auth = QueryAuth::kToken;
  o.auth.query_token_file = dir.Write("query", kQueryToken);
  std::unique_ptr<MaxsimServer> server = StartServer(o);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> admin = PlainClient(*server, kAdminToken);
  MAXSIMD_ASSERT_OK(admin->CreateCorpus(CorpusRequest("logged")));
  MAXSIMD_ASSERT_OK(admin->AddDocuments("logged", ThreeDocs()));
  std::unique_ptr<Client> query = PlainClient(*server, kQueryToken);
  Query q = QueryFor("logged");
  q.request_id = "rid-in-the-body";
  MAXSIMD_EXPECT_OK(query->Rerank(q));
  EXPECT_THAT(query->DropCorpus("logged"),
              StatusIs(absl::StatusCode::kPermissionDenied));
  EXPECT_THAT(PlainClient(*server, kWrongToken)->Rerank(q),
              StatusIs(absl::StatusCode::kUnauthenticated));
  // Raw metadata too: a request id logged next to a refused token.
  auto channel = grpc::CreateChannel(absl::StrCat("127.0.0.1:", server->port()),
                                     grpc::InsecureChannelCredentials());
  EXPECT_EQ(
      GenericCall(channel, "/maxsimd.v1.Admin/ListCorpora",
                  {{"authorization", absl::StrCat("Bearer ", kWrongToken)},
                   {std::string(kRequestIdKey), "rid-77"}})
          .error_code(),
      grpc::StatusCode::UNAUTHENTICATED);
  server->Shutdown();

  const std::string text = log.Text();
  // The lines are there: successes at debug, refusals at info.
  EXPECT_THAT(text, HasSubstr("CreateCorpus OK"));
  EXPECT_THAT(text, HasSubstr("Rerank OK"));
  EXPECT_THAT(text, HasSubstr("PERMISSION_DENIED"));
  EXPECT_THAT(text, HasSubstr("[request_id=rid-77] ListCorpora "
                              "UNAUTHENTICATED"));
  // The tokens are not, nor any part of them longer than their prefix.
  for (const char* token : {kAdminToken, kQueryToken, kWrongToken}) {
    EXPECT_THAT(text, Not(HasSubstr(token))) << token;
    EXPECT_THAT(text, Not(HasSubstr(std::string(token).substr(6)))) << token;
  }
}

TEST(QueryAuthServerTest, QueriesNeedATokenWhenAsked) {
  TokenDir dir;
  ServerOptions o = BaseOptions();
  o.auth.admin_token_file = dir.Write("admin", kAdminToken);
  o.auth.query_auth = QueryAuth::kToken;
  o.auth.query_token_file = dir.Write("query", kQueryToken);
  std::unique_ptr<MaxsimServer> server = StartServer(o);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> admin = PlainClient(*server, kAdminToken);
  MAXSIMD_ASSERT_OK(admin->CreateCorpus(CorpusRequest("q")));
  MAXSIMD_ASSERT_OK(admin->AddDocuments("q", ThreeDocs()));

  std::unique_ptr<Client> anonymous = PlainClient(*server);
  EXPECT_THAT(anonymous->Rerank(QueryFor("q")),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("Reranker.Rerank")));
  EXPECT_THAT(anonymous->RerankBatch({QueryFor("q")}),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("Reranker.RerankBatch")));
  EXPECT_THAT(anonymous->RerankStream({QueryFor("q")}),
              StatusIs(absl::StatusCode::kUnauthenticated,
                       HasSubstr("Reranker.RerankStream")));
  EXPECT_THAT(PlainClient(*server, kWrongToken)->Rerank(QueryFor("q")),
              StatusIs(absl::StatusCode::kUnauthenticated));

  std::unique_ptr<Client> query = PlainClient(*server, kQueryToken);
  absl::StatusOr<v1::RerankResponse> r = query->Rerank(QueryFor("q"));
  MAXSIMD_ASSERT_OK(r);
  EXPECT_EQ(r->results_size(), 2);
  MAXSIMD_EXPECT_OK(query->RerankBatch({QueryFor("q")}));
  absl::StatusOr<std::vector<v1::RerankResponse>> stream =
      query->RerankStream({QueryFor("q"), QueryFor("q")});
  MAXSIMD_ASSERT_OK(stream);
  EXPECT_EQ(stream->size(), 2u);
  // Whoever may administer may query.
  MAXSIMD_EXPECT_OK(admin->Rerank(QueryFor("q")));
  // Health needs nothing.
  absl::StatusOr<int> health = anonymous->CheckHealth("maxsimd.v1.Reranker");
  MAXSIMD_ASSERT_OK(health);
  EXPECT_EQ(*health, 1);
}

TEST(AuthServerStartTest, BadTokenFileFailsStartNamingTheFlag) {
  TokenDir dir;
  ServerOptions o = BaseOptions();
  o.auth.admin_token_file = dir.path() + "/no-such-file";
  EXPECT_THAT(MaxsimServer::Start(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--admin_token_file"),
                             HasSubstr("no-such-file"))));
  o = BaseOptions();
  o.auth.admin_token_file = dir.Write("open", kAdminToken, 0644);
  EXPECT_THAT(
      MaxsimServer::Start(o),
      StatusIs(absl::StatusCode::kFailedPrecondition,
               AllOf(HasSubstr("--admin_token_file"), HasSubstr("mode 0644"))));
  o = BaseOptions();
  o.tls.cert_file = dir.path() + "/no-cert.pem";
  o.tls.key_file = dir.path() + "/no-key.pem";
  EXPECT_THAT(MaxsimServer::Start(o),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("--tls_cert"), HasSubstr("no-cert"))));
}

// ---------------------------------------------------------------------------
// TLS and mutual TLS

class TlsServerTest : public WithTestCerts<TlsServerTest> {
 protected:
  // A server with TLS, and with `client_ca` mutual TLS.
  std::unique_ptr<MaxsimServer> Start(
      bool mutual, std::vector<std::string> admin_client_names = {}) {
    ServerOptions o = BaseOptions();
    o.tls.cert_file = certs_->server_cert;
    o.tls.key_file = certs_->server_key;
    if (mutual) o.tls.client_ca_file = certs_->ca_cert;
    o.auth.admin_client_names = std::move(admin_client_names);
    return StartServer(o);
  }

  // A client of `server` over TLS trusting `root`, presenting the client
  // certificate `cert`/`key` when not empty. Short timeouts: a handshake
  // that fails is retried by gRPC until the deadline.
  static std::unique_ptr<Client> TlsClient(const MaxsimServer& server,
                                           const std::string& root,
                                           const std::string& cert = "",
                                           const std::string& key = "") {
    ClientOptions o;
    o.target = absl::StrCat("127.0.0.1:", server.port());
    o.timeout = absl::Seconds(5);
    o.use_tls = true;
    o.tls_root_certs = ReadTestFile(root);
    if (!cert.empty()) {
      o.tls_cert_chain = ReadTestFile(cert);
      o.tls_private_key = ReadTestFile(key);
    }
    return Client::Create(o).value();
  }
};

TEST_F(TlsServerTest, TlsRoundTrip) {
  std::unique_ptr<MaxsimServer> server = Start(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = TlsClient(*server, certs_->ca_cert);
  MAXSIMD_ASSERT_OK(client->CreateCorpus(CorpusRequest("tls")));
  MAXSIMD_ASSERT_OK(client->AddDocuments("tls", ThreeDocs()));
  absl::StatusOr<v1::RerankResponse> r = client->Rerank(QueryFor("tls"));
  MAXSIMD_ASSERT_OK(r);
  EXPECT_EQ(r->results_size(), 2);
  absl::StatusOr<int> health = client->CheckHealth();
  MAXSIMD_ASSERT_OK(health);
  EXPECT_EQ(*health, 1);
  // The server's certificate names localhost too.
  ClientOptions by_name;
  by_name.target = absl::StrCat("127.0.0.1:", server->port());
  by_name.use_tls = true;
  by_name.tls_root_certs = ReadTestFile(certs_->ca_cert);
  by_name.tls_server_name = "localhost";
  MAXSIMD_EXPECT_OK(Client::Create(by_name).value()->ListCorpora());
}

TEST_F(TlsServerTest, PlaintextClientToTlsServerFails) {
  std::unique_ptr<MaxsimServer> server = Start(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", server->port());
  o.timeout = absl::Seconds(3);
  std::unique_ptr<Client> plain = Client::Create(o).value();
  const absl::Status status = plain->CreateCorpus(CorpusRequest("p")).status();
  EXPECT_FALSE(status.ok());
  EXPECT_THAT(status.code(),
              ::testing::AnyOf(absl::StatusCode::kUnavailable,
                               absl::StatusCode::kDeadlineExceeded))
      << status;
  EXPECT_EQ(LiveDocs(*server, "p"), -1);
  EXPECT_FALSE(plain->CheckHealth().ok());
}

TEST_F(TlsServerTest, UntrustedServerCertificateFails) {
  std::unique_ptr<MaxsimServer> server = Start(/*mutual=*/false);
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> client = TlsClient(*server, certs_->other_ca_cert);
  EXPECT_FALSE(client->ListCorpora().ok());
  // The certificate is for localhost and 127.0.0.1, not another name.
  ClientOptions o;
  o.target = absl::StrCat("127.0.0.1:", server->port());
  o.timeout = absl::Seconds(3);
  o.use_tls = true;
  o.tls_root_certs = ReadTestFile(certs_->ca_cert);
  o.tls_server_name = "elsewhere.example";
  EXPECT_FALSE(Client::Create(o).value()->ListCorpora().ok());
}

TEST_F(TlsServerTest, MutualTlsNeedsAClientCertificateOfItsCa) {
  std::unique_ptr<MaxsimServer> server = Start(/*mutual=*/true);
  ASSERT_NE(server, nullptr);
  // No client certificate: the handshake fails.
  const absl::Status none = TlsClient(*server, certs_->ca_cert)
                                ->CreateCorpus(CorpusRequest("x"))
                                .status();
  EXPECT_FALSE(none.ok());
  EXPECT_NE(none.code(), absl::StatusCode::kUnauthenticated) << none;
  // A certificate of another CA, even with an admin name: fails too.
  const absl::Status rogue =
      TlsClient(*server, certs_->ca_cert, certs_->rogue_cert, certs_->rogue_key)
          ->CreateCorpus(CorpusRequest("x"))
          .status();
  EXPECT_FALSE(rogue.ok());
  EXPECT_FALSE(
      TlsClient(*server, certs_->ca_cert, certs_->rogue_cert, certs_->rogue_key)
          ->CheckHealth()
          .ok());
  EXPECT_EQ(LiveDocs(*server, "x"), -1);
  // A certificate of the CA: admitted, and (no --admin_client_names) it
  // may administer without a token.
  std::unique_ptr<Client> good = TlsClient(
      *server, certs_->ca_cert, certs_->query_cert, certs_->query_key);
  MAXSIMD_EXPECT_OK(good->CreateCorpus(CorpusRequest("x")));
  EXPECT_EQ(LiveDocs(*server, "x"), 0);
}

TEST_F(TlsServerTest, AdminClientNamesRestrictCertificates) {
  std::unique_ptr<MaxsimServer> server =
      Start(/*mutual=*/true, {"admin-client"});
  ASSERT_NE(server, nullptr);
  std::unique_ptr<Client> admin = TlsClient(
      *server, certs_->ca_cert, certs_->admin_cert, certs_->admin_key);
  std::unique_ptr<Client> other = TlsClient(
      *server, certs_->ca_cert, certs_->query_cert, certs_->query_key);
  MAXSIMD_ASSERT_OK(admin->CreateCorpus(CorpusRequest("m")));
  MAXSIMD_ASSERT_OK(admin->AddDocuments("m", ThreeDocs()));
  EXPECT_THAT(other->DropCorpus("m"),
              StatusIs(absl::StatusCode::kPermissionDenied,
                       AllOf(HasSubstr("query-client"),
                             HasSubstr("--admin_client_names"))));
  EXPECT_EQ(LiveDocs(*server, "m"), 3);
  // Queries stay open to every client the handshake admits.
  absl::StatusOr<v1::RerankResponse> r = other->Rerank(QueryFor("m"));
  MAXSIMD_ASSERT_OK(r);
  EXPECT_EQ(r->results_size(), 2);
}

TEST_F(TlsServerTest, ClientOptionsAreChecked) {
  ClientOptions o;
  o.tls_root_certs = "pem";  // without use_tls
  EXPECT_THAT(Client::Create(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("need use_tls")));
  o.use_tls = true;
  o.tls_cert_chain = "pem";  // without a key
  EXPECT_THAT(Client::Create(o), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("go together")));
  ClientOptions t;
  t.token = "two words-0123456789";
  EXPECT_THAT(Client::Create(t),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("token"), Not(HasSubstr("two words")))));
}

}  // namespace
}  // namespace maxsimd
