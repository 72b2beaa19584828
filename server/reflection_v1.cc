#include "server/reflection_v1.h"

#include <algorithm>
#include <cstddef>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "google/protobuf/descriptor.pb.h"

namespace maxsimd {
namespace {

using ::google::protobuf::Descriptor;
using ::google::protobuf::FieldDescriptor;
using ::google::protobuf::FileDescriptor;
using ::google::protobuf::FileDescriptorProto;
using ::grpc::reflection::v1::FileDescriptorResponse;
using ::grpc::reflection::v1::ServerReflectionRequest;
using ::grpc::reflection::v1::ServerReflectionResponse;

// The most bytes of a name that an error message quotes.
constexpr size_t kMaxQuotedName = 256;

void SetError(ServerReflectionResponse* response, grpc::StatusCode code,
              const std::string& message) {
  response->mutable_error_response()->set_error_code(code);
  response->mutable_error_response()->set_error_message(message);
}

std::string Quoted(absl::string_view name) {
  return absl::StrCat("\"", name.substr(0, kMaxQuotedName),
                      name.size() > kMaxQuotedName ? "...\"" : "\"");
}

// Appends `file` to `out`, then the files it imports, transitively and
// breadth first, skipping those in `*sent`; adds every file appended to
// `*sent`. `file` itself is appended even when sent before: it is what the
// client asked for.
void AppendFileWithImports(const FileDescriptor* file,
                           std::set<std::string>* sent,
                           FileDescriptorResponse* out) {
  std::vector<const FileDescriptor*> queue = {file};
  std::set<std::string> queued = {file->name()};
  for (size_t i = 0; i < queue.size(); ++i) {
    const FileDescriptor* f = queue[i];
    if (sent->insert(f->name()).second || i == 0) {
      FileDescriptorProto proto;
      f->CopyTo(&proto);
      proto.SerializeToString(out->add_file_descriptor_proto());
    }
    for (int d = 0; d < f->dependency_count(); ++d) {
      const FileDescriptor* dependency = f->dependency(d);
      if (dependency != nullptr && queued.insert(dependency->name()).second) {
        queue.push_back(dependency);
      }
    }
  }
}

// The message type `name` of `pool`, or null with NOT_FOUND (INVALID_ARGUMENT
// when empty) set on `response`. `field` names the request's field.
const Descriptor* FindMessageType(const google::protobuf::DescriptorPool* pool,
                                  const std::string& name,
                                  absl::string_view field,
                                  ServerReflectionResponse* response) {
  if (name.empty()) {
    SetError(response, grpc::StatusCode::INVALID_ARGUMENT,
             absl::StrCat(field,
                          " is empty; give a message type's full name "
                          "(package.Message)"));
    return nullptr;
  }
  const Descriptor* type = pool->FindMessageTypeByName(name);
  if (type == nullptr) {
    SetError(
        response, grpc::StatusCode::NOT_FOUND,
        absl::StrCat(field, ": message type ", Quoted(name), " not found"));
  }
  return type;
}

// One ServerReflectionInfo stream: reads a request, writes its answer, and
// reads the next, so that answers go out in the order of the requests and
// at most one read or one write is pending. Finishes OK when the client
// half-closes. Deletes itself when the call is done.
class ReflectionStream final
    : public grpc::ServerBidiReactor<ServerReflectionRequest,
                                     ServerReflectionResponse> {
 public:
  explicit ReflectionStream(const ReflectionV1Service* service)
      : service_(service) {
    StartRead(&request_);
  }

  void OnReadDone(bool ok) override {
    if (!ok) {  // half-closed by the client, or the call is over
      Finish(grpc::Status::OK);
      return;
    }
    response_ = service_->Answer(request_, &sent_);
    StartWrite(&response_);
  }

  void OnWriteDone(bool ok) override {
    if (!ok) {
      Finish(grpc::Status(grpc::StatusCode::CANCELLED,
                          "ServerReflectionInfo: the stream broke while a "
                          "response was written"));
      return;
    }
    StartRead(&request_);
  }

  void OnDone() override { delete this; }

 private:
  const ReflectionV1Service* const service_;
  ServerReflectionRequest request_;
  ServerReflectionResponse response_;
  std::set<std::string> sent_;  // files already sent on this stream
};

}  // namespace

ReflectionV1Service::ReflectionV1Service(
    std::vector<std::string> services,
    const google::protobuf::DescriptorPool* pool)
    : services_(std::move(services)), pool_(pool) {
  // Builds the advertised services' files (and their imports) now: a pool
  // backed by a database, as the generated one is, finds an enum value only
  // in a file already built.
  for (const std::string& name : services_) pool_->FindServiceByName(name);
}

grpc::ServerBidiReactor<ServerReflectionRequest, ServerReflectionResponse>*
ReflectionV1Service::ServerReflectionInfo(grpc::CallbackServerContext*) {
  return new ReflectionStream(this);
}

ServerReflectionResponse ReflectionV1Service::Answer(
    const ServerReflectionRequest& request, std::set<std::string>* sent) const {
  ServerReflectionResponse response;
  response.set_valid_host(request.host());
  *response.mutable_original_request() = request;
  switch (request.message_request_case()) {
    case ServerReflectionRequest::kListServices: {
      for (const std::string& name : services_) {
        response.mutable_list_services_response()->add_service()->set_name(
            name);
      }
      break;
    }
    case ServerReflectionRequest::kFileByFilename: {
      const std::string& name = request.file_by_filename();
      const FileDescriptor* file =
          name.empty() ? nullptr : pool_->FindFileByName(name);
      if (name.empty()) {
        SetError(&response, grpc::StatusCode::INVALID_ARGUMENT,
                 "file_by_filename is empty; give a file's name as it was "
                 "compiled (maxsimd/v1/reranker.proto)");
      } else if (file == nullptr) {
        SetError(&response, grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("file_by_filename: file ", Quoted(name),
                              " not found"));
      } else {
        AppendFileWithImports(file, sent,
                              response.mutable_file_descriptor_response());
      }
      break;
    }
    case ServerReflectionRequest::kFileContainingSymbol: {
      const std::string& name = request.file_containing_symbol();
      const FileDescriptor* file =
          name.empty() ? nullptr : pool_->FindFileContainingSymbol(name);
      if (name.empty()) {
        SetError(&response, grpc::StatusCode::INVALID_ARGUMENT,
                 "file_containing_symbol is empty; give a full name "
                 "(package.Service, package.Service.Method, package.Type)");
      } else if (file == nullptr) {
        SetError(&response, grpc::StatusCode::NOT_FOUND,
                 absl::StrCat("file_containing_symbol: symbol ", Quoted(name),
                              " not found"));
      } else {
        AppendFileWithImports(file, sent,
                              response.mutable_file_descriptor_response());
      }
      break;
    }
    case ServerReflectionRequest::kFileContainingExtension: {
      const auto& extension = request.file_containing_extension();
      const Descriptor* type = FindMessageType(
          pool_, extension.containing_type(),
          "file_containing_extension.containing_type", &response);
      if (type == nullptr) break;
      const FieldDescriptor* field =
          pool_->FindExtensionByNumber(type, extension.extension_number());
      if (field == nullptr) {
        SetError(
            &response, grpc::StatusCode::NOT_FOUND,
            absl::StrCat(
                "file_containing_extension: ", Quoted(type->full_name()),
                " has no extension number ", extension.extension_number()));
        break;
      }
      AppendFileWithImports(field->file(), sent,
                            response.mutable_file_descriptor_response());
      break;
    }
    case ServerReflectionRequest::kAllExtensionNumbersOfType: {
      const Descriptor* type =
          FindMessageType(pool_, request.all_extension_numbers_of_type(),
                          "all_extension_numbers_of_type", &response);
      if (type == nullptr) break;
      std::vector<const FieldDescriptor*> extensions;
      pool_->FindAllExtensions(type, &extensions);
      std::vector<int> numbers;
      for (const FieldDescriptor* f : extensions)
        numbers.push_back(f->number());
      std::sort(numbers.begin(), numbers.end());
      auto* out = response.mutable_all_extension_numbers_response();
      out->set_base_type_name(type->full_name());
      for (int n : numbers) out->add_extension_number(n);
      break;
    }
    case ServerReflectionRequest::MESSAGE_REQUEST_NOT_SET:
      SetError(&response, grpc::StatusCode::INVALID_ARGUMENT,
               "ServerReflectionRequest asks nothing: set one of "
               "list_services, file_by_filename, file_containing_symbol, "
               "file_containing_extension, all_extension_numbers_of_type");
      break;
  }
  return response;
}

}  // namespace maxsimd
