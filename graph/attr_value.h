// AttrValue: the value of one attribute of a node (an int, a float, a dtype,
// a shape, a tensor, a list of those, ...), and NodeDef/GraphDef: the plain,
// serializable description of a graph that clients send (TensorFlow's
// NodeDef convention: inputs "x", "x:1", "^x").
//
// All are value types without synchronization.
#ifndef FLOWSTATE_GRAPH_ATTR_VALUE_H_
#define FLOWSTATE_GRAPH_ATTR_VALUE_H_

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"
#include "graph/tensor_shape.h"
#include "graph/types.h"

namespace flowstate {

// The kinds of attribute values; AttrValue::kind() returns one. The names
// ("int", "list(float)", ...) are the ones op specs use.
enum class AttrKind : uint8_t {
  kInt, kFloat, kBool, kString, kType, kShape, kTensor,
  kIntList, kFloatList, kStringList, kTypeList, kShapeList,
};
std::string_view AttrKindName(AttrKind kind);
StatusOr<AttrKind> AttrKindFromString(std::string_view name);

class AttrValue {
 public:
  AttrValue() : v_(int64_t{0}) {}
  AttrValue(int v) : v_(int64_t{v}) {}
  AttrValue(int64_t v) : v_(v) {}
  AttrValue(float v) : v_(double{v}) {}
  AttrValue(double v) : v_(v) {}
  AttrValue(bool v) : v_(v) {}
  AttrValue(const char* v) : v_(std::string(v)) {}
  AttrValue(std::string v) : v_(std::move(v)) {}
  AttrValue(DataType v) : v_(v) {}
  AttrValue(PartialShape v) : v_(std::move(v)) {}
  AttrValue(const TensorShape& v) : v_(PartialShape(v)) {}
  AttrValue(Tensor v) : v_(std::move(v)) {}
  AttrValue(std::vector<int64_t> v) : v_(std::move(v)) {}
  AttrValue(std::vector<double> v) : v_(std::move(v)) {}
  AttrValue(std::vector<std::string> v) : v_(std::move(v)) {}
  AttrValue(std::vector<DataType> v) : v_(std::move(v)) {}
  AttrValue(std::vector<PartialShape> v) : v_(std::move(v)) {}

  AttrKind kind() const { return static_cast<AttrKind>(v_.index()); }

  // REQUIRES: kind() matches (use the Get* helpers below for checked access).
  int64_t i() const { return std::get<int64_t>(v_); }
  double f() const { return std::get<double>(v_); }
  bool b() const { return std::get<bool>(v_); }
  const std::string& s() const { return std::get<std::string>(v_); }
  DataType type() const { return std::get<DataType>(v_); }
  const PartialShape& shape() const { return std::get<PartialShape>(v_); }
  const Tensor& tensor() const { return std::get<Tensor>(v_); }
  const std::vector<int64_t>& ints() const { return std::get<std::vector<int64_t>>(v_); }
  const std::vector<double>& floats() const { return std::get<std::vector<double>>(v_); }
  const std::vector<std::string>& strings() const { return std::get<std::vector<std::string>>(v_); }
  const std::vector<DataType>& types() const { return std::get<std::vector<DataType>>(v_); }
  const std::vector<PartialShape>& shapes() const { return std::get<std::vector<PartialShape>>(v_); }

  // Converts to `kind` where that loses nothing: an int to a float, an empty
  // list to any list kind. INVALID_ARGUMENT otherwise.
  StatusOr<AttrValue> CoercedTo(AttrKind kind) const;

  bool operator==(const AttrValue& o) const;
  std::string DebugString() const;

 private:
  std::variant<int64_t, double, bool, std::string, DataType, PartialShape,
               Tensor, std::vector<int64_t>, std::vector<double>,
               std::vector<std::string>, std::vector<DataType>,
               std::vector<PartialShape>>
      v_;
};

using AttrMap = std::map<std::string, AttrValue, std::less<>>;

// One node as a client describes it.
struct NodeDef {
  std::string name;
  std::string op;
  // "x" (output 0 of x), "x:1" (output 1), "^x" (control dependency).
  std::vector<std::string> inputs;
  AttrMap attrs;
  // Requested device, full or partial: "/job:worker/task:0/device:CPU:0",
  // "/device:CPU:1", "CPU:1", "" (any).
  std::string device;
};

struct GraphDef {
  std::vector<NodeDef> nodes;
};

// An input string parsed: node name, output index (-1 for control).
struct TensorId {
  std::string node;
  int index = 0;
  bool is_control() const { return index < 0; }
  std::string ToString() const;  // "x", "x:1" or "^x"
};
// Parses "x", "x:1" or "^x". INVALID_ARGUMENT for "", "x:", "x:-1", ...
StatusOr<TensorId> ParseTensorId(std::string_view s);

// Typed attribute lookup with errors that name the node and the attribute.
StatusOr<const AttrValue*> FindAttr(const NodeDef& node, std::string_view name);
StatusOr<int64_t> GetIntAttr(const NodeDef& node, std::string_view name);
StatusOr<double> GetFloatAttr(const NodeDef& node, std::string_view name);
StatusOr<bool> GetBoolAttr(const NodeDef& node, std::string_view name);
StatusOr<std::string> GetStringAttr(const NodeDef& node, std::string_view name);
StatusOr<DataType> GetTypeAttr(const NodeDef& node, std::string_view name);
StatusOr<PartialShape> GetShapeAttr(const NodeDef& node, std::string_view name);
StatusOr<Tensor> GetTensorAttr(const NodeDef& node, std::string_view name);
StatusOr<std::vector<int64_t>> GetIntListAttr(const NodeDef& node, std::string_view name);
StatusOr<std::vector<DataType>> GetTypeListAttr(const NodeDef& node, std::string_view name);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_ATTR_VALUE_H_
