// CallFrame: the arguments (fed tensors) and return values (fetched
// tensors) of one step, read by _Arg kernels and written by _Retval kernels,
// and the step's stacks (StackPush/StackPop: the forward values a while
// loop's gradient keeps per iteration). Each argument and return index is
// written by one node, so those need no locking; the stacks are guarded by
// a mutex and may be used by many kernels at once. The frame owns every
// tensor it holds; what is still on a stack is freed with the frame, at the
// end of the step.
#ifndef FLOWSTATE_SCHEDULER_CALL_FRAME_H_
#define FLOWSTATE_SCHEDULER_CALL_FRAME_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/mutex.h"
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

  // Keeps `value` under (stack, key) until popped or the step ends; a
  // second push of one key replaces the value.
  void StackPush(const std::string& stack, std::vector<int32_t> key, Tensor value) {
    MutexLock l(stacks_mu_);
    stacks_[{stack, std::move(key)}] = std::move(value);
  }
  // Removes and returns the value under (stack, key); NOT_FOUND when none.
  StatusOr<Tensor> StackPop(const std::string& stack, const std::vector<int32_t>& key) {
    MutexLock l(stacks_mu_);
    auto it = stacks_.find({stack, key});
    if (it == stacks_.end()) return NotFound("stack '" + stack + "' holds no value for this key");
    Tensor t = std::move(it->second);
    stacks_.erase(it);
    return t;
  }

 private:
  std::vector<Tensor> args_;
  std::vector<Tensor> rets_;
  Mutex stacks_mu_;
  std::map<std::pair<std::string, std::vector<int32_t>>, Tensor> stacks_
      ABSL_GUARDED_BY(stacks_mu_);
};

}  // namespace flowstate

#endif  // FLOWSTATE_SCHEDULER_CALL_FRAME_H_
