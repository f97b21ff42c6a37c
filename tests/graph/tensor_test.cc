#include "graph/tensor.h"

#include <gtest/gtest.h>

#include <cmath>
#include <limits>

#include "graph/attr_value.h"
#include "graph/op_def.h"
#include "graph/strided_slice.h"

namespace flowstate {
namespace {

TEST(DataType, NamesAndSizes) {
  for (DataType t : AllDataTypes()) {
    StatusOr<DataType> back = DataTypeFromString(DataTypeName(t));
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, t);
    EXPECT_GT(DataTypeSize(t), 0u);
  }
  EXPECT_EQ(DataTypeSize(DataType::kFloat16), 2u);
  EXPECT_FALSE(DataTypeFromString("complex64").ok());
  EXPECT_EQ(*DataTypeFromString("float"), DataType::kFloat32);
}

TEST(DataType, HalfAndBFloat16RoundTrip) {
  for (float f : {0.0f, 1.0f, -2.5f, 65504.0f, 6.1035156e-05f, 5.9604645e-08f}) {
    EXPECT_EQ(float(Half(f)), f) << f;
  }
  EXPECT_EQ(float(Half(1e6f)), std::numeric_limits<float>::infinity());
  EXPECT_EQ(float(BFloat16(1.0f)), 1.0f);
  EXPECT_EQ(float(BFloat16(3.140625f)), 3.140625f);
  EXPECT_TRUE(std::isnan(float(BFloat16(std::nanf("")))));
}

TEST(TensorShape, Basics) {
  TensorShape s({2, 3, 4});
  EXPECT_EQ(s.rank(), 3);
  EXPECT_EQ(s.num_elements(), 24);
  s.RemoveDim(1);
  EXPECT_EQ(s, TensorShape({2, 4}));
  s.InsertDim(0, 5);
  EXPECT_EQ(s.ToString(), "[5, 2, 4]");
  EXPECT_EQ(TensorShape().num_elements(), 1);
  EXPECT_EQ(TensorShape({3, 0}).num_elements(), 0);
  std::vector<int64_t> neg{2, -1};
  EXPECT_FALSE(TensorShape::Make(neg).ok());
  std::vector<int64_t> deep(9, 1);
  EXPECT_FALSE(TensorShape::Make(deep).ok());
}

TEST(Tensor, AllocateRefusesAByteSizeThatOverflows) {
  // 2^61 float64 elements are 2^64 bytes: the size wrapped to 0 and Allocate
  // returned a tensor of 2^61 elements without a buffer.
  StatusOr<Tensor> t =
      Tensor::Allocate(HostAllocator(), DataType::kFloat64, TensorShape({int64_t{1} << 61}));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kResourceExhausted);
  EXPECT_EQ(t.status().message(), "a float64[2305843009213693952] tensor takes more than 2^64 bytes");
  t = Tensor::Allocate(HostAllocator(), DataType::kUInt8, TensorShape({int64_t{1} << 61, 0}));
  EXPECT_TRUE(t.ok());
}

TEST(PartialShape, Compatibility) {
  PartialShape p({-1, 784});
  EXPECT_TRUE(p.IsCompatibleWith(TensorShape({32, 784})));
  EXPECT_FALSE(p.IsCompatibleWith(TensorShape({32, 783})));
  EXPECT_FALSE(p.IsCompatibleWith(TensorShape({784})));
  EXPECT_TRUE(PartialShape().IsCompatibleWith(TensorShape({1, 2, 3})));
  EXPECT_EQ(p.ToString(), "[?, 784]");
}

TEST(Tensor, AlignedRefCountedAndZeroCopy) {
  Tensor t(DataType::kFloat32, TensorShape({4, 3}));
  EXPECT_EQ(reinterpret_cast<uintptr_t>(t.raw_data()) % kTensorAlignment, 0u);
  for (int i = 0; i < 12; ++i) t.data<float>()[i] = float(i);
  EXPECT_TRUE(t.RefCountIsOne());
  Tensor copy = t;
  EXPECT_FALSE(t.RefCountIsOne());
  EXPECT_TRUE(copy.SharesBufferWith(t));
  StatusOr<Tensor> r = t.Reshaped(TensorShape({2, 6}));
  ASSERT_TRUE(r.ok());
  EXPECT_EQ(r->raw_data(), t.raw_data());
  EXPECT_FALSE(t.Reshaped(TensorShape({5})).ok());
  Tensor rows = t.Slice(1, 3);
  EXPECT_EQ(rows.shape(), TensorShape({2, 3}));
  EXPECT_EQ(rows.data<float>()[0], 3.0f);
  EXPECT_TRUE(rows.SharesBufferWith(t));
  Tensor deep = t.DeepCopy();
  EXPECT_FALSE(deep.SharesBufferWith(t));
  EXPECT_TRUE(TensorsEqual(deep, t));
  Tensor moved = std::move(copy);
  EXPECT_FALSE(copy.IsInitialized());
  EXPECT_TRUE(moved.SharesBufferWith(t));
}

TEST(Tensor, SliceKeepsParentAlive) {
  Tensor slice;
  {
    Tensor t = Tensor::FromVector<int32_t>({1, 2, 3, 4});
    slice = t.Slice(2, 4);
  }
  EXPECT_EQ(slice.data<int32_t>()[0], 3);
  EXPECT_EQ(slice.data<int32_t>()[1], 4);
  EXPECT_TRUE(slice.RefCountIsOne());
}

TEST(Tensor, AllocationFailureIsResourceExhausted) {
  struct Refuse : Allocator {
    std::string_view Name() const override { return "refuse"; }
    void* Allocate(size_t, size_t) override { return nullptr; }
    void Deallocate(void*, size_t) override {}
  } refuse;
  StatusOr<Tensor> t = Tensor::Allocate(&refuse, DataType::kFloat32, TensorShape({1000}));
  ASSERT_FALSE(t.ok());
  EXPECT_EQ(t.status().code(), Code::kResourceExhausted);
}

TEST(TensorId, Parse) {
  EXPECT_EQ(ParseTensorId("x")->index, 0);
  EXPECT_EQ(ParseTensorId("layer/x:2")->index, 2);
  EXPECT_EQ(ParseTensorId("layer/x:2")->node, "layer/x");
  EXPECT_TRUE(ParseTensorId("^x")->is_control());
  EXPECT_EQ(ParseTensorId("x:1")->ToString(), "x:1");
  EXPECT_FALSE(ParseTensorId("").ok());
}

TEST(OpRegistry, SpecsParseAndEveryOpHasDocs) {
  OpRegistry* r = OpRegistry::Global();
  const OpDef* mm = r->Find("MatMul");
  ASSERT_NE(mm, nullptr);
  ASSERT_EQ(mm->inputs.size(), 2u);
  EXPECT_EQ(mm->inputs[0].type_attr, "T");
  const AttrDef* ta = mm->FindAttr("transpose_a");
  ASSERT_NE(ta, nullptr);
  EXPECT_EQ(ta->kind, AttrKind::kBool);
  EXPECT_FALSE(ta->default_value->b());
  const OpDef* addn = r->Find("AddN");
  EXPECT_EQ(addn->inputs[0].number_attr, "N");
  EXPECT_EQ(*addn->FindAttr("N")->minimum, 1);
  EXPECT_TRUE(r->Find("Variable")->is_stateful);
  EXPECT_TRUE(r->Find("Assign")->inputs[0].is_ref);
  EXPECT_TRUE(r->Find("_Send")->is_internal());
  for (const OpDef* op : r->ListOps()) EXPECT_FALSE(op->doc.empty()) << op->name;

  OpRegistry local;
  EXPECT_FALSE(local.Register(OpDefBuilder("Bad").Input("x: T")).ok());  // T undeclared
  EXPECT_FALSE(local.Register(OpDefBuilder("Bad2").Attr("n: int = x")).ok());
  EXPECT_TRUE(local.Register(OpDefBuilder("Good").Attr("n: int >= 2 = 3")).ok());
  EXPECT_EQ(local.Register(OpDefBuilder("Good")).code(), Code::kAlreadyExists);
  EXPECT_EQ(*local.Find("Good")->FindAttr("n")->minimum, 2);
}

TEST(StridedSlice, Plans) {
  StridedSliceMasks m;
  auto p = PlanStridedSlice({10}, {1}, {-1}, {2}, m);
  ASSERT_TRUE(p.ok());
  EXPECT_EQ(p->output_shape, std::vector<int64_t>{4});  // 1,3,5,7
  auto rev = PlanStridedSlice({5}, {0}, {0}, {-1}, StridedSliceMasks{1, 1, 0, 0, 0});
  ASSERT_TRUE(rev.ok());
  EXPECT_EQ(rev->output_shape, std::vector<int64_t>{5});
  EXPECT_EQ(rev->dims[0].begin, 4);
  auto shrink = PlanStridedSlice({3, 4}, {1}, {2}, {1}, StridedSliceMasks{0, 0, 0, 0, 1});
  ASSERT_TRUE(shrink.ok());
  EXPECT_EQ(shrink->output_shape, std::vector<int64_t>{4});
  EXPECT_FALSE(PlanStridedSlice({3}, {0}, {1}, {0}, m).ok());
  auto ell = PlanStridedSlice({2, 3, 4}, {0, 1}, {0, 3}, {1, 1}, StridedSliceMasks{0, 0, 1, 0, 0});
  ASSERT_TRUE(ell.ok());
  EXPECT_EQ(ell->output_shape, (std::vector<int64_t>{2, 3, 2}));
}

}  // namespace
}  // namespace flowstate
