#include "tests/server/test_certs.h"

#include <cstdlib>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace maxsimd::testing {
namespace {

// Extension sections for every certificate; the subject comes from -subj.
constexpr char kConfig[] = R"([req]
distinguished_name = dn
[dn]
[ca_ext]
basicConstraints = critical,CA:TRUE
keyUsage = critical,keyCertSign,cRLSign
subjectKeyIdentifier = hash
[server_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature,keyEncipherment
extendedKeyUsage = serverAuth
subjectAltName = DNS:localhost,IP:127.0.0.1
[admin_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectAltName = DNS:admin-client
[query_ext]
basicConstraints = CA:FALSE
keyUsage = critical,digitalSignature
extendedKeyUsage = clientAuth
subjectAltName = DNS:query-client
)";

constexpr char kNewKey[] =
    "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes";

// Runs `command` in `dir`, its output into dir/openssl.log.
absl::Status Run(const std::string& dir, const std::string& command) {
  const std::string line =
      absl::StrCat("cd '", dir, "' && ", command, " >>openssl.log 2>&1");
  if (std::system(line.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("`", command, "` failed:\n",
                     ReadTestFile(absl::StrCat(dir, "/openssl.log"))));
  }
  return absl::OkStatus();
}

// A self-signed CA `name`.pem / `name`.key.
absl::Status MakeCa(const std::string& dir, const std::string& name) {
  return Run(dir,
             absl::StrCat("openssl req -x509 -new ", kNewKey, " -keyout ", name,
                          ".key -out ", name, ".pem -days 2 -subj /CN=", name,
                          " -config openssl.cnf -extensions ca_ext"));
}

// A leaf `name`.pem / `name`.key with subject CN=`cn`, signed by CA `ca`.
absl::Status MakeLeaf(const std::string& dir, const std::string& name,
                      const std::string& cn, const std::string& ca,
                      const std::string& extensions, int serial) {
  absl::Status s =
      Run(dir, absl::StrCat("openssl req -new ", kNewKey, " -keyout ", name,
                            ".key -out ", name, ".csr -subj /CN=", cn,
                            " -config openssl.cnf"));
  if (!s.ok()) return s;
  return Run(dir, absl::StrCat("openssl x509 -req -in ", name, ".csr -CA ", ca,
                               ".pem -CAkey ", ca, ".key -set_serial ", serial,
                               " -out ", name,
                               ".pem -days 2 -extfile openssl.cnf "
                               "-extensions ",
                               extensions));
}

}  // namespace

std::string ReadTestFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream text;
  text << in.rdbuf();
  return text.str();
}

bool WriteTestFile(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  return out.good();
}

absl::StatusOr<TestCerts> MakeTestCerts() {
  const char* tmp = std::getenv("TMPDIR");
  std::string pattern = absl::StrCat(
      tmp != nullptr && tmp[0] != '\0' ? tmp : "/tmp", "/maxsimd-certs-XXXXXX");
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (mkdtemp(buf.data()) == nullptr) {
    return absl::InternalError(absl::StrCat("mkdtemp ", pattern, " failed"));
  }
  TestCerts c;
  c.dir = buf.data();
  if (!WriteTestFile(c.dir + "/openssl.cnf", kConfig)) {
    return absl::InternalError("cannot write openssl.cnf");
  }
  for (absl::Status s : {
           MakeCa(c.dir, "ca"),
           MakeCa(c.dir, "other-ca"),
           MakeLeaf(c.dir, "server", "localhost", "ca", "server_ext", 2),
           MakeLeaf(c.dir, "admin", "admin-client", "ca", "admin_ext", 3),
           MakeLeaf(c.dir, "query", "query-client", "ca", "query_ext", 4),
           MakeLeaf(c.dir, "rogue", "admin-client", "other-ca", "admin_ext", 5),
       }) {
    if (!s.ok()) return s;
  }
  auto path = [&](const char* file) { return absl::StrCat(c.dir, "/", file); };
  c.ca_cert = path("ca.pem");
  c.server_cert = path("server.pem");
  c.server_key = path("server.key");
  c.admin_cert = path("admin.pem");
  c.admin_key = path("admin.key");
  c.query_cert = path("query.pem");
  c.query_key = path("query.key");
  c.other_ca_cert = path("other-ca.pem");
  c.rogue_cert = path("rogue.pem");
  c.rogue_key = path("rogue.key");
  return c;
}

}  // namespace maxsimd::testing
