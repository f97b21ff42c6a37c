// CSV files: numeric columns read into the components of a Dataset.
//
// Each non-blank line is one example; cells are split at `delimiter`,
// trimmed of spaces and tabs, and may be double-quoted ("" inside quotes is
// a quote; a quoted cell cannot span lines). The first non-blank line is a
// header when CsvOptions::header says so; kAuto takes it for a header when
// any of its cells is not a number (so an all-numeric header needs
// kPresent). Every line must have as many cells as the first. The file may
// be gzip-compressed (see InputFile).
//
// A CsvComponent picks columns by header name or by 0-based index; a
// component that picks neither takes every column that no other component
// picks. Only picked columns are parsed, so other columns may hold text. A
// component of one column is a tensor [N]; of k columns, [N, k], in the
// order picked. Cells parse as the component's dtype: decimal or exponent
// notation, "nan" and "inf" for floating types; integers (range-checked) for
// int32, int64, uint8; 0, 1, true, false for bool.
//
// Errors are INVALID_ARGUMENT and name the place: "<path>:<line>:<column>:
// the cell is not a valid float32 value (component 'x')", lines and columns
// counted from 1 (lines as in the file, blank ones included); "<path>:<line>:
// has 3 cells, the first line has 4"; unknown header names and out-of-range
// indices name the component. No message quotes the file's content (a cell,
// a header): a job may point at any file it can read, and its errors reach
// the client. <path> is the path as the job gave it. Reading errors are
// InputFile's.
//
// Free functions without shared state; thread-safe.
#ifndef FLOWSTATE_STATE_CSV_READER_H_
#define FLOWSTATE_STATE_CSV_READER_H_

#include <string>
#include <vector>

#include "graph/status.h"
#include "graph/types.h"
#include "state/data_path.h"
#include "state/dataset.h"

namespace flowstate {

enum class CsvHeader {
  kAuto,     // the first line is a header when a cell of it is not a number
  kPresent,  // the first line is a header
  kAbsent,   // every line is data; columns can only be picked by index
};

struct CsvComponent {
  std::string name;  // the component's name in the Dataset; non-empty, unique
  // The columns, in this order, by header name (requires a header) or by
  // 0-based index. At most one of the two may be set; when neither is, the
  // component takes the columns no other component picks, in file order (at
  // most one component may do this).
  std::vector<std::string> columns;
  std::vector<int> column_indices;
  DataType dtype = DataType::kFloat32;
};

struct CsvOptions {
  char delimiter = ',';
  CsvHeader header = CsvHeader::kAuto;
  // At least one.
  std::vector<CsvComponent> components;
};

// Reads the CSV file at `path` (used as given).
StatusOr<Dataset> ReadCsvFile(const std::string& path, const CsvOptions& options);
// The same from a file opened beneath the data root; errors name file.name().
StatusOr<Dataset> ReadCsvFile(DataFile file, const CsvOptions& options);

// Opens `path` beneath `data_root` (OpenDataFile: PERMISSION_DENIED when it
// or a link on its way escapes the root, NOT_FOUND when missing), then
// ReadCsvFile().
StatusOr<Dataset> LoadCsvDataset(const std::string& data_root, const std::string& path,
                                 const CsvOptions& options);

}  // namespace flowstate

#endif  // FLOWSTATE_STATE_CSV_READER_H_
