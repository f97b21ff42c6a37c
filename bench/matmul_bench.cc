// MatMul float32 through Flowstate's CPU kernel, side by side with OpenBLAS's
// cblas_sgemm and Eigen's own product, at 1 and 2 threads.
//
// Sizes: 128, 512, 1024, 2048 square and 128×784×512 (M×K×N, an MLP layer
// on a Fashion-MNIST batch). Prints GFLOP/s as JSON lines (bench_util.h):
//   matmul_f32/flowstate/<size>/t<threads>   ratio to OpenBLAS
//   matmul_f32/openblas/<size>/t<threads>    the reference
//   matmul_f32/eigen/<size>/t<threads>       ratio to OpenBLAS
//   matmul_f32/dnnl_omp/<size>/t<threads>    ratio to OpenBLAS (with oneDNN)
// The Eigen line is Eigen's GEMM on the calling thread at t1; at t2 it is
// split by rows over the device's pool, which is the kernel's path when
// built without oneDNN. The dnnl_omp line is dnnl_sgemm called directly
// with an OpenMP team of <threads> threads: the alternative to the kernel's
// split over the device's pool (see devices/cpu/matmul_kernels.cc).
//
// Usage: matmul_bench [--min-time=SECONDS] [--reps=N]
#include <cblas.h>
#include <unistd.h>

#include <Eigen/Core>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#ifdef FLOWSTATE_HAVE_ONEDNN
#include <omp.h>
#include <oneapi/dnnl/dnnl.h>
#endif

#include "bench/bench_util.h"
#include "bench/op_runner.h"
#include "devices/cpu/cpu_device.h"

namespace flowstate::bench {
namespace {

using RowMatrix = Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;

// Debian's OpenBLAS 0.3.21 (DYNAMIC_ARCH) misdetects Sapphire Rapids as
// "Prescott" and runs its SSE3 kernels (~19 GFLOP/s instead of ~100). The
// core type is read once, by a constructor of libopenblas that runs before
// main(), so setting OPENBLAS_CORETYPE with setenv() here would come too
// late: when it is unset, set it and re-execute this program, so the
// library loads with it. An explicit OPENBLAS_CORETYPE is left alone.
void EnsureOpenBlasCoreType(char** argv) {
  if (std::getenv("OPENBLAS_CORETYPE") != nullptr) return;
  setenv("OPENBLAS_CORETYPE", "SkylakeX", 1);
  execv("/proc/self/exe", argv);
  std::perror("matmul_bench: re-exec with OPENBLAS_CORETYPE=SkylakeX failed");  // run on
}

Tensor Random(int64_t rows, int64_t cols, uint64_t seed) {
  Tensor t(DataType::kFloat32, TensorShape({rows, cols}));
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-1, 1);
  for (float& v : t.flat<float>()) v = u(rng);
  return t;
}

struct Size {
  int64_t m, k, n;
  std::string Name() const {
    if (m == k && k == n) return std::to_string(m);
    return std::to_string(m) + "x" + std::to_string(k) + "x" + std::to_string(n);
  }
};

// Largest |x - y| relative to the largest |y|.
double RelDiff(const float* x, const float* y, int64_t n) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < n; ++i) {
    diff = std::max(diff, double(std::abs(x[i] - y[i])));
    scale = std::max(scale, double(std::abs(y[i])));
  }
  return diff / scale;
}

void BenchSize(const Size& s, CpuDevice* device, const TimingOptions& opts) {
  const int threads = device->num_threads();
  const std::string suffix = "/" + s.Name() + "/t" + std::to_string(threads);
  const double flops = 2.0 * double(s.m) * double(s.n) * double(s.k);
  Tensor a = Random(s.m, s.k, 1), b = Random(s.k, s.n, 2);
  std::vector<float> c_blas(size_t(s.m * s.n)), c_eigen(size_t(s.m * s.n));

  OpRunner runner("MatMul", {a, b}, {}, device);
  Tensor c_ours;
  const double t_ours = BestSecondsPerCall([&] { c_ours = runner.Run(); }, opts);

  openblas_set_num_threads(threads);
  const double t_blas = BestSecondsPerCall(
      [&] {
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, int(s.m), int(s.n), int(s.k), 1.0f,
                    a.data<float>(), int(s.k), b.data<float>(), int(s.n), 0.0f, c_blas.data(),
                    int(s.n));
      },
      opts);

  Eigen::Map<const RowMatrix> A(a.data<float>(), s.m, s.k), B(b.data<float>(), s.k, s.n);
  const double t_eigen = BestSecondsPerCall(
      [&] {
        device->ParallelFor(s.m, s.n * s.k / 16, [&](int64_t r0, int64_t r1) {
          Eigen::Map<RowMatrix> C(c_eigen.data() + r0 * s.n, r1 - r0, s.n);
          C.noalias() = A.middleRows(r0, r1 - r0) * B;
        });
      },
      opts);

#ifdef FLOWSTATE_HAVE_ONEDNN
  std::vector<float> c_dnnl(size_t(s.m * s.n));
  omp_set_num_threads(threads);
  const double t_dnnl = BestSecondsPerCall(
      [&] {
        dnnl_sgemm('N', 'N', s.m, s.n, s.k, 1.0f, a.data<float>(), s.k, b.data<float>(), s.n,
                   0.0f, c_dnnl.data(), s.n);
      },
      opts);
  omp_set_num_threads(1);
  if (RelDiff(c_dnnl.data(), c_blas.data(), s.m * s.n) > 1e-4) {
    std::fprintf(stderr, "matmul_bench: dnnl differs at %s\n", suffix.c_str());
    std::exit(1);
  }
#endif
  const double d1 = RelDiff(c_ours.data<float>(), c_blas.data(), s.m * s.n);
  const double d2 = RelDiff(c_eigen.data(), c_blas.data(), s.m * s.n);
  if (d1 > 1e-4 || d2 > 1e-4) {
    std::fprintf(stderr, "matmul_bench: results differ at %s: %g %g\n", suffix.c_str(), d1, d2);
    std::exit(1);
  }
  const double g_ours = flops / t_ours * 1e-9, g_blas = flops / t_blas * 1e-9;
  const double g_eigen = flops / t_eigen * 1e-9;
  const std::string ref = "matmul_f32/openblas" + suffix;
  PrintFigure("matmul_f32/flowstate" + suffix, g_ours, "GFLOP/s", ref, g_ours / g_blas);
  PrintFigure(ref, g_blas, "GFLOP/s");
  PrintFigure("matmul_f32/eigen" + suffix, g_eigen, "GFLOP/s", ref, g_eigen / g_blas);
#ifdef FLOWSTATE_HAVE_ONEDNN
  const double g_dnnl = flops / t_dnnl * 1e-9;
  PrintFigure("matmul_f32/dnnl_omp" + suffix, g_dnnl, "GFLOP/s", ref, g_dnnl / g_blas);
#endif
}

}  // namespace
}  // namespace flowstate::bench

int main(int argc, char** argv) {
  using namespace flowstate;
  bench::EnsureOpenBlasCoreType(argv);
  const bench::TimingOptions opts = bench::ParseTimingOptions(argc, argv);
  std::fprintf(stderr, "matmul_bench: OpenBLAS core %s, config %s\n", openblas_get_corename(),
               openblas_get_config());
  const bench::Size sizes[] = {{128, 128, 128},    {512, 512, 512}, {1024, 1024, 1024},
                               {2048, 2048, 2048}, {128, 784, 512}};
  for (int threads : {1, 2}) {
    DeviceName name;
    name.job = "localhost";
    name.replica = 0;
    name.task = 0;
    name.type = "CPU";
    name.id = 0;
    CpuDevice device(name, threads, 0);
    for (const bench::Size& s : sizes) bench::BenchSize(s, &device, opts);
  }
  return 0;
}
