// One rank of a GlooCollective group as its own process, for
// gloo_multi_process_test: joins the group, then all-reduces a float32
// tensor round after round, checking each result, and prints one line per
// event on stdout:
//   READY | ROUND k OK | FAILED <code> <blamed ranks, or -> <message>
//   REBUILT <rank> <size> | REBUILT_OK | ERROR <message>
// After a failure it rebuilds the group with the ranks still alive (all but
// the blamed ones) under "<prefix>/rebuilt", runs 5 rounds there and exits.
//
//   gloo_rank_main STORE PREFIX RANK SIZE ELEMENTS DEADLINE_MS
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "distributed/gloo_collective.h"

namespace {

using flowstate::Status;
using flowstate::Tensor;

void Say(const std::string& line) {
  std::printf("%s\n", line.c_str());
  std::fflush(stdout);
}

// Round k: every rank contributes 1 + k everywhere; the sum is size * (1 + k).
Status Round(flowstate::GlooCollective* c, int64_t elements, int k, int deadline_ms) {
  std::vector<Tensor> ts = {Tensor(flowstate::DataType::kFloat32, flowstate::TensorShape({elements}))};
  std::fill_n(ts[0].data<float>(), elements, float(1 + k));
  Status s = c->AllReduce(&ts, flowstate::ReduceOp::kSum,
                          std::chrono::steady_clock::now() + std::chrono::milliseconds(deadline_ms));
  if (!s.ok()) return s;
  const float want = float(c->size() * (1 + k));
  for (int64_t i = 0; i < elements; ++i) {
    if (ts[0].data<float>()[i] != want) {
      return flowstate::Internal("element " + std::to_string(i) + " is " +
                                 std::to_string(ts[0].data<float>()[i]) + ", not " +
                                 std::to_string(want));
    }
  }
  return Status();
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    Say("ERROR usage: gloo_rank_main STORE PREFIX RANK SIZE ELEMENTS DEADLINE_MS");
    return 2;
  }
  flowstate::GlooCollectiveOptions o;
  o.store_address = argv[1];
  o.prefix = argv[2];
  o.rank = std::atoi(argv[3]);
  o.size = std::atoi(argv[4]);
  const int64_t elements = std::atoll(argv[5]);
  const int deadline_ms = std::atoi(argv[6]);
  o.timeout = std::chrono::milliseconds(20000);
  auto c = flowstate::GlooCollective::Create(o);
  if (!c.ok()) {
    Say("ERROR " + c.status().ToString());
    return 1;
  }
  Say("READY");
  Status s;
  for (int k = 0; s.ok(); ++k) {
    s = Round(c->get(), elements, k, deadline_ms);
    if (s.ok()) Say("ROUND " + std::to_string(k) + " OK");
  }
  std::string blamed;
  std::vector<int> failed = (*c)->failed_ranks(), alive;
  for (int r : failed) blamed += (blamed.empty() ? "" : ",") + std::to_string(r);
  Say("FAILED " + std::string(flowstate::CodeName(s.code())) + " " +
      (blamed.empty() ? "-" : blamed) + " " + s.message());
  for (int r = 0; r < o.size; ++r) {
    if (std::find(failed.begin(), failed.end(), r) == failed.end()) alive.push_back(r);
  }
  auto next = (*c)->Rebuild(o.prefix + "/rebuilt", alive);
  if (!next.ok()) {
    Say("ERROR rebuild: " + next.status().ToString());
    return 1;
  }
  Say("REBUILT " + std::to_string((*next)->rank()) + " " + std::to_string((*next)->size()));
  for (int k = 0; k < 5; ++k) {
    s = Round(next->get(), elements, k, deadline_ms);
    if (!s.ok()) {
      Say("ERROR rebuilt round " + std::to_string(k) + ": " + s.ToString());
      return 1;
    }
  }
  Say("REBUILT_OK");
  return 0;
}
