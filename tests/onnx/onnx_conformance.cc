// onnx_conformance: runs ONNX's backend test cases (Debian's
// libonnx-testdata) through the importer and a Session, and prints a table
// per set and per op: passed, failed (with the largest error), unsupported.
//
//   onnx_conformance [--data DIR] [--sets node,simple,...] [--filter SUBSTR]
//                    [--expected FILE] [--write-passing FILE] [--ops] [--jobs N]
//                    [--require-all] [--variables] [-v]
//
// Each case is a folder with model.onnx and test_data_set_*/input_K.pb,
// output_K.pb (serialized TensorProtos). The model is imported with its
// initializers as constants (older opsets upgraded by ONNX's version
// converter), its inputs fed, its outputs compared as ONNX's backend tests
// do: |actual - expected| <= atol + rtol * |expected|, rtol 1e-3, atol 1e-7.
// With --variables the float initializers become Variables, assigned by the
// model's init_op before the case runs (the path training takes).
// Each case runs in a forked child (same code, this process's image; --jobs
// of them at once, default 2), so that a crash or an assertion in one case
// is reported as that case's failure instead of ending the run. With --expected, exits 1 when a case
// listed there (one "set/case" per line, '#' comments) does not pass; with
// --require-all, when any case does not pass.
// Exits 77 (ctest: skipped) when the data folder is missing.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "api/onnx/onnx_import.h"
#include "devices/device_pool.h"
#include "scheduler/session.h"

namespace fs = std::filesystem;
using namespace flowstate;

namespace {

constexpr double kRtol = 1e-3, kAtol = 1e-7;

enum class Outcome { kPass, kFail, kUnsupported };

struct Result {
  Outcome outcome = Outcome::kFail;
  double max_error = 0;  // largest |actual - expected| of a failing comparison
  std::string detail;
};

std::string ReadFile(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<double> AsDoubles(const Tensor& t) {
  std::vector<double> out;
  out.reserve(size_t(t.num_elements()));
  auto add = [&]<typename T>() {
    for (const T& v : t.flat<T>()) out.push_back(double(v));
  };
  switch (t.dtype()) {
    case DataType::kFloat32: add.template operator()<float>(); break;
    case DataType::kFloat64: add.template operator()<double>(); break;
    case DataType::kInt32: add.template operator()<int32_t>(); break;
    case DataType::kInt64: add.template operator()<int64_t>(); break;
    case DataType::kUInt8: add.template operator()<uint8_t>(); break;
    case DataType::kBool: add.template operator()<bool>(); break;
    case DataType::kFloat16:
      for (const Half& v : t.flat<Half>()) out.push_back(float(v));
      break;
    case DataType::kBFloat16:
      for (const BFloat16& v : t.flat<BFloat16>()) out.push_back(float(v));
      break;
    default: break;
  }
  return out;
}

// Compares one output; "" when equal within tolerance.
std::string Compare(const Tensor& actual, const Tensor& expected, double* max_error) {
  if (actual.dtype() != expected.dtype()) {
    return "dtype " + std::string(DataTypeName(actual.dtype())) + ", expected " +
           std::string(DataTypeName(expected.dtype()));
  }
  if (actual.shape().dim_vector() != expected.shape().dim_vector()) {
    return "shape " + PartialShape(actual.shape()).ToString() + ", expected " +
           PartialShape(expected.shape()).ToString();
  }
  std::vector<double> a = AsDoubles(actual), e = AsDoubles(expected);
  bool exact = !IsFloating(actual.dtype());
  double worst = 0;
  bool bad = false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) && std::isnan(e[i])) continue;
    if (std::isinf(e[i]) && a[i] == e[i]) continue;
    double err = std::fabs(a[i] - e[i]);
    if (std::isnan(err)) err = INFINITY;
    bool ok = exact ? err == 0 : err <= kAtol + kRtol * std::fabs(e[i]);
    if (!ok) {
      bad = true;
      worst = std::max(worst, err);
    }
  }
  if (!bad) return "";
  *max_error = std::max(*max_error, worst);
  char buf[64];
  std::snprintf(buf, sizeof buf, "largest error %.3g", worst);
  return buf;
}

// Runs one case (in the child).
// Import with Variables (run init_op first) instead of constants.
bool g_variables = false;

Result RunCase(const fs::path& dir) {
  Result r;
  OnnxImportOptions o;
  o.initializers_as_constants = !g_variables;
  o.upgrade_older_opsets = true;
  StatusOr<ImportedModel> m = ImportOnnxFile((dir / "model.onnx").string(), o);
  if (!m.ok()) {
    r.outcome = m.status().code() == Code::kUnimplemented ? Outcome::kUnsupported : Outcome::kFail;
    r.detail = "import: " + m.status().message();
    return r;
  }
  DevicePoolOptions po;
  po.num_cpu_devices = 1;
  po.intra_op_threads = 1;
  StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(po);
  if (!pool.ok()) {
    r.detail = "device pool: " + pool.status().ToString();
    return r;
  }
  SessionOptions so;
  so.devices = pool->get();
  so.inter_op_threads = 1;
  StatusOr<std::unique_ptr<Session>> session = Session::Create(m->graph, so);
  if (!session.ok()) {
    r.detail = "session: " + session.status().ToString();
    return r;
  }
  Session* run = session->get();
  if (!m->init_op.empty()) {
    std::vector<Tensor> none;
    Status s = run->Run({}, {}, {m->init_op}, &none);
    if (!s.ok()) {
      r.detail = "init_op: " + s.ToString();
      return r;
    }
  }
  std::vector<fs::path> sets;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_directory() && e.path().filename().string().rfind("test_data_set_", 0) == 0) {
      sets.push_back(e.path());
    }
  }
  std::sort(sets.begin(), sets.end());
  if (sets.empty()) {
    r.detail = "no test_data_set_*";
    return r;
  }
  // The child _exits after the case: leave the session and the pool to
  // it (their shutdown waits on threads, the bulk of a case's time).
  (void)session->release();
  (void)pool->release();
  std::vector<std::string> fetches;
  for (const auto& out : m->outputs) fetches.push_back(out.tensor);
  for (const fs::path& set : sets) {
    std::vector<std::pair<std::string, Tensor>> feeds;
    for (size_t i = 0;; ++i) {
      fs::path p = set / ("input_" + std::to_string(i) + ".pb");
      if (!fs::exists(p)) break;
      StatusOr<Tensor> t = ParseOnnxTensor(ReadFile(p));
      if (!t.ok()) {
        r.outcome = Outcome::kUnsupported;
        r.detail = p.filename().string() + ": " + t.status().message();
        return r;
      }
      if (i >= m->inputs.size()) {
        r.detail = "more input files than model inputs";
        return r;
      }
      feeds.emplace_back(m->inputs[i].tensor, *t);
    }
    std::vector<Tensor> outputs;
    RunOptions ro;
    ro.timeout = std::chrono::milliseconds(20000);
    Status s = run->Run(feeds, fetches, {}, &outputs, nullptr, ro);
    if (!s.ok()) {
      r.outcome = s.code() == Code::kUnimplemented ? Outcome::kUnsupported : Outcome::kFail;
      r.detail = "run: " + s.ToString();
      return r;
    }
    for (size_t i = 0; i < fetches.size(); ++i) {
      fs::path p = set / ("output_" + std::to_string(i) + ".pb");
      StatusOr<Tensor> want = ParseOnnxTensor(ReadFile(p));
      if (!want.ok()) {
        r.outcome = Outcome::kUnsupported;
        r.detail = p.filename().string() + ": " + want.status().message();
        return r;
      }
      std::string diff = Compare(outputs[i], *want, &r.max_error);
      if (!diff.empty()) {
        r.detail = "output " + std::to_string(i) + " ('" + m->outputs[i].onnx_name + "'): " + diff;
        return r;
      }
    }
  }
  r.outcome = Outcome::kPass;
  return r;
}

// A case running in a forked child, which writes its Result to a pipe.
struct Child {
  pid_t pid = -1;
  int fd = -1;
  size_t index = 0;
};

Child StartCase(const fs::path& dir, size_t index) {
  int fds[2];
  if (pipe(fds) != 0) return Child{};
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    Result r = RunCase(dir);
    std::string msg = std::to_string(int(r.outcome)) + "\n" + std::to_string(r.max_error) + "\n" +
                      r.detail.substr(0, 2000);
    size_t off = 0;
    while (off < msg.size()) {
      ssize_t n = write(fds[1], msg.data() + off, msg.size() - off);
      if (n <= 0) break;
      off += size_t(n);
    }
    close(fds[1]);
    _exit(0);
  }
  close(fds[1]);
  return Child{pid, fds[0], index};
}

// Reads the child's result (after it exited with `status`).
Result FinishCase(const Child& c, int status) {
  std::string msg;
  char buf[4096];
  ssize_t n;
  while ((n = read(c.fd, buf, sizeof buf)) > 0) msg.append(buf, size_t(n));
  close(c.fd);
  Result r;
  size_t a = msg.find('\n'), b = a == std::string::npos ? a : msg.find('\n', a + 1);
  if (b == std::string::npos) {
    r.detail = WIFSIGNALED(status) ? "crashed: signal " + std::to_string(WTERMSIG(status))
                                   : "child gave no result";
    return r;
  }
  r.outcome = Outcome(std::stoi(msg.substr(0, a)));
  r.max_error = std::stod(msg.substr(a + 1, b - a - 1));
  r.detail = msg.substr(b + 1);
  return r;
}

// Runs the cases, `jobs` children at a time (their results are at most
// 2000 bytes, below a pipe's buffer, so a child never blocks on its write).
std::vector<Result> RunAll(const std::vector<fs::path>& cases, int jobs) {
  std::vector<Result> results(cases.size());
  std::map<pid_t, Child> running;
  size_t next = 0;
  while (next < cases.size() || !running.empty()) {
    while (next < cases.size() && int(running.size()) < jobs) {
      Child c = StartCase(cases[next], next);
      if (c.pid < 0) {
        results[next].detail = "fork failed";
      } else {
        running[c.pid] = c;
      }
      ++next;
    }
    if (running.empty()) continue;
    int status = 0;
    pid_t pid = waitpid(-1, &status, 0);
    auto it = running.find(pid);
    if (it == running.end()) continue;
    results[it->second.index] = FinishCase(it->second, status);
    running.erase(it);
  }
  return results;
}

struct OpRow {
  int cases = 0, passed = 0, failed = 0, unsupported = 0;
  double max_error = 0;
};

}  // namespace

int main(int argc, char** argv) {
  std::string data = "/usr/share/libonnx-testdata/data";
  std::vector<std::string> sets = {"node", "pytorch-converted", "pytorch-operator", "simple"};
  std::string filter, expected_file, write_file;
  bool verbose = false, op_table = false, require_all = false;
  int jobs = 2;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    auto next = [&]() -> std::string { return i + 1 < argc ? argv[++i] : ""; };
    if (a == "--data") data = next();
    else if (a == "--sets") {
      sets.clear();
      std::stringstream ss(next());
      for (std::string s; std::getline(ss, s, ',');) sets.push_back(s);
    } else if (a == "--filter") filter = next();
    else if (a == "--expected") expected_file = next();
    else if (a == "--write-passing") write_file = next();
    else if (a == "--ops") op_table = true;
    else if (a == "--require-all") require_all = true;
    else if (a == "--variables") g_variables = true;
    else if (a == "--jobs") jobs = std::max(1, std::atoi(next().c_str()));
    else if (a == "-v") verbose = true;
    else {
      std::fprintf(stderr, "unknown argument %s\n", a.c_str());
      return 2;
    }
  }
  if (!fs::is_directory(data)) {
    std::printf("onnx_conformance: %s is missing (install libonnx-testdata); skipped\n",
                data.c_str());
    return 77;
  }
  auto start = std::chrono::steady_clock::now();
  std::map<std::string, OpRow> ops;
  std::vector<std::string> passing;
  int total = 0;
  bool warm = false;
  std::printf("%-20s %7s %7s %7s %12s %8s\n", "set", "cases", "passed", "failed", "unsupported",
              "passed%");
  for (const std::string& set : sets) {
    std::vector<fs::path> cases;
    if (!fs::is_directory(fs::path(data) / set)) continue;
    for (const auto& e : fs::directory_iterator(fs::path(data) / set)) {
      if (e.is_directory() && e.path().filename().string().find(filter) != std::string::npos) {
        cases.push_back(e.path());
      }
    }
    std::sort(cases.begin(), cases.end());
    int passed = 0, failed = 0, unsupported = 0;
    if (!cases.empty() && !warm) {
      // libonnx builds its schema registry on first use: once, here, not
      // in every child.
      (void)ImportOnnxFile((cases[0] / "model.onnx").string());
      warm = true;
    }
    std::vector<Result> results = RunAll(cases, jobs);
    for (size_t k = 0; k < cases.size(); ++k) {
      const fs::path& dir = cases[k];
      const Result& r = results[k];
      std::string name = set + "/" + dir.filename().string();
      if (r.outcome == Outcome::kPass) {
        ++passed;
        passing.push_back(name);
      } else if (r.outcome == Outcome::kUnsupported) {
        ++unsupported;
      } else {
        ++failed;
      }
      if (verbose) {
        const char* what = r.outcome == Outcome::kPass ? "PASS"
                           : r.outcome == Outcome::kUnsupported ? "UNSUPPORTED" : "FAIL";
        std::printf("  %-11s %s%s%s\n", what, name.c_str(), r.detail.empty() ? "" : ": ",
                    r.detail.c_str());
      }
      StatusOr<std::vector<std::string>> used = OnnxModelOps(ReadFile(dir / "model.onnx"));
      if (used.ok()) {
        for (const std::string& op : *used) {
          OpRow& row = ops[op];
          ++row.cases;
          if (r.outcome == Outcome::kPass) ++row.passed;
          else if (r.outcome == Outcome::kUnsupported) ++row.unsupported;
          else ++row.failed;
          row.max_error = std::max(row.max_error, r.max_error);
        }
      }
    }
    int n = int(cases.size());
    total += n;
    std::printf("%-20s %7d %7d %7d %12d %7.1f%%\n", set.c_str(), n, passed, failed, unsupported,
                n ? 100.0 * passed / n : 0.0);
  }
  if (op_table) {
    std::printf("\n%-28s %6s %7s %7s %12s %14s\n", "op (cases using it)", "cases", "passed",
                "failed", "unsupported", "largest error");
    for (const auto& [op, row] : ops) {
      std::printf("%-28s %6d %7d %7d %12d %14.3g\n", op.c_str(), row.cases, row.passed,
                  row.failed, row.unsupported, row.max_error);
    }
  }
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("\n%.1f s\n", secs);
  if (!write_file.empty()) {
    std::ofstream out(write_file);
    out << "# ONNX backend cases (libonnx-testdata 1.12) that pass; tests/onnx/onnx_conformance\n"
           "# fails when one of them stops passing. Regenerate with --write-passing.\n";
    for (const std::string& p : passing) out << p << "\n";
  }
  if (!expected_file.empty()) {
    std::set<std::string> now(passing.begin(), passing.end());
    std::ifstream in(expected_file);
    if (!in) {
      std::printf("cannot read %s\n", expected_file.c_str());
      return 1;
    }
    int regressions = 0, expected = 0;
    for (std::string line; std::getline(in, line);) {
      if (line.empty() || line[0] == '#') continue;
      if (!filter.empty() && line.find(filter) == std::string::npos) continue;
      std::string set = line.substr(0, line.find('/'));
      if (std::find(sets.begin(), sets.end(), set) == sets.end()) continue;
      ++expected;
      if (!now.count(line)) {
        ++regressions;
        std::printf("REGRESSION: %s no longer passes\n", line.c_str());
      }
    }
    std::printf("%d of %d expected cases pass\n", expected - regressions, expected);
    if (regressions > 0) return 1;
  }
  if (require_all && int(passing.size()) != total) {
    std::printf("%d of %d cases pass; --require-all asks for all\n", int(passing.size()), total);
    return 1;
  }
  return 0;
}
