// The distributed runtime across real processes on loopback: this test
// process is task 0 (the master); tasks 1-3 are test_task_main processes.
// Killing one with SIGKILL during a step fails the step UNAVAILABLE naming
// it within the deadline; a new process on the same port (new incarnation)
// runs the next step. A loop and a conditional split with another process
// run as in one.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <future>
#include <random>
#include <string>
#include <thread>

#include "devices/device_pool.h"
#include "distributed/cluster.h"
#include "distributed/worker_service.h"
#include "graph/control_flow_builders.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/session.h"
#include "tests/distributed/test_ops.h"

namespace flowstate {
namespace {

// A child task: its PID and the pipes to its stdin and from its stdout.
struct Child {
  pid_t pid = -1;
  int in = -1;   // its stdin
  int out = -1;  // its stdout
  int port = 0;

  // Starts test_task_main; waits (at most 20 s) for its "PORT n" line.
  static Child Start(int index, int port, const std::string& cluster) {
    int to[2], from[2];
    EXPECT_EQ(pipe2(to, O_CLOEXEC), 0);
    EXPECT_EQ(pipe2(from, O_CLOEXEC), 0);
    Child c;
    c.pid = fork();
    if (c.pid == 0) {
      dup2(to[0], 0);
      dup2(from[1], 1);
      std::string i = std::to_string(index), p = std::to_string(port);
      std::vector<const char*> args = {FLOWSTATE_TEST_TASK_MAIN, "--index", i.c_str(), "--port",
                                       p.c_str()};
      if (!cluster.empty()) {
        args.push_back("--cluster");
        args.push_back(cluster.c_str());
      }
      args.push_back(nullptr);
      execv(args[0], const_cast<char**>(args.data()));
      _exit(127);
    }
    close(to[0]);
    close(from[1]);
    c.in = to[1];
    c.out = from[0];
    std::string line;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (line.find('\n') == std::string::npos && std::chrono::steady_clock::now() < deadline) {
      pollfd p{c.out, POLLIN, 0};
      if (poll(&p, 1, 100) <= 0) continue;
      char buf[64];
      ssize_t n = read(c.out, buf, sizeof(buf));
      if (n <= 0) break;
      line.append(buf, n);
    }
    if (line.rfind("PORT ", 0) == 0) c.port = std::atoi(line.c_str() + 5);
    EXPECT_GT(c.port, 0) << "task " << index << " did not report its port: '" << line << "'";
    return c;
  }
  void Send(const std::string& line) {
    std::string l = line + "\n";
    EXPECT_EQ(write(in, l.data(), l.size()), ssize_t(l.size()));
  }
  void Kill() {
    if (pid <= 0) return;
    kill(pid, SIGKILL);
    Reap();
  }
  // Closes its stdin (it exits) and reaps it, killing it after 10 s.
  void Stop() {
    if (pid <= 0) return;
    close(in);
    in = -1;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid, nullptr, WNOHANG) == pid) {
        pid = -1;
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    Kill();
  }
  void Reap() {
    waitpid(pid, nullptr, 0);
    pid = -1;
    if (in >= 0) close(in);
    if (out >= 0) close(out);
    in = out = -1;
  }
};

constexpr const char* kT0 = "/job:worker/replica:0/task:0/device:CPU:0";
constexpr const char* kT1 = "/job:worker/replica:0/task:1/device:CPU:0";
constexpr const char* kT2 = "/job:worker/replica:0/task:2/device:CPU:0";
constexpr const char* kT3 = "/job:worker/replica:0/task:3/device:CPU:0";

// How task 2 goes away during the slow step.
enum class Loss {
  kKill,  // SIGKILL: its connections are reset; a new process takes its port
  kStop,  // SIGSTOP: it stops answering (as a host that vanished); SIGCONT later
};

void LoseTaskDuringStep(Loss loss) {
  testing::RegisterDistributedTestOps();
  std::vector<Child> children;
  for (int i = 1; i <= 3; ++i) children.push_back(Child::Start(i, 0, ""));
  struct Cleanup {
    std::vector<Child>* c;
    ~Cleanup() {
      for (Child& x : *c) x.Kill();
    }
  } cleanup{&children};
  for (const Child& c : children) ASSERT_GT(c.port, 0);

  DevicePoolOptions po;
  po.job = "worker";
  po.task = 0;
  po.intra_op_threads = 1;
  auto pool = DevicePool::Create(po).value();
  WorkerService service;
  const int port = service.Start("127.0.0.1", 0).value();
  std::string line = "127.0.0.1:" + std::to_string(port);
  for (const Child& c : children) line += ",127.0.0.1:" + std::to_string(c.port);
  for (Child& c : children) c.Send(line);
  ClusterOptions co;
  std::stringstream ss(line);
  for (std::string a; std::getline(ss, a, ',');) co.spec.jobs["worker"].push_back(a);
  co.spec.self = TaskId{"worker", 0};
  co.devices = pool.get();
  co.heartbeat_interval_s = 0.5;
  co.heartbeat_deadline_s = 1.0;
  co.rpc_timeout_s = 5;
  co.step_timeout_s = 60;
  auto cluster = Cluster::Create(co).value();
  service.Attach(cluster.get());

  Scope root;
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  Output a = ops::Square(root.WithOpName("a").WithDevice(kT1), x);
  root.WithOpName("quick").WithDevice(kT2).AddNode("quick", "_TestBlock", {a.name()},
                                                   {{"seconds", AttrValue(0.0f)}});
  root.WithOpName("slow").WithDevice(kT2).AddNode("slow", "_TestBlock", {a.name()},
                                                  {{"seconds", AttrValue(60.0f)}});
  ops::Neg(root.WithOpName("quick_out").WithDevice(kT3), Output("quick"));
  ops::Neg(root.WithOpName("slow_out").WithDevice(kT3), Output("slow"));
  ops::Identity(root.WithOpName("out").WithDevice(kT0), Output("quick_out"));
  SessionOptions so;
  so.devices = pool.get();
  so.remote = cluster.get();
  auto session = Session::Create(root.graph_def(), so).value();

  auto run_within = [&](const std::string& fetch, float xv, double seconds) {
    auto f = std::async(std::launch::async, [&, fetch, xv] {
      std::vector<Tensor> out;
      Status st = session->Run({{"x", Tensor::Scalar(xv)}}, {fetch}, {}, &out);
      return std::make_pair(st, st.ok() ? out[0].scalar<float>() : 0.0f);
    });
    if (f.wait_for(std::chrono::duration<double>(seconds)) != std::future_status::ready) {
      ADD_FAILURE() << "the step did not end within " << seconds << " s";
      for (Child& c : children) c.Kill();
      std::abort();
    }
    return f.get();
  };

  auto [ok, v] = run_within("out", 3.0f, 30);
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(v, -9.0f);

  // A step that waits on task 2 for 60 s; task 2 is killed 1 s into it.
  auto slow = std::async(std::launch::async, [&] { return run_within("slow_out", 2.0f, 30); });
  std::this_thread::sleep_for(std::chrono::seconds(1));
  const auto t0 = std::chrono::steady_clock::now();
  const int port2 = children[1].port;
  if (loss == Loss::kKill) {
    children[1].Kill();
  } else {
    kill(children[1].pid, SIGSTOP);
  }
  ASSERT_EQ(slow.wait_for(std::chrono::seconds(20)), std::future_status::ready);
  const double took = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  Status st = slow.get().first;
  EXPECT_EQ(st.code(), Code::kUnavailable) << st.ToString();
  EXPECT_NE(st.message().find("/job:worker/task:2"), std::string::npos) << st.ToString();
  // Killed: at once (reset connections). Stopped: once a heartbeat round
  // (every 0.5 s, answered within 1 s) finds it silent.
  EXPECT_LT(took, 5.0) << "the step failed only after " << took << " s";
  std::printf("the step failed %.3f s after the task went away: %s\n", took, st.ToString().c_str());
  if (loss == Loss::kStop) {
    // Found silent by the heartbeat (which cancels the calls to it) or by
    // gRPC's keepalive on the connection, whichever comes first.
    EXPECT_TRUE(st.message().find("heartbeat") != std::string::npos ||
                st.message().find("keepalive") != std::string::npos)
        << st.ToString();
    // It comes back as it was (same incarnation): the next step runs.
    kill(children[1].pid, SIGCONT);
  } else {
    // A new process on the same port: the next step registers there and runs.
    children[1] = Child::Start(2, port2, line);
    ASSERT_EQ(children[1].port, port2);
  }
  std::tie(ok, v) = run_within("out", 4.0f, 30);
  ASSERT_TRUE(ok.ok()) << ok.ToString();
  EXPECT_EQ(v, -16.0f);

  session.reset();
  for (Child& c : children) c.Stop();
  service.Shutdown();
}

TEST(DistributedMultiProcess, KilledTaskIsUnavailableAndARestartedOneRunsAgain) {
  LoseTaskDuringStep(Loss::kKill);
}

TEST(DistributedMultiProcess, SilentTaskIsUnavailableByHeartbeatAndRunsOnceBack) {
  LoseTaskDuringStep(Loss::kStop);
}

// Task 1 is another process: a loop whose body runs there (its partition
// driven by the LoopCond this process sends each iteration) and a
// conditional whose branch runs there (dead when untaken).
TEST(DistributedMultiProcess, ALoopAndAConditionalSplitWithAnotherProcess) {
  Child child = Child::Start(1, 0, "");
  struct Cleanup {
    Child* c;
    ~Cleanup() { c->Kill(); }
  } cleanup{&child};
  ASSERT_GT(child.port, 0);
  DevicePoolOptions po;
  po.job = "worker";
  po.task = 0;
  po.intra_op_threads = 1;
  auto pool = DevicePool::Create(po).value();
  WorkerService service;
  const int port = service.Start("127.0.0.1", 0).value();
  const std::string line = "127.0.0.1:" + std::to_string(port) + ",127.0.0.1:" + std::to_string(child.port);
  child.Send(line);
  ClusterOptions co;
  co.spec.jobs["worker"] = {"127.0.0.1:" + std::to_string(port), "127.0.0.1:" + std::to_string(child.port)};
  co.spec.self = TaskId{"worker", 0};
  co.devices = pool.get();
  co.rpc_timeout_s = 10;
  co.step_timeout_s = 60;
  auto cluster = Cluster::Create(co).value();
  service.Attach(cluster.get());

  Scope root = Scope().WithDevice(kT0);
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({}));
  Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
  auto loop = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[1], ops::Const(c, 1000.0f));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Add(b, v[0], ops::Const(b, 1)),
                                   ops::Mul(b.WithOpName("mul").WithDevice(kT1), v[1], x)};
      },
      {ops::Const(root, 0), ops::Const(root, 1.0f)});
  ASSERT_TRUE(loop.ok()) << loop.status().ToString();
  auto cond = ops::Cond(
      root.WithOpName("c"), p,
      [&](const Scope& s) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Square(s.WithOpName("sq").WithDevice(kT1), x)};
      },
      [&](const Scope& s) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Neg(s.WithOpName("neg"), x)};
      });
  ASSERT_TRUE(cond.ok()) << cond.status().ToString();
  SessionOptions so;
  so.devices = pool.get();
  so.remote = cluster.get();
  auto session = Session::Create(root.graph_def(), so).value();
  for (auto [xv, pv] : {std::pair{2.0f, true}, std::pair{3.0f, false}, std::pair{10.0f, true}}) {
    auto f = std::async(std::launch::async, [&, xv = xv, pv = pv] {
      std::vector<Tensor> out;
      RunStats stats;
      Status st = session->Run({{"x", Tensor::Scalar(xv)}, {"p", Tensor::Scalar(pv)}},
                               {"loop:0", "loop:1", (*cond)[0].name()}, {}, &out, &stats);
      EXPECT_EQ(stats.num_partitions, 2);
      return std::make_pair(st, out);
    });
    if (f.wait_for(std::chrono::seconds(30)) != std::future_status::ready) {
      ADD_FAILURE() << "the step did not end within 30 s";
      child.Kill();
      std::abort();
    }
    auto [st, out] = f.get();
    ASSERT_TRUE(st.ok()) << st.ToString();
    int trips = 0;
    float v = 1.0f;
    while (v < 1000.0f) {
      v *= xv;
      ++trips;
    }
    EXPECT_EQ(out[0].scalar<int32_t>(), trips) << "x=" << xv;
    EXPECT_EQ(out[1].scalar<float>(), v) << "x=" << xv;
    EXPECT_EQ(out[2].scalar<float>(), pv ? xv * xv : -xv) << "x=" << xv;
  }
  session.reset();
  child.Stop();
  service.Shutdown();
}

}  // namespace
}  // namespace flowstate
