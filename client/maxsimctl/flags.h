// maxsimctl's command line: the flag and command tables, the parser, the
// connection options every command shares, and the exit statuses.
//
// Flags are parsed by hand rather than with absl flags because each command
// has its own flags: a per-command table gives `maxsimctl <command> --help`
// exactly the flags that command accepts, and rejects the others.
//
// Exit status: 0 success; 1 an RPC, file or data error; 2 a usage error;
// 3 `health` answered but the service is not SERVING.
//
// Thread-safety: maxsimctl is single-threaded; nothing here is shared.
#ifndef MAXSIMD_CLIENT_MAXSIMCTL_FLAGS_H_
#define MAXSIMD_CLIENT_MAXSIMCTL_FLAGS_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "client/client.h"

namespace maxsimd::ctl {

inline constexpr int kExitOk = 0;
inline constexpr int kExitError = 1;
inline constexpr int kExitUsage = 2;
inline constexpr int kExitNotServing = 3;

struct FlagDef {
  const char* name;   // without the leading "--"
  const char* value;  // placeholder shown in help; nullptr for a boolean
  const char* help;
  const char* default_value;  // nullptr: required (non-boolean) or unset
  bool required;
};

// The global flags, checked: the connection every command makes, and the
// output format.
struct Globals {
  ClientOptions options;
  bool json = false;
};

// The parsed flags of one command (defaults filled in). A boolean flag that
// is set holds "true".
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

// A command: runs with its flags checked against its table (required ones
// present) and returns the process's exit status.
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

// A command line parsed: `command` points into the table given to
// ParseCommandLine, which must outlive it.
struct Invocation {
  const CommandDef* command = nullptr;
  Flags flags;  // the command's
  Globals globals;
};

// Parses argv (argv[0] is the program) against `commands`: global flags
// anywhere, the command's own flags after its name, as '--flag=value' or
// '--flag value' ('_' and '-' in a name alike). Reads the files of the TLS
// and token flags now, so that a bad path is a usage error naming its flag.
// Returns std::nullopt when `invocation` holds a command to run; otherwise
// the exit status to end with, after printing help (kExitOk) or a usage
// error (kExitUsage).
std::optional<int> ParseCommandLine(int argc, char** argv,
                                    absl::Span<const CommandDef> commands,
                                    Invocation* invocation);

// INVALID_ARGUMENT with `message`: a usage error (exit status 2).
absl::Status UsageError(absl::string_view message);

// Prints "error: CODE: message" to stderr and returns `exit_code`.
int PrintError(const absl::Status& status, int exit_code);

// The exit status for a command's result: RPC, file and data errors exit 1
// (usage errors are caught, with exit 2, before a command runs).
int Finish(const absl::Status& status);

// --`name` as an integer in [min, max]; a usage error naming the flag, the
// range and the value otherwise.
absl::StatusOr<int64_t> ParseInt(const Flags& flags, const std::string& name,
                                 int64_t min, int64_t max);

// The first token of a token file named by `--flag` (the server's format:
// one a line, blank lines and '#' comments skipped); INVALID_ARGUMENT naming
// the flag when the file cannot be read, is empty or holds none. Never
// prints the token.
absl::StatusOr<std::string> ReadFirstToken(const std::string& path,
                                           absl::string_view flag);

// A client for the global options; `send_float16` sends embeddings as fp16.
absl::StatusOr<std::unique_ptr<Client>> Connect(const Globals& globals,
                                                bool send_float16 = false);

}  // namespace maxsimd::ctl

#endif  // MAXSIMD_CLIENT_MAXSIMCTL_FLAGS_H_
