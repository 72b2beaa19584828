#include "client/maxsimctl/flags.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <iterator>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/time.h"
#include "kernels/base/status_macros.h"

namespace maxsimd::ctl {
namespace {

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

std::string FlagUsage(const FlagDef& d) {
  std::string s = absl::StrCat("--", d.name);
  if (d.value != nullptr) absl::StrAppend(&s, " ", d.value);
  return d.required ? s : absl::StrCat("[", s, "]");
}

std::string MainUsage(absl::Span<const CommandDef> commands) {
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
  for (const CommandDef& c : commands) {
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

// The words of a command line, sorted: global flags (defaults filled in),
// the command and its flags (defaults filled in), and whether --help was
// given.
struct Words {
  Flags global_flags;
  Flags command_flags;
  const CommandDef* command = nullptr;
  bool help = false;
};

// Sorts argv into `words`; the exit status after a usage error, else
// std::nullopt.
std::optional<int> SortWords(int argc, char** argv,
                             absl::Span<const CommandDef> commands,
                             Words* words) {
  Flags& global_flags = words->global_flags;
  Flags& command_flags = words->command_flags;
  const CommandDef*& command = words->command;
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
      for (const CommandDef& c : commands) {
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
        words->help = true;
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
  return std::nullopt;
}

}  // namespace

std::optional<int> ParseCommandLine(int argc, char** argv,
                                    absl::Span<const CommandDef> commands,
                                    Invocation* invocation) {
  Words words;
  if (std::optional<int> exit_status =
          SortWords(argc, argv, commands, &words)) {
    return exit_status;
  }
  const CommandDef* command = words.command;
  if (words.help) {
    std::printf("%s", command == nullptr ? MainUsage(commands).c_str()
                                         : CommandUsage(*command).c_str());
    return kExitOk;
  }
  if (command == nullptr) {
    std::fprintf(stderr, "%s", MainUsage(commands).c_str());
    return kExitUsage;
  }
  for (const FlagDef& d : command->flags) {
    if (d.required && !words.command_flags.Has(d.name)) {
      return UsageExit(
          absl::StrCat("command '", command->name, "' needs --", d.name),
          absl::StrCat("Run 'maxsimctl ", command->name, " --help'."));
    }
  }

  const Flags& global_flags = words.global_flags;
  Globals& globals = invocation->globals;
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
  invocation->command = command;
  invocation->flags = std::move(words.command_flags);
  return std::nullopt;
}

absl::Status UsageError(absl::string_view message) {
  return absl::InvalidArgumentError(message);
}

int PrintError(const absl::Status& status, int exit_code) {
  std::fprintf(stderr, "error: %s: %s\n",
               absl::StatusCodeToString(status.code()).c_str(),
               std::string(status.message()).c_str());
  return exit_code;
}

int Finish(const absl::Status& status) {
  if (status.ok()) return kExitOk;
  return PrintError(status, kExitError);
}

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

absl::StatusOr<std::unique_ptr<Client>> Connect(const Globals& globals,
                                                bool send_float16) {
  ClientOptions options = globals.options;
  options.send_float16 = send_float16;
  return Client::Create(options);
}

}  // namespace maxsimd::ctl
