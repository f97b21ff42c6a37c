// DeviceName: TensorFlow-style device names, "/job:worker/replica:0/task:1/
// device:CPU:0", parsed, printed and matched against partial specifications
// ("/device:CPU:1", "CPU:1", "/job:worker", "gpu", ""). A field left out of a
// specification matches anything. Value type; thread-compatible.
#ifndef FLOWSTATE_DEVICES_DEVICE_NAME_H_
#define FLOWSTATE_DEVICES_DEVICE_NAME_H_

#include <string>
#include <string_view>

#include "graph/status.h"

namespace flowstate {

struct DeviceName {
  std::string job;   // empty: unspecified
  int replica = -1;  // -1: unspecified
  int task = -1;
  std::string type;  // "CPU", "GPU" (upper case); empty: unspecified
  int id = -1;

  // Accepts full and partial names; INVALID_ARGUMENT names the bad part.
  static StatusOr<DeviceName> Parse(std::string_view spec);
  // The canonical full form (unspecified fields left out).
  std::string ToString() const;
  // True when every field set in `spec` equals this name's field.
  bool Matches(const DeviceName& spec) const;
  bool IsFullySpecified() const {
    return !job.empty() && replica >= 0 && task >= 0 && !type.empty() && id >= 0;
  }
  // Merges fields of `other` into unset fields; INVALID_ARGUMENT on a clash.
  Status MergeFrom(const DeviceName& other);
};

}  // namespace flowstate

#endif  // FLOWSTATE_DEVICES_DEVICE_NAME_H_
