// The service's overhead: round-trip latency of a tiny session Run
// (Add of two fed float32 scalars) over REST (one keep-alive connection,
// Boost.Beast client) and over gRPC (a sync stub, and an async stub that
// polls its queue), next to the same Run in-process (Service::RunSession);
// requests/s with wrk at 1, 16 and 64 connections against the Run route; and
// a batch-1 Fashion-MNIST MLP predict over REST (JSON and b64 input) and
// gRPC: its round trip against the in-process JobManager::Predict, and the
// server's own share of each request from the Server-Timing it answers with
// (total - step over the round trip). Next to the Run figures it prints how
// often a CPU halted per call and the guest's haltpoll setting, which decide
// what a sleeping client's wake-up costs on a virtual machine.
// The servers are the real HttpServer and GrpcServer over one Service with
// the embedded defaults (2 HTTP threads, gRPC's "poll" engine), in a child
// process forked at the start (ForkServers); the clients and the in-process
// references run in this one. Rounds alternate the paths; each round-trip
// figure is the best round's p50 (p99 of that round), since other work on
// the machine only adds time.
//
//   service_bench [--rounds 5] [--requests 2000] [--wrk-seconds 3] [--no-wrk] [--no-predict]
//                 [--halt-poll-ns NS]
// --halt-poll-ns (root, a guest with the haltpoll cpuidle governor) measures
// the sleeping clients' Runs a second time in each round with the guest's
// guest_halt_poll_ns at NS, and puts the machine's own value back after each
// round and when the process ends.
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <functional>
#include <grpcpp/grpcpp.h>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <thread>
#include <type_traits>
#include <vector>

#include "api/flowstate.grpc.pb.h"
#include "api/json_codec.h"
#include "bench/bench_util.h"
#include "bench/cpu_idle.h"
#include "bench/service_clients.h"
#include "devices/device_pool.h"
#include "api/proto_convert.h"
#include "server/rest/http_bodies.h"
#include "server/grpc/grpc_server.h"
#include "server/rest/http_routes.h"
#include "server/rest/http_server.h"
#include "server/metrics.h"
#include "server/service.h"

namespace flowstate {
namespace {

using Clock = std::chrono::steady_clock;
namespace pb = ::flowstate::v1;

using bench::Die;
using bench::PollingRestClient;
using bench::RestClient;
using bench::TcpEcho;
using bench::WriteAll;

struct Percentiles {
  double p50 = 0, p99 = 0;
  // Times a CPU of this machine entered a sleeping idle state per call
  // (bench::IdleEntries), or -1 where the kernel does not say.
  double idle_entries_per_call = -1;
};

// The percentiles of n calls of fn after a warm-up; fn returning a duration
// reports the part it timed itself.
template <typename Fn>
Percentiles Measure(int n, const Fn& fn) {
  for (int i = 0; i < std::min(n / 10, 200); ++i) fn();  // warm-up
  std::vector<double> us(static_cast<size_t>(n));
  const int64_t idle_before = bench::IdleEntries();
  for (int i = 0; i < n; ++i) {
    auto t0 = Clock::now();
    Clock::duration took;
    if constexpr (std::is_same_v<decltype(fn()), void>) {
      fn();
      took = Clock::now() - t0;
    } else {
      took = fn();
    }
    us[size_t(i)] = std::chrono::duration<double, std::micro>(took).count();
  }
  const int64_t idle_after = bench::IdleEntries();
  std::sort(us.begin(), us.end());
  Percentiles p{us[size_t(n / 2)], us[std::min(size_t(n) - 1, size_t(n * 0.99))]};
  if (idle_before >= 0 && idle_after >= idle_before) {
    p.idle_entries_per_call = double(idle_after - idle_before) / n;
  }
  return p;
}

// Keeps in *best the round with the lower p50 (the least disturbed).
void KeepBest(Percentiles* best, const Percentiles& round) {
  if (round.p50 < best->p50) *best = round;
}

// Runs wrk; returns requests/s and sets the error count (non-2xx + socket errors).
double RunWrk(int port, int connections, int seconds, const std::string& lua, int64_t* errors) {
  int threads = std::min(connections, 2);
  std::string cmd = "wrk -t" + std::to_string(threads) + " -c" + std::to_string(connections) +
                    " -d" + std::to_string(seconds) + "s -s " + lua + " http://127.0.0.1:" +
                    std::to_string(port) + "/ 2>&1";
  FILE* p = popen(cmd.c_str(), "r");
  if (!p) Die("cannot run wrk");
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = fread(buf, 1, sizeof(buf), p)) > 0) out.append(buf, n);
  int rc = pclose(p);
  if (rc != 0) Die("wrk failed: " + out);
  double rps = 0;
  *errors = 0;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("Requests/sec:", 0) == 0) rps = std::atof(line.c_str() + 13);
    if (line.find("Non-2xx or 3xx responses:") != std::string::npos) {
      *errors += std::atoll(line.substr(line.find(':') + 1).c_str());
    }
    if (line.find("Socket errors:") != std::string::npos) {
      // "Socket errors: connect 0, read 0, write 0, timeout 0"
      for (const char* k : {"connect ", "read ", "write ", "timeout "}) {
        size_t at = line.find(k);
        if (at != std::string::npos) *errors += std::atoll(line.c_str() + at + std::strlen(k));
      }
    }
  }
  if (rps == 0) Die("no Requests/sec in wrk's output: " + out);
  return rps;
}

// The servers under test, in a child process forked before this one starts
// any thread -- as a user's server would be, apart from its clients: they
// share no gRPC poller (gRPC's epoll engine lets any thread of a process
// poll every socket of it), allocator or run queue. The child serves the
// embedded defaults' HttpServer and GrpcServer (2 HTTP threads) over one
// Service until this process closes `ctl` or exits.
struct ServerProcess {
  pid_t pid = -1;
  int http_port = 0, grpc_port = 0;
  int ctl = -1;
  void Stop() {
    if (pid < 0) return;
    ::close(ctl);
    int st = 0;
    ::waitpid(pid, &st, 0);
    pid = -1;
  }
};

ServerProcess ForkServers(const ServiceOptions& base) {
  int up[2], ctl[2];
  if (::pipe(up) != 0 || ::pipe(ctl) != 0) Die("pipe");
  std::fflush(nullptr);
  pid_t pid = ::fork();
  if (pid < 0) Die("fork");
  if (pid == 0) {
    ::close(up[0]);
    ::close(ctl[1]);
    // As flowstate serve does with its embedded default (config/flowstate.json).
    if (!SetGrpcPollStrategy("poll").ok()) Die("SetGrpcPollStrategy");
    DevicePoolOptions dpo;
    dpo.intra_op_threads = 1;
    std::unique_ptr<DevicePool> pool = DevicePool::Create(dpo).value();
    ServiceOptions so = base;
    so.devices = pool.get();
    Service service(so);
    Metrics metrics;
    HttpServerOptions ho;
    ho.address = "127.0.0.1:0";
    ho.threads = 2;
    auto http_server = HttpServer::Start(&service, &metrics, ho);
    if (!http_server.ok()) Die(http_server.status().ToString());
    GrpcServerOptions go;
    go.address = "127.0.0.1:0";
    auto grpc_server = GrpcServer::Start(&service, &metrics, go);
    if (!grpc_server.ok()) Die(grpc_server.status().ToString());
    std::string ports = std::to_string((*http_server)->port()) + " " +
                        std::to_string((*grpc_server)->port()) + "\n";
    if (!WriteAll(up[1], ports.data(), ports.size())) _exit(1);
    ::close(up[1]);
    char c;
    while (::read(ctl[0], &c, 1) > 0) {
    }
    (*http_server)->Stop();
    (*grpc_server)->Stop();
    service.Shutdown();
    std::fflush(nullptr);
    _exit(0);
  }
  ::close(up[1]);
  ::close(ctl[0]);
  std::string got;
  char buf[64];
  ssize_t n;
  while ((n = ::read(up[0], buf, sizeof buf)) > 0) got.append(buf, size_t(n));
  ::close(up[0]);
  ServerProcess p;
  p.pid = pid;
  p.ctl = ctl[1];
  if (std::sscanf(got.c_str(), "%d %d", &p.http_port, &p.grpc_port) != 2) Die("the server process did not start");
  return p;
}

// A string field of a JSON response body.
std::string JsonField(const std::string& body, const char* key) {
  nlohmann::json j = nlohmann::json::parse(body, nullptr, false);
  if (j.is_discarded() || !j.contains(key) || !j[key].is_string()) {
    Die(std::string("no \"") + key + "\" in " + body);
  }
  return j[key].get<std::string>();
}

// A Server-Timing header's duration `name` in microseconds; -1 if absent.
double TimingUs(const std::string& header, const std::string& name) {
  size_t at = header.find(name + ";dur=");
  if (at == std::string::npos || (at > 0 && header[at - 1] != ' ' && header[at - 1] != ',')) return -1;
  return std::atof(header.c_str() + at + name.size() + 5) * 1e3;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// A predict's own-time figures from the Server-Timing of each request
// (total - step: the server's time on it besides the engine's) and the
// client's round trip of the same request.
struct OwnTime {
  std::vector<double> own_us, total_us, step_us, read_us, handler_us, fraction;
  void Add(const std::string& header, double round_trip_us) {
    double total = TimingUs(header, "total"), step = TimingUs(header, "step");
    if (total < 0 || step < 0) Die("no Server-Timing total and step in '" + header + "'");
    own_us.push_back(total - step);
    total_us.push_back(total);
    step_us.push_back(step);
    read_us.push_back(TimingUs(header, "read"));
    handler_us.push_back(TimingUs(header, "handler"));
    fraction.push_back((total - step) / round_trip_us);
  }
};

int Main(int argc, char** argv) {
  int rounds = 5, requests = 2000, wrk_seconds = 3;
  bool wrk = true, predict = true;
  std::string halt_poll_ns;  // --halt-poll-ns: the other setting, side by side
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    if (a == "--rounds" && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (a == "--requests" && i + 1 < argc) requests = std::atoi(argv[++i]);
    else if (a == "--wrk-seconds" && i + 1 < argc) wrk_seconds = std::atoi(argv[++i]);
    else if (a == "--no-wrk") wrk = false;
    else if (a == "--no-predict") predict = false;
    else if (a == "--halt-poll-ns" && i + 1 < argc) halt_poll_ns = argv[++i];
    else Die("unknown argument '" + a + "'");
  }

  if (!halt_poll_ns.empty()) {
    if (halt_poll_ns.find_first_not_of("0123456789") != std::string::npos) {
      Die("--halt-poll-ns takes a number of nanoseconds");
    }
    if (!bench::HoldHaltPoll()) {
      Die("--halt-poll-ns needs the haltpoll cpuidle governor, and root to change it");
    }
  }
  const std::string machine_halt_poll_ns = bench::HaltPollNs();

  ServiceOptions so;
  ServerProcess server = ForkServers(so);  // before this process has threads
  const int http_port = server.http_port, grpc_port = server.grpc_port;
  // The in-process references: the same Service calls in this process.
  DevicePoolOptions dpo;
  dpo.intra_op_threads = 1;
  std::unique_ptr<DevicePool> pool = DevicePool::Create(dpo).value();
  so.devices = pool.get();
  Service service(so);

  const char* kGraph = R"({"nodes": [
      {"name": "a", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": []}},
      {"name": "b", "op": "Placeholder", "attrs": {"dtype": "float32", "shape": []}},
      {"name": "sum", "op": "Add", "inputs": ["a", "b"]}]})";
  StatusOr<GraphDef> graph = api::ParseGraphJson(kGraph);
  if (!graph.ok()) Die(graph.status().ToString());
  StatusOr<std::string> sid = service.CreateSession(*graph);
  if (!sid.ok()) Die(sid.status().ToString());
  const std::string id = *sid;
  RestClient rest(http_port);
  int created = 0;
  const std::string server_session =
      JsonField(rest.Post("/v1/sessions", std::string(R"({"graph": )") + kGraph + "}", &created),
                "session_id");
  if (created != 201) Die("POST /v1/sessions: " + std::to_string(created));
  const std::string run_target = "/v1/sessions/" + server_session + "/run";
  const std::string run_body = R"({"feeds": {"a": 1.5, "b": 2.25}, "fetches": ["sum"]})";

  SessionRunRequest inproc_req;
  inproc_req.feeds = {{"a", Tensor::FromVector<float>({1.5f}, TensorShape({}))},
                      {"b", Tensor::FromVector<float>({2.25f}, TensorShape({}))}};
  inproc_req.fetches = {"sum"};
  auto inproc = [&] {
    auto out = service.RunSession(id, inproc_req);
    if (!out.ok() || (*out)[0].second.data<float>()[0] != 3.75f) Die("in-process Run failed");
  };

  // The server's own account of each Run (Server-Timing "total", µs).
  std::vector<double> rest_server_us, grpc_server_us;
  auto rest_run = [&] {
    int status = 0;
    std::string timing;
    std::string body = rest.Post(run_target, run_body, &status, &timing);
    if (status != 200) Die("REST Run: " + std::to_string(status) + " " + body);
    rest_server_us.push_back(TimingUs(timing, "total"));
  };

  auto channel = grpc::CreateChannel("127.0.0.1:" + std::to_string(grpc_port),
                                     grpc::InsecureChannelCredentials());
  auto stub = pb::Sessions::NewStub(channel);
  pb::RunSessionRequest grpc_req;
  grpc_req.set_session_id(server_session);
  proto_convert::TensorToProto(inproc_req.feeds[0].second, &(*grpc_req.mutable_feeds())["a"]);
  proto_convert::TensorToProto(inproc_req.feeds[1].second, &(*grpc_req.mutable_feeds())["b"]);
  grpc_req.add_fetches("sum");
  auto grpc_run = [&] {
    grpc::ClientContext ctx;
    pb::RunSessionResponse resp;
    grpc::Status s = stub->Run(&ctx, grpc_req, &resp);
    if (!s.ok()) Die("gRPC Run: " + s.error_message());
    auto timing = ctx.GetServerTrailingMetadata().find("server-timing");
    if (timing == ctx.GetServerTrailingMetadata().end()) Die("gRPC Run: no server-timing");
    grpc_server_us.push_back(
        TimingUs(std::string(timing->second.data(), timing->second.size()), "total"));
  };
  // The same call from a client that polls its completion queue instead of
  // sleeping on it: without the client's own wake-up, what is left is the
  // server (and gRPC's protocol work on both ends).
  grpc::CompletionQueue client_cq;
  auto grpc_run_polling = [&] {
    grpc::ClientContext ctx;
    pb::RunSessionResponse resp;
    grpc::Status s;
    auto call = stub->AsyncRun(&ctx, grpc_req, &client_cq);
    call->Finish(&resp, &s, reinterpret_cast<void*>(1));
    void* tag = nullptr;
    bool ok = false;
    while (client_cq.AsyncNext(&tag, &ok, gpr_time_0(GPR_CLOCK_MONOTONIC)) !=
           grpc::CompletionQueue::GOT_EVENT) {
    }
    if (!ok || !s.ok()) Die("gRPC Run (polling client): " + s.error_message());
  };

  // The loopback floor at the size of a Run's request and response, measured
  // in the same rounds.
  TcpEcho run_echo(run_body.size() + 120, 160);
  Percentiles best_in{1e30, 0}, best_rest{1e30, 0}, best_grpc{1e30, 0}, loop{1e30, 0};
  Percentiles best_grpc_polling{1e30, 0};
  Percentiles alt_in{1e30, 0}, alt_rest{1e30, 0}, alt_grpc{1e30, 0};  // --halt-poll-ns
  for (int r = 0; r < rounds; ++r) {
    KeepBest(&loop, Measure(requests, [&] { run_echo.RoundTrip(); }));
    KeepBest(&best_in, Measure(requests, inproc));
    KeepBest(&best_rest, Measure(requests, rest_run));
    KeepBest(&best_grpc, Measure(requests, grpc_run));
    KeepBest(&best_grpc_polling, Measure(requests, grpc_run_polling));
    if (!halt_poll_ns.empty()) {
      // The sleeping clients again, in the same round, with the guest
      // polling up to halt_poll_ns before it halts an idle CPU.
      if (!bench::SetHaltPollNs(halt_poll_ns)) Die("cannot set guest_halt_poll_ns");
      KeepBest(&alt_in, Measure(requests, inproc));
      KeepBest(&alt_rest, Measure(requests, rest_run));
      KeepBest(&alt_grpc, Measure(requests, grpc_run));
      bench::RestoreHaltPoll();
    }
  }
  bench::PrintFigure("service_loopback_tcp_p50", loop.p50, "us");
  bench::PrintFigure("service_run_inprocess_p50", best_in.p50, "us");
  bench::PrintFigure("service_run_inprocess_p99", best_in.p99, "us");
  bench::PrintFigure("service_run_rest_p50", best_rest.p50, "us", "service_run_inprocess_p50",
                     best_rest.p50 / best_in.p50);
  bench::PrintFigure("service_run_rest_p99", best_rest.p99, "us");
  bench::PrintFigure("service_run_rest_overhead_p50", best_rest.p50 - best_in.p50, "us",
                     "target_100us", (best_rest.p50 - best_in.p50) / 100.0);
  bench::PrintFigure("service_run_grpc_p50", best_grpc.p50, "us", "service_run_inprocess_p50",
                     best_grpc.p50 / best_in.p50);
  bench::PrintFigure("service_run_grpc_p99", best_grpc.p99, "us");
  bench::PrintFigure("service_run_grpc_overhead_p50", best_grpc.p50 - best_in.p50, "us",
                     "target_100us", (best_grpc.p50 - best_in.p50) / 100.0);
  bench::PrintFigure("service_run_grpc_polling_client_p50", best_grpc_polling.p50, "us");
  bench::PrintFigure("service_run_grpc_polling_client_overhead_p50",
                     best_grpc_polling.p50 - best_in.p50, "us", "target_100us",
                     (best_grpc_polling.p50 - best_in.p50) / 100.0);
  // What of those round trips the server spent on the call by its own
  // clock (Server-Timing "total": REST from the first bytes read, gRPC from
  // the call's arrival on the queue; median over every call).
  bench::PrintFigure("service_run_rest_server_total_p50", Median(rest_server_us), "us");
  bench::PrintFigure("service_run_grpc_server_total_p50", Median(grpc_server_us), "us");
  // Why the sleeping clients' figures move with the machine: how often a
  // CPU halted per call (in the best round), and whether the guest polls
  // before it halts. A KVM guest's haltpoll governor spins up to
  // guest_halt_poll_ns (the kernel's default is 200000) before it exits to
  // the host; at 0 every wake-up of a sleeping thread -- the client's, on
  // every call -- pays the host's wake latency.
  if (best_in.idle_entries_per_call >= 0) {
    bench::PrintFigure("service_loopback_tcp_idle_entries_per_call", loop.idle_entries_per_call, "count");
    bench::PrintFigure("service_run_rest_idle_entries_per_call", best_rest.idle_entries_per_call, "count");
    bench::PrintFigure("service_run_grpc_idle_entries_per_call", best_grpc.idle_entries_per_call, "count");
    bench::PrintFigure("service_run_grpc_polling_client_idle_entries_per_call",
                       best_grpc_polling.idle_entries_per_call, "count");
  }
  if (!halt_poll_ns.empty()) {
    const std::string tag = "_halt_poll_" + halt_poll_ns;
    bench::PrintFigure("service_run_inprocess_p50" + tag, alt_in.p50, "us");
    bench::PrintFigure("service_run_rest_overhead_p50" + tag, alt_rest.p50 - alt_in.p50, "us",
                       "service_run_rest_overhead_p50",
                       (alt_rest.p50 - alt_in.p50) / (best_rest.p50 - best_in.p50));
    bench::PrintFigure("service_run_grpc_overhead_p50" + tag, alt_grpc.p50 - alt_in.p50, "us",
                       "service_run_grpc_overhead_p50",
                       (alt_grpc.p50 - alt_in.p50) / (best_grpc.p50 - best_in.p50));
    bench::PrintFigure("service_run_grpc_p99" + tag, alt_grpc.p99, "us");
    bench::PrintFigure("service_run_rest_idle_entries_per_call" + tag,
                       alt_rest.idle_entries_per_call, "count");
    bench::PrintFigure("service_run_grpc_idle_entries_per_call" + tag,
                       alt_grpc.idle_entries_per_call, "count");
  }
  if (bench::IdleGovernor() == "haltpoll" && !machine_halt_poll_ns.empty()) {
    const double ns = std::atof(machine_halt_poll_ns.c_str());
    bench::PrintFigure("host_guest_halt_poll_ns", ns, "ns");
    if (ns == 0) {
      std::fprintf(stderr,
                   "service_bench: this guest halts its idle CPUs without polling "
                   "(haltpoll.guest_halt_poll_ns=0): each sleeping client's wake-up "
                   "costs an exit to the host, see BENCHMARKS.md\n");
    }
  }

  if (wrk) {
    if (std::system("command -v wrk >/dev/null 2>&1") != 0) {
      std::fprintf(stderr, "service_bench: no wrk (scripts/install-deps --bench): skipping requests/s\n");
    } else {
      std::string lua = "/tmp/flowstate_service_bench_" + std::to_string(::getpid()) + ".lua";
      {
        std::ofstream f(lua);
        f << "wrk.method = \"POST\"\n"
          << "wrk.path = \"" << run_target << "\"\n"
          << "wrk.body = '" << run_body << "'\n"
          << "wrk.headers[\"Content-Type\"] = \"application/json\"\n";
      }
      for (int c : {1, 16, 64}) {
        int64_t errors = 0;
        double rps = RunWrk(http_port, c, wrk_seconds, lua, &errors);
        bench::PrintFigure("service_rest_run_rps_c" + std::to_string(c), rps, "req/s");
        bench::PrintFigure("service_rest_run_errors_c" + std::to_string(c), double(errors), "count");
      }
      std::remove(lua.c_str());
    }
  }

  if (predict) {
    std::string path = std::string(FLOWSTATE_SOURCE_DIR) + "/examples/jobs/fashion_mlp.json";
    std::ifstream f(path);
    nlohmann::json job = nlohmann::json::parse(f, nullptr, false);
    if (job.is_discarded()) Die("cannot read " + path);
    if (!std::ifstream(so.data_root + "/fashion-mnist/train-images-idx3-ubyte.gz")) {
      std::fprintf(stderr, "service_bench: no Fashion-MNIST under %s: skipping predict\n",
                   so.data_root.c_str());
    } else {
      job["max_steps"] = 2;
      job.erase("eval");
      job.erase("checkpoint");
      // The same job trained here (for the in-process reference) and in the
      // server process (for the requests).
      StatusOr<JobInfo> info = service.jobs().Submit(job.dump());
      if (!info.ok()) Die("submit: " + info.status().ToString());
      int submitted = 0;
      const std::string server_job = JsonField(rest.Post("/v1/jobs", job.dump(), &submitted), "job_id");
      if (submitted != 201) Die("POST /v1/jobs: " + std::to_string(submitted));
      auto wait_done = [](const std::function<std::string()>& state) {
        for (int i = 0; i < 1200; ++i) {
          std::string st = state();
          if (st == "SUCCEEDED") return;
          if (st == "FAILED" || st == "CANCELLED") Die("the MLP job ended " + st);
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
        }
        Die("the MLP job did not finish");
      };
      wait_done([&] {
        StatusOr<JobInfo> j = service.jobs().Get(info->id);
        return j.ok() ? std::string(JobStateName(j->state)) : std::string("?");
      });
      wait_done([&] {
        int st = 0;
        std::string body = rest.Get("/v1/jobs/" + server_job, &st);
        return st == 200 ? JsonField(body, "state") : std::string("?");
      });
      std::vector<uint8_t> pixels(784);
      for (size_t i = 0; i < pixels.size(); ++i) pixels[i] = uint8_t(i * 7 % 256);
      std::vector<std::pair<std::string, Tensor>> inputs = {
          {"x", Tensor::FromVector<uint8_t>(pixels, TensorShape({1, 28, 28}))}};
      std::vector<std::string> fetches = {"logits"};
      auto inproc_predict = [&] {
        std::vector<Tensor> out;
        Status s = service.jobs().Predict(info->id, inputs, fetches, &out);
        if (!s.ok()) Die("predict: " + s.ToString());
      };
      std::string body = R"({"inputs": {"x": )" + api::TensorToJson(inputs[0].second) +
                         R"(}, "fetches": ["logits"]})";
      std::string target = "/v1/jobs/" + server_job + "/predict";
      // Each request's round trip (client clock) with the server's own
      // account of it (Server-Timing).
      OwnTime own_json, own_b64, own_polling;
      auto timed_rest = [&](const std::string& b, OwnTime* own) {
        return [&rest, &target, &b, own] {
          int status = 0;
          std::string timing;
          auto t0 = Clock::now();
          std::string out = rest.Post(target, b, &status, &timing);
          auto took = Clock::now() - t0;
          if (status != 200) Die("REST predict: " + std::to_string(status) + " " + out);
          own->Add(timing, std::chrono::duration<double, std::micro>(took).count());
          return took;
        };
      };
      auto rest_predict = timed_rest(body, &own_json);
      // The same input as {dtype, shape, b64} (what a client that cares uses).
      std::string body_b64 = R"({"inputs": {"x": )" +
                             api::TensorToJson(inputs[0].second, api::Encoding::kB64) +
                             R"(}, "fetches": ["logits"]})";
      auto rest_predict_b64 = timed_rest(body_b64, &own_b64);
      PollingRestClient polling(http_port);
      auto rest_predict_b64_polling = [&] {
        std::string timing;
        auto t0 = Clock::now();
        if (polling.Post(target, body_b64, &timing) != 200) Die("REST predict (b64, polling client)");
        auto took = Clock::now() - t0;
        own_polling.Add(timing, std::chrono::duration<double, std::micro>(took).count());
        return took;
      };
      // The same predict over gRPC (sync stub; the pixels as raw bytes).
      auto jobs_stub = pb::Jobs::NewStub(channel);
      pb::PredictRequest grpc_predict_req;
      grpc_predict_req.set_job_id(server_job);
      proto_convert::TensorToProto(inputs[0].second, &(*grpc_predict_req.mutable_inputs())["x"]);
      grpc_predict_req.add_fetches("logits");
      OwnTime own_grpc;
      auto grpc_predict = [&] {
        grpc::ClientContext ctx;
        pb::PredictResponse resp;
        auto t0 = Clock::now();
        grpc::Status s = jobs_stub->Predict(&ctx, grpc_predict_req, &resp);
        auto took = Clock::now() - t0;
        if (!s.ok()) Die("gRPC predict: " + s.error_message());
        auto timing = ctx.GetServerTrailingMetadata().find("server-timing");
        if (timing == ctx.GetServerTrailingMetadata().end()) Die("gRPC predict: no server-timing");
        own_grpc.Add(std::string(timing->second.data(), timing->second.size()),
                     std::chrono::duration<double, std::micro>(took).count());
        return took;
      };
      TcpEcho predict_echo(body_b64.size() + 120, 300);
      Percentiles pin{1e30, 0}, prest{1e30, 0}, pb64{1e30, 0}, ploop{1e30, 0};
      Percentiles pb64_polling{1e30, 0}, pgrpc{1e30, 0};
      for (int r = 0; r < rounds; ++r) {
        KeepBest(&ploop, Measure(requests / 4, [&] { predict_echo.RoundTrip(); }));
        KeepBest(&pin, Measure(requests / 4, inproc_predict));
        KeepBest(&prest, Measure(requests / 4, rest_predict));
        KeepBest(&pb64, Measure(requests / 4, rest_predict_b64));
        KeepBest(&pb64_polling, Measure(requests / 4, rest_predict_b64_polling));
        KeepBest(&pgrpc, Measure(requests / 4, grpc_predict));
      }
      bench::PrintFigure("service_predict_mlp_b1_inprocess_p50", pin.p50, "us");
      bench::PrintFigure("service_predict_loopback_tcp_p50", ploop.p50, "us");
      // The server's own share, from its Server-Timing: of each request's
      // round trip, the part the server spent on it besides the engine's
      // step -- from reading its first bytes to queueing its response
      // (HTTP parsing, routing, decoding, encoding, hand-offs). Not in it:
      // the client, the kernel's loopback, the wake-ups between them, and
      // the response's write.
      auto print_own = [&](const std::string& name, const OwnTime& own) {
        bench::PrintFigure(name + "_server_total_p50", Median(own.total_us), "us");
        const double read = Median(own.read_us);  // gRPC sends none
        if (read >= 0) bench::PrintFigure(name + "_server_read_p50", read, "us");
        bench::PrintFigure(name + "_server_handler_p50", Median(own.handler_us), "us");
        bench::PrintFigure(name + "_server_step_p50", Median(own.step_us), "us");
        bench::PrintFigure(name + "_server_own_p50", Median(own.own_us), "us");
        double share = Median(own.fraction);
        bench::PrintFigure(name + "_server_own_share", share, "fraction", "target_0.25", share / 0.25);
      };
      // The round trip against the in-process call: everything outside the
      // model, the client's and the kernel's time included.
      auto print_round_trip = [&](const std::string& name, const Percentiles& p) {
        bench::PrintFigure(name + "_p50", p.p50, "us", "service_predict_mlp_b1_inprocess_p50",
                           p.p50 / pin.p50);
        double share = (p.p50 - pin.p50) / p.p50;
        bench::PrintFigure(name + "_non_model_share", share, "fraction", "target_0.25", share / 0.25);
      };
      print_round_trip("service_predict_mlp_b1_rest_b64", pb64);
      print_own("service_predict_mlp_b1_rest_b64", own_b64);
      print_round_trip("service_predict_mlp_b1_rest_b64_polling_client", pb64_polling);
      print_own("service_predict_mlp_b1_rest_b64_polling_client", own_polling);
      print_round_trip("service_predict_mlp_b1_rest_json", prest);
      print_own("service_predict_mlp_b1_rest_json", own_json);
      // gRPC's "total" starts when the call reaches the server's queue
      // (after gRPC has read and decoded it), so its own share leaves out
      // gRPC's transport work on the server, which REST's includes.
      print_round_trip("service_predict_mlp_b1_grpc", pgrpc);
      print_own("service_predict_mlp_b1_grpc", own_grpc);
      // Where the rest of the request goes: parsing its JSON body (784 numbers).
      Percentiles parse = Measure(requests / 4, [&] {
        if (!http_internal::ParsePredictBody(body, false, int64_t{64} << 20).ok()) Die("parse");
      });
      bench::PrintFigure("service_predict_mlp_b1_parse_json_body_p50", parse.p50, "us");
      Percentiles parse_b64 = Measure(requests / 4, [&] {
        if (!http_internal::ParsePredictBody(body_b64, false, int64_t{64} << 20).ok()) Die("parse");
      });
      bench::PrintFigure("service_predict_mlp_b1_parse_b64_body_p50", parse_b64.p50, "us");
      std::vector<Tensor> logits;
      if (!service.jobs().Predict(info->id, inputs, fetches, &logits).ok()) Die("predict");
      api::NamedTensors named = {{"logits", logits[0]}};
      Percentiles encode = Measure(requests / 4, [&] {
        if (api::RunOutputsToJson(named, api::Encoding::kData).empty()) Die("encode");
      });
      bench::PrintFigure("service_predict_mlp_b1_encode_outputs_p50", encode.p50, "us");
      // The route handler alone on this thread (parse, predict, serialize;
      // no sockets): what is left of a REST predict is HTTP and transport.
      RouteContext route_ctx;
      route_ctx.service = &service;
      HttpRequest hreq;
      hreq.method = "POST";
      hreq.target = "/v1/jobs/" + info->id + "/predict";
      hreq.headers.emplace("content-type", "application/json");
      Percentiles handle_b64{1e30, 0};
      hreq.body = body_b64;
      for (int r = 0; r < rounds; ++r) {
        Percentiles h = Measure(requests / 4, [&] {
          if (HandleRequest(hreq, route_ctx).status != 200) Die("HandleRequest predict");
        });
        KeepBest(&handle_b64, h);
      }
      bench::PrintFigure("service_predict_mlp_b1_handle_b64_p50", handle_b64.p50, "us");
      // The same in-process call 1 ms after the previous one, as a request
      // arrives to an idle server: what waking the step's threads costs.
      Percentiles spaced = Measure(requests / 8, [&] {
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
        auto t0 = Clock::now();
        inproc_predict();
        return Clock::now() - t0;
      });
      bench::PrintFigure("service_predict_mlp_b1_inprocess_spaced_p50", spaced.p50, "us");
    }
  }

  server.Stop();
  service.Shutdown();
  return 0;
}

}  // namespace
}  // namespace flowstate

int main(int argc, char** argv) { return flowstate::Main(argc, argv); }
