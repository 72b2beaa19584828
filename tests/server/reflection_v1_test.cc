// server/reflection_v1.cc through a v1 client stub, against an in-process
// grpc::Server on a free port: the advertised list, files by symbol and by
// name that load into a fresh DescriptorPool, errors that leave the stream
// open, answers in the order of the requests with files sent once, and the
// extension questions on a pool of test files.
#include "server/reflection_v1.h"

#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "google/protobuf/descriptor.pb.h"
#include "google/protobuf/descriptor_database.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "grpc/health/v1/health.pb.h"
#include "grpcpp/grpcpp.h"
#include "gtest/gtest.h"
#include "maxsimd/v1/admin.pb.h"
#include "maxsimd/v1/reranker.grpc.pb.h"
#include "maxsimd/v1/types.pb.h"

namespace maxsimd {
namespace {

using ::google::protobuf::DescriptorPool;
using ::google::protobuf::FileDescriptor;
using ::google::protobuf::FileDescriptorProto;
using ::grpc::reflection::v1::ServerReflection;
using ::grpc::reflection::v1::ServerReflectionRequest;
using ::grpc::reflection::v1::ServerReflectionResponse;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// What server.cc advertises.
const std::vector<std::string>& AdvertisedServices() {
  static const auto* services = new std::vector<std::string>{
      "maxsimd.v1.Reranker",
      "maxsimd.v1.Admin",
      "grpc.health.v1.Health",
      "grpc.reflection.v1alpha.ServerReflection",
      "grpc.reflection.v1.ServerReflection",
  };
  return *services;
}

// A grpc::Server on 127.0.0.1 (a free port) serving only `service`, and a
// v1 stub of it.
class ReflectionServer {
 public:
  explicit ReflectionServer(std::unique_ptr<ReflectionV1Service> service)
      : service_(std::move(service)) {
    grpc::ServerBuilder builder;
    builder.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(),
                             &port_);
    builder.RegisterService(service_.get());
    server_ = builder.BuildAndStart();
    if (server_ != nullptr && port_ != 0) {
      stub_ = ServerReflection::NewStub(
          grpc::CreateChannel(absl::StrCat("127.0.0.1:", port_),
                              grpc::InsecureChannelCredentials()));
    }
  }
  ~ReflectionServer() {
    if (server_ != nullptr) {
      server_->Shutdown(absl::ToChronoTime(absl::Now() + absl::Seconds(2)));
    }
  }
  bool ok() const { return stub_ != nullptr; }

  // Sends `requests` on one stream (from a thread of its own, so that
  // neither side waits on the other's flow control), half-closes, and
  // returns every response read until the server finished the stream.
  std::vector<ServerReflectionResponse> Exchange(
      const std::vector<ServerReflectionRequest>& requests,
      grpc::Status* status = nullptr) {
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
    auto stream = stub_->ServerReflectionInfo(&ctx);
    std::thread writer([&] {
      for (const ServerReflectionRequest& r : requests) {
        if (!stream->Write(r)) break;
      }
      stream->WritesDone();
    });
    std::vector<ServerReflectionResponse> responses;
    ServerReflectionResponse response;
    while (stream->Read(&response)) responses.push_back(response);
    writer.join();
    const grpc::Status finished = stream->Finish();
    EXPECT_TRUE(finished.ok()) << finished.error_message();
    if (status != nullptr) *status = finished;
    return responses;
  }

  // One request on a stream of its own; its one response.
  ServerReflectionResponse Ask(const ServerReflectionRequest& request) {
    std::vector<ServerReflectionResponse> r = Exchange({request});
    EXPECT_EQ(r.size(), 1u);
    return r.empty() ? ServerReflectionResponse() : r[0];
  }

 private:
  std::unique_ptr<ReflectionV1Service> service_;
  int port_ = 0;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<ServerReflection::Stub> stub_;
};

ServerReflectionRequest ListServices(const std::string& host = "") {
  ServerReflectionRequest r;
  r.set_host(host);
  r.set_list_services("*");
  return r;
}
ServerReflectionRequest Symbol(const std::string& name) {
  ServerReflectionRequest r;
  r.set_file_containing_symbol(name);
  return r;
}
ServerReflectionRequest File(const std::string& name) {
  ServerReflectionRequest r;
  r.set_file_by_filename(name);
  return r;
}
ServerReflectionRequest Extension(const std::string& type, int number) {
  ServerReflectionRequest r;
  r.mutable_file_containing_extension()->set_containing_type(type);
  r.mutable_file_containing_extension()->set_extension_number(number);
  return r;
}
ServerReflectionRequest ExtensionNumbers(const std::string& type) {
  ServerReflectionRequest r;
  r.set_all_extension_numbers_of_type(type);
  return r;
}

// The FileDescriptorProtos of a response, in order; none for another kind.
std::vector<FileDescriptorProto> Files(const ServerReflectionResponse& r) {
  std::vector<FileDescriptorProto> files;
  for (const std::string& bytes :
       r.file_descriptor_response().file_descriptor_proto()) {
    files.emplace_back();
    EXPECT_TRUE(files.back().ParseFromString(bytes));
  }
  return files;
}

std::vector<std::string> FileNames(const ServerReflectionResponse& r) {
  std::vector<std::string> names;
  for (const FileDescriptorProto& f : Files(r)) names.push_back(f.name());
  return names;
}

// `file` and the files it imports, transitively, by name.
std::set<std::string> Closure(const FileDescriptor* file) {
  std::set<std::string> names = {file->name()};
  for (int i = 0; i < file->dependency_count(); ++i) {
    const std::set<std::string> more = Closure(file->dependency(i));
    names.insert(more.begin(), more.end());
  }
  return names;
}

bool SameRequest(const ServerReflectionRequest& a,
                 const ServerReflectionRequest& b) {
  return google::protobuf::util::MessageDifferencer::Equals(a, b);
}

class ReflectionV1Test : public ::testing::Test {
 protected:
  void SetUp() override {
    // Linking the generated files is what puts them in the generated pool.
    ASSERT_NE(v1::RerankRequest::descriptor(), nullptr);
    ASSERT_NE(v1::CreateCorpusRequest::descriptor(), nullptr);
    ASSERT_NE(grpc::health::v1::HealthCheckRequest::descriptor(), nullptr);
    server_ = std::make_unique<ReflectionServer>(
        std::make_unique<ReflectionV1Service>(AdvertisedServices()));
    ASSERT_TRUE(server_->ok());
  }

  std::unique_ptr<ReflectionServer> server_;
};

TEST_F(ReflectionV1Test, ListServicesReturnsExactlyTheList) {
  const ServerReflectionRequest request = ListServices("localhost:50051");
  const ServerReflectionResponse r = server_->Ask(request);
  ASSERT_TRUE(r.has_list_services_response()) << r.DebugString();
  std::vector<std::string> names;
  for (const auto& s : r.list_services_response().service()) {
    names.push_back(s.name());
  }
  EXPECT_EQ(names, AdvertisedServices());
  EXPECT_EQ(r.valid_host(), "localhost:50051");
  EXPECT_TRUE(SameRequest(r.original_request(), request));
}

TEST_F(ReflectionV1Test, ServiceFilesLoadIntoAFreshPool) {
  for (const std::string service :
       {"maxsimd.v1.Reranker", "maxsimd.v1.Admin", "grpc.health.v1.Health"}) {
    SCOPED_TRACE(service);
    const ServerReflectionResponse r = server_->Ask(Symbol(service));
    ASSERT_TRUE(r.has_file_descriptor_response()) << r.DebugString();
    const google::protobuf::ServiceDescriptor* generated =
        DescriptorPool::generated_pool()->FindServiceByName(service);
    ASSERT_NE(generated, nullptr);
    // The declaring file first, then exactly its imports, each once.
    const std::vector<std::string> names = FileNames(r);
    ASSERT_FALSE(names.empty());
    EXPECT_EQ(names[0], generated->file()->name());
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()),
              Closure(generated->file()));
    EXPECT_EQ(std::set<std::string>(names.begin(), names.end()).size(),
              names.size());

    google::protobuf::SimpleDescriptorDatabase database;
    for (const FileDescriptorProto& f : Files(r)) {
      ASSERT_TRUE(database.Add(f)) << f.name();
    }
    DescriptorPool pool(&database);
    const google::protobuf::ServiceDescriptor* loaded =
        pool.FindServiceByName(service);
    ASSERT_NE(loaded, nullptr);
    ASSERT_EQ(loaded->method_count(), generated->method_count());
    ASSERT_GT(loaded->method_count(), 0);
    for (int i = 0; i < loaded->method_count(); ++i) {
      const google::protobuf::MethodDescriptor* m = loaded->method(i);
      ASSERT_NE(m->input_type(), nullptr);
      ASSERT_NE(m->output_type(), nullptr);
      EXPECT_EQ(m->input_type()->full_name(),
                generated->method(i)->input_type()->full_name());
      EXPECT_EQ(m->output_type()->full_name(),
                generated->method(i)->output_type()->full_name());
      EXPECT_EQ(m->input_type()->field_count(),
                generated->method(i)->input_type()->field_count());
    }
  }
}

TEST_F(ReflectionV1Test, SymbolsOfEveryKindFindTheirFile) {
  const google::protobuf::Descriptor* request = v1::RerankRequest::descriptor();
  const google::protobuf::EnumDescriptor* dtype = v1::DType_descriptor();
  const google::protobuf::EnumDescriptor* nested =
      grpc::health::v1::HealthCheckResponse::ServingStatus_descriptor();
  ASSERT_NE(nested->containing_type(), nullptr);  // it is nested
  const std::pair<std::string, std::string> cases[] = {
      {"maxsimd.v1.Reranker", "maxsimd/v1/reranker.proto"},
      {"maxsimd.v1.Reranker.Rerank", "maxsimd/v1/reranker.proto"},
      {request->full_name(), "maxsimd/v1/reranker.proto"},
      {request->field(0)->full_name(), "maxsimd/v1/reranker.proto"},
      {dtype->full_name(), "maxsimd/v1/types.proto"},
      {dtype->value(0)->full_name(), "maxsimd/v1/types.proto"},
      {"maxsimd.v1.Admin.CreateCorpus", "maxsimd/v1/admin.proto"},
      {nested->full_name(), "grpc/health/v1/health.proto"},
      {nested->value(1)->full_name(), "grpc/health/v1/health.proto"},
      {"grpc.reflection.v1.ServerReflectionRequest",
       "grpc/reflection/v1/reflection.proto"},
  };
  for (const auto& [symbol, file] : cases) {
    const ServerReflectionResponse r = server_->Ask(Symbol(symbol));
    const std::vector<std::string> names = FileNames(r);
    ASSERT_FALSE(names.empty()) << symbol << ": " << r.DebugString();
    EXPECT_EQ(names[0], file) << symbol;
  }
}

TEST_F(ReflectionV1Test, FileByFilenameSendsTheFileAndItsImports) {
  const ServerReflectionRequest request = File("maxsimd/v1/reranker.proto");
  const ServerReflectionResponse r = server_->Ask(request);
  EXPECT_THAT(FileNames(r), ElementsAre("maxsimd/v1/reranker.proto",
                                        "maxsimd/v1/types.proto"));
  EXPECT_TRUE(SameRequest(r.original_request(), request));
  const std::vector<FileDescriptorProto> files = Files(r);
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].package(), "maxsimd.v1");
  ASSERT_EQ(files[0].service_size(), 1);
  EXPECT_EQ(files[0].service(0).name(), "Reranker");
  EXPECT_THAT(FileNames(server_->Ask(File("grpc/health/v1/health.proto"))),
              ElementsAre("grpc/health/v1/health.proto"));
}

TEST_F(ReflectionV1Test, UnknownNamesAndEmptyRequestsAreErrorResponses) {
  const std::pair<ServerReflectionRequest, grpc::StatusCode> cases[] = {
      {Symbol("maxsimd.v1.NoSuchService"), grpc::StatusCode::NOT_FOUND},
      {Symbol("maxsimd.v1.Reranker.NoSuchMethod"), grpc::StatusCode::NOT_FOUND},
      {File("maxsimd/v1/no_such.proto"), grpc::StatusCode::NOT_FOUND},
      {Symbol(""), grpc::StatusCode::INVALID_ARGUMENT},
      {File(""), grpc::StatusCode::INVALID_ARGUMENT},
      {ServerReflectionRequest(), grpc::StatusCode::INVALID_ARGUMENT},
  };
  std::vector<ServerReflectionRequest> requests;
  for (const auto& c : cases) requests.push_back(c.first);
  // The stream stays open after errors: one more question at the end.
  requests.push_back(Symbol("maxsimd.v1.Reranker"));
  const std::vector<ServerReflectionResponse> responses =
      server_->Exchange(requests);
  ASSERT_EQ(responses.size(), requests.size());
  for (size_t i = 0; i < std::size(cases); ++i) {
    const ServerReflectionResponse& r = responses[i];
    ASSERT_TRUE(r.has_error_response()) << i << ": " << r.DebugString();
    EXPECT_EQ(r.error_response().error_code(), cases[i].second) << i;
    EXPECT_TRUE(SameRequest(r.original_request(), cases[i].first)) << i;
  }
  EXPECT_THAT(responses[0].error_response().error_message(),
              HasSubstr("\"maxsimd.v1.NoSuchService\" not found"));
  EXPECT_THAT(responses[2].error_response().error_message(),
              HasSubstr("file_by_filename"));
  EXPECT_THAT(responses[5].error_response().error_message(),
              HasSubstr("file_containing_symbol"));
  EXPECT_TRUE(responses.back().has_file_descriptor_response());
}

TEST_F(ReflectionV1Test, RequestsOnOneStreamAreAnsweredInOrder) {
  const std::vector<ServerReflectionRequest> requests = {
      ListServices("first"),
      Symbol("maxsimd.v1.Reranker"),
      // Asked again: the file comes again, its import (sent) does not.
      File("maxsimd/v1/reranker.proto"),
      Symbol("maxsimd.v1.Nope"),
      // admin.proto imports types.proto, already sent on this stream.
      Symbol("maxsimd.v1.Admin"),
      ListServices("last"),
  };
  const std::vector<ServerReflectionResponse> responses =
      server_->Exchange(requests);
  ASSERT_EQ(responses.size(), requests.size());
  for (size_t i = 0; i < requests.size(); ++i) {
    EXPECT_TRUE(SameRequest(responses[i].original_request(), requests[i]))
        << i << ": " << responses[i].original_request().DebugString();
  }
  EXPECT_EQ(responses[0].valid_host(), "first");
  EXPECT_TRUE(responses[0].has_list_services_response());
  EXPECT_THAT(FileNames(responses[1]), ElementsAre("maxsimd/v1/reranker.proto",
                                                   "maxsimd/v1/types.proto"));
  EXPECT_THAT(FileNames(responses[2]),
              ElementsAre("maxsimd/v1/reranker.proto"));
  EXPECT_EQ(responses[3].error_response().error_code(),
            grpc::StatusCode::NOT_FOUND);
  EXPECT_THAT(FileNames(responses[4]), ElementsAre("maxsimd/v1/admin.proto"));
  EXPECT_EQ(responses[5].valid_host(), "last");
  EXPECT_EQ(responses[5].list_services_response().service_size(),
            static_cast<int>(AdvertisedServices().size()));
}

TEST_F(ReflectionV1Test, AStreamWithoutRequestsFinishesOk) {
  grpc::Status status;
  EXPECT_TRUE(server_->Exchange({}, &status).empty());
  EXPECT_TRUE(status.ok());
}

// ---------------------------------------------------------------------------
// Extensions, on a pool of two test files (the generated pool has none of
// its own): ext/base.proto declares Base with an extension range;
// ext/more.proto extends it, at file scope and inside a message.

constexpr char kBaseFile[] = R"pb(
  name: "ext/base.proto"
  package: "ext.test"
  syntax: "proto2"
  message_type {
    name: "Base"
    extension_range { start: 100 end: 200 }
  }
  message_type { name: "Other" }
)pb";

constexpr char kMoreFile[] = R"pb(
  name: "ext/more.proto"
  package: "ext.test"
  syntax: "proto2"
  dependency: "ext/base.proto"
  extension {
    name: "first"
    number: 150
    label: LABEL_OPTIONAL
    type: TYPE_INT32
    extendee: ".ext.test.Base"
  }
  extension {
    name: "second"
    number: 100
    label: LABEL_OPTIONAL
    type: TYPE_STRING
    extendee: ".ext.test.Base"
  }
  message_type {
    name: "Holder"
    extension {
      name: "nested"
      number: 120
      label: LABEL_OPTIONAL
      type: TYPE_BOOL
      extendee: ".ext.test.Base"
    }
  }
)pb";

class ReflectionV1ExtensionTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (const char* text : {kBaseFile, kMoreFile}) {
      FileDescriptorProto proto;
      ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &proto));
      ASSERT_NE(pool_.BuildFile(proto), nullptr) << proto.name();
    }
    server_ = std::make_unique<ReflectionServer>(
        std::make_unique<ReflectionV1Service>(
            std::vector<std::string>{"ext.test.Nothing"}, &pool_));
    ASSERT_TRUE(server_->ok());
  }

  DescriptorPool pool_;
  std::unique_ptr<ReflectionServer> server_;
};

TEST_F(ReflectionV1ExtensionTest, FileContainingExtension) {
  EXPECT_THAT(FileNames(server_->Ask(Extension("ext.test.Base", 150))),
              ElementsAre("ext/more.proto", "ext/base.proto"));
  EXPECT_THAT(FileNames(server_->Ask(Extension("ext.test.Base", 120))),
              ElementsAre("ext/more.proto", "ext/base.proto"));
  EXPECT_THAT(FileNames(server_->Ask(Symbol("ext.test.Holder.nested"))),
              ElementsAre("ext/more.proto", "ext/base.proto"));
  const std::pair<ServerReflectionRequest, grpc::StatusCode> errors[] = {
      {Extension("ext.test.Base", 101), grpc::StatusCode::NOT_FOUND},
      {Extension("ext.test.Nope", 100), grpc::StatusCode::NOT_FOUND},
      {Extension("", 100), grpc::StatusCode::INVALID_ARGUMENT},
  };
  for (const auto& [request, code] : errors) {
    const ServerReflectionResponse r = server_->Ask(request);
    ASSERT_TRUE(r.has_error_response()) << r.DebugString();
    EXPECT_EQ(r.error_response().error_code(), code) << r.DebugString();
    EXPECT_THAT(r.error_response().error_message(),
                HasSubstr("file_containing_extension"));
  }
}

TEST_F(ReflectionV1ExtensionTest, AllExtensionNumbersOfType) {
  const ServerReflectionResponse base =
      server_->Ask(ExtensionNumbers("ext.test.Base"));
  ASSERT_TRUE(base.has_all_extension_numbers_response()) << base.DebugString();
  EXPECT_EQ(base.all_extension_numbers_response().base_type_name(),
            "ext.test.Base");
  EXPECT_THAT(base.all_extension_numbers_response().extension_number(),
              ElementsAre(100, 120, 150));
  const ServerReflectionResponse other =
      server_->Ask(ExtensionNumbers("ext.test.Other"));
  ASSERT_TRUE(other.has_all_extension_numbers_response());
  EXPECT_EQ(other.all_extension_numbers_response().extension_number_size(), 0);
  const ServerReflectionResponse missing =
      server_->Ask(ExtensionNumbers("ext.test.Nope"));
  EXPECT_EQ(missing.error_response().error_code(), grpc::StatusCode::NOT_FOUND);
}

}  // namespace
}  // namespace maxsimd
