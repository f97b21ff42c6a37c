// The input pipeline in the graph: the Fashion-MNIST
// MLP of examples/jobs/fashion_mlp.json (Adam, batch 128) trained through a
// Session with 2 inter-op threads, its batches made two ways:
//
//   feed/examples_per_sec    each step's batch is made on the trainer's
//                            thread (a shuffled gather of IDX rows, the work
//                            of the jobs' input pipeline) and fed to the step
//   queue/examples_per_sec   a reader thread makes the batches and runs an
//                            enqueue step (QueueEnqueueMany into a FIFOQueue
//                            of 1024 examples); the training step dequeues
//                            its 128 (QueueDequeueMany) in the graph
//
// Best of the repetitions (bench_util.h). Run from the build directory or
// anywhere: the job file and the dataset paths are absolute.
#include <algorithm>
#include <atomic>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <numeric>
#include <random>
#include <sstream>
#include <thread>

#include "api/job_spec.h"
#include "bench/bench_util.h"
#include "devices/device_pool.h"
#include "graph/training_graph.h"
#include "scheduler/session.h"
#include "state/idx_reader.h"

using namespace flowstate;

namespace {

constexpr int kBatch = 128;
constexpr const char* kData = "/usr/share/datasets/fashion-mnist/";

// Batches of (images uint8[128, 28, 28], labels uint8[128]) in a shuffled
// order, one epoch after another.
class BatchMaker {
 public:
  BatchMaker(Tensor images, Tensor labels) : images_(std::move(images)), labels_(std::move(labels)) {
    order_.resize(size_t(images_.dim(0)));
    std::iota(order_.begin(), order_.end(), 0);
  }
  std::pair<Tensor, Tensor> Next() {
    Tensor x(DataType::kUInt8, TensorShape({kBatch, 28, 28}));
    Tensor y(DataType::kUInt8, TensorShape({kBatch}));
    for (int i = 0; i < kBatch; ++i) {
      if (pos_ == order_.size()) pos_ = 0;
      if (pos_ == 0) std::shuffle(order_.begin(), order_.end(), rng_);
      const int64_t row = order_[pos_++];
      std::memcpy(x.data<uint8_t>() + i * 784, images_.data<uint8_t>() + row * 784, 784);
      y.data<uint8_t>()[i] = labels_.data<uint8_t>()[row];
    }
    return {std::move(x), std::move(y)};
  }

 private:
  Tensor images_, labels_;
  std::vector<int64_t> order_;
  size_t pos_ = 0;
  std::mt19937_64 rng_{7};
};

NodeDef Node(const std::string& name, const std::string& op, std::vector<std::string> inputs,
             AttrMap attrs = {}) {
  NodeDef n;
  n.name = name;
  n.op = op;
  n.inputs = std::move(inputs);
  n.attrs = std::move(attrs);
  return n;
}

// The job's forward graph with x and y read from a queue instead of fed.
GraphDef WithQueue(const GraphDef& forward) {
  GraphDef g;
  const std::vector<DataType> types = {DataType::kUInt8, DataType::kUInt8};
  g.nodes.push_back(Node("q", "FIFOQueue", {},
                         {{"component_types", AttrValue(types)},
                          {"shapes", AttrValue(std::vector<PartialShape>{PartialShape({28, 28}),
                                                                         PartialShape({})})},
                          {"capacity", AttrValue(int64_t(1024))}}));
  g.nodes.push_back(Node("in_x", "Placeholder", {},
                         {{"dtype", AttrValue(DataType::kUInt8)},
                          {"shape", AttrValue(PartialShape({-1, 28, 28}))}}));
  g.nodes.push_back(Node("in_y", "Placeholder", {},
                         {{"dtype", AttrValue(DataType::kUInt8)}, {"shape", AttrValue(PartialShape({-1}))}}));
  g.nodes.push_back(Node("enqueue", "QueueEnqueueMany", {"q", "in_x", "in_y"}));
  g.nodes.push_back(Node("close", "QueueClose", {"q"}, {{"cancel_pending_enqueues", AttrValue(true)}}));
  g.nodes.push_back(Node("n", "Const", {},
                         {{"dtype", AttrValue(DataType::kInt32)},
                          {"value", AttrValue(Tensor::Scalar<int32_t>(kBatch))}}));
  g.nodes.push_back(Node("batch", "QueueDequeueMany", {"q", "n"}, {{"component_types", AttrValue(types)}}));
  g.nodes.push_back(Node("x", "Identity", {"batch:0"}));
  g.nodes.push_back(Node("y", "Identity", {"batch:1"}));
  for (const NodeDef& n : forward.nodes) {
    if (n.name != "x" && n.name != "y") g.nodes.push_back(n);
  }
  return g;
}

std::unique_ptr<Session> TrainingSession(DevicePool* pool, const TrainingGraph& tg) {
  SessionOptions o;
  o.devices = pool;
  o.inter_op_threads = 2;
  auto s = Session::Create(tg.graph, o);
  s.status().CheckOk();
  std::vector<Tensor> out;
  (*s)->Run({}, {}, {tg.init_op, tg.optimizer_init}, &out).CheckOk();
  return std::move(s).value();
}

}  // namespace

int main(int argc, char** argv) {
  const bench::TimingOptions timing = bench::ParseTimingOptions(argc, argv);
  std::ifstream f(std::string(FLOWSTATE_SOURCE_DIR) + "/examples/jobs/fashion_mlp.json");
  std::stringstream text;
  text << f.rdbuf();
  StatusOr<JobSpec> job = ParseJobSpec(text.str());
  job.status().CheckOk();
  StatusOr<Tensor> images = ReadIdxFile(std::string(kData) + "train-images-idx3-ubyte.gz");
  StatusOr<Tensor> labels = ReadIdxFile(std::string(kData) + "train-labels-idx1-ubyte.gz");
  if (!images.ok() || !labels.ok()) {
    std::fprintf(stderr, "no Fashion-MNIST under %s (dataset-fashion-mnist)\n", kData);
    return 0;
  }
  DevicePoolOptions po;
  auto pool = DevicePool::Create(po).value();

  TrainingGraphSpec spec;
  spec.graph = job->graph;
  spec.loss = job->loss;
  spec.optimizer = job->optimizer;
  spec.seed = 1;
  StatusOr<TrainingGraph> fed = BuildTrainingGraph(spec);
  fed.status().CheckOk();
  spec.graph = WithQueue(job->graph);
  StatusOr<TrainingGraph> queued = BuildTrainingGraph(spec);
  queued.status().CheckOk();

  double feed_seconds = 0;
  {
    auto s = TrainingSession(pool.get(), *fed);
    BatchMaker maker(*images, *labels);
    std::vector<Tensor> out;
    feed_seconds = bench::BestSecondsPerCall([&] {
      auto [x, y] = maker.Next();
      s->Run({{"x", x}, {"y", y}}, {}, {fed->train_op}, &out).CheckOk();
    }, timing);
  }
  double queue_seconds = 0;
  {
    auto s = TrainingSession(pool.get(), *queued);
    std::atomic<bool> stop{false};
    std::thread reader([&] {
      BatchMaker maker(*images, *labels);
      std::vector<Tensor> out;
      while (!stop.load()) {
        auto [x, y] = maker.Next();
        if (!s->Run({{"in_x", x}, {"in_y", y}}, {}, {"enqueue"}, &out).ok()) break;  // closed
      }
    });
    std::vector<Tensor> out;
    queue_seconds = bench::BestSecondsPerCall(
        [&] { s->Run({}, {}, {queued->train_op}, &out).CheckOk(); }, timing);
    stop = true;
    s->Run({}, {}, {"close"}, &out).CheckOk();
    reader.join();
  }
  const double feed = kBatch / feed_seconds, queue = kBatch / queue_seconds;
  bench::PrintFigure("fashion_mlp/feed/examples_per_sec", feed, "examples/s");
  bench::PrintFigure("fashion_mlp/queue/examples_per_sec", queue, "examples/s",
                     "fashion_mlp/feed/examples_per_sec", queue / feed);
  return 0;
}
