// Internal to checkpoints/: the byte layouts of FORMAT.md — CRC32C, fixed
// little-endian integers, tensor records (header + data), index records and
// the keys of the checkpoints and variables column families. Pure functions
// over bytes; thread-safe.
#ifndef FLOWSTATE_CHECKPOINTS_FORMAT_H_
#define FLOWSTATE_CHECKPOINTS_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "graph/status.h"
#include "graph/tensor.h"

namespace flowstate::checkpoints::internal {

// CRC-32C (Castagnoli), as in iSCSI/ext4/RocksDB; SSE4.2 when compiled for
// it. Extend(Extend(0, a), b) == Value(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);
inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }

void PutFixed32(std::string* out, uint32_t v);
void PutFixed64(std::string* out, uint64_t v);
uint32_t DecodeFixed32(const char* p);
uint64_t DecodeFixed64(const char* p);
void PutBigEndian64(std::string* out, uint64_t v);
uint64_t DecodeBigEndian64(const char* p);

// Tensor record = header + data, header:
//   fixed32 crc32c of everything after it (rest of header, then data)
//   u8 record version (1), u8 dtype, u16 zero, u32 rank, rank x fixed64 dim,
//   fixed64 data bytes
inline constexpr uint8_t kTensorRecordVersion = 1;
// The header of `t` with its CRC already computed over header and data.
std::string EncodeTensorHeader(const Tensor& t);
// Parses and checks a whole record. `what` names it in errors ("job j step 3
// variable w"): DATA_LOSS on a bad checksum, a malformed header or a size
// mismatch. The tensor gets its own (aligned) buffer.
StatusOr<Tensor> DecodeTensorRecord(std::string_view record, const std::string& what);

// The parsed header of a tensor record, before its checksum is verified
// (every field bounds-checked against the record; DATA_LOSS otherwise).
struct TensorRecordHeader {
  DataType dtype = DataType::kInvalid;
  TensorShape shape;
  size_t header_bytes = 0;  // data starts here
  uint32_t crc = 0;         // the stored checksum
};
StatusOr<TensorRecordHeader> ParseTensorHeader(std::string_view record, const std::string& what);
// The checksum a tensor record should have (of everything after the field).
inline uint32_t TensorRecordCrc(std::string_view record) {
  return Crc32c(record.data() + 4, record.size() - 4);
}
Status ChecksumMismatch(const std::string& what, uint32_t want, uint32_t have);

// Chunked tensor record (record version 2, checkpoints only): the header
// above (version 2) followed by fixed32 ordinal (the tensor's position in
// the checkpoint's name order), fixed32 chunk_bytes and one fixed32 crc32c
// per chunk; the crc covers all of it. The data lives in chunk records
// (ChunkKey), chunk i holding bytes [i*chunk_bytes, min((i+1)*chunk_bytes,
// bytes)) raw.
inline constexpr uint8_t kChunkedTensorRecordVersion = 2;
inline constexpr uint32_t kChunkBytes = 1u << 20;
struct ChunkedTensorHeader {
  DataType dtype = DataType::kInvalid;
  TensorShape shape;
  uint64_t bytes = 0;
  uint32_t ordinal = 0;
  uint32_t chunk_bytes = 0;
  std::vector<uint32_t> chunk_crcs;  // ceil(bytes / chunk_bytes) of them
};
// The version byte of a tensor record (0 when too short to have one).
inline uint8_t TensorRecordVersion(std::string_view rec) {
  return rec.size() > 4 ? uint8_t(rec[4]) : 0;
}
std::string EncodeChunkedTensorHeader(const Tensor& t, uint32_t ordinal, uint32_t chunk_bytes,
                                      const std::vector<uint32_t>& chunk_crcs);
// DATA_LOSS naming `what` on a bad checksum or a malformed record.
StatusOr<ChunkedTensorHeader> DecodeChunkedTensorHeader(std::string_view rec,
                                                        const std::string& what);

// Index record of a checkpoint.
struct IndexRecord {
  int64_t step = 0;
  int64_t unix_micros = 0;
  int64_t bytes = 0;
  int64_t num_tensors = 0;
  uint32_t metadata_crc = 0;
  int64_t metadata_bytes = 0;
};
std::string EncodeIndex(const IndexRecord& r);
StatusOr<IndexRecord> DecodeIndex(std::string_view v, const std::string& what);

// Keys of the checkpoints column family: a tag byte, the job id, '\0', the
// step as big-endian fixed64 (so keys sort by step), then for 'T' the name.
inline constexpr char kIndexTag = 'I';
inline constexpr char kMetadataTag = 'M';
inline constexpr char kTensorTag = 'T';
inline constexpr char kChunkTag = 'D';  // sorts before the others (ingested files)
std::string CheckpointKey(char tag, std::string_view job, int64_t step);
// 'D' job '\0' step, then big-endian fixed32 ordinal and fixed32 chunk index.
std::string ChunkKey(std::string_view job, int64_t step, uint32_t ordinal, uint32_t index);
// The prefix every key of a job with `tag` starts with.
std::string JobPrefix(char tag, std::string_view job);
// Variables column family: scope, '\0', name.
std::string VariableKey(std::string_view scope, std::string_view name);

// INVALID_ARGUMENT unless `id` is non-empty and has no '\0'.
Status CheckId(std::string_view id, std::string_view what);

}  // namespace flowstate::checkpoints::internal

#endif  // FLOWSTATE_CHECKPOINTS_FORMAT_H_
