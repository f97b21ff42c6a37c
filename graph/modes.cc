#include "graph/modes.h"

namespace flowstate {

GraphDef InferenceGraph(const GraphDef& graph) {
  GraphDef out = graph;
  for (NodeDef& n : out.nodes) {
    if (n.op == "Dropout") {
      // Identity keeps output 0's name; the mask (output 1) only feeds
      // gradients, which inference graphs do not have.
      n.op = "Identity";
      AttrMap attrs;
      auto t = n.attrs.find("T");
      if (t != n.attrs.end()) attrs["T"] = t->second;
      n.attrs = std::move(attrs);
    } else if (n.op == "BatchNorm") {
      n.attrs["is_training"] = AttrValue(false);
    }
  }
  return out;
}

}  // namespace flowstate
