// Security of the gRPC port: TLS (a server certificate), mutual TLS (client
// certificates verified against a CA) and bearer tokens, and who may call
// which service.
//
// Who may call what (README.md, "Security"):
//   - grpc.health.v1 and reflection: every client; they never reach this
//     code (probes must work without credentials).
//   - Admin (every RPC of the service, the read-only ones included): every
//     client while no admin credential is configured (no admin token and no
//     client CA), as before this file existed. Otherwise a call needs an
//     admin token, sent as `authorization: Bearer <token>` metadata, or,
//     with mutual TLS, a verified client certificate whose subject CN or one
//     of whose subject alternative names is in admin_client_names (any
//     verified client certificate when that list is empty).
//   - Reranker: every client under QueryAuth::kNone (the default). Under
//     kToken a call needs a query token, an admin token, or a client
//     certificate that may call Admin: whoever may administer may query.
//
// Status codes of a refused call (the method is never run):
//   UNAUTHENTICATED    the server does not know who calls: no credential, a
//                      malformed `authorization` entry (not "Bearer TOKEN",
//                      or more than one), or a token that is not configured.
//   PERMISSION_DENIED  it knows, and that identity may not call the method:
//                      a valid query token on Admin, or a verified client
//                      certificate whose names are not in admin_client_names.
// Messages name the method and the rule, never a token.
//
// Tokens are 16 to 4096 printable ASCII characters without spaces (what
// gRPC metadata can carry), compared with ConstantTimeEquals against every
// configured token, so the time taken says nothing about any of them.
// Token files are read once, at start: to rotate, list the new token next
// to the old one, restart, move the clients over, then remove the old one
// and restart again.
//
// Secret files (the token files and the TLS key) must be private to their
// owner: a file whose mode grants group or others any access (0644, 0640,
// 0604, 0620...) is refused at start, after following symlinks, unless
// allow_readable_secrets (--allow_readable_secret_files) accepts it with a
// warning. CheckSecretFileMode says why.
//
// Thread-safety: an Authenticator is immutable once created; Check and
// Authorize may be called from any thread.
#ifndef MAXSIMD_SERVER_AUTH_H_
#define MAXSIMD_SERVER_AUTH_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "grpcpp/grpcpp.h"

namespace maxsimd {

// The server's TLS files (PEM). Both of cert_file and key_file, or neither
// (plaintext); client_ca_file only with them.
struct TlsOptions {
  std::string cert_file;       // --tls_cert: certificate chain, leaf first
  std::string key_file;        // --tls_key: its private key, unencrypted
  std::string client_ca_file;  // --tls_client_ca: non-empty = mutual TLS
  // --allow_readable_secret_files: accept a key_file that group or others
  // may access (CheckSecretFileMode), with a warning. Set from the same
  // flag as AuthOptions::allow_readable_secrets.
  bool allow_readable_secrets = false;
};

// How Reranker calls are authenticated (--query_auth).
enum class QueryAuth {
  kNone,   // "none": open to every client that can connect
  kToken,  // "token": a query or admin token, or an admin certificate
};

// "none" or "token"; INVALID_ARGUMENT naming `field` otherwise.
absl::StatusOr<QueryAuth> ParseQueryAuth(absl::string_view name,
                                         absl::string_view field);

struct AuthOptions {
  // Admin tokens given directly (--admin_tokens; visible in `ps`, so the
  // file is preferred) and read from a file (--admin_token_file).
  std::vector<std::string> admin_tokens;
  std::string admin_token_file;
  // With mutual TLS, the client certificate names (CN or SAN) that may call
  // Admin without a token; empty = every verified client certificate.
  std::vector<std::string> admin_client_names;
  QueryAuth query_auth = QueryAuth::kNone;
  std::string query_token_file;  // --query_token_file; only under kToken
  // --allow_readable_secret_files: accept token files that group or others
  // may access (CheckSecretFileMode), with a warning.
  bool allow_readable_secrets = false;
};

// Whether the file at `path` (after following symlinks) is private enough
// to hold a secret: its mode grants group and others nothing (0600, 0400,
// 0700). The mode bits decide, not whether this process could read the file
// as someone else: a server run as root reads anything.
//   - OK when private, and when not but `allow_readable` is true; then it
//     logs a warning naming `flag`, the file and its mode.
//   - FAILED_PRECONDITION otherwise, naming --`flag`, the path (and the
//     symlink's target when it is one), the mode in octal and the fixes
//     (chmod 600, or --allow_readable_secret_files). The flag's value is
//     fine; the file's state must change, hence not INVALID_ARGUMENT.
//   - INVALID_ARGUMENT naming --`flag` and the path when it does not exist
//     or cannot be examined, as the readers below report it.
// `flag` is the flag's name without "--" ("tls_key").
absl::Status CheckSecretFileMode(const std::string& path,
                                 absl::string_view flag, bool allow_readable);

// The credentials of the gRPC port: InsecureServerCredentials when
// tls.cert_file is empty, else TLS with that certificate and key, and with
// tls.client_ca_file client certificates required and verified against it.
// Reads and parses every file now, so that a missing file, a file without
// a PEM certificate or key, an encrypted key or a key that does not match
// the certificate is INVALID_ARGUMENT naming the flag and the path. The key
// file must pass CheckSecretFileMode (tls.allow_readable_secrets): else
// FAILED_PRECONDITION. Logs a warning for a certificate that has expired
// or is not yet valid.
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsOptions& tls);

// The tokens of a token file: one a line; surrounding white space (a CRLF
// line end included), blank lines and lines starting with '#' are skipped.
// INVALID_ARGUMENT naming `flag` and the path when the file cannot be read
// or holds no token, and naming the line (never its content) when a token
// is not 16 to 4096 printable ASCII characters without spaces. The file
// opened must pass CheckSecretFileMode(path, flag, allow_readable), checked
// on the open file (no window between the check and the read): else
// FAILED_PRECONDITION. `flag` is the flag's name without "--".
absl::StatusOr<std::vector<std::string>> ReadTokenFile(const std::string& path,
                                                       absl::string_view flag,
                                                       bool allow_readable);

// Whether `given` equals `secret`, in a time that depends only on
// given.size(): every byte of `given` is compared (against secret's bytes
// in turn, cycling when `given` is the longer one) without an early exit,
// and the lengths are compared as part of the result rather than first.
// `given` is the caller's; `secret` the server's.
bool ConstantTimeEquals(absl::string_view given, absl::string_view secret);

// What a call presents, taken from its metadata and its TLS peer.
struct PresentedCredentials {
  // How many `authorization` metadata entries the call has, and the value
  // of the first one.
  int authorization_entries = 0;
  std::string authorization;
  // Mutual TLS: the peer's certificate was verified against the client CA.
  bool certificate_verified = false;
  // Its subject CN and subject alternative names.
  std::vector<std::string> certificate_names;
};

// The service a method belongs to, for the rules above.
enum class Scope { kQuery, kAdmin };

class Authenticator {
 public:
  // Reads the token files and checks the options against each other:
  // INVALID_ARGUMENT naming the flag for an unreadable token file, a bad
  // token, admin_client_names without mutual TLS, kToken with no token and
  // no client CA to accept, or a query token file without kToken;
  // FAILED_PRECONDITION for a token file that group or others may access
  // (ReadTokenFile, with options.allow_readable_secrets).
  static absl::StatusOr<std::unique_ptr<Authenticator>> Create(
      const AuthOptions& options, bool mutual_tls);

  // OK when the call of `ctx` may run `method` ("Admin.DropCorpus") of
  // `scope`; otherwise the refusal to finish it with, per the rules above.
  absl::Status Check(const grpc::ServerContextBase& ctx, Scope scope,
                     absl::string_view method) const;

  // Check on credentials already taken from a call (tests).
  absl::Status Authorize(const PresentedCredentials& credentials, Scope scope,
                         absl::string_view method) const;

  // The credentials a call presents.
  PresentedCredentials CredentialsOf(const grpc::ServerContextBase& ctx) const;

  // Whether calls of `scope` need a credential at all.
  bool Protects(Scope scope) const;

 private:
  Authenticator() = default;

  std::vector<std::string> admin_tokens_;
  std::vector<std::string> query_tokens_;
  std::vector<std::string> admin_client_names_;
  QueryAuth query_auth_ = QueryAuth::kNone;
  bool mutual_tls_ = false;
};

// A reactor that only finishes its call with `status` and deletes itself
// in OnDone: what a streaming method returns for a refused call, before it
// reads a message. `Reactor` is a grpc::ServerReadReactor<Request> or a
// grpc::ServerBidiReactor<Request, Response>.
template <typename Reactor>
class FinishedReactor final : public Reactor {
 public:
  explicit FinishedReactor(const grpc::Status& status) { this->Finish(status); }
  void OnDone() override { delete this; }
};

}  // namespace maxsimd

#endif  // MAXSIMD_SERVER_AUTH_H_
