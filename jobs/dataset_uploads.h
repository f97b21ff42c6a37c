// DatasetUploads: NumPy arrays that clients upload for their jobs to train
// on (POST /v1/datasets, gRPC Datasets/Upload), kept as files beneath the
// data root, in `uploads/`, where a job's `"format": "npy"` input reads them
// like any other dataset file (state/npy.h).
//
// An upload arrives in chunks (each at most a request body), appended in
// order: the first makes a new dataset `ds-<12 hex>` stored as
// `uploads/<id>.partial`; each later one names the offset it starts at,
// which must be the bytes received so far (FAILED_PRECONDITION saying how
// many otherwise, so a client that lost an answer resumes where the server
// is). The chunk marked final closes it: the whole file is read through
// (every .npy header parsed, every byte counted, an .npz's CRCs checked) and
// only then renamed to `uploads/<id>.npy` or `.npz`; a file that is not one
// is deleted and INVALID_ARGUMENT names what is wrong with it. So a path a
// job can name is always a whole, readable array file.
//
// Limits: a dataset's bytes (max_dataset_bytes; RESOURCE_EXHAUSTED naming
// limits.max_dataset_bytes, nothing of the chunk kept), the same bound on
// its arrays' data uncompressed (checked from the headers before the data
// is read through: an archive bomb is refused at once), and the number of
// datasets, partial ones included (max_datasets). A chunk the disk cannot
// hold is cut off again (the dataset keeps its earlier bytes) and answered
// RESOURCE_EXHAUSTED ("no space left"). Partial uploads untouched for
// `abandon_after` are deleted when a new one starts.
//
// State is the directory itself (sizes, names), so uploads outlive restarts
// and a partial one resumes after one. Ids are checked against their form
// before any file is touched, and files are opened beneath the root without
// following links (a link at `uploads` is refused).
//
// Thread-safe: one mutex orders every change and read of the directory.
#ifndef FLOWSTATE_JOBS_DATASET_UPLOADS_H_
#define FLOWSTATE_JOBS_DATASET_UPLOADS_H_

#include <chrono>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "api/views.h"
#include "graph/mutex.h"
#include "graph/status.h"

namespace flowstate {

struct DatasetUploadsOptions {
  std::string data_root;                                // the server's data_root
  int64_t max_dataset_bytes = int64_t{4} << 30;         // limits.max_dataset_bytes
  int max_datasets = 100;                               // limits.max_datasets
  std::chrono::seconds abandon_after{24 * 3600};
};

class DatasetUploads {
 public:
  explicit DatasetUploads(DatasetUploadsOptions options) : options_(std::move(options)) {}

  // Appends `chunk` to dataset `id` at `offset` ("" with offset 0: a new
  // dataset); `final` closes it (checked, then renamed). Returns its view.
  StatusOr<DatasetInfo> Append(const std::string& id, int64_t offset, std::string_view chunk,
                               bool final);
  StatusOr<DatasetInfo> Get(const std::string& id) const;  // NOT_FOUND
  std::vector<DatasetInfo> List() const;                   // by id
  Status Delete(const std::string& id);                    // NOT_FOUND

  // The directory beneath the data root that holds the uploads.
  static constexpr const char* kDir = "uploads";

 private:
  const DatasetUploadsOptions options_;
  mutable Mutex mu_;  // orders every change and read of the directory's files
};

}  // namespace flowstate

#endif  // FLOWSTATE_JOBS_DATASET_UPLOADS_H_
