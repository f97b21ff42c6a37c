// The queue's declaration and its tuples: options, validation of what is
// enqueued, and the batches (padded for a PaddingFIFOQueue) that
// DequeueMany and DequeueUpTo return. The attempts are in queue.cc.
#include <algorithm>
#include <cstring>
#include <span>

#include "state/queue.h"

namespace flowstate {
namespace {

std::string ShapesString(const std::vector<DataType>& types,
                         const std::vector<PartialShape>& shapes) {
  std::string s;
  for (size_t i = 0; i < types.size(); ++i) {
    s += (i ? ", " : "") + std::string(DataTypeName(types[i])) +
         (shapes.empty() ? "" : shapes[i].ToString());
  }
  return s;
}

// Copies an element of shape `src` into the zeroed slot of shape `dst`
// (dst[d] >= src[d] for each d, the same rank), row by row.
void CopyPadded(const char* src, std::span<const int64_t> sdims, char* dst,
                std::span<const int64_t> ddims, size_t elem) {
  if (sdims.empty()) {
    std::memcpy(dst, src, elem);
    return;
  }
  if (sdims.size() == 1) {
    std::memcpy(dst, src, size_t(sdims[0]) * elem);
    return;
  }
  size_t src_inner = elem, dst_inner = elem;
  for (size_t d = 1; d < sdims.size(); ++d) {
    src_inner *= size_t(sdims[d]);
    dst_inner *= size_t(ddims[d]);
  }
  for (int64_t i = 0; i < sdims[0]; ++i) {
    CopyPadded(src + i * src_inner, sdims.subspan(1), dst + i * dst_inner, ddims.subspan(1), elem);
  }
}

}  // namespace

StatusOr<std::shared_ptr<Queue>> Queue::Create(Options o) {
  const std::string what = "queue '" + o.name + "'";
  if (o.component_types.empty()) return InvalidArgument(what + " needs at least one component");
  if (o.kind == Kind::kPaddingFIFO && o.shapes.empty()) {
    return InvalidArgument(what + ": a PaddingFIFOQueue needs a shape per component");
  }
  if (!o.shapes.empty() && o.shapes.size() != o.component_types.size()) {
    return InvalidArgument(what + " has " + std::to_string(o.shapes.size()) + " shape(s) for " +
                           std::to_string(o.component_types.size()) + " component(s)");
  }
  for (const PartialShape& s : o.shapes) {
    if (!s.rank_known() || (o.kind != Kind::kPaddingFIFO && !s.IsFullyDefined())) {
      return InvalidArgument(what + ": shape " + s.ToString() + " is not " +
                             (s.rank_known() ? "fully defined" : "of known rank"));
    }
  }
  if (o.capacity == 0 || o.capacity < -1) {
    return InvalidArgument(what + ": capacity " + std::to_string(o.capacity) +
                           " must be >= 1, or -1 for no bound");
  }
  if (o.min_after_dequeue < 0 || (o.capacity > 0 && o.min_after_dequeue >= o.capacity)) {
    return InvalidArgument(what + ": min_after_dequeue " + std::to_string(o.min_after_dequeue) +
                           " must be >= 0 and below the capacity");
  }
  if (o.allocator == nullptr) o.allocator = HostAllocator();
  return std::shared_ptr<Queue>(new Queue(std::move(o)));
}

const char* Queue::KindName() const {
  switch (options_.kind) {
    case Kind::kFIFO: return "FIFOQueue";
    case Kind::kRandomShuffle: return "RandomShuffleQueue";
    case Kind::kPaddingFIFO: return "PaddingFIFOQueue";
  }
  return "Queue";
}

std::string Queue::DebugString() const {
  return std::string(KindName()) + " '" + name() + "' (" +
         ShapesString(options_.component_types, options_.shapes) + ")";
}

Status Queue::CheckSame(const Options& o) const {
  const Options& m = options_;
  std::string diff;
  if (o.kind != m.kind) diff = "another kind of queue";
  if (o.component_types != m.component_types || !(o.shapes == m.shapes)) {
    diff = "components (" + ShapesString(o.component_types, o.shapes) + ")";
  }
  if (o.capacity != m.capacity) diff = "capacity " + std::to_string(o.capacity);
  if (o.kind == Kind::kRandomShuffle && o.min_after_dequeue != m.min_after_dequeue) {
    diff = "min_after_dequeue " + std::to_string(o.min_after_dequeue);
  }
  if (diff.empty()) return Status();
  return InvalidArgument("queue '" + m.name + "' already exists as " + DebugString() +
                         " with capacity " + std::to_string(m.capacity) + ", not with " + diff);
}

Status Queue::ValidateTuple(const Tuple& tuple, bool many) const {
  const std::vector<DataType>& types = options_.component_types;
  if (tuple.size() != types.size()) {
    return InvalidArgument(DebugString() + " has " + std::to_string(types.size()) +
                           " component(s); got " + std::to_string(tuple.size()));
  }
  for (size_t i = 0; i < tuple.size(); ++i) {
    const Tensor& t = tuple[i];
    const std::string comp = "component " + std::to_string(i) + " of " + DebugString();
    if (t.dtype() != types[i]) {
      return InvalidArgument(comp + " is " + std::string(DataTypeName(types[i])) + "; got " +
                             std::string(DataTypeName(t.dtype())));
    }
    TensorShape shape = t.shape();
    if (many) {
      if (t.rank() < 1) {
        return InvalidArgument(comp + ": an enqueue of many needs a batch dimension; got a "
                               "scalar");
      }
      if (t.dim(0) != tuple[0].dim(0)) {
        return InvalidArgument(comp + " has " + std::to_string(t.dim(0)) +
                               " element(s) in dimension 0 but component 0 has " +
                               std::to_string(tuple[0].dim(0)));
      }
      shape.RemoveDim(0);
    }
    if (!options_.shapes.empty() && !options_.shapes[i].IsCompatibleWith(shape)) {
      return InvalidArgument(comp + " has element shape " + options_.shapes[i].ToString() +
                             "; got " + shape.ToString());
    }
  }
  return Status();
}

StatusOr<Queue::Tuple> Queue::EmptyBatch() const {
  if (options_.shapes.empty()) {
    return InvalidArgument("dequeuing 0 elements from " + DebugString() +
                           " needs the queue's shapes");
  }
  Tuple out;
  for (size_t i = 0; i < options_.shapes.size(); ++i) {
    std::vector<int64_t> dims{0};
    for (int64_t d : options_.shapes[i].dims()) dims.push_back(std::max<int64_t>(d, 0));
    FS_ASSIGN_OR_RETURN(TensorShape shape, TensorShape::Make(dims));
    FS_ASSIGN_OR_RETURN(Tensor t,
                        Tensor::Allocate(options_.allocator, options_.component_types[i], shape));
    out.push_back(std::move(t));
  }
  return out;
}

StatusOr<Queue::Tuple> Queue::Batch(const std::vector<Tuple>& elements) const {
  const int64_t n = int64_t(elements.size());
  Tuple out;
  for (size_t c = 0; c < options_.component_types.size(); ++c) {
    const TensorShape& first = elements[0][c].shape();
    std::vector<int64_t> dims = first.dim_vector();
    bool same = true;
    for (int64_t k = 1; k < n; ++k) {
      const TensorShape& s = elements[k][c].shape();
      if (s == first) continue;
      same = false;
      if (options_.kind != Kind::kPaddingFIFO || s.rank() != first.rank()) {
        return InvalidArgument("cannot batch component " + std::to_string(c) + " of " +
                               DebugString() + ": element 0 has shape " + first.ToString() +
                               " but element " + std::to_string(k) + " has " + s.ToString() +
                               " (a PaddingFIFOQueue pads them)");
      }
      for (int d = 0; d < s.rank(); ++d) dims[d] = std::max(dims[d], s.dim(d));
    }
    const std::vector<int64_t> element_dims = dims;
    dims.insert(dims.begin(), n);
    FS_ASSIGN_OR_RETURN(TensorShape shape, TensorShape::Make(dims));
    const DataType dtype = options_.component_types[c];
    FS_ASSIGN_OR_RETURN(Tensor batch, Tensor::Allocate(options_.allocator, dtype, shape));
    char* dst = static_cast<char*>(batch.raw_data());
    const size_t slot = n == 0 ? 0 : batch.TotalBytes() / size_t(n);
    if (!same && batch.TotalBytes() > 0) std::memset(dst, 0, batch.TotalBytes());
    for (int64_t k = 0; k < n; ++k) {
      const Tensor& e = elements[k][c];
      if (same) {
        if (slot) std::memcpy(dst + k * slot, e.raw_data(), slot);
      } else if (e.num_elements() > 0) {
        CopyPadded(static_cast<const char*>(e.raw_data()), e.shape().dims(), dst + k * slot,
                   element_dims, DataTypeSize(dtype));
      }
    }
    out.push_back(std::move(batch));
  }
  return out;
}

}  // namespace flowstate
