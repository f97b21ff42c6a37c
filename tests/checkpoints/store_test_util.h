// Helpers of the store's tests (store_test.cc, store_write_failure_test.cc):
// opening a store, snapshots of random tensors and their comparison, and
// the two write paths (a WriteBatch, an ingested table file). Header-only,
// for tests.
#ifndef FLOWSTATE_TESTS_CHECKPOINTS_STORE_TEST_UTIL_H_
#define FLOWSTATE_TESTS_CHECKPOINTS_STORE_TEST_UTIL_H_

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>
#include <string>

#include "checkpoints/store.h"

namespace flowstate::checkpoints::store_test {

// ingest_min_bytes: every checkpoint of these tests by WriteBatch, then by
// ingestion.
inline constexpr int64_t kBothPaths[] = {int64_t(32) << 20, 0};

inline std::unique_ptr<Store> MustOpen(const std::string& dir, const StoreOptions& o = {}) {
  auto s = Store::Open(dir, o);
  EXPECT_TRUE(s.ok()) << s.status().ToString();
  return s.ok() ? std::move(s).value() : nullptr;
}

inline Tensor RandomTensor(DataType dt, const TensorShape& shape, uint32_t seed) {
  Tensor t(dt, shape);
  std::mt19937 rng(seed);
  auto* p = static_cast<uint8_t*>(t.raw_data());
  for (size_t i = 0; i < t.TotalBytes(); ++i) p[i] = uint8_t(rng());
  if (dt == DataType::kBool) {
    for (size_t i = 0; i < t.TotalBytes(); ++i) p[i] &= 1;
  }
  return t;
}

inline Snapshot MakeSnapshot(int64_t step, uint32_t seed) {
  Snapshot s;
  s.step = step;
  s.metadata = "pipeline position " + std::to_string(step) + std::string("\0rng", 4);
  s.tensors.push_back({"dense/kernel", RandomTensor(DataType::kFloat32, TensorShape({3, 4}), seed)});
  s.tensors.push_back({"dense/bias", RandomTensor(DataType::kFloat32, TensorShape({4}), seed + 1)});
  s.tensors.push_back({"global_step", Tensor::Scalar<int64_t>(step)});
  return s;
}

inline void ExpectSameSnapshot(const Snapshot& want, const Snapshot& got) {
  EXPECT_EQ(got.step, want.step);
  EXPECT_EQ(got.metadata, want.metadata);
  ASSERT_EQ(got.tensors.size(), want.tensors.size());
  // The store returns tensors sorted by name.
  std::map<std::string, Tensor> w;
  for (const auto& t : want.tensors) w[t.name] = t.value;
  for (const auto& t : got.tensors) {
    ASSERT_TRUE(w.count(t.name)) << t.name;
    EXPECT_TRUE(TensorsEqual(w[t.name], t.value)) << t.name << ": " << t.value.DebugString();
  }
}

}  // namespace flowstate::checkpoints::store_test

#endif  // FLOWSTATE_TESTS_CHECKPOINTS_STORE_TEST_UTIL_H_
