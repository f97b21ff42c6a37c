// InputPipeline: batches of a Dataset for training steps — batching, seeded
// shuffling, epochs, and a bounded prefetch queue filled by a background
// thread, so a step never waits on assembling its batch.
//
//   FS_ASSIGN_OR_RETURN(Dataset train, LoadIdxDataset(root, {{"x", ...}, {"y", ...}}));
//   InputPipelineOptions opt;
//   opt.batch_size = 128; opt.shuffle = true; opt.seed = 7; opt.epochs = 3;
//   FS_ASSIGN_OR_RETURN(auto pipeline, InputPipeline::Create(train, opt));
//   while (true) {
//     StatusOr<Batch> b = pipeline->Next();       // OUT_OF_RANGE after epoch 3
//     if (!b.ok()) break;                         // ... or a real error
//     Step(b->components.at("x"), b->components.at("y"));
//     if (checkpoint_due) Save(pipeline->position());  // with opt
//   }
//
// Order. An epoch visits each of the first E examples exactly once, E =
// min(max_examples, dataset size): in index order, or with `shuffle` in the
// order EpochOrder(E, true, seed, epoch) gives — a Fisher–Yates permutation
// drawn from a SplitMix64 generator seeded by (seed, epoch) alone, defined
// in input_pipeline.cc without the C++ library's unspecified distributions,
// so any epoch's order is reproducible on any platform without replaying
// the epochs before it. An epoch's batches are its order cut into
// batch_size pieces; the last, smaller piece is a batch unless
// drop_remainder. (Shuffling permutes the first E examples; it does not
// sample E of the whole set.)
//
// Position and resume. A PipelinePosition {epoch, offset} names a batch by
// its epoch and the number of that epoch's examples that come before it.
// position() is the position of the batch the next Next() returns — batches
// already prefetched but not yet returned do not count. The whole state of a
// pipeline is (options, position): the shuffle generator is a function of
// (options.seed, epoch), so there is no other RNG state. A pipeline created
// with Create(dataset, options, p) returns exactly the batches, in the same
// order and with the same `step` numbers, that a pipeline with the same
// dataset and options returns after its position() reached p. Persist
// options.seed with the position.
//
// Ownership and threads. The pipeline holds a reference to the dataset's
// buffers (Dataset is an immutable value) and owns its producer thread and
// the prefetched batches; each returned Batch owns fresh tensors. Next() may
// be called by one consumer thread at a time; position(), Cancel() and the
// accessors are thread-safe. The destructor cancels, wakes a consumer
// blocked in Next() (which returns CANCELLED), waits for it to leave, and
// joins the producer, also when the producer is blocked on a full queue.
// (A Next() that starts after destruction began is, as always, a
// use-after-free: stop calling before destroying.)
#ifndef FLOWSTATE_STATE_INPUT_PIPELINE_H_
#define FLOWSTATE_STATE_INPUT_PIPELINE_H_

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "graph/mutex.h"
#include "graph/status.h"
#include "graph/tensor.h"
#include "state/dataset.h"
#include "state/resource_mgr.h"

namespace flowstate {

struct InputPipelineOptions {
  int64_t batch_size = 32;      // > 0
  bool shuffle = false;         // a fresh permutation each epoch
  uint64_t seed = 0;            // with shuffle: picks the permutations
  int64_t epochs = 1;           // >= 0; 0 = unbounded
  bool drop_remainder = false;  // drop each epoch's last batch if smaller
  int prefetch = 4;             // >= 0 batches assembled ahead; 0: no
                                // thread, Next() assembles the batch itself
  // Use only the first max_examples examples of the dataset (all when
  // unset or larger than the dataset). >= 0.
  std::optional<int64_t> max_examples;
};

struct PipelinePosition {
  int64_t epoch = 0;   // 0-based
  int64_t offset = 0;  // examples of `epoch` before the batch
  bool operator==(const PipelinePosition&) const = default;
  std::string ToString() const;  // "epoch 2, offset 384"
};

struct Batch {
  // Component name -> tensor [size, ...example shape], the dataset's dtype.
  std::map<std::string, Tensor> components;
  int64_t size = 0;    // examples in this batch (batch_size except a remainder)
  int64_t epoch = 0;   // the epoch the batch belongs to
  int64_t offset = 0;  // examples of the epoch before this batch
  // The batch's index in an uninterrupted run:
  // epoch * batches_per_epoch() + offset / batch_size.
  int64_t step = 0;
};

class InputPipeline final : public ResourceBase {
 public:
  // Starts a pipeline whose first batch is the one at `start`; the default
  // is the beginning. INVALID_ARGUMENT for options out of range, for a
  // dataset without components, when an epoch would hold no batch (no
  // examples, or fewer than batch_size with drop_remainder), or for a
  // `start` that is not a batch boundary (0 <= offset <= E, offset a
  // multiple of batch_size or E) or lies past the last epoch. `start` one
  // past the last batch is allowed: Next() is OUT_OF_RANGE at once.
  static StatusOr<std::unique_ptr<InputPipeline>> Create(Dataset dataset,
                                                         const InputPipelineOptions& options,
                                                         PipelinePosition start = {});
  ~InputPipeline() override;
  InputPipeline(const InputPipeline&) = delete;
  InputPipeline& operator=(const InputPipeline&) = delete;

  // The next batch; blocks only while none is ready. OUT_OF_RANGE after the
  // last batch of the last epoch (and on every call after that); CANCELLED
  // after Cancel(); RESOURCE_EXHAUSTED if a batch could not be allocated.
  // Errors are sticky. REQUIRES: one caller at a time.
  StatusOr<Batch> Next();

  // The position of the batch the next Next() returns (normalized: never at
  // the end of an epoch, {epochs, 0} once all are done).
  PipelinePosition position() const;

  // Stops the producer; Next() returns CANCELLED from now on, including a
  // call blocked right now. Idempotent.
  void Cancel();

  // Batches assembled and waiting for Next() (<= prefetch): a queue depth
  // for metrics.
  int ready_batches() const;

  const InputPipelineOptions& options() const { return options_; }
  const Dataset& dataset() const { return dataset_; }  // the first E examples
  int64_t examples_per_epoch() const { return epoch_size_; }
  int64_t batches_per_epoch() const { return batches_per_epoch_; }

  std::string DebugString() const override;

 private:
  InputPipeline(Dataset dataset, const InputPipelineOptions& options, PipelinePosition start);

  // Moves a position at or past the end of its epoch's batches to the
  // start of the next epoch.
  PipelinePosition Normalize(PipelinePosition p) const;
  // Assembles the batch at cursor_ and advances it; OUT_OF_RANGE at the
  // end. Touches only the producer's state (cursor_, order_).
  StatusOr<Batch> Produce();
  void ProducerLoop();

  const Dataset dataset_;
  const InputPipelineOptions options_;
  const int64_t epoch_size_;
  const int64_t batches_per_epoch_;

  // Producer state: the producer thread's, or the consumer's when
  // prefetch == 0.
  PipelinePosition cursor_;
  int64_t order_epoch_ = -1;
  std::vector<int64_t> order_;  // the permutation of epoch order_epoch_

  mutable Mutex mu_;
  CondVar ready_;  // the queue got an item, or cancelled
  CondVar space_;  // the queue lost an item, or cancelled
  CondVar idle_;   // the consumer left Next()
  // Batches, then possibly one final error (OUT_OF_RANGE or a failure) that
  // stays at the front once reached.
  std::deque<StatusOr<Batch>> queue_ ABSL_GUARDED_BY(mu_);
  PipelinePosition consumer_ ABSL_GUARDED_BY(mu_);
  bool cancelled_ ABSL_GUARDED_BY(mu_) = false;
  int consumers_ ABSL_GUARDED_BY(mu_) = 0;                  // callers inside Next()
  std::thread producer_;
};

// The examples of `batches` (of one pipeline, in order) as one batch: each
// component concatenated along its first dimension; the first's epoch,
// offset and step. REQUIRES: `batches` is not empty.
Batch ConcatBatches(const std::vector<Batch>& batches);

// One data-parallel step's batches (jobs/training_job.h, "replicas"): the
// pipeline's next batch and up to batches_per_step - 1 more while they are
// of its epoch (the last step of an epoch may have fewer). Next()'s errors
// (OUT_OF_RANGE after the last batch).
StatusOr<std::vector<Batch>> NextStepBatches(InputPipeline& pipeline, int batches_per_step);

// Replica `replica` of `num_replicas`' part of one step's `batches`: the
// batches replica, replica + num_replicas, ... concatenated; nullopt when
// the step has none for it.
std::optional<Batch> ReplicaShare(const std::vector<Batch>& batches, int replica, int num_replicas);

// The order in which epoch `epoch` visits examples 0..n-1: the identity
// without shuffle, else the seeded permutation described above.
// REQUIRES: n >= 0.
std::vector<int64_t> EpochOrder(int64_t n, bool shuffle, uint64_t seed, int64_t epoch);

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_INPUT_PIPELINE_H_
