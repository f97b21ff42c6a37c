#include "distributed/store_step_race.h"

#include <charconv>

namespace flowstate {

StoreStepRace::StoreStepRace(const CollectiveGroupSpec& spec, int contributors)
    : spec_(spec),
      contributors_(contributors),
      prefix_(spec.prefix + "/race"),
      store_(CollectiveStoreClient::Connect(spec.store_address)) {}

std::string StoreStepRace::StepPrefix(int64_t step) const {
  return prefix_ + "/" + std::to_string(step);
}

CollectiveStoreClient::Deadline StoreStepRace::Deadline() const {
  return std::chrono::steady_clock::now() + spec_.timeout;
}

Status StoreStepRace::Begin(int64_t step, int contributors) {
  Status s = store_->Set(StepPrefix(step), "quota", std::to_string(contributors), Deadline());
  return s.ok() ? s : s.WithPrefix("backup replicas, step " + std::to_string(step));
}

StatusOr<bool> StoreStepRace::Arrive(int64_t step, int rank) {
  const std::string at = StepPrefix(step);
  auto failed = [&](const Status& s) {
    return s.WithPrefix("backup replicas: rank " + std::to_string(rank) + ", step " +
                        std::to_string(step));
  };
  StatusOr<int64_t> ticket = store_->Add(at, "tickets", 1, Deadline());
  if (!ticket.ok()) return failed(ticket.status());
  int64_t quota = contributors_;
  StatusOr<std::string> q = store_->Get(at, "quota", Deadline());
  if (q.ok()) {
    auto [end, ec] = std::from_chars(q->data(), q->data() + q->size(), quota);
    if (ec != std::errc() || end != q->data() + q->size()) {
      return failed(Internal("the step's quota in the store is not a number: \"" + *q + "\""));
    }
  } else if (q.status().code() != Code::kNotFound) {
    return failed(q.status());
  }
  if (*ticket < quota) return true;
  if (*ticket == quota) {
    Status s = store_->Set(at, "decided", "1", Deadline());
    if (!s.ok()) return failed(s);
    return true;
  }
  StatusOr<int64_t> d = store_->Add(prefix_, "dropped/" + std::to_string(rank), 1, Deadline());
  if (!d.ok()) return failed(d.status());
  return false;
}

StatusOr<bool> StoreStepRace::WaitDecidedWithout(int64_t step, int rank,
                                                 std::chrono::milliseconds delay) {
  Status s = store_->Wait(StepPrefix(step), {"decided"}, std::chrono::steady_clock::now() + delay);
  if (s.code() == Code::kDeadlineExceeded) return false;
  if (!s.ok()) {
    return s.WithPrefix("backup replicas: rank " + std::to_string(rank) + ", step " +
                        std::to_string(step));
  }
  StatusOr<int64_t> d = store_->Add(prefix_, "dropped/" + std::to_string(rank), 1, Deadline());
  if (!d.ok()) return d.status();
  return true;
}

Status StoreStepRace::End(int64_t step) {
  return store_->DropPrefix(StepPrefix(step), Deadline());
}

StatusOr<std::vector<int64_t>> StoreStepRace::Dropped() {
  std::vector<int64_t> out(spec_.size, 0);
  for (int r = 0; r < spec_.size; ++r) {
    // An Add of 0 reads the counter (0 when no step dropped that rank yet).
    StatusOr<int64_t> d = store_->Add(prefix_, "dropped/" + std::to_string(r), 0, Deadline());
    if (!d.ok()) return d.status();
    out[r] = *d;
  }
  return out;
}

void RegisterStoreStepRaceFactory() {
  RegisterStepRaceFactory(
      "gloo",
      [](const CollectiveGroupSpec& spec, int contributors) -> StatusOr<std::shared_ptr<StepRace>> {
        return std::shared_ptr<StepRace>(std::make_shared<StoreStepRace>(spec, contributors));
      });
}

}  // namespace flowstate
