// DataSource: where a job's examples come from — the format, the file of
// each component under a data root, and for CSV the columns of each — and
// LoadDataSource, which reads it into a Dataset. What the job spec's
// "input" and "eval" describe (api/job_spec.h DataSpec is parsed into one),
// loaded by the task that trains: the master for its replica, and each
// replica's task for its own (state/replica_input.h).
//
// EncodeDataSource/DecodeDataSource carry one across tasks as a node's
// string attr: length-prefixed fields, no escaping needed.
//
// Value type; the functions have no shared state and are thread-safe.
#ifndef FLOWSTATE_STATE_DATA_SOURCE_H_
#define FLOWSTATE_STATE_DATA_SOURCE_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "graph/types.h"
#include "state/dataset.h"

namespace flowstate {

struct DataSource {
  std::string format = "idx";                // "idx", "csv" or "npy" (state/npy.h)
  std::map<std::string, std::string> files;  // component name -> path under the data root
  // csv only: a component's columns by header name or by 0-based index
  // (at most one of the two), and its dtype.
  struct Columns {
    std::vector<std::string> names;
    std::vector<int> indices;
    DataType dtype = DataType::kFloat32;
  };
  std::map<std::string, Columns> columns;
  std::optional<bool> header;  // csv: default auto-detect
  char delimiter = ',';
  std::optional<int64_t> max_examples;  // only the first N examples
};

// Reads `source` beneath `data_root` (OpenDataFile's rules: PERMISSION_DENIED
// for a path escaping the root, NOT_FOUND when missing). Errors are the
// readers' ("points.csv:3: ..."); the caller prefixes where the source came
// from ("input.files").
StatusOr<Dataset> LoadDataSource(const std::string& data_root, const DataSource& source);

// The dtype each component of `source` will have once loaded, read from
// the IDX headers or the CSV columns' dtypes, without loading the data
// (errors as LoadDataSource's).
StatusOr<std::map<std::string, DataType>> DataSourceTypes(const std::string& data_root,
                                                          const DataSource& source);

std::string EncodeDataSource(const DataSource& source);
// INVALID_ARGUMENT when `text` is not an encoded DataSource.
StatusOr<DataSource> DecodeDataSource(std::string_view text);

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_DATA_SOURCE_H_
