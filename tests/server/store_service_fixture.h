// PRIVATE to the tests of the service over a checkpoint store
// (grpc_checkpoints_test.cc, store_service_test.cc): StoreServiceFixture
// owns a temporary directory (data/points.csv as the data root, db/ the
// Store), a Service over that store, a gRPC server on a free port with a
// Jobs stub to it, and a RouteContext for calling the REST routes directly
// (Rest(), no sockets). One fixture object per test, used from the test's
// thread; Stop() and Start() restart the service and server on the same
// store.
#ifndef FLOWSTATE_TESTS_SERVER_STORE_SERVICE_FIXTURE_H_
#define FLOWSTATE_TESTS_SERVER_STORE_SERVICE_FIXTURE_H_

#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
#include <memory>
#include <string>
#include <utility>

#include "api/flowstate.grpc.pb.h"
#include "checkpoints/store.h"
#include "server/grpc/grpc_server.h"
#include "server/rest/http_routes.h"
#include "server/metrics.h"
#include "server/service.h"
#include "tests/server/server_test_util.h"

namespace flowstate::server_test {

class StoreServiceFixture : public ::testing::Test {
 protected:
  // `dir_prefix` names the test's temporary directory (FreshTestDir).
  explicit StoreServiceFixture(std::string dir_prefix) : dir_prefix_(std::move(dir_prefix)) {}

  void SetUp() override {
    dir_ = FreshTestDirWithPoints(dir_prefix_);
    store_ = checkpoints::Store::Open((dir_ / "db").string()).value();
    Start();
  }
  void Start() {
    ServiceOptions so;
    so.devices = TestPool(1);
    so.data_root = (dir_ / "data").string();
    so.jobs.store = store_.get();
    service_ = std::make_unique<Service>(so);
    GrpcServerOptions go;
    go.address = "127.0.0.1:0";
    server_ = GrpcServer::Start(service_.get(), &metrics_, go).value();
    channel_ = grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                   grpc::InsecureChannelCredentials());
    jobs_ = ::flowstate::v1::Jobs::NewStub(channel_);
    ctx_.service = service_.get();
  }
  void Stop() {
    server_->Stop();
    server_.reset();
    service_->Shutdown();
    service_.reset();
  }
  void TearDown() override {
    Stop();
    store_.reset();
    std::filesystem::remove_all(dir_);
  }

  // A deadline of 30 s for one gRPC call.
  static void Deadline(grpc::ClientContext* ctx) {
    ctx->set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
  }

  // The REST route's response to `method target` with `body`.
  HttpResponse Rest(const std::string& method, const std::string& target, const std::string& body = "") {
    HttpRequest r;
    r.method = method;
    r.target = target;
    r.body = body;
    return HandleRequest(r, ctx_);
  }

  std::filesystem::path dir_;
  std::unique_ptr<checkpoints::Store> store_;
  std::unique_ptr<Service> service_;
  Metrics metrics_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<::flowstate::v1::Jobs::Stub> jobs_;
  RouteContext ctx_;

 private:
  std::string dir_prefix_;
};

}  // namespace flowstate::server_test

#endif  // FLOWSTATE_TESTS_SERVER_STORE_SERVICE_FIXTURE_H_
