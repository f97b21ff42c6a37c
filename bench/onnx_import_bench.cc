// How long ImportOnnxFile takes (api/onnx/onnx_import.h): reading the
// file, ONNX's checker and shape inference, and the conversion, for each
// file given, best of --repeat runs, as imported for a training job
// (OnnxImportOptions::training) and for a session (init_op).
//
//   build/bench/onnx_import_bench [--repeat 5] FILE.onnx ...
//
// Prints one JSON line per file and mode: {"name": "onnx_import/<file>/<mode>",
// "value": seconds, "unit": "s"}. bench/onnx_bench.py exports the models.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "api/onnx/onnx_import.h"

int main(int argc, char** argv) {
  int repeat = 5;
  std::vector<std::string> files;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--repeat") == 0 && i + 1 < argc) {
      repeat = std::max(1, std::atoi(argv[++i]));
    } else {
      files.push_back(argv[i]);
    }
  }
  if (files.empty()) {
    std::fprintf(stderr, "usage: onnx_import_bench [--repeat N] FILE.onnx ...\n");
    return 2;
  }
  for (const std::string& f : files) {
    for (bool training : {true, false}) {
      double best = 1e30;
      for (int r = 0; r < repeat; ++r) {
        flowstate::OnnxImportOptions o;
        o.training = training;
        auto t0 = std::chrono::steady_clock::now();
        auto m = flowstate::ImportOnnxFile(f, o);
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (!m.ok()) {
          std::fprintf(stderr, "%s: %s\n", f.c_str(), m.status().ToString().c_str());
          return 1;
        }
        best = std::min(best, s);
      }
      std::string base = f.substr(f.find_last_of('/') + 1);
      std::printf("{\"name\": \"onnx_import/%s/%s\", \"value\": %.4f, \"unit\": \"s\"}\n", base.c_str(),
                  training ? "training" : "session", best);
      std::fflush(stdout);
    }
  }
  return 0;
}
