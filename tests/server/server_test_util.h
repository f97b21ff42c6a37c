// Helpers shared by the server tests: a device pool, a fresh temporary
// directory per test, and the small CSV data sets their jobs train on.
// Header-only; every function is thread-compatible.
#ifndef FLOWSTATE_TESTS_SERVER_SERVER_TEST_UTIL_H_
#define FLOWSTATE_TESTS_SERVER_SERVER_TEST_UTIL_H_

#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <mutex>
#include <random>
#include <string>

#include "devices/device_pool.h"

namespace flowstate::server_test {

// One CPU device with `intra_op_threads` threads, created on first use for
// each count and never destroyed (tests share it, as servers share theirs).
inline DevicePool* TestPool(int intra_op_threads = 1) {
  static std::mutex mu;
  // On the heap and never freed, so the pools stay reachable (not leaks) to
  // LeakSanitizer at exit.
  static auto* pools = new std::map<int, DevicePool*>();
  std::lock_guard<std::mutex> l(mu);
  DevicePool*& p = (*pools)[intra_op_threads];
  if (p == nullptr) {
    DevicePoolOptions o;
    o.intra_op_threads = intra_op_threads;
    p = DevicePool::Create(o).value().release();
  }
  return p;
}

// <temp>/<prefix>_<pid>_<test name>, emptied and created.
inline std::filesystem::path FreshTestDir(const std::string& prefix) {
  std::filesystem::path dir =
      std::filesystem::temp_directory_path() /
      (prefix + "_" + std::to_string(::getpid()) + "_" +
       ::testing::UnitTest::GetInstance()->current_test_info()->name());
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Writes `file` (creating its folder) with the header "a,b,target" and
// `rows` rows: a and b uniform in [-1, 1) from mt19937(seed), target(a, b).
inline void WritePointsCsv(const std::filesystem::path& file, int rows, unsigned seed,
                           const std::function<double(double, double)>& target) {
  std::filesystem::create_directories(file.parent_path());
  std::ofstream f(file);
  f << "a,b,target\n";
  std::mt19937 rng(seed);
  std::uniform_real_distribution<double> u(-1, 1);
  for (int i = 0; i < rows; ++i) {
    double a = u(rng), b = u(rng);
    f << a << "," << b << "," << target(a, b) << "\n";
  }
}

// FreshTestDir(prefix) with data/points.csv in it: WritePointsCsv with 64
// rows, seed 3 and target 2a - 3b (the data root, dir / "data", of the
// tests whose jobs train on "points.csv").
inline std::filesystem::path FreshTestDirWithPoints(const std::string& prefix) {
  std::filesystem::path dir = FreshTestDir(prefix);
  std::filesystem::create_directories(dir / "data");
  WritePointsCsv(dir / "data" / "points.csv", 64, 3, [](double a, double b) { return 2 * a - 3 * b; });
  return dir;
}

// The graph of the tests' linear-regression jobs, {"nodes": [...]}: fed x
// [-1, 2] and y [-1], pred = x w (+ b), loss = mean((pred - y)^2).
inline std::string LinearGraphJson(bool with_bias) {
  std::string nodes = R"(
    {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
    {"name": "y", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1]}},
    {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
    {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},)";
  if (with_bias) {
    nodes += R"(
    {"name": "b", "op": "Variable", "attrs": {"dtype": "float32", "shape": [1], "init": "zeros"}},
    {"name": "pb", "op": "BiasAdd", "inputs": ["p", "b"]},)";
  }
  nodes += R"(
    {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
    {"name": "pred", "op": "Reshape", "inputs": [")" + std::string(with_bias ? "pb" : "p") + R"(", "flat"]},
    {"name": "sq", "op": "SquaredDifference", "inputs": ["pred", "y"]},
    {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
    {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]})";
  return "{\"nodes\": [" + nodes + "\n  ]}";
}

// A job fitting x·w to 0 over points.csv (WritePointsCsv: columns a, b; 64
// rows are 4 batches an epoch).
inline std::string JobJson(int epochs, const std::string& name = "line") {
  return R"({
    "name": ")" + name + R"(",
    "graph": {"nodes": [
      {"name": "x", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": [-1, 2]}},
      {"name": "w", "op": "Variable", "attrs": {"dtype": "float32", "shape": [2, 1], "init": "glorot_uniform"}},
      {"name": "p", "op": "MatMul", "inputs": ["x", "w"]},
      {"name": "flat", "op": "Const", "attrs": {"dtype": "int32", "value": [-1]}},
      {"name": "pred", "op": "Reshape", "inputs": ["p", "flat"]},
      {"name": "sq", "op": "Square", "inputs": ["pred"]},
      {"name": "axes", "op": "Const", "attrs": {"dtype": "int32", "value": []}},
      {"name": "loss", "op": "Mean", "inputs": ["sq", "axes"]}
    ]},
    "loss": "loss",
    "optimizer": {"type": "sgd", "learning_rate": 0.1},
    "input": {"format": "csv", "files": {"x": "points.csv"},
              "columns": {"x": ["a", "b"]}, "batch_size": 16,
              "epochs": )" + std::to_string(epochs) + R"(},
    "seed": 1
  })";
}

// The durations of a Server-Timing value ("step;dur=0.1, total;dur=0.2") by
// name, in milliseconds.
inline std::map<std::string, double> ParseServerTiming(const std::string& value) {
  std::map<std::string, double> out;
  size_t pos = 0;
  while (pos < value.size()) {
    size_t end = value.find(',', pos);
    if (end == std::string::npos) end = value.size();
    std::string item = value.substr(pos, end - pos);
    while (!item.empty() && item.front() == ' ') item.erase(0, 1);
    size_t dur = item.find(";dur=");
    if (dur != std::string::npos) out[item.substr(0, dur)] = std::stod(item.substr(dur + 5));
    pos = end + 1;
  }
  return out;
}

}  // namespace flowstate::server_test

#endif  // FLOWSTATE_TESTS_SERVER_SERVER_TEST_UTIL_H_
