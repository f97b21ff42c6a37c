#include "state/csv_reader.h"

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string_view>
#include <system_error>
#include <type_traits>
#include <utility>

#include "graph/allocator.h"
#include "graph/tensor.h"
#include "state/data_path.h"
#include "state/input_file.h"

namespace flowstate {
namespace {

bool IsBlank(char c) { return c == ' ' || c == '\t'; }

std::string_view Trim(std::string_view s) {
  while (!s.empty() && IsBlank(s.front())) s.remove_prefix(1);
  while (!s.empty() && IsBlank(s.back())) s.remove_suffix(1);
  return s;
}

// Splits `line` into (*cells)[0, *count), reusing the strings' storage.
// Returns false for an unterminated quote or text after a closing quote.
bool SplitLine(std::string_view line, char delim, std::vector<std::string>* cells, size_t* count) {
  size_t n = 0;
  size_t i = 0;
  while (true) {
    if (n == cells->size()) cells->emplace_back();
    std::string& cell = (*cells)[n++];
    size_t j = i;
    while (j < line.size() && line[j] != delim && IsBlank(line[j])) ++j;
    if (j < line.size() && line[j] == '"') {
      cell.clear();
      for (++j;; ++j) {
        if (j >= line.size()) return false;
        if (line[j] == '"') {
          if (j + 1 < line.size() && line[j + 1] == '"') {
            cell += '"';
            ++j;
            continue;
          }
          ++j;
          break;
        }
        cell += line[j];
      }
      for (; j < line.size() && line[j] != delim; ++j) {
        if (!IsBlank(line[j])) return false;
      }
    } else {
      j = std::min(line.find(delim, i), line.size());
      const std::string_view t = Trim(line.substr(i, j - i));
      cell.assign(t.data(), t.size());
    }
    if (j >= line.size()) break;
    i = j + 1;
  }
  *count = n;
  return true;
}

template <typename T>
bool ParseNumber(std::string_view s, T* out) {
  if (!s.empty() && s.front() == '+') s.remove_prefix(1);
  if (s.empty()) return false;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), *out);
  return ec == std::errc() && ptr == s.data() + s.size();
}

// Parses one cell as T; false when it is not a valid T.
template <typename T>
bool ParseCell(std::string_view s, T* out) {
  if constexpr (std::is_same_v<T, bool>) {
    if (s == "1" || s == "true" || s == "True" || s == "TRUE") return *out = true, true;
    if (s == "0" || s == "false" || s == "False" || s == "FALSE") return *out = false, true;
    return false;
  } else if constexpr (std::is_same_v<T, Half> || std::is_same_v<T, BFloat16>) {
    float f;
    if (!ParseNumber(s, &f)) return false;
    *out = T(f);
    return true;
  } else if constexpr (std::is_floating_point_v<T>) {
    return ParseNumber(s, out);
  } else {
    int64_t v;
    if (!ParseNumber(s, &v)) return false;
    if (v < int64_t(std::numeric_limits<T>::min()) || v > int64_t(std::numeric_limits<T>::max())) {
      return false;
    }
    *out = T(v);
    return true;
  }
}

bool LooksNumeric(std::string_view s) {
  double d;
  return ParseNumber(s, &d);
}

struct Line {
  std::string_view text;
  int64_t number;  // 1-based
};

// The non-blank lines of `text`, without their line terminators.
std::vector<Line> SplitLines(std::string_view text) {
  std::vector<Line> lines;
  int64_t number = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t end = text.find('\n', pos);
    if (end == std::string_view::npos) end = text.size();
    std::string_view line = text.substr(pos, end - pos);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    ++number;
    if (!Trim(line).empty()) lines.push_back({line, number});
    pos = end + 1;
  }
  return lines;
}

struct Plan {
  std::string name;
  DataType dtype;
  std::vector<int> columns;
};

// Turns the options into column indices per component.
StatusOr<std::vector<Plan>> MakePlans(const std::string& path, const CsvOptions& options,
                                      const std::vector<std::string>* header, int num_columns) {
  if (options.components.empty()) {
    return InvalidArgument("CSV file '" + path + "': no components are selected");
  }
  std::vector<Plan> plans;
  std::set<std::string> names;
  std::set<int> picked;
  int rest = -1;  // the component that takes the remaining columns
  for (const CsvComponent& c : options.components) {
    const std::string what = "CSV component '" + c.name + "' of '" + path + "'";
    if (c.name.empty()) return InvalidArgument("CSV file '" + path + "': a component has no name");
    if (!names.insert(c.name).second) return InvalidArgument(what + " is selected twice");
    if (c.dtype == DataType::kInvalid || DataTypeSize(c.dtype) == 0) {
      return InvalidArgument(what + " has no valid dtype");
    }
    Plan plan{c.name, c.dtype, {}};
    if (!c.columns.empty() && !c.column_indices.empty()) {
      return InvalidArgument(what + " picks columns both by name and by index");
    }
    for (int index : c.column_indices) {
      if (index < 0 || index >= num_columns) {
        return InvalidArgument(what + " picks column " + std::to_string(index) +
                               ", but the file has columns 0 to " +
                               std::to_string(num_columns - 1));
      }
      plan.columns.push_back(index);
    }
    for (const std::string& name : c.columns) {
      if (header == nullptr) {
        return InvalidArgument(what + " picks column '" + name + "' by name, but the file has " +
                               "no header line");
      }
      int found = -1;
      for (int i = 0; i < num_columns; ++i) {
        if ((*header)[i] != name) continue;
        if (found >= 0) {
          return InvalidArgument(what + " picks column '" + name +
                                 "', which the header names more than once");
        }
        found = i;
      }
      if (found < 0) {
        return InvalidArgument(what + " picks column '" + name + "', which the header lacks");
      }
      plan.columns.push_back(found);
    }
    if (plan.columns.empty()) {
      if (rest >= 0) {
        return InvalidArgument("CSV file '" + path + "': components '" + plans[rest].name +
                               "' and '" + c.name + "' both take the remaining columns");
      }
      rest = int(plans.size());
    }
    picked.insert(plan.columns.begin(), plan.columns.end());
    plans.push_back(std::move(plan));
  }
  if (rest >= 0) {
    for (int i = 0; i < num_columns; ++i) {
      if (!picked.count(i)) plans[rest].columns.push_back(i);
    }
    if (plans[rest].columns.empty()) {
      return InvalidArgument("CSV component '" + plans[rest].name + "' of '" + path +
                             "' takes the remaining columns, but none remain");
    }
  }
  return plans;
}

Status CheckDelimiter(const CsvOptions& options) {
  if (options.delimiter == '"' || options.delimiter == '\n' || options.delimiter == '\r') {
    return InvalidArgument("CSV delimiter cannot be a quote or a line break");
  }
  return Status::OK();
}

// Parses `text`, the content of the file that messages call `path`.
StatusOr<Dataset> ParseCsv(const std::string& text, const std::string& path,
                           const CsvOptions& options) {
  const std::vector<Line> lines = SplitLines(text);
  if (lines.empty()) return InvalidArgument("CSV file '" + path + "' is empty");

  std::vector<std::string> cells;
  size_t count = 0;
  auto split = [&](const Line& line) -> Status {
    if (!SplitLine(line.text, options.delimiter, &cells, &count)) {
      return InvalidArgument(path + ":" + std::to_string(line.number) + ": unbalanced quotes");
    }
    return Status::OK();
  };

  FS_RETURN_IF_ERROR(split(lines[0]));
  const int num_columns = int(count);
  bool has_header = options.header == CsvHeader::kPresent;
  if (options.header == CsvHeader::kAuto) {
    for (size_t i = 0; i < count && !has_header; ++i) has_header = !LooksNumeric(cells[i]);
  }
  std::vector<std::string> header;
  if (has_header) header.assign(cells.begin(), cells.begin() + count);
  FS_ASSIGN_OR_RETURN(std::vector<Plan> plans,
                      MakePlans(path, options, has_header ? &header : nullptr, num_columns));

  const size_t first = has_header ? 1 : 0;
  const int64_t rows = int64_t(lines.size() - first);
  std::vector<Tensor> tensors;
  for (const Plan& plan : plans) {
    TensorShape shape({rows});
    if (plan.columns.size() > 1) shape.AddDim(int64_t(plan.columns.size()));
    FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(HostAllocator(), plan.dtype, shape));
    tensors.push_back(std::move(t));
  }

  for (int64_t r = 0; r < rows; ++r) {
    const Line& line = lines[first + size_t(r)];
    FS_RETURN_IF_ERROR(split(line));
    if (int(count) != num_columns) {
      return InvalidArgument(path + ":" + std::to_string(line.number) + ": has " +
                             std::to_string(count) + " cells, the first line has " +
                             std::to_string(num_columns));
    }
    for (size_t p = 0; p < plans.size(); ++p) {
      const Plan& plan = plans[p];
      const size_t k = plan.columns.size();
      Status s = DispatchDataType(plan.dtype, [&]<typename T>() -> Status {
        T* out = static_cast<T*>(tensors[p].raw_data()) + size_t(r) * k;
        for (size_t c = 0; c < k; ++c) {
          const int col = plan.columns[c];
          if (!ParseCell<T>(cells[size_t(col)], out + c)) {
            // The cell's text is not quoted: the file may hold anything.
            return InvalidArgument(
                path + ":" + std::to_string(line.number) + ":" + std::to_string(col + 1) +
                ": the cell is not a valid " + std::string(DataTypeName(plan.dtype)) +
                " value (component '" + plan.name + "')");
          }
        }
        return Status::OK();
      });
      FS_RETURN_IF_ERROR(s);
    }
  }

  std::map<std::string, Tensor> components;
  for (size_t p = 0; p < plans.size(); ++p) {
    components.emplace(plans[p].name, std::move(tensors[p]));
  }
  return Dataset::Make(std::move(components));
}

}  // namespace

StatusOr<Dataset> ReadCsvFile(const std::string& path, const CsvOptions& options) {
  FS_RETURN_IF_ERROR(CheckDelimiter(options));
  FS_ASSIGN_OR_RETURN(const std::string text, ReadInputFile(path));
  return ParseCsv(text, path, options);
}

StatusOr<Dataset> ReadCsvFile(DataFile file, const CsvOptions& options) {
  FS_RETURN_IF_ERROR(CheckDelimiter(options));
  const std::string name = file.name();
  FS_ASSIGN_OR_RETURN(const std::string text, ReadInputFile(std::move(file)));
  return ParseCsv(text, name, options);
}

StatusOr<Dataset> LoadCsvDataset(const std::string& data_root, const std::string& path,
                                 const CsvOptions& options) {
  FS_RETURN_IF_ERROR(CheckDelimiter(options));
  FS_ASSIGN_OR_RETURN(DataFile file, OpenDataFile(data_root, path));
  return ReadCsvFile(std::move(file), options);
}

}  // namespace flowstate
