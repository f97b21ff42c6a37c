// Partitioned variables: a Variable with attr `partitions` = P > 1 holds its
// rows in P ordinary Variables "<name>/part_0" .. "<name>/part_{P-1}", each
// of them placed on its own device when `partition_devices` names devices
// (part p on partition_devices[p % size]; a device spec may name a task,
// "/job:worker/task:1"). Which rows a part holds is
// `partition_strategy`, as TensorFlow's embedding_lookup:
//   "mod": row r lives in part r % P at local row r / P;
//   "div": contiguous ranges, the first (rows % P) parts one row longer.
//
// ExpandPartitionedVariables is the graph rewrite, run once when a graph
// is built (BuildTrainingGraph, Session::Create and Session::Extend; a C++
// client that calls AddGradients itself calls it first):
//   - each partitioned Variable becomes its P parts, carrying the attrs
//     below (init and the other attrs are copied; an initializer's fans are
//     the logical shape's; random initial values are seeded per part, so
//     they differ from the unpartitioned table's);
//   - each Gather (axis 0) of it -- directly, or inside a loop through the
//     loop's constant Enters of the table (then each part gets its own
//     Enters, "<enter>/part_<p>") -- becomes the routing of TensorFlow's
//     embedding_lookup under the Gather's name (with the Gather's static
//     shape where the ids' shape is known): PartitionIds (each id's
//     part and local row, checked against the logical rows), one Gather per
//     part (colocated with the part) and DynamicStitch putting the rows back
//     in the ids' order. Its gradient is one sparse gradient per part (the
//     local rows and their values), so the optimizer updates each part with
//     its own SparseApply*, and a Variable's slots are partitioned alike;
//   - any other reader of "<name>" gets the logical table, a DynamicStitch
//     of the parts (marked with attr _partition_strategy so that a Gather
//     added later, by Session::Extend, is routed too);
//   - a write of the whole table by reference becomes writes of its parts
//     under the write's name: Assign(T, value) assigns each part its rows
//     of value (validate_shape false is refused: the table keeps its
//     shape), ScatterUpdate/ScatterAdd/ScatterSub(T, indices, updates)
//     route the indices (PartitionIds) and scatter each part's updates;
//     the write's output is the table's new logical value. Any other op
//     that takes "<name>" by reference (AssignAdd, a SparseApply*, a
//     reference to a write's output) is refused, naming it.
// The rewrite is idempotent: a graph without partitioned Variables comes
// back unchanged.
//
// The logical table: checkpoints, snapshots, exports and predictions see
// one tensor under the Variable's name with its rows in logical order,
// whatever P; AssembleLogical and SplitLogical are the one place that maps
// parts to the table and back, so a table saved with one P (or none) is
// restored with another.
//
// Pure functions; thread-safe.
#ifndef FLOWSTATE_GRAPH_PARTITIONED_VARIABLES_H_
#define FLOWSTATE_GRAPH_PARTITIONED_VARIABLES_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "graph/attr_value.h"
#include "graph/graph.h"
#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate {

enum class PartitionStrategy { kMod, kDiv };

// "mod" or "div"; INVALID_ARGUMENT otherwise.
StatusOr<PartitionStrategy> PartitionStrategyFromString(const std::string& s);
const char* PartitionStrategyName(PartitionStrategy s);

// Where logical rows go, for a table of `rows` rows split over `partitions`.
struct PartitionLayout {
  int64_t rows = 0;
  int64_t partitions = 1;
  PartitionStrategy strategy = PartitionStrategy::kMod;

  int64_t PartRows(int64_t p) const;
  // The part and local row of logical row r (0 <= r < rows).
  std::pair<int64_t, int64_t> Locate(int64_t r) const;
  // The logical row of local row `local` of part p.
  int64_t LogicalRow(int64_t p, int64_t local) const;
};

// The attrs the rewrite puts on each part (read by FindPartitionedVariables
// and the initializers): the logical variable's name, this part's index,
// the count, the strategy, the logical shape.
inline constexpr const char* kPartitionOfAttr = "_partition_of";
inline constexpr const char* kPartitionIndexAttr = "_partition_index";
inline constexpr const char* kPartitionsAttr = "_partitions";
inline constexpr const char* kPartitionStrategyAttr = "_partition_strategy";
inline constexpr const char* kLogicalShapeAttr = "_logical_shape";

// One logical table and its parts (in part order).
struct PartitionedVariable {
  std::string name;
  DataType dtype = DataType::kFloat32;
  TensorShape shape;  // logical
  PartitionLayout layout;
  std::vector<std::string> parts;
};

// The checks of a Variable's partition attrs: OK, or INVALID_ARGUMENT whose
// message starts with the attr at fault ("partitions: ...",
// "partition_strategy: ...") so that decoders can prefix the JSON path.
// `partitions` must be >= 1 and, when > 1, at most the rows, with the first
// dimension of `shape` known.
Status CheckPartitionAttrs(const AttrMap& attrs);

// The rewrite described above. INVALID_ARGUMENT naming the node for an
// invalid graph (Graph::Create's errors), bad partition attrs, a Gather of
// a partitioned variable along an axis other than 0, or a reference use.
StatusOr<GraphDef> ExpandPartitionedVariables(const GraphDef& graph);

// The logical tables of an expanded graph, from its parts' attrs, in the
// order their first part appears.
std::vector<PartitionedVariable> FindPartitionedVariables(const GraphDef& graph);

// The logical variables of `variables` (names of an expanded graph): each
// part replaced by its table's name, once, where its first part was.
std::vector<std::string> LogicalNames(const std::vector<std::string>& variables,
                                      const std::vector<PartitionedVariable>& tables);

// The table `variable` is a part of, or `variable` itself.
std::string LogicalName(const std::string& variable, const std::vector<PartitionedVariable>& tables);

// Named values of part variables -> the same with each table's parts
// replaced by the logical table (at its first part's position); other
// values pass unchanged. INVALID_ARGUMENT when a table has some parts but
// not all, or a part of the wrong dtype or shape.
StatusOr<std::vector<std::pair<std::string, Tensor>>> AssembleLogical(
    std::vector<std::pair<std::string, Tensor>> values,
    const std::vector<PartitionedVariable>& tables);

// The reverse: each value named after a table is split into its parts;
// other values pass unchanged. INVALID_ARGUMENT naming the table for a
// value of the wrong dtype or shape.
StatusOr<std::vector<std::pair<std::string, Tensor>>> SplitLogical(
    std::vector<std::pair<std::string, Tensor>> values,
    const std::vector<PartitionedVariable>& tables);

}  // namespace flowstate

#endif  // FLOWSTATE_GRAPH_PARTITIONED_VARIABLES_H_
