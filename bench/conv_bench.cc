// Convolutions (and the pools between them) of the Fashion-MNIST CNN
// through Flowstate's CPU kernels, side by side with PyTorch, at 1 and 2
// threads, batch 128:
//   l1: 28x28x1 -> 32, 5x5 SAME        l2: 14x14x32 -> 64, 5x5 SAME
//   p1: 2x2/2 max pool of 28x28x32     p2: 2x2/2 max pool of 14x14x64
// For each: forward (fwd), gradient of the input (bwd_input) and of the
// filter (bwd_filter); for the pools forward and gradient (bwd). The sum
// "step" adds what one training step runs (l1 fwd and bwd_filter — the
// image needs no gradient —, l2 all three, p1 and p2 both ways).
//
// PyTorch runs in a subprocess (/usr/bin/python3 with Debian's
// python3-torch, which calls oneDNN for convolutions): channels_last
// tensors, torch.nn.functional.conv2d forward, torch.ops.aten.
// convolution_backward (what autograd calls) for the gradients, and
// max_pool2d_with_indices and its backward for the pools; it times each
// with the same best-of loop as bench_util.h and prints one JSON line per
// figure, parsed here. Prints milliseconds as JSON lines (bench_util.h):
//   conv_f32/flowstate/<layer>/<op>/t<threads>  ratio = torch_ms / ours
//                                               (> 1: Flowstate is faster)
//   conv_f32/torch/<layer>/<op>/t<threads>      the reference
// Without torch the ratios are null and a note goes to stderr.
//
// Usage: conv_bench [--min-time=SECONDS] [--reps=N]
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "bench/bench_util.h"
#include "bench/op_runner.h"
#include "devices/cpu/cpu_device.h"

namespace flowstate::bench {
namespace {

struct Layer {
  const char* name;
  int64_t h, w, c, o;  // conv: c -> o channels; pool: c channels, o unused
  bool pool;
};

constexpr int64_t kBatch = 128;
const Layer kLayers[] = {
    {"l1", 28, 28, 1, 32, false},
    {"p1", 28, 28, 32, 0, true},
    {"l2", 14, 14, 32, 64, false},
    {"p2", 14, 14, 64, 0, true},
};

// The PyTorch side: argv = min_time reps; one JSON line per figure.
const char* kTorchScript = R"PY(
import json, sys, time
try:
    import torch
    import torch.nn.functional as F
except Exception as e:
    print(json.dumps({"error": "no torch: %s" % e}))
    sys.exit(0)
min_time, reps = float(sys.argv[1]), int(sys.argv[2])
def best_ms(fn):
    fn()
    best = float("inf")
    for _ in range(reps):
        calls, start = 0, time.perf_counter()
        while True:
            fn()
            calls += 1
            elapsed = time.perf_counter() - start
            if elapsed >= min_time:
                break
        best = min(best, elapsed / calls)
    return best * 1e3
cl = torch.channels_last
torch.manual_seed(0)
for threads in (1, 2):
    torch.set_num_threads(threads)
    for name, h, w, c, o, pool in LAYERS:
        x = torch.rand(128, c, h, w).contiguous(memory_format=cl)
        with torch.no_grad():
            if pool:
                y, idx = torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1], False)
                g = torch.rand_like(y).contiguous(memory_format=cl)
                ops = {
                    "fwd": lambda: torch.ops.aten.max_pool2d_with_indices(x, [2, 2], [2, 2], [0, 0], [1, 1], False),
                    "bwd": lambda: torch.ops.aten.max_pool2d_with_indices_backward(g, x, [2, 2], [2, 2], [0, 0], [1, 1], False, idx),
                }
            else:
                f = torch.rand(o, c, 5, 5).contiguous(memory_format=cl)
                y = F.conv2d(x, f, padding=2)
                dy = torch.rand_like(y).contiguous(memory_format=cl)
                def back(mask):
                    return lambda: torch.ops.aten.convolution_backward(
                        dy, x, f, None, [1, 1], [2, 2], [1, 1], False, [0, 0], 1, mask)
                ops = {
                    "fwd": lambda: F.conv2d(x, f, padding=2),
                    "bwd_input": back([True, False, False]),
                    "bwd_filter": back([False, True, False]),
                }
            for op, fn in ops.items():
                print(json.dumps({"layer": name, "op": op, "threads": threads, "ms": best_ms(fn)}),
                      flush=True)
)PY";

std::string LayersLiteral() {
  std::string s = "LAYERS = [";
  for (const Layer& l : kLayers) {
    s += "(\"" + std::string(l.name) + "\", " + std::to_string(l.h) + ", " + std::to_string(l.w) +
         ", " + std::to_string(l.c) + ", " + std::to_string(l.o) + ", " +
         (l.pool ? "True" : "False") + "), ";
  }
  return s + "]\n";
}

using Key = std::string;  // "<layer>/<op>/t<threads>"

// Runs the PyTorch script; empty when torch is unavailable.
std::map<Key, double> RunTorch(const TimingOptions& opts) {
  std::map<Key, double> out;
  char path[] = "/tmp/flowstate_conv_bench_XXXXXX";
  const int fd = mkstemp(path);
  if (fd < 0) {
    std::perror("conv_bench: mkstemp");
    return out;
  }
  const std::string script = LayersLiteral() + kTorchScript;
  if (write(fd, script.data(), script.size()) != ssize_t(script.size())) {
    std::perror("conv_bench: write");
  }
  close(fd);
  const std::string cmd = "/usr/bin/python3 " + std::string(path) + " " +
                          std::to_string(opts.min_seconds) + " " + std::to_string(opts.reps);
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) {
    std::perror("conv_bench: popen");
    unlink(path);
    return out;
  }
  char line[512];
  while (std::fgets(line, sizeof line, p) != nullptr) {
    char layer[32], op[32];
    int threads = 0;
    double ms = 0;
    if (std::sscanf(line, "{\"layer\": \"%31[^\"]\", \"op\": \"%31[^\"]\", \"threads\": %d, \"ms\": %lf",
                    layer, op, &threads, &ms) == 4) {
      out[std::string(layer) + "/" + op + "/t" + std::to_string(threads)] = ms;
    } else {
      std::fprintf(stderr, "conv_bench: torch: %s", line);
    }
  }
  const int rc = pclose(p);
  unlink(path);
  if (rc != 0) std::fprintf(stderr, "conv_bench: %s exited with %d\n", cmd.c_str(), rc);
  return out;
}

template <typename T>
Tensor Random(const TensorShape& shape, uint64_t seed) {
  Tensor t(kDataTypeOf<T>, shape);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (T& v : t.flat<T>()) {
    s ^= s << 13, s ^= s >> 7, s ^= s << 17;
    v = T(double(s >> 11) / double(uint64_t{1} << 53));  // [0, 1), as torch.rand
  }
  return t;
}

Tensor Int32Vector(std::vector<int64_t> v) {
  Tensor t(DataType::kInt32, TensorShape({int64_t(v.size())}));
  for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = int32_t(v[i]);
  return t;
}

Tensor ToDouble(const Tensor& t) {
  Tensor d(DataType::kFloat64, t.shape());
  for (int64_t i = 0; i < t.num_elements(); ++i) d.data<double>()[i] = t.ElementAsDouble(i);
  return d;
}

// Largest |a - b| relative to the largest |b|.
double RelDiff(const Tensor& a, const Tensor& b) {
  double diff = 0, scale = 1e-30;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    diff = std::max(diff, std::abs(a.ElementAsDouble(i) - b.ElementAsDouble(i)));
    scale = std::max(scale, std::abs(b.ElementAsDouble(i)));
  }
  return diff / scale;
}

// Times our kernels for one layer; checks float32 against the float64
// kernels on the same data.
std::map<std::string, double> BenchLayer(const Layer& l, Device* device,
                                         const TimingOptions& opts) {
  std::map<std::string, double> ms;
  const TensorShape in_shape({kBatch, l.h, l.w, l.c});
  const Tensor x = Random<float>(in_shape, 1);
  std::vector<std::unique_ptr<OpRunner>> ours, check;
  std::vector<std::string> names;
  if (l.pool) {
    const AttrMap a = {{"ksize", AttrValue(std::vector<int64_t>{1, 2, 2, 1})},
                       {"strides", AttrValue(std::vector<int64_t>{1, 2, 2, 1})},
                       {"padding", AttrValue("SAME")}};
    const Tensor y = OpRunner("MaxPool", {x}, a, device).Run();
    const Tensor g = Random<float>(y.shape(), 2);
    names = {"fwd", "bwd"};
    ours.push_back(std::make_unique<OpRunner>("MaxPool", std::vector<Tensor>{x}, a, device));
    ours.push_back(
        std::make_unique<OpRunner>("MaxPoolGrad", std::vector<Tensor>{x, y, g}, a, device));
  } else {
    const AttrMap a = {{"strides", AttrValue(std::vector<int64_t>{1, 1, 1, 1})},
                       {"padding", AttrValue("SAME")}};
    const Tensor f = Random<float>(TensorShape({5, 5, l.c, l.o}), 3);
    const Tensor dy = Random<float>(TensorShape({kBatch, l.h, l.w, l.o}), 4);
    const Tensor in_sizes = Int32Vector({kBatch, l.h, l.w, l.c});
    const Tensor f_sizes = Int32Vector({5, 5, l.c, l.o});
    names = {"fwd", "bwd_input", "bwd_filter"};
    const std::vector<std::vector<Tensor>> inputs = {{x, f}, {in_sizes, f, dy}, {x, f_sizes, dy}};
    const char* ops[] = {"Conv2D", "Conv2DBackpropInput", "Conv2DBackpropFilter"};
    for (int i = 0; i < 3; ++i) {
      ours.push_back(std::make_unique<OpRunner>(ops[i], inputs[size_t(i)], a, device));
      std::vector<Tensor> d = inputs[size_t(i)];
      for (Tensor& t : d) {
        if (t.dtype() == DataType::kFloat32) t = ToDouble(t);
      }
      check.push_back(std::make_unique<OpRunner>(ops[i], d, a, device));
    }
  }
  for (size_t i = 0; i < ours.size(); ++i) {
    Tensor out;
    ms[names[i]] = BestSecondsPerCall([&] { out = ours[i]->Run(); }, opts) * 1e3;
    if (!check.empty()) {
      const double d = RelDiff(out, check[i]->Run());
      if (d > 1e-4) {
        std::fprintf(stderr, "conv_bench: %s %s differs from float64 by %g\n", l.name,
                     names[i].c_str(), d);
        std::exit(1);
      }
    }
  }
  return ms;
}

}  // namespace
}  // namespace flowstate::bench

int main(int argc, char** argv) {
  using namespace flowstate;
  using namespace flowstate::bench;
  const TimingOptions opts = ParseTimingOptions(argc, argv);
  const std::map<Key, double> torch = RunTorch(opts);
  if (torch.empty()) {
    std::fprintf(stderr, "conv_bench: no PyTorch figures (/usr/bin/python3 lacks torch?); "
                         "ratios are null\n");
  }
  for (int threads : {1, 2}) {
    DeviceName name;
    name.job = "localhost";
    name.replica = 0;
    name.task = 0;
    name.type = "CPU";
    name.id = 0;
    CpuDevice device(name, threads, 0);
    const std::string t = "/t" + std::to_string(threads);
    double step_ours = 0, step_torch = 0;
    bool step_complete = true;
    for (const Layer& l : kLayers) {
      for (const auto& [op, ours] : BenchLayer(l, &device, opts)) {
        const std::string key = std::string(l.name) + "/" + op + t;
        const bool in_step = !(std::string(l.name) == "l1" && op == "bwd_input");
        const auto it = torch.find(key);
        if (in_step) step_ours += ours;
        if (it == torch.end()) {
          PrintFigure("conv_f32/flowstate/" + key, ours, "ms");
          step_complete = false;
          continue;
        }
        if (in_step) step_torch += it->second;
        PrintFigure("conv_f32/flowstate/" + key, ours, "ms", "conv_f32/torch/" + key,
                    it->second / ours);
        PrintFigure("conv_f32/torch/" + key, it->second, "ms");
      }
    }
    if (step_complete) {
      PrintFigure("conv_f32/flowstate/step" + t, step_ours, "ms", "conv_f32/torch/step" + t,
                  step_torch / step_ours);
      PrintFigure("conv_f32/torch/step" + t, step_torch, "ms");
    } else {
      PrintFigure("conv_f32/flowstate/step" + t, step_ours, "ms");
    }
  }
  return 0;
}
