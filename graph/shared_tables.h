// Tables shared by data-parallel replicas (a job's "partitioned_tables":
// "shared"): instead of every replica holding a whole copy of each
// partitioned table (graph/partitioned_variables.h) and its optimizer slots,
// part p and its slots live on one replica only, replica p % replicas (its
// holder), so the replicas together keep one copy of the table split over
// their tasks, as the paper's parameter-server tasks do.
//
// ShareTables rewrites one replica's copy of the training graph
// (graph/training_graph.h, replicas > 1, sparse gradients gathered as rows):
//   - each lookup of a table (the per-part Gathers of one routing, under
//     "<lookup>/shared") becomes one _SharedGather, a collective of its own
//     numbered before the gradients' buckets in the graph's topological
//     order: every replica's ids of every part are gathered, each part's
//     holder answers their rows (the others zeros, summed with them), and
//     each replica gets its own; the routing's PartitionIds and
//     DynamicStitch (and so the per-part gradients) are unchanged;
//   - a part this replica does not hold loses its Variable, its slots,
//     their initializers and its updates; the gradient of the part is still
//     gathered from every replica (so the holder applies the sum of all of
//     them once per step) and the train op still waits for it;
//   - everything else (the dense model, its all-reduce) is unchanged.
// A shared table may only be looked up: any other reader of a part (a dense
// read of the table, an Assign) is refused, naming the node.
//
// Pure functions; thread-safe.
#ifndef FLOWSTATE_GRAPH_SHARED_TABLES_H_
#define FLOWSTATE_GRAPH_SHARED_TABLES_H_

#include <map>
#include <string>
#include <vector>

#include "graph/status.h"
#include "graph/training_graph.h"

namespace flowstate {

// The replica that holds part `part` among `replicas`.
inline int SharedPartHolder(int64_t part, int replicas) { return int(part % replicas); }

// The shared variables of a training graph (the parts of its partitioned
// tables and of their slots) and the replica that holds each.
std::map<std::string, int> SharedVariableHolders(const TrainingGraph& tg, int replicas);

// One replica's training graph with shared tables.
struct ReplicaTrainingGraph {
  GraphDef graph;
  // The variables it holds: tg.variables, in order, without the parts
  // other replicas hold.
  std::vector<std::string> variables;
  // Its ReplicaComm's buckets a step: the lookups, then tg.allreduce.
  int num_buckets = 0;
};

// The rewrite above for replica `rank` of `replicas` (> 1). INVALID_ARGUMENT
// naming the node and the field "partitioned_tables" when a part is read
// other than by a lookup, or when the graph has no all-reduce (replicas 1)
// or densifies its sparse gradients.
StatusOr<ReplicaTrainingGraph> ShareTables(const TrainingGraph& tg, int rank, int replicas);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_SHARED_TABLES_H_
