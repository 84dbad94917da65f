// GGUF v3 writer: metadata and tensors in insertion order, every tensor's data aligned, the layout the
// reader expects (and llama.cpp's gguf_write produces).
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "agentkv/error.h"
#include "gguf/gguf.h"

namespace agentkv::gguf {
namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF"
constexpr uint32_t kVersion = 3;

using Bytes = std::vector<uint8_t>;

template <class T>
void put(Bytes& out, T v) {
  uint8_t raw[sizeof(T)];
  std::memcpy(raw, &v, sizeof(T));
  out.insert(out.end(), raw, raw + sizeof(T));
}

void put_string(Bytes& out, const std::string& s) {
  put<uint64_t>(out, s.size());
  out.insert(out.end(), s.begin(), s.end());
}

void pad_to(Bytes& out, uint64_t alignment) {
  out.resize(out.size() + (alignment - out.size() % alignment) % alignment, 0);
}

uint64_t padded(uint64_t n, uint64_t alignment) { return n + (alignment - n % alignment) % alignment; }

[[noreturn]] void fail(const std::string& msg) { throw Error("gguf writer: " + msg); }

// Writes an integer of type t after checking that it fits.
void put_integer(Bytes& out, ValueType t, __int128 v, const std::string& key) {
  __int128 lo = 0, hi = 0;
  switch (t) {
    case ValueType::U8: hi = UINT8_MAX; break;
    case ValueType::I8: lo = INT8_MIN; hi = INT8_MAX; break;
    case ValueType::U16: hi = UINT16_MAX; break;
    case ValueType::I16: lo = INT16_MIN; hi = INT16_MAX; break;
    case ValueType::U32: hi = UINT32_MAX; break;
    case ValueType::I32: lo = INT32_MIN; hi = INT32_MAX; break;
    case ValueType::U64: hi = UINT64_MAX; break;
    case ValueType::I64: lo = INT64_MIN; hi = INT64_MAX; break;
    case ValueType::BOOL: hi = 1; break;
    default: fail("key '" + key + "': internal: not an integer type");
  }
  if (v < lo || v > hi)
    fail("key '" + key + "': value out of range for " + std::string(value_type_name(t)));
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: put<uint8_t>(out, static_cast<uint8_t>(v)); break;
    case ValueType::U16: case ValueType::I16: put<uint16_t>(out, static_cast<uint16_t>(v)); break;
    case ValueType::U32: case ValueType::I32: put<uint32_t>(out, static_cast<uint32_t>(v)); break;
    default: put<uint64_t>(out, static_cast<uint64_t>(v)); break;
  }
}

__int128 scalar_integer(const Value& v, const std::string& key) {
  if (const auto* s = std::get_if<int64_t>(&v.scalar)) return *s;
  if (const auto* u = std::get_if<uint64_t>(&v.scalar)) return *u;
  fail("key '" + key + "': " + std::string(value_type_name(v.type)) + " value holds no integer");
}

double scalar_float(const Value& v, const std::string& key) {
  if (const auto* d = std::get_if<double>(&v.scalar)) return *d;
  fail("key '" + key + "': " + std::string(value_type_name(v.type)) + " value holds no number");
}

void put_array(Bytes& out, const Value& v, const std::string& key, int depth) {
  if (depth >= kMaxArrayNesting) fail("key '" + key + "': arrays nested too deeply");
  put<uint32_t>(out, static_cast<uint32_t>(v.elem_type));
  put<uint64_t>(out, v.array_size());
  switch (v.elem_type) {
    case ValueType::STRING:
      for (const auto& s : v.str_array) put_string(out, s);
      break;
    case ValueType::ARRAY:
      for (const auto& inner : v.nested) {
        if (inner.type != ValueType::ARRAY) fail("key '" + key + "': element of an array of arrays is not an array");
        put_array(out, inner, key, depth + 1);
      }
      break;
    case ValueType::U64:
      for (uint64_t u : v.uint_array) put<uint64_t>(out, u);
      break;
    case ValueType::F32:
      for (double d : v.float_array) put<float>(out, static_cast<float>(d));
      break;
    case ValueType::F64:
      for (double d : v.float_array) put<double>(out, d);
      break;
    default:
      for (int64_t i : v.int_array) put_integer(out, v.elem_type, i, key);
      break;
  }
}

void put_value(Bytes& out, const Value& v, const std::string& key) {
  put<uint32_t>(out, static_cast<uint32_t>(v.type));
  switch (v.type) {
    case ValueType::STRING: {
      const auto* s = std::get_if<std::string>(&v.scalar);
      if (!s) fail("key '" + key + "': string value holds no string");
      put_string(out, *s);
      break;
    }
    case ValueType::ARRAY: put_array(out, v, key, 0); break;
    case ValueType::F32: put<float>(out, static_cast<float>(scalar_float(v, key))); break;
    case ValueType::F64: put<double>(out, scalar_float(v, key)); break;
    default: put_integer(out, v.type, scalar_integer(v, key), key); break;
  }
}

Value scalar(ValueType t, std::variant<int64_t, uint64_t, double, std::string> payload) {
  Value v;
  v.type = t;
  v.scalar = std::move(payload);
  return v;
}

Value array_of(ValueType elem) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  return v;
}

// Setting a key twice replaces its value in place (keeps its first position).
void upsert(std::vector<std::pair<std::string, Value>>& kv, const std::string& key, Value v) {
  for (auto& [k, old] : kv)
    if (k == key) {
      old = std::move(v);
      return;
    }
  kv.emplace_back(key, std::move(v));
}

}  // namespace

void Writer::set_u8(const std::string& key, uint8_t v) { upsert(kv_, key, scalar(ValueType::U8, uint64_t{v})); }
void Writer::set_i8(const std::string& key, int8_t v) { upsert(kv_, key, scalar(ValueType::I8, int64_t{v})); }
void Writer::set_u16(const std::string& key, uint16_t v) { upsert(kv_, key, scalar(ValueType::U16, uint64_t{v})); }
void Writer::set_i16(const std::string& key, int16_t v) { upsert(kv_, key, scalar(ValueType::I16, int64_t{v})); }
void Writer::set_u32(const std::string& key, uint32_t v) { upsert(kv_, key, scalar(ValueType::U32, uint64_t{v})); }
void Writer::set_i32(const std::string& key, int32_t v) { upsert(kv_, key, scalar(ValueType::I32, int64_t{v})); }
void Writer::set_u64(const std::string& key, uint64_t v) { upsert(kv_, key, scalar(ValueType::U64, v)); }
void Writer::set_i64(const std::string& key, int64_t v) { upsert(kv_, key, scalar(ValueType::I64, v)); }
void Writer::set_f32(const std::string& key, float v) { upsert(kv_, key, scalar(ValueType::F32, double{v})); }
void Writer::set_f64(const std::string& key, double v) { upsert(kv_, key, scalar(ValueType::F64, v)); }
void Writer::set_bool(const std::string& key, bool v) { upsert(kv_, key, scalar(ValueType::BOOL, uint64_t{v})); }
void Writer::set_string(const std::string& key, const std::string& v) {
  upsert(kv_, key, scalar(ValueType::STRING, v));
}

void Writer::set_array_string(const std::string& key, const std::vector<std::string>& v) {
  Value a = array_of(ValueType::STRING);
  a.str_array = v;
  upsert(kv_, key, std::move(a));
}

void Writer::set_array_i32(const std::string& key, const std::vector<int32_t>& v) {
  Value a = array_of(ValueType::I32);
  a.int_array.assign(v.begin(), v.end());
  upsert(kv_, key, std::move(a));
}

void Writer::set_array_u32(const std::string& key, const std::vector<uint32_t>& v) {
  Value a = array_of(ValueType::U32);
  a.int_array.assign(v.begin(), v.end());
  upsert(kv_, key, std::move(a));
}

void Writer::set_array_f32(const std::string& key, const std::vector<float>& v) {
  Value a = array_of(ValueType::F32);
  a.float_array.assign(v.begin(), v.end());
  upsert(kv_, key, std::move(a));
}

void Writer::set_array_bool(const std::string& key, const std::vector<bool>& v) {
  Value a = array_of(ValueType::BOOL);
  a.int_array.assign(v.begin(), v.end());
  upsert(kv_, key, std::move(a));
}

void Writer::set_value(const std::string& key, const Value& v) {
  Bytes probe;
  put_value(probe, v, key);  // refuse values that could not be written, now rather than at write()
  upsert(kv_, key, v);
}

void Writer::set_alignment(uint32_t a) {
  if (a == 0 || !std::has_single_bit(a)) fail("alignment " + std::to_string(a) + " is not a nonzero power of two");
  alignment_ = a;
  set_u32("general.alignment", a);
}

void Writer::add_tensor(const std::string& name, GgmlType type, std::vector<int64_t> ne, std::vector<uint8_t> data) {
  const std::string what = "tensor '" + name + "'";
  for (const auto& t : tensors_)
    if (t.name == name) fail("duplicate " + what);
  if (ne.empty() || ne.size() > static_cast<size_t>(kMaxDims)) fail(what + ": needs 1 to 4 dimensions");
  const auto& info = ggml_type_info(type);
  if (info.agentkv_only) fail(what + ": " + std::string(info.name) + " is an agentkv KV cache type, not a GGUF tensor type");
  int64_t n_elements = 1;
  for (int64_t n : ne)
    if (n <= 0 || __builtin_mul_overflow(n_elements, n, &n_elements)) fail(what + ": bad shape");
  if (ne[0] % info.block_size != 0) fail(what + ": ne[0] is not a multiple of the block size");
  const uint64_t expected = static_cast<uint64_t>(n_elements / info.block_size) * info.type_size;
  if (data.size() != expected)
    fail(what + ": data has " + std::to_string(data.size()) + " bytes, shape and type need " + std::to_string(expected));
  tensors_.push_back({name, type, std::move(ne), std::move(data)});
}

uint64_t Writer::effective_alignment() const {
  for (const auto& [key, v] : kv_) {
    if (key != "general.alignment") continue;
    // Set directly through set_value/set_u32: the reader will honour it, so the layout must too.
    if (v.type == ValueType::ARRAY || v.type == ValueType::STRING || v.type == ValueType::BOOL ||
        v.type == ValueType::F32 || v.type == ValueType::F64)
      fail("general.alignment must be an unsigned integer");
    const __int128 a = scalar_integer(v, key);
    if (a <= 0 || a > UINT32_MAX || !std::has_single_bit(static_cast<uint64_t>(a)))
      fail("general.alignment is not a nonzero power of two");
    return static_cast<uint64_t>(a);
  }
  return alignment_;
}

std::vector<uint8_t> Writer::encode_header() const {
  const uint64_t alignment = effective_alignment();
  Bytes out;
  put<uint32_t>(out, kMagic);
  put<uint32_t>(out, kVersion);
  put<uint64_t>(out, tensors_.size());
  put<uint64_t>(out, kv_.size());
  for (const auto& [key, v] : kv_) {
    put_string(out, key);
    put_value(out, v, key);
  }
  uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put<uint32_t>(out, static_cast<uint32_t>(t.ne.size()));
    for (int64_t n : t.ne) put<uint64_t>(out, static_cast<uint64_t>(n));
    put<uint32_t>(out, static_cast<uint32_t>(t.type));
    put<uint64_t>(out, offset);
    offset += padded(t.data.size(), alignment);
  }
  pad_to(out, alignment);
  return out;
}

std::vector<uint8_t> Writer::to_bytes() const {
  const uint64_t alignment = effective_alignment();
  Bytes out = encode_header();
  for (const auto& t : tensors_) {
    out.insert(out.end(), t.data.begin(), t.data.end());
    pad_to(out, alignment);  // the data section starts aligned, so this aligns the next tensor
  }
  return out;
}

void Writer::write(const std::string& path) const {
  const uint64_t alignment = effective_alignment();
  const Bytes header = encode_header();
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) throw Error(path + ": cannot create: " + std::strerror(errno));
  const std::vector<uint8_t> zeros(alignment, 0);
  bool ok = std::fwrite(header.data(), 1, header.size(), f) == header.size();
  for (const auto& t : tensors_) {
    if (!ok) break;
    ok = std::fwrite(t.data.data(), 1, t.data.size(), f) == t.data.size();
    const uint64_t pad = padded(t.data.size(), alignment) - t.data.size();
    if (ok && pad) ok = std::fwrite(zeros.data(), 1, pad, f) == pad;
  }
  if (std::fclose(f) != 0) ok = false;
  if (!ok) throw Error(path + ": write failed: " + std::strerror(errno));
}

}  // namespace agentkv::gguf
