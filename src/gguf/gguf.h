// GGUF reader (mmap, versions 2 and 3) and writer. The format is llama.cpp's; see docs/architecture.md.
// Every validation failure throws agentkv::Error whose message names the file and the key or tensor.
#pragma once
#include <array>
#include <initializer_list>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "agentkv/ggml_type.h"

namespace agentkv::gguf {

enum class ValueType : uint32_t {
  U8 = 0, I8 = 1, U16 = 2, I16 = 3, U32 = 4, I32 = 5, F32 = 6, BOOL = 7,
  STRING = 8, ARRAY = 9, U64 = 10, I64 = 11, F64 = 12,
};
std::string_view value_type_name(ValueType t);

// Limits the reader enforces (and the writer respects).
inline constexpr int kMaxDims = 4;
inline constexpr int kMaxArrayNesting = 8;       // arrays of arrays deeper than this are refused
inline constexpr uint64_t kDefaultAlignment = 32;

// A metadata value. Scalars keep their exact type; arrays keep their element type.
struct Value {
  ValueType type = ValueType::U32;
  ValueType elem_type = ValueType::U32;  // meaningful for ARRAY only
  // Scalar payloads: integers (any width, bool) as int64/uint64, floats as double, strings as string.
  std::variant<int64_t, uint64_t, double, std::string> scalar;
  // Array payloads (exactly one is used, by elem_type): strings, integers, floats, bools-as-ints.
  std::vector<std::string> str_array;
  std::vector<int64_t> int_array;    // signed ints, bools, and unsigned that fit
  std::vector<uint64_t> uint_array;  // U64 arrays
  std::vector<double> float_array;
  // Arrays of arrays (elem_type ARRAY): each element is itself an ARRAY Value. llama.cpp's format
  // allows them; no model key uses them, but they are kept so a file round-trips.
  std::vector<Value> nested;
  size_t array_size() const;  // element count of an ARRAY value (0 for scalars)
};

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

  // Metadata in file order.
  const std::vector<std::pair<std::string, Value>>& metadata() const { return kv_; }
  const Value* find(std::string_view key) const;
  bool has(std::string_view key) const { return find(key) != nullptr; }

  // Typed getters: nullopt when absent; throw Error (naming file and key) when present with the
  // wrong type. Integer getters accept any integer type whose value fits.
  std::optional<uint64_t> get_uint(std::string_view key) const;
  std::optional<int64_t> get_int(std::string_view key) const;
  std::optional<double> get_float(std::string_view key) const;  // accepts integers too
  std::optional<bool> get_bool(std::string_view key) const;
  std::optional<std::string> get_string(std::string_view key) const;
  std::optional<std::vector<std::string>> get_string_array(std::string_view key) const;
  std::optional<std::vector<int64_t>> get_int_array(std::string_view key) const;
  std::optional<std::vector<double>> get_float_array(std::string_view key) const;
  // require_*: as get_*, but a missing key throws "missing required key".
  uint64_t require_uint(std::string_view key) const;
  double require_float(std::string_view key) const;
  std::string require_string(std::string_view key) const;

  const std::vector<TensorInfo>& tensors() const { return tensors_; }
  const TensorInfo* find_tensor(std::string_view name) const;
  // Throws "tensor X has shape [...], expected [...]" naming the file.
  const TensorInfo& require_tensor(std::string_view name, std::span<const int64_t> expected_ne) const;

  // Drops the parsed copies of the named metadata keys once their consumer has its own (the
  // tokenizer vocabulary and merges are ~25 MB of strings): the keys then read as absent.
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
  std::vector<std::pair<std::string, Value>> kv_;
  std::map<std::string, size_t, std::less<>> kv_index_;
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
