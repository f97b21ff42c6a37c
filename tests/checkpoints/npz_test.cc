// The .npz export (checkpoints/npz.h): .npy headers, the zip structure
// parsed by hand (stored members, CRC-32, sizes, the central directory), a
// member over 64 KiB, every dtype read back by /usr/bin/python3's
// numpy.load, names that cannot be member paths, and import refusing an
// .npz with a message that says what it is.
#include "checkpoints/npz.h"

#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>

#include "checkpoints/store.h"
#include "state/data_path.h"
#include "state/npy.h"
#include "tests/util/temp_dir.h"

namespace flowstate::checkpoints {
namespace {

using test_util::TempDir;

std::string ReadFile(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

uint32_t U32(const std::string& s, size_t at) {
  uint32_t v = 0;
  for (int i = 3; i >= 0; --i) v = v << 8 | uint8_t(s[at + i]);
  return v;
}
uint16_t U16(const std::string& s, size_t at) { return uint16_t(uint8_t(s[at]) | uint8_t(s[at + 1]) << 8); }

// A member of a zip archive as its central directory and local header say.
struct ZipMember {
  std::string name;
  uint16_t method = 0xffff;
  uint32_t crc = 0;
  std::string data;
};

// Parses an archive of stored members without zip64, checking what the
// format requires along the way; fails the test on any inconsistency.
std::vector<ZipMember> ParseZip(const std::string& z) {
  std::vector<ZipMember> out;
  EXPECT_GE(z.size(), 22u);
  if (z.size() < 22) return out;
  const size_t eocd = z.size() - 22;  // no archive comment
  EXPECT_EQ(U32(z, eocd), 0x06054b50u) << "end of central directory record";
  const uint16_t count = U16(z, eocd + 10);
  const uint32_t cd_size = U32(z, eocd + 12), cd_at = U32(z, eocd + 16);
  EXPECT_EQ(size_t(cd_at) + cd_size, eocd);
  size_t p = cd_at;
  for (uint16_t i = 0; i < count; ++i) {
    EXPECT_EQ(U32(z, p), 0x02014b50u) << "central directory entry " << i;
    ZipMember m;
    m.method = U16(z, p + 10);
    m.crc = U32(z, p + 16);
    const uint32_t csize = U32(z, p + 20), usize = U32(z, p + 24);
    const uint16_t nlen = U16(z, p + 28), xlen = U16(z, p + 30), clen = U16(z, p + 32);
    const uint32_t local = U32(z, p + 42);
    m.name = z.substr(p + 46, nlen);
    EXPECT_EQ(csize, usize) << m.name << " is stored, not compressed";
    // The local header names the same member; its data follows it.
    EXPECT_EQ(U32(z, local), 0x04034b50u) << m.name;
    EXPECT_EQ(z.substr(local + 30, U16(z, local + 26)), m.name);
    const size_t data_at = local + 30 + U16(z, local + 26) + U16(z, local + 28);
    m.data = z.substr(data_at, usize);
    EXPECT_EQ(uint32_t(crc32(0, reinterpret_cast<const Bytef*>(m.data.data()), uInt(m.data.size()))),
              m.crc)
        << m.name << "'s CRC-32";
    out.push_back(std::move(m));
    p += 46 + nlen + xlen + clen;
  }
  return out;
}

TEST(NpyHeader, PadsToSixtyFourBytesAndWritesTheShape) {
  const std::vector<int64_t> scalar, vec = {5}, mat = {2, 3};
  for (const auto& [shape, text] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {scalar, "'shape': (), }"}, {vec, "'shape': (5,), }"}, {mat, "'shape': (2, 3), }"}}) {
    std::string h = NpyHeader("<f4", shape);
    EXPECT_EQ(h.size() % 64, 0u) << text;
    EXPECT_EQ(h.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
    EXPECT_EQ(size_t(U16(h, 8)), h.size() - 10);
    EXPECT_EQ(h.back(), '\n');
    EXPECT_NE(h.find("{'descr': '<f4', 'fortran_order': False, " + text), std::string::npos) << h;
  }
}

TEST(NpyHeader, DescriptorsForEveryDtype) {
  EXPECT_EQ(NpyDescr(DataType::kFloat32), "<f4");
  EXPECT_EQ(NpyDescr(DataType::kFloat64), "<f8");
  EXPECT_EQ(NpyDescr(DataType::kInt32), "<i4");
  EXPECT_EQ(NpyDescr(DataType::kInt64), "<i8");
  EXPECT_EQ(NpyDescr(DataType::kUInt8), "|u1");
  EXPECT_EQ(NpyDescr(DataType::kBool), "|b1");
  EXPECT_EQ(NpyDescr(DataType::kFloat16), "<f2");
  EXPECT_EQ(NpyDescr(DataType::kBFloat16), "<f4");
}

TEST(ExportFormat, ParsesTheTwoNamesAndNamesTheFieldOtherwise) {
  EXPECT_EQ(*ParseExportFormat("fsck"), ExportFormat::kFsck);
  EXPECT_EQ(*ParseExportFormat("npz"), ExportFormat::kNpz);
  StatusOr<ExportFormat> bad = ParseExportFormat("zip");
  ASSERT_FALSE(bad.ok());
  EXPECT_EQ(bad.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(bad.status().message().rfind("format: ", 0), 0u) << bad.status().message();
  EXPECT_NE(bad.status().message().find("'zip'"), std::string::npos);
}

TEST(Npz, StoredMembersWithTheirHeadersDataAndChecksums) {
  TempDir dir("npz");
  Snapshot s;
  s.step = 7;
  s.metadata = "not exported";
  std::vector<float> big(40000);  // 160 KB: several libzip read buffers
  for (size_t i = 0; i < big.size(); ++i) big[i] = float(i) * 0.25f;
  s.tensors.push_back({"dense1/w", Tensor::FromVector<float>(big, TensorShape({200, 200}))});
  s.tensors.push_back({"global_step", Tensor::Scalar<int64_t>(7)});
  const std::string path = dir.Join("model.npz");
  ASSERT_TRUE(ExportSnapshotNpz(s, path).ok());
  std::vector<ZipMember> members = ParseZip(ReadFile(path));
  ASSERT_EQ(members.size(), 2u);
  EXPECT_EQ(members[0].name, "dense1/w.npy");
  EXPECT_EQ(members[1].name, "global_step.npy");
  for (const ZipMember& m : members) EXPECT_EQ(m.method, 0) << m.name << ": stored";
  const std::string h0 = NpyHeader("<f4", std::vector<int64_t>{200, 200});
  ASSERT_EQ(members[0].data.size(), h0.size() + big.size() * 4);
  EXPECT_EQ(members[0].data.substr(0, h0.size()), h0);
  EXPECT_EQ(std::memcmp(members[0].data.data() + h0.size(), big.data(), big.size() * 4), 0);
  const std::string h1 = NpyHeader("<i8", std::vector<int64_t>{});
  ASSERT_EQ(members[1].data.size(), h1.size() + 8);
  int64_t step = 0;
  std::memcpy(&step, members[1].data.data() + h1.size(), 8);
  EXPECT_EQ(step, 7);
  EXPECT_FALSE(std::filesystem::exists(path + ".tmp"));
}

TEST(Npz, EmptySnapshotIsAnEmptyArchive) {
  TempDir dir("npz");
  const std::string path = dir.Join("empty.npz");
  ASSERT_TRUE(ExportSnapshotNpz(Snapshot{}, path).ok());
  EXPECT_TRUE(ParseZip(ReadFile(path)).empty());
  EXPECT_EQ(ReadFile(path).size(), 22u);
}

TEST(Npz, RefusesNamesThatCannotBeMemberPaths) {
  TempDir dir("npz");
  for (const std::string& name :
       std::vector<std::string>{"/abs", "a//b", "../up", "a/./b", "trail/", std::string("c\x01", 2)}) {
    Snapshot s;
    s.tensors.push_back({"ok", Tensor::Scalar<float>(1)});
    s.tensors.push_back({name, Tensor::Scalar<float>(2)});
    const std::string path = dir.Join("bad.npz");
    Status st = ExportSnapshotNpz(s, path);
    EXPECT_EQ(st.code(), Code::kInvalidArgument) << name;
    EXPECT_NE(st.message().find("tensor '" + name + "'"), std::string::npos) << st.message();
    EXPECT_FALSE(std::filesystem::exists(path)) << name << ": nothing written";
  }
}

TEST(Npz, ImportRefusesAnNpzSayingWhatItIs) {
  TempDir dir("npz");
  Snapshot s;
  s.tensors.push_back({"w", Tensor::Scalar<float>(1)});
  const std::string path = dir.Join("model.npz");
  ASSERT_TRUE(ExportSnapshotAs(s, path, ExportFormat::kNpz).ok());
  StatusOr<Snapshot> back = ImportSnapshot(path, "the uploaded checkpoint");
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), Code::kInvalidArgument);
  EXPECT_NE(back.status().message().find("the uploaded checkpoint"), std::string::npos);
  EXPECT_NE(back.status().message().find(".npz"), std::string::npos) << back.status().message();
}

// Every dtype through numpy.load: dtype.str, shape and values as numpy
// prints them, one line per array in the archive's order.
TEST(Npz, NumpyLoadReadsEveryDtype) {
  TempDir dir("npz");
  Snapshot s;
  s.tensors.push_back({"f32", Tensor::FromVector<float>({0.5f, -1.25f, 3.0f, 4.0f, 5.5f, 6.0f},
                                                       TensorShape({2, 3}))});
  s.tensors.push_back({"f64", Tensor::FromVector<double>({0.125, -2.0})});
  s.tensors.push_back({"i32", Tensor::FromVector<int32_t>({-7, 2147483647})});
  s.tensors.push_back({"i64", Tensor::FromVector<int64_t>({int64_t(1) << 40, -3})});
  s.tensors.push_back({"u8", Tensor::FromVector<uint8_t>({0, 255, 17}, TensorShape({3, 1}))});
  s.tensors.push_back({"b", Tensor::FromVector<bool>({true, false})});
  s.tensors.push_back({"f16", Tensor::FromVector<Half>({Half(1.5f), Half(-0.25f)})});
  s.tensors.push_back({"scope/bf16", Tensor::FromVector<BFloat16>({BFloat16(1.5f), BFloat16(-384.0f)})});
  s.tensors.push_back({"scalar", Tensor::Scalar<int64_t>(42)});
  const std::string path = dir.Join("all.npz");
  std::vector<std::string> converted;
  ASSERT_TRUE(ExportSnapshotNpz(s, path, &converted).ok());
  EXPECT_EQ(converted, std::vector<std::string>{"scope/bf16"});

  const std::string script = dir.Join("read.py");
  std::ofstream(script) << "import sys, numpy\n"
                           "with numpy.load(sys.argv[1]) as z:\n"
                           "    for k in z.files:\n"
                           "        a = z[k]\n"
                           "        print(k, a.dtype.str, a.shape, a.flags['C_CONTIGUOUS'], a.ravel().tolist())\n";
  const std::string cmd = "/usr/bin/python3 " + script + " " + path + " 2>&1";
  FILE* p = ::popen(cmd.c_str(), "r");
  ASSERT_NE(p, nullptr);
  std::string out;
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
  ASSERT_EQ(::pclose(p), 0) << "python3 with numpy (Debian's python3-numpy) failed:\n" << out;
  EXPECT_EQ(out,
            "f32 <f4 (2, 3) True [0.5, -1.25, 3.0, 4.0, 5.5, 6.0]\n"
            "f64 <f8 (2,) True [0.125, -2.0]\n"
            "i32 <i4 (2,) True [-7, 2147483647]\n"
            "i64 <i8 (2,) True [1099511627776, -3]\n"
            "u8 |u1 (3, 1) True [0, 255, 17]\n"
            "b |b1 (2,) True [True, False]\n"
            "f16 <f2 (2,) True [1.5, -0.25]\n"
            "scope/bf16 <f4 (2,) True [1.5, -384.0]\n"
            "scalar <i8 () True [42]\n");
}

// What the export writes, a job's "npy" input reads back (state/npy.h):
// members by key, every dtype but the widened bfloat16, the listing of an
// archive, and a missing key named with the members there are.
TEST(Npz, AJobsNpyInputReadsTheExportBack) {
  TempDir dir("npz");
  Snapshot s;
  s.tensors.push_back({"x", Tensor::FromVector<float>({0.5f, -1.25f, 3.0f, 4.0f, 5.5f, 6.0f},
                                                     TensorShape({3, 2}))});
  s.tensors.push_back({"y", Tensor::FromVector<int64_t>({1, 0, 2})});
  s.tensors.push_back({"u", Tensor::FromVector<uint8_t>({0, 255, 17})});
  ASSERT_TRUE(ExportSnapshotNpz(s, dir.Join("d.npz")).ok());
  StatusOr<Dataset> d = LoadNpyDataset(dir.path(), {{"x", "d.npz"}, {"y", "d.npz"}, {"u", "d.npz"}});
  ASSERT_TRUE(d.ok()) << d.status().ToString();
  EXPECT_EQ(d->DebugString(), "Dataset(3 examples; u: uint8[], x: float32[2], y: int64[])");
  EXPECT_EQ(d->Find("x")->flat<float>()[5], 6.0f);
  EXPECT_EQ(d->Find("u")->flat<uint8_t>()[1], 255);

  StatusOr<DataFile> f = OpenDataFile(dir.path(), "d.npz");
  ASSERT_TRUE(f.ok());
  StatusOr<std::vector<NpyArrayInfo>> list = ListNpyArrays(std::move(f).value());
  ASSERT_TRUE(list.ok()) << list.status().ToString();
  ASSERT_EQ(list->size(), 3u);
  EXPECT_EQ((*list)[0].name, "x");
  EXPECT_EQ((*list)[0].dims, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ((*list)[2].dtype, DataType::kUInt8);

  StatusOr<Dataset> missing = LoadNpyDataset(dir.path(), {{"label", "d.npz"}});
  ASSERT_FALSE(missing.ok());
  EXPECT_EQ(missing.status().code(), Code::kNotFound);
  EXPECT_NE(missing.status().message().find("no array 'label'"), std::string::npos) << missing.status().ToString();
  EXPECT_NE(missing.status().message().find("'x.npy', 'y.npy', 'u.npy'"), std::string::npos)
      << missing.status().ToString();
}

// A damaged archive is a clear error, not a crash: the central directory
// cut off, and a member's bytes changed under its CRC.
TEST(Npz, ADamagedArchiveIsNamed) {
  TempDir dir("npz");
  Snapshot s;
  std::vector<float> v(1000, 1.5f);
  s.tensors.push_back({"x", Tensor::FromVector<float>(v)});
  ASSERT_TRUE(ExportSnapshotNpz(s, dir.Join("d.npz")).ok());
  const std::string bytes = ReadFile(dir.Join("d.npz"));
  std::ofstream(dir.Join("cut.npz"), std::ios::binary) << bytes.substr(0, bytes.size() - 30);
  std::string flipped = bytes;
  flipped[200] ^= 1;  // inside x.npy's data
  std::ofstream(dir.Join("flip.npz"), std::ios::binary) << flipped;
  StatusOr<Dataset> cut = LoadNpyDataset(dir.path(), {{"x", "cut.npz"}});
  ASSERT_FALSE(cut.ok());
  EXPECT_NE(cut.status().message().find("'cut.npz'"), std::string::npos) << cut.status().ToString();
  StatusOr<DataFile> f = OpenDataFile(dir.path(), "flip.npz");
  ASSERT_TRUE(f.ok());
  StatusOr<std::vector<NpyArrayInfo>> list = ListNpyArrays(std::move(f).value());
  ASSERT_FALSE(list.ok());
  EXPECT_NE(list.status().message().find("'flip.npz' member 'x.npy'"), std::string::npos) << list.status().ToString();
}

}  // namespace
}  // namespace flowstate::checkpoints
