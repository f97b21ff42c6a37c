#include "state/replica_input.h"

#include <algorithm>
#include <memory>
#include <optional>
#include <vector>

#include "devices/kernel_registry.h"
#include "devices/op_kernel.h"
#include "graph/mutex.h"
#include "state/data_source.h"
#include "state/dataset.h"
#include "state/input_pipeline.h"

namespace flowstate {
namespace {

constexpr const char* kReplicaInputContainer = "_replica_input";

// One _ReplicaInput node's data and where its pipeline stands.
class ReplicaInputState final : public ResourceBase {
 public:
  explicit ReplicaInputState(Dataset d) : dataset(std::move(d)) {}
  std::string DebugString() const override {
    return "ReplicaInput of " + std::to_string(dataset.num_examples()) + " examples";
  }

  const Dataset dataset;
  Mutex mu;
  std::unique_ptr<InputPipeline> pipeline ABSL_GUARDED_BY(mu);
  // The step id of the run that last asked (-1: none yet).
  int64_t last_step_id ABSL_GUARDED_BY(mu) = -1;
};

class ReplicaInputOp final : public OpKernel {
 public:
  explicit ReplicaInputOp(OpKernelConstruction* c) : OpKernel(c) {
    std::string source;
    int64_t batch_size = 0, seed = 0, epochs = 0;
    if (!c->GetAttr("source", &source).ok() || !c->GetAttr("num_examples", &num_examples_).ok() ||
        !c->GetAttr("batch_size", &batch_size).ok() || !c->GetAttr("shuffle", &options_.shuffle).ok() ||
        !c->GetAttr("seed", &seed).ok() || !c->GetAttr("epochs", &epochs).ok() ||
        !c->GetAttr("drop_remainder", &options_.drop_remainder).ok() ||
        !c->GetAttr("replica", &replica_).ok() || !c->GetAttr("num_replicas", &num_replicas_).ok() ||
        !c->GetAttr("batches_per_step", &batches_per_step_).ok()) {
      return;
    }
    options_.batch_size = batch_size;
    options_.seed = uint64_t(seed);
    options_.epochs = epochs;
    options_.prefetch = int(std::min<int64_t>(batches_per_step_ + 1, 64));
    StatusOr<DataSource> s = DecodeDataSource(source);
    if (!s.ok()) {
      c->SetStatus(s.status().WithPrefix("source"));
      return;
    }
    source_ = std::move(s).value();
    const auto& attrs = c->def().attrs;
    names_ = attrs.at("names").strings();
    shapes_ = attrs.at("shapes").shapes();
    dtypes_ = attrs.at("dtypes").types();
    if (names_.size() != dtypes_.size() || names_.size() != shapes_.size()) {
      c->SetStatus(InvalidArgument("names, dtypes and shapes must have one entry per component"));
    }
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& position = ctx->input(0);
    FS_OP_REQUIRES(ctx, position.dtype() == DataType::kInt64 && position.num_elements() == 2,
                   InvalidArgument("position must be int64 [epoch, offset]"));
    const PipelinePosition at{position.flat<int64_t>()[0], position.flat<int64_t>()[1]};
    ResourceMgr* rm = ctx->resource_manager();
    FS_OP_REQUIRES(ctx, rm != nullptr, FailedPrecondition("_ReplicaInput needs a session's resource manager"));
    // The data root first: LookupOrCreate holds the manager's lock while
    // it creates.
    StatusOr<std::shared_ptr<TaskDataRoot>> root = rm->Lookup<TaskDataRoot>(kTaskContainer, kDataRootResource);
    FS_OP_REQUIRES(ctx, root.ok(),
                   FailedPrecondition("this task has no data root to read the replica's input from"));
    StatusOr<std::shared_ptr<ReplicaInputState>> state = rm->LookupOrCreate<ReplicaInputState>(
        kReplicaInputContainer, name(), [&]() -> StatusOr<std::shared_ptr<ReplicaInputState>> {
          FS_ASSIGN_OR_RETURN(Dataset d, Load((*root)->root()));
          return std::make_shared<ReplicaInputState>(std::move(d));
        });
    FS_OP_REQUIRES_OK(ctx, state.status());
    ReplicaInputState& s = **state;
    MutexLock l(s.mu);
    // A later iteration of the same run (RunOptions::iterations: the same
    // step id) goes on where the last one left off; a new run starts at its
    // position.
    const bool same_run = s.pipeline != nullptr && s.last_step_id == ctx->step_id();
    s.last_step_id = ctx->step_id();
    if (!same_run && !(s.pipeline != nullptr && s.pipeline->position() == at)) {
      s.pipeline.reset();
      StatusOr<std::unique_ptr<InputPipeline>> p = InputPipeline::Create(s.dataset, options_, at);
      FS_OP_REQUIRES_OK(ctx, p.status());
      s.pipeline = std::move(p).value();
    }
    StatusOr<std::vector<Batch>> step = NextStepBatches(*s.pipeline, int(batches_per_step_));
    FS_OP_REQUIRES_OK(ctx, step.status());
    std::optional<Batch> mine = ReplicaShare(*step, int(replica_), int(num_replicas_));
    // Without a batch of its own the replica computes on the step's first
    // and contributes nothing (0 examples), as one the master feeds does.
    const double examples = mine ? double(mine->size) : 0.0;
    const Batch& out = mine ? *mine : step->front();
    // Behind (backup replicas): one example of it, to catch up.
    bool behind = false;
    if (mine) {
      StatusOr<std::shared_ptr<ReplicaPace>> pace =
          rm->Lookup<ReplicaPace>(kTaskContainer, kReplicaPaceResource);
      if (pace.ok()) {
        StatusOr<bool> b = (*pace)->Behind();
        FS_OP_REQUIRES_OK(ctx, b.status());
        behind = *b;
      }
    }
    for (size_t i = 0; i < names_.size(); ++i) {
      auto it = out.components.find(names_[i]);
      FS_OP_REQUIRES(ctx, it != out.components.end(),
                     Internal("the replica's data has no component '" + names_[i] + "'"));
      ctx->set_output(int(i), behind ? it->second.Slice(0, 1) : it->second);
    }
    ctx->set_output(int(names_.size()), Tensor::Scalar<double>(examples));
  }

 private:
  // The task's copy of the data, checked against the master's.
  StatusOr<Dataset> Load(const std::string& dir) const {
    StatusOr<Dataset> d = LoadDataSource(dir, source_);
    if (!d.ok()) return d.status().WithPrefix("input.files (under this task's data root " + dir + ")");
    if (d->num_examples() != num_examples_) {
      return FailedPrecondition("input.files (under this task's data root " + dir + "): " +
                                std::to_string(d->num_examples()) + " examples, the master's copy has " +
                                std::to_string(num_examples_) +
                                "; every task must hold the same data");
    }
    for (size_t i = 0; i < names_.size(); ++i) {
      auto it = d->components().find(names_[i]);
      if (it == d->components().end()) {
        return FailedPrecondition("input.files (under this task's data root " + dir +
                                  "): no component '" + names_[i] + "'");
      }
      const Tensor& t = it->second;
      std::vector<int64_t> example(t.shape().dims().begin() + 1, t.shape().dims().end());
      if (t.dtype() != dtypes_[i] || !(PartialShape(example) == shapes_[i])) {
        return FailedPrecondition("input.files." + names_[i] + " (under this task's data root " + dir +
                                  "): examples of " + std::string(DataTypeName(t.dtype())) + " " +
                                  PartialShape(example).ToString() + ", the master's copy has " +
                                  std::string(DataTypeName(dtypes_[i])) + " " + shapes_[i].ToString() +
                                  "; every task must hold the same data");
      }
    }
    return d;
  }

  DataSource source_;
  int64_t num_examples_ = 0;
  InputPipelineOptions options_;
  int64_t replica_ = 0, num_replicas_ = 1, batches_per_step_ = 1;
  std::vector<std::string> names_;
  std::vector<PartialShape> shapes_;
  std::vector<DataType> dtypes_;
};

}  // namespace

namespace state {

void RegisterReplicaInputKernels() {
  KernelRegistry::Global()
      ->Register(KernelDef("_ReplicaInput"), MakeKernel<ReplicaInputOp>)
      .CheckOk();
}

}  // namespace state
}  // namespace flowstate
