// ProgressPrinter: the training progress line of `flowstate train` and
// `flowstate jobs watch` — a bar redrawn in place on a terminal, plain lines
// (at most one every few seconds, plus one per epoch) otherwise. Not
// thread-safe: one thread prints.
#ifndef FLOWSTATE_CLI_PROGRESS_H_
#define FLOWSTATE_CLI_PROGRESS_H_

#include <chrono>
#include <cstdio>
#include <map>
#include <string>

namespace flowstate {

class ProgressPrinter {
 public:
  // Writes to `out`; draws a bar when `out` is a terminal.
  explicit ProgressPrinter(std::FILE* out);

  // epoch is 0-based; step_in_epoch counts from 1; loss of the last step;
  // eta_seconds NaN when unknown. Redraws at most 10 times a second (every
  // 5 s without a terminal), and always at an epoch's last step.
  void Update(int64_t epoch, int64_t epochs, int64_t step_in_epoch, int64_t steps_per_epoch,
              double loss, double examples_per_sec, double eta_seconds);
  // A finished line ("epoch 2/3: loss 0.31, accuracy 0.874").
  void Line(const std::string& text);
  void Metrics(int64_t epoch, int64_t epochs, const std::map<std::string, double>& metrics);

  bool is_terminal() const { return tty_; }

 private:
  std::FILE* out_;
  bool tty_;
  bool drawn_ = false;
  std::chrono::steady_clock::time_point last_;
};

// "1:02:03", "4:05".
std::string FormatDuration(double seconds);

}  // namespace flowstate

#endif  // FLOWSTATE_CLI_PROGRESS_H_
