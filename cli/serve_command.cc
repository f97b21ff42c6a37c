// `flowstate serve`: the long-running training service; `flowstate worker`:
// the same server for a host that only computes (gRPC port only: no REST,
// no public Sessions/Jobs/Ops, no store), a task of a cluster. Both take
// --check-config: print the configuration and cluster they would run with.
#include <signal.h>
#include <sys/resource.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/json_codec.h"
#include "checkpoints/store.h"
#include "config/config.h"
#include "devices/device_pool.h"
#include "cli/cluster_setup.h"
#include "cli/commands.h"
#include "server/grpc/grpc_server.h"
#include "server/rest/http_server.h"
#include "server/metrics.h"
#include "server/service.h"
#include "graph/allocator.h"
#include "graph/periodic_thread.h"

namespace flowstate {

namespace {

constexpr const char* kUsage =
    "usage: flowstate serve [--config FILE] [--http ADDR] [--grpc ADDR] [--data-dir DIR]\n"
    "                       [--data-root DIR] [--set section.key=VALUE] [--port-file FILE]\n"
    "                       [--cluster JSON] [--task TYPE:INDEX] [--check-config]\n"
    "Defaults come from the embedded config/flowstate.json, then the file, then\n"
    "FLOWSTATE_<SECTION>_<KEY> environment variables, then flags.\n"
    "A cluster: `cluster` and `task` in the configuration (--cluster\n"
    "'{\"worker\": [\"10.0.0.1:50051\", \"10.0.0.2:50051\"]}' --task worker:0), else\n"
    "TF_CONFIG, else MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK; devices are then named\n"
    "/job:<type>/replica:0/task:<index>/device:..., and GET /v1/cluster lists the tasks.\n"
    "--check-config: print the merged configuration and the resolved cluster as JSON\n"
    "and exit (0; 2 with the error), listening on nothing and opening nothing.\n";

// Bounds a shutdown: from construction, a second SIGINT or SIGTERM, or
// `timeout` without Done(), runs `flush` (the store writes out what it
// holds) and ends the process at once with status 1, whatever its other
// threads are doing. The signals must be blocked in every thread (this one
// takes them with sigtimedwait). Done() (or the destructor) ends the watch.
class ShutdownWatchdog {
 public:
  ShutdownWatchdog(const char* name, sigset_t signals, std::chrono::duration<double> timeout,
                   std::function<void()> flush)
      : thread_([this, name, signals, timeout, flush = std::move(flush)] {
          const auto deadline = std::chrono::steady_clock::now() +
                                std::chrono::duration_cast<std::chrono::steady_clock::duration>(timeout);
          const char* why = nullptr;
          while (!done_.load()) {
            const auto now = std::chrono::steady_clock::now();
            if (now >= deadline) {
              why = "the shutdown deadline (server.shutdown_timeout_s) passed";
              break;
            }
            // Wake every 50 ms to see Done().
            timespec tick{0, 50'000'000};
            if (sigtimedwait(&signals, nullptr, &tick) > 0) {
              why = "a second signal came";
              break;
            }
          }
          if (why == nullptr) return;
          std::fprintf(stderr, "%s: %s: writing out the store and exiting now\n", name, why);
          flush();
          std::fflush(stderr);
          std::_Exit(1);
        }) {}
  ~ShutdownWatchdog() { Done(); }
  void Done() {
    done_.store(true);
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::atomic<bool> done_{false};
  std::thread thread_;
};

constexpr const char* kWorkerUsage =
    "usage: flowstate worker [--config FILE] [--grpc ADDR] [--set section.key=VALUE]\n"
    "                        [--port-file FILE] [--cluster JSON] [--task TYPE:INDEX]\n"
    "                        [--check-config]\n"
    "A task of a cluster that only computes: the gRPC port alone (the worker service,\n"
    "Devices, Cluster, health), no REST API, no jobs, no store. Configured as\n"
    "`flowstate serve` (flowstate serve --help); the cluster comes from `cluster` and\n"
    "`task`, TF_CONFIG or MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK, and is required.\n";

// The machine's physical memory in bytes, or the cgroup's memory limit when
// that is smaller (a container); 0 when unknown.
int64_t PhysicalMemoryBytes() {
  int64_t bytes = 0;
  long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGE_SIZE);
  if (pages > 0 && page > 0) bytes = int64_t(pages) * int64_t(page);
  // cgroup v2, then v1 ("max" or a huge number: no limit).
  for (const char* f : {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"}) {
    std::ifstream in(f);
    std::string text;
    if (!(in >> text)) continue;
    if (text != "max") {
      try {
        int64_t limit = std::stoll(text);
        if (limit > 0 && (bytes == 0 || limit < bytes)) bytes = limit;
      } catch (...) {
      }
    }
    break;
  }
  return bytes;
}

// Raises the soft limit on open files to the hard one, so that
// http.max_connections (event streams included) is not cut short by the
// usual soft limit of 1024 descriptors; warns when even the hard limit is
// below what the configured connections need.
void RaiseOpenFileLimit(int max_connections) {
  rlimit rl{};
  if (getrlimit(RLIMIT_NOFILE, &rl) != 0) return;
  if (rl.rlim_cur < rl.rlim_max) {
    rl.rlim_cur = rl.rlim_max;
    setrlimit(RLIMIT_NOFILE, &rl);
    getrlimit(RLIMIT_NOFILE, &rl);
  }
  // The store, the gRPC connections and the dataset files need some too.
  const rlim_t wanted = rlim_t(max_connections) + 256;
  if (rl.rlim_cur != RLIM_INFINITY && rl.rlim_cur < wanted) {
    std::fprintf(stderr,
                 "flowstate serve: warning: the open-file limit (%llu) is below what "
                 "http.max_connections=%d needs (about %llu); raise `ulimit -n`\n",
                 static_cast<unsigned long long>(rl.rlim_cur), max_connections,
                 static_cast<unsigned long long>(wanted));
  }
}

// --check-config's output: {"config": the merged configuration, "cluster":
// null or {"jobs": {...}, "task": {"type", "index"}, "registry": "..."}}.
std::string CheckConfigJson(const std::string& merged, const ClusterSpec& spec) {
  nlohmann::ordered_json out;
  out["config"] = nlohmann::ordered_json::parse(merged);
  if (spec.empty()) {
    out["cluster"] = nullptr;
  } else {
    nlohmann::ordered_json c;
    c["jobs"] = spec.jobs;
    c["task"] = {{"type", spec.self.job}, {"index", spec.self.index}};
    c["registry"] = spec.registry;
    out["cluster"] = std::move(c);
  }
  return out.dump(2);
}

enum class Mode { kServe, kWorker };

int RunServer(int argc, char** argv, Mode mode) {
  const bool worker = mode == Mode::kWorker;
  const char* const name = worker ? "flowstate worker" : "flowstate serve";
  const char* const usage = worker ? kWorkerUsage : kUsage;
  std::vector<std::string> args;
  std::string port_file;
  bool check_config = false;
  for (int i = 0; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "-h" || a == "--help") {
      std::fputs(usage, stdout);
      return 0;
    }
    if (a == "--check-config") {
      check_config = true;
      continue;
    }
    if (a == "--port-file") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "%s: --port-file needs a file\n", name);
        return 2;
      }
      port_file = argv[++i];
      continue;
    }
    args.push_back(a);
  }
  config::ServerConfig cfg;
  StatusOr<std::string> loaded = config::LoadServerConfig(args, [](const char* n) { return std::getenv(n); }, &cfg);
  if (!loaded.ok()) {
    std::fprintf(stderr, "%s: %s\n%s", name, loaded.status().message().c_str(), usage);
    return 2;
  }

  // The cluster, checked in full before anything starts or listens.
  StatusOr<ClusterSpec> spec = ResolveClusterSpec(cfg);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s: bad cluster spec: %s\n", name, spec.status().message().c_str());
    return 2;
  }
  if (worker && spec->empty()) {
    std::fprintf(stderr,
                 "%s: no cluster: give `cluster` and `task` (--cluster, --task), TF_CONFIG, or "
                 "MASTER_ADDR/MASTER_PORT/WORLD_SIZE/RANK\n",
                 name);
    return 2;
  }
  if (check_config) {
    // What this command would run with (docker/ and its tests read it).
    std::printf("%s\n", CheckConfigJson(*loaded, *spec).c_str());
    return 0;
  }

  // Before anything reads client JSON.
  if (Status s = api::SetMaxJsonDepth(cfg.limits.max_json_depth); !s.ok()) {
    std::fprintf(stderr, "%s: limits.max_json_depth: %s\n", name, s.message().c_str());
    return 2;
  }

  // Before any thread starts or anything uses gRPC.
  if (Status s = SetGrpcPollStrategy(cfg.grpc.poll_strategy); !s.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, s.ToString().c_str());
    return 2;
  }

  // Block the signals in every thread (gRPC's and Beast's inherit the mask);
  // this thread waits for them.
  sigset_t signals;
  sigemptyset(&signals);
  sigaddset(&signals, SIGINT);
  sigaddset(&signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &signals, nullptr);
  signal(SIGPIPE, SIG_IGN);

  SetHostHugePageMinBytes(size_t(cfg.devices.huge_pages_min_bytes));
  DevicePoolOptions dpo;
  dpo.num_cpu_devices = cfg.devices.cpu_devices;
  dpo.intra_op_threads = cfg.devices.intra_op_threads;
  if (!spec->empty()) {  // devices named /job:<job>/replica:0/task:<index>/...
    dpo.job = spec->self.job;
    dpo.task = spec->self.index;
  }
  // What tensors may hold in all: devices.memory_limit_bytes, else a share
  // of the machine's (or the container's) memory; each CPU device gets an
  // equal part.
  const int64_t memory_limit =
      cfg.devices.memory_limit_bytes > 0
          ? cfg.devices.memory_limit_bytes
          : int64_t(double(PhysicalMemoryBytes()) * cfg.devices.memory_limit_fraction);
  dpo.cpu_memory_limit_bytes = memory_limit / std::max(1, cfg.devices.cpu_devices);
  StatusOr<std::unique_ptr<DevicePool>> devices = DevicePool::Create(dpo);
  if (!devices.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, devices.status().ToString().c_str());
    return 1;
  }
  // The cluster's services on the gRPC server (before it starts) and its
  // view for GET /v1/cluster.
  GrpcServerOptions go;
  std::unique_ptr<ClusterRuntime> cluster;
  if (!spec->empty()) {
    StatusOr<std::unique_ptr<ClusterRuntime>> rt = ClusterRuntime::Prepare(*spec, cfg, &go);
    if (!rt.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, rt.status().ToString().c_str());
      return 1;
    }
    cluster = std::move(*rt);
  }
  // The durable store: one per data directory; a second server on the same
  // directory is refused here (RocksDB's lock), before anything is served.
  // (`flowstate worker` keeps nothing: no store, no jobs to recover.)
  checkpoints::StoreOptions sto;
  if (const char* f = std::getenv("FLOWSTATE_TEST_FAIL_WRITES_FILE"); f != nullptr && *f != '\0') {
    // Test hook (disk errors): while this file exists, every write of the
    // store fails with an I/O error.
    std::string path = f;
    sto.fail_writes = [path] { return ::access(path.c_str(), F_OK) == 0; };
  }
  StatusOr<std::unique_ptr<checkpoints::Store>> store = std::unique_ptr<checkpoints::Store>();
  if (!worker) store = checkpoints::Store::Open(cfg.data_dir, sto);
  if (!store.ok()) {
    std::fprintf(stderr, "%s: %s\n", name, store.status().message().c_str());
    return 1;
  }
  if (Status ws = worker ? Status() : (*store)->WriteStatus(); !ws.ok()) {
    // A full disk: served read-only; writes resume once there is room.
    std::fprintf(stderr, "flowstate serve: warning: %s\n", ws.ToString().c_str());
  }
  Metrics metrics;
  ServiceOptions so;
  so.devices = devices->get();
  so.data_root = cfg.data_root;
  so.max_sessions = cfg.sessions.max_sessions;
  so.session_idle_timeout = std::chrono::seconds(int64_t(cfg.sessions.idle_timeout_seconds));
  so.max_step = std::chrono::milliseconds(cfg.sessions.max_step_ms);
  so.max_tensor_bytes = cfg.limits.max_tensor_bytes;
  so.max_event_streams = cfg.limits.max_event_streams;
  so.max_model_bytes = cfg.limits.max_model_bytes;
  so.max_models = cfg.limits.max_models;
  so.max_dataset_bytes = cfg.limits.max_dataset_bytes;
  so.max_datasets = cfg.limits.max_datasets;
  so.max_shape_bytes = cfg.limits.max_shape_bytes;
  so.jobs.max_running = cfg.jobs.max_running;
  so.jobs.workers = cfg.jobs.workers;
  so.jobs.inter_op_threads = cfg.jobs.inter_op_threads;
  so.jobs.max_step_events_per_second = cfg.jobs.max_step_events_per_second;
  so.jobs.retention_max_finished = cfg.jobs.retention_max_finished;
  so.jobs.retention_seconds = double(cfg.jobs.retention_seconds);
  so.jobs.observer = metrics.job_observer();
  so.jobs.store = store->get();
#ifdef FLOWSTATE_FAULT_POINTS
  if (const char* at = std::getenv("FLOWSTATE_TEST_STOP_AT"); at != nullptr && *at != '\0') {
    // Test hook (crash tests; only in builds with FLOWSTATE_FAULT_POINTS,
    // never reachable by a request): FLOWSTATE_TEST_STOP_AT=<point>[@<step>]
    // names a fault point of jobs/fault_points.h (and optionally the step
    // a job must be at). The first time a job reaches it the server says so
    // on stderr and stops itself with SIGSTOP, every thread at once, so
    // that the test SIGKILLs it exactly there.
    std::string spec = at;
    std::string point = spec;
    int64_t step = -1;
    if (size_t k = spec.rfind('@'); k != std::string::npos) {
      point = spec.substr(0, k);
      step = std::atoll(spec.c_str() + k + 1);
    }
    auto fired = std::make_shared<std::atomic<bool>>(false);
    so.jobs.fault_point = [point, step, fired](std::string_view p, int64_t at_step) {
      if (p != point || (step >= 0 && at_step != step) || fired->exchange(true)) return;
      std::fprintf(stderr, "flowstate serve: test hook: stopped at %s (step %lld)\n", point.c_str(),
                   (long long)at_step);
      std::fflush(stderr);
      ::raise(SIGSTOP);
    };
  }
#endif
  if (cluster != nullptr) {
    so.task_job = spec->self.job;
    so.task_index = spec->self.index;
    ClusterRuntime* rt = cluster.get();
    so.cluster = [rt] { return rt->View(); };
    so.cluster_view = [rt] { return rt->cluster_view(); };
    // Every task serves the collective store on its gRPC port: a job's
    // replicas on other tasks meet in this (its master) task's.
    so.jobs.collective_store = [rt] {
      ClusterSpec spec = rt->spec();
      StatusOr<std::string> a = spec.address(spec.self);
      return a.ok() ? *a : std::string();
    };
    so.jobs.drop_collective_prefix = [rt](const std::string& p) { rt->DropCollectivePrefix(p); };
  }
  Service service(so);
  if (Status rs = worker ? Status() : service.jobs().Recover(); !rs.ok()) {
    std::fprintf(stderr, "%s: reloading the jobs of %s: %s\n", name, cfg.data_dir.c_str(),
                 rs.ToString().c_str());
    return 1;
  }
  if (size_t n = service.jobs().List().size(); n > 0) {
    std::fprintf(stderr, "%s: reloaded %zu job(s) from %s\n", name, n, cfg.data_dir.c_str());
  }
  metrics.SetScrapeHook([&service](Metrics* m) {
    for (const auto& [state, n] : service.jobs().CountByState()) {
      m->SetJobsByState(std::string(JobStateName(state)), n);
    }
    m->SetQueueDepth(service.jobs().queue_depth());
    m->SetEventStreams(service.num_event_streams());
    for (const DeviceInfo& d : service.ListLocalDevices()) m->SetDeviceMemory(d.name, double(d.bytes_in_use), double(d.bytes_cached));
  });

  RaiseOpenFileLimit(cfg.http.max_connections);
  HttpServerOptions ho;
  ho.address = cfg.http.address;
  ho.threads = cfg.http.threads;
  ho.body_limit_bytes = cfg.http.body_limit_bytes;
  ho.unauthenticated_body_limit_bytes = cfg.http.unauthenticated_body_limit_bytes;
  ho.max_connections = cfg.http.max_connections;
  ho.read_timeout_seconds = cfg.http.read_timeout_seconds;
  ho.idle_timeout_seconds = cfg.http.idle_timeout_seconds;
  ho.max_pipelined_requests = cfg.http.max_pipelined_requests;
  ho.tokens = cfg.auth.tokens;
  ho.open_routes = cfg.auth.open_routes;
  ho.max_tensor_bytes = cfg.limits.max_tensor_bytes;
  ho.log_requests = cfg.log.requests;
  ho.inline_below_us = cfg.http.inline_below_us;
  ho.spin_us = cfg.http.spin_us;
  ho.server_timing = cfg.http.server_timing;
  StatusOr<std::unique_ptr<HttpServer>> http = std::unique_ptr<HttpServer>();
  if (!worker) http = HttpServer::Start(&service, &metrics, ho);
  if (!http.ok()) {
    std::fprintf(stderr, "%s: http: %s\n", name, http.status().message().c_str());
    return 1;
  }
  go.public_api = !worker;
  go.address = cfg.grpc.address;
  go.max_message_bytes = cfg.grpc.max_message_bytes;
  go.max_concurrent_streams = cfg.grpc.max_concurrent_streams;
  go.memory_limit_bytes = cfg.grpc.memory_limit_bytes;
  go.tokens = cfg.auth.tokens;
  go.max_tensor_bytes = cfg.limits.max_tensor_bytes;
  go.handler_threads = cfg.grpc.handler_threads;
  go.inline_below_us = cfg.grpc.inline_below_us;
  go.spin_us = cfg.grpc.spin_us;
  go.server_timing = cfg.grpc.server_timing;
  StatusOr<std::unique_ptr<GrpcServer>> grpc = GrpcServer::Start(&service, &metrics, go);
  if (!grpc.ok()) {
    std::fprintf(stderr, "%s: grpc: %s\n", name, grpc.status().message().c_str());
    if (*http != nullptr) (*http)->Stop();
    return 1;
  }
  // The cluster's runtime: a MASTER_* cluster first learns its tasks'
  // addresses from task 0's registry (within cluster_options.join_timeout_seconds).
  // A signal meanwhile stops the wait (a pod deleted while its world assembles).
  std::atomic<bool> cancel{false};
  if (cluster != nullptr) {
    Status cs;
    std::thread starter([&] { cs = cluster->Start((*grpc)->port(), devices->get(), &cancel); });
    std::atomic<bool> started{false};
    std::thread watcher([&] {
      const timespec tick{0, 100 * 1000 * 1000};
      while (!started.load()) {
        if (sigtimedwait(&signals, nullptr, &tick) > 0) {
          cancel = true;
          break;
        }
      }
    });
    starter.join();
    started = true;
    watcher.join();
    if (!cs.ok()) {
      std::fprintf(stderr, "%s: %s\n", name, cs.ToString().c_str());
      if (*http != nullptr) (*http)->Stop();
      (*grpc)->Stop();
      service.Shutdown();
      return cancel.load() ? 0 : 1;
    }
    std::fprintf(stderr, "%s: task %s of a cluster of %d task(s)\n", name,
                 spec->self.DeviceNamePrefix().c_str(), cluster->spec().num_tasks());
  }
  const int http_port = *http != nullptr ? (*http)->port() : 0;
  std::string host = cfg.http.address.substr(0, cfg.http.address.rfind(':'));
  std::string ghost = cfg.grpc.address.substr(0, cfg.grpc.address.rfind(':'));
  if (worker) {
    std::fprintf(stderr, "%s: grpc %s:%d  %s\n", name, ghost.c_str(), (*grpc)->port(),
                 cfg.auth.tokens.empty() ? "no auth" : "bearer-token auth");
  } else {
    std::fprintf(stderr, "%s: http://%s:%d  grpc %s:%d  data root %s  %s\n", name, host.c_str(), http_port,
                 ghost.c_str(), (*grpc)->port(), cfg.data_root.c_str(),
                 cfg.auth.tokens.empty() ? "no auth" : "bearer-token auth");
  }
  if (!port_file.empty()) {
    std::ofstream f(port_file + ".tmp");
    f << "{\"http\": " << http_port << ", \"grpc\": " << (*grpc)->port() << "}\n";
    f.close();
    std::rename((port_file + ".tmp").c_str(), port_file.c_str());
  }

  // Idle sessions are closed in the background.
  PeriodicThread reaper(std::chrono::seconds(5), [&] {
    service.Reap();
    service.jobs().EnforceRetention();  // jobs.retention_seconds
  });

  int sig = SIGTERM;
  if (!cancel.load()) sigwait(&signals, &sig);  // (else it came while the cluster assembled)
  std::fprintf(stderr, "%s: %s received, shutting down (at most %g s; a second signal forces it)\n",
               name, sig == SIGINT ? "SIGINT" : "SIGTERM", cfg.server.shutdown_timeout_s);
  // The shutdown's deadline: a second signal, or shutdown_timeout_s, ends
  // the process whatever still runs (a kernel that never reaches a
  // cancellation point, a job's checkpoint on a stalled disk) -- once the
  // store has written out what it holds: every committed write is already
  // durable (synced), the flush leaves no log to replay.
  ShutdownWatchdog watchdog(name, signals, std::chrono::duration<double>(cfg.server.shutdown_timeout_s),
                            [&store] {
                              if (*store != nullptr) (void)(*store)->Flush();
                            });
  // Sessions first: their running steps (a blocked dequeue, an endless
  // loop) end at once, which frees the frontends' step threads to stop.
  service.CloseSessions();
  if (*http != nullptr) (*http)->Stop();
  (*grpc)->Stop();
  reaper.Stop();
  service.Shutdown();  // jobs stop between steps and are checkpointed as their policy says
  watchdog.Done();
  std::fprintf(stderr, "%s: stopped\n", name);
  return 0;
}

}  // namespace

int ServeCommand(int argc, char** argv) { return RunServer(argc, argv, Mode::kServe); }

int WorkerCommand(int argc, char** argv) { return RunServer(argc, argv, Mode::kWorker); }

}  // namespace flowstate
