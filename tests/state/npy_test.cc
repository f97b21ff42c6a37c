// NumPy .npy files read as a job's "npy" input (state/npy.h): every dtype,
// the header forms numpy writes (versions 1 to 3, Python 2's longs, one-
// element tuples), a gzipped .npy, and the hostile ones refused naming the
// file. (.npz archives: tests/checkpoints/npz_test.cc, which can write
// them; numpy's own files: python/tests/test_datasets.py.)
#include "state/npy.h"

#include <cstring>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "state/data_source.h"
#include "tests/state/input_test_util.h"

namespace flowstate {
namespace {

using testing_input::TempDir;
using testing_input::WriteFile;

// An .npy file: the header numpy would write, then `data`.
std::string Npy(std::string_view descr, const std::vector<int64_t>& shape, const std::string& data) {
  return NpyHeader(descr, shape) + data;
}

// An .npy file whose header dict is `dict` as given (version 1.0, padded).
std::string RawNpy(const std::string& dict, const std::string& data, int major = 1) {
  std::string h = dict;
  const size_t prefix = major == 1 ? 10 : 12;
  h.append((64 - (prefix + h.size() + 1) % 64) % 64, ' ');
  h += '\n';
  std::string out("\x93NUMPY", 6);
  out.push_back(char(major));
  out.push_back(0);
  const size_t n = h.size();
  out.push_back(char(n & 0xff));
  out.push_back(char(n >> 8));
  if (major != 1) {
    out.push_back(0);
    out.push_back(0);
  }
  return out + h + data;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

StatusOr<Tensor> Read(const TempDir& dir, const std::string& name) {
  FS_ASSIGN_OR_RETURN(DataFile f, OpenDataFile(dir.path(), name));
  return ReadNpyArray(std::move(f), "x");
}

TEST(Npy, ReadsEveryDtypeNumpyWrites) {
  TempDir dir;
  WriteFile(dir.path() + "/f4.npy", Npy("<f4", {2, 3}, Bytes<float>({1, 2, 3, 4, 5, 6.5f})));
  WriteFile(dir.path() + "/f8.npy", Npy("<f8", {2}, Bytes<double>({0.25, -1})));
  WriteFile(dir.path() + "/i4.npy", Npy("<i4", {3}, Bytes<int32_t>({-7, 0, 9})));
  WriteFile(dir.path() + "/i8.npy", Npy("<i8", {1}, Bytes<int64_t>({int64_t{1} << 40})));
  WriteFile(dir.path() + "/u1.npy", Npy("|u1", {4}, std::string("\x00\x01\xfe\xff", 4)));
  WriteFile(dir.path() + "/b1.npy", Npy("|b1", {2}, std::string("\x01\x00", 2)));
  WriteFile(dir.path() + "/f2.npy", Npy("<f2", {1}, std::string("\x00\x3c", 2)));  // 1.0

  StatusOr<Tensor> f4 = Read(dir, "f4.npy");
  ASSERT_TRUE(f4.ok()) << f4.status().ToString();
  EXPECT_EQ(f4->dtype(), DataType::kFloat32);
  EXPECT_EQ(f4->shape().ToString(), "[2, 3]");
  EXPECT_EQ(f4->flat<float>()[5], 6.5f);
  StatusOr<Tensor> f8 = Read(dir, "f8.npy");
  ASSERT_TRUE(f8.ok()) << f8.status().ToString();
  EXPECT_EQ(f8->flat<double>()[0], 0.25);
  StatusOr<Tensor> i4 = Read(dir, "i4.npy");
  ASSERT_TRUE(i4.ok()) << i4.status().ToString();
  EXPECT_EQ(i4->flat<int32_t>()[0], -7);
  StatusOr<Tensor> i8 = Read(dir, "i8.npy");
  ASSERT_TRUE(i8.ok()) << i8.status().ToString();
  EXPECT_EQ(i8->flat<int64_t>()[0], int64_t{1} << 40);
  StatusOr<Tensor> u1 = Read(dir, "u1.npy");
  ASSERT_TRUE(u1.ok()) << u1.status().ToString();
  EXPECT_EQ(u1->flat<uint8_t>()[3], 255);
  StatusOr<Tensor> b1 = Read(dir, "b1.npy");
  ASSERT_TRUE(b1.ok()) << b1.status().ToString();
  EXPECT_EQ(b1->dtype(), DataType::kBool);
  EXPECT_TRUE(b1->flat<bool>()[0]);
  EXPECT_FALSE(b1->flat<bool>()[1]);
  StatusOr<Tensor> f2 = Read(dir, "f2.npy");
  ASSERT_TRUE(f2.ok()) << f2.status().ToString();
  EXPECT_EQ(f2->dtype(), DataType::kFloat16);
}

TEST(Npy, ReadsTheHeaderFormsNumpyWrites) {
  TempDir dir;
  const std::string data = Bytes<float>({1, 2});
  // numpy's own spacing, a version 2.0 header, Python 2's long sizes, and
  // the native byte order written '='.
  WriteFile(dir.path() + "/v1.npy",
            RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data));
  WriteFile(dir.path() + "/v2.npy",
            RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (2,), }", data, 2));
  WriteFile(dir.path() + "/long.npy",
            RawNpy("{'descr':'=f4','fortran_order':False,'shape':(1L, 2L)}", data));
  // A one-dimensional array in "Fortran order" is the same bytes.
  WriteFile(dir.path() + "/fortran1d.npy",
            RawNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2,), }", data));
  WriteFile(dir.path() + "/gz.npy", Npy("<f4", {2}, data), /*gzip=*/true);
  for (const char* name : {"v1.npy", "v2.npy", "long.npy", "fortran1d.npy", "gz.npy"}) {
    StatusOr<Tensor> t = Read(dir, name);
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    EXPECT_EQ(t->num_elements(), 2) << name;
    EXPECT_EQ(t->flat<float>()[1], 2.0f) << name;
  }
}

TEST(Npy, RefusesWhatItCannotReadNamingTheFile) {
  TempDir dir;
  const std::string four = Bytes<float>({1, 2, 3, 4});
  struct Case {
    const char* name;
    std::string bytes;
    Code code;
    const char* says;
  };
  const std::vector<Case> cases = {
      {"idx.npy", std::string("\0\0\x08\x01\0\0\0\x04", 8) + "abcd", Code::kInvalidArgument, "bad magic"},
      {"empty.npy", "", Code::kDataLoss, "truncated"},
      {"v9.npy", RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), }", four, 9),
       Code::kInvalidArgument, "version 9"},
      {"big.npy", Npy(">f4", {4}, four), Code::kInvalidArgument, "big-endian"},
      {"i2.npy", Npy("<i2", {2}, four), Code::kInvalidArgument, "'<i2'"},
      {"obj.npy", Npy("|O", {1}, "12345678"), Code::kInvalidArgument, "'|O'"},
      {"struct.npy", RawNpy("{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (1,), }", "1234"),
       Code::kInvalidArgument, "structured"},
      {"fortran.npy", RawNpy("{'descr': '<f4', 'fortran_order': True, 'shape': (2, 2), }", four),
       Code::kInvalidArgument, "Fortran order"},
      {"short.npy", Npy("<f4", {5}, four), Code::kDataLoss, "truncated"},
      {"long.npy", Npy("<f4", {3}, four), Code::kDataLoss, "bytes after"},
      {"key.npy", RawNpy("{'descr': '<f4', 'fortran_order': False, 'shape': (4,), 'x': 1}", four),
       Code::kInvalidArgument, "unknown key 'x'"},
      {"noshape.npy", RawNpy("{'descr': '<f4', 'fortran_order': False}", four), Code::kInvalidArgument,
       "lacks"},
      {"rank9.npy", Npy("<f4", {1, 1, 1, 1, 1, 1, 1, 1, 4}, four), Code::kInvalidArgument,
       "more than 8 dimensions"},
      {"huge.npy", Npy("<f4", {int64_t{1} << 40, int64_t{1} << 40}, four), Code::kInvalidArgument,
       "too large"},
      {"bool2.npy", Npy("|b1", {2}, std::string("\x01\x02", 2)), Code::kInvalidArgument, "neither 0 nor 1"},
      {"garbage.npy", RawNpy("{'descr': '<f4', 'fortran_order': Maybe, 'shape': (4,)}", four),
       Code::kInvalidArgument, "neither True nor False"},
  };
  for (const Case& c : cases) {
    WriteFile(dir.path() + "/" + c.name, c.bytes);
    StatusOr<Tensor> t = Read(dir, c.name);
    ASSERT_FALSE(t.ok()) << c.name;
    EXPECT_EQ(t.status().code(), c.code) << c.name << ": " << t.status().ToString();
    EXPECT_NE(t.status().message().find(c.name), std::string::npos) << t.status().ToString();
    EXPECT_NE(t.status().message().find(c.says), std::string::npos) << c.name << ": " << t.status().ToString();
  }
}

TEST(Npy, HeaderLengthIsBounded) {
  TempDir dir;
  std::string out("\x93NUMPY\x02\x00", 8);
  out += std::string("\x00\x00\x00\x40", 4);  // 1 GiB of header declared
  WriteFile(dir.path() + "/h.npy", out);
  StatusOr<Tensor> t = Read(dir, "h.npy");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("over the limit"), std::string::npos) << t.status().ToString();
}

TEST(Npy, AJobsNpyInputLoadsComponentsAndTheirDtypes) {
  TempDir dir;
  WriteFile(dir.path() + "/d/x.npy", Npy("<f4", {3, 2}, Bytes<float>({1, 2, 3, 4, 5, 6})));
  WriteFile(dir.path() + "/d/y.npy", Npy("<i8", {3}, Bytes<int64_t>({0, 1, 2})));
  WriteFile(dir.path() + "/d/y4.npy", Npy("<i8", {4}, Bytes<int64_t>({0, 1, 2, 3})));
  DataSource s;
  s.format = "npy";
  s.files = {{"x", "d/x.npy"}, {"y", "d/y.npy"}};
  StatusOr<Dataset> d = LoadDataSource(dir.path(), s);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_examples(), 3);
  EXPECT_EQ(d->DebugString(), "Dataset(3 examples; x: float32[2], y: int64[])");
  StatusOr<std::map<std::string, DataType>> types = DataSourceTypes(dir.path(), s);
  ASSERT_TRUE(types.ok()) << types.status().ToString();
  EXPECT_EQ(types->at("x"), DataType::kFloat32);
  EXPECT_EQ(types->at("y"), DataType::kInt64);

  s.files["y"] = "d/y4.npy";
  d = LoadDataSource(dir.path(), s);
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("disagree on the number of examples"), std::string::npos)
      << d.status().ToString();
  s.files["y"] = "../outside.npy";
  d = LoadDataSource(dir.path(), s);
  ASSERT_FALSE(d.ok());
  EXPECT_EQ(d.status().code(), Code::kPermissionDenied) << d.status().ToString();
  EXPECT_NE(d.status().message().find("component 'y'"), std::string::npos) << d.status().ToString();
}

TEST(Npy, AScalarIsNoDataset) {
  TempDir dir;
  WriteFile(dir.path() + "/s.npy", Npy("<f4", {}, Bytes<float>({1})));
  StatusOr<Dataset> d = LoadNpyDataset(dir.path(), {{"x", "s.npy"}});
  ASSERT_FALSE(d.ok());
  EXPECT_NE(d.status().message().find("scalar"), std::string::npos) << d.status().ToString();
}

}  // namespace
}  // namespace flowstate
