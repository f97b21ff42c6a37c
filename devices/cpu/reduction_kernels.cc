// Sum, Mean, Prod, Max, Min and ArgMax/ArgMin on the CPU.
//
// Every reduction is brought down to one primitive: reduce the middle axis
// of a row-major [outer, n, inner] array. The kernel first drops the dims of
// size 1 and merges adjacent dims that are both reduced or both kept, which
// leaves alternating groups (e.g. [K R K R]). The innermost reduced group is
// reduced as [outer, n, inner], its kept neighbours merge, and this repeats
// (at most kMaxRank / 2 times) until none is left; intermediate results are
// kept in the accumulator type, so Mean and float32 Sum lose nothing between
// passes.
//
// Inner loops keep many independent accumulators ("lanes") so the compiler
// can vectorize them without reassociating floating-point additions; the
// lanes are folded pairwise at the end. Work is split into tasks whose
// boundaries depend only on the shape, never on the thread count, so a
// result is bit-identical on 1 and on N threads; the tasks are spread with
// Device::ParallelFor. When there are few outputs and a long reduced axis
// (a full reduction, say) that axis is cut into chunks of >= 32K elements
// whose partial results are combined in order (blocked summation).
//
// Semantics (as in TensorFlow unless noted):
//   - axis: 0-D or 1-D int32/int64; empty = every axis; negative counts from
//     the end; duplicates are allowed; out of range is INVALID_ARGUMENT.
//   - Sum and Prod of integers wrap around in T. float32 Sum and Mean
//     accumulate in double.
//   - Mean of integers divides the exact sum (accumulated in 64 bits, so a
//     uint8 or int32 Mean does not overflow, unlike TensorFlow's) by the
//     count, truncating toward zero.
//   - Empty reductions: Sum 0, Prod 1, Max lowest(), Min max() (TensorFlow's
//     identities; for floats that is -FLT_MAX/FLT_MAX, not ±inf), Mean NaN
//     for floats and 0 for integers.
//   - NaN: Max and Min propagate NaN (a NaN anywhere in the reduced set gives
//     NaN). ArgMax and ArgMin return the index of the first NaN when there is
//     one (NaN counts as both the largest and the smallest value, as in NumPy
//     and PyTorch); otherwise the first index of the extreme value.
//   - ArgMax/ArgMin: `dimension` holds exactly one value; reducing an empty
//     dimension into a non-empty output is INVALID_ARGUMENT.
#include <algorithm>
#include <cmath>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "devices/cpu/register_kernels.h"

namespace flowstate::internal {
namespace {

// ---------------------------------------------------------------------------
// Reducers: the accumulator type, the identity, the combining step, and how
// an accumulator becomes an output element.

template <typename T>
constexpr bool kIsFloat = std::is_floating_point_v<T>;

// Integer Sum/Prod accumulate in the unsigned type of the same width: the
// same bits as TensorFlow's wrap-around, without signed-overflow UB.
template <typename T>
using WrapType = std::conditional_t<std::is_same_v<T, int32_t>, uint32_t,
                                    std::conditional_t<std::is_same_v<T, int64_t>, uint64_t, T>>;

template <typename T>
struct SumReducer {
  using Acc = std::conditional_t<std::is_same_v<T, float>, double, WrapType<T>>;
  static Acc Identity() { return Acc(0); }
  static Acc Combine(Acc a, Acc b) { return Acc(a + b); }
  static T Finish(Acc a, int64_t /*count*/) { return T(a); }
  static T Empty() { return T(0); }
};

template <typename T>
struct MeanReducer {
  using Acc = std::conditional_t<kIsFloat<T>, double, uint64_t>;
  static Acc Identity() { return Acc(0); }
  static Acc Combine(Acc a, Acc b) { return Acc(a + b); }
  static T Finish(Acc a, int64_t count) {
    if constexpr (kIsFloat<T>) {
      return T(a / double(count));
    } else {
      return count == 0 ? T(0) : T(int64_t(a) / count);
    }
  }
  static T Empty() { return kIsFloat<T> ? std::numeric_limits<T>::quiet_NaN() : T(0); }
};

template <typename T>
struct ProdReducer {
  using Acc = WrapType<T>;
  static Acc Identity() { return Acc(1); }
  static Acc Combine(Acc a, Acc b) { return Acc(a * b); }
  static T Finish(Acc a, int64_t /*count*/) { return T(a); }
  static T Empty() { return T(1); }
};

template <typename T>
struct MaxReducer {
  using Acc = T;
  // -inf rather than lowest() so that a set of -infs reduces to -inf.
  static Acc Identity() {
    if constexpr (kIsFloat<T>) return -std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::lowest();
  }
  static Acc Combine(Acc a, Acc b) {
    if constexpr (kIsFloat<T>) return (a < b || b != b) ? b : a;  // NaN sticks
    return a < b ? b : a;
  }
  static T Finish(Acc a, int64_t /*count*/) { return a; }
  static T Empty() { return std::numeric_limits<T>::lowest(); }
};

template <typename T>
struct MinReducer {
  using Acc = T;
  static Acc Identity() {
    if constexpr (kIsFloat<T>) return std::numeric_limits<T>::infinity();
    return std::numeric_limits<T>::max();
  }
  static Acc Combine(Acc a, Acc b) {
    if constexpr (kIsFloat<T>) return (b < a || b != b) ? b : a;
    return b < a ? b : a;
  }
  static T Finish(Acc a, int64_t /*count*/) { return a; }
  static T Empty() { return std::numeric_limits<T>::max(); }
};

// Lanes per accumulator array: two 512-bit vectors' worth, at least 8.
template <typename Acc>
constexpr int kLanes = std::max<int>(8, int(128 / sizeof(Acc)));

constexpr int64_t kColumnBlock = 512;               // outputs per task, wide columns
constexpr int64_t kMinChunk = int64_t{1} << 15;     // elements per chunk of a cut axis
constexpr int64_t kMaxPartials = int64_t{1} << 16;  // partial results kept when cutting

// float32 Sum and Mean (the only reducers that pair float input with a
// double accumulator, and both are plain additions).
template <typename In, typename Acc>
constexpr bool kFloatIntoDouble = std::is_same_v<In, float> && std::is_same_v<Acc, double>;
constexpr int kFloatRun = 8;

// Reduces x[0, len) into one value.
template <typename R, typename In>
typename R::Acc ReduceFlat(const In* x, int64_t len) {
  using Acc = typename R::Acc;
  constexpr int L = kLanes<Acc>;
  if (len < L) {  // short rows: the lanes would cost more than they save
    Acc a = R::Identity();
    for (int64_t i = 0; i < len; ++i) a = R::Combine(a, Acc(x[i]));
    return a;
  }
  Acc lanes[L];
  for (int k = 0; k < L; ++k) lanes[k] = R::Identity();
  int64_t i = 0;
  if constexpr (kFloatIntoDouble<In, Acc>) {
    // Sums of float32 first add kFloatRun values per lane in float, then
    // carry on in double: as accurate in practice, ~1.5x the bandwidth of
    // converting every element.
    for (; i + L * kFloatRun <= len; i += L * kFloatRun) {
      float run[L];
      for (int k = 0; k < L; ++k) run[k] = x[i + k];
      for (int r = 1; r < kFloatRun; ++r) {
        for (int k = 0; k < L; ++k) run[k] += x[i + r * L + k];
      }
      for (int k = 0; k < L; ++k) lanes[k] = R::Combine(lanes[k], Acc(run[k]));
    }
  }
  for (; i + L <= len; i += L) {
    for (int k = 0; k < L; ++k) lanes[k] = R::Combine(lanes[k], Acc(x[i + k]));
  }
  for (int k = 0; i + k < len; ++k) lanes[k] = R::Combine(lanes[k], Acc(x[i + k]));
  for (int w = L / 2; w > 0; w /= 2) {
    for (int k = 0; k < w; ++k) lanes[k] = R::Combine(lanes[k], lanes[k + w]);
  }
  return lanes[0];
}

// acc[j] = combine over r < rows of x[r * inner + j], for a narrow inner
// (inner <= kLanes / 2): the rows are walked as one flat sequence with
// W = inner * (kLanes / inner) lanes, lane k collecting column k % inner.
template <typename R, typename In>
void ReduceNarrowColumns(const In* x, int64_t rows, int64_t inner, typename R::Acc* acc) {
  using Acc = typename R::Acc;
  constexpr int L = kLanes<Acc>;
  const int64_t w = inner * (L / inner);
  Acc lanes[L];
  for (int k = 0; k < L; ++k) lanes[k] = R::Identity();
  const int64_t len = rows * inner;
  int64_t i = 0;
  for (; i + w <= len; i += w) {
    for (int64_t k = 0; k < w; ++k) lanes[k] = R::Combine(lanes[k], Acc(x[i + k]));
  }
  for (int64_t k = 0; i + k < len; ++k) lanes[k] = R::Combine(lanes[k], Acc(x[i + k]));
  for (int64_t j = 0; j < inner; ++j) acc[j] = R::Identity();
  for (int64_t k = 0; k < w; ++k) acc[k % inner] = R::Combine(acc[k % inner], lanes[k]);
}

// acc[j] = combine over r < rows of x[r * stride + j], for j < width.
template <typename R, typename In>
void ReduceWideColumns(const In* x, int64_t rows, int64_t stride, int64_t width,
                       typename R::Acc* acc) {
  using Acc = typename R::Acc;
  for (int64_t j = 0; j < width; ++j) acc[j] = R::Identity();
  int64_t r = 0;
  if constexpr (kFloatIntoDouble<In, Acc>) {
    float run[kColumnBlock];  // kFloatRun rows added in float first
    for (; r + kFloatRun <= rows; r += kFloatRun) {
      const In* row = x + r * stride;
      for (int64_t j = 0; j < width; ++j) run[j] = row[j];
      for (int k = 1; k < kFloatRun; ++k) {
        row += stride;
        for (int64_t j = 0; j < width; ++j) run[j] += row[j];
      }
      for (int64_t j = 0; j < width; ++j) acc[j] = R::Combine(acc[j], Acc(run[j]));
    }
  }
  for (; r < rows; ++r) {
    const In* row = x + r * stride;
    for (int64_t j = 0; j < width; ++j) acc[j] = R::Combine(acc[j], Acc(row[j]));
  }
}

// out[o * inner + j] = fin(combine over r < n of x[(o * n + r) * inner + j]).
template <typename R, typename In, typename Out, typename Fin>
void ReduceMiddle(Device* device, const In* x, int64_t outer, int64_t n, int64_t inner, Out* out,
                  Fin fin) {
  using Acc = typename R::Acc;
  // Narrow columns walk the rows as one flat sequence of lanes; worth it
  // when the lanes see several rows.
  const bool narrow = inner > 1 && inner <= kLanes<Acc> / 2 && n * inner >= 4 * kLanes<Acc>;
  const int64_t block = (inner == 1 || narrow) ? inner : std::min(inner, kColumnBlock);
  const int64_t blocks = (inner + block - 1) / block;
  const int64_t units = outer * blocks;
  const int64_t outputs = outer * inner;
  // Few independent outputs and a long axis: cut the axis into chunks.
  int64_t chunks = 1;
  if (units < 16) {
    const int64_t most = std::clamp<int64_t>(kMaxPartials / outputs, 1, 256);
    chunks = std::clamp<int64_t>(n * block / kMinChunk, 1, most);
  }
  const int64_t rows_per_chunk = (n + chunks - 1) / chunks;
  chunks = (n + rows_per_chunk - 1) / rows_per_chunk;
  std::vector<Acc> partials(chunks > 1 ? size_t(chunks * outputs) : 0);

  if (inner == 1 && chunks == 1) {  // one row per output: the tightest loop
    device->ParallelFor(outer, std::max<int64_t>(1, n), [&](int64_t b, int64_t e) {
      for (int64_t o = b; o < e; ++o) out[o] = fin(ReduceFlat<R>(x + o * n, n));
    });
    return;
  }
  // Task t is (output unit u = (o, column block), chunk c), c fastest.
  auto task = [&](int64_t o, int64_t j0, int64_t c) {
    const int64_t width = std::min(block, inner - j0);
    const int64_t r0 = c * rows_per_chunk, rows = std::min(n, r0 + rows_per_chunk) - r0;
    const In* src = x + (o * n + r0) * inner + j0;
    Acc acc[kColumnBlock];
    if (inner == 1) {
      acc[0] = ReduceFlat<R>(src, rows);
    } else if (narrow) {
      ReduceNarrowColumns<R>(src, rows, inner, acc);
    } else {
      ReduceWideColumns<R>(src, rows, inner, width, acc);
    }
    const int64_t dst = o * inner + j0;
    if (chunks == 1) {
      for (int64_t j = 0; j < width; ++j) out[dst + j] = fin(acc[j]);
    } else {
      std::copy(acc, acc + width, partials.begin() + c * outputs + dst);
    }
  };
  device->ParallelFor(units * chunks, std::max<int64_t>(1, rows_per_chunk * block),
                      [&](int64_t b, int64_t e) {
                        int64_t c = b % chunks, u = b / chunks;
                        int64_t o = u / blocks, jb = u % blocks;
                        for (int64_t t = b; t < e; ++t) {
                          task(o, jb * block, c);
                          if (++c < chunks) continue;
                          c = 0;
                          if (++jb < blocks) continue;
                          jb = 0;
                          ++o;
                        }
                      });
  if (chunks > 1) {
    for (int64_t i = 0; i < outputs; ++i) {
      Acc a = partials[i];
      for (int64_t c = 1; c < chunks; ++c) a = R::Combine(a, partials[c * outputs + i]);
      out[i] = fin(a);
    }
  }
}

// Dims after dropping 1s and merging neighbours of the same kind.
struct Groups {
  std::vector<int64_t> dims;
  std::vector<bool> reduced;
};

Groups MergeDims(std::span<const int64_t> dims, const std::vector<bool>& reduce) {
  Groups g;
  for (size_t i = 0; i < dims.size(); ++i) {
    if (dims[i] == 1) continue;
    if (!g.dims.empty() && g.reduced.back() == reduce[i]) {
      g.dims.back() *= dims[i];
    } else {
      g.dims.push_back(dims[i]);
      g.reduced.push_back(reduce[i]);
    }
  }
  return g;
}

// Reduces the reduced groups of `g` (at least one) from x into out.
template <typename R, typename T>
void ReduceGroups(Device* device, const T* x, Groups g, int64_t count, T* out) {
  using Acc = typename R::Acc;
  std::vector<Acc> current, next;
  bool first = true;
  while (true) {
    int p = int(g.dims.size()) - 1;
    while (!g.reduced[p]) --p;
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < p; ++i) outer *= g.dims[i];
    for (size_t i = p + 1; i < g.dims.size(); ++i) inner *= g.dims[i];
    const int64_t n = g.dims[p];
    g.dims.erase(g.dims.begin() + p);
    g.reduced.erase(g.reduced.begin() + p);
    if (p > 0 && size_t(p) < g.dims.size()) {  // two kept neighbours become one
      g.dims[p - 1] *= g.dims[p];
      g.dims.erase(g.dims.begin() + p);
      g.reduced.erase(g.reduced.begin() + p);
    }
    const bool last = std::find(g.reduced.begin(), g.reduced.end(), true) == g.reduced.end();
    auto run = [&](const auto* src) {
      if (last) {
        ReduceMiddle<R>(device, src, outer, n, inner, out,
                        [count](Acc a) { return R::Finish(a, count); });
      } else {
        next.resize(size_t(outer * inner));
        ReduceMiddle<R>(device, src, outer, n, inner, next.data(), [](Acc a) { return a; });
      }
    };
    if (first) {
      run(x);
    } else {
      run(static_cast<const Acc*>(current.data()));
    }
    if (last) return;
    current.swap(next);
    first = false;
  }
}

// Reads a 0-D or 1-D int32/int64 tensor.
Status ReadIndices(const Tensor& t, const char* what, const std::string& node,
                   std::vector<int64_t>* out) {
  if (t.rank() > 1) {
    return InvalidArgument(std::string(what) + " must be a scalar or a vector, got shape " +
                               t.shape().ToString(),
                           node);
  }
  out->resize(size_t(t.num_elements()));
  for (int64_t i = 0; i < t.num_elements(); ++i) {
    (*out)[i] = t.dtype() == DataType::kInt32 ? int64_t(t.data<int32_t>()[i])
                                              : t.data<int64_t>()[i];
  }
  return Status();
}

Status CheckAxis(int64_t a, const TensorShape& shape, const char* what, const std::string& node) {
  if (a < -shape.rank() || a >= shape.rank()) {
    return InvalidArgument(std::string(what) + " " + std::to_string(a) +
                               " is out of range for input of shape " + shape.ToString(),
                           node);
  }
  return Status();
}

template <typename T, template <typename> class Reducer>
class ReductionOp final : public OpKernel {
 public:
  explicit ReductionOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!c->GetAttr("keep_dims", &keep_dims_).ok()) return;
  }

  void Compute(OpKernelContext* ctx) override {
    using R = Reducer<T>;
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> axes;
    FS_OP_REQUIRES_OK(ctx, ReadIndices(ctx->input(1), "axis", name(), &axes));
    const int rank = in.rank();
    std::vector<bool> reduce(size_t(rank), axes.empty());
    for (int64_t a : axes) {
      FS_OP_REQUIRES_OK(ctx, CheckAxis(a, in.shape(), "reduction axis", name()));
      reduce[size_t(a < 0 ? a + rank : a)] = true;
    }
    TensorShape out_shape;
    int64_t count = 1;
    for (int i = 0; i < rank; ++i) {
      if (!reduce[i]) {
        out_shape.AddDim(in.dim(i));
      } else {
        count *= in.dim(i);
        if (keep_dims_) out_shape.AddDim(1);
      }
    }
    Groups g = MergeDims(in.shape().dims(), reduce);
    if (std::find(g.reduced.begin(), g.reduced.end(), true) == g.reduced.end() &&
        in.num_elements() > 0) {
      // Nothing to reduce (only size-1 axes): the values pass through.
      StatusOr<Tensor> same = in.Reshaped(out_shape);
      FS_OP_REQUIRES_OK(ctx, same.status());
      ctx->set_output(0, *same);
      return;
    }
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    T* dst = out->data<T>();
    if (out->num_elements() == 0) return;
    if (in.num_elements() == 0) {
      std::fill(dst, dst + out->num_elements(), R::Empty());
      return;
    }
    ReduceGroups<R>(ctx->device(), in.data<T>(), std::move(g), count, dst);
  }

 private:
  bool keep_dims_ = false;
};

// ---------------------------------------------------------------------------
// ArgMax / ArgMin.

template <typename T, bool kMax>
inline bool Better(T v, T best) {
  if constexpr (kIsFloat<T>) {
    // A NaN replaces any number; a later NaN never replaces the first.
    if (v != v) return best == best;
    return kMax ? v > best : v < best;
  } else {
    return kMax ? v > best : v < best;
  }
}

// The first i < n with pred(x[i]). REQUIRES: there is one. Tests a block
// at a time (vectorized) before looking inside it.
template <typename T, typename Pred>
int64_t FindFirst(const T* x, int64_t n, Pred pred) {
  constexpr int64_t kBlock = 128 / sizeof(T);
  int64_t i = 0;
  for (; i + kBlock <= n; i += kBlock) {
    bool any = false;
    for (int64_t k = 0; k < kBlock; ++k) any |= pred(x[i + k]);
    if (any) break;
  }
  while (!pred(x[i])) ++i;
  return i;
}

template <typename T, bool kMax, typename Index>
void ArgReduce(Device* device, const T* x, int64_t outer, int64_t n, int64_t inner, Index* out) {
  const int64_t block = std::min(inner, kColumnBlock);
  const int64_t blocks = (inner + block - 1) / block;
  device->ParallelFor(outer * blocks, std::max<int64_t>(1, n * block), [&](int64_t b, int64_t e) {
    T best[kColumnBlock];
    Index idx[kColumnBlock];
    int64_t o = b / blocks, jb = b % blocks;
    for (int64_t u = b; u < e; ++u, ++jb) {
      if (jb == blocks) {
        jb = 0;
        ++o;
      }
      const int64_t j0 = jb * block;
      const int64_t width = std::min(block, inner - j0);
      const T* src = x + o * n * inner + j0;
      if (inner == 1) {
        // Two vectorized passes over the (cache-resident) row: the extreme
        // value, NaN-propagating, then the first index that holds it.
        using R = std::conditional_t<kMax, MaxReducer<T>, MinReducer<T>>;
        const T m = ReduceFlat<R>(src, n);
        if constexpr (kIsFloat<T>) {
          if (m != m) {
            out[o] = Index(FindFirst(src, n, [](T v) { return v != v; }));
            continue;
          }
        }
        out[o] = Index(FindFirst(src, n, [m](T v) { return v == m; }));
        continue;
      }
      for (int64_t j = 0; j < width; ++j) {
        best[j] = src[j];
        idx[j] = 0;
      }
      for (int64_t r = 1; r < n; ++r) {
        const T* row = src + r * inner;
        for (int64_t j = 0; j < width; ++j) {
          const bool take = Better<T, kMax>(row[j], best[j]);
          best[j] = take ? row[j] : best[j];
          idx[j] = take ? Index(r) : idx[j];
        }
      }
      std::copy(idx, idx + width, out + o * inner + j0);
    }
  });
}

template <typename T, bool kMax>
class ArgMinMaxOp final : public OpKernel {
 public:
  explicit ArgMinMaxOp(OpKernelConstruction* c) : OpKernel(c) {
    if (!c->GetAttr("output_type", &output_type_).ok()) return;
  }

  void Compute(OpKernelContext* ctx) override {
    const Tensor& in = ctx->input(0);
    std::vector<int64_t> dims;
    FS_OP_REQUIRES_OK(ctx, ReadIndices(ctx->input(1), "dimension", name(), &dims));
    FS_OP_REQUIRES(ctx, dims.size() == 1,
                   InvalidArgument("dimension must hold exactly one value, got " +
                                       std::to_string(dims.size()),
                                   name()));
    FS_OP_REQUIRES_OK(ctx, CheckAxis(dims[0], in.shape(), "dimension", name()));
    const int axis = int(dims[0] < 0 ? dims[0] + in.rank() : dims[0]);
    TensorShape out_shape = in.shape();
    out_shape.RemoveDim(axis);
    int64_t outer = 1, inner = 1;
    for (int i = 0; i < axis; ++i) outer *= in.dim(i);
    for (int i = axis + 1; i < in.rank(); ++i) inner *= in.dim(i);
    const int64_t n = in.dim(axis);
    FS_OP_REQUIRES(ctx, n > 0 || out_shape.num_elements() == 0,
                   InvalidArgument("dimension " + std::to_string(dims[0]) +
                                       " is empty in input of shape " + in.shape().ToString(),
                                   name()));
    const bool fits = output_type_ == DataType::kInt64 || n <= std::numeric_limits<int32_t>::max();
    FS_OP_REQUIRES(ctx, fits,
                   InvalidArgument("dimension of size " + std::to_string(n) +
                                       " does not fit output_type int32",
                                   name()));
    Tensor* out = nullptr;
    FS_OP_REQUIRES_OK(ctx, ctx->allocate_output(0, out_shape, &out));
    if (out->num_elements() == 0) return;
    if (output_type_ == DataType::kInt32) {
      ArgReduce<T, kMax>(ctx->device(), in.data<T>(), outer, n, inner, out->data<int32_t>());
    } else {
      ArgReduce<T, kMax>(ctx->device(), in.data<T>(), outer, n, inner, out->data<int64_t>());
    }
  }

 private:
  DataType output_type_ = DataType::kInt64;
};

template <typename T>
void RegisterForType(KernelRegistry* r) {
  const DataType t = kDataTypeOf<T>;
  for (DataType idx : {DataType::kInt32, DataType::kInt64}) {
    auto def = [&](const char* op) {
      return KernelDef(op).TypeConstraint("T", t).TypeConstraint("Tidx", idx);
    };
    MustRegister(r, def("Sum"), MakeKernel<ReductionOp<T, SumReducer>>);
    MustRegister(r, def("Mean"), MakeKernel<ReductionOp<T, MeanReducer>>);
    MustRegister(r, def("Prod"), MakeKernel<ReductionOp<T, ProdReducer>>);
    MustRegister(r, def("Max"), MakeKernel<ReductionOp<T, MaxReducer>>);
    MustRegister(r, def("Min"), MakeKernel<ReductionOp<T, MinReducer>>);
    for (DataType out : {DataType::kInt32, DataType::kInt64}) {
      MustRegister(r, def("ArgMax").TypeConstraint("output_type", out),
                   MakeKernel<ArgMinMaxOp<T, true>>);
      MustRegister(r, def("ArgMin").TypeConstraint("output_type", out),
                   MakeKernel<ArgMinMaxOp<T, false>>);
    }
  }
}

}  // namespace

void RegisterReductionKernels(KernelRegistry* r) {
  RegisterForType<float>(r);
  RegisterForType<double>(r);
  RegisterForType<int32_t>(r);
  RegisterForType<int64_t>(r);
  RegisterForType<uint8_t>(r);
}

}  // namespace flowstate::internal
