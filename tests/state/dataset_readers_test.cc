// IDX and CSV readers and data-path resolution.
#include <bit>
#include <cstring>
#include <filesystem>

#include <gtest/gtest.h>

#include "state/csv_reader.h"
#include "state/data_path.h"
#include "state/dataset.h"
#include "state/idx_reader.h"
#include "tests/state/input_test_util.h"

namespace flowstate {
namespace {

using testing_input::IdxFile;
using testing_input::IdxHeader;
using testing_input::ReadRaw;
using testing_input::TempDir;
using testing_input::WriteFile;

bool Contains(const Status& s, const std::string& text) {
  return s.message().find(text) != std::string::npos;
}

// ---------------------------------------------------------------- DataPath

class DataPathTest : public ::testing::Test {
 protected:
  void SetUp() override { WriteFile(dir_.Join("root/sub/a.idx"), "x"); }
  std::string root() const { return dir_.Join("root"); }
  TempDir dir_;
};

TEST_F(DataPathTest, RelativePathJoinsTheRoot) {
  StatusOr<std::string> p = ResolveDataPath(root(), "sub/a.idx");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, root() + "/sub/a.idx");
  // ".." that stays inside is folded.
  p = ResolveDataPath(root() + "/", "sub/../sub/./a.idx");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, root() + "/sub/a.idx");
}

TEST_F(DataPathTest, DotDotEscapeIsPermissionDenied) {
  WriteFile(dir_.Join("secret"), "s");
  StatusOr<std::string> p = ResolveDataPath(root(), "sub/../../secret");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kPermissionDenied);
  EXPECT_TRUE(Contains(p.status(), "'sub/../../secret'")) << p.status().ToString();
  EXPECT_EQ(ResolveDataPath(root(), "..").status().code(), Code::kPermissionDenied);
  // The root itself is not a file in it.
  EXPECT_EQ(ResolveDataPath(root(), ".").status().code(), Code::kPermissionDenied);
}

TEST_F(DataPathTest, AbsolutePathOutsideRootIsPermissionDenied) {
  StatusOr<std::string> p = ResolveDataPath(root(), "/etc/passwd");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kPermissionDenied);
  EXPECT_TRUE(Contains(p.status(), "/etc/passwd"));
  // A sibling whose name starts with the root's is outside too.
  WriteFile(dir_.Join("root-evil/a.idx"), "x");
  EXPECT_EQ(ResolveDataPath(root(), dir_.Join("root-evil/a.idx")).status().code(),
            Code::kPermissionDenied);
  EXPECT_EQ(ResolveDataPath(root(), root() + "/../root-evil/a.idx").status().code(),
            Code::kPermissionDenied);
}

TEST_F(DataPathTest, AbsolutePathInsideRootIsAccepted) {
  StatusOr<std::string> p = ResolveDataPath(root(), root() + "/sub/a.idx");
  ASSERT_TRUE(p.ok()) << p.status().ToString();
  EXPECT_EQ(*p, root() + "/sub/a.idx");
}

TEST_F(DataPathTest, MissingFileIsNotFound) {
  StatusOr<std::string> p = ResolveDataPath(root(), "sub/missing.idx");
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().code(), Code::kNotFound);
  EXPECT_TRUE(Contains(p.status(), "sub/missing.idx"));
}

TEST_F(DataPathTest, EmptyPathOrRootIsInvalid) {
  EXPECT_EQ(ResolveDataPath(root(), "").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ResolveDataPath("", "a").status().code(), Code::kInvalidArgument);
  EXPECT_EQ(ResolveDataPath(root(), std::string("a\0b", 3)).status().code(),
            Code::kInvalidArgument);
}

// ---------------------------------------------------------------- IDX

TEST(IdxReader, ReadsPlainAndGzippedUint8) {
  TempDir dir;
  std::vector<uint8_t> values(12);
  for (int i = 0; i < 12; ++i) values[i] = uint8_t(i * 20);
  const std::string file = IdxFile<uint8_t>(0x08, {3, 2, 2}, values);
  WriteFile(dir.Join("plain.idx"), file);
  WriteFile(dir.Join("packed.idx.gz"), file, /*gzip=*/true);
  ASSERT_NE(ReadRaw(dir.Join("packed.idx.gz")).substr(0, 2), file.substr(0, 2));

  for (const char* name : {"plain.idx", "packed.idx.gz"}) {
    StatusOr<Tensor> t = ReadIdxFile(dir.Join(name));
    ASSERT_TRUE(t.ok()) << name << ": " << t.status().ToString();
    EXPECT_EQ(t->dtype(), DataType::kUInt8);
    EXPECT_EQ(t->shape(), TensorShape({3, 2, 2}));
    EXPECT_TRUE(TensorsEqual(*t, Tensor::FromVector(values, TensorShape({3, 2, 2})))) << name;
  }
}

TEST(IdxReader, ConvertsMultiByteTypesFromBigEndian) {
  TempDir dir;
  const std::vector<int32_t> ints = {1, -2, 70000, -2147483647 - 1};
  WriteFile(dir.Join("i.idx"), IdxFile<uint32_t>(0x0C, {4}, {1, uint32_t(-2), 70000, 0x80000000u}));
  const std::vector<float> floats = {1.5f, -0.25f, 3e10f};
  std::vector<uint32_t> float_bits;
  for (float f : floats) float_bits.push_back(std::bit_cast<uint32_t>(f));
  WriteFile(dir.Join("f.idx.gz"), IdxFile<uint32_t>(0x0D, {3, 1}, float_bits), true);
  const std::vector<double> doubles = {3.25, -1e300};
  std::vector<uint64_t> double_bits;
  for (double d : doubles) double_bits.push_back(std::bit_cast<uint64_t>(d));
  WriteFile(dir.Join("d.idx"), IdxFile<uint64_t>(0x0E, {2}, double_bits));

  StatusOr<Tensor> i = ReadIdxFile(dir.Join("i.idx"));
  ASSERT_TRUE(i.ok()) << i.status().ToString();
  EXPECT_TRUE(TensorsEqual(*i, Tensor::FromVector(ints)));
  StatusOr<Tensor> f = ReadIdxFile(dir.Join("f.idx.gz"));
  ASSERT_TRUE(f.ok()) << f.status().ToString();
  EXPECT_TRUE(TensorsEqual(*f, Tensor::FromVector(floats, TensorShape({3, 1}))));
  StatusOr<Tensor> d = ReadIdxFile(dir.Join("d.idx"));
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(TensorsEqual(*d, Tensor::FromVector(doubles)));
}

TEST(IdxReader, TypesWithoutADtypeAreRefused) {
  TempDir dir;
  WriteFile(dir.Join("s8.idx"), IdxFile<uint8_t>(0x09, {2}, {1, 2}));
  WriteFile(dir.Join("s16.idx"), IdxFile<uint16_t>(0x0B, {2}, {1, 2}));
  WriteFile(dir.Join("what.idx"), IdxFile<uint8_t>(0x07, {2}, {1, 2}));
  for (const char* name : {"s8.idx", "s16.idx", "what.idx"}) {
    Status s = ReadIdxFile(dir.Join(name)).status();
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << name;
    EXPECT_TRUE(Contains(s, name)) << s.ToString();
  }
}

TEST(IdxReader, CorruptHeaderIsInvalidArgument) {
  TempDir dir;
  std::string bad_magic = IdxFile<uint8_t>(0x08, {2}, {1, 2});
  bad_magic[0] = 'P';
  WriteFile(dir.Join("magic.idx"), bad_magic);
  WriteFile(dir.Join("rank0.idx"), IdxHeader(0x08, {}) + "x");
  WriteFile(dir.Join("rank9.idx"), IdxHeader(0x08, {1, 1, 1, 1, 1, 1, 1, 1, 1}) + "x");
  WriteFile(dir.Join("huge.idx"), IdxHeader(0x0E, {0xffffffffu, 0xffffffffu, 0xffffffffu}));
  for (const char* name : {"magic.idx", "rank0.idx", "rank9.idx", "huge.idx"}) {
    Status s = ReadIdxFile(dir.Join(name)).status();
    EXPECT_EQ(s.code(), Code::kInvalidArgument) << name << ": " << s.ToString();
    EXPECT_TRUE(Contains(s, name)) << s.ToString();
  }
}

TEST(IdxReader, TruncatedOrTrailingDataIsDataLoss) {
  TempDir dir;
  const std::string file = IdxFile<uint8_t>(0x08, {4, 3}, std::vector<uint8_t>(12, 7));
  WriteFile(dir.Join("short.idx"), file.substr(0, file.size() - 1));
  WriteFile(dir.Join("short.idx.gz"), file.substr(0, file.size() - 5), true);
  WriteFile(dir.Join("header.idx"), file.substr(0, 6));
  WriteFile(dir.Join("tiny.idx"), file.substr(0, 2));
  WriteFile(dir.Join("long.idx"), file + "z");
  for (const char* name : {"short.idx", "short.idx.gz", "header.idx", "tiny.idx", "long.idx"}) {
    Status s = ReadIdxFile(dir.Join(name)).status();
    EXPECT_EQ(s.code(), Code::kDataLoss) << name << ": " << s.ToString();
    EXPECT_TRUE(Contains(s, name)) << s.ToString();
  }
}

TEST(IdxReader, CorruptOrCutGzipStreamIsDataLoss) {
  TempDir dir;
  std::vector<uint8_t> values(4000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = uint8_t(i * 7919 % 251);
  WriteFile(dir.Join("ok.idx.gz"), IdxFile<uint8_t>(0x08, {4000}, values), true);
  const std::string gz = ReadRaw(dir.Join("ok.idx.gz"));
  ASSERT_TRUE(ReadIdxFile(dir.Join("ok.idx.gz")).ok());

  WriteFile(dir.Join("cut.idx.gz"), gz.substr(0, gz.size() / 2));
  std::string garbled = gz;
  for (size_t i = 20; i < garbled.size() - 8; i += 3) garbled[i] = char(~garbled[i]);
  WriteFile(dir.Join("garbled.idx.gz"), garbled);
  std::string bad_crc = gz;
  bad_crc[bad_crc.size() - 6] = char(~bad_crc[bad_crc.size() - 6]);
  WriteFile(dir.Join("crc.idx.gz"), bad_crc);
  for (const char* name : {"cut.idx.gz", "garbled.idx.gz", "crc.idx.gz"}) {
    Status s = ReadIdxFile(dir.Join(name)).status();
    EXPECT_EQ(s.code(), Code::kDataLoss) << name << ": " << s.ToString();
    EXPECT_TRUE(Contains(s, name)) << s.ToString();
  }
}

TEST(IdxReader, MissingFileOrDirectory) {
  TempDir dir;
  EXPECT_EQ(ReadIdxFile(dir.Join("none.idx")).status().code(), Code::kNotFound);
  EXPECT_EQ(ReadIdxFile(dir.path()).status().code(), Code::kInvalidArgument);
}

TEST(IdxReader, LoadDatasetResolvesPathsAndChecksCounts) {
  TempDir dir;
  WriteFile(dir.Join("d/x.idx.gz"), IdxFile<uint8_t>(0x08, {3, 2}, {1, 2, 3, 4, 5, 6}), true);
  WriteFile(dir.Join("d/y.idx"), IdxFile<uint8_t>(0x08, {3}, {7, 8, 9}));
  WriteFile(dir.Join("d/y4.idx"), IdxFile<uint8_t>(0x08, {4}, {7, 8, 9, 10}));

  StatusOr<Dataset> d = LoadIdxDataset(dir.path(), {{"x", "d/x.idx.gz"}, {"y", "d/y.idx"}});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_examples(), 3);
  EXPECT_EQ(d->num_components(), 2);
  EXPECT_EQ(*d->ExampleShape("x"), TensorShape({2}));
  EXPECT_EQ(*d->ExampleShape("y"), TensorShape());
  EXPECT_EQ(d->Find("y")->flat<uint8_t>()[2], 9);
  EXPECT_EQ(d->ExampleShape("z").status().code(), Code::kNotFound);

  Status s = LoadIdxDataset(dir.path(), {{"x", "d/x.idx.gz"}, {"y", "d/y4.idx"}}).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "d/x.idx.gz") && Contains(s, "d/y4.idx")) << s.ToString();

  s = LoadIdxDataset(dir.Join("d"), {{"x", "../d/../../etc/passwd"}}).status();
  EXPECT_EQ(s.code(), Code::kPermissionDenied) << s.ToString();
  EXPECT_TRUE(Contains(s, "'x'")) << s.ToString();
  EXPECT_EQ(LoadIdxDataset(dir.path(), {{"x", "d/none.idx"}}).status().code(), Code::kNotFound);
  EXPECT_EQ(LoadIdxDataset(dir.path(), {}).status().code(), Code::kInvalidArgument);
}

// The real files of Debian's dataset-fashion-mnist package.
TEST(IdxReader, FashionMnist) {
  const std::string dir = std::string(kDefaultDataRoot) + "/fashion-mnist";
  if (!std::filesystem::exists(dir + "/train-images-idx3-ubyte.gz")) {
    GTEST_SKIP() << "Fashion-MNIST is not installed under " << dir
                 << " (apt-get install dataset-fashion-mnist)";
  }
  struct Split {
    const char* prefix;
    int64_t n;
  };
  for (Split split : {Split{"train", 60000}, Split{"t10k", 10000}}) {
    const std::string prefix = std::string("fashion-mnist/") + split.prefix;
    StatusOr<Dataset> d = LoadIdxDataset(
        kDefaultDataRoot,
        {{"x", prefix + "-images-idx3-ubyte.gz"}, {"y", prefix + "-labels-idx1-ubyte.gz"}});
    ASSERT_TRUE(d.ok()) << d.status().ToString();
    EXPECT_EQ(d->num_examples(), split.n);
    const Tensor& x = *d->Find("x");
    const Tensor& y = *d->Find("y");
    EXPECT_EQ(x.dtype(), DataType::kUInt8);
    EXPECT_EQ(x.shape(), TensorShape({split.n, 28, 28}));
    EXPECT_EQ(y.dtype(), DataType::kUInt8);
    EXPECT_EQ(y.shape(), TensorShape({split.n}));
    // Labels 0..9, balanced: n/10 of each class.
    std::vector<int64_t> per_class(10, 0);
    for (uint8_t label : y.flat<uint8_t>()) {
      ASSERT_LT(label, 10);
      ++per_class[label];
    }
    for (int64_t c : per_class) EXPECT_EQ(c, split.n / 10);
    int64_t lit = 0;
    for (uint8_t px : x.flat<uint8_t>()) lit += px != 0;
    EXPECT_GT(lit, x.num_elements() / 10);
  }
}

// ---------------------------------------------------------------- CSV

CsvComponent Named(const std::string& name, std::vector<std::string> columns,
                   DataType dtype = DataType::kFloat32) {
  CsvComponent c;
  c.name = name;
  c.columns = std::move(columns);
  c.dtype = dtype;
  return c;
}
CsvComponent Indexed(const std::string& name, std::vector<int> columns,
                     DataType dtype = DataType::kFloat32) {
  CsvComponent c;
  c.name = name;
  c.column_indices = std::move(columns);
  c.dtype = dtype;
  return c;
}

TEST(CsvReader, HeaderSelectionByNameAndTheRest) {
  TempDir dir;
  WriteFile(dir.Join("a.csv"), "label, a ,b,c\n1,0.5,2,-1e3\n0,1.5,-3,+4\n");
  CsvOptions o;
  o.components = {Named("y", {"label"}, DataType::kUInt8), Named("x", {})};
  StatusOr<Dataset> d = ReadCsvFile(dir.Join("a.csv"), o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_examples(), 2);
  EXPECT_TRUE(TensorsEqual(*d->Find("y"), Tensor::FromVector<uint8_t>({1, 0})));
  EXPECT_TRUE(TensorsEqual(*d->Find("x"), Tensor::FromVector<float>({0.5f, 2, -1000, 1.5f, -3, 4},
                                                                    TensorShape({2, 3}))));

  // Names in a chosen order; trimmed header names match.
  o.components = {Named("x", {"c", "a"}, DataType::kFloat64)};
  d = ReadCsvFile(dir.Join("a.csv"), o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(TensorsEqual(*d->Find("x"),
                           Tensor::FromVector<double>({-1000, 0.5, 4, 1.5}, TensorShape({2, 2}))));
}

TEST(CsvReader, NoHeaderSelectionByIndex) {
  TempDir dir;
  WriteFile(dir.Join("n.csv"), "3,1,2\n4,5,6\n7,8,9\n");
  CsvOptions o;
  o.components = {Indexed("y", {0}, DataType::kInt64), Indexed("x", {2, 1}, DataType::kInt32)};
  // kAuto: an all-numeric first line is data.
  StatusOr<Dataset> d = ReadCsvFile(dir.Join("n.csv"), o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(TensorsEqual(*d->Find("y"), Tensor::FromVector<int64_t>({3, 4, 7})));
  EXPECT_TRUE(TensorsEqual(*d->Find("x"),
                           Tensor::FromVector<int32_t>({2, 1, 6, 5, 9, 8}, TensorShape({3, 2}))));
  // kPresent: the same first line is a header.
  o.header = CsvHeader::kPresent;
  d = ReadCsvFile(dir.Join("n.csv"), o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_examples(), 2);
  // Names need a header.
  o.header = CsvHeader::kAbsent;
  o.components = {Named("x", {"1"})};
  Status s = ReadCsvFile(dir.Join("n.csv"), o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "no header")) << s.ToString();
}

TEST(CsvReader, BadCellNamesFileLineAndColumn) {
  TempDir dir;
  // The bad cell's text cannot occur in the temporary directory's name.
  WriteFile(dir.Join("bad.csv"), "a,b\n1,2\n\n3,not#a@number\n");
  CsvOptions o;
  o.components = {Named("x", {})};
  Status s = ReadCsvFile(dir.Join("bad.csv"), o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "bad.csv:4:2: the cell is not a valid float32 value")) << s.ToString();
  EXPECT_FALSE(Contains(s, "not#a@number")) << "the cell's text is never quoted: " << s.ToString();

  WriteFile(dir.Join("range.csv"), "1\n256\n");
  o.components = {Indexed("y", {0}, DataType::kUInt8)};
  s = ReadCsvFile(dir.Join("range.csv"), o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "range.csv:2:1")) << s.ToString();

  WriteFile(dir.Join("frac.csv"), "1.5\n");
  o.components = {Indexed("y", {0}, DataType::kInt32)};
  EXPECT_TRUE(Contains(ReadCsvFile(dir.Join("frac.csv"), o).status(), "frac.csv:1:1"));
}

TEST(CsvReader, RaggedRowsAndBadSelections) {
  TempDir dir;
  WriteFile(dir.Join("r.csv"), "a,b,c\n1,2,3\n4,5\n");
  CsvOptions o;
  o.components = {Named("x", {"a"})};
  Status s = ReadCsvFile(dir.Join("r.csv"), o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "r.csv:3:")) << s.ToString();

  WriteFile(dir.Join("ok.csv"), "a,b,a\n1,2,3\n");
  auto code = [&](std::vector<CsvComponent> components) {
    o.components = std::move(components);
    return ReadCsvFile(dir.Join("ok.csv"), o).status().code();
  };
  EXPECT_EQ(code({Named("x", {"zz"})}), Code::kInvalidArgument);              // unknown name
  EXPECT_EQ(code({Named("x", {"a"})}), Code::kInvalidArgument);               // ambiguous name
  EXPECT_EQ(code({Indexed("x", {3})}), Code::kInvalidArgument);               // out of range
  EXPECT_EQ(code({Named("x", {}), Named("y", {})}), Code::kInvalidArgument);  // two "rest"
  EXPECT_EQ(code({Named("x", {"b"}), Named("x", {"b"})}), Code::kInvalidArgument);
  EXPECT_EQ(code({}), Code::kInvalidArgument);
  EXPECT_EQ(code({Named("x", {"b"})}), Code::kOk);
  // A column no component picks may hold text.
  WriteFile(dir.Join("text.csv"), "name,v\nshirt,1\nboot,2\n");
  o.components = {Named("v", {"v"}, DataType::kInt32)};
  StatusOr<Dataset> d = ReadCsvFile(dir.Join("text.csv"), o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(TensorsEqual(*d->Find("v"), Tensor::FromVector<int32_t>({1, 2})));
}

TEST(CsvReader, DelimiterQuotesCrlfGzipAndBool) {
  TempDir dir;
  const std::string text = "\"id\";\"on\";\"x;y\"\r\n\"1\";true;2.5\r\n2 ; 0 ; \"-1\"\r\n\r\n";
  WriteFile(dir.Join("q.csv.gz"), text, /*gzip=*/true);
  CsvOptions o;
  o.delimiter = ';';
  o.components = {Named("id", {"id"}, DataType::kInt32), Named("on", {"on"}, DataType::kBool),
                  Named("v", {"x;y"})};
  StatusOr<Dataset> d = LoadCsvDataset(dir.path(), "q.csv.gz", o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_TRUE(TensorsEqual(*d->Find("id"), Tensor::FromVector<int32_t>({1, 2})));
  EXPECT_TRUE(TensorsEqual(*d->Find("on"), Tensor::FromVector<bool>({true, false})));
  EXPECT_TRUE(TensorsEqual(*d->Find("v"), Tensor::FromVector<float>({2.5f, -1})));

  EXPECT_EQ(LoadCsvDataset(dir.path(), "../q.csv.gz", o).status().code(), Code::kPermissionDenied);
  WriteFile(dir.Join("open.csv"), "\"a,1\n");
  o.delimiter = ',';
  o.components = {Indexed("x", {0})};
  Status s = ReadCsvFile(dir.Join("open.csv"), o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_TRUE(Contains(s, "open.csv:1")) << s.ToString();
}

TEST(CsvReader, HeaderOnlyGivesNoExamples) {
  TempDir dir;
  WriteFile(dir.Join("h.csv"), "a,b\n");
  CsvOptions o;
  o.components = {Named("x", {})};
  StatusOr<Dataset> d = ReadCsvFile(dir.Join("h.csv"), o);
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->num_examples(), 0);
  EXPECT_EQ(d->Find("x")->shape(), TensorShape({0, 2}));
  WriteFile(dir.Join("e.csv"), "\n\n");
  EXPECT_EQ(ReadCsvFile(dir.Join("e.csv"), o).status().code(), Code::kInvalidArgument);
}

}  // namespace
}  // namespace flowstate
