#include "tests/util/op_test_util.h"

#include <algorithm>
#include <map>
#include <memory>
#include <mutex>
#include <set>

#include "devices/cpu/cpu_device.h"
#include "devices/single_kernel.h"
#include "graph/graph.h"

namespace flowstate::test {
namespace {

std::mutex g_mu;
std::set<std::string>& Exercised() {
  static auto* s = new std::set<std::string>();
  return *s;
}

std::string KernelKey(const KernelDef& d) {
  std::string s = d.op + "[";
  auto c = d.constraints;
  std::sort(c.begin(), c.end());
  for (size_t i = 0; i < c.size(); ++i) {
    s += (i ? "," : "") + c[i].first + "=" + std::string(DataTypeName(c[i].second));
  }
  return s + "]";
}

}  // namespace

Device* CpuTestDevice(int threads) {
  static std::map<int, std::unique_ptr<CpuDevice>>* devices = new std::map<int, std::unique_ptr<CpuDevice>>();
  std::lock_guard<std::mutex> l(g_mu);
  auto& d = (*devices)[threads];
  if (!d) {
    DeviceName n;
    n.job = "localhost";
    n.replica = 0;
    n.task = 0;
    n.type = "CPU";
    n.id = threads;
    d = std::make_unique<CpuDevice>(n, threads, 0);
  }
  return d.get();
}

StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                                    const AttrMap& attrs, Device* device) {
  return RunOp(op, inputs, attrs, device, {});
}

StatusOr<std::vector<Tensor>> RunOp(const std::string& op, const std::vector<Tensor>& inputs,
                                    const AttrMap& attrs, Device* device,
                                    const std::vector<TensorRef*>& refs) {
  if (device == nullptr) device = CpuTestDevice(1);
  auto ref_at = [&](size_t i) { return i < refs.size() ? refs[i] : nullptr; };
  GraphDef gd;
  NodeDef node;
  node.name = "op";
  node.op = op;
  node.attrs = attrs;
  for (size_t i = 0; i < inputs.size(); ++i) {
    NodeDef c;
    c.name = "in" + std::to_string(i);
    if (TensorRef* ref = ref_at(i)) {
      StatusOr<Tensor> value = ref->Read();
      const Tensor& like = value.ok() ? *value : inputs[i];
      c.op = "Variable";
      c.attrs["dtype"] = AttrValue(like.dtype());
      c.attrs["shape"] = AttrValue(like.shape());
    } else {
      c.op = "Const";
      c.attrs["value"] = AttrValue(inputs[i]);
      c.attrs["dtype"] = AttrValue(inputs[i].dtype());
    }
    gd.nodes.push_back(c);
    node.inputs.push_back(c.name);
  }
  gd.nodes.push_back(node);
  FS_ASSIGN_OR_RETURN(Graph g, Graph::Create(gd));
  const Node& n = *g.FindNode("op");
  std::vector<DataType> in_types, out_types;
  for (int i = 0; i < n.num_inputs(); ++i) in_types.push_back(n.input_type(i));
  for (int i = 0; i < n.num_outputs(); ++i) out_types.push_back(n.output_type(i));
  KernelRegistry* reg = KernelRegistry::Global();
  const KernelDef* kdef = reg->FindKernelDef(n.def(), device->type());
  FS_ASSIGN_OR_RETURN(std::unique_ptr<OpKernel> kernel,
                      reg->CreateKernel(n.def(), n.op_def(), device, nullptr, in_types, out_types));
  std::vector<TensorValue> in(inputs.size()), out(n.num_outputs());
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (TensorRef* ref = ref_at(i)) {
      in[i].ref = ref;
    } else {
      in[i].tensor = inputs[i];
    }
  }
  Status ran = SingleKernel::Run(kernel.get(), device, in, out);
  if (kdef != nullptr) {
    std::lock_guard<std::mutex> l(g_mu);
    Exercised().insert(KernelKey(*kdef));
  }
  FS_RETURN_IF_ERROR(ran);
  std::vector<Tensor> result;
  for (int i = 0; i < n.num_outputs(); ++i) {
    const Tensor& t = out[i].tensor;
    if (!t.IsInitialized()) return Internal("output " + std::to_string(i) + " was not set");
    if (t.dtype() != n.output_type(i)) {
      return Internal("output " + std::to_string(i) + " has dtype " +
                      std::string(DataTypeName(t.dtype())) + ", expected " +
                      std::string(DataTypeName(n.output_type(i))));
    }
    if (!n.output_shape(i).IsCompatibleWith(t.shape())) {
      return Internal("output " + std::to_string(i) + " has shape " + t.shape().ToString() +
                      " but the shape function inferred " + n.output_shape(i).ToString());
    }
    result.push_back(t);
  }
  return result;
}

Tensor RunOp1(const std::string& op, const std::vector<Tensor>& inputs, const AttrMap& attrs,
              Device* device) {
  StatusOr<std::vector<Tensor>> r = RunOp(op, inputs, attrs, device);
  EXPECT_TRUE(r.ok()) << op << ": " << r.status().ToString();
  if (!r.ok()) return Tensor();
  EXPECT_EQ(r->size(), 1u) << op;
  return r->empty() ? Tensor() : (*r)[0];
}

std::vector<std::string> ExercisedKernels() {
  std::lock_guard<std::mutex> l(g_mu);
  return {Exercised().begin(), Exercised().end()};
}

std::vector<std::string> RegisteredCpuKernels() {
  std::vector<std::string> out;
  for (const KernelDef& d : KernelRegistry::Global()->ListKernels()) {
    if (d.device_type == "CPU") out.push_back(KernelKey(d));
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

static ::testing::AssertionResult SameMeta(const Tensor& a, const Tensor& e) {
  if (!a.IsInitialized()) return ::testing::AssertionFailure() << "actual tensor is uninitialized";
  if (a.dtype() != e.dtype()) {
    return ::testing::AssertionFailure() << "dtype " << DataTypeName(a.dtype()) << " != expected "
                                         << DataTypeName(e.dtype());
  }
  if (a.shape() != e.shape()) {
    return ::testing::AssertionFailure() << "shape " << a.shape().ToString() << " != expected "
                                         << e.shape().ToString();
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult TensorNear(const Tensor& a, const Tensor& e, double rtol, double atol) {
  auto meta = SameMeta(a, e);
  if (!meta) return meta;
  bool floating = IsFloating(a.dtype());
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = a.ElementAsDouble(i), y = e.ElementAsDouble(i);
    bool ok;
    if (!floating) {
      ok = x == y;
    } else if (std::isnan(y)) {
      ok = std::isnan(x);
    } else if (std::isinf(y)) {
      ok = x == y;
    } else {
      ok = std::abs(x - y) <= atol + rtol * std::abs(y);
    }
    if (!ok) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << x << " != expected " << y << "\n  actual:   "
             << a.DebugString(12) << "\n  expected: " << e.DebugString(12);
    }
  }
  return ::testing::AssertionSuccess();
}

::testing::AssertionResult TensorEq(const Tensor& a, const Tensor& e) {
  auto meta = SameMeta(a, e);
  if (!meta) return meta;
  for (int64_t i = 0; i < a.num_elements(); ++i) {
    double x = a.ElementAsDouble(i), y = e.ElementAsDouble(i);
    if (!(x == y || (std::isnan(x) && std::isnan(y)))) {
      return ::testing::AssertionFailure()
             << "element " << i << ": " << x << " != expected " << y << "\n  actual:   "
             << a.DebugString(12) << "\n  expected: " << e.DebugString(12);
    }
  }
  return ::testing::AssertionSuccess();
}

}  // namespace flowstate::test
