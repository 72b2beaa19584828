#include "client/maxsimctl/corpus_commands.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "client/maxsimctl/output.h"
#include "index/token_pooling.h"
#include "kernels/base/status_macros.h"

namespace maxsimd::ctl {
namespace {

// create's request from its flags; a usage error naming the flag for a
// value out of range or flags that do not go together.
absl::StatusOr<v1::CreateCorpusRequest> CreateRequestOf(const Flags& f) {
  v1::CreateCorpusRequest request;
  request.set_name(f.Get("name"));
  MAXSIMD_ASSIGN_OR_RETURN(int64_t dim, ParseInt(f, "dim", 1, 1 << 20));
  request.set_dim(static_cast<int32_t>(dim));
  const std::string layout = f.Get("layout");
  const std::string dtype = f.Get("dtype");
  if (layout == "dense") {
    request.set_layout(v1::LAYOUT_DENSE);
    if (dtype.empty() || dtype == "float16") {
      request.set_storage_dtype(v1::DTYPE_FLOAT16);
    } else if (dtype == "bfloat16") {
      request.set_storage_dtype(v1::DTYPE_BFLOAT16);
    } else {
      return UsageError(absl::StrCat(
          "--dtype must be float16 or bfloat16 for --layout dense, got '",
          dtype, "'"));
    }
    if (f.Bool("quantize-queries")) {
      return UsageError("--quantize-queries needs --layout int8");
    }
  } else if (layout == "int8") {
    request.set_layout(v1::LAYOUT_INT8);
    if (!dtype.empty() && dtype != "int8") {
      return UsageError(
          absl::StrCat("--dtype ", dtype,
                       " is for --layout dense; an int8 corpus "
                       "stores int8 codes with per-token scales"));
    }
    request.set_storage_dtype(v1::DTYPE_INT8);
    // Unset: the server's choice.
    if (f.Has("quantize-queries")) {
      request.set_query_quantization(f.Bool("quantize-queries")
                                         ? v1::QUERY_QUANTIZATION_INT8
                                         : v1::QUERY_QUANTIZATION_FLOAT16);
    }
  } else if (layout == "plaid") {
    request.set_layout(v1::LAYOUT_PLAID);
    if (!dtype.empty() || f.Bool("quantize-queries")) {
      return UsageError(
          "--dtype and --quantize-queries do not go with --layout plaid");
    }
    MAXSIMD_ASSIGN_OR_RETURN(int64_t nbits, ParseInt(f, "plaid-nbits", 1, 8));
    MAXSIMD_ASSIGN_OR_RETURN(
        int64_t centroids, ParseInt(f, "plaid-centroids", 0, int64_t{1} << 22));
    request.set_plaid_nbits(static_cast<int32_t>(nbits));
    request.set_plaid_centroids(centroids);
  } else {
    return UsageError(absl::StrCat(
        "--layout must be dense, int8 or plaid, got '", layout, "'"));
  }
  const std::string placement = f.Get("placement");
  if (placement == "auto") {
    request.set_placement(v1::PLACEMENT_AUTO);
  } else if (placement == "gpu") {
    request.set_placement(v1::PLACEMENT_GPU);
  } else if (placement == "host") {
    request.set_placement(v1::PLACEMENT_HOST);
  } else {
    return UsageError(absl::StrCat(
        "--placement must be auto, gpu or host, got '", placement, "'"));
  }
  request.set_normalize(f.Bool("normalize"));
  MAXSIMD_ASSIGN_OR_RETURN(int64_t pool_factor,
                           ParseInt(f, "pool-factor", 1, kMaxTokenPoolFactor));
  request.set_pool_factor(static_cast<int32_t>(pool_factor));
  return request;
}

}  // namespace

int RunCreate(const Globals& g, const Flags& f) {
  absl::StatusOr<v1::CreateCorpusRequest> request = CreateRequestOf(f);
  if (!request.ok()) return PrintError(request.status(), kExitUsage);
  return Finish([&]() -> absl::Status {
    MAXSIMD_ASSIGN_OR_RETURN(std::unique_ptr<Client> client, Connect(g));
    MAXSIMD_ASSIGN_OR_RETURN(v1::CorpusInfo info,
                             client->CreateCorpus(*request));
    if (g.json) {
      std::printf("%s\n", CorpusJson(info).c_str());
    } else {
      std::printf("created corpus '%s'\n", info.name().c_str());
      PrintCorpusText(info);
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

}  // namespace maxsimd::ctl
