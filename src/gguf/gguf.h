// GGUF reader (mmap, versions 2 and 3) and writer. The format is llama.cpp's; see docs/architecture.md.
// Every validation failure throws agentkv::Error whose message names the file and the key or tensor.
// The metadata's values and typed getters are gguf_metadata.h's.
#pragma once
#include <array>
#include <initializer_list>
#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/ggml_type.h"
#include "gguf/gguf_metadata.h"

namespace agentkv::gguf {

// Limits the reader enforces (and the writer respects); kMaxArrayNesting is gguf_metadata.h's.
inline constexpr int kMaxDims = 4;
inline constexpr uint64_t kDefaultAlignment = 32;

struct TensorInfo {
  std::string name;
  GgmlType type = GgmlType::F32;
  int n_dims = 0;
  std::array<int64_t, 4> ne{1, 1, 1, 1};  // ggml order: ne[0] fastest
  uint64_t offset = 0;                    // relative to the data section
  const uint8_t* data = nullptr;          // points into the mapping
  uint64_t nbytes = 0;
  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
};

class Reader {
 public:
  // Maps the file read-only. Throws agentkv::Error naming the file on any structural problem.
  static std::unique_ptr<Reader> open(const std::string& path);
  // Parses an in-memory image (fuzzing, tests); the bytes must outlive the reader.
  static std::unique_ptr<Reader> from_memory(std::span<const uint8_t> bytes, std::string name);
  ~Reader();
  Reader(const Reader&) = delete;
  Reader& operator=(const Reader&) = delete;

  const std::string& path() const { return path_; }
  uint32_t version() const { return version_; }
  uint64_t alignment() const { return alignment_; }
  uint64_t file_size() const { return size_; }
  // Absolute file offset of the data section (TensorInfo::offset is relative to it).
  uint64_t data_offset() const { return data_offset_; }

  // The key/value pairs (gguf_metadata.h: in file order, found by key, read by type).
  const Metadata& metadata() const { return metadata_; }

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Throws "tensor X has shape [...], expected [...]" naming the file.
  const TensorInfo& require_tensor(std::string_view name, std::span<const int64_t> expected_ne) const;

  // Metadata::release on the reader's own metadata (the tokenizer vocabulary and merges, once the
  // tokenizer has its copy).
  void release_metadata(std::initializer_list<std::string_view> keys);

  // Base of the mapping (or memory image) and its length.
  const uint8_t* base() const { return base_; }

 private:
  Reader() = default;
  void parse();
  std::string path_;
  uint32_t version_ = 0;
  uint64_t alignment_ = 32;
  const uint8_t* base_ = nullptr;
  uint64_t size_ = 0;
  uint64_t data_offset_ = 0;
  void* mapping_ = nullptr;  // non-null when we own an mmap
  Metadata metadata_;
  std::vector<TensorInfo> tensors_;
  std::map<std::string, size_t, std::less<>> tensor_index_;
};

// Builds a GGUF v3 file. Tensors are written in insertion order, each aligned to `alignment`.
class Writer {
 public:
  void set_u8(const std::string& key, uint8_t v);
  void set_i8(const std::string& key, int8_t v);
  void set_u16(const std::string& key, uint16_t v);
  void set_i16(const std::string& key, int16_t v);
  void set_u32(const std::string& key, uint32_t v);
  void set_i32(const std::string& key, int32_t v);
  void set_u64(const std::string& key, uint64_t v);
  void set_i64(const std::string& key, int64_t v);
  void set_f32(const std::string& key, float v);
  void set_f64(const std::string& key, double v);
  void set_bool(const std::string& key, bool v);
  void set_string(const std::string& key, const std::string& v);
  void set_array_string(const std::string& key, const std::vector<std::string>& v);
  void set_array_i32(const std::string& key, const std::vector<int32_t>& v);
  void set_array_u32(const std::string& key, const std::vector<uint32_t>& v);
  void set_array_f32(const std::string& key, const std::vector<float>& v);
  void set_array_bool(const std::string& key, const std::vector<bool>& v);
  // Generic: set any value (used by round-trip tests and tools that copy metadata).
  void set_value(const std::string& key, const Value& v);
  void set_alignment(uint32_t a);  // also writes general.alignment

  // ne in ggml order (ne[0] fastest); data must hold ggml_row_size(type, ne0) * rows bytes.
  void add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne,
                  std::vector<uint8_t> data);

  void write(const std::string& path) const;       // throws Error on I/O failure
  std::vector<uint8_t> to_bytes() const;

 private:
  uint64_t effective_alignment() const;  // general.alignment if set, else 32
  // Header, metadata and tensor table up to the (aligned) start of the data section.
  std::vector<uint8_t> encode_header() const;
  struct PendingTensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    std::vector<uint8_t> data;
  };
  std::vector<std::pair<std::string, Value>> kv_;
  std::vector<PendingTensor> tensors_;
  uint32_t alignment_ = 32;
};

}  // namespace agentkv::gguf
