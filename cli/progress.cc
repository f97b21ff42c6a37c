#include "cli/progress.h"

#include <unistd.h>

#include <cmath>

namespace flowstate {

ProgressPrinter::ProgressPrinter(std::FILE* out)
    : out_(out), tty_(isatty(fileno(out)) != 0), last_(std::chrono::steady_clock::now()) {}

std::string FormatDuration(double seconds) {
  if (!std::isfinite(seconds) || seconds < 0) return "?";
  int64_t s = int64_t(seconds + 0.5);
  char buf[32];
  if (s >= 3600) {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld:%02lld", (long long)(s / 3600),
                  (long long)(s / 60 % 60), (long long)(s % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld:%02lld", (long long)(s / 60), (long long)(s % 60));
  }
  return buf;
}

void ProgressPrinter::Update(int64_t epoch, int64_t epochs, int64_t step_in_epoch,
                             int64_t steps_per_epoch, double loss, double examples_per_sec,
                             double eta_seconds) {
  auto now = std::chrono::steady_clock::now();
  double since = std::chrono::duration<double>(now - last_).count();
  bool epoch_done = step_in_epoch == steps_per_epoch;
  if (!epoch_done && since < (tty_ ? 0.1 : 5.0)) return;
  last_ = now;
  std::string eta = FormatDuration(eta_seconds);
  if (tty_) {
    const int width = 24;
    int filled = steps_per_epoch > 0 ? int(width * step_in_epoch / steps_per_epoch) : 0;
    std::string bar(size_t(filled), '=');
    if (filled < width) bar += '>';
    bar.resize(width, ' ');
    std::fprintf(out_, "\repoch %lld/%lld [%s] %lld/%lld  loss %.4f  %.0f ex/s  ETA %s\x1b[K",
                 (long long)(epoch + 1), (long long)epochs, bar.c_str(), (long long)step_in_epoch,
                 (long long)steps_per_epoch, loss, examples_per_sec, eta.c_str());
    drawn_ = true;
  } else {
    std::fprintf(out_, "epoch %lld/%lld step %lld/%lld loss %.4f %.0f ex/s ETA %s\n",
                 (long long)(epoch + 1), (long long)epochs, (long long)step_in_epoch,
                 (long long)steps_per_epoch, loss, examples_per_sec, eta.c_str());
  }
  std::fflush(out_);
}

void ProgressPrinter::Line(const std::string& text) {
  if (drawn_) std::fputs("\n", out_);
  drawn_ = false;
  std::fputs(text.c_str(), out_);
  std::fputs("\n", out_);
  std::fflush(out_);
}

void ProgressPrinter::Metrics(int64_t epoch, int64_t epochs,
                              const std::map<std::string, double>& metrics) {
  std::string s = "epoch " + std::to_string(epoch + 1) + "/" + std::to_string(epochs) + " eval:";
  for (const auto& [name, v] : metrics) {
    char buf[64];
    std::snprintf(buf, sizeof(buf), " %s %.4f", name.c_str(), v);
    s += buf;
  }
  Line(s);
}

}  // namespace flowstate
