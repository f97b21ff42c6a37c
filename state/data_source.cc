#include "state/data_source.h"

#include <utility>

#include "state/csv_reader.h"
#include "state/idx_reader.h"
#include "state/npy.h"

namespace flowstate {

StatusOr<Dataset> LoadDataSource(const std::string& data_root, const DataSource& source) {
  Dataset d;
  if (source.format == "idx") {
    FS_ASSIGN_OR_RETURN(d, LoadIdxDataset(data_root, source.files));
  } else if (source.format == "npy") {
    FS_ASSIGN_OR_RETURN(d, LoadNpyDataset(data_root, source.files));
  } else if (source.format == "csv") {
    // One read per distinct file, with the components that come from it.
    std::map<std::string, std::vector<std::string>> by_file;
    for (const auto& [name, file] : source.files) by_file[file].push_back(name);
    std::map<std::string, Tensor> components;
    for (const auto& [file, names] : by_file) {
      CsvOptions o;
      o.delimiter = source.delimiter;
      if (source.header) o.header = *source.header ? CsvHeader::kPresent : CsvHeader::kAbsent;
      for (const std::string& name : names) {
        CsvComponent c;
        c.name = name;
        auto col = source.columns.find(name);
        if (col != source.columns.end()) {
          c.columns = col->second.names;
          c.column_indices = col->second.indices;
          c.dtype = col->second.dtype;
        }
        o.components.push_back(c);
      }
      FS_ASSIGN_OR_RETURN(Dataset r, LoadCsvDataset(data_root, file, o));
      for (const auto& [name, t] : r.components()) components[name] = t;
    }
    FS_ASSIGN_OR_RETURN(d, Dataset::Make(std::move(components)));
  } else {
    return InvalidArgument("format: expected \"idx\", \"csv\" or \"npy\", got \"" + source.format + "\"");
  }
  if (source.max_examples) d = d.Take(*source.max_examples);
  return d;
}

namespace {

// Fields as "<decimal length>:<bytes>", one after another.
void Put(std::string* out, std::string_view field) {
  out->append(std::to_string(field.size())).push_back(':');
  out->append(field);
}
void PutInt(std::string* out, int64_t v) { Put(out, std::to_string(v)); }

class Reader {
 public:
  explicit Reader(std::string_view text) : text_(text) {}
  bool Next(std::string_view* field) {
    size_t colon = text_.find(':', pos_);
    if (colon == std::string_view::npos || colon == pos_ || colon - pos_ > 12) return false;
    size_t n = 0;
    for (size_t i = pos_; i < colon; ++i) {
      if (text_[i] < '0' || text_[i] > '9') return false;
      n = n * 10 + size_t(text_[i] - '0');
    }
    if (n > text_.size() - colon - 1) return false;
    *field = text_.substr(colon + 1, n);
    pos_ = colon + 1 + n;
    return true;
  }
  bool NextInt(int64_t* v) {
    std::string_view f;
    if (!Next(&f) || f.empty() || f.size() > 19) return false;
    bool negative = f[0] == '-';
    int64_t r = 0;
    for (size_t i = negative ? 1 : 0; i < f.size(); ++i) {
      if (f[i] < '0' || f[i] > '9') return false;
      r = r * 10 + (f[i] - '0');
    }
    *v = negative ? -r : r;
    return true;
  }
  bool done() const { return pos_ == text_.size(); }

 private:
  std::string_view text_;
  size_t pos_ = 0;
};

}  // namespace

StatusOr<std::map<std::string, DataType>> DataSourceTypes(const std::string& data_root,
                                                          const DataSource& source) {
  std::map<std::string, DataType> types;
  for (const auto& [name, file] : source.files) {
    if (source.format == "idx") {
      FS_ASSIGN_OR_RETURN(DataFile f, OpenDataFile(data_root, file));
      FS_ASSIGN_OR_RETURN(IdxHeader h, ReadIdxHeader(std::move(f)));
      types[name] = h.dtype;
    } else if (source.format == "npy") {
      FS_ASSIGN_OR_RETURN(DataFile f, OpenDataFile(data_root, file));
      FS_ASSIGN_OR_RETURN(NpyArrayInfo info, ReadNpyInfo(std::move(f), name));
      types[name] = info.dtype;
    } else if (source.format == "csv") {
      auto col = source.columns.find(name);
      types[name] = col != source.columns.end() ? col->second.dtype : CsvComponent().dtype;
    } else {
      return InvalidArgument("format: expected \"idx\", \"csv\" or \"npy\", got \"" + source.format + "\"");
    }
  }
  return types;
}

std::string EncodeDataSource(const DataSource& s) {
  std::string out;
  Put(&out, s.format);
  PutInt(&out, int64_t(s.files.size()));
  for (const auto& [name, file] : s.files) {
    Put(&out, name);
    Put(&out, file);
  }
  PutInt(&out, int64_t(s.columns.size()));
  for (const auto& [name, c] : s.columns) {
    Put(&out, name);
    Put(&out, DataTypeName(c.dtype));
    PutInt(&out, int64_t(c.names.size()));
    for (const std::string& n : c.names) Put(&out, n);
    PutInt(&out, int64_t(c.indices.size()));
    for (int i : c.indices) PutInt(&out, i);
  }
  PutInt(&out, s.header ? int64_t(*s.header) : -1);
  Put(&out, std::string_view(&s.delimiter, 1));
  PutInt(&out, s.max_examples ? *s.max_examples : -1);
  return out;
}

StatusOr<DataSource> DecodeDataSource(std::string_view text) {
  const Status bad = InvalidArgument("not an encoded data source");
  Reader r(text);
  DataSource s;
  std::string_view f, g;
  int64_t n = 0, v = 0;
  if (!r.Next(&f)) return bad;
  s.format = std::string(f);
  if (!r.NextInt(&n) || n < 0) return bad;
  for (int64_t i = 0; i < n; ++i) {
    if (!r.Next(&f) || !r.Next(&g)) return bad;
    s.files[std::string(f)] = std::string(g);
  }
  if (!r.NextInt(&n) || n < 0) return bad;
  for (int64_t i = 0; i < n; ++i) {
    if (!r.Next(&f)) return bad;
    DataSource::Columns& c = s.columns[std::string(f)];
    if (!r.Next(&g)) return bad;
    StatusOr<DataType> dtype = DataTypeFromString(g);
    if (!dtype.ok()) return bad;
    c.dtype = *dtype;
    int64_t k = 0;
    if (!r.NextInt(&k) || k < 0) return bad;
    for (int64_t j = 0; j < k; ++j) {
      if (!r.Next(&g)) return bad;
      c.names.emplace_back(g);
    }
    if (!r.NextInt(&k) || k < 0) return bad;
    for (int64_t j = 0; j < k; ++j) {
      if (!r.NextInt(&v)) return bad;
      c.indices.push_back(int(v));
    }
  }
  if (!r.NextInt(&v) || v < -1 || v > 1) return bad;
  if (v >= 0) s.header = v == 1;
  if (!r.Next(&f) || f.size() != 1) return bad;
  s.delimiter = f[0];
  if (!r.NextInt(&v) || v < -1) return bad;
  if (v >= 0) s.max_examples = v;
  if (!r.done()) return bad;
  return s;
}

}  // namespace flowstate
