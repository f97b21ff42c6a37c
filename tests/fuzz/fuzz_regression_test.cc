// The fuzz targets' inputs with the normal build: every input a
// fuzzer crashed on, kept in fuzz/regressions/<target>/, and every seed of
// fuzz/corpus/<target>/, goes through the same entry (fuzz/entries.h) that
// the libFuzzer target calls, and must come back with a clean Status -- OK
// or a client error with a message -- rather than a crash or an abort.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <string>
#include <vector>

#include "fuzz/entries.h"

namespace flowstate::fuzz {
namespace {

namespace fs = std::filesystem;

struct Target {
  const char* name;  // fuzz/corpus/<name>, fuzz/regressions/<name>
  std::function<Status(std::string_view)> entry;
  bool data_loss_ok = false;
};

const Target kTargets[] = {
    {"graph_json", GraphJson},
    {"tensor_json", TensorJson},
    {"requests", Requests},
    {"job_spec", JobSpec},
    {"grpc_requests", GrpcRequests},
    {"checkpoint_import", CheckpointImport, /*data_loss_ok=*/true},
    {"tensor_wire", TensorWire},
    {"onnx_model", OnnxModel},
};

std::vector<fs::path> Inputs(const std::string& folder) {
  std::vector<fs::path> files;
  const fs::path dir = fs::path(FLOWSTATE_SOURCE_DIR) / "fuzz" / folder;
  if (!fs::exists(dir)) return files;
  for (const auto& e : fs::directory_iterator(dir)) {
    if (e.is_regular_file()) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::string Read(const fs::path& file) {
  std::ifstream in(file, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

class FuzzRegression : public ::testing::TestWithParam<Target> {};

TEST_P(FuzzRegression, KeptCrashesAndSeedsGiveACleanStatus) {
  const Target& t = GetParam();
  const std::vector<fs::path> seeds = Inputs(std::string("corpus/") + t.name);
  EXPECT_FALSE(seeds.empty()) << "no seed corpus in fuzz/corpus/" << t.name;
  std::vector<fs::path> inputs = Inputs(std::string("regressions/") + t.name);
  inputs.insert(inputs.end(), seeds.begin(), seeds.end());
  for (const fs::path& file : inputs) {
    Status s = t.entry(Read(file));
    EXPECT_TRUE(IsClientError(s, t.data_loss_ok)) << file << ": " << s.ToString();
  }
}

INSTANTIATE_TEST_SUITE_P(Targets, FuzzRegression, ::testing::ValuesIn(kTargets),
                         [](const ::testing::TestParamInfo<Target>& i) {
                           return std::string(i.param.name);
                         });

}  // namespace
}  // namespace flowstate::fuzz
