// Checkpoint write and restore throughput of the RocksDB store
// (checkpoints/store.h) against the same bytes written to one file with one
// fsync and read back, side by side in the same run (targets: write
// >= 0.5x, restore >= 1.0x).
//
// For 10M and 100M float32 parameters split over five tensors like a model's
// (a big embedding/kernel, smaller kernels, biases, the global step), each
// round does: file write+fsync (a fresh file), store WriteCheckpoint (an
// ingested table file at these sizes, synced; checkpoints/FORMAT.md),
// retention and Flush (untimed), file read, store ReadCheckpoint; the best of
// --reps rounds counts; a second reference reads the file into prefaulted
// buffers (see FileReadPrefaulted). Both reads find their bytes in the page cache (each
// was just written) and allocate fresh tensors with no reusable freed pages
// (malloc_trim before each). Data lives in --dir (default: a fresh directory
// under /tmp), deleted at exit.
//
//   build/bench/checkpoint_bench [--reps=3] [--dir=PATH] [--sizes=10,100]
#include <fcntl.h>
#include <malloc.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "checkpoints/store.h"

namespace flowstate::bench {
namespace {

using checkpoints::Snapshot;
using checkpoints::Store;
using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a) { return std::chrono::duration<double>(Clock::now() - a).count(); }

void Check(const Status& s, const char* what) {
  if (!s.ok()) {
    std::fprintf(stderr, "checkpoint_bench: %s: %s\n", what, s.ToString().c_str());
    std::exit(1);
  }
}

Snapshot MakeModel(int64_t params) {
  // 60% + 25% + 10% + the rest, as kernels and biases of a few layers.
  const int64_t a = params * 6 / 10, b = params / 4, c = params / 10;
  const int64_t d = params - a - b - c;
  Snapshot s;
  s.step = 1;
  s.metadata = "pipeline position and RNG states";
  int i = 0;
  for (int64_t n : {a, b, c, d}) {
    Tensor t(DataType::kFloat32, TensorShape({n}));
    float* p = t.data<float>();
    for (int64_t k = 0; k < n; ++k) p[k] = float(k % 1000) * 0.001f + float(i);
    s.tensors.push_back({"layer" + std::to_string(i++) + "/kernel", t});
  }
  s.tensors.push_back({"global_step", Tensor::Scalar<int64_t>(1)});
  return s;
}

void FileWrite(const Snapshot& s, const std::string& path) {
  int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
  if (fd < 0) std::exit(2);
  for (const auto& t : s.tensors) {
    const char* p = static_cast<const char*>(t.value.raw_data());
    size_t n = t.value.TotalBytes();
    while (n > 0) {
      ssize_t w = ::write(fd, p, n);
      if (w <= 0) std::exit(2);
      p += w;
      n -= size_t(w);
    }
  }
  if (::fsync(fd) != 0) std::exit(2);
  ::close(fd);
}

std::vector<Tensor> FileRead(const Snapshot& like, const std::string& path) {
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) std::exit(2);
  std::vector<Tensor> out;
  for (const auto& t : like.tensors) {
    Tensor r(t.value.dtype(), t.value.shape());
    char* p = static_cast<char*>(r.raw_data());
    size_t n = r.TotalBytes();
    while (n > 0) {
      ssize_t got = ::read(fd, p, n);
      if (got <= 0) std::exit(2);
      p += got;
      n -= size_t(got);
    }
    out.push_back(std::move(r));
  }
  ::close(fd);
  return out;
}

// The same read into buffers whose pages the kernel allocated up front
// (mmap MAP_POPULATE), as the store's restore allocates big tensors: a
// stricter reference than a read into freshly allocated tensors, whose
// page faults cost more than the copy.
double FileReadPrefaulted(const Snapshot& like, const std::string& path) {
  auto t0 = Clock::now();
  int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) std::exit(2);
  std::vector<std::pair<void*, size_t>> maps;
  for (const auto& t : like.tensors) {
    size_t n = t.value.TotalBytes();
    void* m = ::mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (m == MAP_FAILED) std::exit(2);
    maps.push_back({m, n});
    char* p = static_cast<char*>(m);
    while (n > 0) {
      ssize_t got = ::read(fd, p, n);
      if (got <= 0) std::exit(2);
      p += got;
      n -= size_t(got);
    }
  }
  ::close(fd);
  const double s = Seconds(t0);
  for (auto& [m, n] : maps) ::munmap(m, n);
  return s;
}

}  // namespace
}  // namespace flowstate::bench

int main(int argc, char** argv) {
  using namespace flowstate;
  using namespace flowstate::bench;
  TimingOptions topt = ParseTimingOptions(argc, argv);
  std::string dir;
  std::vector<int64_t> sizes_m = {10, 100};
  for (int i = 1; i < argc; ++i) {
    if (std::strncmp(argv[i], "--dir=", 6) == 0) dir = argv[i] + 6;
    if (std::strncmp(argv[i], "--sizes=", 8) == 0) {
      sizes_m.clear();
      for (char* p = argv[i] + 8; *p;) {
        sizes_m.push_back(std::strtoll(p, &p, 10));
        if (*p == ',') ++p;
      }
    }
  }
  bool own_dir = dir.empty();
  if (own_dir) {
    std::string tmpl = "/tmp/flowstate_checkpoint_bench_XXXXXX";
    if (::mkdtemp(tmpl.data()) == nullptr) return 2;
    dir = tmpl;
    // Also on the std::exit() of a failed check: never leave GBs behind.
    static std::string cleanup;
    cleanup = dir;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(cleanup, ec);
    });
  }
  {
    auto store_or = Store::Open(dir + "/data");
    Check(store_or.status(), "open");
    std::unique_ptr<Store> store = std::move(store_or).value();
    const std::string file = dir + "/reference.bin";
    for (int64_t m : sizes_m) {
      const int64_t params = m * 1000000;
      Snapshot model = MakeModel(params);
      const double gb = double(params) * 4 / 1e9;
      const std::string job = "bench" + std::to_string(m) + "m";
      double fw = 1e30, sw = 1e30, fr = 1e30, sr = 1e30, fp = 1e30;
      for (int r = 0; r < topt.reps; ++r) {
        // A fresh file, like the store's: truncating last round's 400 MB
        // (freeing its blocks on a discard-mounted disk) is not part of
        // writing a checkpoint.
        ::unlink(file.c_str());
        auto t0 = Clock::now();
        FileWrite(model, file);
        fw = std::min(fw, Seconds(t0));
        model.step = r + 1;
        t0 = Clock::now();
        Check(store->WriteCheckpoint(job, model), "write");
        sw = std::min(sw, Seconds(t0));
        Check(store->RetainLatest(job, 1), "retain");
        Check(store->Flush(), "flush");
        // Both reads start with no freed-but-mapped heap pages (glibc keeps
        // freed chunks under its mmap threshold, up to 32 MB, faulted in):
        // neither gets pages the other faulted in.
        ::malloc_trim(0);
        t0 = Clock::now();
        std::vector<Tensor> back = FileRead(model, file);
        fr = std::min(fr, Seconds(t0));
        fp = std::min(fp, FileReadPrefaulted(model, file));
        ::malloc_trim(0);
        t0 = Clock::now();
        auto snap = store->ReadCheckpoint(job, model.step);
        sr = std::min(sr, Seconds(t0));
        Check(snap.status(), "read");
        if (snap->tensors.size() != model.tensors.size()) return 3;
        std::fprintf(stderr, "%lldM after round %d, best: file write %.3fs store write %.3fs "
                     "file read %.3fs (prefaulted %.3fs) store read %.3fs\n", (long long)m, r, fw, sw,
                     fr, fp, sr);
      }
      const std::string base = "checkpoint/" + std::to_string(m) + "M_f32";
      PrintFigure(base + "/file_write_fsync", gb / fw, "GB/s");
      PrintFigure(base + "/store_write", gb / sw, "GB/s", base + "/file_write_fsync", fw / sw);
      PrintFigure(base + "/file_read", gb / fr, "GB/s");
      PrintFigure(base + "/store_restore", gb / sr, "GB/s", base + "/file_read", fr / sr);
      PrintFigure(base + "/file_read_prefaulted", gb / fp, "GB/s");
      PrintFigure(base + "/store_restore_vs_prefaulted", gb / sr, "GB/s", base + "/file_read_prefaulted",
                  fp / sr);
      Check(store->DeleteJobData(job), "delete");
    }
  }
  std::error_code ec;
  if (own_dir) {
    std::filesystem::remove_all(dir, ec);
  } else {
    std::filesystem::remove_all(dir + "/data", ec);
    std::filesystem::remove(dir + "/reference.bin", ec);
  }
  return 0;
}
