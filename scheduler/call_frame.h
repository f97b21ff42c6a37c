// CallFrame: the arguments (fed tensors) and return values (fetched
// tensors) of one step, read by _Arg kernels and written by _Retval kernels.
// Each index is written by one node, so no locking is needed for distinct
// indices; sizes are fixed at construction.
#ifndef FLOWSTATE_SCHEDULER_CALL_FRAME_H_
#define FLOWSTATE_SCHEDULER_CALL_FRAME_H_

#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

class CallFrame {
 public:
  CallFrame(std::vector<Tensor> args, int num_rets) : args_(std::move(args)), rets_(num_rets) {}

  const Tensor& arg(int i) const { return args_[i]; }
  int num_args() const { return int(args_.size()); }
  void set_ret(int i, Tensor t) { rets_[i] = std::move(t); }
  std::vector<Tensor>& rets() { return rets_; }

 private:
  std::vector<Tensor> args_;
  std::vector<Tensor> rets_;
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_CALL_FRAME_H_
