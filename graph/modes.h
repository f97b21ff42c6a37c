// Training and inference forms of one graph. Training graphs run Dropout
// and BatchNorm in training mode; InferenceGraph returns the same graph with
// Dropout replaced by Identity and BatchNorm switched to its moving averages,
// for evaluation and serving. The two share variables by name when run in
// sessions sharing a ResourceMgr. Pure function.
#ifndef FLOWSTATE_GRAPH_MODES_H_
#define FLOWSTATE_GRAPH_MODES_H_

#include "graph/attr_value.h"

namespace flowstate {

GraphDef InferenceGraph(const GraphDef& graph);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_MODES_H_
