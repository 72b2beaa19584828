#include "server/auth.h"

#include <fcntl.h>
#include <openssl/bio.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "grpc/grpc_security_constants.h"
#include "kernels/base/file_util.h"
#include "kernels/base/status_macros.h"
#include "spdlog/spdlog.h"

namespace maxsimd {
namespace {

constexpr size_t kMinTokenBytes = 16;
constexpr size_t kMaxTokenBytes = 4096;
constexpr char kAuthorizationKey[] = "authorization";
constexpr absl::string_view kBearer = "bearer ";
// A PEM file larger than this is not a certificate or a key.
constexpr size_t kMaxPemBytes = 1 << 20;

// The mode bits that must be clear on a secret file: every permission of
// group and others. Writable matters as much as readable (a token could be
// added), so this is ssh's rule for private keys rather than only 0044.
constexpr mode_t kNonOwnerBits = S_IRWXG | S_IRWXO;

absl::Status CannotRead(absl::string_view flag, const std::string& path,
                        absl::string_view why) {
  return absl::InvalidArgumentError(
      absl::StrCat("--", flag, ": cannot read \"", path, "\": ", why));
}

// CheckSecretFileMode on `mode`, the st_mode of the file that `path`
// resolves to.
absl::Status CheckSecretMode(const std::string& path, absl::string_view flag,
                             mode_t mode, bool allow_readable) {
  if ((mode & kNonOwnerBits) == 0) return absl::OkStatus();
  char octal[16];
  std::snprintf(octal, sizeof(octal), "%04o",
                static_cast<unsigned>(mode & 07777));
  std::string file = absl::StrCat("\"", path, "\"");
  struct stat link;
  if (::lstat(path.c_str(), &link) == 0 && S_ISLNK(link.st_mode)) {
    char* target = ::realpath(path.c_str(), nullptr);
    absl::StrAppend(&file, " (a symlink to \"",
                    target != nullptr ? target : "?", "\")");
    std::free(target);
  }
  if (allow_readable) {
    spdlog::warn(
        "--{}: {} has mode {}: group or others may access this secret; "
        "accepted because of --allow_readable_secret_files",
        std::string(flag), file, octal);
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "--", flag, ": ", file, " has mode ", octal,
      ": group or others may access it, and it holds a secret. Make it "
      "private to the user the server runs as (chmod 600 \"",
      path, "\"), or pass --allow_readable_secret_files to accept it"));
}

// The whole file at `path`, through the project's reader
// (kernels/base/file_util.h); INVALID_ARGUMENT naming `flag` when it cannot
// be read, is empty or is larger than `max_bytes`. When `secret`, the file
// opened must pass CheckSecretMode(allow_readable) first.
absl::StatusOr<std::string> ReadFile(const std::string& path,
                                     absl::string_view flag, size_t max_bytes,
                                     bool secret, bool allow_readable) {
  const int64_t limit = static_cast<int64_t>(max_bytes);
  absl::StatusOr<std::string> out;
  if (!secret) {
    out = ReadFileToString(path, limit);
  } else {
    const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return CannotRead(flag, path, std::strerror(errno));
    // The mode of the file opened, not of whatever the path names by now.
    struct stat st;
    absl::Status mode =
        ::fstat(fd, &st) == 0
            ? CheckSecretMode(path, flag, st.st_mode, allow_readable)
            : CannotRead(flag, path, std::strerror(errno));
    if (!mode.ok()) {
      ::close(fd);
      return mode;
    }
    out = ReadOpenFileToString(fd, path, limit);
    ::close(fd);
  }
  // The reader's message starts `cannot read "<path>": `, as CannotRead's
  // does after the flag.
  if (!out.ok()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": ", out.status().message()));
  }
  if (out->empty()) return CannotRead(flag, path, "the file is empty");
  return out;
}

absl::StatusOr<std::string> ReadSmallFile(const std::string& path,
                                          absl::string_view flag,
                                          size_t max_bytes) {
  return ReadFile(path, flag, max_bytes, /*secret=*/false, false);
}

absl::StatusOr<std::string> ReadSecretFile(const std::string& path,
                                           absl::string_view flag,
                                           size_t max_bytes,
                                           bool allow_readable) {
  return ReadFile(path, flag, max_bytes, /*secret=*/true, allow_readable);
}

// Why `token` is not a valid token; "" when it is. Never quotes the token.
std::string TokenProblem(absl::string_view token) {
  if (token.size() < kMinTokenBytes || token.size() > kMaxTokenBytes) {
    return absl::StrCat("has ", token.size(), " characters; a token has ",
                        kMinTokenBytes, " to ", kMaxTokenBytes);
  }
  for (char c : token) {
    if (c < 0x21 || c > 0x7e) {
      return "has a character that is not printable ASCII, or a space";
    }
  }
  return "";
}

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;

BioPtr MemoryBio(const std::string& data) {
  return BioPtr(BIO_new_mem_buf(data.data(), static_cast<int>(data.size())));
}

// The certificates of a PEM text, leaf (first) first; INVALID_ARGUMENT
// naming `flag` when there is none. Leaves OpenSSL's error queue empty,
// since gRPC reads it on the same threads.
absl::StatusOr<std::vector<X509Ptr>> ParseCertificates(
    const std::string& pem, absl::string_view flag, const std::string& path) {
  std::vector<X509Ptr> certs;
  BioPtr bio = MemoryBio(pem);
  while (bio != nullptr) {
    X509* cert = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr);
    if (cert == nullptr) break;
    certs.emplace_back(cert);
  }
  ERR_clear_error();
  if (certs.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--", flag, ": \"", path,
        "\" holds no PEM certificate (-----BEGIN CERTIFICATE-----)"));
  }
  return certs;
}

// A passphrase callback that has none: an encrypted key fails to load
// rather than prompting on the terminal.
int NoPassphrase(char*, int, int, void*) { return -1; }

// Logs a warning when `cert` is outside its validity period: clients will
// refuse it, but a restart with an old certificate should not stop the
// server from answering health probes.
void WarnIfNotValidNow(X509* cert, absl::string_view flag,
                       const std::string& path) {
  if (X509_cmp_current_time(X509_get0_notAfter(cert)) < 0) {
    spdlog::warn("--{}: the certificate in \"{}\" has expired",
                 std::string(flag), path);
  } else if (X509_cmp_current_time(X509_get0_notBefore(cert)) > 0) {
    spdlog::warn("--{}: the certificate in \"{}\" is not valid yet",
                 std::string(flag), path);
  }
  ERR_clear_error();
}

absl::Status Refusal(absl::StatusCode code, absl::string_view method,
                     absl::string_view why) {
  return absl::Status(code, absl::StrCat(method, ": ", why));
}

}  // namespace

absl::StatusOr<QueryAuth> ParseQueryAuth(absl::string_view name,
                                         absl::string_view field) {
  if (name == "none") return QueryAuth::kNone;
  if (name == "token") return QueryAuth::kToken;
  return absl::InvalidArgumentError(absl::StrCat(
      field, " is \"", name.substr(0, 64), "\"; must be none or token"));
}

bool ConstantTimeEquals(absl::string_view given, absl::string_view secret) {
  if (secret.empty()) return given.empty();
  // Volatile so that the compiler neither stops the loop once a byte
  // differs nor turns it into a memcmp.
  volatile unsigned char diff = given.size() == secret.size() ? 0 : 1;
  size_t j = 0;
  for (size_t i = 0; i < given.size(); ++i) {
    diff = diff | static_cast<unsigned char>(given[i] ^ secret[j]);
    // j = i % secret.size(), without a data-dependent branch or a divide.
    j = j + 1;
    j = j & (0 - static_cast<size_t>(j != secret.size()));
  }
  return diff == 0;
}

absl::Status CheckSecretFileMode(const std::string& path,
                                 absl::string_view flag, bool allow_readable) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return CannotRead(flag, path, std::strerror(errno));
  }
  return CheckSecretMode(path, flag, st.st_mode, allow_readable);
}

absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path,
                                                       absl::string_view flag,
                                                       bool allow_readable) {
  MAXSIMD_ASSIGN_OR_RETURN(
      std::string text,
      ReadSecretFile(path, flag, kMaxTokenBytes * 1024, allow_readable));
  std::vector<std::string> tokens;
  int line_number = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_number;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    if (const std::string problem = TokenProblem(line); !problem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": line ", line_number, " of \"", path,
                       "\" ", problem, " (printable ASCII without spaces)"));
    }
    tokens.emplace_back(line);
  }
  if (tokens.empty()) {
    return absl::InvalidArgumentError(
        absl::StrCat("--", flag, ": \"", path,
                     "\" holds no token (one a line; '#' starts a comment)"));
  }
  return tokens;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& tls) {
  if (tls.cert_file.empty() && tls.key_file.empty()) {
    if (!tls.client_ca_file.empty()) {
      return absl::InvalidArgumentError(
          "--tls_client_ca needs --tls_cert and --tls_key (mutual TLS is TLS "
          "with client certificates)");
    }
    return grpc::InsecureServerCredentials();
  }
  if (tls.cert_file.empty() || tls.key_file.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--tls_cert and --tls_key go together; only --",
        tls.cert_file.empty() ? "tls_key" : "tls_cert", " is set"));
  }
  MAXSIMD_ASSIGN_OR_RETURN(
      std::string cert_pem,
      ReadSmallFile(tls.cert_file, "tls_cert", kMaxPemBytes));
  MAXSIMD_ASSIGN_OR_RETURN(std::string key_pem,
                           ReadSecretFile(tls.key_file, "tls_key", kMaxPemBytes,
                                          tls.allow_readable_secrets));
  MAXSIMD_ASSIGN_OR_RETURN(
      std::vector<X509Ptr> chain,
      ParseCertificates(cert_pem, "tls_cert", tls.cert_file));
  WarnIfNotValidNow(chain.front().get(), "tls_cert", tls.cert_file);
  {
    BioPtr bio = MemoryBio(key_pem);
    PkeyPtr key(bio == nullptr
                    ? nullptr
                    : PEM_read_bio_PrivateKey(bio.get(), nullptr, NoPassphrase,
                                              nullptr));
    const bool matches =
        key != nullptr &&
        X509_check_private_key(chain.front().get(), key.get()) == 1;
    ERR_clear_error();
    if (key == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_key: \"", tls.key_file,
          "\" holds no PEM private key that reads without a passphrase "
          "(encrypted keys are not supported)"));
    }
    if (!matches) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--tls_key: the key in \"", tls.key_file,
          "\" does not belong to the certificate of --tls_cert (\"",
          tls.cert_file, "\")"));
    }
  }
  grpc::SslServerCredentialsOptions options(
      tls.client_ca_file.empty()
          ? GRPC_SSL_DONT_REQUEST_CLIENT_CERTIFICATE
          : GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_key_cert_pairs.push_back({key_pem, cert_pem});
  if (!tls.client_ca_file.empty()) {
    MAXSIMD_ASSIGN_OR_RETURN(
        options.pem_root_certs,
        ReadSmallFile(tls.client_ca_file, "tls_client_ca", kMaxPemBytes));
    MAXSIMD_ASSIGN_OR_RETURN(
        std::vector<X509Ptr> roots,
        ParseCertificates(options.pem_root_certs, "tls_client_ca",
                          tls.client_ca_file));
  }
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::unique_ptr<Authenticator>> Authenticator::Create(
    const AuthOptions& options, bool mutual_tls) {
  std::unique_ptr<Authenticator> a(new Authenticator);
  a->mutual_tls_ = mutual_tls;
  a->query_auth_ = options.query_auth;
  for (size_t i = 0; i < options.admin_tokens.size(); ++i) {
    if (const std::string problem = TokenProblem(options.admin_tokens[i]);
        !problem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--admin_tokens: token ", i + 1, " ", problem,
                       " (printable ASCII without spaces)"));
    }
    a->admin_tokens_.push_back(options.admin_tokens[i]);
  }
  if (!options.admin_token_file.empty()) {
    MAXSIMD_ASSIGN_OR_RETURN(
        std::vector<std::string> tokens,
        ReadTokenFile(options.admin_token_file, "admin_token_file",
                      options.allow_readable_secrets));
    for (std::string& t : tokens) a->admin_tokens_.push_back(std::move(t));
  }
  if (!options.query_token_file.empty()) {
    if (options.query_auth != QueryAuth::kToken) {
      return absl::InvalidArgumentError(
          "--query_token_file is set but --query_auth is not token; the "
          "tokens would never be asked for");
    }
    MAXSIMD_ASSIGN_OR_RETURN(
        a->query_tokens_,
        ReadTokenFile(options.query_token_file, "query_token_file",
                      options.allow_readable_secrets));
  }
  if (!options.admin_client_names.empty()) {
    if (!mutual_tls) {
      return absl::InvalidArgumentError(
          "--admin_client_names needs --tls_client_ca: without mutual TLS "
          "no client presents a certificate");
    }
    for (const std::string& name : options.admin_client_names) {
      if (name.empty()) {
        return absl::InvalidArgumentError(
            "--admin_client_names has an empty name");
      }
    }
    a->admin_client_names_ = options.admin_client_names;
  }
  if (options.query_auth == QueryAuth::kToken && a->admin_tokens_.empty() &&
      a->query_tokens_.empty() && !mutual_tls) {
    return absl::InvalidArgumentError(
        "--query_auth=token needs tokens: --query_token_file, "
        "--admin_token_file or --admin_tokens (or --tls_client_ca)");
  }
  if (options.query_auth == QueryAuth::kToken && !a->Protects(Scope::kAdmin)) {
    spdlog::warn(
        "--query_auth=token protects queries while Admin stays open: set "
        "--admin_token_file or --tls_client_ca");
  }
  return a;
}

bool Authenticator::Protects(Scope scope) const {
  if (scope == Scope::kQuery) return query_auth_ == QueryAuth::kToken;
  return !admin_tokens_.empty() || mutual_tls_;
}

PresentedCredentials Authenticator::CredentialsOf(
    const grpc::ServerContextBase& ctx) const {
  PresentedCredentials c;
  const auto& metadata = ctx.client_metadata();
  const auto [begin, end] = metadata.equal_range(kAuthorizationKey);
  for (auto it = begin; it != end; ++it) {
    if (c.authorization_entries++ == 0) {
      c.authorization.assign(it->second.data(), it->second.size());
    }
  }
  if (!mutual_tls_) return c;
  const std::shared_ptr<const grpc::AuthContext> auth = ctx.auth_context();
  if (auth == nullptr || !auth->IsPeerAuthenticated()) return c;
  bool tls = false;
  for (const grpc::string_ref& type :
       auth->FindPropertyValues(GRPC_TRANSPORT_SECURITY_TYPE_PROPERTY_NAME)) {
    tls = tls || type == GRPC_SSL_TRANSPORT_SECURITY_TYPE;
  }
  // Only a TLS port with GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_
  // AND_VERIFY serves here, so an authenticated TLS peer has a verified
  // certificate.
  c.certificate_verified = tls;
  for (const char* property :
       {GRPC_X509_CN_PROPERTY_NAME, GRPC_X509_SAN_PROPERTY_NAME}) {
    for (const grpc::string_ref& name : auth->FindPropertyValues(property)) {
      c.certificate_names.emplace_back(name.data(), name.size());
    }
  }
  return c;
}

absl::Status Authenticator::Check(const grpc::ServerContextBase& ctx,
                                  Scope scope, absl::string_view method) const {
  if (!Protects(scope)) return absl::OkStatus();
  return Authorize(CredentialsOf(ctx), scope, method);
}

absl::Status Authenticator::Authorize(const PresentedCredentials& c,
                                      Scope scope,
                                      absl::string_view method) const {
  if (!Protects(scope)) return absl::OkStatus();
  bool malformed = c.authorization_entries > 1;
  absl::string_view token;
  if (c.authorization_entries == 1) {
    absl::string_view value = c.authorization;
    if (value.size() > kBearer.size() &&
        absl::EqualsIgnoreCase(value.substr(0, kBearer.size()), kBearer)) {
      token = value.substr(kBearer.size());
    } else {
      malformed = true;
    }
  }
  // Every configured token is compared, whatever matched before.
  bool admin_token = false, query_token = false;
  if (!malformed && !token.empty()) {
    for (const std::string& t : admin_tokens_) {
      admin_token = ConstantTimeEquals(token, t) || admin_token;
    }
    for (const std::string& t : query_tokens_) {
      query_token = ConstantTimeEquals(token, t) || query_token;
    }
  }
  const bool certificate = mutual_tls_ && c.certificate_verified;
  bool admin_certificate = certificate && admin_client_names_.empty();
  for (const std::string& name : c.certificate_names) {
    admin_certificate =
        admin_certificate ||
        (certificate &&
         std::find(admin_client_names_.begin(), admin_client_names_.end(),
                   name) != admin_client_names_.end());
  }
  if (admin_token || admin_certificate) return absl::OkStatus();
  if (scope == Scope::kQuery && query_token) return absl::OkStatus();

  if (malformed) {
    return Refusal(absl::StatusCode::kUnauthenticated, method,
                   "the authorization metadata must be one entry "
                   "\"Bearer <token>\"");
  }
  if (!token.empty() && !query_token) {
    return Refusal(absl::StatusCode::kUnauthenticated, method,
                   "the bearer token is not valid");
  }
  if (query_token) {
    return Refusal(absl::StatusCode::kPermissionDenied, method,
                   "a query token may not call Admin; use an admin token");
  }
  if (certificate) {
    return Refusal(
        absl::StatusCode::kPermissionDenied, method,
        absl::StrCat("the client certificate (",
                     c.certificate_names.empty()
                         ? std::string("no name")
                         : absl::StrJoin(c.certificate_names, ", "),
                     ") is not in --admin_client_names",
                     scope == Scope::kQuery ? "; send a query token" : ""));
  }
  return Refusal(
      absl::StatusCode::kUnauthenticated, method,
      absl::StrCat("no credential; send \"authorization: Bearer <token>\" "
                   "metadata with ",
                   scope == Scope::kAdmin ? "an admin token" : "a query token",
                   mutual_tls_ ? ", or an admin client certificate" : ""));
}

}  // namespace maxsimd
