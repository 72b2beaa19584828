// Test certificates, made at test time with the `openssl` command-line tool
// (scripts/install_deps.sh installs it) into a fresh temporary directory:
// a CA, a server certificate for localhost and 127.0.0.1, two client
// certificates it signs, and a client certificate of another CA. EC P-256
// keys, valid for two days from now. Never checked in, so none expires.
//
// Thread-safety: MakeTestCerts may run on any thread; it only writes its
// own directory.
#ifndef MAXSIMD_TESTS_SERVER_TEST_CERTS_H_
#define MAXSIMD_TESTS_SERVER_TEST_CERTS_H_

#include <filesystem>
#include <string>
#include <system_error>
#include <utility>

#include "absl/status/statusor.h"
#include "gtest/gtest.h"

namespace maxsimd::testing {

// Paths of PEM files, all under `dir`.
struct TestCerts {
  std::string dir;
  std::string ca_cert;  // the CA that signs the server and both clients
  std::string server_cert, server_key;  // CN=localhost, DNS:localhost,
                                        // IP:127.0.0.1
  std::string admin_cert, admin_key;    // CN=admin-client, DNS:admin-client
  std::string query_cert, query_key;    // CN=query-client, DNS:query-client
  std::string other_ca_cert;            // a second, unrelated CA
  // CN=admin-client as well, but signed by the other CA.
  std::string rogue_cert, rogue_key;
};

// Makes the certificates in a new directory under $TMPDIR (or /tmp);
// INTERNAL with openssl's output when a command fails.
absl::StatusOr<TestCerts> MakeTestCerts();

// A fixture whose suite shares one set of certificates, certs_: made before
// its first test, removed after its last. Derived: the fixture itself (each
// suite has its own certs_); Base: the fixture it extends.
template <typename Derived, typename Base = ::testing::Test>
class WithTestCerts : public Base {
 protected:
  static void SetUpTestSuite() {
    absl::StatusOr<TestCerts> certs = MakeTestCerts();
    ASSERT_TRUE(certs.ok()) << certs.status();
    certs_ = new TestCerts(*std::move(certs));
  }
  static void TearDownTestSuite() {
    if (certs_ == nullptr) return;
    std::error_code ignored;
    std::filesystem::remove_all(certs_->dir, ignored);
    delete certs_;
    certs_ = nullptr;
  }
  static inline TestCerts* certs_ = nullptr;
};

// The contents of a file; "" when it cannot be read.
std::string ReadTestFile(const std::string& path);

// Writes `text` to `path` (replacing it); false on failure.
bool WriteTestFile(const std::string& path, const std::string& text);

}  // namespace maxsimd::testing

#endif  // MAXSIMD_TESTS_SERVER_TEST_CERTS_H_
