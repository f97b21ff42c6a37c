// Building small ONNX models in tests with ONNX's own protobuf classes
// (onnx_proto, which only the tests and api/onnx/ link). Header-only test
// helpers; not thread-safe (they fill the proto they are given).
#ifndef FLOWSTATE_TESTS_ONNX_ONNX_TEST_MODELS_H_
#define FLOWSTATE_TESTS_ONNX_ONNX_TEST_MODELS_H_

#include <onnx/onnx_pb.h>

#include <cstdint>
#include <string>
#include <vector>

namespace flowstate::onnx_test {

// A float tensor value (graph input or output); -1 is a dynamic dimension.
inline onnx::ValueInfoProto* AddValue(google::protobuf::RepeatedPtrField<onnx::ValueInfoProto>* list,
                                      const std::string& name, std::vector<int64_t> dims) {
  onnx::ValueInfoProto* v = list->Add();
  v->set_name(name);
  auto* t = v->mutable_type()->mutable_tensor_type();
  t->set_elem_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) {
    auto* dim = t->mutable_shape()->add_dim();
    if (d >= 0) dim->set_dim_value(d);
    else dim->set_dim_param("batch");
  }
  return v;
}

inline onnx::NodeProto* AddNode(onnx::GraphProto* g, const std::string& name, const std::string& op,
                                std::vector<std::string> in, std::vector<std::string> out) {
  onnx::NodeProto* n = g->add_node();
  n->set_name(name);
  n->set_op_type(op);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

inline onnx::TensorProto* AddInitializer(onnx::GraphProto* g, const std::string& name,
                                         std::vector<int64_t> dims, std::vector<float> values) {
  onnx::TensorProto* t = g->add_initializer();
  t->set_name(name);
  t->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : dims) t->add_dims(d);
  for (float v : values) t->add_float_data(v);
  return t;
}

inline void AddFloatAttr(onnx::NodeProto* n, const std::string& name, float value) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::FLOAT);
  a->set_f(value);
}

// An empty model of the default domain at `opset`.
inline onnx::ModelProto NewModel(int opset = 13) {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("flowstate-test");
  auto* o = m.add_opset_import();
  o->set_domain("");
  o->set_version(opset);
  m.mutable_graph()->set_name("g");
  return m;
}

}  // namespace flowstate::onnx_test

#endif  // FLOWSTATE_TESTS_ONNX_ONNX_TEST_MODELS_H_
