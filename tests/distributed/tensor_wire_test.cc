// The hand-encoded RecvTensor response (distributed/tensor_wire_internal.h): the
// same bytes protobuf reads, decoded from any split into slices, and
// malformed input refused.
#include <grpcpp/grpcpp.h>

#include "distributed/tensor_wire_internal.h"

#include <gtest/gtest.h>

#include <grpcpp/support/slice.h>

#include "api/worker.pb.h"
#include "distributed/wire_internal.h"

namespace flowstate::distributed_internal {
namespace {

std::string Flatten(const ::grpc::ByteBuffer& b) {
  std::vector<::grpc::Slice> slices;
  EXPECT_TRUE(b.Dump(&slices).ok());
  std::string out;
  for (const auto& s : slices) out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  return out;
}

// The same bytes, cut into pieces of `piece` bytes.
::grpc::ByteBuffer Split(const std::string& bytes, size_t piece) {
  std::vector<::grpc::Slice> slices;
  for (size_t i = 0; i < bytes.size(); i += piece) slices.emplace_back(bytes.substr(i, piece));
  return ::grpc::ByteBuffer(slices.data(), slices.size());
}

TEST(TensorWire, RoundTripsAndProtobufReadsIt) {
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4, 5, 6}, TensorShape({2, 3}));
  ::grpc::ByteBuffer b = EncodeRecvTensorResponse(Status(), t);
  const std::string bytes = Flatten(b);
  wpb::RecvTensorResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_EQ(parsed.tensor().dtype(), "float32");
  ASSERT_EQ(parsed.tensor().shape_size(), 2);
  EXPECT_EQ(parsed.tensor().shape(1), 3);
  EXPECT_EQ(parsed.tensor().content().size(), 24u);
  for (size_t piece : {size_t(1), size_t(3), size_t(7), bytes.size()}) {
    StatusOr<Tensor> back = DecodeRecvTensorResponse(Split(bytes, piece), "k");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(TensorsEqual(*back, t)) << "piece " << piece;
  }
  // And what protobuf writes decodes too.
  StatusOr<Tensor> from_pb = DecodeRecvTensorResponse(Split(parsed.SerializeAsString(), 5), "k");
  ASSERT_TRUE(from_pb.ok());
  EXPECT_TRUE(TensorsEqual(*from_pb, t));
}

TEST(TensorWire, ScalarsEmptyTensorsAndBools) {
  for (const Tensor& t : {Tensor::Scalar(7.5f), Tensor::FromVector<float>({}),
                          Tensor::FromVector<bool>({true, false, true})}) {
    StatusOr<Tensor> back = DecodeRecvTensorResponse(EncodeRecvTensorResponse(Status(), t), "k");
    ASSERT_TRUE(back.ok()) << back.status().ToString();
    EXPECT_TRUE(TensorsEqual(*back, t));
  }
}

TEST(TensorWire, CarriesTheStatus) {
  Status s = InvalidArgument("/job:worker/task:2: boom", "bad");
  StatusOr<Tensor> back = DecodeRecvTensorResponse(EncodeRecvTensorResponse(s, Tensor()), "k");
  ASSERT_FALSE(back.ok());
  EXPECT_EQ(back.status().code(), Code::kInvalidArgument);
  EXPECT_EQ(back.status().node(), "bad");
  EXPECT_EQ(back.status().message(), "/job:worker/task:2: boom");
}

TEST(TensorWire, RefusesMalformedResponses) {
  const std::string good = Flatten(EncodeRecvTensorResponse(Status(), Tensor::FromVector<float>({1, 2})));
  // Truncated anywhere.
  for (size_t n = 0; n < good.size(); ++n) {
    StatusOr<Tensor> t = DecodeRecvTensorResponse(Split(good.substr(0, n), 4), "key");
    EXPECT_FALSE(t.ok()) << n;
    if (!t.ok()) {
      EXPECT_EQ(t.status().code(), Code::kInvalidArgument) << n;
    }
  }
  // Content of the wrong size for the shape.
  wpb::RecvTensorResponse r;
  r.mutable_tensor()->set_dtype("float32");
  r.mutable_tensor()->add_shape(3);
  r.mutable_tensor()->set_content(std::string(8, '\0'));
  StatusOr<Tensor> t = DecodeRecvTensorResponse(Split(r.SerializeAsString(), 100), "key");
  ASSERT_FALSE(t.ok());
  EXPECT_NE(t.status().message().find("key"), std::string::npos);
  // A bool that is not 0 or 1, an unknown dtype, a negative dimension.
  r.mutable_tensor()->set_dtype("bool");
  r.mutable_tensor()->set_content(std::string("\x01\x00\x02", 3));
  EXPECT_FALSE(DecodeRecvTensorResponse(Split(r.SerializeAsString(), 100), "k").ok());
  r.mutable_tensor()->set_dtype("complex512");
  EXPECT_FALSE(DecodeRecvTensorResponse(Split(r.SerializeAsString(), 100), "k").ok());
  r.mutable_tensor()->set_dtype("uint8");
  r.mutable_tensor()->set_shape(0, -3);
  EXPECT_FALSE(DecodeRecvTensorResponse(Split(r.SerializeAsString(), 100), "k").ok());
}

TEST(TensorWire, ChunksPutTheTensorBackTogether) {
  std::vector<float> values(1000);
  for (size_t i = 0; i < values.size(); ++i) values[i] = float(i) * 0.5f;
  Tensor t = Tensor::FromVector<float>(values, TensorShape({10, 100}));
  const size_t total = t.TotalBytes();
  ChunkReceiver r("key", nullptr);
  for (size_t off = 0; off < total; off += 1000) {
    // Through protobuf's bytes too: each chunk is a RecvTensorChunk.
    ::grpc::ByteBuffer chunk = EncodeTensorChunk(t, off, std::min<size_t>(1000, total - off));
    wpb::RecvTensorChunk parsed;
    ASSERT_TRUE(parsed.ParseFromString(Flatten(chunk)));
    EXPECT_EQ(parsed.offset(), int64_t(off));
    if (off == 0) {
      EXPECT_EQ(parsed.total_bytes(), int64_t(total));
    }
    Status st = r.Add(Split(Flatten(chunk), 7));
    ASSERT_TRUE(st.ok()) << st.ToString();
  }
  StatusOr<Tensor> back = r.Finish();
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_TRUE(TensorsEqual(*back, t));

  // An empty tensor is one header chunk.
  ChunkReceiver empty("key", nullptr);
  Tensor none = Tensor::FromVector<float>({});
  ASSERT_TRUE(empty.Add(EncodeTensorChunk(none, 0, 0)).ok());
  ASSERT_TRUE(empty.Finish().ok());
}

// A dead value (the rendezvous's dead mark, an uninitialized tensor) crosses
// as is_dead, in the unary response and as the stream's one chunk, and
// comes back as the dead mark; protobuf reads the same bit.
TEST(TensorWire, ADeadValueCrossesAsIsDead) {
  const std::string bytes = Flatten(EncodeRecvTensorResponse(Status(), Tensor()));
  wpb::RecvTensorResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(bytes));
  EXPECT_TRUE(parsed.is_dead());
  EXPECT_FALSE(parsed.has_tensor());
  StatusOr<Tensor> back = DecodeRecvTensorResponse(Split(bytes, 1), "k");
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(back->IsInitialized());
  // A live value still decodes as live.
  StatusOr<Tensor> live = DecodeRecvTensorResponse(EncodeRecvTensorResponse(Status(), Tensor::Scalar(1.0f)), "k");
  ASSERT_TRUE(live.ok());
  EXPECT_TRUE(live->IsInitialized());

  const std::string chunk = Flatten(EncodeTensorChunk(Tensor(), 0, 0));
  wpb::RecvTensorChunk c;
  ASSERT_TRUE(c.ParseFromString(chunk));
  EXPECT_TRUE(c.is_dead());
  ChunkReceiver r("k", nullptr);
  ASSERT_TRUE(r.Add(Split(chunk, 1)).ok());
  StatusOr<Tensor> dead = r.Finish();
  ASSERT_TRUE(dead.ok()) << dead.status().ToString();
  EXPECT_FALSE(dead->IsInitialized());
  // A dead mark after data is malformed.
  ChunkReceiver mixed("k", nullptr);
  const Tensor t = Tensor::FromVector<float>({1, 2});
  ASSERT_TRUE(mixed.Add(EncodeTensorChunk(t, 0, 4)).ok());
  EXPECT_EQ(mixed.Add(EncodeTensorChunk(Tensor(), 0, 0)).code(), Code::kInvalidArgument);
}

TEST(TensorWire, ChunksOutOfPlaceOrMissingAreRefused) {
  Tensor t = Tensor::FromVector<float>({1, 2, 3, 4});
  {
    ChunkReceiver r("k", nullptr);
    EXPECT_FALSE(r.Add(EncodeTensorChunk(t, 8, 8)).ok());  // no header yet
  }
  {
    ChunkReceiver r("k", nullptr);
    ASSERT_TRUE(r.Add(EncodeTensorChunk(t, 0, 8)).ok());
    Status skip = r.Add(EncodeTensorChunk(t, 12, 4));  // a gap
    EXPECT_EQ(skip.code(), Code::kInvalidArgument);
    EXPECT_NE(skip.message().find("k"), std::string::npos);
  }
  {
    ChunkReceiver r("k", nullptr);
    ASSERT_TRUE(r.Add(EncodeTensorChunk(t, 0, 8)).ok());
    StatusOr<Tensor> early = r.Finish();  // the stream ended half way
    EXPECT_FALSE(early.ok());
  }
  {
    ChunkReceiver r("k", nullptr);
    Status s = r.Add(EncodeChunkStatus(Aborted("/job:worker/task:1: step aborted", "n")));
    EXPECT_EQ(s.code(), Code::kAborted);
    EXPECT_EQ(s.node(), "n");
  }
}

// A hostile peer's lengths and shapes: refused before anything of their size
// is allocated (a length over the message, a shape whose bytes the content
// does not have; each would otherwise ask for terabytes or throw).
TEST(TensorWire, HugeLengthsAndShapesAreRefusedBeforeAllocating) {
  // A status field whose length says 2^62 bytes, in a 12-byte message.
  std::string status_bomb = "\x1a";  // field 3, length-delimited
  status_bomb += std::string("\x80\x80\x80\x80\x80\x80\x80\x80\x40", 9);
  status_bomb += "xx";
  StatusOr<Tensor> a = DecodeRecvTensorResponse(Split(status_bomb, 5), "key");
  ASSERT_FALSE(a.ok());
  EXPECT_EQ(a.status().code(), Code::kInvalidArgument);
  EXPECT_NE(a.status().message().find("truncated"), std::string::npos) << a.status().message();

  // A float32[2^40] tensor with no content (4 TiB if it were allocated), and
  // with 4 bytes of content.
  wpb::RecvTensorResponse r;
  r.mutable_tensor()->set_dtype("float32");
  r.mutable_tensor()->add_shape(int64_t(1) << 40);
  StatusOr<Tensor> b = DecodeRecvTensorResponse(Split(r.SerializeAsString(), 100), "key");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), Code::kInvalidArgument);
  r.mutable_tensor()->set_content(std::string(4, '\0'));
  StatusOr<Tensor> c = DecodeRecvTensorResponse(Split(r.SerializeAsString(), 100), "key");
  ASSERT_FALSE(c.ok());
  EXPECT_NE(c.status().message().find("4 bytes"), std::string::npos) << c.status().message();

  // A chunk header that declares a total_bytes unlike its shape's.
  wpb::RecvTensorChunk chunk;
  chunk.set_dtype("float64");
  chunk.add_shape(int64_t(1) << 61);  // 2^64 bytes: wraps to 0 in size_t
  chunk.set_total_bytes(4);
  chunk.set_data("abcd");
  ChunkReceiver rec("key", nullptr);
  ::grpc::Slice slice(chunk.SerializeAsString());
  Status d = rec.Add(::grpc::ByteBuffer(&slice, 1));
  EXPECT_EQ(d.code(), Code::kInvalidArgument) << d.ToString();
}

}  // namespace
}  // namespace flowstate::distributed_internal
