// The test-only ACCEL device (accel_device.h) in a pool with a CPU: device
// factories, placement across device types, host↔device copies made by
// _Send/_Recv and the partitioner's copy nodes (counted), host-memory
// arguments, and that a skipped copy fails the tests.
#include <gtest/gtest.h>

#include <thread>

#include "devices/device_context.h"
#include "devices/device_factory.h"
#include "devices/device_pool.h"
#include "graph/control_flow_builders.h"
#include "graph/op_builders.h"
#include "graph/scope.h"
#include "scheduler/placement.h"
#include "scheduler/runtime_kernels.h"
#include "scheduler/session.h"
#include "tests/devices/accel/accel_device.h"

namespace flowstate::testing {
namespace {

constexpr char kAccel0[] = "/job:localhost/replica:0/task:0/device:ACCEL:0";
constexpr char kAccel1[] = "/job:localhost/replica:0/task:0/device:ACCEL:1";
constexpr char kCpu0[] = "/job:localhost/replica:0/task:0/device:CPU:0";

// One CPU and two ACCEL devices.
DevicePool* Pool() {
  static DevicePool* pool = [] {
    RegisterAccelDevice();
    DevicePoolOptions o;
    o.num_cpu_devices = 1;
    o.intra_op_threads = 1;
    o.device_counts["ACCEL"] = 2;
    return DevicePool::Create(o).value().release();
  }();
  return pool;
}

AccelDevice* Accel(int i) {
  return static_cast<AccelDevice*>(Pool()->FindByName(i == 0 ? kAccel0 : kAccel1));
}

class AccelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (int i = 0; i < 2; ++i) {
      Accel(i)->ResetCounters();
      Accel(i)->set_skip_copies(false, false);
    }
  }
  void TearDown() override {
    for (int i = 0; i < 2; ++i) Accel(i)->set_skip_copies(false, false);
  }

  static std::unique_ptr<Session> NewSession(const Scope& root) {
    SessionOptions o;
    o.devices = Pool();
    o.inter_op_threads = 2;
    StatusOr<std::unique_ptr<Session>> s = Session::Create(root.graph_def(), o);
    s.status().CheckOk();
    return std::move(s).value();
  }

  static int64_t DeviceBytesInUse(int i) { return Accel(i)->allocator()->Stats().bytes_in_use; }
};

Tensor Matrix(std::vector<float> v, int64_t rows, int64_t cols) {
  return Tensor::FromVector<float>(v, TensorShape({rows, cols}));
}

// x [2,3] (CPU) · w [3,2] (CPU) on ACCEL:0, + b (CPU) on ACCEL:0, squared on
// ACCEL:0, negated on the CPU: -( (x·w + b)^2 ).
Scope CpuAccelCpuGraph() {
  Scope root;
  Output x = ops::Const(root.WithOpName("x"), Matrix({1, 2, 3, 4, 5, 6}, 2, 3));
  Output w = ops::Const(root.WithOpName("w"), Matrix({1, 0, 0, 1, 1, 1}, 3, 2));
  Output b = ops::Const(root.WithOpName("b"), Matrix({1, 1, 1, 1}, 2, 2));
  Scope accel = root.WithDevice("/device:ACCEL:0");
  Output mm = ops::MatMul(accel.WithOpName("mm"), x, w);
  Output y = ops::Add(accel.WithOpName("y"), mm, b);
  Output z = ops::Mul(accel.WithOpName("z"), y, y);
  ops::Neg(root.WithOpName("out"), z);
  return root;
}
const Tensor& CpuAccelCpuExpected() {
  static const Tensor t = Matrix({-25, -36, -121, -144}, 2, 2);
  return t;
}

TEST_F(AccelTest, PoolListsTheRegisteredTypes) {
  std::vector<std::string> types = RegisteredDeviceTypes();
  ASSERT_GE(types.size(), 2u);
  EXPECT_EQ(types[0], "CPU");
  EXPECT_NE(std::find(types.begin(), types.end(), "ACCEL"), types.end());
  EXPECT_EQ(Pool()->device_types(), (std::vector<std::string>{"CPU", "ACCEL"}));
  std::vector<std::string> names;
  for (Device* d : Pool()->devices()) names.push_back(d->name());
  EXPECT_EQ(names, (std::vector<std::string>{kCpu0, kAccel0, kAccel1}));
  EXPECT_EQ(Pool()->default_device()->name(), kCpu0);
  EXPECT_EQ(Accel(0)->memory_type(), MemoryType::kDevice);
  EXPECT_EQ(Pool()->default_device()->memory_type(), MemoryType::kHost);
  EXPECT_EQ(Pool()->Matching(DeviceName::Parse("ACCEL").value()).size(), 2u);

  // A test-only type has no devices unless asked for; its factory's default.
  DevicePoolOptions plain;
  plain.intra_op_threads = 1;
  EXPECT_EQ(DevicePool::Create(plain).value()->device_types(), std::vector<std::string>{"CPU"});
  // A second registration of the type is refused.
  EXPECT_EQ(RegisterDeviceFactory("ACCEL", nullptr).code(), Code::kAlreadyExists);
}

TEST_F(AccelTest, PlacementPinsToAccelAndFallsBackToCpu) {
  Scope root = CpuAccelCpuGraph();
  scheduler::RegisterRuntimeKernels();
  Graph g = Graph::Create(root.graph_def()).value();
  std::vector<Device*> placed = PlaceGraph(g, *Pool(), Pool()->default_device()).value();
  auto where = [&](const char* node) { return placed[g.FindNode(node)->id()]->name(); };
  EXPECT_EQ(where("mm"), kAccel0);
  EXPECT_EQ(where("y"), kAccel0);
  EXPECT_EQ(where("z"), kAccel0);
  // Unpinned: the CPU (there is no ACCEL kernel for Const or Neg anyway).
  EXPECT_EQ(where("x"), kCpu0);
  EXPECT_EQ(where("out"), kCpu0);
}

TEST_F(AccelTest, PinnedToAccelWithoutAKernelNamesTheNode) {
  Scope root;
  Output x = ops::Const(root.WithOpName("x"), Matrix({1, 2}, 1, 2));
  ops::Neg(root.WithOpName("neg").WithDevice("/device:ACCEL:0"), x);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  Status st = s->Run({}, {"neg"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kInvalidArgument) << st.ToString();
  EXPECT_EQ(st.node(), "neg");
  EXPECT_NE(st.message().find("no kernel for op Neg"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("ACCEL"), std::string::npos) << st.ToString();
  EXPECT_NE(st.message().find("has kernels for: CPU"), std::string::npos) << st.ToString();
}

TEST_F(AccelTest, CpuToAccelToCpuComputesTheValuesWithOneCopyPerCrossing) {
  auto s = NewSession(CpuAccelCpuGraph());
  for (int step = 1; step <= 3; ++step) {
    std::vector<Tensor> out;
    RunStats stats;
    Status st = s->Run({}, {"out"}, {}, &out, &stats);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(TensorsEqual(out[0], CpuAccelCpuExpected()));
    EXPECT_EQ(stats.num_partitions, 2);
    // x, w and b go in; z comes out.
    EXPECT_EQ(Accel(0)->host_to_device_copies(), 3 * step);
    EXPECT_EQ(Accel(0)->device_to_host_copies(), 1 * step);
    EXPECT_EQ(DeviceBytesInUse(0), 0);
  }
  EXPECT_GT(Accel(0)->allocator()->Stats().peak_bytes_in_use, 0);
  EXPECT_EQ(Accel(1)->host_to_device_copies(), 0);
}

TEST_F(AccelTest, FeedAndFetchOnAccelCopyOnceEachWay) {
  Scope root;
  Scope accel = root.WithDevice("/device:ACCEL:0");
  Output x = ops::Placeholder(accel.WithOpName("x"), DataType::kFloat32, PartialShape({-1}));
  ops::Mul(accel.WithOpName("sq"), x, x);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  RunStats stats;
  Status st = s->Run({{"x", Tensor::FromVector<float>({1, -2, 3})}}, {"sq"}, {}, &out, &stats);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({1, 4, 9})));
  // One partition (everything on ACCEL:0): the copies are nodes, not a
  // Send/Recv pair.
  EXPECT_EQ(stats.num_partitions, 1);
  EXPECT_EQ(Accel(0)->host_to_device_copies(), 1);
  EXPECT_EQ(Accel(0)->device_to_host_copies(), 1);
  EXPECT_FALSE(Accel(0)->Holds(out[0]));
  EXPECT_EQ(DeviceBytesInUse(0), 0);
}

TEST_F(AccelTest, HostMemoryArgumentsStayOnTheHost) {
  Scope root;
  Output x = ops::Const(root.WithOpName("x"), Matrix({1, 2, 3, 4, 5, 6}, 2, 3));
  Output shape = ops::Const(root.WithOpName("shape"), std::vector<int32_t>{3, 2});
  Scope accel = root.WithDevice("/device:ACCEL:0");
  Output a = ops::Identity(accel.WithOpName("a"), x);
  // Reshape's shape comes from the CPU, delivered in host memory.
  ops::Reshape(accel.WithOpName("r"), a, shape);
  // Shape's output is in host memory; Reshape reads it there: no copy.
  Output s = ops::Shape(accel.WithOpName("s"), a);
  ops::Reshape(accel.WithOpName("r2"), a, s);
  auto session = NewSession(root);
  const int64_t host_allocs = Accel(0)->host_allocator()->Stats().num_allocs;
  std::vector<Tensor> out;
  Status st = session->Run({}, {"r", "s", "r2"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(TensorsEqual(out[0], Matrix({1, 2, 3, 4, 5, 6}, 3, 2)));
  EXPECT_TRUE(TensorsEqual(out[1], Tensor::FromVector<int32_t>({2, 3})));
  EXPECT_TRUE(TensorsEqual(out[2], Matrix({1, 2, 3, 4, 5, 6}, 2, 3)));
  // Only x goes in; r and r2 come out (s is already on the host).
  EXPECT_EQ(Accel(0)->host_to_device_copies(), 1);
  EXPECT_EQ(Accel(0)->device_to_host_copies(), 2);
  // Both Reshapes found their shape in host memory.
  EXPECT_EQ(Accel(0)->host_memory_inputs(), 2);
  // Shape allocated its output with the host allocator (and the D2H copies
  // theirs): three host allocations, none in device memory but x's copy.
  EXPECT_EQ(Accel(0)->host_allocator()->Stats().num_allocs - host_allocs, 3);
  EXPECT_EQ(DeviceBytesInUse(0), 0);
}

TEST_F(AccelTest, PartitionerMarksHostMemoryEnds) {
  Scope root;
  Output x = ops::Const(root.WithOpName("x"), Matrix({1, 2, 3, 4}, 2, 2));
  Output shape = ops::Const(root.WithOpName("shape"), std::vector<int32_t>{4});
  ops::Reshape(root.WithOpName("r").WithDevice("/device:ACCEL:0"), x, shape);
  scheduler::RegisterRuntimeKernels();
  Graph g = Graph::Create(root.graph_def()).value();
  std::vector<Device*> placed = PlaceGraph(g, *Pool(), Pool()->default_device()).value();
  std::vector<GraphPartition> parts = PartitionGraph(g, placed).value();
  ASSERT_EQ(parts.size(), 2u);
  std::map<std::string, bool> recv_host;  // by the tensor sent
  for (const GraphPartition& p : parts) {
    for (const NodeDef& n : p.graph.nodes) {
      if (n.op != "_Recv") continue;
      EXPECT_EQ(p.device->name(), kAccel0);
      auto it = n.attrs.find("host_memory");
      recv_host[n.name] = it != n.attrs.end() && it->second.b();
    }
  }
  ASSERT_EQ(recv_host.size(), 2u);
  EXPECT_FALSE(recv_host.at("_recv/x/1"));
  EXPECT_TRUE(recv_host.at("_recv/shape/1"));
}

TEST_F(AccelTest, ASkippedCopyFailsTheStep) {
  auto s = NewSession(CpuAccelCpuGraph());
  std::vector<Tensor> out;
  // Host → device skipped: the ACCEL kernel refuses host memory.
  Accel(0)->set_skip_copies(true, false);
  Status st = s->Run({}, {"out"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kFailedPrecondition) << st.ToString();
  EXPECT_NE(st.message().find("copy is missing"), std::string::npos) << st.ToString();
  // Device → host skipped: the CPU kernel reads device memory and computes
  // garbage.
  Accel(0)->set_skip_copies(false, true);
  st = s->Run({}, {"out"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_FALSE(TensorsEqual(out[0], CpuAccelCpuExpected()));
  out.clear();
  // And with both copies made, the right values.
  Accel(0)->set_skip_copies(false, false);
  ASSERT_TRUE(s->Run({}, {"out"}, {}, &out).ok());
  EXPECT_TRUE(TensorsEqual(out[0], CpuAccelCpuExpected()));
  EXPECT_EQ(DeviceBytesInUse(0), 0);
}

TEST_F(AccelTest, AcceleratorToAcceleratorGoesThroughTheHost) {
  Scope root;
  Output x = ops::Const(root.WithOpName("x"), Tensor::FromVector<float>({1, 2, 3}));
  Output a = ops::Identity(root.WithOpName("a").WithDevice("/device:ACCEL:0"), x);
  ops::Add(root.WithOpName("b").WithDevice("/device:ACCEL:1"), a, a);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  Status st = s->Run({}, {"b"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({2, 4, 6})));
  EXPECT_EQ(Accel(0)->host_to_device_copies(), 1);
  EXPECT_EQ(Accel(0)->device_to_host_copies(), 1);
  EXPECT_EQ(Accel(1)->host_to_device_copies(), 1);
  EXPECT_EQ(Accel(1)->device_to_host_copies(), 1);
  EXPECT_EQ(DeviceBytesInUse(0), 0);
  EXPECT_EQ(DeviceBytesInUse(1), 0);
}

TEST_F(AccelTest, AControlEdgeOutOfAccelCopiesNothing) {
  Scope root;
  Output x = ops::Const(root.WithOpName("x"), Tensor::FromVector<float>({1, 2}));
  ops::Add(root.WithOpName("a").WithDevice("/device:ACCEL:0"), x, x);
  ops::Neg(root.WithOpName("n").WithControlDependencies({"a"}), x);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  Status st = s->Run({}, {"n"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({-1, -2})));
  EXPECT_EQ(Accel(0)->host_to_device_copies(), 1);  // x, for a
  EXPECT_EQ(Accel(0)->device_to_host_copies(), 0);
  EXPECT_EQ(DeviceBytesInUse(0), 0);
}

TEST_F(AccelTest, AVariableOnTheCpuIsUpdatedFromAccel) {
  // v lives on the CPU (no ACCEL kernel for Variable); each step squares it
  // on ACCEL:0 and adds the square back: one copy in, one out.
  Scope root;
  Output v = ops::Variable(root.WithOpName("v"), PartialShape({2}), DataType::kFloat32);
  Output v0 = ops::Const(root.WithOpName("v0"), std::vector<float>{1, 2});
  ops::Assign(root.WithOpName("init"), v, v0);
  Output sq = ops::Mul(root.WithOpName("sq").WithDevice("/device:ACCEL:0"), v, v);
  ops::AssignAdd(root.WithOpName("update"), v, sq);
  auto s = NewSession(root);
  std::vector<Tensor> out;
  ASSERT_TRUE(s->Run({}, {}, {"init"}, &out).ok());
  Status st = s->Run({}, {"update"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({2, 6})));
  st = s->Run({}, {"update"}, {}, &out);
  ASSERT_TRUE(st.ok()) << st.ToString();
  EXPECT_TRUE(TensorsEqual(out[0], Tensor::FromVector<float>({6, 42})));
  EXPECT_EQ(Accel(0)->host_to_device_copies(), 2);
  EXPECT_EQ(Accel(0)->device_to_host_copies(), 2);
  EXPECT_EQ(DeviceBytesInUse(0), 0);
}

TEST_F(AccelTest, ConcurrentStepsKeepTheirCopiesApart) {
  auto s = NewSession(CpuAccelCpuGraph());
  constexpr int kThreads = 4, kSteps = 25;
  std::atomic<int> wrong{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < kSteps; ++i) {
        std::vector<Tensor> out;
        Status st = s->Run({}, {"out"}, {}, &out);
        if (!st.ok() || !TensorsEqual(out[0], CpuAccelCpuExpected())) wrong.fetch_add(1);
      }
    });
  }
  for (std::thread& t : threads) t.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(Accel(0)->host_to_device_copies(), 3 * kThreads * kSteps);
  EXPECT_EQ(Accel(0)->device_to_host_copies(), kThreads * kSteps);
  EXPECT_EQ(DeviceBytesInUse(0), 0);
}

TEST_F(AccelTest, DeviceContextsCopyBetweenMemories) {
  Tensor host = Tensor::FromVector<float>({1.5f, -2.0f, 3.25f});
  // A host-memory device's context shares the buffer.
  Device* cpu = Pool()->default_device();
  Tensor same;
  cpu->device_context()->CopyHostToDevice(host, [&](const Status& s, Tensor t) {
    ASSERT_TRUE(s.ok());
    same = std::move(t);
  });
  EXPECT_EQ(same.raw_data(), host.raw_data());

  Tensor back;
  CopyTensorBetweenDevices(host, cpu, Accel(0), [&](const Status& s, Tensor on0) {
    ASSERT_TRUE(s.ok()) << s.ToString();
    EXPECT_TRUE(Accel(0)->Holds(on0));
    EXPECT_EQ(LoadFloats(on0), (std::vector<float>{1.5f, -2.0f, 3.25f}));
    CopyTensorBetweenDevices(on0, Accel(0), Accel(1), [&](const Status& s1, Tensor on1) {
      ASSERT_TRUE(s1.ok()) << s1.ToString();
      EXPECT_TRUE(Accel(1)->Holds(on1));
      EXPECT_FALSE(Accel(0)->Holds(on1));
      CopyTensorBetweenDevices(on1, Accel(1), cpu, [&](const Status& s2, Tensor h) {
        ASSERT_TRUE(s2.ok()) << s2.ToString();
        back = std::move(h);
      });
    });
  });
  EXPECT_TRUE(TensorsEqual(back, host));
  EXPECT_FALSE(Accel(0)->Holds(back));
  EXPECT_EQ(Accel(0)->host_to_device_copies(), 1);
  EXPECT_EQ(Accel(0)->device_to_host_copies(), 1);
  EXPECT_EQ(Accel(1)->host_to_device_copies(), 1);
  EXPECT_EQ(Accel(1)->device_to_host_copies(), 1);
  EXPECT_EQ(DeviceBytesInUse(0), 0);
  EXPECT_EQ(DeviceBytesInUse(1), 0);
}

TEST_F(AccelTest, KernelRegistryReportsMemoryTypes) {
  Pool();
  Scope root;
  Output x = ops::Const(root.WithOpName("x"), Matrix({1, 2, 3, 4}, 2, 2));
  ops::Reshape(root.WithOpName("r"), x, std::vector<int32_t>{4});
  Graph g = Graph::Create(root.graph_def()).value();
  const Node& r = *g.FindNode("r");
  KernelRegistry* k = KernelRegistry::Global();
  MemoryTypes on_accel = k->MemoryTypesFor(r.def(), r.op_def(), *Accel(0), 2, 1);
  EXPECT_EQ(on_accel.inputs, (std::vector<MemoryType>{MemoryType::kDevice, MemoryType::kHost}));
  EXPECT_EQ(on_accel.outputs, std::vector<MemoryType>{MemoryType::kDevice});
  MemoryTypes on_cpu = k->MemoryTypesFor(r.def(), r.op_def(), *Pool()->default_device(), 2, 1);
  EXPECT_EQ(on_cpu.inputs, (std::vector<MemoryType>{MemoryType::kHost, MemoryType::kHost}));
  EXPECT_EQ(on_cpu.outputs, std::vector<MemoryType>{MemoryType::kHost});

  KernelDef misnamed("Reshape");
  misnamed.Device("ACCEL").TypeConstraint("T", DataType::kInt64).HostMemory("shapes");
  Status bad = k->Register(misnamed, [](OpKernelConstruction*) { return nullptr; });
  EXPECT_EQ(bad.code(), Code::kInvalidArgument);
  EXPECT_NE(bad.message().find("shapes"), std::string::npos) << bad.ToString();
}

// A conditional whose true branch runs on ACCEL:0: the taken branch's
// value is copied in and out; on the untaken side only the dead mark
// crosses, and nothing is copied.
TEST_F(AccelTest, ACondBranchOnAccelCopiesOnlyWhenTaken) {
  Scope root = Scope().WithDevice(kCpu0);
  Output x = ops::Placeholder(root.WithOpName("x"), DataType::kFloat32, PartialShape({2, 2}));
  Output p = ops::Placeholder(root.WithOpName("p"), DataType::kBool, PartialShape({}));
  auto r = ops::Cond(
      root.WithOpName("c"), p,
      [&](const Scope& b) -> StatusOr<std::vector<Output>> {
        Scope accel = b.WithDevice("/device:ACCEL:0");
        return std::vector<Output>{ops::Mul(accel.WithOpName("square"), x, x)};
      },
      [&](const Scope& b) -> StatusOr<std::vector<Output>> {
        return std::vector<Output>{ops::Neg(b.WithOpName("neg"), x)};
      });
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto s = NewSession(root);
  const Tensor xv = Matrix({1, 2, 3, 4}, 2, 2);
  int64_t in = 0, out_copies = 0;
  for (bool taken : {true, false, true, false}) {
    std::vector<Tensor> out;
    Status st = s->Run({{"x", xv}, {"p", Tensor::Scalar(taken)}}, {(*r)[0].name()}, {}, &out);
    ASSERT_TRUE(st.ok()) << st.ToString();
    EXPECT_TRUE(TensorsEqual(out[0], taken ? Matrix({1, 4, 9, 16}, 2, 2) : Matrix({-1, -2, -3, -4}, 2, 2)));
    if (taken) {
      in += 1;  // x in (read twice, received once)
      out_copies += 1;
    }
    EXPECT_EQ(Accel(0)->host_to_device_copies(), in) << "taken=" << taken;
    EXPECT_EQ(Accel(0)->device_to_host_copies(), out_copies) << "taken=" << taken;
    EXPECT_EQ(DeviceBytesInUse(0), 0);
  }
}

// A loop split onto a device with its own memory is refused, naming the
// node that lies there (split loops run on host-memory devices only).
TEST_F(AccelTest, ALoopSplitOntoAccelIsRefusedNamingTheNode) {
  Scope root = Scope().WithDevice(kCpu0);
  auto r = ops::WhileLoop(
      root.WithOpName("loop"),
      [&](const Scope& c, const std::vector<Output>& v) -> StatusOr<Output> {
        return ops::Less(c, v[0], ops::Const(c, 3));
      },
      [&](const Scope& b, const std::vector<Output>& v) -> StatusOr<std::vector<Output>> {
        Scope accel = b.WithDevice("/device:ACCEL:0");
        return std::vector<Output>{ops::Add(b, v[0], ops::Const(b, 1)),
                                   ops::Mul(accel.WithOpName("mul"), v[1], v[1])};
      },
      {ops::Const(root, 0), ops::Const(root, Matrix({1, 2, 3, 4}, 2, 2))});
  ASSERT_TRUE(r.ok()) << r.status().ToString();
  auto s = NewSession(root);
  std::vector<Tensor> out;
  Status st = s->Run({}, {"loop:1"}, {}, &out);
  EXPECT_EQ(st.code(), Code::kUnimplemented) << st.ToString();
  EXPECT_EQ(st.node(), "loop/body/mul") << st.ToString();
  EXPECT_NE(st.message().find("own memory"), std::string::npos) << st.ToString();
}

}  // namespace
}  // namespace flowstate::testing
