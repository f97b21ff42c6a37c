#include "config/config.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <fstream>
#include <sstream>

namespace flowstate::config {

extern const char kEmbeddedDefaultConfig[];  // generated from flowstate.json

namespace {

using json = nlohmann::json;

std::string TypeName(const json& j) {
  if (j.is_boolean()) return "a bool";
  if (j.is_number_integer() || j.is_number_unsigned()) return "an integer";
  if (j.is_number()) return "a number";
  if (j.is_string()) return "a string";
  if (j.is_array()) return "a list";
  if (j.is_object()) return "an object";
  return "null";
}

// `cluster`: {"<job>": ["host:port", ...]} (or null: none). Returns an
// error naming the path, or "".
std::string CheckClusterJson(const json& v, const std::string& path) {
  if (v.is_null()) return "";
  if (!v.is_object()) return path + ": expected an object {\"<job>\": [\"host:port\", ...]}, got " + TypeName(v);
  for (auto it = v.begin(); it != v.end(); ++it) {
    const std::string p = path + "." + it.key();
    if (!it->is_array()) return p + ": expected a list of \"host:port\" strings, got " + TypeName(*it);
    for (size_t i = 0; i < it->size(); ++i) {
      if (!(*it)[i].is_string()) {
        return p + "[" + std::to_string(i) + "]: expected a \"host:port\" string, got " + TypeName((*it)[i]);
      }
    }
  }
  return "";
}

// Overlays `src` onto `dst` (whose shape is the default's), checking keys
// and types. Returns an error naming the path, or "".
std::string Merge(json& dst, const json& src, const std::string& path) {
  if (!src.is_object()) return (path.empty() ? "the configuration" : path) + ": expected an object";
  for (auto it = src.begin(); it != src.end(); ++it) {
    std::string p = path.empty() ? it.key() : path + "." + it.key();
    auto d = dst.find(it.key());
    if (d == dst.end()) return p + ": unknown key";
    const json& v = it.value();
    if (p == "cluster") {
      std::string e = CheckClusterJson(v, p);
      if (!e.empty()) return e;
      *d = v.is_null() ? json::object() : v;
      continue;
    }
    if (d->is_object()) {
      std::string e = Merge(*d, v, p);
      if (!e.empty()) return e;
    } else if (d->is_array()) {
      if (!v.is_array()) return p + ": expected a list, got " + TypeName(v);
      for (const auto& e : v) {
        if (!e.is_string()) return p + ": expected a list of strings";
      }
      *d = v;
    } else if (d->is_boolean()) {
      if (!v.is_boolean()) return p + ": expected a bool, got " + TypeName(v);
      *d = v;
    } else if (d->is_number_integer() || d->is_number_unsigned()) {
      if (v.is_number_float() && v.get<double>() == double(int64_t(v.get<double>()))) {
        *d = int64_t(v.get<double>());
      } else if (!(v.is_number_integer() || v.is_number_unsigned())) {
        return p + ": expected an integer, got " + TypeName(v);
      } else {
        *d = v;
      }
    } else if (d->is_number()) {
      if (!v.is_number()) return p + ": expected a number, got " + TypeName(v);
      *d = v.get<double>();
    } else if (d->is_string()) {
      if (!v.is_string()) return p + ": expected a string, got " + TypeName(v);
      *d = v;
    }
  }
  return "";
}

// Parses a flag or environment value for the leaf at `path` of the default.
std::string SetFromText(json& root, const std::string& path, const std::string& text,
                        const std::string& source) {
  json* node = &root;
  std::stringstream ss(path);
  std::string part;
  while (std::getline(ss, part, '.')) {
    if (!node->is_object() || !node->contains(part)) return source + ": unknown key '" + path + "'";
    node = &(*node)[part];
  }
  if (node->is_object()) return source + ": '" + path + "' is a section, not a key";
  json v;
  if (node->is_array()) {
    v = json::array();
    std::stringstream items(text);
    std::string item;
    while (std::getline(items, item, ',')) {
      if (!item.empty()) v.push_back(item);
    }
  } else if (node->is_boolean()) {
    if (text == "true" || text == "1") {
      v = true;
    } else if (text == "false" || text == "0") {
      v = false;
    } else {
      return source + ": '" + path + "' expects true or false, got '" + text + "'";
    }
  } else if (node->is_number_integer() || node->is_number_unsigned()) {
    char* end = nullptr;
    long long x = std::strtoll(text.c_str(), &end, 10);
    if (text.empty() || *end != '\0') return source + ": '" + path + "' expects an integer, got '" + text + "'";
    v = int64_t(x);
  } else if (node->is_number()) {
    char* end = nullptr;
    double x = std::strtod(text.c_str(), &end);
    if (text.empty() || *end != '\0') return source + ": '" + path + "' expects a number, got '" + text + "'";
    v = x;
  } else {
    v = text;
  }
  *node = v;
  return "";
}

// `cluster` from JSON text (an environment variable or flag).
std::string SetClusterFromText(json& root, const std::string& text, const std::string& source) {
  json v = json::parse(text, nullptr, false);
  if (v.is_discarded()) return source + ": not valid JSON (expected {\"<job>\": [\"host:port\", ...]})";
  std::string e = CheckClusterJson(v, source);
  if (!e.empty()) return e;
  root["cluster"] = v.is_null() ? json::object() : v;
  return "";
}

void Leaves(const json& j, const std::string& path, std::vector<std::string>* out) {
  for (auto it = j.begin(); it != j.end(); ++it) {
    std::string p = path.empty() ? it.key() : path + "." + it.key();
    if (it->is_object()) {
      Leaves(*it, p, out);
    } else {
      out->push_back(p);
    }
  }
}

std::string EnvName(const std::string& path) {
  std::string n = "FLOWSTATE_";
  for (char c : path) n += c == '.' ? '_' : char(std::toupper(static_cast<unsigned char>(c)));
  return n;
}

std::string Check(bool ok, const std::string& what) { return ok ? "" : what; }

// Typed view of the merged tree, with range checks.
std::string Convert(const json& j, ServerConfig* c) {
  const json& h = j["http"];
  c->http.address = h["address"];
  c->http.threads = h["threads"];
  c->http.body_limit_bytes = h["body_limit_bytes"];
  c->http.unauthenticated_body_limit_bytes = h["unauthenticated_body_limit_bytes"];
  c->http.max_connections = h["max_connections"];
  c->http.read_timeout_seconds = h["read_timeout_seconds"];
  c->http.idle_timeout_seconds = h["idle_timeout_seconds"];
  c->http.max_pipelined_requests = h["max_pipelined_requests"];
  c->grpc.address = j["grpc"]["address"];
  c->http.inline_below_us = h["inline_below_us"];
  c->http.spin_us = h["spin_us"];
  c->http.server_timing = h["server_timing"];
  c->grpc.max_message_bytes = j["grpc"]["max_message_bytes"];
  c->grpc.max_concurrent_streams = j["grpc"]["max_concurrent_streams"];
  c->grpc.memory_limit_bytes = j["grpc"]["memory_limit_bytes"];
  c->grpc.handler_threads = j["grpc"]["handler_threads"];
  c->grpc.inline_below_us = j["grpc"]["inline_below_us"];
  c->grpc.spin_us = j["grpc"]["spin_us"];
  c->grpc.poll_strategy = j["grpc"]["poll_strategy"];
  c->grpc.server_timing = j["grpc"]["server_timing"];
  c->data_dir = j["data_dir"];
  c->data_root = j["data_root"];
  c->devices.cpu_devices = j["devices"]["cpu_devices"];
  c->devices.intra_op_threads = j["devices"]["intra_op_threads"];
  c->jobs.max_running = j["jobs"]["max_running"];
  c->jobs.workers = j["jobs"]["workers"];
  c->jobs.inter_op_threads = j["jobs"]["inter_op_threads"];
  c->jobs.max_step_events_per_second = j["jobs"]["max_step_events_per_second"];
  c->jobs.retention_max_finished = j["jobs"]["retention_max_finished"];
  c->jobs.retention_seconds = j["jobs"]["retention_seconds"];
  c->devices.memory_limit_fraction = j["devices"]["memory_limit_fraction"];
  c->devices.memory_limit_bytes = j["devices"]["memory_limit_bytes"];
  c->devices.huge_pages_min_bytes = j["devices"]["huge_pages_min_bytes"];
  c->limits.max_shape_bytes = j["limits"]["max_shape_bytes"];
  c->sessions.idle_timeout_seconds = j["sessions"]["idle_timeout_seconds"];
  c->sessions.max_sessions = j["sessions"]["max_sessions"];
  c->sessions.max_step_ms = j["sessions"]["max_step_ms"];
  c->server.shutdown_timeout_s = j["server"]["shutdown_timeout_s"];
  c->limits.max_tensor_bytes = j["limits"]["max_tensor_bytes"];
  const int64_t json_depth = j["limits"]["max_json_depth"];
  c->limits.max_json_depth = int(std::clamp<int64_t>(json_depth, 0, 1 << 30));
  c->limits.max_event_streams = j["limits"]["max_event_streams"];
  c->limits.max_model_bytes = j["limits"]["max_model_bytes"];
  c->limits.max_models = j["limits"]["max_models"];
  c->limits.max_dataset_bytes = j["limits"]["max_dataset_bytes"];
  c->limits.max_datasets = j["limits"]["max_datasets"];
  c->auth.tokens = j["auth"]["tokens"].get<std::vector<std::string>>();
  c->auth.open_routes = j["auth"]["open_routes"].get<std::vector<std::string>>();
  c->log.requests = j["log"]["requests"];
  c->cluster = j["cluster"].get<std::map<std::string, std::vector<std::string>>>();
  c->task.type = j["task"]["type"];
  c->task.index = j["task"]["index"];
  const json& co = j["cluster_options"];
  c->cluster_options.heartbeat_interval_seconds = co["heartbeat_interval_seconds"];
  c->cluster_options.heartbeat_deadline_seconds = co["heartbeat_deadline_seconds"];
  c->cluster_options.step_deadline_seconds = co["step_deadline_seconds"];
  c->cluster_options.join_timeout_seconds = co["join_timeout_seconds"];
  c->cluster_options.orphan_session_seconds = co["orphan_session_seconds"];
  c->cluster_options.advertise_host = co["advertise_host"];
  for (const std::string& e :
       {Check(!c->http.address.empty(), "http.address: must not be empty"),
        Check(c->http.threads >= 1, "http.threads: must be >= 1"),
        Check(c->http.body_limit_bytes >= 1024, "http.body_limit_bytes: must be >= 1024"),
        Check(c->http.unauthenticated_body_limit_bytes >= 0,
              "http.unauthenticated_body_limit_bytes: must be >= 0"),
        Check(c->http.max_connections >= 1, "http.max_connections: must be >= 1"),
        Check(c->http.read_timeout_seconds > 0, "http.read_timeout_seconds: must be > 0"),
        Check(c->http.idle_timeout_seconds > 0, "http.idle_timeout_seconds: must be > 0"),
        Check(c->http.max_pipelined_requests >= 1, "http.max_pipelined_requests: must be >= 1"),
        Check(c->http.inline_below_us >= 0, "http.inline_below_us: must be >= 0"),
        Check(c->http.spin_us >= 0 && c->http.spin_us <= 100000,
              "http.spin_us: must be in [0, 100000]"),
        Check(c->grpc.max_message_bytes >= 1024, "grpc.max_message_bytes: must be >= 1024"),
        Check(c->grpc.max_concurrent_streams >= 1, "grpc.max_concurrent_streams: must be >= 1"),
        Check(c->grpc.memory_limit_bytes == 0 || c->grpc.memory_limit_bytes >= c->grpc.max_message_bytes,
              "grpc.memory_limit_bytes: must be 0 (none) or >= grpc.max_message_bytes"),
        Check(c->grpc.handler_threads >= 1, "grpc.handler_threads: must be >= 1"),
        Check(c->grpc.inline_below_us >= 0, "grpc.inline_below_us: must be >= 0"),
        Check(c->grpc.spin_us >= 0 && c->grpc.spin_us <= 100000,
              "grpc.spin_us: must be in [0, 100000]"),
        Check(c->grpc.poll_strategy.empty() || c->grpc.poll_strategy == "poll" ||
                  c->grpc.poll_strategy == "epoll1",
              "grpc.poll_strategy: must be \"poll\", \"epoll1\" or \"\" (gRPC's default)"),
        Check(!c->data_dir.empty(), "data_dir: must not be empty"),
        Check(!c->data_root.empty(), "data_root: must not be empty"),
        Check(c->devices.cpu_devices >= 1, "devices.cpu_devices: must be >= 1"),
        Check(c->devices.intra_op_threads >= 0, "devices.intra_op_threads: must be >= 0"),
        Check(c->jobs.max_running >= 1, "jobs.max_running: must be >= 1"),
        Check(c->jobs.workers >= 1, "jobs.workers: must be >= 1"),
        Check(c->jobs.inter_op_threads >= 1, "jobs.inter_op_threads: must be >= 1"),
        Check(c->jobs.max_step_events_per_second > 0, "jobs.max_step_events_per_second: must be > 0"),
        Check(c->jobs.retention_max_finished >= 0, "jobs.retention_max_finished: must be >= 0 (0: no limit)"),
        Check(c->jobs.retention_seconds >= 0, "jobs.retention_seconds: must be >= 0 (0: forever)"),
        Check(c->devices.memory_limit_fraction > 0 && c->devices.memory_limit_fraction <= 1,
              "devices.memory_limit_fraction: must be in (0, 1]"),
        Check(c->devices.memory_limit_bytes >= 0, "devices.memory_limit_bytes: must be >= 0 (0: use the fraction)"),
        Check(c->devices.huge_pages_min_bytes >= 0, "devices.huge_pages_min_bytes: must be >= 0 (0: no huge pages)"),
        Check(c->limits.max_shape_bytes >= 1, "limits.max_shape_bytes: must be >= 1"),
        Check(c->sessions.idle_timeout_seconds > 0, "sessions.idle_timeout_seconds: must be > 0"),
        Check(c->sessions.max_sessions >= 1, "sessions.max_sessions: must be >= 1"),
        Check(c->sessions.max_step_ms >= 0, "sessions.max_step_ms: must be >= 0 (0: no bound)"),
        Check(c->server.shutdown_timeout_s > 0, "server.shutdown_timeout_s: must be > 0"),
        Check(c->limits.max_tensor_bytes >= 1, "limits.max_tensor_bytes: must be >= 1"),
        // api::kMaxJsonDepthCeiling (config/ sees no api/ header).
        Check(json_depth >= 1 && json_depth <= 10000,
              "limits.max_json_depth: must be in [1, 10000]"),
        Check(c->limits.max_event_streams >= 1, "limits.max_event_streams: must be >= 1"),
        Check(c->limits.max_model_bytes >= 1, "limits.max_model_bytes: must be >= 1"),
        Check(c->limits.max_models >= 0, "limits.max_models: must be >= 0"),
        Check(c->limits.max_dataset_bytes >= 1, "limits.max_dataset_bytes: must be >= 1"),
        Check(c->limits.max_datasets >= 0, "limits.max_datasets: must be >= 0"),
        Check(c->task.index >= -1, "task.index: must be >= 0 (-1: not set)"),
        Check(c->cluster_options.heartbeat_interval_seconds > 0,
              "cluster_options.heartbeat_interval_seconds: must be > 0"),
        Check(c->cluster_options.heartbeat_deadline_seconds > c->cluster_options.heartbeat_interval_seconds,
              "cluster_options.heartbeat_deadline_seconds: must be > "
              "cluster_options.heartbeat_interval_seconds (a deadline of one interval or less "
              "reports a healthy task down)"),
        Check(c->cluster_options.step_deadline_seconds >= 0,
              "cluster_options.step_deadline_seconds: must be >= 0 (0: no limit)"),
        Check(c->cluster_options.join_timeout_seconds > 0,
              "cluster_options.join_timeout_seconds: must be > 0"),
        Check(c->cluster_options.orphan_session_seconds >= 0,
              "cluster_options.orphan_session_seconds: must be >= 0"),
        Check(c->cluster_options.advertise_host.find_first_of(" \t:/") == std::string::npos,
              "cluster_options.advertise_host: a host name or IPv4 address, without port, "
              "spaces or '/'")}) {
    if (!e.empty()) return e;
  }
  return "";
}

Status Fail(std::string e) {
  return InvalidArgument(std::move(e));
}

}  // namespace

std::string_view DefaultConfigJson() { return kEmbeddedDefaultConfig; }

ServerConfig DefaultConfig() {
  ServerConfig c;
  json j = json::parse(DefaultConfigJson());
  std::string e = Convert(j, &c);
  (void)e;  // the embedded default is checked by a test
  return c;
}

StatusOr<std::string> ParseConfigJson(std::string_view text, ServerConfig* config) {
  json merged = json::parse(DefaultConfigJson());
  json src = json::parse(text.begin(), text.end(), nullptr, false);
  if (src.is_discarded()) return Fail("the configuration is not valid JSON");
  std::string e = Merge(merged, src, "");
  if (!e.empty()) return Fail(e);
  e = Convert(merged, config);
  if (!e.empty()) return Fail(e);
  return merged.dump(2);
}

StatusOr<std::string> LoadServerConfig(const std::vector<std::string>& args,
                            const std::function<const char*(const char*)>& getenv,
                            ServerConfig* config) {
  json merged = json::parse(DefaultConfigJson());
  // The file: --config wins over FLOWSTATE_CONFIG.
  std::string file;
  if (const char* f = getenv("FLOWSTATE_CONFIG")) file = f;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--config") {
      if (i + 1 >= args.size()) return Fail("--config needs a file");
      file = args[i + 1];
    }
  }
  if (!file.empty()) {
    std::ifstream in(file);
    if (!in) return Fail("cannot read the configuration file " + file);
    std::stringstream s;
    s << in.rdbuf();
    json src = json::parse(s.str(), nullptr, false);
    if (src.is_discarded()) return Fail(file + ": not valid JSON");
    std::string e = Merge(merged, src, "");
    if (!e.empty()) return Fail(file + ": " + e);
  }
  if (const char* v = getenv("FLOWSTATE_CLUSTER"); v != nullptr && *v != '\0') {
    std::string e = SetClusterFromText(merged, v, "FLOWSTATE_CLUSTER");
    if (!e.empty()) return Fail(e);
  }
  std::vector<std::string> leaves;
  Leaves(json::parse(DefaultConfigJson()), "", &leaves);
  for (const std::string& leaf : leaves) {
    std::string name = EnvName(leaf);
    if (const char* v = getenv(name.c_str())) {
      std::string e = SetFromText(merged, leaf, v, name);
      if (!e.empty()) return Fail(e);
    }
  }
  static const std::pair<const char*, const char*> kShortFlags[] = {
      {"--http", "http.address"}, {"--grpc", "grpc.address"},
      {"--data-dir", "data_dir"}, {"--data-root", "data_root"}};
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--config") {
      ++i;
      continue;
    }
    bool matched = false;
    for (const auto& [flag, key] : kShortFlags) {
      if (a == flag) {
        if (i + 1 >= args.size()) return Fail(a + " needs a value");
        std::string e = SetFromText(merged, key, args[++i], a);
        if (!e.empty()) return Fail(e);
        matched = true;
      }
    }
    if (matched) continue;
    if (a == "--cluster") {
      if (i + 1 >= args.size()) return Fail("--cluster needs a JSON object {\"<job>\": [\"host:port\", ...]}");
      std::string e = SetClusterFromText(merged, args[++i], "--cluster");
      if (!e.empty()) return Fail(e);
      continue;
    }
    if (a == "--task") {
      if (i + 1 >= args.size()) return Fail("--task needs TYPE:INDEX (worker:1)");
      const std::string t = args[++i];
      const size_t colon = t.rfind(':');
      if (colon == std::string::npos || colon == 0) return Fail("--task " + t + ": expected TYPE:INDEX (worker:1)");
      std::string e = SetFromText(merged, "task.type", t.substr(0, colon), "--task");
      if (e.empty()) e = SetFromText(merged, "task.index", t.substr(colon + 1), "--task");
      if (!e.empty()) return Fail(e);
      if (merged["task"]["index"].get<int64_t>() < 0) return Fail("--task " + t + ": the index must be >= 0");
      continue;
    }
    if (a == "--set") {
      if (i + 1 >= args.size()) return Fail("--set needs section.key=value");
      std::string kv = args[++i];
      size_t eq = kv.find('=');
      if (eq == std::string::npos) return Fail("--set " + kv + ": expected section.key=value");
      std::string e = kv.substr(0, eq) == "cluster"
                          ? SetClusterFromText(merged, kv.substr(eq + 1), "--set cluster")
                          : SetFromText(merged, kv.substr(0, eq), kv.substr(eq + 1), "--set");
      if (!e.empty()) return Fail(e);
      continue;
    }
    return Fail("unknown flag " + a);
  }
  std::string e = Convert(merged, config);
  if (!e.empty()) return Fail(e);
  return merged.dump(2);
}

}  // namespace flowstate::config
