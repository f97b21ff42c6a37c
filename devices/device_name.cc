#include "devices/device_name.h"

#include <cctype>
#include <charconv>
#include <vector>

namespace flowstate {
namespace {

bool ParseInt(std::string_view s, int* out) {
  if (s.empty()) return false;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && p == s.data() + s.size() && *out >= 0;
}

std::string Upper(std::string_view s) {
  std::string u(s);
  for (char& c : u) c = char(std::toupper(static_cast<unsigned char>(c)));
  return u;
}

bool ValidType(const std::string& t) {
  if (t.empty()) return false;
  for (char c : t) {
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_') return false;
  }
  return true;
}

}  // namespace

StatusOr<DeviceName> DeviceName::Parse(std::string_view spec) {
  DeviceName d;
  auto bad = [&](const std::string& why) {
    return InvalidArgument("malformed device '" + std::string(spec) + "': " + why);
  };
  std::vector<std::string_view> parts;
  size_t start = 0;
  for (size_t i = 0; i <= spec.size(); ++i) {
    if (i == spec.size() || spec[i] == '/') {
      if (i > start) parts.push_back(spec.substr(start, i - start));
      start = i + 1;
    }
  }
  for (std::string_view p : parts) {
    size_t colon = p.find(':');
    std::string_view key = p.substr(0, colon);
    std::string_view val = colon == std::string_view::npos ? "" : p.substr(colon + 1);
    if (key == "job") {
      if (val.empty()) return bad("empty job");
      d.job = std::string(val);
    } else if (key == "replica") {
      if (!ParseInt(val, &d.replica)) return bad("bad replica");
    } else if (key == "task") {
      if (!ParseInt(val, &d.task)) return bad("bad task");
    } else if (key == "device") {
      // "device:CPU:0" or "device:CPU"
      size_t c2 = val.find(':');
      d.type = Upper(val.substr(0, c2));
      if (!ValidType(d.type)) return bad("bad device type");
      if (c2 != std::string_view::npos && !ParseInt(val.substr(c2 + 1), &d.id)) {
        return bad("bad device id");
      }
    } else {
      // Short forms "CPU:0", "cpu", "GPU:1".
      d.type = Upper(key);
      if (!ValidType(d.type)) return bad("unknown field '" + std::string(key) + "'");
      if (colon != std::string_view::npos && !ParseInt(val, &d.id)) return bad("bad device id");
    }
  }
  return d;
}

std::string DeviceName::ToString() const {
  std::string s;
  if (!job.empty()) s += "/job:" + job;
  if (replica >= 0) s += "/replica:" + std::to_string(replica);
  if (task >= 0) s += "/task:" + std::to_string(task);
  if (!type.empty()) {
    s += "/device:" + type;
    if (id >= 0) s += ":" + std::to_string(id);
  }
  return s;
}

bool DeviceName::Matches(const DeviceName& spec) const {
  if (!spec.job.empty() && spec.job != job) return false;
  if (spec.replica >= 0 && spec.replica != replica) return false;
  if (spec.task >= 0 && spec.task != task) return false;
  if (!spec.type.empty() && spec.type != type) return false;
  if (spec.id >= 0 && spec.id != id) return false;
  return true;
}

Status DeviceName::MergeFrom(const DeviceName& o) {
  auto clash = [&](const char* field) {
    return InvalidArgument("devices '" + ToString() + "' and '" + o.ToString() +
                           "' disagree on " + field);
  };
  if (!o.job.empty()) {
    if (!job.empty() && job != o.job) return clash("job");
    job = o.job;
  }
  if (o.replica >= 0) {
    if (replica >= 0 && replica != o.replica) return clash("replica");
    replica = o.replica;
  }
  if (o.task >= 0) {
    if (task >= 0 && task != o.task) return clash("task");
    task = o.task;
  }
  if (!o.type.empty()) {
    if (!type.empty() && type != o.type) return clash("device type");
    type = o.type;
  }
  if (o.id >= 0) {
    if (id >= 0 && id != o.id) return clash("device id");
    id = o.id;
  }
  return Status();
}

}  // namespace flowstate
