#include "client/maxsimctl/document_commands.h"

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "client/maxsimctl/ids.h"
#include "client/maxsimctl/output.h"
#include "index/importers.h"
#include "kernels/base/status_macros.h"

namespace maxsimd::ctl {
namespace {

// `add`'s documents: the tokens of one source (.npy pair, safetensors or
// PLAID directory), and the ids of --ids read byte for byte (ReadIdFile)
// rather than by the importers' line reader, which trims them; a PLAID index
// without --ids keeps its passage ids "0", "1", ...
absl::StatusOr<ImportedDocuments> ReadAddFiles(const DocumentFiles& files) {
  MAXSIMD_ASSIGN_OR_RETURN(ImportedDocuments docs, ReadDocumentTokens(files));
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

// add's files from its flags; exactly one source, else a usage error naming
// the flags (the importer refuses these combinations too).
absl::StatusOr<DocumentFiles> AddFilesOf(const Flags& f) {
  DocumentFiles files;
  files.tokens_npy = f.Get("tokens");
  files.cu_seqlens_npy = f.Get("cu-seqlens");
  files.safetensors = f.Get("safetensors");
  files.plaid_dir = f.Get("plaid");
  files.ids = f.Get("ids");
  const bool npy = !files.tokens_npy.empty() || !files.cu_seqlens_npy.empty();
  if (int{npy} + int{!files.safetensors.empty()} +
              int{!files.plaid_dir.empty()} !=
          1 ||
      (npy && (files.tokens_npy.empty() || files.cu_seqlens_npy.empty()))) {
    return UsageError(
        "give one of --safetensors, --plaid, or both --tokens and "
        "--cu-seqlens");
  }
  return files;
}

}  // namespace

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
    MAXSIMD_ASSIGN_OR_RETURN(DocumentFiles files, AddFilesOf(f));
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

}  // namespace maxsimd::ctl
