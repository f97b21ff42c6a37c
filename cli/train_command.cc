// `flowstate train`: runs a job file in-process with a progress bar and
// per-epoch evaluation; --metrics-out writes the final figures as JSON,
// --plot the loss and eval metrics against the step (cli/plot.h).
#include <nlohmann/json.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <fstream>
#include <sstream>
#include <thread>

#include "devices/device_pool.h"
#include "cli/commands.h"
#include "api/job_spec.h"
#include "cli/plot.h"
#include "cli/progress.h"
#include "jobs/step_history.h"
#include "jobs/training_job.h"
#include "jobs/training_loop.h"

namespace flowstate {
namespace {

constexpr const char* kUsage =
    "usage: flowstate train JOB.json [--metrics-out FILE] [--threads N] [--data-root DIR]\n"
    "                                [--plot FILE]\n"
    "  --metrics-out FILE  write steps, epochs, examples_per_sec, final_loss and the eval\n"
    "                      metrics as JSON\n"
    "  --threads N         thread budget (default: the machine's hardware threads)\n"
    "  --data-root DIR     where dataset paths resolve (default /usr/share/datasets)\n"
    "  --plot FILE         draw the loss and eval metrics against the step at the end\n"
    "                      (FILE.svg or FILE.png)\n";

double WallSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

int Fail(int code, const std::string& what, const Status& s) {
  std::fprintf(stderr, "flowstate train: %s%s%s\n", what.c_str(), what.empty() ? "" : ": ",
               s.message().c_str());
  return code;
}

// Errors in what the user wrote exit 2; failures while running exit 1.
int ExitCodeFor(const Status& s) {
  switch (s.code()) {
    case Code::kInvalidArgument:
    case Code::kNotFound:
    case Code::kPermissionDenied:
    case Code::kUnimplemented:
      return 2;
    default:
      return 1;
  }
}

}  // namespace

int TrainCommand(int argc, char** argv) {
  std::string job_path, metrics_out, plot_path, data_root = "/usr/share/datasets";
  int threads = int(std::max(1u, std::thread::hardware_concurrency()));
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    auto value = [&](const char* flag) -> const char* {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "flowstate train: %s needs a value\n%s", flag, kUsage);
        return nullptr;
      }
      return argv[++i];
    };
    if (a == "--metrics-out") {
      const char* v = value("--metrics-out");
      if (!v) return 2;
      metrics_out = v;
    } else if (a == "--threads") {
      const char* v = value("--threads");
      if (!v) return 2;
      threads = std::atoi(v);
      if (threads < 1) {
        std::fprintf(stderr, "flowstate train: --threads must be >= 1\n");
        return 2;
      }
    } else if (a == "--plot") {
      const char* v = value("--plot");
      if (!v) return 2;
      plot_path = v;
      Status ok = CheckPlotPath(plot_path);
      if (!ok.ok()) {
        std::fprintf(stderr, "flowstate train: --plot %s\n", ok.message().c_str());
        return 2;
      }
    } else if (a == "--data-root") {
      const char* v = value("--data-root");
      if (!v) return 2;
      data_root = v;
    } else if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "flowstate train: unknown flag %s\n%s", a.c_str(), kUsage);
      return 2;
    } else if (job_path.empty()) {
      job_path = a;
    } else {
      std::fprintf(stderr, "flowstate train: one job file only\n%s", kUsage);
      return 2;
    }
  }
  if (job_path.empty()) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  std::ifstream in(job_path);
  if (!in) {
    std::fprintf(stderr, "flowstate train: cannot read %s: %s\n", job_path.c_str(), std::strerror(errno));
    return 2;
  }
  std::stringstream text;
  text << in.rdbuf();
  StatusOr<JobSpec> spec = ParseJobSpec(text.str());
  if (!spec.ok()) return Fail(2, job_path, spec.status());

  DevicePoolOptions dpo;
  dpo.intra_op_threads = threads;
  StatusOr<std::unique_ptr<DevicePool>> pool = DevicePool::Create(dpo);
  if (!pool.ok()) return Fail(1, "", pool.status());
  TrainingJobOptions o;
  o.data_root = data_root;
  o.devices = pool->get();
  o.inter_op_threads = threads;
  StatusOr<std::unique_ptr<TrainingJob>> job = TrainingJob::Create(*spec, o);
  if (!job.ok()) return Fail(ExitCodeFor(job.status()), job_path, job.status());
  TrainingJob& j = **job;
  Status started = j.Start();
  if (!started.ok()) return Fail(ExitCodeFor(started), job_path, started);

  ProgressPrinter progress(stderr);
  const int64_t epochs = spec->input.epochs;
  const int64_t per_epoch = j.steps_per_epoch();
  const int64_t total = j.total_steps();
  std::fprintf(stderr, "training %s: %lld examples, %lld steps per epoch, %lld epoch(s), %d thread(s)\n",
               spec->name.empty() ? job_path.c_str() : spec->name.c_str(),
               (long long)j.train_examples(), (long long)per_epoch, (long long)epochs, threads);

  using Clock = std::chrono::steady_clock;
  double train_seconds = 0;
  int64_t examples = 0;
  std::deque<double> recent;
  std::map<std::string, double> metrics;
  int64_t last_epoch = 0;
  int64_t skipped = 0;  // NaN/Inf steps (on_nan "skip_step")
  TrainingLoop loop;  // the job manager's loop: the same evaluations
  StepHistory history;  // the server's rule for a job's history (--plot)
  while (loop.next() != TrainingLoop::Next::kFinish) {
    if (loop.next() == TrainingLoop::Next::kEvaluate) {
      StatusOr<std::map<std::string, double>> m = j.Evaluate();
      if (!m.ok()) return Fail(1, "evaluation", m.status());
      metrics = *m;
      history.AddEval(j.step(), last_epoch, metrics, WallSeconds());
      progress.Metrics(last_epoch, epochs, metrics);
      loop.AfterEvaluate();
      continue;
    }
    auto t0 = Clock::now();
    StatusOr<StepResult> r = j.Step();
    if (!r.ok()) {
      // A NaN/Inf step (on_nan "fail") names its step itself.
      return Fail(1, j.IsNanError(r.status()) ? "" : "step " + std::to_string(j.step() + 1), r.status());
    }
    const double step_seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    train_seconds += step_seconds;
    examples += r->examples;
    history.AddStep(r->step, r->epoch, r->skipped ? NAN : r->loss, r->examples, step_seconds, WallSeconds());
    if (r->skipped) {
      ++skipped;
      progress.Line(r->nan_message);
    } else {
      recent.push_back(r->loss);
    }
    if (recent.size() > 100) recent.pop_front();
    last_epoch = r->epoch;
    double rate = train_seconds > 0 ? double(examples) / train_seconds : 0;
    double eta = r->step > 0 ? train_seconds / double(r->step) * double(total - r->step) : NAN;
    int64_t in_epoch = (r->step - 1) % per_epoch + 1;
    progress.Update(r->epoch, epochs, in_epoch, per_epoch, r->loss, rate, eta);
    loop.AfterStep(spec->eval, *r);
  }
  double final_loss = 0;
  for (double l : recent) final_loss += l;
  final_loss /= double(std::max<size_t>(recent.size(), 1));
  double rate = train_seconds > 0 ? double(examples) / train_seconds : 0;
  progress.Line("done: " + std::to_string(j.step()) + " steps" +
                (skipped ? " (" + std::to_string(skipped) + " skipped: NaN/Inf)" : "") +
                ", final loss " + std::to_string(final_loss) + ", " +
                std::to_string(int64_t(rate)) + " examples/s");

  if (!plot_path.empty()) {
    const std::string name = spec->name.empty() ? job_path : spec->name;
    Status s = WriteHistoryPlot(history.View(name), "flowstate train " + name, plot_path);
    if (!s.ok()) return Fail(1, "--plot", s);
    progress.Line("plot: " + plot_path);
  }
  if (!metrics_out.empty()) {
    nlohmann::json out;
    out["steps"] = j.step();
    out["epochs"] = last_epoch + 1;
    out["examples_per_sec"] = rate;
    out["final_loss"] = final_loss;
    out["train_seconds"] = train_seconds;
    out["skipped_steps"] = skipped;
    for (const auto& [k, v] : metrics) out[k] = v;
    std::ofstream f(metrics_out);
    f << out.dump(2) << "\n";
    if (!f) {
      std::fprintf(stderr, "flowstate train: cannot write %s\n", metrics_out.c_str());
      return 1;
    }
  }
  return 0;
}

}  // namespace flowstate
