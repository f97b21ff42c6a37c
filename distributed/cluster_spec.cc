#include "distributed/cluster_spec.h"

#include <arpa/inet.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <cstdlib>
#include <map>

namespace flowstate {

namespace {

using json = nlohmann::json;

std::string Join(std::string_view prefix, std::string_view name) {
  if (prefix.empty()) return std::string(name);
  return std::string(prefix) + "." + std::string(name);
}

std::string Quote(std::string_view s) { return "'" + std::string(s) + "'"; }

struct HostPort {
  std::string host;  // without brackets
  bool bracketed = false;
  int port = 0;
};

// Splits "host:port" / "[v6]:port"; "" on success, else what is wrong.
std::string SplitAddress(std::string_view a, HostPort* out) {
  if (a.empty()) return "is empty";
  for (char c : a) {
    if (std::isspace(static_cast<unsigned char>(c))) return "contains a space";
    if (static_cast<unsigned char>(c) < 0x20 || static_cast<unsigned char>(c) >= 0x7f) {
      return "contains a character that is not printable ASCII";
    }
  }
  std::string_view host, port;
  if (a.front() == '[') {
    size_t close = a.find(']');
    if (close == std::string_view::npos) return "has '[' without ']'";
    host = a.substr(1, close - 1);
    std::string_view rest = a.substr(close + 1);
    if (rest.empty() || rest.front() != ':') return "has no port (expected \"[host]:port\")";
    port = rest.substr(1);
    out->bracketed = true;
  } else {
    size_t colon = a.rfind(':');
    if (colon == std::string_view::npos) return "has no port (expected \"host:port\")";
    host = a.substr(0, colon);
    port = a.substr(colon + 1);
    if (host.find(':') != std::string_view::npos) {
      return "has more than one ':' (write an IPv6 address as \"[addr]:port\")";
    }
  }
  if (host.empty()) return "has an empty host";
  if (port.empty()) return "has an empty port";
  if (!std::all_of(port.begin(), port.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    return "has a port that is not a number";
  }
  if (port.size() > 5) return "has a port out of range (1..65535)";
  int p = 0;
  std::from_chars(port.data(), port.data() + port.size(), p);
  if (p < 1 || p > 65535) return "has a port out of range (1..65535)";
  out->host = std::string(host);
  out->port = p;
  if (out->bracketed) {
    in6_addr v6{};
    if (inet_pton(AF_INET6, out->host.c_str(), &v6) != 1) return "has a malformed IPv6 address";
  } else {
    for (char c : host) {
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '-' || c == '_')) {
        return "has a host with a character other than letters, digits, '.', '-', '_'";
      }
    }
  }
  return "";
}

// The canonical host of a checked HostPort.
std::string CanonicalHost(const HostPort& hp) {
  std::string h = hp.host;
  std::transform(h.begin(), h.end(), h.begin(), [](unsigned char c) { return char(std::tolower(c)); });
  while (h.size() > 1 && h.back() == '.') h.pop_back();
  char buf[INET6_ADDRSTRLEN] = {};
  if (hp.bracketed) {
    in6_addr v6{};
    if (inet_pton(AF_INET6, h.c_str(), &v6) == 1 && inet_ntop(AF_INET6, &v6, buf, sizeof(buf))) h = buf;
  } else {
    in_addr v4{};
    if (inet_pton(AF_INET, h.c_str(), &v4) == 1 && inet_ntop(AF_INET, &v4, buf, sizeof(buf))) h = buf;
  }
  if (h == "localhost" || h == "127.0.0.1" || h == "::1") return "loopback";
  return h;
}

bool IsWildcard(const HostPort& hp) {
  std::string c = CanonicalHost(hp);
  return c == "0.0.0.0" || c == "::";
}

Status CheckJobName(std::string_view name, std::string_view field) {
  bool ok = !name.empty() && std::isalpha(static_cast<unsigned char>(name.front()));
  for (char c : name) {
    ok = ok && (std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-');
  }
  if (!ok) {
    return InvalidArgument(std::string(field) + ": job name " + Quote(name) +
                           " must start with a letter and hold only letters, digits, '_' and '-'");
  }
  return Status::OK();
}

std::string TypeName(const json& j) {
  if (j.is_boolean()) return "a bool";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  if (j.is_object()) return "an object";
  return "null";
}

// A strict decimal integer (optional '-', digits, nothing else).
bool ParseInt(std::string_view s, long long* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size();
}

}  // namespace

std::string TaskId::DeviceNamePrefix() const {
  return "/job:" + job + "/task:" + std::to_string(index);
}

bool ClusterSpec::complete() const {
  for (const auto& [job, addrs] : jobs) {
    for (const std::string& a : addrs) {
      if (a.empty()) return false;
    }
  }
  return true;
}

int ClusterSpec::num_tasks() const {
  int n = 0;
  for (const auto& [job, addrs] : jobs) n += int(addrs.size());
  return n;
}

std::vector<TaskId> ClusterSpec::tasks() const {
  std::vector<TaskId> out;
  for (const auto& [job, addrs] : jobs) {
    for (size_t i = 0; i < addrs.size(); ++i) out.push_back(TaskId{job, int(i)});
  }
  return out;
}

StatusOr<std::string> ClusterSpec::address(const TaskId& task) const {
  auto it = jobs.find(task.job);
  if (it == jobs.end() || task.index < 0 || size_t(task.index) >= it->second.size()) {
    return NotFound("task " + task.DeviceNamePrefix() + " is not in the cluster");
  }
  return it->second[size_t(task.index)];
}

Status CheckTaskAddress(std::string_view address, std::string_view field) {
  HostPort hp;
  std::string e = SplitAddress(address, &hp);
  if (e.empty() && IsWildcard(hp)) {
    e = "has a wildcard host that no other task can reach (give the host's name or IP)";
  }
  if (!e.empty()) return InvalidArgument(std::string(field) + ": address " + Quote(address) + " " + e);
  return Status::OK();
}

std::string TaskAddressHost(std::string_view address) {
  HostPort hp;
  if (!SplitAddress(address, &hp).empty()) return "";
  return hp.host;
}

std::string CanonicalTaskAddress(std::string_view address) {
  HostPort hp;
  if (!SplitAddress(address, &hp).empty()) return std::string(address);
  return CanonicalHost(hp) + ":" + std::to_string(hp.port);
}

Status ValidateClusterSpec(const ClusterSpec& spec, std::string_view cluster_field,
                           std::string_view task_field) {
  if (spec.jobs.empty()) {
    if (!spec.self.job.empty()) {
      return InvalidArgument(std::string(task_field) + ": task " + Quote(spec.self.job) +
                             " is given but there is no cluster (" + std::string(cluster_field) +
                             " is empty)");
    }
    return Status::OK();
  }
  // Canonical address -> the field that named it first.
  std::map<std::string, std::string> seen;
  for (const auto& [job, addrs] : spec.jobs) {
    const std::string jf = Join(cluster_field, job);
    FS_RETURN_IF_ERROR(CheckJobName(job, jf));
    if (addrs.empty()) return InvalidArgument(jf + ": job " + Quote(job) + " has no tasks");
    for (size_t i = 0; i < addrs.size(); ++i) {
      const std::string f = jf + "[" + std::to_string(i) + "]";
      if (addrs[i].empty() && !spec.registry.empty()) continue;  // learnt later
      FS_RETURN_IF_ERROR(CheckTaskAddress(addrs[i], f));
      auto [it, fresh] = seen.emplace(CanonicalTaskAddress(addrs[i]), f);
      if (!fresh) {
        return InvalidArgument(f + ": duplicate address " + Quote(addrs[i]) + " (" + it->second +
                               " has the same host and port)");
      }
    }
  }
  if (spec.self.job.empty()) {
    return InvalidArgument(Join(task_field, "type") + ": required with a cluster (which task is this one?)");
  }
  auto it = spec.jobs.find(spec.self.job);
  if (it == spec.jobs.end()) {
    std::string names;
    for (const auto& [job, addrs] : spec.jobs) names += (names.empty() ? "" : ", ") + job;
    return InvalidArgument(Join(task_field, "type") + ": " + Quote(spec.self.job) +
                           " is not a job of the cluster (jobs: " + names + ")");
  }
  if (spec.self.index < 0 || size_t(spec.self.index) >= it->second.size()) {
    return InvalidArgument(Join(task_field, "index") + ": " + std::to_string(spec.self.index) +
                           " is out of range: job " + Quote(spec.self.job) + " has " +
                           std::to_string(it->second.size()) + " task(s), indices 0.." +
                           std::to_string(it->second.size() - 1));
  }
  if (!spec.registry.empty()) {
    FS_RETURN_IF_ERROR(CheckTaskAddress(spec.registry, Join(cluster_field, "registry")));
  }
  return Status::OK();
}

StatusOr<ClusterSpec> ParseClusterSpecJson(std::string_view text, std::string_view field) {
  const std::string where = field.empty() ? "the cluster spec" : std::string(field);
  json j = json::parse(text.begin(), text.end(), nullptr, false);
  if (j.is_discarded()) return InvalidArgument(where + ": not valid JSON");
  if (!j.is_object()) return InvalidArgument(where + ": expected an object, got " + TypeName(j));
  const std::string cf = Join(field, "cluster"), tf = Join(field, "task");
  ClusterSpec spec;
  if (auto c = j.find("cluster"); c != j.end() && !c->is_null()) {
    if (!c->is_object()) return InvalidArgument(cf + ": expected an object of jobs, got " + TypeName(*c));
    for (auto it = c->begin(); it != c->end(); ++it) {
      const std::string jf = Join(cf, it.key());
      if (!it->is_array()) {
        return InvalidArgument(jf + ": expected a list of \"host:port\" addresses, got " + TypeName(*it));
      }
      std::vector<std::string>& addrs = spec.jobs[it.key()];
      for (size_t i = 0; i < it->size(); ++i) {
        const json& a = (*it)[i];
        if (!a.is_string()) {
          return InvalidArgument(jf + "[" + std::to_string(i) + "]: expected a \"host:port\" string, got " +
                                 TypeName(a));
        }
        addrs.push_back(a.get<std::string>());
      }
    }
  }
  if (auto t = j.find("task"); t != j.end() && !t->is_null()) {
    if (!t->is_object()) return InvalidArgument(tf + ": expected an object {\"type\", \"index\"}, got " + TypeName(*t));
    for (auto it = t->begin(); it != t->end(); ++it) {
      if (it.key() != "type" && it.key() != "index" && it.key() != "trial") {
        return InvalidArgument(Join(tf, it.key()) + ": unknown key (a task has \"type\" and \"index\")");
      }
    }
    auto type = t->find("type");
    if (type == t->end()) return InvalidArgument(Join(tf, "type") + ": required");
    if (!type->is_string()) return InvalidArgument(Join(tf, "type") + ": expected a string, got " + TypeName(*type));
    spec.self.job = type->get<std::string>();
    if (spec.self.job.empty()) return InvalidArgument(Join(tf, "type") + ": must not be empty");
    auto index = t->find("index");
    if (index == t->end()) return InvalidArgument(Join(tf, "index") + ": required");
    if (!(index->is_number_integer() || index->is_number_unsigned())) {
      return InvalidArgument(Join(tf, "index") + ": expected an integer, got " + TypeName(*index));
    }
    long long v = index->is_number_unsigned() ? (long long)std::min<uint64_t>(index->get<uint64_t>(), 1u << 30)
                                              : index->get<long long>();
    if (v < 0) return InvalidArgument(Join(tf, "index") + ": " + std::to_string(v) + " is negative");
    spec.self.index = int(std::min<long long>(v, 1 << 30));
  }
  FS_RETURN_IF_ERROR(ValidateClusterSpec(spec, cf, tf));
  return spec;
}

StatusOr<ClusterSpec> ClusterSpecFromEnvironment(const char* (*getenv)(const char*)) {
  auto get = [getenv](const char* name) -> const char* {
    const char* v = getenv != nullptr ? getenv(name) : std::getenv(name);
    return v != nullptr && *v != '\0' ? v : nullptr;
  };
  if (const char* tf = get("TF_CONFIG")) return ParseClusterSpecJson(tf, "TF_CONFIG");
  const char* addr = get("MASTER_ADDR");
  const char* port = get("MASTER_PORT");
  const char* world = get("WORLD_SIZE");
  const char* rank = get("RANK");
  if (addr == nullptr && port == nullptr && world == nullptr && rank == nullptr) return ClusterSpec{};
  std::string missing;
  for (auto [name, v] : {std::pair{"MASTER_ADDR", addr}, {"MASTER_PORT", port}, {"WORLD_SIZE", world},
                         {"RANK", rank}}) {
    if (v == nullptr) missing += (missing.empty() ? "" : ", ") + std::string(name);
  }
  if (!missing.empty()) {
    return InvalidArgument(missing + ": not set (MASTER_ADDR, MASTER_PORT, WORLD_SIZE and RANK go together)");
  }
  long long w = 0, r = 0, p = 0;
  if (!ParseInt(world, &w)) return InvalidArgument("WORLD_SIZE: " + Quote(world) + " is not an integer");
  if (w < 1 || w > 65536) return InvalidArgument("WORLD_SIZE: " + std::to_string(w) + " is out of range (1..65536)");
  if (!ParseInt(rank, &r)) return InvalidArgument("RANK: " + Quote(rank) + " is not an integer");
  if (r < 0) return InvalidArgument("RANK: " + std::to_string(r) + " is negative");
  if (r >= w) {
    return InvalidArgument("RANK: " + std::to_string(r) + " is out of range: WORLD_SIZE is " +
                           std::to_string(w) + ", ranks 0.." + std::to_string(w - 1));
  }
  if (!ParseInt(port, &p) || p < 1 || p > 65535) {
    return InvalidArgument("MASTER_PORT: " + Quote(port) + " is not a port (1..65535)");
  }
  std::string host = addr;
  if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";
  const std::string master = host + ":" + std::to_string(p);
  FS_RETURN_IF_ERROR(CheckTaskAddress(master, "MASTER_ADDR"));
  ClusterSpec spec;
  std::vector<std::string>& addrs = spec.jobs["worker"];
  addrs.assign(size_t(w), "");
  addrs[0] = master;
  spec.self = TaskId{"worker", int(r)};
  if (w > 1) spec.registry = master;
  FS_RETURN_IF_ERROR(ValidateClusterSpec(spec, "MASTER_ADDR", "RANK"));
  return spec;
}

}  // namespace flowstate
