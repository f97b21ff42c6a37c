// Files are opened beneath the data root: symbolic links that
// lead out of the root are refused and nothing outside it is opened; links
// that stay inside keep working; special files are refused without
// blocking; readers read the opened descriptor and name the file by the
// path the job gave. Each case runs with openat2(2) and with the fallback
// for kernels without it.
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <functional>

#include "state/csv_reader.h"
#include "state/data_path.h"
#include "state/idx_reader.h"
#include "tests/state/input_test_util.h"

namespace flowstate {
namespace {

using testing_input::TempDir;
using testing_input::WriteFile;

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

using Opener = std::function<StatusOr<DataFile>(const std::string&, const std::string&)>;

class BeneathRootTest : public ::testing::TestWithParam<bool> {
 protected:
  void SetUp() override {
    WriteFile(dir_.Join("root/sub/a.csv"), "a,b\n1,2\n");
    WriteFile(dir_.Join("outside/secret.csv"), "root,x\n0,0\n");
  }
  std::string root() const { return dir_.Join("root"); }
  void Link(const std::string& target, const std::string& at) {
    ASSERT_EQ(::symlink(target.c_str(), dir_.Join("root/" + at).c_str()), 0) << at;
  }
  StatusOr<DataFile> Open(const std::string& path) {
    return GetParam() ? OpenDataFile(root(), path)
                      : data_path_internal::OpenDataFileWithoutOpenat2(root(), path);
  }
  std::string Read(DataFile f) {
    std::string out(64, '\0');
    ssize_t n = ::read(f.fd(), out.data(), out.size());
    out.resize(n > 0 ? size_t(n) : 0);
    return out;
  }
  TempDir dir_;
};

INSTANTIATE_TEST_SUITE_P(OpenDataFile, BeneathRootTest, ::testing::Values(true, false),
                         [](const auto& info) { return info.param ? "openat2" : "fallback"; });

TEST_P(BeneathRootTest, LinkToAFileOutsideTheRootIsPermissionDenied) {
  Link("/etc/passwd", "passwd");
  Link("../../outside/secret.csv", "sub/secret.csv");    // relative, climbing out
  Link(dir_.Join("outside/secret.csv"), "abs-secret.csv");  // absolute
  for (const std::string path : {"passwd", "sub/secret.csv", "abs-secret.csv"}) {
    StatusOr<DataFile> f = Open(path);
    ASSERT_FALSE(f.ok()) << path;
    EXPECT_EQ(f.status().code(), Code::kPermissionDenied) << f.status().ToString();
    EXPECT_TRUE(Contains(f.status(), "'" + path + "'")) << f.status().ToString();
    EXPECT_TRUE(Contains(f.status(), "outside the data root")) << f.status().ToString();
    // The server's own paths stay out of the message.
    EXPECT_FALSE(Contains(f.status(), dir_.path())) << f.status().ToString();
  }
}

TEST_P(BeneathRootTest, LinkedDirectoryOutsideTheRootIsPermissionDenied) {
  Link("/etc", "etc");
  Link(dir_.Join("outside"), "out");
  EXPECT_EQ(Open("etc/passwd").status().code(), Code::kPermissionDenied);
  EXPECT_EQ(Open("out/secret.csv").status().code(), Code::kPermissionDenied);
  // No existence oracle for files outside the root.
  EXPECT_EQ(Open("out/missing.csv").status().code(), Code::kPermissionDenied);
  EXPECT_EQ(Open("out/missing/deeper.csv").status().code(), Code::kPermissionDenied);
}

TEST_P(BeneathRootTest, LinksThatStayInsideTheRootWork) {
  Link("sub/a.csv", "rel.csv");
  Link(root() + "/sub/a.csv", "abs.csv");  // absolute, but inside
  Link("sub", "dir");
  ::mkdir(dir_.Join("root/other").c_str(), 0755);
  Link("../sub/a.csv", "other/up.csv");  // ".." that stays inside
  for (const std::string path : {"rel.csv", "abs.csv", "dir/a.csv", "other/up.csv"}) {
    StatusOr<DataFile> f = Open(path);
    ASSERT_TRUE(f.ok()) << path << ": " << f.status().ToString();
    EXPECT_EQ(f->name(), path);
    EXPECT_EQ(Read(std::move(f).value()), "a,b\n1,2\n") << path;
  }
}

TEST_P(BeneathRootTest, DotDotAndAbsolutePathsOutsideAreRefusedBeforeOpening) {
  EXPECT_EQ(Open("../outside/secret.csv").status().code(), Code::kPermissionDenied);
  EXPECT_EQ(Open("sub/../../outside/secret.csv").status().code(), Code::kPermissionDenied);
  EXPECT_EQ(Open(dir_.Join("outside/secret.csv")).status().code(), Code::kPermissionDenied);
  EXPECT_EQ(Open("/etc/passwd").status().code(), Code::kPermissionDenied);
  StatusOr<DataFile> inside = Open(root() + "/sub/a.csv");
  ASSERT_TRUE(inside.ok()) << inside.status().ToString();
}

TEST_P(BeneathRootTest, SpecialFilesAreRefusedWithoutBlocking) {
  ASSERT_EQ(::mkfifo(dir_.Join("root/fifo").c_str(), 0644), 0);
  StatusOr<DataFile> f = Open("fifo");  // would block forever without O_NONBLOCK
  EXPECT_EQ(f.status().code(), Code::kInvalidArgument) << f.status().ToString();
  EXPECT_TRUE(Contains(f.status(), "not a regular file"));
  EXPECT_EQ(Open("sub").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(Open("sub/missing.csv").status().code(), Code::kNotFound);
}

// The readers go through the same door: a CSV job's link to /etc/passwd is
// refused, and a parse error never quotes the file.
TEST(DatasetReadersBeneathRoot, CsvAndIdxThroughALinkOutOfTheRootArePermissionDenied) {
  TempDir dir;
  WriteFile(dir.Join("root/ok.csv"), "a\n1\n");
  ASSERT_EQ(::symlink("/etc/passwd", dir.Join("root/data.csv").c_str()), 0);
  CsvOptions o;
  o.header = CsvHeader::kAbsent;
  o.delimiter = ':';
  o.components = {{"x", {}, {0}, DataType::kFloat32}};
  Status s = LoadCsvDataset(dir.Join("root"), "data.csv", o).status();
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  EXPECT_TRUE(Contains(s, "'data.csv'")) << s.ToString();
  EXPECT_FALSE(Contains(s, "root:")) << "nothing of /etc/passwd: " << s.ToString();
  s = LoadIdxDataset(dir.Join("root"), {{"x", "data.csv"}}).status();
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  EXPECT_EQ(ResolveDataPath(dir.Join("root"), "data.csv").status().code(), Code::kPermissionDenied);
}

TEST(DatasetReadersBeneathRoot, ParseErrorsNameFileLineAndColumnButNotTheCell) {
  TempDir dir;
  WriteFile(dir.Join("root/d/users.csv"), "1:2\n3:hunter2\n");
  CsvOptions o;
  o.header = CsvHeader::kAbsent;
  o.delimiter = ':';
  o.components = {{"x", {}, {0, 1}, DataType::kFloat32}};
  Status s = LoadCsvDataset(dir.Join("root"), "d/users.csv", o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_EQ(s.message(), "d/users.csv:2:2: the cell is not a valid float32 value (component 'x')");
  EXPECT_FALSE(Contains(s, "hunter2"));
  // A header read as names is not quoted either.
  WriteFile(dir.Join("root/h.csv"), "secret_a,secret_b\n1,2\n");
  o.delimiter = ',';
  o.header = CsvHeader::kPresent;
  o.components = {{"x", {"nope"}, {}, DataType::kFloat32}};
  s = LoadCsvDataset(dir.Join("root"), "h.csv", o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_FALSE(Contains(s, "secret")) << s.ToString();
  EXPECT_FALSE(Contains(s, dir.path())) << "the server's path: " << s.ToString();
}

}  // namespace
}  // namespace flowstate
