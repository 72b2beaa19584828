// maxsimctl: command-line tool for a maxsimd server (create and fill corpora,
// run rerank and scan queries, check health, set the log level, watch its
// /metrics live with `top`) and a generator of synthetic corpora for demos.
//
// Flags are parsed by hand rather than with absl flags because each command
// has its own flags: a per-command table gives `maxsimctl <command> --help`
// exactly the flags that command accepts, and rejects the others.
//
// Exit status: 0 success; 1 an RPC, file or data error; 2 a usage error;
// 3 `health` answered but the service is not SERVING.

#include <netdb.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "client/client.h"
#include "grpcpp/grpcpp.h"
#include "index/importers.h"
#include "index/npy.h"
#include "index/safetensors.h"
#include "index/synthetic.h"
#include "kernels/base/status_macros.h"
#include "kernels/element.h"
#include "kernels/types.h"

namespace maxsimd {
namespace {

constexpr int kExitOk = 0;
constexpr int kExitError = 1;
constexpr int kExitUsage = 2;
constexpr int kExitNotServing = 3;

// ---------------------------------------------------------------------------
// Command and flag tables: the single source of the help text and of which
// flags each command accepts.

struct FlagDef {
  const char* name;   // without the leading "--"
  const char* value;  // placeholder shown in help; nullptr for a boolean
  const char* help;
  const char* default_value;  // nullptr: required (non-boolean) or unset
  bool required;
};

struct Globals {
  ClientOptions options;
  bool json = false;
};

class Flags;
using RunFn = int (*)(const Globals&, const Flags&);

struct CommandDef {
  const char* name;
  const char* summary;
  std::vector<FlagDef> flags;
  RunFn run;
  // A flag of `flags` that may also be given as the one argument after the
  // command (maxsimctl log-level debug); nullptr: none.
  const char* positional = nullptr;
};

const std::vector<FlagDef>& GlobalFlagDefs() {
  static const std::vector<FlagDef> defs = {
      {"target", "HOST:PORT", "server address", "127.0.0.1:50051", false},
      {"json", nullptr, "print results as JSON", nullptr, false},
      {"timeout", "DURATION", "deadline of each call (e.g. 500ms, 30s, 2m)",
       "30s", false},
      {"tls", nullptr,
       "connect with TLS, verifying the server against the system's roots",
       nullptr, false},
      {"tls-ca", "FILE",
       "PEM file of the CA that signs the server's certificate (implies "
       "--tls)",
       nullptr, false},
      {"tls-cert", "FILE",
       "PEM file of this client's certificate, for mutual TLS (with "
       "--tls-key; implies --tls)",
       nullptr, false},
      {"tls-key", "FILE", "PEM file of the private key of --tls-cert", nullptr,
       false},
      {"tls-server-name", "NAME",
       "name the server's certificate carries when it is not --target's host "
       "(implies --tls)",
       nullptr, false},
      {"token-file", "FILE",
       "file whose first line (blank and '#' lines skipped) is the bearer "
       "token sent with every call, as `authorization: Bearer <token>`",
       nullptr, false},
      {"help", nullptr,
       "show help (maxsimctl <command> --help for one command)", nullptr,
       false},
  };
  return defs;
}

// The parsed flags of one command (defaults filled in).
class Flags {
 public:
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name) const {
    auto it = values_.find(name);
    return it == values_.end() ? std::string() : it->second;
  }
  bool Bool(const std::string& name) const {
    auto it = values_.find(name);
    return it != values_.end() && it->second == "true";
  }
  void Set(const std::string& name, std::string value) {
    values_[name] = std::move(value);
  }

 private:
  std::map<std::string, std::string> values_;
};

absl::Status UsageError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

int PrintError(const absl::Status& status, int exit_code) {
  std::fprintf(stderr, "error: %s: %s\n",
               absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str());
  return exit_code;
}

// ---------------------------------------------------------------------------
// Value parsing.

absl::StatusOr<int64_t> ParseInt(const Flags& flags, const std::string& name,
                                 int64_t min, int64_t max) {
  int64_t v;
  if (!absl::SimpleAtoi(flags.Get(name), &v) || v < min || v > max) {
    return UsageError(absl::StrCat("--", name, " must be an integer in [", min,
                                   ", ", max, "], got '", flags.Get(name),
                                   "'"));
  }
  return v;
}

// The whole of `text`, written to `path` (replacing it).
absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) {
    return absl::ErrnoToStatus(errno,
                               absl::StrCat("cannot write '", path, "'"));
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------------------
// Ids. The API takes any id of 1 to 256 bytes of UTF-8 (proto3 strings must
// be UTF-8: the server refuses a message that is not) and compares ids byte
// for byte, so maxsimctl passes ids on exactly as it reads them: nothing is
// trimmed, skipped or folded. An id it cannot pass on exactly is refused,
// naming where it came from, never altered.

constexpr size_t kMaxIdBytes = 256;  // AddDocumentsRequest.ids

// Whether `s` is well-formed UTF-8 (RFC 3629: no overlong forms, no
// surrogates, nothing past U+10FFFF), the check protobuf applies.
bool IsUtf8(absl::string_view s) {
  size_t i = 0;
  while (i < s.size()) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    size_t n;
    unsigned char lo = 0x80, hi = 0xbf;  // bounds of the second byte
    if (c < 0x80) {
      ++i;
      continue;
    } else if (c >= 0xc2 && c <= 0xdf) {
      n = 2;
    } else if (c >= 0xe0 && c <= 0xef) {
      n = 3;
      if (c == 0xe0) lo = 0xa0;  // overlong
      if (c == 0xed) hi = 0x9f;  // surrogates
    } else if (c >= 0xf0 && c <= 0xf4) {
      n = 4;
      if (c == 0xf0) lo = 0x90;  // overlong
      if (c == 0xf4) hi = 0x8f;  // past U+10FFFF
    } else {
      return false;
    }
    if (s.size() - i < n) return false;
    for (size_t k = 1; k < n; ++k) {
      const unsigned char b = static_cast<unsigned char>(s[i + k]);
      if (k == 1 ? (b < lo || b > hi) : (b & 0xc0) != 0x80) return false;
    }
    i += n;
  }
  return true;
}

// `id` for a message: quoted, with C escapes for control characters (a tab
// shows as \t) and for any byte of an id that is not UTF-8; a long id is
// cut after 64 bytes, with its length.
std::string ShowId(absl::string_view id) {
  const bool utf8 = IsUtf8(id);
  absl::string_view shown = id;
  if (shown.size() > 64) {
    size_t cut = 64;
    while (utf8 && cut > 0 &&
           (static_cast<unsigned char>(id[cut]) & 0xc0) == 0x80) {
      --cut;  // not inside a character
    }
    shown = id.substr(0, cut);
  }
  return absl::StrCat(
      "\"", utf8 ? absl::Utf8SafeCHexEscape(shown) : absl::CHexEscape(shown),
      shown.size() < id.size() ? absl::StrCat("...\" (", id.size(), " bytes)")
                               : "\"");
}

// Why the API would refuse `id`; "" when it takes it.
std::string IdProblem(absl::string_view id) {
  if (id.empty()) return "is empty";
  if (id.size() > kMaxIdBytes) {
    return absl::StrCat("is over the API's limit of ", kMaxIdBytes, " bytes");
  }
  if (!IsUtf8(id)) return "is not UTF-8";
  return "";
}

// The ids of --`flag`'s comma-separated value, byte for byte: split at
// every ',' and nowhere else (no trimming; "a, b" is "a" and " b"), so an id
// that holds ',' can only come from a file. An item the API would refuse
// (IdProblem: ",," and a ',' at either end make empty ones) is
// INVALID_ARGUMENT naming the flag, the item's position and the id.
absl::StatusOr<std::vector<std::string>> ParseIdList(absl::string_view list,
                                                     absl::string_view flag) {
  if (list.empty()) {
    return UsageError(
        absl::StrCat("--", flag, " is empty: give at least one id"));
  }
  std::vector<std::string> ids;
  for (absl::string_view id : absl::StrSplit(list, ',')) {
    const std::string problem = IdProblem(id);
    if (!problem.empty()) {
      return UsageError(absl::StrCat(
          "--", flag, ": id ", ids.size() + 1, " ", ShowId(id), " ", problem,
          id.empty() ? " (ids are separated by single commas; an id that "
                       "holds ',' goes in a file, one per line)"
                     : ""));
    }
    ids.emplace_back(id);
  }
  return ids;
}

// The ids of the file named by --`flag` (--ids, --candidates-file,
// --ids-file), one per line, byte for byte. A line ends at "\n", and one
// "\r" before it belongs to the line ending (a file written on Windows);
// the last line needs no "\n", and a final "\n" starts no empty line. Every
// other byte, spaces, tabs, '#' and ',' included, is part of an id. So an
// id cannot hold "\n" or end in "\r": a line that still ends in "\r", or
// holds an id the API would refuse (IdProblem: an empty line is an empty
// id), is INVALID_ARGUMENT naming the flag, the file, the line and the id.
// An empty file holds no ids. Errors reading the file are ReadInputFile's,
// naming the flag.
absl::StatusOr<std::vector<std::string>> ReadIdFile(const std::string& path,
                                                    absl::string_view flag) {
  absl::StatusOr<std::string> text = ReadInputFile(path);
  if (!text.ok()) {
    return absl::Status(
        text.status().code(),
        absl::StrCat("--", flag, ": ", text.status().message()));
  }
  std::vector<std::string> ids;
  absl::string_view lines = *text;
  if (lines.empty()) return ids;
  absl::ConsumeSuffix(&lines, "\n");
  for (absl::string_view id : absl::StrSplit(lines, '\n')) {
    absl::ConsumeSuffix(&id, "\r");
    std::string problem = IdProblem(id);
    if (problem.empty() && absl::EndsWith(id, "\r")) {
      problem =
          "ends in \"\\r\", which an ids file cannot carry (one \"\\r\" "
          "before \"\\n\" is part of the line ending)";
    }
    if (!problem.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat("--", flag, ": '", path, "' line ", ids.size() + 1,
                       ": id ", ShowId(id), " ", problem));
    }
    ids.emplace_back(id);
  }
  return ids;
}

// ---------------------------------------------------------------------------
// Output.

std::string JsonString(absl::string_view s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        out += "\\\"";
        break;
      case '\\':
        out += "\\\\";
        break;
      case '\n':
        out += "\\n";
        break;
      case '\r':
        out += "\\r";
        break;
      case '\t':
        out += "\\t";
        break;
      default:
        if (c < 0x20 || c == 0x7f) {
          out += absl::StrFormat("\\u%04x", c);
        } else {
          out.push_back(static_cast<char>(c));  // UTF-8 passes through
        }
    }
  }
  return out + "\"";
}

// JSON has no NaN or infinity; they become null.
std::string JsonNumber(double v) {
  if (!std::isfinite(v)) return "null";
  return absl::StrFormat("%.9g", v);
}

double Ms(int64_t ns) { return static_cast<double>(ns) / 1e6; }

const char* DTypeLabel(v1::DType t) {
  switch (t) {
    case v1::DTYPE_FLOAT32:
      return "float32";
    case v1::DTYPE_FLOAT16:
      return "float16";
    case v1::DTYPE_BFLOAT16:
      return "bfloat16";
    case v1::DTYPE_INT8:
      return "int8";
    case v1::DTYPE_PLAID:
      return "plaid";
    default:
      return "unspecified";
  }
}

const char* LayoutLabel(v1::Layout l) {
  switch (l) {
    case v1::LAYOUT_DENSE:
      return "dense";
    case v1::LAYOUT_INT8:
      return "int8";
    case v1::LAYOUT_PLAID:
      return "plaid";
    default:
      return "unspecified";
  }
}

const char* PlacementLabel(v1::Placement p) {
  switch (p) {
    case v1::PLACEMENT_AUTO:
      return "auto";
    case v1::PLACEMENT_GPU:
      return "gpu";
    case v1::PLACEMENT_HOST:
      return "host";
    default:
      return "unspecified";
  }
}

std::string CorpusJson(const v1::CorpusInfo& c) {
  return absl::StrCat(
      "{\"name\":", JsonString(c.name()), ",\"dim\":", c.dim(),
      ",\"layout\":", JsonString(LayoutLabel(c.layout())),
      ",\"placement\":", JsonString(PlacementLabel(c.placement())),
      ",\"normalize\":", c.normalize() ? "true" : "false",
      ",\"storage_dtype\":", JsonString(DTypeLabel(c.storage_dtype())),
      ",\"quantize_queries\":", c.quantize_queries() ? "true" : "false",
      ",\"num_documents\":", c.num_documents(),
      ",\"num_tokens\":", c.num_tokens(), ",\"bytes\":", c.bytes(),
      ",\"streamed_bytes\":", c.streamed_bytes(),
      ",\"num_segments\":", c.num_segments(),
      ",\"num_deleted\":", c.num_deleted(),
      ",\"resident_on\":", JsonString(c.resident_on()), "}");
}

void PrintCorpusText(const v1::CorpusInfo& c) {
  const std::vector<std::pair<std::string, std::string>> rows = {
      {"name", c.name()},
      {"dim", absl::StrCat(c.dim())},
      {"layout", LayoutLabel(c.layout())},
      {"storage_dtype", DTypeLabel(c.storage_dtype())},
      {"quantize_queries", c.quantize_queries() ? "true" : "false"},
      {"placement", PlacementLabel(c.placement())},
      {"resident_on", c.resident_on()},
      {"normalize", c.normalize() ? "true" : "false"},
      {"documents", absl::StrCat(c.num_documents())},
      {"tokens", absl::StrCat(c.num_tokens())},
      {"deleted", absl::StrCat(c.num_deleted())},
      {"segments", absl::StrCat(c.num_segments())},
      {"bytes", absl::StrCat(c.bytes())},
      {"streamed_bytes", absl::StrCat(c.streamed_bytes())},
  };
  for (const auto& [key, value] : rows) {
    std::printf("%-16s %s\n", key.c_str(), value.c_str());
  }
}

// Prints rows as left-aligned text columns, numeric columns right-aligned.
void PrintTable(const std::vector<std::string>& header,
                const std::vector<std::vector<std::string>>& rows,
                const std::vector<bool>& right_align) {
  std::vector<size_t> width(header.size());
  for (size_t c = 0; c < header.size(); ++c) width[c] = header[c].size();
  for (const auto& row : rows) {
    for (size_t c = 0; c < row.size(); ++c) {
      width[c] = std::max(width[c], row[c].size());
    }
  }
  auto print_row = [&](const std::vector<std::string>& row) {
    std::string line;
    for (size_t c = 0; c < row.size(); ++c) {
      if (c > 0) line += "  ";
      const std::string pad(width[c] - row[c].size(), ' ');
      const bool last = c + 1 == row.size();
      line += right_align[c] ? pad + row[c] : (last ? row[c] : row[c] + pad);
    }
    std::printf("%s\n", line.c_str());
  };
  print_row(header);
  for (const auto& row : rows) print_row(row);
}

std::string ResponseJson(const v1::RerankResponse& r) {
  std::string out = absl::StrCat("{\"request_id\":", JsonString(r.request_id()),
                                 ",\"results\":[");
  for (int i = 0; i < r.results_size(); ++i) {
    if (i > 0) out += ",";
    absl::StrAppend(&out, "{\"rank\":", i + 1,
                    ",\"id\":", JsonString(r.results(i).id()),
                    ",\"score\":", JsonNumber(r.results(i).score()), "}");
  }
  const v1::Timing& t = r.timing();
  absl::StrAppend(&out,
                  "],\"timing\":{\"queue_ms\":", JsonNumber(Ms(t.queue_ns())),
                  ",\"compute_ms\":", JsonNumber(Ms(t.compute_ns())),
                  ",\"total_ms\":", JsonNumber(Ms(t.total_ns())),
                  ",\"h2d_ms\":", JsonNumber(Ms(t.h2d_ns())),
                  ",\"kernel_ms\":", JsonNumber(Ms(t.kernel_ns())),
                  ",\"topk_ms\":", JsonNumber(Ms(t.topk_ns())),
                  ",\"batch_queries\":", t.batch_queries(), "}}");
  return out;
}

void PrintResponseText(const v1::RerankResponse& r) {
  std::vector<std::vector<std::string>> rows;
  for (int i = 0; i < r.results_size(); ++i) {
    rows.push_back({absl::StrCat(i + 1), r.results(i).id(),
                    absl::StrFormat("%.5f", r.results(i).score())});
  }
  PrintTable({"rank", "id", "score"}, rows, {true, false, true});
  const v1::Timing& t = r.timing();
  std::printf(
      "timing: queue %.3f ms, compute %.3f ms, total %.3f ms "
      "(batch of %d quer%s)\n",
      Ms(t.queue_ns()), Ms(t.compute_ns()), Ms(t.total_ns()), t.batch_queries(),
      t.batch_queries() == 1 ? "y" : "ies");
}

// ---------------------------------------------------------------------------
// Commands.

absl::StatusOr<std::unique_ptr<Client>> Connect(const Globals& globals,
                                                bool send_float16 = false) {
  ClientOptions options = globals.options;
  options.send_float16 = send_float16;
  return Client::Create(options);
}

// The exit code for a command's result: RPC, file and data errors exit 1
// (usage errors are caught, with exit 2, before a command runs).
int Finish(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  return PrintError(status, kExitError);
}

int RunCreate(const Globals& g, const Flags& f) {
  v1::CreateCorpusRequest request;
  request.set_name(f.Get("name"));
  absl::StatusOr<int64_t> dim = ParseInt(f, "dim", 1, 1 << 20);
  if (!dim.ok()) return PrintError(dim.status(), kExitUsage);
  request.set_dim(static_cast<int32_t>(*dim));
  const std::string layout = f.Get("layout");
  const std::string dtype = f.Get("dtype");
  if (layout == "dense") {
    request.set_layout(v1::LAYOUT_DENSE);
    if (dtype.empty() || dtype == "float16") {
      request.set_storage_dtype(v1::DTYPE_FLOAT16);
    } else if (dtype == "bfloat16") {
      request.set_storage_dtype(v1::DTYPE_BFLOAT16);
    } else {
      return PrintError(
          UsageError(absl::StrCat(
              "--dtype must be float16 or bfloat16 for --layout dense, got '",
              dtype, "'")),
          kExitUsage);
    }
    if (f.Bool("quantize-queries")) {
      return PrintError(UsageError("--quantize-queries needs --layout int8"),
                        kExitUsage);
    }
  } else if (layout == "int8") {
    request.set_layout(v1::LAYOUT_INT8);
    if (!dtype.empty() && dtype != "int8") {
      return PrintError(
          UsageError(absl::StrCat("--dtype ", dtype,
                                  " is for --layout dense; an int8 corpus "
                                  "stores int8 codes with per-token scales")),
          kExitUsage);
    }
    request.set_storage_dtype(v1::DTYPE_INT8);
    request.set_quantize_queries(f.Bool("quantize-queries"));
  } else if (layout == "plaid") {
    request.set_layout(v1::LAYOUT_PLAID);
    if (!dtype.empty() || f.Bool("quantize-queries")) {
      return PrintError(UsageError("--dtype and --quantize-queries do not go "
                                   "with --layout plaid"),
                        kExitUsage);
    }
    absl::StatusOr<int64_t> nbits = ParseInt(f, "plaid-nbits", 1, 8);
    if (!nbits.ok()) return PrintError(nbits.status(), kExitUsage);
    absl::StatusOr<int64_t> centroids =
        ParseInt(f, "plaid-centroids", 0, int64_t{1} << 22);
    if (!centroids.ok()) return PrintError(centroids.status(), kExitUsage);
    request.set_plaid_nbits(static_cast<int32_t>(*nbits));
    request.set_plaid_centroids(*centroids);
  } else {
    return PrintError(
        UsageError(absl::StrCat("--layout must be dense, int8 or plaid, got '",
                                layout, "'")),
        kExitUsage);
  }
  const std::string placement = f.Get("placement");
  if (placement == "auto") {
    request.set_placement(v1::PLACEMENT_AUTO);
  } else if (placement == "gpu") {
    request.set_placement(v1::PLACEMENT_GPU);
  } else if (placement == "host") {
    request.set_placement(v1::PLACEMENT_HOST);
  } else {
    return PrintError(
        UsageError(absl::StrCat("--placement must be auto, gpu or host, got '",
                                placement, "'")),
        kExitUsage);
  }
  request.set_normalize(f.Bool("normalize"));
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(v1::CorpusInfo info,
                             client->CreateCorpus(request));
    if (g.json) {
      std::printf("%s\n", CorpusJson(info).c_str());
    } else {
      std::printf("created corpus '%s'\n", info.name().c_str());
      PrintCorpusText(info);
    }
    return absl::OkStatus();
  }());
}

// `add`'s documents: the tokens of one source (.npy pair, safetensors or
// PLAID directory), and the ids of --ids read byte for byte (ReadIdFile)
// rather than by the importers' line reader, which trims them; a PLAID index
// without --ids keeps its passage ids "0", "1", ...
absl::StatusOr<ImportedDocuments> ReadAddFiles(const DocumentFiles& files) {
  ImportedDocuments docs;
  if (!files.plaid_dir.empty()) {
    DocumentFiles plaid;
    plaid.plaid_dir = files.plaid_dir;
    MAXSIMD_ASSIGN_OR_RETURN(docs, ReadDocumentFiles(plaid));
  } else if (!files.safetensors.empty()) {
    MAXSIMD_ASSIGN_OR_RETURN(SafetensorsFile file,
                             ReadSafetensors(files.safetensors));
    MAXSIMD_ASSIGN_OR_RETURN(SafetensorsDocuments st,
                             DocumentsFromSafetensors(file, files.safetensors));
    docs.dim = st.dim;
    docs.tokens = std::move(st.tokens);
    docs.cu_seqlens = std::move(st.cu_seqlens);
    docs.float16 = st.float16;
  } else {
    MAXSIMD_ASSIGN_OR_RETURN(NpyArray tokens, ReadNpy(files.tokens_npy));
    MAXSIMD_ASSIGN_OR_RETURN(NpyArray cu, ReadNpy(files.cu_seqlens_npy));
    MAXSIMD_ASSIGN_OR_RETURN(
        NpyDocuments npy,
        DocumentsFromNpy(tokens, files.tokens_npy, cu, files.cu_seqlens_npy));
    docs.dim = npy.dim;
    docs.tokens = std::move(npy.tokens);
    docs.cu_seqlens = std::move(npy.cu_seqlens);
    docs.float16 = npy.float16;
  }
  if (!files.ids.empty()) {
    MAXSIMD_ASSIGN_OR_RETURN(docs.ids, ReadIdFile(files.ids, "ids"));
    if (docs.ids.size() + 1 != docs.cu_seqlens.size()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--ids: '", files.ids, "' has ", docs.ids.size(), " ids, but the ",
          "documents number ", docs.cu_seqlens.size() - 1));
    }
  }
  return docs;
}

int RunAdd(const Globals& g, const Flags& f) {
  double chunk_mb = 0;
  if (!absl::SimpleAtod(f.Get("chunk-mb"), &chunk_mb) || !(chunk_mb > 0) ||
      chunk_mb > 1024) {
    return PrintError(UsageError(absl::StrCat(
                          "--chunk-mb must be a number in (0, 1024], got '",
                          f.Get("chunk-mb"), "'")),
                      kExitUsage);
  }
  if (f.Get("ids").empty() && f.Get("plaid").empty()) {
    return PrintError(UsageError("--ids is required (except with --plaid)"),
                      kExitUsage);
  }
  return Finish([&]() -> absl::Status {
    DocumentFiles files;
    files.tokens_npy = f.Get("tokens");
    files.cu_seqlens_npy = f.Get("cu-seqlens");
    files.safetensors = f.Get("safetensors");
    files.plaid_dir = f.Get("plaid");
    files.ids = f.Get("ids");
    // The importer refuses these combinations too; here they are a usage
    // error naming the flags.
    const bool npy = !files.tokens_npy.empty() || !files.cu_seqlens_npy.empty();
    if (int{npy} + int{!files.safetensors.empty()} +
                int{!files.plaid_dir.empty()} !=
            1 ||
        (npy && (files.tokens_npy.empty() || files.cu_seqlens_npy.empty()))) {
      return UsageError(
          "give one of --safetensors, --plaid, or both --tokens and "
          "--cu-seqlens");
    }
    MAXSIMD_ASSIGN_OR_RETURN(ImportedDocuments docs, ReadAddFiles(files));
    DocumentBatch batch;
    batch.dim = docs.dim;
    batch.tokens = std::move(docs.tokens);
    batch.cu_seqlens = std::move(docs.cu_seqlens);
    batch.ids = std::move(docs.ids);
    // fp16 input goes out as fp16: exact, and half the bytes.
    const bool float16 = docs.float16;
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                             Connect(g, float16));
    const auto start = std::chrono::steady_clock::now();
    MAXSIMD_ASSIGN_OR_RETURN(
        v1::AddDocumentsResponse response,
        client->AddDocuments(f.Get("corpus"), batch,
                             static_cast<int64_t>(chunk_mb * (1 << 20))));
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
            .count();
    if (g.json) {
      std::printf("{\"added\":%lld,\"seconds\":%s,\"corpus\":%s}\n",
                  static_cast<long long>(response.added()),
                  JsonNumber(seconds).c_str(),
                  CorpusJson(response.corpus()).c_str());
    } else {
      std::printf(
          "added %lld documents (%lld tokens) to '%s' in %.2f s; it now "
          "holds %lld documents, %lld tokens\n",
          static_cast<long long>(response.added()),
          static_cast<long long>(batch.cu_seqlens.back()),
          f.Get("corpus").c_str(), seconds,
          static_cast<long long>(response.corpus().num_documents()),
          static_cast<long long>(response.corpus().num_tokens()));
    }
    return absl::OkStatus();
  }());
}

// A query file's array as the file stores it: product(shape) elements of
// `dtype`, little-endian, row-major, in `data`.
struct QueryArray {
  DType dtype = DType::kFloat32;
  std::vector<int64_t> shape;
  std::string data;
};

// --query: a .npy file (told by its magic, whatever its name) or else a
// safetensors file (the tensor --query-tensor names, index/safetensors.h's
// FloatTensorFromSafetensors), read in its own dtype: float32, float16 or
// bfloat16 (NpyFloatDType: ml_dtypes' '<V2' or '|V2'; with
// `bfloat16_flag`, --query-dtype=bfloat16, also 16-bit unsigned integers as
// bfloat16 bits, and then nothing but bfloat16). [Lq, dim] or
// [Nq, Lq, dim]. INVALID_ARGUMENT naming the file otherwise.
absl::StatusOr<QueryArray> ReadQueryFile(const std::string& path,
                                         const std::string& tensor,
                                         bool bfloat16_flag) {
  absl::StatusOr<std::string> bytes = ReadInputFile(path);
  if (!bytes.ok()) {
    return absl::Status(bytes.status().code(),
                        absl::StrCat("--query: ", bytes.status().message()));
  }
  constexpr absl::string_view kNpyMagic("\x93NUMPY", 6);
  constexpr absl::string_view kFlagHint(
      "; for bfloat16 bits in a uint16 array give --query-dtype=bfloat16");
  QueryArray out;
  std::string found;  // the file's own name of its dtype, for messages
  if (absl::StartsWith(*bytes, kNpyMagic)) {
    if (!tensor.empty()) {
      return UsageError(absl::StrCat(
          "--query-tensor is for safetensors files; '", path, "' is .npy"));
    }
    MAXSIMD_ASSIGN_OR_RETURN(NpyArray array, ParseNpy(*bytes, path));
    absl::StatusOr<DType> dtype = NpyFloatDType(array, path, bfloat16_flag);
    if (!dtype.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          dtype.status().message(), array.descr == "<u2" ? kFlagHint : ""));
    }
    out.dtype = *dtype;
    out.shape = std::move(array.shape);
    out.data.assign(array.data.begin(), array.data.end());
    found = absl::StrCat("'", array.descr, "'");
  } else {
    absl::StatusOr<SafetensorsFile> file = ParseSafetensors(*bytes, path);
    if (!file.ok()) {
      return absl::Status(
          file.status().code(),
          absl::StrCat("--query: '", path,
                       "' is not .npy (no \\x93NUMPY magic), and not "
                       "safetensors: ",
                       file.status().message()));
    }
    // U16 is taken here to say what the flag would do; refused below
    // without it.
    MAXSIMD_ASSIGN_OR_RETURN(
        SafetensorsFloatTensor t,
        FloatTensorFromSafetensors(*file, tensor, path,
                                   /*uint16_is_bfloat16=*/true));
    if (t.tensor->dtype == "U16" && !bfloat16_flag) {
      return absl::InvalidArgumentError(absl::StrCat(
          "safetensors file ", path, ": tensor \"", t.name,
          "\" has dtype U16; expected F32, F16 or BF16", kFlagHint));
    }
    out.dtype = t.dtype;
    out.shape = t.tensor->shape;
    out.data = t.tensor->data;
    found = t.tensor->dtype;
  }
  if (bfloat16_flag && out.dtype != DType::kBFloat16) {
    return absl::InvalidArgumentError(
        absl::StrCat("--query-dtype=bfloat16, but '", path, "' holds ",
                     DTypeName(out.dtype), " (", found, ")"));
  }
  if (out.shape.size() != 2 && out.shape.size() != 3) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' must be [Lq, dim] or [Nq, Lq, dim], got ",
                     out.shape.size(), " dimensions"));
  }
  const int64_t dim = out.shape.back();
  if (dim < 1 || dim > std::numeric_limits<int32_t>::max()) {
    return absl::InvalidArgumentError(
        absl::StrCat("'", path, "' has dim ", dim));
  }
  return out;
}

v1::DType WireDType(DType t) {
  switch (t) {
    case DType::kFloat16:
      return v1::DTYPE_FLOAT16;
    case DType::kBFloat16:
      return v1::DTYPE_BFLOAT16;
    default:
      return v1::DTYPE_FLOAT32;
  }
}

// Rerank of a request built here: through the request form of RerankAsync,
// since a Query holds fp32 values and this request's tensor is in its
// file's dtype.
absl::StatusOr<v1::RerankResponse> SendRerank(Client& client,
                                              v1::RerankRequest request,
                                              absl::Duration timeout) {
  absl::Notification done;
  absl::StatusOr<v1::RerankResponse> result;
  client.RerankAsync(std::move(request), absl::Now() + timeout,
                     [&](absl::StatusOr<v1::RerankResponse> response) {
                       result = std::move(response);
                       done.Notify();
                     });
  done.WaitForNotification();
  return result;
}

int RunQuery(const Globals& g, const Flags& f) {
  absl::StatusOr<int64_t> top_k = ParseInt(f, "top-k", 1, kMaxTopK);
  if (!top_k.ok()) return PrintError(top_k.status(), kExitUsage);
  const std::string query_dtype = f.Get("query-dtype");
  if (query_dtype != "auto" && query_dtype != "bfloat16" &&
      query_dtype != "bf16") {
    return PrintError(
        UsageError(
            absl::StrCat("--query-dtype must be auto or bfloat16 (bf16), got '",
                         query_dtype, "'")),
        kExitUsage);
  }
  std::vector<std::string> candidates;
  if (f.Has("candidates")) {
    absl::StatusOr<std::vector<std::string>> listed =
        ParseIdList(f.Get("candidates"), "candidates");
    if (!listed.ok()) return PrintError(listed.status(), kExitUsage);
    candidates = *std::move(listed);
  }
  return Finish([&]() -> absl::Status {
    if (f.Has("candidates-file")) {
      MAXSIMD_ASSIGN_OR_RETURN(
          std::vector<std::string> more,
          ReadIdFile(f.Get("candidates-file"), "candidates-file"));
      if (more.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--candidates-file: '", f.Get("candidates-file"),
                         "' holds no ids; leave it out for a scan"));
      }
      candidates.insert(candidates.end(), more.begin(), more.end());
    }
    const std::string path = f.Get("query");
    MAXSIMD_ASSIGN_OR_RETURN(
        QueryArray array,
        ReadQueryFile(path, f.Get("query-tensor"), query_dtype != "auto"));
    const int64_t dim = array.shape.back();
    Query query;
    query.corpus = f.Get("corpus");
    query.dim = static_cast<int32_t>(dim);
    query.candidate_ids = candidates;
    query.top_k = static_cast<int32_t>(*top_k);
    std::vector<v1::RerankResponse> responses;
    if (array.shape.size() == 2) {
      // One query goes as the file holds it: its bytes, its dtype.
      MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
      v1::RerankRequest request = client->ToRequest(query);
      v1::Tensor* tensor = request.mutable_query();
      tensor->set_dtype(WireDType(array.dtype));
      tensor->clear_shape();
      for (int64_t d : array.shape) tensor->add_shape(d);
      tensor->set_data(std::move(array.data));
      MAXSIMD_ASSIGN_OR_RETURN(
          v1::RerankResponse r,
          SendRerank(*client, std::move(request), g.options.timeout));
      responses.push_back(std::move(r));
    } else {
      // A batch goes in one RerankBatch call, built from Queries, which
      // carry fp32 values: float16 is sent as float16 (exact), and bfloat16
      // as float32, exact too (a bfloat16 is the top half of a binary32),
      // so the server ranks the same values, for twice the bytes.
      const int64_t num_queries = array.shape[0];
      const int64_t per_query = array.shape[1] * dim;
      std::vector<float> values(static_cast<size_t>(num_queries * per_query));
      ConvertToFloat(array.data.data(), array.dtype, 0,
                     static_cast<int64_t>(values.size()), values.data());
      std::vector<Query> queries(static_cast<size_t>(num_queries), query);
      for (int64_t i = 0; i < num_queries; ++i) {
        queries[i].tokens.assign(values.begin() + i * per_query,
                                 values.begin() + (i + 1) * per_query);
        queries[i].request_id = num_queries > 1 ? absl::StrCat("q", i) : "";
      }
      MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client,
                               Connect(g, array.dtype == DType::kFloat16));
      MAXSIMD_ASSIGN_OR_RETURN(responses, client->RerankBatch(queries));
    }
    const std::string mode =
        candidates.empty()
            ? "scan of the whole corpus"
            : absl::StrCat("rerank of ", candidates.size(), " candidates");
    if (g.json) {
      if (array.shape.size() == 2) {
        std::printf("%s\n", ResponseJson(responses[0]).c_str());
      } else {
        std::string out = "{\"responses\":[";
        for (size_t i = 0; i < responses.size(); ++i) {
          if (i > 0) out += ",";
          out += ResponseJson(responses[i]);
        }
        std::printf("%s]}\n", out.c_str());
      }
      return absl::OkStatus();
    }
    for (size_t i = 0; i < responses.size(); ++i) {
      if (array.shape.size() == 3) {
        std::printf("%squery %zu of %zu (%s)\n", i > 0 ? "\n" : "", i + 1,
                    responses.size(), mode.c_str());
      } else {
        std::printf("query: %s, top %lld (%s [%lld, %lld])\n", mode.c_str(),
                    static_cast<long long>(*top_k), DTypeName(array.dtype),
                    static_cast<long long>(array.shape[0]),
                    static_cast<long long>(dim));
      }
      PrintResponseText(responses[i]);
    }
    return absl::OkStatus();
  }());
}

int RunDelete(const Globals& g, const Flags& f) {
  if (!f.Has("ids") && !f.Has("ids-file")) {
    return PrintError(UsageError("give --ids, --ids-file or both"), kExitUsage);
  }
  std::vector<std::string> ids;
  if (f.Has("ids")) {
    absl::StatusOr<std::vector<std::string>> listed =
        ParseIdList(f.Get("ids"), "ids");
    if (!listed.ok()) return PrintError(listed.status(), kExitUsage);
    ids = *std::move(listed);
  }
  return Finish([&]() -> absl::Status {
    if (f.Has("ids-file")) {
      MAXSIMD_ASSIGN_OR_RETURN(std::vector<std::string> more,
                               ReadIdFile(f.Get("ids-file"), "ids-file"));
      if (more.empty()) {
        return absl::InvalidArgumentError(
            absl::StrCat("--ids-file: '", f.Get("ids-file"), "' holds no ids"));
      }
      ids.insert(ids.end(), more.begin(), more.end());
    }
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(v1::DeleteDocumentsResponse r,
                             client->DeleteDocuments(f.Get("corpus"), ids,
                                                     f.Bool("ignore-missing")));
    if (g.json) {
      std::printf("{\"deleted\":%lld,\"missing\":%lld}\n",
                  static_cast<long long>(r.deleted()),
                  static_cast<long long>(r.missing()));
    } else {
      std::printf("deleted %lld documents from '%s' (%lld ids not found)\n",
                  static_cast<long long>(r.deleted()), f.Get("corpus").c_str(),
                  static_cast<long long>(r.missing()));
    }
    return absl::OkStatus();
  }());
}

int RunDrop(const Globals& g, const Flags& f) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_RETURN_IF_ERROR(client->DropCorpus(f.Get("name")));
    if (g.json) {
      std::printf("{\"dropped\":%s}\n", JsonString(f.Get("name")).c_str());
    } else {
      std::printf("dropped corpus '%s'\n", f.Get("name").c_str());
    }
    return absl::OkStatus();
  }());
}

int RunAlias(const Globals& g, const Flags& f) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(std::string previous,
                             client->SetAlias(f.Get("alias"), f.Get("corpus")));
    if (g.json) {
      std::printf("{\"alias\":%s,\"corpus\":%s,\"previous_corpus\":%s}\n",
                  JsonString(f.Get("alias")).c_str(),
                  JsonString(f.Get("corpus")).c_str(),
                  JsonString(previous).c_str());
    } else if (previous.empty()) {
      std::printf("alias '%s' -> '%s'\n", f.Get("alias").c_str(),
                  f.Get("corpus").c_str());
    } else {
      std::printf("alias '%s' -> '%s' (was '%s')\n", f.Get("alias").c_str(),
                  f.Get("corpus").c_str(), previous.c_str());
    }
    return absl::OkStatus();
  }());
}

int RunUnalias(const Globals& g, const Flags& f) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_RETURN_IF_ERROR(client->DeleteAlias(f.Get("alias")));
    if (g.json) {
      std::printf("{\"deleted_alias\":%s}\n",
                  JsonString(f.Get("alias")).c_str());
    } else {
      std::printf("deleted alias '%s'\n", f.Get("alias").c_str());
    }
    return absl::OkStatus();
  }());
}

int RunAliases(const Globals& g, const Flags&) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(std::vector<v1::Alias> aliases,
                             client->ListAliases());
    if (g.json) {
      std::string out = "{\"aliases\":[";
      for (size_t i = 0; i < aliases.size(); ++i) {
        absl::StrAppend(&out, i > 0 ? "," : "",
                        "{\"alias\":", JsonString(aliases[i].alias()),
                        ",\"corpus\":", JsonString(aliases[i].corpus()), "}");
      }
      std::printf("%s]}\n", out.c_str());
      return absl::OkStatus();
    }
    std::vector<std::vector<std::string>> rows;
    for (const v1::Alias& a : aliases) rows.push_back({a.alias(), a.corpus()});
    PrintTable({"alias", "corpus"}, rows, {false, false});
    return absl::OkStatus();
  }());
}

int RunSnapshot(const Globals& g, const Flags& f) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(
        int64_t docs, client->SnapshotCorpus(f.Get("name"), f.Get("path")));
    if (g.json) {
      std::printf("{\"name\":%s,\"path\":%s,\"num_documents\":%lld}\n",
                  JsonString(f.Get("name")).c_str(),
                  JsonString(f.Get("path")).c_str(),
                  static_cast<long long>(docs));
    } else {
      std::printf("snapshot of '%s' (%lld documents) in '%s'\n",
                  f.Get("name").c_str(), static_cast<long long>(docs),
                  f.Get("path").c_str());
    }
    return absl::OkStatus();
  }());
}

int RunLoad(const Globals& g, const Flags& f) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(v1::CorpusInfo info,
                             client->LoadCorpus(f.Get("path"), f.Get("name")));
    if (g.json) {
      std::printf("%s\n", CorpusJson(info).c_str());
    } else {
      std::printf("loaded corpus '%s': %lld documents\n", info.name().c_str(),
                  static_cast<long long>(info.num_documents()));
    }
    return absl::OkStatus();
  }());
}

int RunImport(const Globals& g, const Flags& f) {
  if (f.Get("ids").empty() && f.Get("plaid").empty()) {
    return PrintError(UsageError("--ids is required (except with --plaid)"),
                      kExitUsage);
  }
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    v1::ImportDocumentsRequest request;
    request.set_corpus(f.Get("corpus"));
    request.set_tokens_npy(f.Get("tokens"));
    request.set_cu_seqlens_npy(f.Get("cu-seqlens"));
    request.set_safetensors(f.Get("safetensors"));
    request.set_plaid_dir(f.Get("plaid"));
    request.set_ids(f.Get("ids"));
    MAXSIMD_ASSIGN_OR_RETURN(v1::AddDocumentsResponse response,
                             client->ImportDocuments(request));
    if (g.json) {
      std::printf("{\"added\":%lld,\"corpus\":%s}\n",
                  static_cast<long long>(response.added()),
                  CorpusJson(response.corpus()).c_str());
    } else {
      std::printf("imported %lld documents into '%s'; it now holds %lld\n",
                  static_cast<long long>(response.added()),
                  f.Get("corpus").c_str(),
                  static_cast<long long>(response.corpus().num_documents()));
    }
    return absl::OkStatus();
  }());
}

int RunList(const Globals& g, const Flags&) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(std::vector<v1::CorpusInfo> corpora,
                             client->ListCorpora());
    if (g.json) {
      std::string out = "{\"corpora\":[";
      for (size_t i = 0; i < corpora.size(); ++i) {
        if (i > 0) out += ",";
        out += CorpusJson(corpora[i]);
      }
      std::printf("%s]}\n", out.c_str());
      return absl::OkStatus();
    }
    std::vector<std::vector<std::string>> rows;
    for (const v1::CorpusInfo& c : corpora) {
      rows.push_back({c.name(), absl::StrCat(c.dim()), LayoutLabel(c.layout()),
                      DTypeLabel(c.storage_dtype()),
                      absl::StrCat(c.num_documents()),
                      absl::StrCat(c.num_tokens()), absl::StrCat(c.bytes()),
                      c.resident_on()});
    }
    PrintTable({"name", "dim", "layout", "dtype", "documents", "tokens",
                "bytes", "resident_on"},
               rows, {false, true, false, false, true, true, true, false});
    return absl::OkStatus();
  }());
}

int RunGet(const Globals& g, const Flags& f) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(v1::CorpusInfo info,
                             client->GetCorpus(f.Get("name")));
    if (g.json) {
      std::printf("%s\n", CorpusJson(info).c_str());
    } else {
      PrintCorpusText(info);
    }
    return absl::OkStatus();
  }());
}

int RunHealth(const Globals& g, const Flags& f) {
  absl::StatusOr<std::unique_ptr<Client>> client = Connect(g);
  if (!client.ok()) return PrintError(client.status(), kExitError);
  absl::StatusOr<int> status = (*client)->CheckHealth(f.Get("service"));
  if (!status.ok()) return PrintError(status.status(), kExitError);
  // grpc.health.v1.HealthCheckResponse.ServingStatus.
  const char* name = *status == 1   ? "SERVING"
                     : *status == 2 ? "NOT_SERVING"
                     : *status == 3 ? "SERVICE_UNKNOWN"
                                    : "UNKNOWN";
  if (g.json) {
    std::printf("{\"service\":%s,\"status\":\"%s\"}\n",
                JsonString(f.Get("service")).c_str(), name);
  } else {
    std::printf("%s\n", name);
  }
  return *status == 1 ? kExitOk : kExitNotServing;
}

// ---------------------------------------------------------------------------
// log-level: Admin.GetLogLevel / SetLogLevel.

int RunLogLevel(const Globals& g, const Flags& f) {
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    const std::string level = f.Get("level");
    if (level.empty()) {
      MAXSIMD_ASSIGN_OR_RETURN(std::string current, client->GetLogLevel());
      if (g.json) {
        std::printf("{\"level\":%s}\n", JsonString(current).c_str());
      } else {
        std::printf("%s\n", current.c_str());
      }
      return absl::OkStatus();
    }
    MAXSIMD_ASSIGN_OR_RETURN(v1::SetLogLevelResponse response,
                             client->SetLogLevel(level));
    if (g.json) {
      std::printf("{\"level\":%s,\"previous_level\":%s}\n",
                  JsonString(response.level()).c_str(),
                  JsonString(response.previous_level()).c_str());
    } else {
      std::printf("log level %s (was %s)\n", response.level().c_str(),
                  response.previous_level().c_str());
    }
    return absl::OkStatus();
  }());
}

// ---------------------------------------------------------------------------
// top: a live view of the server's /metrics (Prometheus text format 0.0.4),
// fetched with a plain HTTP/1.0 GET.

// "host:port" of a gRPC target ("dns:///" prefix allowed), or "" if it has
// no port.
bool SplitHostPort(absl::string_view target, std::string* host,
                   std::string* port) {
  absl::ConsumePrefix(&target, "dns:///");
  const size_t colon = target.rfind(':');
  if (colon == absl::string_view::npos || colon == 0 ||
      colon + 1 == target.size()) {
    return false;
  }
  absl::string_view h = target.substr(0, colon);
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') {
    h = h.substr(1, h.size() - 2);  // [IPv6]
  }
  *host = std::string(h);
  *port = std::string(target.substr(colon + 1));
  return true;
}

// The whole of a small file named by `--flag`; INVALID_ARGUMENT naming the
// flag when it cannot be read or is empty.
absl::StatusOr<std::string> ReadFlagFile(const std::string& path,
                                         absl::string_view flag) {
  std::ifstream in(path, std::ios::binary);
  std::string text((std::istreambuf_iterator<char>(in)),
                   std::istreambuf_iterator<char>());
  if (!in.is_open() || in.bad() || text.empty()) {
    return UsageError(
        absl::StrCat("--", flag, ": cannot read '", path, "', or it is empty"));
  }
  return text;
}

// The first token of a token file named by `--flag` (the server's format:
// one a line, blank lines and '#' comments skipped); INVALID_ARGUMENT naming
// the flag when there is none. Never prints the token.
absl::StatusOr<std::string> ReadFirstToken(const std::string& path,
                                           absl::string_view flag) {
  MAXSIMD_ASSIGN_OR_RETURN(std::string text, ReadFlagFile(path, flag));
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    return std::string(line);
  }
  return UsageError(absl::StrCat("--", flag, ": '", path, "' holds no token"));
}

// The body of GET http://<address>/metrics; `timeout` bounds the connect
// and each read; a non-empty `token` is sent as a bearer token.
absl::StatusOr<std::string> HttpGetMetrics(const std::string& address,
                                           absl::Duration timeout,
                                           const std::string& token) {
  std::string host, port;
  if (!SplitHostPort(address, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("--metrics is '", address, "'; expected HOST:PORT"));
  }
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (const int rc = getaddrinfo(host.c_str(), port.c_str(), &hints, &found);
      rc != 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot resolve '", host, "': ", gai_strerror(rc)));
  }
  int fd = -1;
  const timeval tv = absl::ToTimeval(timeout);
  for (addrinfo* a = found; a != nullptr && fd < 0; a = a->ai_next) {
    fd = socket(a->ai_family, a->ai_socktype, a->ai_protocol);
    if (fd < 0) continue;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));  // connect too
    if (connect(fd, a->ai_addr, a->ai_addrlen) != 0) {
      close(fd);
      fd = -1;
    }
  }
  freeaddrinfo(found);
  if (fd < 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot connect to the metrics endpoint ", address));
  }
  const std::string request = absl::StrCat(
      "GET /metrics HTTP/1.0\r\nHost: ", address, "\r\nAccept: text/plain\r\n",
      token.empty() ? ""
                    : absl::StrCat("Authorization: Bearer ", token, "\r\n"),
      "Connection: close\r\n\r\n");
  size_t sent = 0;
  while (sent < request.size()) {
    const ssize_t n =
        send(fd, request.data() + sent, request.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) {
      close(fd);
      return absl::UnavailableError(absl::StrCat("send to ", address));
    }
    sent += static_cast<size_t>(n);
  }
  std::string response;
  char buf[16384];
  ssize_t n;
  while ((n = recv(fd, buf, sizeof(buf), 0)) > 0) response.append(buf, n);
  const int read_errno = errno;
  close(fd);
  if (n < 0) {
    return absl::ErrnoToStatus(read_errno,
                               absl::StrCat("reading from ", address));
  }
  const size_t header_end = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.", 0) != 0 || header_end == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat(address, " did not answer HTTP"));
  }
  const std::string status_line = response.substr(0, response.find("\r\n"));
  if (status_line.find(" 200") == std::string::npos) {
    return absl::UnavailableError(
        absl::StrCat(address, "/metrics answered '", status_line, "'"));
  }
  std::string body = response.substr(header_end + 4);
  const std::string headers =
      absl::AsciiStrToLower(response.substr(0, header_end));
  if (headers.find("transfer-encoding: chunked") != std::string::npos) {
    std::string plain;
    size_t pos = 0;
    for (;;) {
      const size_t eol = body.find("\r\n", pos);
      size_t size = 0;
      if (eol == std::string::npos ||
          !absl::SimpleHexAtoi(
              absl::StripAsciiWhitespace(body.substr(pos, eol - pos)), &size) ||
          eol + 2 + size > body.size()) {
        return absl::DataLossError(
            absl::StrCat(address, "/metrics: bad chunked body"));
      }
      if (size == 0) break;
      plain.append(body, eol + 2, size);
      pos = eol + 2 + size + 2;
    }
    body = std::move(plain);
  }
  return body;
}

// One sample of the text format: name{labels} value.
struct Sample {
  std::string name;
  std::map<std::string, std::string> labels;
  double value = 0;
};

// Parses the sample lines of Prometheus text (comments skipped). A line
// that does not parse is skipped too: top shows what it understands.
std::vector<Sample> ParsePrometheusText(absl::string_view text) {
  std::vector<Sample> out;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    Sample s;
    size_t i = 0;
    while (i < line.size() && line[i] != '{' && line[i] != ' ') ++i;
    s.name = std::string(line.substr(0, i));
    bool ok = !s.name.empty();
    if (ok && i < line.size() && line[i] == '{') {
      ++i;
      while (ok && i < line.size() && line[i] != '}') {
        const size_t eq = line.find('=', i);
        if (eq == absl::string_view::npos || eq + 1 >= line.size() ||
            line[eq + 1] != '"') {
          ok = false;
          break;
        }
        std::string key(absl::StripAsciiWhitespace(line.substr(i, eq - i)));
        std::string value;
        size_t k = eq + 2;
        for (; k < line.size() && line[k] != '"'; ++k) {
          if (line[k] == '\\' && k + 1 < line.size()) {
            ++k;
            value.push_back(line[k] == 'n' ? '\n' : line[k]);
          } else {
            value.push_back(line[k]);
          }
        }
        if (k >= line.size()) {
          ok = false;
          break;
        }
        s.labels[key] = std::move(value);
        i = k + 1;
        if (i < line.size() && line[i] == ',') ++i;
      }
      ok = ok && i < line.size();
      ++i;  // past '}'
    }
    if (!ok) continue;
    absl::string_view rest = absl::StripAsciiWhitespace(line.substr(i));
    rest = rest.substr(0, rest.find(' '));  // drop a timestamp
    if (rest == "+Inf" || rest == "Inf") {
      s.value = std::numeric_limits<double>::infinity();
    } else if (rest == "-Inf") {
      s.value = -std::numeric_limits<double>::infinity();
    } else if (rest == "NaN") {
      s.value = std::numeric_limits<double>::quiet_NaN();
    } else if (!absl::SimpleAtod(rest, &s.value)) {
      continue;
    }
    out.push_back(std::move(s));
  }
  return out;
}

// A histogram's cumulative buckets (upper bound -> count), sum and count.
struct Histogram {
  std::map<double, double> buckets;
  double sum = 0;
  double count = 0;
};

// Estimates quantile q from cumulative buckets the way PromQL's
// histogram_quantile does: linear within the bucket holding rank q * count,
// from 0 for the first; the highest finite bound for the +Inf bucket. NaN
// when there are no observations.
double EstimateQuantile(const Histogram& h, double q) {
  double total = 0;
  if (!h.buckets.empty()) total = h.buckets.rbegin()->second;
  if (!(total > 0)) return std::numeric_limits<double>::quiet_NaN();
  const double rank = q * total;
  double lower = 0, below = 0;
  for (const auto& [le, cumulative] : h.buckets) {
    if (cumulative >= rank) {
      if (std::isinf(le)) return lower;
      if (cumulative == below) return le;
      return lower + (le - lower) * (rank - below) / (cumulative - below);
    }
    lower = le;
    below = cumulative;
  }
  return lower;
}

// What top shows, from one scrape or the difference of two.
struct MetricsView {
  std::string version, backend;
  double start_time = std::numeric_limits<double>::quiet_NaN();  // unix s
  // method -> code -> finished calls.
  std::map<std::string, std::map<std::string, double>> calls;
  std::map<std::string, Histogram> method_latency;  // request_duration
  std::map<std::string, Histogram> stage_latency;   // stage_duration
  Histogram batch;                                  // batch_queries
  std::map<std::string, double> rejected;           // reason -> queries
  double queue_depth = 0, queue_bytes = 0;          // gauges: never diffed
};

MetricsView ViewOf(const std::vector<Sample>& samples) {
  MetricsView v;
  auto label = [](const Sample& s, const char* key) {
    auto it = s.labels.find(key);
    return it == s.labels.end() ? std::string() : it->second;
  };
  auto add_histogram_sample = [&](Histogram& h, const Sample& s,
                                  absl::string_view suffix) {
    if (suffix == "_bucket") {
      double le;
      const std::string text = label(s, "le");
      if (text == "+Inf") {
        le = std::numeric_limits<double>::infinity();
      } else if (!absl::SimpleAtod(text, &le)) {
        return;
      }
      h.buckets[le] = s.value;
    } else if (suffix == "_sum") {
      h.sum = s.value;
    } else if (suffix == "_count") {
      h.count = s.value;
    }
  };
  for (const Sample& s : samples) {
    absl::string_view name = s.name;
    if (name == "maxsimd_requests_total") {
      v.calls[label(s, "method")][label(s, "code")] += s.value;
    } else if (name == "maxsimd_queue_depth") {
      v.queue_depth = s.value;
    } else if (name == "maxsimd_queue_bytes") {
      v.queue_bytes = s.value;
    } else if (name == "maxsimd_rejected_total") {
      v.rejected[label(s, "reason")] += s.value;
    } else if (name == "maxsimd_build_info") {
      v.version = label(s, "version");
      v.backend = label(s, "backend");
    } else if (name == "process_start_time_seconds") {
      v.start_time = s.value;
    } else {
      for (absl::string_view suffix : {"_bucket", "_sum", "_count"}) {
        absl::string_view base = name;
        if (!absl::ConsumeSuffix(&base, suffix)) continue;
        if (base == "maxsimd_request_duration_seconds") {
          add_histogram_sample(v.method_latency[label(s, "method")], s, suffix);
        } else if (base == "maxsimd_stage_duration_seconds") {
          add_histogram_sample(v.stage_latency[label(s, "stage")], s, suffix);
        } else if (base == "maxsimd_batch_queries") {
          add_histogram_sample(v.batch, s, suffix);
        }
        break;
      }
    }
  }
  return v;
}

// cur - prev for counters and histograms (a counter that went down means
// the server restarted: cur is taken whole); gauges are cur's.
Histogram Minus(const Histogram& cur, const Histogram* prev) {
  if (prev == nullptr || cur.count < prev->count) return cur;
  Histogram d = cur;
  d.sum -= prev->sum;
  d.count -= prev->count;
  for (auto& [le, n] : d.buckets) {
    auto it = prev->buckets.find(le);
    if (it != prev->buckets.end()) n -= it->second;
  }
  return d;
}

MetricsView Minus(const MetricsView& cur, const MetricsView& prev) {
  MetricsView d = cur;
  for (auto& [method, codes] : d.calls) {
    for (auto& [code, n] : codes) {
      auto m = prev.calls.find(method);
      if (m == prev.calls.end()) continue;
      auto c = m->second.find(code);
      if (c != m->second.end() && c->second <= n) n -= c->second;
    }
  }
  auto minus_all = [](std::map<std::string, Histogram>& out,
                      const std::map<std::string, Histogram>& before) {
    for (auto& [key, h] : out) {
      auto it = before.find(key);
      h = Minus(h, it == before.end() ? nullptr : &it->second);
    }
  };
  minus_all(d.method_latency, prev.method_latency);
  minus_all(d.stage_latency, prev.stage_latency);
  d.batch = Minus(cur.batch, &prev.batch);
  for (auto& [reason, n] : d.rejected) {
    auto it = prev.rejected.find(reason);
    if (it != prev.rejected.end() && it->second <= n) n -= it->second;
  }
  return d;
}

std::string FormatMs(double seconds) {
  if (std::isnan(seconds)) return "-";
  return absl::StrFormat("%.3f", seconds * 1e3);
}

std::string FormatRate(double n, double window) {
  if (!(window > 0)) return "-";
  return absl::StrFormat("%.1f", n / window);
}

std::string FormatDuration(double seconds) {
  if (!(seconds >= 0)) return "-";
  if (seconds < 1) return "0s";
  return absl::FormatDuration(absl::Seconds(std::floor(seconds)));
}

// One frame: `window` seconds of `v`; since_start when v counts from the
// server's start.
std::string TopFrame(const MetricsView& v, const std::string& address,
                     double window, double uptime, bool since_start, bool json,
                     bool ansi) {
  double requests = 0, errors = 0;
  struct MethodRow {
    std::string method;
    double calls = 0, errors = 0;
    const Histogram* latency = nullptr;
  };
  std::vector<MethodRow> methods;
  for (const auto& [method, codes] : v.calls) {
    MethodRow row;
    row.method = method;
    for (const auto& [code, n] : codes) {
      row.calls += n;
      if (code != "OK") row.errors += n;
    }
    auto it = v.method_latency.find(method);
    if (it != v.method_latency.end()) row.latency = &it->second;
    requests += row.calls;
    errors += row.errors;
    methods.push_back(std::move(row));
  }
  double rejected = 0;
  for (const auto& [reason, n] : v.rejected) rejected += n;
  static const char* kStageOrder[] = {"queue", "compute", "h2d",  "kernel",
                                      "topk",  "d2h",     "total"};
  std::vector<std::pair<std::string, const Histogram*>> stages;
  for (const char* stage : kStageOrder) {
    auto it = v.stage_latency.find(stage);
    if (it != v.stage_latency.end()) stages.emplace_back(stage, &it->second);
  }
  const Histogram* total = nullptr;
  if (auto it = v.stage_latency.find("total"); it != v.stage_latency.end()) {
    total = &it->second;
  }
  const Histogram empty;
  const Histogram& t = total != nullptr ? *total : empty;
  const double mean_batch = v.batch.count > 0
                                ? v.batch.sum / v.batch.count
                                : std::numeric_limits<double>::quiet_NaN();
  auto per_second = [&](double n) {
    return window > 0 ? n / window : std::numeric_limits<double>::quiet_NaN();
  };
  auto mean = [](const Histogram& h) {
    return h.count > 0 ? h.sum / h.count
                       : std::numeric_limits<double>::quiet_NaN();
  };

  if (json) {
    auto ms = [](double s) { return JsonNumber(s * 1e3); };
    std::string out = absl::StrCat(
        "{\"metrics\":", JsonString(address),
        ",\"version\":", JsonString(v.version),
        ",\"backend\":", JsonString(v.backend),
        ",\"uptime_seconds\":", JsonNumber(uptime),
        ",\"window_seconds\":", JsonNumber(window),
        ",\"since_start\":", since_start ? "true" : "false",
        ",\"requests\":", JsonNumber(requests),
        ",\"qps\":", JsonNumber(per_second(requests)),
        ",\"errors\":", JsonNumber(errors),
        ",\"errors_per_second\":", JsonNumber(per_second(errors)),
        ",\"queries\":", JsonNumber(t.count),
        ",\"latency_p50_ms\":", ms(EstimateQuantile(t, 0.5)),
        ",\"latency_p99_ms\":", ms(EstimateQuantile(t, 0.99)),
        ",\"latency_mean_ms\":", ms(mean(t)),
        ",\"queue_depth\":", JsonNumber(v.queue_depth),
        ",\"queue_bytes\":", JsonNumber(v.queue_bytes),
        ",\"rejected\":", JsonNumber(rejected),
        ",\"rejected_per_second\":", JsonNumber(per_second(rejected)),
        ",\"batch_mean_queries\":", JsonNumber(mean_batch),
        ",\"rejected_by_reason\":{");
    bool first = true;
    for (const auto& [reason, n] : v.rejected) {
      absl::StrAppend(&out, first ? "" : ",", JsonString(reason), ":",
                      JsonNumber(n));
      first = false;
    }
    out += "},\"methods\":[";
    for (size_t i = 0; i < methods.size(); ++i) {
      const MethodRow& m = methods[i];
      const Histogram& h = m.latency != nullptr ? *m.latency : empty;
      absl::StrAppend(&out, i > 0 ? "," : "",
                      "{\"method\":", JsonString(m.method),
                      ",\"requests\":", JsonNumber(m.calls),
                      ",\"qps\":", JsonNumber(per_second(m.calls)),
                      ",\"errors\":", JsonNumber(m.errors),
                      ",\"p50_ms\":", ms(EstimateQuantile(h, 0.5)),
                      ",\"p99_ms\":", ms(EstimateQuantile(h, 0.99)),
                      ",\"mean_ms\":", ms(mean(h)), "}");
    }
    out += "],\"stages\":[";
    for (size_t i = 0; i < stages.size(); ++i) {
      const Histogram& h = *stages[i].second;
      absl::StrAppend(&out, i > 0 ? "," : "",
                      "{\"stage\":", JsonString(stages[i].first),
                      ",\"queries\":", JsonNumber(h.count),
                      ",\"p50_ms\":", ms(EstimateQuantile(h, 0.5)),
                      ",\"p99_ms\":", ms(EstimateQuantile(h, 0.99)),
                      ",\"mean_ms\":", ms(mean(h)), "}");
    }
    return out + "]}\n";
  }

  const std::string bold = ansi ? "\x1b[1m" : "";
  const std::string plain = ansi ? "\x1b[0m" : "";
  std::string out = absl::StrFormat(
      "%smaxsimd %s (%s)%s at %s   up %s   %s\n", bold, v.version, v.backend,
      plain, address, FormatDuration(uptime),
      since_start ? "averages since start"
                  : absl::StrFormat("last %.1fs", window));
  absl::StrAppendFormat(&out, "requests  %s/s   errors %s/s   (%.0f, %.0f)\n",
                        FormatRate(requests, window),
                        FormatRate(errors, window), requests, errors);
  absl::StrAppendFormat(
      &out, "latency   p50 %s ms   p99 %s ms   mean %s ms   (%.0f queries)\n",
      FormatMs(EstimateQuantile(t, 0.5)), FormatMs(EstimateQuantile(t, 0.99)),
      FormatMs(mean(t)), t.count);
  std::string reasons;
  for (const auto& [reason, n] : v.rejected) {
    if (n > 0) absl::StrAppendFormat(&reasons, " %s=%.0f", reason, n);
  }
  absl::StrAppendFormat(
      &out, "queue     %.0f queries, %.0f bytes   rejected %s/s (%.0f%s)\n",
      v.queue_depth, v.queue_bytes, FormatRate(rejected, window), rejected,
      reasons.empty() ? "" : absl::StrCat(":", reasons));
  absl::StrAppendFormat(&out, "batches   mean %s queries\n\n",
                        std::isnan(mean_batch)
                            ? std::string("-")
                            : absl::StrFormat("%.1f", mean_batch));
  absl::StrAppendFormat(&out, "%s%-16s %9s %9s %10s %10s %10s%s\n", bold,
                        "METHOD", "REQ/S", "ERR/S", "P50 MS", "P99 MS",
                        "MEAN MS", plain);
  for (const MethodRow& m : methods) {
    if (!since_start && m.calls == 0) continue;  // idle in this interval
    const Histogram& h = m.latency != nullptr ? *m.latency : empty;
    absl::StrAppendFormat(
        &out, "%-16s %9s %9s %10s %10s %10s\n", m.method,
        FormatRate(m.calls, window), FormatRate(m.errors, window),
        FormatMs(EstimateQuantile(h, 0.5)), FormatMs(EstimateQuantile(h, 0.99)),
        FormatMs(mean(h)));
  }
  absl::StrAppendFormat(&out, "\n%s%-16s %9s %9s %10s %10s %10s%s\n", bold,
                        "STAGE", "QUERIES", "QUERY/S", "P50 MS", "P99 MS",
                        "MEAN MS", plain);
  for (const auto& [stage, h] : stages) {
    // Stages the backend does not time (h2d, topk and d2h on the CPU) are
    // observed as 0 s: left out, as are stages idle in this interval.
    if (h->count == 0 || h->sum == 0) continue;
    absl::StrAppendFormat(
        &out, "%-16s %9.0f %9s %10s %10s %10s\n", stage, h->count,
        FormatRate(h->count, window), FormatMs(EstimateQuantile(*h, 0.5)),
        FormatMs(EstimateQuantile(*h, 0.99)), FormatMs(mean(*h)));
  }
  return out;
}

int RunTop(const Globals& g, const Flags& f) {
  std::string address = f.Get("metrics");
  if (address.empty()) {
    std::string host, port;
    if (!SplitHostPort(g.options.target, &host, &port)) {
      return PrintError(
          UsageError(absl::StrCat("cannot tell the metrics address from "
                                  "--target '",
                                  g.options.target, "'; give --metrics")),
          kExitUsage);
    }
    address = absl::StrCat(host.find(':') != std::string::npos
                               ? absl::StrCat("[", host, "]")
                               : host,
                           ":9464");
  }
  absl::Duration interval;
  if (!absl::ParseDuration(f.Get("interval"), &interval) ||
      interval <= absl::ZeroDuration()) {
    return PrintError(
        UsageError(absl::StrCat("--interval must be a positive duration such "
                                "as 500ms or 2s, got '",
                                f.Get("interval"), "'")),
        kExitUsage);
  }
  absl::StatusOr<int64_t> iterations =
      ParseInt(f, "iterations", 0, std::numeric_limits<int32_t>::max());
  if (!iterations.ok()) return PrintError(iterations.status(), kExitUsage);
  if (f.Bool("once")) *iterations = 1;
  const bool ansi = !g.json && *iterations != 1 && isatty(fileno(stdout));
  std::string token;
  if (!f.Get("metrics-token-file").empty()) {
    absl::StatusOr<std::string> read =
        ReadFirstToken(f.Get("metrics-token-file"), "metrics-token-file");
    if (!read.ok()) return PrintError(read.status(), kExitUsage);
    token = *std::move(read);
  }

  std::optional<MetricsView> previous;
  absl::Time previous_time;
  for (int64_t frame = 0; *iterations == 0 || frame < *iterations; ++frame) {
    if (frame > 0) absl::SleepFor(interval);
    absl::StatusOr<std::string> body =
        HttpGetMetrics(address, g.options.timeout, token);
    if (!body.ok()) return PrintError(body.status(), kExitError);
    const absl::Time now = absl::Now();
    MetricsView view = ViewOf(ParsePrometheusText(*body));
    if (view.version.empty()) {
      return PrintError(absl::UnavailableError(absl::StrCat(
                            address,
                            "/metrics has no maxsimd_build_info: not a maxsimd "
                            "metrics endpoint")),
                        kExitError);
    }
    const double uptime =
        absl::ToDoubleSeconds(now - absl::UnixEpoch()) - view.start_time;
    std::string text;
    if (previous.has_value()) {
      text = TopFrame(Minus(view, *previous), address,
                      absl::ToDoubleSeconds(now - previous_time), uptime,
                      /*since_start=*/false, g.json, ansi);
    } else {
      text = TopFrame(view, address, uptime, uptime, /*since_start=*/true,
                      g.json, ansi);
    }
    if (ansi) {
      std::fputs("\x1b[H\x1b[2J", stdout);  // home, clear screen
    } else if (frame > 0 && !g.json) {
      std::fputs("\n", stdout);
    }
    std::fputs(text.c_str(), stdout);
    std::fflush(stdout);
    previous = std::move(view);
    previous_time = now;
  }
  return kExitOk;
}

// Uniform in [0, n) from the raw engine, which is the same on every
// platform (std::uniform_int_distribution is not).
uint64_t Below(std::mt19937_64& rng, uint64_t n) {
  return static_cast<uint64_t>((static_cast<unsigned __int128>(rng()) * n) >>
                               64);
}

int RunGenerate(const Globals& g, const Flags& f) {
  SyntheticCorpusOptions options;
  int64_t num_queries = 0, query_tokens = 0;
  {
    absl::Status status;
    auto get = [&](const char* name, int64_t min, int64_t max) -> int64_t {
      absl::StatusOr<int64_t> v = ParseInt(f, name, min, max);
      if (!v.ok()) {
        if (status.ok()) status = v.status();
        return min;
      }
      return *v;
    };
    options.num_docs = get("docs", 1, 100000000);
    options.dim = static_cast<int32_t>(get("dim", 1, 65536));
    options.min_tokens = static_cast<int32_t>(get("min-tokens", 1, 1 << 20));
    options.max_tokens = static_cast<int32_t>(get("max-tokens", 1, 1 << 20));
    options.num_clusters = static_cast<int32_t>(get("clusters", 1, 1 << 20));
    num_queries = get("queries", 0, 100000);
    query_tokens = get("query-tokens", 1, 1 << 16);
    options.seed = static_cast<uint64_t>(
        get("seed", 0, std::numeric_limits<int64_t>::max()));
    if (status.ok() && options.min_tokens > options.max_tokens) {
      status = UsageError(absl::StrCat("--min-tokens (", options.min_tokens,
                                       ") exceeds --max-tokens (",
                                       options.max_tokens, ")"));
    }
    const double expected_values = static_cast<double>(options.num_docs) *
                                   options.max_tokens * options.dim;
    if (status.ok() && expected_values > 4e9) {
      status = UsageError(
          "--docs * --max-tokens * --dim exceeds 4e9 values (16 GB of fp32)");
    }
    if (!status.ok()) return PrintError(status, kExitUsage);
  }
  const std::string dir = f.Get("out");
  return Finish([&]() -> absl::Status {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec) {
      return absl::PermissionDeniedError(
          absl::StrCat("cannot create '", dir, "': ", ec.message()));
    }
    const SyntheticCorpus corpus = GenerateSyntheticCorpus(options);
    const int64_t num_tokens = corpus.cu_seqlens.back();
    const int64_t num_docs = static_cast<int64_t>(corpus.ids.size());
    MAXSIMD_RETURN_IF_ERROR(
        WriteNpy(dir + "/tokens.npy",
                 MakeNpyFloat16(corpus.tokens, {num_tokens, corpus.dim})));
    MAXSIMD_RETURN_IF_ERROR(
        WriteNpy(dir + "/cu_seqlens.npy",
                 MakeNpyInt64(corpus.cu_seqlens, {num_docs + 1})));
    std::string ids;
    for (const std::string& id : corpus.ids) absl::StrAppend(&ids, id, "\n");
    MAXSIMD_RETURN_IF_ERROR(WriteText(dir + "/ids.txt", ids));

    // Sources and candidates come from their own stream so that changing
    // --queries does not change the corpus.
    std::mt19937_64 rng(options.seed ^ 0x5eed0f0123456789ull);
    std::vector<std::string> written;
    for (int64_t i = 0; i < num_queries; ++i) {
      const int64_t source = static_cast<int64_t>(Below(rng, num_docs));
      const std::vector<float> query = GenerateQueryForDocument(
          corpus, source, static_cast<int32_t>(query_tokens), options.noise,
          options.seed + 1000003 * static_cast<uint64_t>(i + 1));
      const std::string stem = absl::StrCat(dir, "/query_", i);
      MAXSIMD_RETURN_IF_ERROR(WriteNpy(
          stem + ".npy", MakeNpyFloat32(query, {query_tokens, corpus.dim})));
      MAXSIMD_RETURN_IF_ERROR(
          WriteText(stem + ".source", corpus.ids[source] + "\n"));
      // 100 distinct candidates (all documents when there are fewer), the
      // source among them at a random position.
      const int64_t want = std::min<int64_t>(100, num_docs);
      std::set<int64_t> picked = {source};
      while (static_cast<int64_t>(picked.size()) < want) {
        picked.insert(static_cast<int64_t>(Below(rng, num_docs)));
      }
      std::vector<int64_t> order(picked.begin(), picked.end());
      for (size_t k = order.size(); k > 1; --k) {
        std::swap(order[k - 1], order[Below(rng, k)]);
      }
      std::string lines;
      for (int64_t d : order) absl::StrAppend(&lines, corpus.ids[d], "\n");
      MAXSIMD_RETURN_IF_ERROR(
          WriteText(absl::StrCat(dir, "/candidates_", i, ".txt"), lines));
      written.push_back(corpus.ids[source]);
    }
    if (g.json) {
      std::string sources;
      for (size_t i = 0; i < written.size(); ++i) {
        absl::StrAppend(&sources, i > 0 ? "," : "", JsonString(written[i]));
      }
      std::printf(
          "{\"out\":%s,\"documents\":%lld,\"tokens\":%lld,\"dim\":%d,"
          "\"queries\":%lld,\"query_sources\":[%s]}\n",
          JsonString(dir).c_str(), static_cast<long long>(num_docs),
          static_cast<long long>(num_tokens), corpus.dim,
          static_cast<long long>(num_queries), sources.c_str());
    } else {
      std::printf(
          "wrote %s/tokens.npy (float16 [%lld, %d]), cu_seqlens.npy, ids.txt: "
          "%lld documents\n",
          dir.c_str(), static_cast<long long>(num_tokens), corpus.dim,
          static_cast<long long>(num_docs));
      for (size_t i = 0; i < written.size(); ++i) {
        std::printf(
            "wrote %s/query_%zu.npy (float32 [%lld, %d]) from document %s, "
            "candidates_%zu.txt\n",
            dir.c_str(), i, static_cast<long long>(query_tokens), corpus.dim,
            written[i].c_str(), i);
      }
    }
    return absl::OkStatus();
  }());
}

const std::vector<CommandDef>& Commands() {
  static const std::vector<CommandDef> commands = {
      {"create",
       "create an empty corpus",
       {{"name", "N", "corpus name ([A-Za-z0-9_.-], 1 to 128 chars)", nullptr,
         true},
        {"dim", "D", "embedding dimension", nullptr, true},
        {"layout", "dense|int8|plaid",
         "storage layout: dense float16/bfloat16 tokens, int8 codes with "
         "one fp32 scale per token, or PLAID residual compression (a "
         "centroid id and nbits per value per token; the codec is trained "
         "on the first documents added)",
         "dense", false},
        {"plaid-nbits", "1|2|4|8", "plaid corpora: bits per residual value",
         "2", false},
        {"plaid-centroids", "K",
         "plaid corpora: centroids of the codec (0: ColBERT's count for the "
         "first documents' size)",
         "0", false},
        {"dtype", "float16|bfloat16",
         "storage element type of a dense corpus (default float16)", nullptr,
         false},
        {"quantize-queries", nullptr,
         "int8 corpora: quantise query tokens too (int8 x int8 scoring) "
         "instead of rounding them to float16",
         nullptr, false},
        {"normalize", nullptr, "L2-normalise document and query tokens",
         nullptr, false},
        {"placement", "auto|gpu|host", "where the tokens live", "auto", false}},
       RunCreate},
      {"add",
       "add documents from .npy, safetensors or PLAID index files (one "
       "atomic, chunked stream)",
       {{"corpus", "N", "target corpus", nullptr, true},
        {"tokens", "tokens.npy", "float32 or float16 [T, dim] token rows", "",
         false},
        {"cu-seqlens", "cu.npy", "int64 [N+1] document offsets into tokens", "",
         false},
        {"safetensors", "docs.safetensors",
         "instead of --tokens/--cu-seqlens: tensors \"tokens\" [T, dim] "
         "(F32/F16/BF16) and \"cu_seqlens\" [N+1] (I64/I32)",
         "", false},
        {"plaid", "DIR",
         "instead: a PLAID index directory (ColBERT v2 or fast-plaid), "
         "decompressed into dense tokens",
         "", false},
        {"ids", "ids.txt",
         "document ids, one per line (N lines), byte for byte: lines end "
         "at \\n (one \\r before it dropped) and nothing is trimmed; an "
         "empty line, or an id over 256 bytes or not UTF-8, is refused; "
         "required except with --plaid, where the ids default to the "
         "passage ids 0, 1, ...",
         "", false},
        {"chunk-mb", "MB", "token bytes per stream message", "8", false}},
       RunAdd},
      {"query",
       "rank documents for a query (rerank with candidates, else scan)",
       {{"corpus", "N", "corpus (or alias) to rank", nullptr, true},
        {"query", "q.npy",
         ".npy or safetensors file of float32, float16 or bfloat16 (.npy: "
         "ml_dtypes' '<V2' or '|V2'; safetensors: BF16) [Lq, dim], or "
         "[Nq, Lq, dim] for a batch; one query is sent in its own dtype",
         nullptr, true},
        {"query-tensor", "NAME",
         "safetensors: the query's tensor (default: \"query\", else the "
         "file's only tensor)",
         "", false},
        {"query-dtype", "auto|bfloat16",
         "bfloat16 (or bf16): the file holds bfloat16, and a uint16 array "
         "(.npy '<u2', safetensors U16) holds its bits",
         "auto", false},
        {"candidates", "ID,ID,...",
         "candidate ids (rerank), split at each ',' and not trimmed", nullptr,
         false},
        {"candidates-file", "FILE",
         "candidate ids, one per line, byte for byte (as add's --ids)", nullptr,
         false},
        {"top-k", "K", "results to return", "10", false}},
       RunQuery},
      {"delete",
       "delete documents by id",
       {{"corpus", "N", "corpus", nullptr, true},
        {"ids", "ID,ID,...", "ids to delete, split at each ',' and not trimmed",
         nullptr, false},
        {"ids-file", "FILE",
         "ids to delete, one per line, byte for byte (as add's --ids)", nullptr,
         false},
        {"ignore-missing", nullptr, "skip unknown ids instead of failing",
         nullptr, false}},
       RunDelete},
      {"drop",
       "drop a corpus",
       {{"name", "N", "corpus to drop", nullptr, true}},
       RunDrop},
      {"list", "list corpora", {}, RunList},
      {"alias",
       "point an alias at a corpus (create or switch it atomically)",
       {{"alias", "A", "the alias", nullptr, true},
        {"corpus", "N", "the corpus it names", nullptr, true}},
       RunAlias},
      {"unalias",
       "delete an alias",
       {{"alias", "A", "the alias", nullptr, true}},
       RunUnalias},
      {"aliases", "list aliases", {}, RunAliases},
      {"import",
       "have the server import documents from files under its --files_dir",
       {{"corpus", "N", "target corpus", nullptr, true},
        {"tokens", "P", "tokens .npy, relative to --files_dir", "", false},
        {"cu-seqlens", "P", "cu_seqlens .npy, relative to --files_dir", "",
         false},
        {"safetensors", "P",
         "instead of the two .npy files: a safetensors file", "", false},
        {"plaid", "DIR",
         "instead: a PLAID index directory (ColBERT v2 or fast-plaid), "
         "relative to --files_dir, decompressed into dense tokens",
         "", false},
        {"ids", "P",
         "ids file, relative to --files_dir; required except with --plaid, "
         "where the ids default to the passage ids 0, 1, ...",
         "", false}},
       RunImport},
      {"snapshot",
       "write a corpus snapshot under the server's --files_dir",
       {{"name", "N", "corpus (or alias) to snapshot", nullptr, true},
        {"path", "DIR", "new directory, relative to --files_dir", nullptr,
         true}},
       RunSnapshot},
      {"load",
       "load a corpus directory under the server's --files_dir",
       {{"path", "DIR", "corpus directory, relative to --files_dir", nullptr,
         true},
        {"name", "N", "name of the new corpus (default: its manifest's)", "",
         false}},
       RunLoad},
      {"get",
       "describe one corpus",
       {{"name", "N", "corpus to describe", nullptr, true}},
       RunGet},
      {"health",
       "grpc.health.v1 check (exit 0 SERVING, 3 otherwise)",
       {{"service", "S", "service name (empty: the whole server)", "", false}},
       RunHealth},
      {"log-level",
       "print the server's log level, or set it: maxsimctl log-level LEVEL "
       "(Admin.SetLogLevel; lasts until the next change or a restart)",
       {{"level", "LEVEL",
         "new level: trace, debug, info, warn, error, critical or off "
         "(also accepted as the argument)",
         "", false}},
       RunLogLevel,
       "level"},
      {"top",
       "live view of the server's /metrics: requests/s, errors, latency "
       "p50/p99 (estimated from the histogram buckets), queue depth and "
       "rejections; the first frame averages since the server started, the "
       "next ones each cover the last --interval",
       {{"metrics", "HOST:PORT",
         "the server's --metrics_listen address (default: --target's host, "
         "port 9464)",
         "", false},
        {"interval", "DURATION", "time between frames", "2s", false},
        {"iterations", "N", "frames to print, then exit (0: until killed)", "0",
         false},
        {"once", nullptr, "print one frame and exit (--iterations=1)", nullptr,
         false},
        {"metrics-token-file", "FILE",
         "bearer token for a /metrics under --metrics_token_file (the first "
         "token of the file)",
         "", false}},
       RunTop},
      {"generate",
       "write a synthetic clustered corpus and queries (no server needed)",
       {{"out", "DIR", "output directory (created if missing)", nullptr, true},
        {"docs", "N", "documents", "2000", false},
        {"dim", "D", "embedding dimension", "128", false},
        {"min-tokens", "N", "fewest tokens per document", "32", false},
        {"max-tokens", "N", "most tokens per document", "300", false},
        {"clusters", "N", "topic centroids", "256", false},
        {"queries", "N", "queries to write (query_<i>.npy)", "4", false},
        {"query-tokens", "N", "tokens per query", "32", false},
        {"seed", "N", "random seed", "1", false}},
       RunGenerate},
  };
  return commands;
}

std::string FlagUsage(const FlagDef& d) {
  std::string s = absl::StrCat("--", d.name);
  if (d.value != nullptr) absl::StrAppend(&s, " ", d.value);
  return d.required ? s : absl::StrCat("[", s, "]");
}

std::string MainUsage() {
  std::string out =
      "Usage: maxsimctl [--target=HOST:PORT] [--json] [--timeout=DURATION] "
      "<command> [flags]\n\n"
      "Client for the maxsimd late-interaction (MaxSim) reranking service.\n\n"
      "Global flags:\n";
  for (const FlagDef& d : GlobalFlagDefs()) {
    std::string name = absl::StrCat("--", d.name);
    if (d.value != nullptr) absl::StrAppend(&name, "=", d.value);
    absl::StrAppendFormat(&out, "  %-22s %s", name, d.help);
    if (d.default_value != nullptr) {
      absl::StrAppend(&out, " (default ", d.default_value, ")");
    }
    out += "\n";
  }
  out += "\nCommands:\n";
  for (const CommandDef& c : Commands()) {
    std::string line = absl::StrCat("  ", c.name);
    for (const FlagDef& d : c.flags) absl::StrAppend(&line, " ", FlagUsage(d));
    absl::StrAppend(&out, line, "\n      ", c.summary, "\n");
  }
  out +=
      "\nRun 'maxsimctl <command> --help' for a command's flags.\n"
      "Flags take '--flag=value' or '--flag value'; '_' and '-' in a flag "
      "name are the same.\n"
      "Exit status: 0 ok; 1 RPC, file or data error; 2 usage error; "
      "3 health not SERVING.\n";
  return out;
}

std::string CommandUsage(const CommandDef& c) {
  std::string out = absl::StrCat("Usage: maxsimctl [global flags] ", c.name);
  for (const FlagDef& d : c.flags) absl::StrAppend(&out, " ", FlagUsage(d));
  if (c.positional != nullptr) {
    absl::StrAppend(&out, "\n       maxsimctl [global flags] ", c.name, " [",
                    absl::AsciiStrToUpper(c.positional), "]");
  }
  absl::StrAppend(&out, "\n\n", c.summary, "\n");
  if (!c.flags.empty()) out += "\nFlags:\n";
  for (const FlagDef& d : c.flags) {
    std::string name = absl::StrCat("--", d.name);
    if (d.value != nullptr) absl::StrAppend(&name, " ", d.value);
    absl::StrAppendFormat(&out, "  %-30s %s", name, d.help);
    if (d.required) {
      out += " (required)";
    } else if (d.default_value != nullptr && d.default_value[0] != '\0') {
      absl::StrAppend(&out, " (default ", d.default_value, ")");
    }
    out += "\n";
  }
  out +=
      "\nGlobal flags (see maxsimctl --help): --target, --json, --timeout, "
      "--tls, --tls-ca, --tls-cert, --tls-key, --tls-server-name, "
      "--token-file\n";
  return out;
}

const FlagDef* FindFlag(const std::vector<FlagDef>& defs,
                        absl::string_view name) {
  for (const FlagDef& d : defs) {
    if (name == d.name) return &d;
  }
  return nullptr;
}

// The TLS and token flags into `options`: files are read now, so a bad
// path is a usage error naming its flag. Never prints the token.
absl::Status SecurityOptions(const Flags& f, ClientOptions* options) {
  options->use_tls = f.Bool("tls") || f.Has("tls-ca") || f.Has("tls-cert") ||
                     f.Has("tls-server-name");
  if (f.Has("tls-cert") != f.Has("tls-key")) {
    return UsageError("--tls-cert and --tls-key go together (mutual TLS)");
  }
  if (f.Has("tls-ca")) {
    MAXSIMD_ASSIGN_OR_RETURN(options->tls_root_certs,
                             ReadFlagFile(f.Get("tls-ca"), "tls-ca"));
  }
  if (f.Has("tls-cert")) {
    MAXSIMD_ASSIGN_OR_RETURN(options->tls_cert_chain,
                             ReadFlagFile(f.Get("tls-cert"), "tls-cert"));
    MAXSIMD_ASSIGN_OR_RETURN(options->tls_private_key,
                             ReadFlagFile(f.Get("tls-key"), "tls-key"));
  }
  options->tls_server_name = f.Get("tls-server-name");
  if (f.Has("token-file")) {
    MAXSIMD_ASSIGN_OR_RETURN(options->token,
                             ReadFirstToken(f.Get("token-file"), "token-file"));
  }
  return absl::OkStatus();
}

int UsageExit(absl::string_view message, absl::string_view hint) {
  PrintError(UsageError(message), kExitUsage);
  if (!hint.empty()) std::fprintf(stderr, "%s\n", std::string(hint).c_str());
  return kExitUsage;
}

int Main(int argc, char** argv) {
  Flags global_flags;
  Flags command_flags;
  const CommandDef* command = nullptr;
  bool help = false;
  bool positional_taken = false;
  for (const FlagDef& d : GlobalFlagDefs()) {
    if (d.default_value != nullptr) global_flags.Set(d.name, d.default_value);
  }
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (!absl::ConsumePrefix(&arg, "--")) {
      if (command != nullptr && command->positional != nullptr &&
          !positional_taken) {
        command_flags.Set(command->positional, std::string(arg));
        positional_taken = true;
        continue;
      }
      if (command != nullptr) {
        return UsageExit(
            absl::StrCat("unexpected argument '", arg, "' after command '",
                         command->name, "'"),
            absl::StrCat("Run 'maxsimctl ", command->name, " --help'."));
      }
      for (const CommandDef& c : Commands()) {
        if (arg == c.name) command = &c;
      }
      if (command == nullptr) {
        return UsageExit(absl::StrCat("unknown command '", arg, "'"),
                         "Run 'maxsimctl --help' for the list of commands.");
      }
      for (const FlagDef& d : command->flags) {
        if (d.default_value != nullptr) {
          command_flags.Set(d.name, d.default_value);
        }
      }
      continue;
    }
    std::string name(arg), value;
    bool has_value = false;
    if (const size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    // --tls_ca as the server's flags are spelled, or --tls-ca.
    std::replace(name.begin(), name.end(), '_', '-');
    // Global flags are accepted anywhere; command flags after the command.
    const FlagDef* def = FindFlag(GlobalFlagDefs(), name);
    Flags* target = &global_flags;
    if (def == nullptr && command != nullptr) {
      def = FindFlag(command->flags, name);
      target = &command_flags;
    }
    if (def == nullptr) {
      return UsageExit(
          command == nullptr
              ? absl::StrCat("unknown flag '--", name, "'")
              : absl::StrCat("unknown flag '--", name, "' for command '",
                             command->name, "'"),
          command == nullptr
              ? "Run 'maxsimctl --help'."
              : absl::StrCat("Run 'maxsimctl ", command->name, " --help'."));
    }
    if (def->value == nullptr) {  // boolean
      if (has_value && value != "true" && value != "false") {
        return UsageExit(absl::StrCat("--", name,
                                      " takes no value (or "
                                      "=true/=false), got '",
                                      value, "'"),
                         "");
      }
      if (name == "help") {
        help = true;
        continue;
      }
      target->Set(name, has_value ? value : "true");
      continue;
    }
    if (!has_value) {
      if (i + 1 >= argc) {
        return UsageExit(
            absl::StrCat("--", name, " needs a value (", def->value, ")"), "");
      }
      value = argv[++i];
    }
    target->Set(name, value);
  }

  if (help) {
    std::printf("%s", command == nullptr ? MainUsage().c_str()
                                         : CommandUsage(*command).c_str());
    return kExitOk;
  }
  if (command == nullptr) {
    std::fprintf(stderr, "%s", MainUsage().c_str());
    return kExitUsage;
  }
  for (const FlagDef& d : command->flags) {
    if (d.required && !command_flags.Has(d.name)) {
      return UsageExit(
          absl::StrCat("command '", command->name, "' needs --", d.name),
          absl::StrCat("Run 'maxsimctl ", command->name, " --help'."));
    }
  }

  Globals globals;
  globals.json = global_flags.Bool("json");
  globals.options.target = global_flags.Get("target");
  if (!absl::ParseDuration(global_flags.Get("timeout"),
                           &globals.options.timeout) ||
      globals.options.timeout <= absl::ZeroDuration()) {
    return UsageExit(absl::StrCat("--timeout must be a positive duration such "
                                  "as 500ms, 30s or 2m, got '",
                                  global_flags.Get("timeout"), "'"),
                     "");
  }
  if (absl::Status s = SecurityOptions(global_flags, &globals.options);
      !s.ok()) {
    return UsageExit(s.message(), "");
  }
  // Large corpora are streamed in chunks, but a single big query batch or
  // response still needs room.
  globals.options.max_message_bytes = 256 << 20;
  return command->run(globals, command_flags);
}

}  // namespace
}  // namespace maxsimd

int main(int argc, char** argv) { return maxsimd::Main(argc, argv); }
