#include <algorithm>

#include "graph/op_def.h"

namespace flowstate::shape_fns {

Status Unknown(InferenceContext* c) {
  for (int i = 0; i < c->num_outputs(); ++i) c->set_output(i, PartialShape::Unknown());
  return Status();
}

Status UnchangedShape(InferenceContext* c) {
  c->set_output(0, c->input(0));
  return Status();
}

Status ScalarShape(InferenceContext* c) {
  c->set_output(0, PartialShape(std::vector<int64_t>{}));
  return Status();
}

Status NoOutputs(InferenceContext* c) { return Status(); }

StatusOr<PartialShape> Broadcast(const PartialShape& a, const PartialShape& b) {
  if (!a.rank_known() || !b.rank_known()) return PartialShape::Unknown();
  int rank = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(rank);
  for (int i = 0; i < rank; ++i) {
    int ia = i - (rank - a.rank());
    int ib = i - (rank - b.rank());
    int64_t da = ia >= 0 ? a.dim(ia) : 1;
    int64_t db = ib >= 0 ? b.dim(ib) : 1;
    if (da == 1) {
      out[i] = db;
    } else if (db == 1) {
      out[i] = da;
    } else if (da < 0 || db < 0) {
      out[i] = da < 0 ? db : da;  // an unknown dim must equal the known one (or be 1)
      if (da < 0 && db < 0) out[i] = -1;
    } else if (da == db) {
      out[i] = da;
    } else {
      return InvalidArgument("shapes " + a.ToString() + " and " + b.ToString() +
                             " cannot be broadcast together");
    }
  }
  return PartialShape(std::move(out));
}

Status BroadcastBinary(InferenceContext* c) {
  StatusOr<PartialShape> s = Broadcast(c->input(0), c->input(1));
  if (!s.ok()) return c->Error(s.status().message());
  c->set_output(0, *s);
  return Status();
}

std::optional<std::vector<int64_t>> ConstantIntVector(InferenceContext* c, int i) {
  const Tensor* t = c->input_tensor(i);
  if (t == nullptr || t->rank() > 1) return std::nullopt;
  std::vector<int64_t> v(t->num_elements());
  if (t->dtype() == DataType::kInt32) {
    for (int64_t k = 0; k < t->num_elements(); ++k) v[k] = t->data<int32_t>()[k];
  } else if (t->dtype() == DataType::kInt64) {
    for (int64_t k = 0; k < t->num_elements(); ++k) v[k] = t->data<int64_t>()[k];
  } else {
    return std::nullopt;
  }
  return v;
}

}  // namespace flowstate::shape_fns
