#include "distributed/store_step_race.h"

#include <bit>
#include <charconv>
#include <thread>

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

namespace {

constexpr int kWithoutShift = 32;  // arrivals of ranks without examples
constexpr uint64_t kWithMask = (uint64_t(1) << kWithoutShift) - 1;

std::vector<int> Ranks(uint64_t bits) {
  std::vector<int> out;
  for (int r = 0; r < kWithoutShift; ++r) {
    if (bits & (uint64_t(1) << r)) out.push_back(r);
  }
  return out;
}

}  // namespace

StatusOr<StepRace::Decision> StoreStepRace::Decide(int64_t step, int rank, bool has_examples,
                                                   std::chrono::steady_clock::time_point deadline,
                                                   std::chrono::milliseconds settle_after) {
  const std::string at = StepPrefix(step);
  auto failed = [&](const Status& s) {
    return s.WithPrefix("backup replicas: rank " + std::to_string(rank) + ", step " +
                        std::to_string(step));
  };
  if (rank < 0 || rank >= kWithoutShift || spec_.size > kWithoutShift) {
    return failed(InvalidArgument("backup replicas race among at most " +
                                  std::to_string(kWithoutShift) + " ranks"));
  }
  const uint64_t mine = uint64_t(1) << (rank + (has_examples ? 0 : kWithoutShift));
  StatusOr<int64_t> sum = store_->Add(at, "arrivals", int64_t(mine), Deadline());
  if (!sum.ok()) return failed(sum.status());
  const uint64_t arrivals = uint64_t(*sum);
  const int with = std::popcount(arrivals & kWithMask);
  const int all = with + std::popcount(arrivals >> kWithoutShift);
  Decision d;
  uint64_t members = 0;
  // Sets the decision unless one is set; `members` becomes the one set.
  auto decide = [&](uint64_t mine) -> Status {
    StatusOr<CollectiveStoreClient::Claim> c =
        store_->SetIfAbsent(at, "decided", std::to_string(mine), Deadline());
    if (!c.ok()) return c.status();
    return ParseMembers(c->value, &members);
  };
  if ((has_examples && with == contributors_) || (all == spec_.size && with < contributors_)) {
    // This arrival decides the step.
    Status s = decide(arrivals & kWithMask);
    if (!s.ok()) return failed(s);
  } else {
    const bool may_settle = has_examples && settle_after.count() > 0;
    const auto settle = std::min(deadline, std::chrono::steady_clock::now() + settle_after);
    Status w = store_->Wait(at, {"decided"}, may_settle ? settle : deadline);
    if (may_settle && w.code() == Code::kDeadlineExceeded) {
      // gRPC's deadline may fire a little early: the full settle_after.
      std::this_thread::sleep_until(settle);
    }
    if (may_settle && w.code() == Code::kDeadlineExceeded && std::chrono::steady_clock::now() < deadline) {
      // Waited long enough: the step goes on with the ranks with examples
      // that have come (an Add of 0 reads them), unless it was decided.
      StatusOr<int64_t> now = store_->Add(at, "arrivals", 0, Deadline());
      if (!now.ok()) return failed(now.status());
      w = decide(uint64_t(*now) & kWithMask);
    } else if (w.ok()) {
      StatusOr<std::string> v = store_->Get(at, "decided", Deadline());
      w = v.ok() ? ParseMembers(*v, &members) : v.status();
    }
    if (!w.ok()) return failed(w);
  }
  d.members = Ranks(members);
  d.contributes = (members >> rank) & 1;
  if (has_examples && !d.contributes) {
    StatusOr<int64_t> n = store_->Add(prefix_, "dropped/" + std::to_string(rank), 1, Deadline());
    if (!n.ok()) return failed(n.status());
  }
  return d;
}

Status StoreStepRace::ParseMembers(const std::string& v, uint64_t* members) {
  auto [end, ec] = std::from_chars(v.data(), v.data() + v.size(), *members);
  if (ec != std::errc() || end != v.data() + v.size()) {
    return Internal("the step's decision in the store is not a number: \"" + v + "\"");
  }
  return Status();
}

StatusOr<bool> StoreStepRace::Decided(int64_t step) {
  StatusOr<std::string> v = store_->Get(StepPrefix(step), "decided", Deadline());
  if (v.ok()) return true;
  if (v.status().code() == Code::kNotFound) return false;
  return v.status().WithPrefix("backup replicas, step " + std::to_string(step));
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

namespace {

constexpr const char* kDone = "done";
constexpr const char* kAbandoned = "abandoned";

StatusOr<StepRace::Outcome> ParseOutcome(const std::string& v) {
  if (v == kDone) return StepRace::Outcome::kDone;
  if (v == kAbandoned) return StepRace::Outcome::kAbandoned;
  return Internal("the step's outcome in the store is neither done nor abandoned: \"" + v + "\"");
}

}  // namespace

StatusOr<StepRace::Outcome> StoreStepRace::Settle(int64_t step, Outcome proposal,
                                                  std::chrono::steady_clock::time_point deadline) {
  auto failed = [&](const Status& s) {
    return s.WithPrefix("backup replicas: settling step " + std::to_string(step));
  };
  StatusOr<CollectiveStoreClient::Claim> c = store_->SetIfAbsent(
      StepPrefix(step), "outcome", proposal == Outcome::kDone ? kDone : kAbandoned, deadline);
  if (!c.ok()) return failed(c.status());
  StatusOr<Outcome> o = ParseOutcome(c->value);
  if (!o.ok()) return failed(o.status());
  return o;
}

StatusOr<StepRace::Outcome> StoreStepRace::OutcomeOf(int64_t step) {
  StatusOr<std::string> v = store_->Get(StepPrefix(step), "outcome", Deadline());
  if (v.status().code() == Code::kNotFound) return Outcome::kOpen;
  if (!v.ok()) return v.status().WithPrefix("backup replicas, step " + std::to_string(step));
  return ParseOutcome(*v);
}

Status StoreStepRace::RecordAbandoned(int64_t step, int rank) {
  StatusOr<int64_t> n = store_->Add(prefix_, "dropped/" + std::to_string(rank), 1, Deadline());
  if (!n.ok()) {
    return n.status().WithPrefix("backup replicas: rank " + std::to_string(rank) + ", step " +
                                 std::to_string(step));
  }
  return Status();
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
