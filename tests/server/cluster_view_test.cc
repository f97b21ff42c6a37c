// GET /v1/cluster and its gRPC twin (Cluster/Get) over one Service: the same
// tasks, states, incarnations, heartbeats and devices; a task the cluster
// reports UNREACHABLE is shown as such; without a cluster the view is this
// process alone. GET /v1/devices lists every task's devices. The gRPC
// server's worker mode (no public API), extra addresses and builder hooks.
#include <grpcpp/grpcpp.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <memory>

#include "api/flowstate.grpc.pb.h"
#include "api/views_json.h"
#include "devices/device_pool.h"
#include "scheduler/rendezvous.h"
#include "server/grpc/grpc_server.h"
#include "server/metrics.h"
#include "server/rest/http_routes.h"
#include "server/service.h"

namespace flowstate {
namespace {

namespace pb = ::flowstate::v1;
using Json = nlohmann::json;

double Now() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

// This process as task 1 of job "worker".
DevicePool* WorkerPool() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    o.job = "worker";
    o.task = 1;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

DevicePool* LocalPool() {
  static DevicePool* pool = [] {
    DevicePoolOptions o;
    o.intra_op_threads = 1;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

// What a cluster of three tasks reports: task 0 UP (heard from 1.5 s ago),
// task 1 this one (devices left to the service), task 2 UNREACHABLE.
ClusterInfo ThreeTasks(double heartbeat) {
  ClusterInfo c;
  TaskInfo t0;
  t0.job = "worker";
  t0.index = 0;
  t0.address = "10.0.0.1:50051";
  t0.state = TaskState::kUp;
  t0.incarnation = 0x0123456789abcdefULL;
  t0.last_heartbeat = heartbeat;
  DeviceInfo d;
  d.name = "/job:worker/replica:0/task:0/device:CPU:0";
  d.type = "CPU";
  d.description = "remote CPU";
  d.bytes_in_use = 1024;
  d.bytes_limit = 1 << 20;
  t0.devices.push_back(d);
  d.name = "/job:worker/replica:0/task:0/device:CPU:1";
  t0.devices.push_back(d);
  TaskInfo t1;
  t1.job = "worker";
  t1.index = 1;
  t1.address = "10.0.0.2:50051";
  t1.is_self = true;
  TaskInfo t2;
  t2.job = "worker";
  t2.index = 2;
  t2.address = "10.0.0.3:50051";
  t2.state = TaskState::kUnreachable;
  t2.incarnation = 0xfeedULL;
  t2.last_heartbeat = heartbeat - 10;
  t2.error = "no heartbeat for 10 s (deadline 5 s): connection refused";
  c.tasks = {t0, t1, t2};
  return c;
}

class ClusterViewTest : public ::testing::Test {
 protected:
  void Start(bool with_cluster, GrpcServerOptions go = {}) {
    ServiceOptions so;
    so.devices = with_cluster ? WorkerPool() : LocalPool();
    if (with_cluster) {
      so.task_job = "worker";
      so.task_index = 1;
      const double hb = Now() - 1.5;
      heartbeat_ = hb;
      so.cluster = [hb] { return ThreeTasks(hb); };
    }
    service_ = std::make_unique<Service>(so);
    ctx_.service = service_.get();
    ctx_.metrics = &metrics_;
    go.address = "127.0.0.1:0";
    StatusOr<std::unique_ptr<GrpcServer>> s = GrpcServer::Start(service_.get(), &metrics_, go);
    ASSERT_TRUE(s.ok()) << s.status().ToString();
    server_ = std::move(s).value();
    channel_ = ::grpc::CreateChannel("127.0.0.1:" + std::to_string(server_->port()),
                                     ::grpc::InsecureChannelCredentials());
  }
  void TearDown() override {
    if (server_) server_->Stop();
    if (service_) service_->Shutdown();
  }

  Json Rest(const std::string& target) {
    HttpRequest r;
    r.method = "GET";
    r.target = target;
    HttpResponse resp = HandleRequest(r, ctx_);
    EXPECT_EQ(resp.status, 200) << resp.body;
    return Json::parse(resp.body);
  }

  pb::GetClusterResponse Grpc() {
    ::grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
    pb::GetClusterResponse resp;
    ::grpc::Status s = pb::Cluster::NewStub(channel_)->Get(&ctx, pb::GetClusterRequest(), &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    return resp;
  }

  // REST's task `j` and gRPC's task `p` say the same; `apart` is the time
  // from before the first of the two calls to after the second (measured:
  // under ThreadSanitizer a first gRPC call can take over a second).
  static void ExpectSame(const Json& j, const pb::Task& p, double apart) {
    EXPECT_EQ(j["job"], p.job());
    EXPECT_EQ(j["index"], p.index());
    EXPECT_EQ(j["name"], p.name());
    EXPECT_EQ(j["address"], p.address());
    EXPECT_EQ(j["state"], p.state());
    EXPECT_EQ(j["incarnation"].is_null() ? "" : j["incarnation"].get<std::string>(), p.incarnation());
    EXPECT_EQ(j["is_self"], p.is_self());
    EXPECT_EQ(j["error"], p.error());
    EXPECT_EQ(j["last_heartbeat"].is_null(), !p.has_last_heartbeat());
    EXPECT_EQ(j["heartbeat_age_seconds"].is_null(), !p.has_heartbeat_age_seconds());
    if (!j["last_heartbeat"].is_null()) {
      StatusOr<double> t = ParseRfc3339(j["last_heartbeat"].get<std::string>());
      ASSERT_TRUE(t.ok());
      const double pt = double(p.last_heartbeat().seconds()) + p.last_heartbeat().nanos() / 1e9;
      // This task's heartbeat is the time of each view (two calls apart).
      EXPECT_NEAR(*t, pt, j["is_self"] == true ? apart + 0.002 : 0.002) << j["name"];
      // The ages differ only by the time between the two calls (and the
      // rounding to milliseconds).
      EXPECT_NEAR(j["heartbeat_age_seconds"].get<double>(), p.heartbeat_age_seconds(), apart + 0.002);
    }
    ASSERT_EQ(j["devices"].size(), size_t(p.devices_size()));
    for (int i = 0; i < p.devices_size(); ++i) {
      EXPECT_EQ(j["devices"][i]["name"], p.devices(i).name());
      EXPECT_EQ(j["devices"][i]["memory"]["bytes_in_use"], p.devices(i).memory().bytes_in_use());
    }
  }

  // A task's age in a view taken between `before` and `after` (Now()) is
  // the view's time less its heartbeat: within [before, after] less it, to
  // the millisecond the view rounds to. Measured, not a fixed slack: the
  // age is the time the test took to get here, longer under a sanitizer.
  static void ExpectAge(const Json& task, double heartbeat, double before, double after) {
    const double age = task["heartbeat_age_seconds"].get<double>();
    EXPECT_GE(age, before - heartbeat - 0.001) << task["name"];
    EXPECT_LE(age, after - heartbeat + 0.001) << task["name"];
  }

  double heartbeat_ = 0;  // task 0's last heartbeat (Start with a cluster)
  Metrics metrics_;
  std::unique_ptr<Service> service_;
  RouteContext ctx_;
  std::unique_ptr<GrpcServer> server_;
  std::shared_ptr<::grpc::Channel> channel_;
};

TEST_F(ClusterViewTest, WithoutAClusterTheViewIsThisProcess) {
  Start(false);
  const double before = Now();
  Json j = Rest("/v1/cluster");
  ASSERT_EQ(j["tasks"].size(), 1u) << j.dump();
  const Json& t = j["tasks"][0];
  EXPECT_EQ(t["job"], "localhost");
  EXPECT_EQ(t["index"], 0);
  EXPECT_EQ(t["name"], "/job:localhost/replica:0/task:0");
  EXPECT_EQ(t["state"], "UP");
  EXPECT_EQ(t["is_self"], true);
  EXPECT_EQ(t["incarnation"], FormatIncarnation(ProcessIncarnation()));
  EXPECT_EQ(t["heartbeat_age_seconds"], 0.0);
  ASSERT_EQ(t["devices"].size(), LocalPool()->devices().size());
  EXPECT_EQ(t["devices"][0]["name"], "/job:localhost/replica:0/task:0/device:CPU:0");
  // The device list is the local pool, as before clusters.
  Json d = Rest("/v1/devices");
  ASSERT_EQ(d["devices"].size(), t["devices"].size());
  EXPECT_EQ(d["devices"][0]["name"], t["devices"][0]["name"]);
  pb::GetClusterResponse g = Grpc();
  ASSERT_EQ(g.tasks_size(), 1);
  ExpectSame(t, g.tasks(0), Now() - before);
}

TEST_F(ClusterViewTest, RestAndGrpcGiveTheSameCluster) {
  Start(true);
  const double before = Now();
  Json j = Rest("/v1/cluster");
  const double after_rest = Now();
  pb::GetClusterResponse g = Grpc();
  const double apart = Now() - before;
  ASSERT_EQ(j["tasks"].size(), 3u) << j.dump();
  ASSERT_EQ(g.tasks_size(), 3);
  for (int i = 0; i < 3; ++i) ExpectSame(j["tasks"][i], g.tasks(i), apart);

  const Json& t0 = j["tasks"][0];
  EXPECT_EQ(t0["state"], "UP");
  EXPECT_EQ(t0["incarnation"], "0123456789abcdef");
  EXPECT_EQ(t0["is_self"], false);
  ExpectAge(t0, heartbeat_, before, after_rest);  // 1.5 s and the time since Start
  EXPECT_EQ(t0["devices"].size(), 2u);
  // This task: its own live devices and incarnation, whatever the provider said.
  const Json& t1 = j["tasks"][1];
  EXPECT_EQ(t1["is_self"], true);
  EXPECT_EQ(t1["state"], "UP");
  EXPECT_EQ(t1["address"], "10.0.0.2:50051");
  EXPECT_EQ(t1["incarnation"], FormatIncarnation(ProcessIncarnation()));
  ASSERT_EQ(t1["devices"].size(), 1u);
  EXPECT_EQ(t1["devices"][0]["name"], "/job:worker/replica:0/task:1/device:CPU:0");
}

TEST_F(ClusterViewTest, AnUnreachableTaskIsShownAsSuch) {
  Start(true);
  const double before = Now();
  Json j = Rest("/v1/cluster");
  const double after = Now();
  const Json& t2 = j["tasks"][2];
  EXPECT_EQ(t2["name"], "/job:worker/replica:0/task:2");
  EXPECT_EQ(t2["state"], "UNREACHABLE");
  EXPECT_EQ(t2["incarnation"], "000000000000feed");
  ExpectAge(t2, heartbeat_ - 10, before, after);  // 11.5 s and the time since Start
  EXPECT_NE(t2["error"].get<std::string>().find("connection refused"), std::string::npos);
  pb::GetClusterResponse g = Grpc();
  EXPECT_EQ(g.tasks(2).state(), "UNREACHABLE");
  EXPECT_EQ(g.tasks(2).error(), t2["error"]);
  // And the view reads back.
  HttpRequest r;
  r.method = "GET";
  r.target = "/v1/cluster";
  StatusOr<ClusterInfo> back = ClusterInfoFromJson(HandleRequest(r, ctx_).body);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->tasks[2].state, TaskState::kUnreachable);
  EXPECT_EQ(back->tasks[2].incarnation, 0xfeedULL);
}

TEST_F(ClusterViewTest, DevicesListsEveryTask) {
  Start(true);
  Json d = Rest("/v1/devices");
  std::vector<std::string> names;
  for (const Json& dev : d["devices"]) names.push_back(dev["name"]);
  EXPECT_EQ(names, (std::vector<std::string>{"/job:worker/replica:0/task:0/device:CPU:0",
                                             "/job:worker/replica:0/task:0/device:CPU:1",
                                             "/job:worker/replica:0/task:1/device:CPU:0"}));
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::ListDevicesResponse resp;
  ASSERT_TRUE(pb::Devices::NewStub(channel_)->List(&ctx, pb::ListDevicesRequest(), &resp).ok());
  ASSERT_EQ(resp.devices_size(), 3);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(resp.devices(i).name(), names[size_t(i)]);
  // The local view stays this process's pool.
  ASSERT_EQ(service_->ListLocalDevices().size(), 1u);
}

// `flowstate worker`'s gRPC server: introspection and the hooked services,
// no Sessions, Jobs or Ops.
TEST_F(ClusterViewTest, WorkerModeServesNoPublicApi) {
  GrpcServerOptions go;
  go.public_api = false;
  bool hooked = false;
  go.builder_hooks.push_back([&hooked](::grpc::ServerBuilder&) { hooked = true; });
  Start(true, go);
  EXPECT_TRUE(hooked);
  EXPECT_EQ(Grpc().tasks_size(), 3);
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::ListJobsResponse jobs;
  ::grpc::Status s = pb::Jobs::NewStub(channel_)->List(&ctx, pb::ListJobsRequest(), &jobs);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
  ::grpc::ClientContext ctx2;
  ctx2.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::CreateSessionRequest req;
  req.set_graph_json(R"({"nodes": []})");
  pb::CreateSessionResponse created;
  s = pb::Sessions::NewStub(channel_)->Create(&ctx2, req, &created);
  EXPECT_EQ(s.error_code(), ::grpc::StatusCode::UNIMPLEMENTED) << s.error_message();
}

TEST_F(ClusterViewTest, ExtraAddressesAreServedAndCheckedToo) {
  // A free port for the extra address: bind 0, then release it to the server.
  int extra = 0;
  {
    ::grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", ::grpc::InsecureServerCredentials(), &extra);
    std::unique_ptr<::grpc::Server> probe = b.BuildAndStart();
    ASSERT_NE(extra, 0);
    probe->Shutdown(std::chrono::system_clock::now());
  }
  GrpcServerOptions go;
  go.extra_addresses.push_back("127.0.0.1:" + std::to_string(extra));
  Start(false, go);
  auto other = ::grpc::CreateChannel("127.0.0.1:" + std::to_string(extra), ::grpc::InsecureChannelCredentials());
  ::grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(10));
  pb::GetClusterResponse resp;
  ::grpc::Status s = pb::Cluster::NewStub(other)->Get(&ctx, pb::GetClusterRequest(), &resp);
  ASSERT_TRUE(s.ok()) << s.error_message();
  EXPECT_EQ(resp.tasks_size(), 1);
  // A second server cannot take the same extra address: refused, naming it.
  GrpcServerOptions again;
  again.address = "127.0.0.1:0";
  again.extra_addresses.push_back("127.0.0.1:" + std::to_string(extra));
  StatusOr<std::unique_ptr<GrpcServer>> second = GrpcServer::Start(service_.get(), &metrics_, again);
  ASSERT_FALSE(second.ok());
  EXPECT_NE(second.status().message().find("127.0.0.1:" + std::to_string(extra)), std::string::npos)
      << second.status().ToString();
}

}  // namespace
}  // namespace flowstate
