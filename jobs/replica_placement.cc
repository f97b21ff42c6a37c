#include "jobs/replica_placement.h"

#include "devices/device_name.h"

namespace flowstate {

std::string ReplicaTaskOf(const JobSpec& spec, int i, const DevicePool& local) {
  if (i < 0 || i >= int(spec.devices.size())) return "";
  StatusOr<DeviceName> d = DeviceName::Parse(spec.devices[i]);
  if (!d.ok() || !local.Matching(*d).empty() || d->job.empty() || d->task < 0) return "";
  return "/job:" + d->job + "/task:" + std::to_string(d->task);
}

bool ReplicasAcrossTasks(const JobSpec& spec, const DevicePool& local) {
  if (spec.replicas <= 1) return false;
  for (int i = 0; i < spec.replicas; ++i) {
    if (!ReplicaTaskOf(spec, i, local).empty()) return true;
  }
  return false;
}

}  // namespace flowstate
