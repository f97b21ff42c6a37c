#include "distributed/registry.h"

#include <unistd.h>

#include <grpcpp/grpcpp.h>

#include <cstdlib>
#include <thread>

#include "api/registry.grpc.pb.h"
#include "graph/mutex.h"

namespace flowstate {

namespace rpb = ::flowstate::registry::v1;

namespace {

::grpc::Status ToGrpc(const Status& s) {
  return ::grpc::Status(static_cast<::grpc::StatusCode>(int(s.code())), s.message());
}

}  // namespace

struct ClusterRegistry::Impl {
  class Service final : public rpb::Registry::Service {
   public:
    explicit Service(ClusterRegistry* r) : r_(r) {}
    ::grpc::Status Join(::grpc::ServerContext*, const rpb::JoinRequest* req,
                        rpb::JoinResponse* resp) override {
      StatusOr<Members> m = r_->Join(req->world_size(), req->rank(), req->address());
      if (!m.ok()) return ToGrpc(m.status());
      for (const std::string& a : m->addresses) resp->add_addresses(a);
      resp->set_complete(m->complete);
      return ::grpc::Status::OK;
    }

   private:
    ClusterRegistry* r_;
  };

  explicit Impl(ClusterRegistry* r, int world) : service(r), world_size(world) {
    addresses.assign(size_t(world), "");
  }
  Service service;
  const int world_size;
  mutable Mutex mu;
  std::vector<std::string> addresses ABSL_GUARDED_BY(mu);
};

ClusterRegistry::ClusterRegistry(int world_size) : impl_(std::make_unique<Impl>(this, world_size)) {}
ClusterRegistry::~ClusterRegistry() = default;

grpc::Service* ClusterRegistry::service() { return &impl_->service; }

ClusterRegistry::Members ClusterRegistry::members() const {
  MutexLock l(impl_->mu);
  Members m;
  m.addresses = impl_->addresses;
  m.complete = true;
  for (const std::string& a : m.addresses) m.complete = m.complete && !a.empty();
  return m;
}

StatusOr<ClusterRegistry::Members> ClusterRegistry::Join(int world_size, int rank,
                                                         const std::string& address) {
  if (world_size != impl_->world_size) {
    return InvalidArgument("WORLD_SIZE: rank " + std::to_string(rank) + " says " +
                           std::to_string(world_size) + ", task 0's registry has " +
                           std::to_string(impl_->world_size));
  }
  if (rank < 0 || rank >= world_size) {
    return InvalidArgument("RANK: " + std::to_string(rank) + " is out of range (0.." +
                           std::to_string(world_size - 1) + ")");
  }
  FS_RETURN_IF_ERROR(CheckTaskAddress(address, "address"));
  {
    MutexLock l(impl_->mu);
    const std::string canonical = CanonicalTaskAddress(address);
    for (int r = 0; r < world_size; ++r) {
      const std::string& other = impl_->addresses[size_t(r)];
      if (r != rank && !other.empty() && CanonicalTaskAddress(other) == canonical) {
        return InvalidArgument("address: rank " + std::to_string(rank) + " advertises '" + address +
                               "', which rank " + std::to_string(r) + " already has");
      }
    }
    impl_->addresses[size_t(rank)] = address;
  }
  return members();
}

StatusOr<ClusterSpec> JoinCluster(const ClusterSpec& partial, const std::string& advertise,
                                  ClusterRegistry* local, std::chrono::milliseconds timeout,
                                  std::chrono::milliseconds poll, const std::atomic<bool>* cancel) {
  if (partial.registry.empty()) return partial;
  auto it = partial.jobs.find(partial.self.job);
  if (it == partial.jobs.end()) return InvalidArgument("RANK: this task's job is not in the cluster");
  const int world = int(it->second.size());
  const int rank = partial.self.index;
  const bool is_zero = rank == 0;
  if (is_zero && local == nullptr) return FailedPrecondition("task 0 needs its own registry to join");
  const std::string mine = is_zero ? it->second[0] : advertise;
  FS_RETURN_IF_ERROR(CheckTaskAddress(mine, "advertised address"));

  const auto deadline = std::chrono::steady_clock::now() + timeout;
  std::shared_ptr<::grpc::Channel> channel;
  std::unique_ptr<rpb::Registry::Stub> stub;
  if (!is_zero) {
    channel = ::grpc::CreateChannel(partial.registry, ::grpc::InsecureChannelCredentials());
    stub = rpb::Registry::NewStub(channel);
  }
  ClusterRegistry::Members last;
  bool reached = is_zero;
  std::string last_error;
  for (;;) {
    StatusOr<ClusterRegistry::Members> m = InvalidArgument("unreachable");
    if (is_zero) {
      m = local->Join(world, rank, mine);
    } else {
      ::grpc::ClientContext ctx;
      const auto left = std::min<std::chrono::steady_clock::duration>(
          deadline - std::chrono::steady_clock::now(), std::chrono::seconds(2));
      ctx.set_deadline(std::chrono::system_clock::now() +
                       std::max<std::chrono::steady_clock::duration>(left, std::chrono::milliseconds(1)));
      ctx.set_wait_for_ready(true);  // task 0 may not listen yet
      rpb::JoinRequest req;
      req.set_world_size(world);
      req.set_rank(rank);
      req.set_address(mine);
      rpb::JoinResponse resp;
      ::grpc::Status gs = stub->Join(&ctx, req, &resp);
      if (gs.ok()) {
        ClusterRegistry::Members got;
        got.addresses.assign(resp.addresses().begin(), resp.addresses().end());
        got.complete = resp.complete();
        m = got;
      } else if (gs.error_code() == ::grpc::StatusCode::INVALID_ARGUMENT) {
        return InvalidArgument("task 0's registry at " + partial.registry + " refused rank " +
                               std::to_string(rank) + ": " + gs.error_message());
      } else {
        last_error = gs.error_message();
        m = Unavailable(last_error);
      }
    }
    if (m.ok()) {
      if (!is_zero && !reached) reached = true;
      last = *m;
      if (last.complete) break;
    } else if (is_zero) {
      return m.status();
    }
    if (cancel != nullptr && cancel->load()) {
      return Cancelled("stopped while waiting for the cluster to assemble (rank " + std::to_string(rank) +
                       " of WORLD_SIZE=" + std::to_string(world) + ")");
    }
    if (std::chrono::steady_clock::now() + poll >= deadline) {
      const double secs = double(timeout.count()) / 1000.0;
      char t[32];
      std::snprintf(t, sizeof(t), "%g", secs);
      if (!reached) {
        return DeadlineExceeded("the cluster did not assemble within " + std::string(t) +
                                " s: task 0's registry at MASTER_ADDR:MASTER_PORT = " +
                                partial.registry + " could not be reached (" + last_error + ")");
      }
      std::string missing;
      int n = 0;
      for (size_t r = 0; r < last.addresses.size(); ++r) {
        if (last.addresses[r].empty()) {
          missing += (missing.empty() ? "" : ", ") + std::to_string(r);
          ++n;
        }
      }
      return DeadlineExceeded("the cluster did not assemble within " + std::string(t) + " s: " +
                              std::to_string(n) + " of WORLD_SIZE=" + std::to_string(world) +
                              " rank(s) did not join task 0's registry at " + partial.registry +
                              " (missing rank(s): " + missing + ")");
    }
    std::this_thread::sleep_for(poll);
  }
  ClusterSpec spec = partial;
  if (last.addresses.size() != size_t(world)) {
    return Internal("task 0's registry answered " + std::to_string(last.addresses.size()) +
                    " addresses for WORLD_SIZE=" + std::to_string(world));
  }
  spec.jobs[partial.self.job] = last.addresses;
  spec.registry.clear();
  FS_RETURN_IF_ERROR(ValidateClusterSpec(spec, "cluster", "task"));
  return spec;
}

std::string AdvertisedHost(const std::string& configured, const std::string& listen_host,
                           const char* (*getenv)(const char*)) {
  if (!configured.empty()) return configured;
  const char* pod = getenv != nullptr ? getenv("POD_IP") : std::getenv("POD_IP");
  if (pod != nullptr && *pod != '\0') return pod;
  std::string h = listen_host;
  if (h.size() >= 2 && h.front() == '[' && h.back() == ']') h = h.substr(1, h.size() - 2);
  if (!h.empty() && h != "0.0.0.0" && h != "::" && h != "*") return listen_host;
  char name[256] = {};
  if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != '\0') return name;
  return "localhost";
}

}  // namespace flowstate
