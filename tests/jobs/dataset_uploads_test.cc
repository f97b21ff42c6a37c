// Uploaded datasets (jobs/dataset_uploads.h): chunks in order, the final
// check before a job may read the file, limits, resuming after a restart,
// and hostile ids and links. Over HTTP and gRPC with numpy's own files:
// python/tests/test_datasets.py.
#include "jobs/dataset_uploads.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "state/data_source.h"
#include "state/npy.h"
#include "tests/util/temp_dir.h"

namespace flowstate {
namespace {

using test_util::TempDir;

std::string FloatNpy(const std::vector<int64_t>& shape, float first) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = first + float(i);
  return NpyHeader("<f4", shape) +
         std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float));
}

DatasetUploadsOptions Options(const TempDir& root) {
  DatasetUploadsOptions o;
  o.data_root = root.path();
  return o;
}

TEST(DatasetUploads, ChunksInOrderMakeAFileAJobReads) {
  TempDir root;
  DatasetUploads up(Options(root));
  const std::string file = FloatNpy({4, 3}, 1);
  StatusOr<DatasetInfo> d = up.Append("", 0, std::string_view(file).substr(0, 50), false);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->id.size(), 15u);
  EXPECT_FALSE(d->complete);
  EXPECT_EQ(d->bytes, 50);
  EXPECT_TRUE(d->arrays.empty());

  // A resent chunk (the client lost the answer) is refused, saying where to go on.
  StatusOr<DatasetInfo> again = up.Append(d->id, 0, std::string_view(file).substr(0, 50), false);
  ASSERT_FALSE(again.ok());
  EXPECT_EQ(again.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(again.status().message().find("starts at offset 50"), std::string::npos) << again.status().ToString();
  // A job cannot name it yet.
  DataSource s;
  s.format = "npy";
  s.files = {{"x", "uploads/" + d->id + ".npy"}};
  EXPECT_FALSE(LoadDataSource(root.path(), s).ok());

  d = up.Append(d->id, 50, std::string_view(file).substr(50), true);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->complete);
  EXPECT_EQ(d->bytes, int64_t(file.size()));
  EXPECT_EQ(d->path, "uploads/" + d->id + ".npy");
  ASSERT_EQ(d->arrays.size(), 1u);
  EXPECT_EQ(d->arrays[0].dtype, "float32");
  EXPECT_EQ(d->arrays[0].shape, (std::vector<int64_t>{4, 3}));

  s.files = {{"x", d->path}};
  StatusOr<Dataset> loaded = LoadDataSource(root.path(), s);
  ASSERT_TRUE(loaded.ok()) << loaded.status().ToString();
  EXPECT_EQ(loaded->num_examples(), 4);

  StatusOr<DatasetInfo> more = up.Append(d->id, d->bytes, "x", false);
  ASSERT_FALSE(more.ok());
  EXPECT_NE(more.status().message().find("is complete"), std::string::npos) << more.status().ToString();

  ASSERT_EQ(up.List().size(), 1u);
  ASSERT_TRUE(up.Delete(d->id).ok());
  EXPECT_EQ(up.Get(d->id).status().code(), Code::kNotFound);
  EXPECT_TRUE(up.List().empty());
}

TEST(DatasetUploads, AFileThatIsNoArrayIsDeletedAndNamedWrong) {
  TempDir root;
  DatasetUploads up(Options(root));
  std::string file = FloatNpy({4}, 0);
  file.resize(file.size() - 4);  // one element short
  StatusOr<DatasetInfo> d = up.Append("", 0, file, true);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kInvalidArgument);
  EXPECT_NE(d.status().message().find("truncated"), std::string::npos) << d.status().ToString();
  EXPECT_NE(d.status().message().find("was deleted"), std::string::npos) << d.status().ToString();
  EXPECT_TRUE(up.List().empty());
  EXPECT_TRUE(std::filesystem::is_empty(root.path() + "/uploads"));

  d = up.Append("", 0, "{\"not\": \"numpy\"}", true);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("bad magic"), std::string::npos) << d.status().ToString();
}

TEST(DatasetUploads, LimitsKeepNothingOfTheChunkOverThem) {
  TempDir root;
  DatasetUploadsOptions o = Options(root);
  o.max_dataset_bytes = 100;
  o.max_datasets = 2;
  DatasetUploads up(o);
  const std::string file = FloatNpy({20}, 0);  // 208 bytes
  StatusOr<DatasetInfo> d = up.Append("", 0, std::string_view(file).substr(0, 80), false);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  StatusOr<DatasetInfo> over = up.Append(d->id, 80, std::string_view(file).substr(80, 40), false);
  ASSERT_FALSE(over.ok());
  EXPECT_EQ(over.status().code(), Code::kResourceExhausted);
  EXPECT_NE(over.status().message().find("limits.max_dataset_bytes"), std::string::npos) << over.status().ToString();
  EXPECT_EQ(up.Get(d->id)->bytes, 80);  // unchanged

  // A header that declares more data than the limit is refused before any
  // of it is read (an archive member may inflate to far more than its
  // bytes); it says so and the file is gone.
  DatasetUploadsOptions small = o;
  small.max_dataset_bytes = 200;
  DatasetUploads bounded(small);
  std::string big = NpyHeader("<f4", std::vector<int64_t>{1000});  // 128 bytes, 4000 declared
  StatusOr<DatasetInfo> bomb = bounded.Append("", 0, big, true);
  ASSERT_FALSE(bomb.ok());
  EXPECT_EQ(bomb.status().code(), Code::kResourceExhausted) << bomb.status().ToString();
  EXPECT_NE(bomb.status().message().find("uncompressed"), std::string::npos) << bomb.status().ToString();
  EXPECT_EQ(up.List().size(), 1u);

  ASSERT_TRUE(up.Append("", 0, "a", false).ok());
  StatusOr<DatasetInfo> third = up.Append("", 0, "b", false);
  ASSERT_FALSE(third.ok());
  EXPECT_NE(third.status().message().find("limits.max_datasets"), std::string::npos) << third.status().ToString();
  EXPECT_EQ(up.List().size(), 2u);
}

TEST(DatasetUploads, APartialUploadResumesAfterARestartAndAbandonedOnesGo) {
  TempDir root;
  const std::string file = FloatNpy({8}, 0);
  std::string id;
  {
    DatasetUploads up(Options(root));
    StatusOr<DatasetInfo> d = up.Append("", 0, std::string_view(file).substr(0, 64), false);
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    id = d->id;
  }
  DatasetUploadsOptions o = Options(root);
  DatasetUploads restarted(o);
  StatusOr<DatasetInfo> d = restarted.Get(id);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->bytes, 64);
  d = restarted.Append(id, 64, std::string_view(file).substr(64), true);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(d->complete);

  // A partial upload untouched for longer than abandon_after is deleted
  // when the next one starts; complete ones stay.
  o.abandon_after = std::chrono::seconds(0);
  DatasetUploads reaping(o);
  StatusOr<DatasetInfo> stale = reaping.Append("", 0, "x", false);
  ASSERT_TRUE(stale.ok());
  sleep(1);
  ASSERT_TRUE(reaping.Append("", 0, "y", false).ok());
  EXPECT_EQ(reaping.Get(stale->id).status().code(), Code::kNotFound);
  EXPECT_TRUE(reaping.Get(id).ok());
}

TEST(DatasetUploads, HostileIdsAndLinksTouchNothing) {
  TempDir root;
  DatasetUploads up(Options(root));
  for (const char* id : {"../../etc/passwd", "ds-../../x", "ds-0123456789ab/../x", "DS-0123456789AB", ""}) {
    if (*id == '\0') continue;
    EXPECT_EQ(up.Get(id).status().code(), Code::kNotFound) << id;
    EXPECT_EQ(up.Delete(id).code(), Code::kNotFound) << id;
    EXPECT_EQ(up.Append(id, 0, "x", true).status().code(), Code::kNotFound) << id;
  }
  // uploads/ as a link to elsewhere is refused, and nothing is written there.
  TempDir linked, elsewhere;
  ASSERT_EQ(symlink(elsewhere.path().c_str(), (linked.path() + "/uploads").c_str()), 0);
  DatasetUploads through_link(Options(linked));
  StatusOr<DatasetInfo> d = through_link.Append("", 0, FloatNpy({2}, 0), true);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kPermissionDenied) << d.status().ToString();
  EXPECT_TRUE(std::filesystem::is_empty(elsewhere.path()));
}

TEST(DatasetUploads, AMissingDataRootIsAClearError) {
  TempDir root;
  DatasetUploadsOptions o = Options(root);
  o.data_root = root.path() + "/missing";
  DatasetUploads up(o);
  StatusOr<DatasetInfo> d = up.Append("", 0, FloatNpy({2}, 0), true);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kFailedPrecondition);
  EXPECT_NE(d.status().message().find("data root cannot be opened"), std::string::npos) << d.status().ToString();
  EXPECT_TRUE(up.List().empty());
}

}  // namespace
}  // namespace flowstate
