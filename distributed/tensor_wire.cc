#include "distributed/tensor_wire_internal.h"

#include <cstdint>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "api/worker.pb.h"
#include "distributed/wire_internal.h"
#include "graph/allocator.h"

namespace flowstate::distributed_internal {
namespace {

// Protobuf wire types.
constexpr int kVarint = 0;
constexpr int kLen = 2;

void PutVarint(std::string* out, uint64_t v) {
  while (v >= 0x80) {
    out->push_back(char(v | 0x80));
    v >>= 7;
  }
  out->push_back(char(v));
}
void PutTag(std::string* out, int field, int type) { PutVarint(out, uint64_t(field) << 3 | type); }

size_t VarintSize(uint64_t v) {
  size_t n = 1;
  while (v >= 0x80) {
    v >>= 7;
    ++n;
  }
  return n;
}

// Reads a message spread over several slices.
class Reader {
 public:
  explicit Reader(const std::vector<::grpc::Slice>& slices) : slices_(slices) {
    for (const ::grpc::Slice& s : slices) size_ += s.size();
    Skip0();
  }
  size_t position() const { return pos_; }
  // Bytes not read yet: a length field over it is a truncated message,
  // refused before anything of that length is allocated.
  size_t remaining() const { return size_ - pos_; }
  bool done() const { return slice_ >= slices_.size(); }

  bool Varint(uint64_t* v) {
    *v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      uint8_t b;
      if (!Bytes(&b, 1)) return false;
      *v |= uint64_t(b & 0x7f) << shift;
      if (!(b & 0x80)) return true;
    }
    return false;
  }
  // Copies n bytes to dst (dst null: skips them).
  bool Bytes(void* dst, size_t n) {
    auto* d = static_cast<uint8_t*>(dst);
    while (n > 0) {
      if (done()) return false;
      const ::grpc::Slice& s = slices_[slice_];
      size_t take = std::min(n, s.size() - offset_);
      if (d != nullptr) {
        std::memcpy(d, s.begin() + offset_, take);
        d += take;
      }
      offset_ += take;
      pos_ += take;
      n -= take;
      Skip0();
    }
    return true;
  }

 private:
  void Skip0() {
    while (slice_ < slices_.size() && offset_ >= slices_[slice_].size()) {
      ++slice_;
      offset_ = 0;
    }
  }
  const std::vector<::grpc::Slice>& slices_;
  size_t size_ = 0, slice_ = 0, offset_ = 0, pos_ = 0;
};

void ReleaseTensor(void* p) { delete static_cast<Tensor*>(p); }

Status Malformed(std::string_view what, const std::string& why) {
  return InvalidArgument(std::string(what) + ": malformed RecvTensor response: " + why);
}

// The bytes of a tensor of `dims` and the named dtype, checked before it is
// allocated: the dtype and shape are valid and the size is `bytes`.
StatusOr<std::pair<DataType, TensorShape>> CheckedHeader(std::string_view what,
                                                         const std::string& dtype_name,
                                                         const std::vector<int64_t>& dims,
                                                         uint64_t bytes, const char* field) {
  StatusOr<DataType> dtype = DataTypeFromString(dtype_name);
  if (!dtype.ok()) return Malformed(what, "no valid dtype before the " + std::string(field));
  StatusOr<TensorShape> shape = TensorShape::Make(dims);
  if (!shape.ok()) return Malformed(what, shape.status().message());
  const uint64_t size = DataTypeSize(*dtype);
  const uint64_t n = uint64_t(shape->num_elements());
  if (size == 0 || n > bytes / size || n * size != bytes) {
    return Malformed(what, std::string(field) + " has " + std::to_string(bytes) + " bytes, a " +
                               dtype_name + shape->ToString() + " tensor has " +
                               (size != 0 && n <= UINT64_MAX / size ? std::to_string(n * size)
                                                                   : std::string("more")));
  }
  return std::make_pair(*dtype, *shape);
}

}  // namespace

::grpc::ByteBuffer EncodeRecvTensorResponse(const Status& status, const Tensor& t) {
  if (!status.ok()) {
    wpb::RecvTensorResponse r;
    StatusToProto(status, r.mutable_status());
    std::string bytes = r.SerializeAsString();
    ::grpc::Slice s(bytes);
    return ::grpc::ByteBuffer(&s, 1);
  }
  if (!t.IsInitialized()) {  // the dead mark
    std::string head;
    PutTag(&head, 2, kVarint);
    PutVarint(&head, 1);
    ::grpc::Slice s(head);
    return ::grpc::ByteBuffer(&s, 1);
  }
  const std::string_view dtype = DataTypeName(t.dtype());
  const size_t bytes = t.TotalBytes();
  std::string shape;
  for (int i = 0; i < t.rank(); ++i) PutVarint(&shape, uint64_t(t.dim(i)));
  // The Tensor message: dtype, shape (packed), content.
  std::string tensor_head;
  PutTag(&tensor_head, 1, kLen);
  PutVarint(&tensor_head, dtype.size());
  tensor_head.append(dtype);
  if (!shape.empty()) {
    PutTag(&tensor_head, 2, kLen);
    PutVarint(&tensor_head, shape.size());
    tensor_head += shape;
  }
  PutTag(&tensor_head, 3, kLen);
  PutVarint(&tensor_head, bytes);
  const size_t tensor_size = tensor_head.size() + bytes;
  std::string head;
  head.reserve(tensor_head.size() + 1 + VarintSize(tensor_size));
  PutTag(&head, 1, kLen);
  PutVarint(&head, tensor_size);
  head += tensor_head;
  ::grpc::Slice slices[2] = {::grpc::Slice(head), ::grpc::Slice()};
  if (bytes == 0) return ::grpc::ByteBuffer(slices, 1);
  // The tensor's own bytes; the copy of the Tensor keeps its buffer alive
  // until gRPC lets go of the slice.
  auto* keep = new Tensor(t);
  slices[1] = ::grpc::Slice(const_cast<void*>(keep->raw_data()), bytes, ReleaseTensor, keep);
  return ::grpc::ByteBuffer(slices, 2);
}

StatusOr<Tensor> DecodeRecvTensorResponse(const ::grpc::ByteBuffer& buffer, std::string_view what) {
  std::vector<::grpc::Slice> slices;
  if (!buffer.Dump(&slices).ok()) return Malformed(what, "unreadable buffer");
  Reader r(slices);
  Tensor out;
  bool have_tensor = false, is_dead = false;
  while (!r.done()) {
    uint64_t tag, len;
    if (!r.Varint(&tag)) return Malformed(what, "truncated tag");
    const int field = int(tag >> 3), type = int(tag & 7);
    if (type == kVarint) {
      uint64_t v;
      if (!r.Varint(&v)) return Malformed(what, "truncated varint");
      if (field == 2) is_dead = v != 0;
      continue;
    }
    if (type != kLen) return Malformed(what, "unexpected wire type " + std::to_string(type));
    if (!r.Varint(&len)) return Malformed(what, "truncated length");
    if (len > r.remaining()) return Malformed(what, "truncated field " + std::to_string(field));
    if (field == 3) {  // status
      std::string bytes(len, '\0');
      if (!r.Bytes(bytes.data(), len)) return Malformed(what, "truncated status");
      wpb::StepStatus st;
      if (!st.ParseFromString(bytes)) return Malformed(what, "bad status");
      Status s = StatusFromProto(st);
      if (!s.ok()) return s;
      continue;
    }
    if (field != 1) {
      if (!r.Bytes(nullptr, len)) return Malformed(what, "truncated field");
      continue;
    }
    // The Tensor message.
    const size_t end = r.position() + len;
    std::string dtype_name;
    std::vector<int64_t> dims;
    bool have_content = false;
    while (r.position() < end) {
      uint64_t t2, l2;
      if (!r.Varint(&t2)) return Malformed(what, "truncated tensor tag");
      const int f2 = int(t2 >> 3), w2 = int(t2 & 7);
      if (f2 == 2 && w2 == kVarint) {  // an unpacked dimension
        uint64_t d;
        if (!r.Varint(&d)) return Malformed(what, "truncated shape");
        dims.push_back(int64_t(d));
        continue;
      }
      if (w2 == kVarint) {
        uint64_t ignored;
        if (!r.Varint(&ignored)) return Malformed(what, "truncated varint");
        continue;
      }
      if (w2 != kLen) return Malformed(what, "unexpected wire type in tensor");
      if (!r.Varint(&l2)) return Malformed(what, "truncated tensor field");
      if (l2 > r.remaining()) return Malformed(what, "truncated tensor field " + std::to_string(f2));
      if (f2 == 1) {
        dtype_name.resize(l2);
        if (!r.Bytes(dtype_name.data(), l2)) return Malformed(what, "truncated dtype");
      } else if (f2 == 2) {
        const size_t shape_end = r.position() + l2;
        while (r.position() < shape_end) {
          uint64_t d;
          if (!r.Varint(&d)) return Malformed(what, "truncated shape");
          dims.push_back(int64_t(d));
        }
      } else if (f2 == 3) {
        // The content: straight into the tensor, once dtype and shape are
        // known (they come first from every encoder we know of).
        FS_ASSIGN_OR_RETURN(auto header, CheckedHeader(what, dtype_name, dims, l2, "content"));
        const DataType dtype = header.first;
        StatusOr<Tensor> t = Tensor::Allocate(HostAllocator(), dtype, header.second);
        if (!t.ok()) return t.status();
        if (!r.Bytes(t->raw_data(), l2)) return Malformed(what, "truncated content");
        if (dtype == DataType::kBool) {
          const auto* b = static_cast<const uint8_t*>(t->raw_data());
          for (size_t i = 0; i < l2; ++i) {
            if (b[i] > 1) return Malformed(what, "a bool that is not 0 or 1");
          }
        }
        out = std::move(t).value();
        have_content = true;
      } else if (!r.Bytes(nullptr, l2)) {
        return Malformed(what, "truncated tensor field");
      }
    }
    if (r.position() != end) return Malformed(what, "tensor overruns its length");
    if (!have_content) {
      // An empty tensor (protobuf leaves an empty content out).
      FS_ASSIGN_OR_RETURN(auto header, CheckedHeader(what, dtype_name, dims, 0, "content"));
      StatusOr<Tensor> t = Tensor::Allocate(HostAllocator(), header.first, header.second);
      if (!t.ok()) return t.status();
      out = std::move(t).value();
    }
    have_tensor = true;
  }
  if (is_dead) {
    if (have_tensor) return Malformed(what, "a dead value with a tensor");
    return Tensor();  // the dead mark
  }
  if (!have_tensor) return Malformed(what, "no tensor and no error");
  return out;
}

::grpc::ByteBuffer EncodeChunkStatus(const Status& status) {
  wpb::RecvTensorChunk c;
  StatusToProto(status, c.mutable_status());
  ::grpc::Slice s(c.SerializeAsString());
  return ::grpc::ByteBuffer(&s, 1);
}

::grpc::ByteBuffer EncodeTensorChunk(const Tensor& t, size_t offset, size_t n) {
  std::string head;
  if (!t.IsInitialized()) {  // the dead mark: one chunk, nothing else
    PutTag(&head, 7, kVarint);
    PutVarint(&head, 1);
    ::grpc::Slice s(head);
    return ::grpc::ByteBuffer(&s, 1);
  }
  if (offset == 0) {
    const std::string_view dtype = DataTypeName(t.dtype());
    PutTag(&head, 2, kLen);
    PutVarint(&head, dtype.size());
    head.append(dtype);
    std::string shape;
    for (int i = 0; i < t.rank(); ++i) PutVarint(&shape, uint64_t(t.dim(i)));
    if (!shape.empty()) {
      PutTag(&head, 3, kLen);
      PutVarint(&head, shape.size());
      head += shape;
    }
    PutTag(&head, 4, kVarint);
    PutVarint(&head, t.TotalBytes());
  }
  PutTag(&head, 5, kVarint);
  PutVarint(&head, offset);
  PutTag(&head, 6, kLen);
  PutVarint(&head, n);
  ::grpc::Slice slices[2] = {::grpc::Slice(head), ::grpc::Slice()};
  if (n == 0) return ::grpc::ByteBuffer(slices, 1);
  auto* keep = new Tensor(t);  // released by gRPC with the slice
  slices[1] = ::grpc::Slice(static_cast<char*>(const_cast<void*>(keep->raw_data())) + offset, n,
                            ReleaseTensor, keep);
  return ::grpc::ByteBuffer(slices, 2);
}

Status ChunkReceiver::Add(const ::grpc::ByteBuffer& chunk) {
  std::vector<::grpc::Slice> slices;
  if (!chunk.Dump(&slices).ok()) return Malformed(what_, "unreadable chunk");
  Reader r(slices);
  std::string dtype_name;
  std::vector<int64_t> dims;
  uint64_t total = 0, offset = 0;
  bool have_total = false;
  while (!r.done()) {
    uint64_t tag, len;
    if (!r.Varint(&tag)) return Malformed(what_, "truncated tag");
    const int field = int(tag >> 3), type = int(tag & 7);
    if (type == kVarint) {
      uint64_t v;
      if (!r.Varint(&v)) return Malformed(what_, "truncated varint");
      if (field == 3) dims.push_back(int64_t(v));
      if (field == 4) {
        total = v;
        have_total = true;
      }
      if (field == 5) offset = v;
      if (field == 7 && v != 0) {
        if (have_header_) return Malformed(what_, "a dead value after data");
        dead_ = true;
      }
      continue;
    }
    if (type != kLen) return Malformed(what_, "unexpected wire type " + std::to_string(type));
    if (!r.Varint(&len)) return Malformed(what_, "truncated length");
    if (len > r.remaining()) return Malformed(what_, "truncated field " + std::to_string(field));
    if (field == 1) {
      std::string bytes(len, '\0');
      if (!r.Bytes(bytes.data(), len)) return Malformed(what_, "truncated status");
      wpb::StepStatus st;
      if (!st.ParseFromString(bytes)) return Malformed(what_, "bad status");
      FS_RETURN_IF_ERROR(StatusFromProto(st));
    } else if (field == 2) {
      dtype_name.resize(len);
      if (!r.Bytes(dtype_name.data(), len)) return Malformed(what_, "truncated dtype");
    } else if (field == 3) {
      const size_t end = r.position() + len;
      while (r.position() < end) {
        uint64_t d;
        if (!r.Varint(&d)) return Malformed(what_, "truncated shape");
        dims.push_back(int64_t(d));
      }
    } else if (field == 6) {
      if (!have_header_) {
        // The header fields come before the data in the first chunk.
        if (!have_total) return Malformed(what_, "data before the tensor's header");
        FS_ASSIGN_OR_RETURN(auto header,
                            CheckedHeader(what_, dtype_name, dims, total, "total_bytes"));
        StatusOr<Tensor> t = Tensor::Allocate(
            allocator_ != nullptr ? allocator_ : HostAllocator(), header.first, header.second);
        if (!t.ok()) return t.status();
        tensor_ = std::move(t).value();
        total_ = total;
        have_header_ = true;
      }
      if (offset != received_ || len > total_ - received_) {
        return Malformed(what_, "a chunk at " + std::to_string(offset) + " of " +
                                    std::to_string(len) + " bytes, expected one at " +
                                    std::to_string(received_) + " of at most " +
                                    std::to_string(total_ - received_));
      }
      if (!r.Bytes(static_cast<char*>(tensor_.raw_data()) + offset, len)) {
        return Malformed(what_, "truncated data");
      }
      received_ += len;
    } else if (!r.Bytes(nullptr, len)) {
      return Malformed(what_, "truncated field");
    }
  }
  return Status();
}

StatusOr<Tensor> ChunkReceiver::Finish() {
  if (dead_) {
    if (have_header_) return Malformed(what_, "a dead value with data");
    return Tensor();  // the dead mark
  }
  if (!have_header_) return Malformed(what_, "the stream ended before the tensor's header");
  if (received_ != total_) {
    return Malformed(what_, "the stream ended after " + std::to_string(received_) + " of " +
                                std::to_string(total_) + " bytes");
  }
  if (tensor_.dtype() == DataType::kBool) {
    const auto* b = static_cast<const uint8_t*>(tensor_.raw_data());
    for (size_t i = 0; i < total_; ++i) {
      if (b[i] > 1) return Malformed(what_, "a bool that is not 0 or 1");
    }
  }
  return std::move(tensor_);
}

}  // namespace flowstate::distributed_internal
