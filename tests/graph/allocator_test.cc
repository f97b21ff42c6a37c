// The host allocator's huge-page advice (graph/allocator.h): blocks from
// HostHugePageMinBytes() on are 2 MiB-aligned and their mapping carries the
// kernel's "hg" flag (MADV_HUGEPAGE) in /proc/self/smaps; smaller blocks,
// and every block with the advice turned off, do not.
#include "graph/allocator.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>

namespace flowstate {
namespace {

// The VmFlags of the mapping that holds `p`, or "" when none is found.
std::string VmFlagsOf(const void* p) {
  std::ifstream smaps("/proc/self/smaps");
  const uintptr_t a = reinterpret_cast<uintptr_t>(p);
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    unsigned long lo = 0, hi = 0;
    if (std::sscanf(line.c_str(), "%lx-%lx ", &lo, &hi) == 2) {  // a mapping's first line
      inside = a >= lo && a < hi;
      continue;
    }
    if (inside && line.rfind("VmFlags:", 0) == 0) return line;
  }
  return "";
}

bool HasHugePageFlag(const std::string& vm_flags) {
  std::istringstream in(vm_flags);
  std::string flag;
  while (in >> flag) {
    if (flag == "hg") return true;
  }
  return false;
}

class HostHugePages : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::ifstream("/sys/kernel/mm/transparent_hugepage/enabled")) {
      GTEST_SKIP() << "this kernel has no transparent huge pages "
                      "(/sys/kernel/mm/transparent_hugepage/enabled is missing)";
    }
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind("THP_enabled:", 0) == 0 && line.find('0') != std::string::npos) {
        GTEST_SKIP() << "transparent huge pages are disabled for this process "
                        "(prctl PR_SET_THP_DISABLE: " << line << ")";
      }
    }
    saved_ = HostHugePageMinBytes();
  }
  void TearDown() override { SetHostHugePageMinBytes(saved_); }

  size_t saved_ = 0;
};

TEST_F(HostHugePages, BlocksFromTheThresholdOnAreAlignedAndAdvised) {
  EXPECT_EQ(kDefaultHugePageMinBytes, size_t{64} << 20);
  SetHostHugePageMinBytes(size_t{4} << 20);
  Allocator* a = HostAllocator();
  const size_t big = (size_t{8} << 20) + 100, small = size_t{3} << 20;
  void* p = a->Allocate(big, kTensorAlignment);
  void* q = a->Allocate(small, kTensorAlignment);
  ASSERT_NE(p, nullptr);
  ASSERT_NE(q, nullptr);
  std::memset(p, 1, big);  // usable to the last byte
  EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % (size_t{2} << 20), 0u);
  const std::string flags = VmFlagsOf(p);
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the block";
  EXPECT_TRUE(HasHugePageFlag(flags)) << flags;
  EXPECT_FALSE(HasHugePageFlag(VmFlagsOf(q))) << VmFlagsOf(q);
  a->Deallocate(p, big);
  a->Deallocate(q, small);
}

TEST_F(HostHugePages, ZeroTurnsTheAdviceOff) {
  SetHostHugePageMinBytes(0);
  Allocator* a = HostAllocator();
  const size_t big = size_t{80} << 20;
  void* p = a->Allocate(big, kTensorAlignment);
  ASSERT_NE(p, nullptr);
  const std::string flags = VmFlagsOf(p);
  ASSERT_FALSE(flags.empty()) << "no mapping in /proc/self/smaps holds the block";
  EXPECT_FALSE(HasHugePageFlag(flags)) << flags;
  a->Deallocate(p, big);
}

}  // namespace
}  // namespace flowstate
