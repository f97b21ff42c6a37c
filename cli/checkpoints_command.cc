// `flowstate checkpoints`: a job's checkpoints straight from a data
// directory, for when no server runs (the store admits one process at a
// time): list them, export one to the portable single-file format
// (checkpoints/FORMAT.md) or as a NumPy .npz (--format npz,
// checkpoints/npz.h), import a .fsck file. While a server runs, its routes
// do the same: GET /v1/jobs/{id}/checkpoints, GET
// /v1/jobs/{id}/checkpoints/export?step=N[&format=npz], POST
// /v1/checkpoints/import.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <optional>
#include <string>
#include <vector>

#include "checkpoints/npz.h"
#include "checkpoints/store.h"
#include "cli/commands.h"

namespace flowstate {
namespace {

constexpr const char* kUsage =
    "usage: flowstate checkpoints list JOB [--data-dir DIR]\n"
    "       flowstate checkpoints export JOB STEP FILE [--format fsck|npz] [--data-dir DIR]\n"
    "       flowstate checkpoints import FILE [--data-dir DIR]\n"
    "Reads and writes the data directory (default ./var/flowstate) directly, so no\n"
    "server may be running on it; with a server, use its routes instead:\n"
    "  curl -o FILE 'http://HOST/v1/jobs/JOB/checkpoints/export?step=STEP[&format=npz]'\n"
    "  curl --data-binary @FILE http://HOST/v1/checkpoints/import\n"
    "--format fsck (the default) writes Flowstate's portable file, the one import\n"
    "reads back; --format npz a NumPy archive, one array per variable by name\n"
    "(numpy.load(FILE)[\"dense1/w\"]; bfloat16 is written as float32).\n"
    "An imported checkpoint gets the id import-N: start a job from it with\n"
    "  \"init_from\": {\"job\": \"import-N\", \"step\": STEP}\n";

// Shared with the job manager's imports (server/job_manager.cc).
constexpr const char* kImportCounterKey = "server.next_import_id";

int Fail(const Status& s) {
  std::fprintf(stderr, "flowstate checkpoints: %s\n", s.message().c_str());
  return 1;
}

}  // namespace

int CheckpointsCommand(int argc, char** argv) {
  std::string data_dir = "./var/flowstate";
  if (const char* env = std::getenv("FLOWSTATE_DATA_DIR"); env != nullptr && *env) data_dir = env;
  std::vector<std::string> args;
  std::optional<std::string> format_text;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--data-dir") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "flowstate checkpoints: --data-dir needs a directory\n%s", kUsage);
        return 2;
      }
      data_dir = argv[++i];
      continue;
    }
    if (a == "--format") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "flowstate checkpoints: --format needs fsck or npz\n%s", kUsage);
        return 2;
      }
      format_text = argv[++i];
      continue;
    }
    args.push_back(a);
  }
  const std::string verb = args.empty() ? "" : args[0];
  const size_t want = verb == "list" ? 2 : verb == "export" ? 4 : verb == "import" ? 2 : 0;
  if (want == 0 || args.size() != want) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  checkpoints::ExportFormat format = checkpoints::ExportFormat::kFsck;
  if (format_text) {
    if (verb != "export") {
      std::fprintf(stderr, "flowstate checkpoints: --format applies to export only\n");
      return 2;
    }
    StatusOr<checkpoints::ExportFormat> f = checkpoints::ParseExportFormat(*format_text);
    if (!f.ok()) {
      std::fprintf(stderr, "flowstate checkpoints: --%s\n", f.status().message().c_str());
      return 2;
    }
    format = *f;
  }
  int64_t step = 0;
  if (verb == "export") {
    char* end = nullptr;
    step = std::strtoll(args[2].c_str(), &end, 10);
    if (args[2].empty() || *end != '\0' || step < 0) {
      std::fprintf(stderr, "flowstate checkpoints: STEP must be an integer >= 0, got '%s'\n", args[2].c_str());
      return 2;
    }
  }
  checkpoints::StoreOptions so;
  so.create_if_missing = verb == "import";
  StatusOr<std::unique_ptr<checkpoints::Store>> store = checkpoints::Store::Open(data_dir, so);
  if (!store.ok()) return Fail(store.status());
  checkpoints::Store& s = **store;

  if (verb == "list") {
    StatusOr<std::vector<checkpoints::CheckpointInfo>> list = s.ListCheckpoints(args[1]);
    if (!list.ok()) return Fail(list.status());
    if (list->empty()) {
      std::fprintf(stderr, "flowstate checkpoints: '%s' has no checkpoint in %s\n", args[1].c_str(),
                   data_dir.c_str());
      return 1;
    }
    std::printf("%10s  %-24s  %12s  %7s\n", "STEP", "TIME (UTC)", "BYTES", "TENSORS");
    for (const auto& c : *list) {
      std::time_t t = std::time_t(c.unix_micros / 1000000);
      char when[32];
      std::strftime(when, sizeof when, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
      std::printf("%10lld  %-24s  %12lld  %7lld\n", (long long)c.step, when, (long long)c.bytes,
                  (long long)c.num_tensors);
    }
    return 0;
  }
  if (verb == "export") {
    StatusOr<checkpoints::Snapshot> snap = s.ReadCheckpoint(args[1], step);
    if (!snap.ok()) return Fail(snap.status());
    std::vector<std::string> converted;
    Status st = checkpoints::ExportSnapshotAs(*snap, args[3], format, &converted);
    if (!st.ok()) return Fail(st);
    std::fprintf(stderr, "flowstate checkpoints: wrote %s (job %s, step %lld, %zu tensors, %s)\n",
                 args[3].c_str(), args[1].c_str(), (long long)step, snap->tensors.size(),
                 std::string(checkpoints::ExportFormatName(format)).c_str());
    for (const std::string& name : converted) {
      std::fprintf(stderr, "flowstate checkpoints: '%s' is bfloat16, which numpy lacks: written as float32\n",
                   name.c_str());
    }
    return 0;
  }
  // import
  StatusOr<checkpoints::Snapshot> snap = checkpoints::ImportSnapshot(args[1]);
  if (!snap.ok()) return Fail(snap.status());
  int64_t next = 1;
  if (StatusOr<std::string> c = s.GetRecord(checkpoints::Store::Kind::kMeta, kImportCounterKey); c.ok()) {
    next = std::max<int64_t>(1, std::atoll(c->c_str()));
  }
  const std::string id = "import-" + std::to_string(next);
  Status st = s.PutRecord(checkpoints::Store::Kind::kMeta, kImportCounterKey, std::to_string(next + 1));
  if (st.ok()) st = s.WriteCheckpoint(id, *snap);
  if (!st.ok()) return Fail(st);
  std::printf("%s %lld\n", id.c_str(), (long long)snap->step);
  std::fprintf(stderr,
               "flowstate checkpoints: imported %s as %s at step %lld; start a job from it with "
               "\"init_from\": {\"job\": \"%s\", \"step\": %lld}\n",
               args[1].c_str(), id.c_str(), (long long)snap->step, id.c_str(), (long long)snap->step);
  return 0;
}

}  // namespace flowstate
