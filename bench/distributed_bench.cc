// The distributed runtime on loopback (targets in BENCHMARKS.md):
//
//  - null step: a step that runs one trivial node on each of 1, 2 and 4
//    tasks (the master is task 0; the others are reached over gRPC), as the
//    paper's Figure 6 measures step overhead;
//  - RecvTensor: one tensor of 1 KiB, 1 MiB, 64 MiB and 512 MiB pulled from
//    another task's rendezvous (what a _Recv of a cross-task edge does),
//    against a plain TCP socket pair on loopback moving the same bytes into
//    a freshly allocated buffer, in the same run;
//  - the receiver's peak resident memory growth while a 512 MiB tensor
//    crosses the first time (VmHWM after resetting it through
//    /proc/self/clear_refs).
//
// The receiving tensor comes from the receiving device's caching allocator
// (devices.cpu_cache_bytes 1 GiB here), and Cluster tunes malloc
// (ClusterOptions::tune_malloc), as a cluster process runs.
//
// The tasks are in this process, each behind its own gRPC server on
// 127.0.0.1 (so the bytes go through the kernel's TCP stack as between
// processes; the CPUs are shared). Flags: --min-time=S --reps=N, --quick
// (skips 512 MiB).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <condition_variable>
#include <cstring>
#include <fstream>
#include <future>
#include <mutex>
#include <random>
#include <thread>

#include "bench/bench_util.h"
#include "devices/device_pool.h"
#include "distributed/cluster.h"
#include "distributed/worker_service.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/rendezvous.h"
#include "scheduler/session.h"

namespace flowstate {
namespace {

struct Task {
  std::unique_ptr<DevicePool> pool;
  std::unique_ptr<WorkerService> service;
  std::unique_ptr<Cluster> cluster;
};

std::vector<Task> StartTasks(int n) {
  std::vector<Task> tasks(n);
  ClusterSpec spec;
  for (int i = 0; i < n; ++i) {
    DevicePoolOptions po;
    po.job = "worker";
    po.task = i;
    po.intra_op_threads = 1;
    // Freed blocks of up to 1 GiB are kept for reuse, so a received 512 MiB
    // tensor lands in memory already resident after the first step.
    po.cpu_cache_bytes = int64_t(1) << 30;
    tasks[i].pool = DevicePool::Create(po).value();
    WorkerServiceOptions wo;
    wo.inter_op_threads = 1;
    tasks[i].service = std::make_unique<WorkerService>(nullptr, wo);
    int port = tasks[i].service->Start("127.0.0.1", 0).value();
    spec.jobs["worker"].push_back("127.0.0.1:" + std::to_string(port));
  }
  for (int i = 0; i < n; ++i) {
    ClusterOptions o;
    o.spec = spec;
    o.spec.self = TaskId{"worker", i};
    o.devices = tasks[i].pool.get();
    o.incarnation = uint64_t(i + 1) * 0x9e3779b97f4a7c15ull;
    o.heartbeat_interval_s = 1.0;
    tasks[i].cluster = Cluster::Create(o).value();
    tasks[i].service->Attach(tasks[i].cluster.get());
  }
  return tasks;
}

void StopTasks(std::vector<Task>& tasks) {
  for (auto& t : tasks) t.service->Shutdown();
  for (auto& t : tasks) {
    t.service.reset();
    t.cluster.reset();
  }
}

std::string Cpu(int task) {
  return "/job:worker/replica:0/task:" + std::to_string(task) + "/device:CPU:0";
}

void NullStep(int n, const bench::TimingOptions& timing) {
  std::vector<Task> tasks = StartTasks(n);
  Scope root;
  std::vector<std::string> targets;
  for (int i = 0; i < n; ++i) {
    std::string name = "c";
    name += std::to_string(i);  // not "c" + ...: g++ 12 warns falsely (-Wrestrict) at -O3
    targets.push_back(std::move(name));
    ops::Const(root.WithOpName(targets.back()).WithDevice(Cpu(i)), 1.0f);
  }
  SessionOptions so;
  so.devices = tasks[0].pool.get();
  so.remote = tasks[0].cluster.get();
  so.inter_op_threads = 1;
  auto s = Session::Create(root.graph_def(), so).value();
  std::vector<Tensor> out;
  double t = bench::BestSecondsPerCall([&] { s->Run({}, {}, targets, &out).CheckOk(); }, timing);
  bench::PrintFigure("distributed/null_step/tasks" + std::to_string(n), t * 1e3, "ms");
  s.reset();
  StopTasks(tasks);
}

// One transfer of `bytes` through a TCP socket pair on loopback, received
// into a buffer already resident (the receiving tensor of RecvTensor comes
// from the device's caching allocator, warm after the first step): the
// reference for RecvTensor.
class TcpPair {
 public:
  TcpPair() {
    int l = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    bind(l, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    socklen_t len = sizeof(a);
    getsockname(l, reinterpret_cast<sockaddr*>(&a), &len);
    listen(l, 1);
    send_ = socket(AF_INET, SOCK_STREAM, 0);
    connect(send_, reinterpret_cast<sockaddr*>(&a), sizeof(a));
    recv_ = accept(l, nullptr, nullptr);
    close(l);
  }
  ~TcpPair() {
    close(send_);
    close(recv_);
  }
  void Move(const char* data, size_t bytes) {
    std::thread writer([&] {
      size_t done = 0;
      while (done < bytes) {
        ssize_t n = write(send_, data + done, bytes - done);
        if (n <= 0) std::abort();
        done += size_t(n);
      }
    });
    if (buf_size_ < bytes) {
      buf_.reset(new char[bytes]);
      std::memset(buf_.get(), 0, bytes);  // resident before the clock runs
      buf_size_ = bytes;
    }
    size_t done = 0;
    while (done < bytes) {
      ssize_t n = read(recv_, buf_.get() + done, bytes - done);
      if (n <= 0) std::abort();
      done += size_t(n);
    }
    writer.join();
  }

 private:
  int send_ = -1, recv_ = -1;
  std::unique_ptr<char[]> buf_;  // reused: the reference pays no page faults
  size_t buf_size_ = 0;
};

int64_t StatusKib(const char* field) {
  std::ifstream f("/proc/self/status");
  std::string line;
  const size_t n = std::strlen(field);
  while (std::getline(f, line)) {
    if (line.compare(0, n, field) == 0) return std::atoll(line.c_str() + n + 1);
  }
  return -1;
}

void RecvTensorThroughput(const std::vector<size_t>& sizes, const bench::TimingOptions& timing) {
  std::vector<Task> tasks = StartTasks(2);
  RendezvousMgr* sender = tasks[1].cluster->rendezvous_mgr();
  RendezvousMgr* receiver = tasks[0].cluster->rendezvous_mgr();  // allocates on task 0's CPU:0
  const std::string key = CreateRendezvousKey(Cpu(1), tasks[1].cluster->local_incarnation(), Cpu(0), "t");
  int64_t step = 1;
  auto pull = [&](const Tensor& t) {
    ++step;
    sender->Find(step)->Send(key, t).CheckOk();
    std::promise<Status> done;
    receiver->Find(step)->RecvAsync(key, [&](const Status& s, const Tensor& got) {
      done.set_value(s.ok() && got.TotalBytes() == t.TotalBytes() ? s : Internal("short"));
    });
    done.get_future().get().CheckOk();
    sender->Cleanup(step);
    receiver->Cleanup(step);
  };
  TcpPair tcp;
  for (size_t bytes : sizes) {
    Tensor t = Tensor::Allocate(HostAllocator(), DataType::kUInt8, TensorShape({int64_t(bytes)})).value();
    std::memset(t.raw_data(), 7, bytes);
    const std::string label = bytes >= (size_t(1) << 20) ? std::to_string(bytes >> 20) + "MiB"
                                                          : std::to_string(bytes >> 10) + "KiB";
    if (bytes == (size_t(512) << 20)) {
      // Peak resident growth of the process while the first one crosses
      // (cold: nothing cached yet; the sender's tensor exists already, so
      // the growth is the receiver's tensor and gRPC's buffers).
      std::ofstream("/proc/self/clear_refs") << "5";
      const int64_t before = StatusKib("VmRSS:");
      pull(t);
      const int64_t peak = StatusKib("VmHWM:");
      const double growth = double(peak - before) * 1024.0 / double(bytes);
      bench::PrintFigure("distributed/recv_tensor/peak_rss_growth/" + label, growth, "x tensor");
    }
    bench::TimingOptions o = timing;
    if (bytes >= (size_t(64) << 20)) o.min_seconds = std::min(o.min_seconds, 0.2);
    const double g = bench::BestSecondsPerCall([&] { pull(t); }, o);
    const double r = bench::BestSecondsPerCall(
        [&] { tcp.Move(static_cast<const char*>(t.raw_data()), bytes); }, o);
    bench::PrintFigure("distributed/recv_tensor/tcp/" + label, bytes / r / 1e9, "GB/s");
    bench::PrintFigure("distributed/recv_tensor/grpc/" + label, bytes / g / 1e9, "GB/s",
                       "distributed/recv_tensor/tcp/" + label, r / g);
  }
  StopTasks(tasks);
}

}  // namespace
}  // namespace flowstate

int main(int argc, char** argv) {
  using namespace flowstate;
  bench::TimingOptions timing = bench::ParseTimingOptions(argc, argv);
  bool quick = false;
  for (int i = 1; i < argc; ++i) quick = quick || std::string(argv[i]) == "--quick";
  for (int n : {1, 2, 4}) NullStep(n, timing);
  std::vector<size_t> sizes = {size_t(1) << 10, size_t(1) << 20, size_t(64) << 20};
  if (!quick) sizes.push_back(size_t(512) << 20);
  RecvTensorThroughput(sizes, timing);
  return 0;
}
