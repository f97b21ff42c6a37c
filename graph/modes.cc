#include "graph/modes.h"

#include <map>
#include <string>

namespace flowstate {

GraphDef InferenceGraph(const GraphDef& graph) {
  GraphDef out = graph;
  std::map<std::string, std::string> dropouts;  // name -> its input 0
  for (NodeDef& n : out.nodes) {
    if (n.op == "Dropout") {
      // Identity keeps output 0's name. The mask (output 1) mostly feeds
      // gradients, which inference graphs do not have; a node that reads it
      // (an imported ONNX Dropout's mask output) reads ones instead below,
      // the factor inference applies.
      if (!n.inputs.empty()) dropouts[n.name] = n.inputs[0];
      n.op = "Identity";
      AttrMap attrs;
      auto t = n.attrs.find("T");
      if (t != n.attrs.end()) attrs["T"] = t->second;
      n.attrs = std::move(attrs);
    } else if (n.op == "BatchNorm") {
      n.attrs["is_training"] = AttrValue(false);
    }
  }
  if (dropouts.empty()) return out;
  std::map<std::string, std::string> masks;  // dropout -> its inference mask node
  for (NodeDef& n : out.nodes) {
    for (std::string& in : n.inputs) {
      if (in.empty() || in[0] == '^' || in.size() < 3 || in.compare(in.size() - 2, 2, ":1") != 0) continue;
      const std::string node = in.substr(0, in.size() - 2);
      if (!dropouts.count(node)) continue;
      masks.emplace(node, node + "/inference_mask");
      in = masks.at(node);
    }
  }
  for (const auto& [node, mask] : masks) {
    NodeDef ones;
    ones.name = mask;
    ones.op = "OnesLike";
    ones.inputs = {dropouts.at(node)};
    out.nodes.push_back(std::move(ones));
  }
  return out;
}

}  // namespace flowstate
