#include "state/input_pipeline.h"

#include <algorithm>
#include <cstring>
#include <span>
#include <system_error>
#include <utility>

#include "graph/allocator.h"
#include "graph/mutex.h"

namespace flowstate {
namespace {

// SplitMix64 (Steele, Lea, Flood 2014). Its finalizer mixes (seed, epoch)
// into the starting state; its sequence drives Fisher–Yates. Changing any
// constant here changes every shuffled order, and so what a resumed job
// reads: don't.
uint64_t Mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t state) : state_(state) {}
  uint64_t Next() { return Mix(state_ += 0x9E3779B97F4A7C15ull); }
  // Uniform in [0, bound) without modulo bias. REQUIRES: bound > 0.
  uint64_t Uniform(uint64_t bound) {
    const uint64_t threshold = (0 - bound) % bound;  // 2^64 mod bound
    while (true) {
      const uint64_t x = Next();
      if (x >= threshold) return x % bound;
    }
  }

 private:
  uint64_t state_;
};

}  // namespace

std::vector<int64_t> EpochOrder(int64_t n, bool shuffle, uint64_t seed, int64_t epoch) {
  std::vector<int64_t> order(size_t(std::max<int64_t>(n, 0)));
  for (size_t i = 0; i < order.size(); ++i) order[i] = int64_t(i);
  if (!shuffle) return order;
  SplitMix64 rng(Mix(seed) ^ Mix(uint64_t(epoch) + 0x9E3779B97F4A7C15ull));
  for (size_t i = order.size(); i > 1; --i) {
    std::swap(order[i - 1], order[rng.Uniform(i)]);
  }
  return order;
}

std::string PipelinePosition::ToString() const {
  return "epoch " + std::to_string(epoch) + ", offset " + std::to_string(offset);
}

StatusOr<std::unique_ptr<InputPipeline>> InputPipeline::Create(Dataset dataset,
                                                               const InputPipelineOptions& options,
                                                               PipelinePosition start) {
  const InputPipelineOptions& o = options;
  if (dataset.num_components() == 0) {
    return InvalidArgument("input pipeline: the dataset has no components");
  }
  if (o.batch_size <= 0) {
    return InvalidArgument("input pipeline: batch_size must be > 0, not " +
                           std::to_string(o.batch_size));
  }
  if (o.epochs < 0) {
    return InvalidArgument("input pipeline: epochs must be >= 0 (0: unbounded), not " +
                           std::to_string(o.epochs));
  }
  if (o.prefetch < 0) {
    return InvalidArgument("input pipeline: prefetch must be >= 0, not " +
                           std::to_string(o.prefetch));
  }
  if (o.max_examples && *o.max_examples < 0) {
    return InvalidArgument("input pipeline: max_examples must be >= 0, not " +
                           std::to_string(*o.max_examples));
  }
  if (o.max_examples) dataset = dataset.Take(*o.max_examples);
  const int64_t e = dataset.num_examples();
  const int64_t batches =
      o.drop_remainder ? e / o.batch_size : (e + o.batch_size - 1) / o.batch_size;
  if (batches == 0) {
    return InvalidArgument("input pipeline: an epoch of " + std::to_string(e) +
                           " examples holds no batch of " + std::to_string(o.batch_size) +
                           (o.drop_remainder ? " (drop_remainder is set)" : ""));
  }
  if (start.epoch < 0 || start.offset < 0 || start.offset > e ||
      (start.offset % o.batch_size != 0 && start.offset != e)) {
    return InvalidArgument("input pipeline: cannot start at " + start.ToString() +
                           ": not a batch boundary of an epoch of " + std::to_string(e) +
                           " examples in batches of " + std::to_string(o.batch_size));
  }
  auto p = std::unique_ptr<InputPipeline>(new InputPipeline(std::move(dataset), o, start));
  bool past_end = false;
  {
    MutexLock l(p->mu_);
    past_end = o.epochs > 0 && (p->consumer_.epoch > o.epochs ||
                                (p->consumer_.epoch == o.epochs && p->consumer_.offset != 0));
  }
  if (past_end) {
    return InvalidArgument("input pipeline: cannot start at " + start.ToString() +
                           ", past the last of " + std::to_string(o.epochs) + " epochs");
  }
  if (o.prefetch > 0) {
    try {
      p->producer_ = std::thread([raw = p.get()] { raw->ProducerLoop(); });
    } catch (const std::system_error& err) {
      return ResourceExhausted(std::string("input pipeline: cannot start its thread: ") +
                               err.what());
    }
  }
  return p;
}

InputPipeline::InputPipeline(Dataset dataset, const InputPipelineOptions& options,
                             PipelinePosition start)
    : dataset_(std::move(dataset)),
      options_(options),
      epoch_size_(dataset_.num_examples()),
      batches_per_epoch_(options.drop_remainder
                             ? epoch_size_ / options.batch_size
                             : (epoch_size_ + options.batch_size - 1) / options.batch_size) {
  cursor_ = Normalize(start);
  consumer_ = cursor_;
}

InputPipeline::~InputPipeline() {
  Cancel();
  {
    MutexLock l(mu_);
    while (consumers_ != 0) idle_.Wait(mu_);
  }
  if (producer_.joinable()) producer_.join();
}

PipelinePosition InputPipeline::Normalize(PipelinePosition p) const {
  const int64_t left = epoch_size_ - p.offset;
  if (left <= 0 || (options_.drop_remainder && left < options_.batch_size)) {
    return {p.epoch + 1, 0};
  }
  return p;
}

StatusOr<Batch> InputPipeline::Produce() {
  cursor_ = Normalize(cursor_);
  if (options_.epochs > 0 && cursor_.epoch >= options_.epochs) {
    return OutOfRange("end of input: all " + std::to_string(options_.epochs) +
                      " epochs have been read");
  }
  if (options_.shuffle && order_epoch_ != cursor_.epoch) {
    order_ = EpochOrder(epoch_size_, true, options_.seed, cursor_.epoch);
    order_epoch_ = cursor_.epoch;
  }
  Batch b;
  b.size = std::min(options_.batch_size, epoch_size_ - cursor_.offset);
  b.epoch = cursor_.epoch;
  b.offset = cursor_.offset;
  b.step = cursor_.epoch * batches_per_epoch_ + cursor_.offset / options_.batch_size;
  for (const auto& [name, src] : dataset_.components()) {
    TensorShape shape = src.shape();
    shape.set_dim(0, b.size);
    FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(HostAllocator(), src.dtype(), shape));
    const size_t row = src.TotalBytes() / size_t(epoch_size_);
    const auto* from = static_cast<const char*>(src.raw_data());
    auto* to = static_cast<char*>(t.raw_data());
    if (row != 0 && !options_.shuffle) {
      std::memcpy(to, from + size_t(b.offset) * row, size_t(b.size) * row);
    } else if (row != 0) {
      // Copy runs of consecutive indices with one memcpy each.
      const int64_t* idx = order_.data() + b.offset;
      for (int64_t i = 0; i < b.size;) {
        int64_t j = i + 1;
        while (j < b.size && idx[j] == idx[j - 1] + 1) ++j;
        std::memcpy(to + size_t(i) * row, from + size_t(idx[i]) * row, size_t(j - i) * row);
        i = j;
      }
    }
    b.components.emplace(name, std::move(t));
  }
  cursor_.offset += b.size;
  return b;
}

void InputPipeline::ProducerLoop() {
  const size_t depth = size_t(options_.prefetch);
  while (true) {
    {
      MutexLock l(mu_);
      while (!cancelled_ && queue_.size() >= depth) space_.Wait(mu_);
      if (cancelled_) return;
    }
    StatusOr<Batch> item = Produce();
    const bool last = !item.ok();
    {
      MutexLock l(mu_);
      if (cancelled_) return;
      queue_.push_back(std::move(item));
      ready_.NotifyOne();
    }
    if (last) return;
  }
}

StatusOr<Batch> InputPipeline::Next() {
  MutexLock l(mu_);
  ++consumers_;
  if (options_.prefetch == 0 && !cancelled_ && queue_.empty()) {
    l.Unlock();
    StatusOr<Batch> item = Produce();
    l.Lock();
    queue_.push_back(std::move(item));
  }
  while (!cancelled_ && queue_.empty()) ready_.Wait(mu_);

  StatusOr<Batch> result = Cancelled("input pipeline was cancelled");
  if (!cancelled_) {
    if (!queue_.front().ok()) {
      result = queue_.front().status();  // sticky: stays at the front
    } else {
      result = std::move(queue_.front());
      queue_.pop_front();
      consumer_ = Normalize({result->epoch, result->offset + result->size});
      space_.NotifyOne();
    }
  }
  // Notify with the lock held: once consumers_ is 0 the destructor may run.
  if (--consumers_ == 0 && cancelled_) idle_.NotifyAll();
  return result;
}

PipelinePosition InputPipeline::position() const {
  MutexLock l(mu_);
  return consumer_;
}

int InputPipeline::ready_batches() const {
  MutexLock l(mu_);
  int n = 0;
  for (const StatusOr<Batch>& item : queue_) n += item.ok() ? 1 : 0;
  return n;
}

void InputPipeline::Cancel() {
  MutexLock l(mu_);
  cancelled_ = true;
  ready_.NotifyAll();
  space_.NotifyAll();
}

std::string InputPipeline::DebugString() const {
  std::string s = "InputPipeline(" + dataset_.DebugString() + ", batch_size " +
                  std::to_string(options_.batch_size);
  if (options_.shuffle) s += ", shuffle seed " + std::to_string(options_.seed);
  s += ", epochs " + (options_.epochs ? std::to_string(options_.epochs) : "unbounded");
  return s + ", at " + position().ToString() + ")";
}

Batch ConcatBatches(const std::vector<Batch>& batches) {
  if (batches.size() == 1) return batches.front();
  Batch out;
  out.epoch = batches.front().epoch;
  out.offset = batches.front().offset;
  out.step = batches.front().step;
  for (const Batch& b : batches) out.size += b.size;
  for (const auto& [name, first] : batches.front().components) {
    std::vector<int64_t> dims(first.shape().dims().begin(), first.shape().dims().end());
    dims[0] = out.size;
    Tensor t(first.dtype(), TensorShape(std::span<const int64_t>(dims)));
    char* at = static_cast<char*>(t.raw_data());
    for (const Batch& b : batches) {
      const Tensor& part = b.components.at(name);
      if (part.TotalBytes() == 0) continue;  // no rows: no buffer
      std::memcpy(at, part.raw_data(), part.TotalBytes());
      at += part.TotalBytes();
    }
    out.components.emplace(name, std::move(t));
  }
  return out;
}

StatusOr<std::vector<Batch>> NextStepBatches(InputPipeline& pipeline, int batches_per_step) {
  std::vector<Batch> out;
  FS_ASSIGN_OR_RETURN(Batch first, pipeline.Next());
  out.push_back(std::move(first));
  while (int(out.size()) < batches_per_step && pipeline.position().epoch == out.front().epoch) {
    FS_ASSIGN_OR_RETURN(Batch next, pipeline.Next());
    out.push_back(std::move(next));
  }
  return out;
}

std::optional<Batch> ReplicaShare(const std::vector<Batch>& batches, int replica, int num_replicas) {
  if (replica < 0 || replica >= int(batches.size()) || num_replicas < 1) return std::nullopt;
  if (int(batches.size()) <= num_replicas) return batches[size_t(replica)];
  std::vector<Batch> mine;
  for (size_t k = size_t(replica); k < batches.size(); k += size_t(num_replicas)) mine.push_back(batches[k]);
  return ConcatBatches(mine);
}

}  // namespace flowstate
