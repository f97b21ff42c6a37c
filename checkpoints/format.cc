#include "checkpoints/format.h"

#include <algorithm>
#include <cstring>
#include <vector>

#if defined(__SSE4_2__)
#include <nmmintrin.h>
#endif

namespace flowstate::checkpoints::internal {
namespace {

// Table for the portable CRC-32C (reflected polynomial 0x82F63B78).
struct Crc32cTable {
  uint32_t t[256];
  Crc32cTable() {
    for (uint32_t i = 0; i < 256; ++i) {
      uint32_t c = i;
      for (int k = 0; k < 8; ++k) c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
      t[i] = c;
    }
  }
};

}  // namespace

#if defined(__SSE4_2__)
namespace {

// Three interleaved crc32q streams over blocks of 3 x kLane bytes: the
// instruction's latency is three cycles and its throughput one, so one
// stream runs at a third of the speed the unit allows. The lanes' raw CRC
// registers are joined by shifting (the CRC of kLane or 2 x kLane zero
// bytes, a linear map, tabulated per byte of the register).
constexpr size_t kLane = 8192;

uint32_t RawCrc(uint32_t c, const unsigned char* p, size_t n) {
  uint64_t c64 = c;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    c64 = _mm_crc32_u64(c64, v);
  }
  c = uint32_t(c64);
  for (; n > 0; --n) c = _mm_crc32_u8(c, *p++);
  return c;
}

struct ShiftTable {
  uint32_t t[4][256];
  explicit ShiftTable(size_t bytes) {
    uint32_t basis[32];
    for (int i = 0; i < 32; ++i) {
      uint64_t c = uint32_t(1) << i;
      for (size_t k = 0; k < bytes; k += 8) c = _mm_crc32_u64(c, 0);
      basis[i] = uint32_t(c);
    }
    for (int b = 0; b < 4; ++b) {
      for (int v = 0; v < 256; ++v) {
        uint32_t x = 0;
        for (int i = 0; i < 8; ++i) {
          if (v & (1 << i)) x ^= basis[8 * b + i];
        }
        t[b][v] = x;
      }
    }
  }
  uint32_t Shift(uint32_t c) const {
    return t[0][c & 0xff] ^ t[1][(c >> 8) & 0xff] ^ t[2][(c >> 16) & 0xff] ^ t[3][c >> 24];
  }
};

}  // namespace
#endif

uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  uint32_t c = ~crc;
#if defined(__SSE4_2__)
  if (n >= 3 * kLane) {
    static const ShiftTable one(kLane), two(2 * kLane);
    for (; n >= 3 * kLane; p += 3 * kLane, n -= 3 * kLane) {
      uint64_t a = c, b = 0, d = 0;
      for (size_t k = 0; k < kLane; k += 8) {
        uint64_t va, vb, vd;
        std::memcpy(&va, p + k, 8);
        std::memcpy(&vb, p + kLane + k, 8);
        std::memcpy(&vd, p + 2 * kLane + k, 8);
        a = _mm_crc32_u64(a, va);
        b = _mm_crc32_u64(b, vb);
        d = _mm_crc32_u64(d, vd);
      }
      c = two.Shift(uint32_t(a)) ^ one.Shift(uint32_t(b)) ^ uint32_t(d);
    }
  }
  c = RawCrc(c, p, n);
#else
  static const Crc32cTable table;
  while (n > 0) {
    c = table.t[(c ^ *p++) & 0xff] ^ (c >> 8);
    --n;
  }
#endif
  return ~c;
}

void PutFixed32(std::string* out, uint32_t v) {
  char b[4];
  for (int i = 0; i < 4; ++i) b[i] = char((v >> (8 * i)) & 0xff);
  out->append(b, 4);
}
void PutFixed64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = char((v >> (8 * i)) & 0xff);
  out->append(b, 8);
}
uint32_t DecodeFixed32(const char* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= uint32_t(uint8_t(p[i])) << (8 * i);
  return v;
}
uint64_t DecodeFixed64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= uint64_t(uint8_t(p[i])) << (8 * i);
  return v;
}
void PutBigEndian64(std::string* out, uint64_t v) {
  char b[8];
  for (int i = 0; i < 8; ++i) b[i] = char((v >> (8 * (7 - i))) & 0xff);
  out->append(b, 8);
}
uint64_t DecodeBigEndian64(const char* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v = (v << 8) | uint8_t(p[i]);
  return v;
}

std::string EncodeTensorHeader(const Tensor& t) {
  std::string h;
  h.reserve(4 + 8 + 8 * t.rank() + 8);
  PutFixed32(&h, 0);  // crc, filled in below
  h.push_back(char(kTensorRecordVersion));
  h.push_back(char(t.dtype()));
  h.push_back(0);
  h.push_back(0);
  PutFixed32(&h, uint32_t(t.rank()));
  for (int i = 0; i < t.rank(); ++i) PutFixed64(&h, uint64_t(t.dim(i)));
  PutFixed64(&h, uint64_t(t.TotalBytes()));
  uint32_t crc = Crc32c(h.data() + 4, h.size() - 4);
  crc = Crc32cExtend(crc, t.raw_data(), t.TotalBytes());
  std::string c;
  PutFixed32(&c, crc);
  h.replace(0, 4, c);
  return h;
}

Status ChecksumMismatch(const std::string& what, uint32_t want, uint32_t have) {
  return DataLoss("corrupt tensor record for " + what + ": checksum mismatch (stored " +
                  std::to_string(want) + ", computed " + std::to_string(have) + ")");
}

StatusOr<TensorRecordHeader> ParseTensorHeader(std::string_view rec, const std::string& what) {
  if (rec.size() < 4 + 8 + 8) {
    return DataLoss("corrupt tensor record for " + what + ": record of " +
                    std::to_string(rec.size()) + " bytes is too short");
  }
  const char* p = rec.data();
  TensorRecordHeader h;
  h.crc = DecodeFixed32(p);
  // Parsed before the checksum is checked (so that the check can run fused
  // with the copy, or beside it); a header that does not parse is reported
  // as a checksum mismatch when it is one.
  auto bad = [&](const std::string& why) {
    const uint32_t have = TensorRecordCrc(rec);
    if (have != h.crc) return ChecksumMismatch(what, h.crc, have);
    return DataLoss("corrupt tensor record for " + what + ": " + why);
  };
  if (uint8_t(p[4]) != kTensorRecordVersion) {
    return bad("unknown record version " + std::to_string(uint8_t(p[4])));
  }
  const uint8_t dt = uint8_t(p[5]);
  if (dt == 0 || dt >= kNumDataTypes) return bad("unknown dtype " + std::to_string(dt));
  h.dtype = DataType(dt);
  const uint32_t rank = DecodeFixed32(p + 8);
  if (rank > 64 || rec.size() < 12 + 8 * size_t(rank) + 8) return bad("bad rank " + std::to_string(rank));
  std::vector<int64_t> dims(rank);
  for (uint32_t i = 0; i < rank; ++i) {
    uint64_t d = DecodeFixed64(p + 12 + 8 * i);
    if (d > uint64_t(INT64_MAX)) return bad("negative dimension");
    dims[i] = int64_t(d);
  }
  h.header_bytes = 12 + 8 * size_t(rank) + 8;
  const uint64_t bytes = DecodeFixed64(p + 12 + 8 * rank);
  if (bytes != rec.size() - h.header_bytes) return bad("data size mismatch");
  StatusOr<TensorShape> shape = TensorShape::Make(dims);
  if (!shape.ok()) return bad(shape.status().message());
  if (uint64_t(shape->num_elements()) * DataTypeSize(h.dtype) != bytes) {
    return bad("shape " + shape->ToString() + " does not match " + std::to_string(bytes) + " bytes");
  }
  h.shape = *shape;
  return h;
}

StatusOr<Tensor> DecodeTensorRecord(std::string_view rec, const std::string& what) {
  FS_ASSIGN_OR_RETURN(TensorRecordHeader h, ParseTensorHeader(rec, what));
  FS_ASSIGN_OR_RETURN(Tensor t, Tensor::Allocate(HostAllocator(), h.dtype, h.shape));
  // Copy and checksum in cache-sized pieces: the CRC reads what the copy
  // just wrote, from cache, so the bytes cross memory once.
  const char* src = rec.data() + h.header_bytes;
  const size_t bytes = rec.size() - h.header_bytes;
  uint32_t crc = Crc32c(rec.data() + 4, h.header_bytes - 4);
  char* dst = static_cast<char*>(t.raw_data());
  constexpr size_t kPiece = 256 << 10;
  for (size_t off = 0; off < bytes; off += kPiece) {
    const size_t n = std::min(kPiece, bytes - off);
    std::memcpy(dst + off, src + off, n);
    crc = Crc32cExtend(crc, dst + off, n);
  }
  if (crc != h.crc) return ChecksumMismatch(what, h.crc, crc);
  return t;
}

std::string EncodeChunkedTensorHeader(const Tensor& t, uint32_t ordinal, uint32_t chunk_bytes,
                                      const std::vector<uint32_t>& chunk_crcs) {
  std::string h;
  h.reserve(4 + 8 + 8 * t.rank() + 8 + 8 + 4 * chunk_crcs.size());
  PutFixed32(&h, 0);  // crc, filled in below
  h.push_back(char(kChunkedTensorRecordVersion));
  h.push_back(char(t.dtype()));
  h.push_back(0);
  h.push_back(0);
  PutFixed32(&h, uint32_t(t.rank()));
  for (int i = 0; i < t.rank(); ++i) PutFixed64(&h, uint64_t(t.dim(i)));
  PutFixed64(&h, uint64_t(t.TotalBytes()));
  PutFixed32(&h, ordinal);
  PutFixed32(&h, chunk_bytes);
  for (uint32_t c : chunk_crcs) PutFixed32(&h, c);
  std::string c;
  PutFixed32(&c, Crc32c(h.data() + 4, h.size() - 4));
  h.replace(0, 4, c);
  return h;
}

StatusOr<ChunkedTensorHeader> DecodeChunkedTensorHeader(std::string_view rec,
                                                        const std::string& what) {
  auto bad = [&](const std::string& why) {
    return DataLoss("corrupt tensor record for " + what + ": " + why);
  };
  if (rec.size() < 4 + 8 + 8 + 8) return bad("record of " + std::to_string(rec.size()) + " bytes is too short");
  const char* p = rec.data();
  const uint32_t want = DecodeFixed32(p), have = TensorRecordCrc(rec);
  if (want != have) return ChecksumMismatch(what, want, have);
  if (uint8_t(p[4]) != kChunkedTensorRecordVersion) {
    return bad("unknown record version " + std::to_string(uint8_t(p[4])));
  }
  ChunkedTensorHeader h;
  const uint8_t dt = uint8_t(p[5]);
  if (dt == 0 || dt >= kNumDataTypes) return bad("unknown dtype " + std::to_string(dt));
  h.dtype = DataType(dt);
  const uint32_t rank = DecodeFixed32(p + 8);
  const size_t fixed = 12 + 8 * size_t(rank) + 8 + 8;
  if (rank > 64 || rec.size() < fixed) return bad("bad rank " + std::to_string(rank));
  std::vector<int64_t> dims(rank);
  for (uint32_t i = 0; i < rank; ++i) {
    uint64_t d = DecodeFixed64(p + 12 + 8 * i);
    if (d > uint64_t(INT64_MAX)) return bad("negative dimension");
    dims[i] = int64_t(d);
  }
  const char* q = p + 12 + 8 * rank;
  h.bytes = DecodeFixed64(q);
  h.ordinal = DecodeFixed32(q + 8);
  h.chunk_bytes = DecodeFixed32(q + 12);
  StatusOr<TensorShape> shape = TensorShape::Make(dims);
  if (!shape.ok()) return bad(shape.status().message());
  if (uint64_t(shape->num_elements()) * DataTypeSize(h.dtype) != h.bytes) {
    return bad("shape " + shape->ToString() + " does not match " + std::to_string(h.bytes) + " bytes");
  }
  h.shape = *shape;
  if (h.chunk_bytes == 0) return bad("chunk size 0");
  const uint64_t chunks = (h.bytes + h.chunk_bytes - 1) / h.chunk_bytes;
  if (rec.size() != fixed + 4 * chunks) return bad("record size does not match its " + std::to_string(chunks) + " chunks");
  h.chunk_crcs.resize(size_t(chunks));
  for (uint64_t i = 0; i < chunks; ++i) h.chunk_crcs[i] = DecodeFixed32(p + fixed + 4 * i);
  return h;
}

std::string EncodeIndex(const IndexRecord& r) {
  std::string v;
  PutFixed32(&v, 0);
  v.push_back(1);  // version
  PutFixed64(&v, uint64_t(r.step));
  PutFixed64(&v, uint64_t(r.unix_micros));
  PutFixed64(&v, uint64_t(r.bytes));
  PutFixed64(&v, uint64_t(r.num_tensors));
  PutFixed32(&v, r.metadata_crc);
  PutFixed64(&v, uint64_t(r.metadata_bytes));
  std::string c;
  PutFixed32(&c, Crc32c(v.data() + 4, v.size() - 4));
  v.replace(0, 4, c);
  return v;
}

StatusOr<IndexRecord> DecodeIndex(std::string_view v, const std::string& what) {
  constexpr size_t kSize = 4 + 1 + 8 * 4 + 4 + 8;
  if (v.size() != kSize || DecodeFixed32(v.data()) != Crc32c(v.data() + 4, v.size() - 4)) {
    return DataLoss("corrupt index record for " + what);
  }
  if (v[4] != 1) return DataLoss("index record for " + what + " has unknown version");
  const char* p = v.data() + 5;
  IndexRecord r;
  r.step = int64_t(DecodeFixed64(p));
  r.unix_micros = int64_t(DecodeFixed64(p + 8));
  r.bytes = int64_t(DecodeFixed64(p + 16));
  r.num_tensors = int64_t(DecodeFixed64(p + 24));
  r.metadata_crc = DecodeFixed32(p + 32);
  r.metadata_bytes = int64_t(DecodeFixed64(p + 36));
  return r;
}

std::string JobPrefix(char tag, std::string_view job) {
  std::string k;
  k.reserve(job.size() + 2);
  k.push_back(tag);
  k.append(job);
  k.push_back('\0');
  return k;
}

std::string CheckpointKey(char tag, std::string_view job, int64_t step) {
  std::string k = JobPrefix(tag, job);
  PutBigEndian64(&k, uint64_t(step));
  return k;
}

std::string ChunkKey(std::string_view job, int64_t step, uint32_t ordinal, uint32_t index) {
  std::string k = CheckpointKey(kChunkTag, job, step);
  for (int i = 3; i >= 0; --i) k.push_back(char((ordinal >> (8 * i)) & 0xff));
  for (int i = 3; i >= 0; --i) k.push_back(char((index >> (8 * i)) & 0xff));
  return k;
}

std::string VariableKey(std::string_view scope, std::string_view name) {
  std::string k(scope);
  k.push_back('\0');
  k.append(name);
  return k;
}

Status CheckId(std::string_view id, std::string_view what) {
  if (id.empty()) return InvalidArgument(std::string(what) + " must not be empty");
  if (id.find('\0') != std::string_view::npos) {
    return InvalidArgument(std::string(what) + " must not contain NUL bytes");
  }
  return Status();
}

}  // namespace flowstate::checkpoints::internal
