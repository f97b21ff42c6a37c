// Device factories and the pool built from them, with only the CPU type
// registered (the ACCEL type's tests are in accel/).
#include "devices/device_factory.h"

#include <gtest/gtest.h>

#include "devices/device_pool.h"

namespace flowstate {
namespace {

TEST(DeviceFactory, CpuRegistersItself) {
  std::vector<std::string> types = RegisteredDeviceTypes();
  ASSERT_FALSE(types.empty());
  EXPECT_EQ(types[0], "CPU");
  EXPECT_NE(FindDeviceFactory("CPU"), nullptr);
  EXPECT_EQ(FindDeviceFactory("NOPE"), nullptr);
}

TEST(DeviceFactory, PoolCountsComeFromOptions) {
  DevicePoolOptions o;
  o.intra_op_threads = 1;
  o.num_cpu_devices = 2;
  auto pool = DevicePool::Create(o).value();
  ASSERT_EQ(pool->devices().size(), 2u);
  EXPECT_EQ(pool->devices()[1]->name(), "/job:localhost/replica:0/task:0/device:CPU:1");
  EXPECT_EQ(pool->device_types(), std::vector<std::string>{"CPU"});

  // A per-type count for CPU overrides num_cpu_devices; job and task name
  // the devices.
  o.device_counts["CPU"] = 3;
  o.job = "worker";
  o.task = 2;
  pool = DevicePool::Create(o).value();
  ASSERT_EQ(pool->devices().size(), 3u);
  EXPECT_EQ(pool->devices()[2]->name(), "/job:worker/replica:0/task:2/device:CPU:2");
  EXPECT_EQ(pool->default_device(), pool->devices()[0]);
}

TEST(DeviceFactory, BadOptionsAreRefused) {
  DevicePoolOptions o;
  o.device_counts["GPU"] = 1;  // not registered in this binary
  Status s = DevicePool::Create(o).status();
  EXPECT_EQ(s.code(), Code::kInvalidArgument);
  EXPECT_NE(s.message().find("'GPU' is not registered"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("CPU"), std::string::npos) << s.ToString();

  DevicePoolOptions none;
  none.num_cpu_devices = 0;
  EXPECT_EQ(DevicePool::Create(none).status().code(), Code::kInvalidArgument);
  DevicePoolOptions zero;
  zero.device_counts["CPU"] = 0;
  EXPECT_EQ(DevicePool::Create(zero).status().code(), Code::kInvalidArgument);
  DevicePoolOptions threads;
  threads.intra_op_threads = -1;
  EXPECT_EQ(DevicePool::Create(threads).status().code(), Code::kInvalidArgument);
}

TEST(DeviceFactory, RegistrationChecksTheTypeName) {
  EXPECT_EQ(RegisterDeviceFactory("CPU", nullptr).code(), Code::kAlreadyExists);
  EXPECT_EQ(RegisterDeviceFactory("gpu", nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(RegisterDeviceFactory("", nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(RegisterDeviceFactory("A-B", nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(RegisterDeviceFactory("NULLDEV", nullptr).code(), Code::kInvalidArgument);
  EXPECT_EQ(FindDeviceFactory("NULLDEV"), nullptr);
}

}  // namespace
}  // namespace flowstate
