// Step time of the Fashion-MNIST MLP (examples/jobs/fashion_mlp.json: 784-512-
// 512-10, Adam, batch 128) while a checkpoint of it is being written, against
// its step time without one, in the same run (target: <= 10% more).
//
// It does what the job manager does: the training thread takes a snapshot
// between two steps (TrainingJob::Snapshot: no tensor data is copied) and a
// writer thread writes it (Store::WriteCheckpoint: at 8 MB an ingested table file)
// while training goes on. Rounds alternate a baseline block of steps and a
// block that starts a write and steps until it has finished, so machine
// noise hits both sides alike; figures are medians over all rounds. The
// snapshot's cost is counted in the first step of each write block.
//
//   checkpoint_overlap_bench [--rounds=N] [--data-root=DIR] [--writer-normal-priority]
//                            [--ingest-min-bytes=N]  (StoreOptions; default the store's)
// The writer thread runs at the lowered priority the job manager gives its
// writer (LowerThisThreadsPriority) unless --writer-normal-priority.
// Skips (exit 0, a note on stderr) when the dataset is not installed.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <vector>

#include "bench/bench_util.h"
#include "checkpoints/store.h"
#include "api/job_spec.h"
#include "jobs/job_manager.h"
#include "jobs/training_job.h"

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

int Main(int argc, char** argv) {
  int rounds = 12;
  bool lower_priority = true;  // as the job manager's writer thread
  checkpoints::StoreOptions store_options;
  std::string data_root = "/usr/share/datasets";
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--rounds=", 9) == 0) rounds = std::max(1, std::atoi(argv[i] + 9));
    if (std::strncmp(argv[i], "--data-root=", 12) == 0) data_root = argv[i] + 12;
    if (std::strcmp(argv[i], "--writer-normal-priority") == 0) lower_priority = false;
    if (std::strncmp(argv[i], "--ingest-min-bytes=", 19) == 0) store_options.ingest_min_bytes = std::atoll(argv[i] + 19);
  }
  if (!std::filesystem::exists(data_root + "/fashion-mnist/train-images-idx3-ubyte.gz")) {
    std::fprintf(stderr, "checkpoint_overlap_bench: no Fashion-MNIST under %s; skipped\n", data_root.c_str());
    return 0;
  }
  std::ifstream f(std::string(FLOWSTATE_SOURCE_DIR) + "/examples/jobs/fashion_mlp.json");
  std::stringstream text;
  text << f.rdbuf();
  StatusOr<JobSpec> spec = ParseJobSpec(text.str());
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", spec.status().ToString().c_str());
    return 1;
  }
  spec->input.epochs = 1000;  // never runs out
  spec->eval.reset();
  DevicePoolOptions dpo;  // intra-op threads: the hardware's, as the server's default
  auto devices = DevicePool::Create(dpo).value();
  TrainingJobOptions o;
  o.data_root = data_root;
  o.devices = devices.get();
  auto job = TrainingJob::Create(*spec, o).value();
  Status st = job->Start();
  if (!st.ok()) {
    std::fprintf(stderr, "%s\n", st.ToString().c_str());
    return 1;
  }
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("flowstate_overlap_bench_" + std::to_string(::getpid())))
                        .string();
  std::filesystem::remove_all(dir);
  auto store = checkpoints::Store::Open(dir, store_options).value();

  auto step = [&] {
    StatusOr<StepResult> r = job->Step();
    if (!r.ok()) {
      std::fprintf(stderr, "%s\n", r.status().ToString().c_str());
      std::exit(1);
    }
  };
  for (int i = 0; i < 20; ++i) step();  // warm up

  std::vector<double> base, during, snapshot_s, write_s;
  int64_t bytes = 0;
  constexpr int kBaselineSteps = 15;
  for (int r = 0; r < rounds; ++r) {
    for (int i = 0; i < kBaselineSteps; ++i) {
      auto t0 = Clock::now();
      step();
      base.push_back(Seconds(t0, Clock::now()));
    }
    // A checkpoint: snapshot on this thread, write on another.
    auto t0 = Clock::now();
    JobSnapshot snap = job->Snapshot().value();
    auto t1 = Clock::now();
    snapshot_s.push_back(Seconds(t0, t1));
    checkpoints::Snapshot cs;
    cs.step = snap.step;
    cs.metadata = EncodeSnapshotMetadata(snap);
    bytes = 0;
    for (auto& [name, t] : snap.variables) {
      bytes += int64_t(t.TotalBytes());
      cs.tensors.push_back({name, t});
    }
    std::atomic<bool> written{false};
    std::thread writer([&] {
      if (lower_priority) LowerThisThreadsPriority();
      auto w0 = Clock::now();
      Status ws = store->WriteCheckpoint("bench", cs);
      if (!ws.ok()) std::fprintf(stderr, "write: %s\n", ws.ToString().c_str());
      (void)store->RetainLatest("bench", 2);
      write_s.push_back(Seconds(w0, Clock::now()));
      written = true;
    });
    bool first = true;
    while (!written) {
      auto s0 = first ? t0 : Clock::now();  // the first one pays for the snapshot
      step();
      during.push_back(Seconds(s0, Clock::now()));
      first = false;
    }
    writer.join();
  }
  std::filesystem::remove_all(dir);
  double b = Median(base), d = Median(during);
  std::fprintf(stderr,
               "checkpoint_overlap_bench: %d rounds, %zu baseline and %zu overlapped steps, "
               "checkpoint %.1f MiB\n",
               rounds, base.size(), during.size(), double(bytes) / double(1 << 20));
  bench::PrintFigure("checkpoint_overlap/mlp/step_ms/no_checkpoint", b * 1e3, "ms");
  bench::PrintFigure("checkpoint_overlap/mlp/step_ms/while_writing", d * 1e3, "ms",
                     "checkpoint_overlap/mlp/step_ms/no_checkpoint", d / b);
  bench::PrintFigure("checkpoint_overlap/mlp/snapshot_ms", Median(snapshot_s) * 1e3, "ms");
  bench::PrintFigure("checkpoint_overlap/mlp/write_ms", Median(write_s) * 1e3, "ms");
  bench::PrintFigure("checkpoint_overlap/mlp/checkpoint_bytes", double(bytes), "bytes");
  return 0;
}

}  // namespace
}  // namespace flowstate

int main(int argc, char** argv) { return flowstate::Main(argc, argv); }
