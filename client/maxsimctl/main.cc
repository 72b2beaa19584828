// maxsimctl: command-line tool for a maxsimd server (create and fill corpora,
// run rerank and scan queries, check health, set the log level, watch its
// /metrics live with `top`) and a generator of synthetic corpora for demos.
//
// This file holds the command table, the one source of the help text and
// of which flags each command accepts, and the dispatch. The parser is in
// flags.h; each group of commands has its own file.
//
// Exit status: 0 success; 1 an RPC, file or data error; 2 a usage error;
// 3 `health` answered but the service is not SERVING.

#include <optional>
#include <vector>

#include "client/maxsimctl/corpus_commands.h"
#include "client/maxsimctl/document_commands.h"
#include "client/maxsimctl/flags.h"
#include "client/maxsimctl/generate_command.h"
#include "client/maxsimctl/query_command.h"
#include "client/maxsimctl/server_commands.h"
#include "client/maxsimctl/top_command.h"

namespace maxsimd::ctl {
namespace {

std::vector<FlagDef> CreateFlags() {
  return {
      {"name", "N", "corpus name ([A-Za-z0-9_.-], 1 to 128 chars)", nullptr,
       true},
      {"dim", "D", "embedding dimension", nullptr, true},
      {"layout", "dense|int8|plaid",
       "storage layout: dense float16/bfloat16 tokens, int8 codes with "
       "one fp32 scale per token, or PLAID residual compression (a "
       "centroid id and nbits per value per token; the codec is trained "
       "on the first documents added)",
       "dense", false},
      {"plaid-nbits", "1|2|4|8", "plaid corpora: bits per residual value", "2",
       false},
      {"plaid-centroids", "K",
       "plaid corpora: centroids of the codec (0: ColBERT's count for the "
       "first documents' size)",
       "0", false},
      {"dtype", "float16|bfloat16",
       "storage element type of a dense corpus (default float16)", nullptr,
       false},
      {"quantize-queries", nullptr,
       "int8 corpora: quantise query tokens too (int8 x int8 scoring), or "
       "with =false round them to float16; unset: the server's choice "
       "(quantised where it scores them faster)",
       nullptr, false},
      {"normalize", nullptr, "L2-normalise document and query tokens", nullptr,
       false},
      {"pool-factor", "F",
       "token pooling at ingest: each document's n tokens are clustered "
       "into ceil(n / F) means (1 keeps every token)",
       "1", false},
      {"placement", "auto|gpu|host", "where the tokens live", "auto", false}};
}

std::vector<FlagDef> AddFlags() {
  return {{"corpus", "N", "target corpus", nullptr, true},
          {"tokens", "tokens.npy", "float32 or float16 [T, dim] token rows", "",
           false},
          {"cu-seqlens", "cu.npy", "int64 [N+1] document offsets into tokens",
           "", false},
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
          {"chunk-mb", "MB", "token bytes per stream message", "8", false}};
}

std::vector<FlagDef> QueryFlags() {
  return {{"corpus", "N", "corpus (or alias) to rank", nullptr, true},
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
           "candidate ids, one per line, byte for byte (as add's --ids)",
           nullptr, false},
          {"top-k", "K", "results to return", "10", false}};
}

std::vector<FlagDef> ImportFlags() {
  return {{"corpus", "N", "target corpus", nullptr, true},
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
           "", false}};
}

std::vector<FlagDef> TopFlags() {
  return {{"metrics", "HOST:PORT",
           "the server's --metrics_listen address (default: --target's host, "
           "port 9464)",
           "", false},
          {"interval", "DURATION", "time between frames", "2s", false},
          {"iterations", "N", "frames to print, then exit (0: until killed)",
           "0", false},
          {"once", nullptr, "print one frame and exit (--iterations=1)",
           nullptr, false},
          {"metrics-token-file", "FILE",
           "bearer token for a /metrics under --metrics_token_file (the first "
           "token of the file)",
           "", false}};
}

std::vector<FlagDef> GenerateFlags() {
  return {
      {"out", "DIR", "output directory (created if missing)", nullptr, true},
      {"docs", "N", "documents", "2000", false},
      {"dim", "D", "embedding dimension", "128", false},
      {"min-tokens", "N", "fewest tokens per document", "32", false},
      {"max-tokens", "N", "most tokens per document", "300", false},
      {"clusters", "N", "topic centroids", "256", false},
      {"queries", "N", "queries to write (query_<i>.npy)", "4", false},
      {"query-tokens", "N", "tokens per query", "32", false},
      {"seed", "N", "random seed", "1", false}};
}

// The commands, in the order help lists them.
const std::vector<CommandDef>& Commands() {
  static const std::vector<CommandDef> commands = {
      {"create", "create an empty corpus", CreateFlags(), RunCreate},
      {"add",
       "add documents from .npy, safetensors or PLAID index files (one "
       "atomic, chunked stream)",
       AddFlags(), RunAdd},
      {"query",
       "rank documents for a query (rerank with candidates, else scan)",
       QueryFlags(), RunQuery},
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
       ImportFlags(), RunImport},
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
       TopFlags(), RunTop},
      {"generate",
       "write a synthetic clustered corpus and queries (no server needed)",
       GenerateFlags(), RunGenerate},
  };
  return commands;
}

int Main(int argc, char** argv) {
  Invocation invocation;
  if (std::optional<int> exit_status =
          ParseCommandLine(argc, argv, Commands(), &invocation)) {
    return *exit_status;
  }
  return invocation.command->run(invocation.globals, invocation.flags);
}

}  // namespace
}  // namespace maxsimd::ctl

int main(int argc, char** argv) { return maxsimd::ctl::Main(argc, argv); }
