// GGUF reader: maps the file read-only and validates every structure before anything points into
// it. Nothing is allocated from a count that has not first been checked against the bytes left.
#include "gguf/gguf.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>

#include "agentkv/error.h"

namespace agentkv::gguf {

static_assert(std::endian::native == std::endian::little, "the GGUF reader assumes a little-endian host");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
// Smallest possible encodings, used to bound counts before trusting them.
constexpr uint64_t kMinKvBytes = 8 + 4 + 1;              // key length, value type, 1-byte value
constexpr uint64_t kMinTensorInfoBytes = 8 + 4 + 8 + 4 + 8;  // name length, n_dims, one dim, type, offset

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

bool is_valid_value_type(uint32_t t) { return t <= static_cast<uint32_t>(ValueType::F64); }

bool is_signed_type(ValueType t) {
  return t == ValueType::I8 || t == ValueType::I16 || t == ValueType::I32 || t == ValueType::I64;
}

// Encoded size of a scalar of type t; 0 for STRING and ARRAY (variable).
uint64_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::U8: case ValueType::I8: case ValueType::BOOL: return 1;
    case ValueType::U16: case ValueType::I16: return 2;
    case ValueType::U32: case ValueType::I32: case ValueType::F32: return 4;
    case ValueType::U64: case ValueType::I64: case ValueType::F64: return 8;
    default: return 0;
  }
}

// Smallest encoding of one array element of type t.
uint64_t min_element_size(ValueType t) {
  if (t == ValueType::STRING) return 8;      // length only
  if (t == ValueType::ARRAY) return 4 + 8;   // element type and count
  return scalar_size(t);
}

// Counts are checked against the bytes left before use, but an element can take more memory than its
// encoding (a u8 becomes an int64), so reservations are capped and larger arrays grow as they are read.
template <class Vec>
void reserve_bounded(Vec& v, uint64_t count) {
  v.reserve(static_cast<size_t>(std::min<uint64_t>(count, uint64_t{1} << 16)));
}

// Bounds-checked little-endian reads over the image; failures name the file and what was being read.
class Cursor {
 public:
  Cursor(const uint8_t* data, uint64_t size, const std::string& file) : data_(data), size_(size), file_(file) {}

  uint64_t pos() const { return pos_; }
  uint64_t remaining() const { return size_ - pos_; }

  [[noreturn]] void fail(const std::string& msg) const { throw Error(file_ + ": " + msg); }

  void need(uint64_t n, const std::string& what) const {
    if (n > remaining())
      fail("truncated file: " + what + " needs " + std::to_string(n) + " bytes at offset " +
           std::to_string(pos_) + " but the file ends at " + std::to_string(size_));
  }

  template <class T>
  T read(const std::string& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, data_ + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  std::string read_string(const std::string& what) {
    const auto len = read<uint64_t>(what);
    if (len > remaining())
      fail("string length " + std::to_string(len) + " in " + what + " exceeds the file (offset " +
           std::to_string(pos_) + ", file size " + std::to_string(size_) + "; truncated or corrupt file)");
    std::string s(reinterpret_cast<const char*>(data_ + pos_), len);
    pos_ += len;
    return s;
  }

 private:
  const uint8_t* data_;
  uint64_t size_;
  uint64_t pos_ = 0;
  const std::string& file_;
};

// Reads one integer of type t (not U64) as int64.
int64_t read_small_int(Cursor& c, ValueType t, const std::string& what) {
  switch (t) {
    case ValueType::U8: return c.read<uint8_t>(what);
    case ValueType::I8: return c.read<int8_t>(what);
    case ValueType::U16: return c.read<uint16_t>(what);
    case ValueType::I16: return c.read<int16_t>(what);
    case ValueType::U32: return c.read<uint32_t>(what);
    case ValueType::I32: return c.read<int32_t>(what);
    case ValueType::I64: return c.read<int64_t>(what);
    case ValueType::BOOL: return c.read<uint8_t>(what) != 0 ? 1 : 0;
    default: c.fail("internal: read_small_int on " + std::string(value_type_name(t)));
  }
}

Value read_value(Cursor& c, ValueType t, const std::string& what, int depth);

Value read_array(Cursor& c, const std::string& what, int depth) {
  Value v;
  v.type = ValueType::ARRAY;
  const auto elem = c.read<uint32_t>(what);
  if (!is_valid_value_type(elem)) c.fail(what + " is an array of unknown value type " + std::to_string(elem));
  v.elem_type = static_cast<ValueType>(elem);
  const auto count = c.read<uint64_t>(what);
  if (count > c.remaining() / min_element_size(v.elem_type))
    c.fail("array length " + std::to_string(count) + " of " + what + " exceeds the file (" +
           std::to_string(c.remaining()) + " bytes left at offset " + std::to_string(c.pos()) +
           "; truncated or corrupt file)");
  switch (v.elem_type) {
    case ValueType::STRING:
      // No reserve: each string costs at least 8 input bytes, so growth stays proportional to input.
      for (uint64_t i = 0; i < count; ++i) v.str_array.push_back(c.read_string(what));
      break;
    case ValueType::ARRAY:
      if (depth + 1 >= kMaxArrayNesting)
        c.fail(what + " nests arrays deeper than " + std::to_string(kMaxArrayNesting) + " levels");
      for (uint64_t i = 0; i < count; ++i) v.nested.push_back(read_array(c, what, depth + 1));
      break;
    case ValueType::U64:
      reserve_bounded(v.uint_array, count);
      for (uint64_t i = 0; i < count; ++i) v.uint_array.push_back(c.read<uint64_t>(what));
      break;
    case ValueType::F32:
      reserve_bounded(v.float_array, count);
      for (uint64_t i = 0; i < count; ++i) v.float_array.push_back(c.read<float>(what));
      break;
    case ValueType::F64:
      reserve_bounded(v.float_array, count);
      for (uint64_t i = 0; i < count; ++i) v.float_array.push_back(c.read<double>(what));
      break;
    default:
      reserve_bounded(v.int_array, count);
      for (uint64_t i = 0; i < count; ++i) v.int_array.push_back(read_small_int(c, v.elem_type, what));
      break;
  }
  return v;
}

Value read_value(Cursor& c, ValueType t, const std::string& what, int depth) {
  if (t == ValueType::ARRAY) return read_array(c, what, depth);
  Value v;
  v.type = t;
  switch (t) {
    case ValueType::STRING: v.scalar = c.read_string(what); break;
    case ValueType::F32: v.scalar = static_cast<double>(c.read<float>(what)); break;
    case ValueType::F64: v.scalar = c.read<double>(what); break;
    case ValueType::U64: v.scalar = c.read<uint64_t>(what); break;
    case ValueType::BOOL: v.scalar = static_cast<uint64_t>(c.read<uint8_t>(what) != 0); break;
    default:
      if (is_signed_type(t)) v.scalar = read_small_int(c, t, what);
      else v.scalar = static_cast<uint64_t>(read_small_int(c, t, what));
      break;
  }
  return v;
}

std::string shape_string(std::span<const int64_t> ne) {
  std::string s = "[";
  for (size_t i = 0; i < ne.size(); ++i) s += (i ? ", " : "") + std::to_string(ne[i]);
  return s + "]";
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// Opening

std::unique_ptr<Reader> Reader::open(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(path + ": cannot open: " + std::strerror(errno));
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(path + ": not a regular file");
  }
  std::unique_ptr<Reader> r(new Reader());
  r->path_ = path;
  r->size_ = static_cast<uint64_t>(st.st_size);
  if (r->size_ > 0) {
    void* m = ::mmap(nullptr, r->size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (m == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(path + ": cannot map: " + std::strerror(err));
    }
    r->mapping_ = m;
    r->base_ = static_cast<const uint8_t*>(m);
  }
  ::close(fd);  // the mapping stays valid without the descriptor
  r->parse();
  return r;
}

std::unique_ptr<Reader> Reader::from_memory(std::span<const uint8_t> bytes, std::string name) {
  std::unique_ptr<Reader> r(new Reader());
  r->path_ = std::move(name);
  r->base_ = bytes.data();
  r->size_ = bytes.size();
  r->parse();
  return r;
}

Reader::~Reader() {
  if (mapping_) ::munmap(mapping_, size_);
}

// ---------------------------------------------------------------------------------------------
// Parsing

void Reader::parse() {
  Cursor c(base_, size_, path_);

  // Header.
  const auto magic = c.read<uint32_t>("the header");
  if (magic != kMagic) {
    std::string shown;
    for (int i = 0; i < 4; ++i) {
      const char ch = static_cast<char>((magic >> (8 * i)) & 0xff);
      shown += (ch >= 0x20 && ch < 0x7f) ? std::string(1, ch) : "?";
    }
    c.fail("not a GGUF file: bad magic '" + shown + "' (expected 'GGUF')");
  }
  version_ = c.read<uint32_t>("the header");
  if (version_ == 1)
    c.fail("GGUF version 1 is not supported (agentkv reads versions 2 and 3; re-convert the model)");
  if (version_ != 2 && version_ != 3) {
    if ((version_ & 0xffff) == 0 && (version_ >> 24) >= 1 && (version_ >> 24) <= 3)
      c.fail("big-endian GGUF files are not supported (version field reads 0x" + hex32(version_) + ")");
    c.fail("unsupported GGUF version " + std::to_string(version_) + " (agentkv reads versions 2 and 3)");
  }
  const auto n_tensors = c.read<uint64_t>("the header");
  const auto n_kv = c.read<uint64_t>("the header");
  if (n_kv > c.remaining() / kMinKvBytes)
    c.fail("metadata key count " + std::to_string(n_kv) + " is absurd for a file of " + std::to_string(size_) +
           " bytes (corrupt or truncated file)");
  if (n_tensors > c.remaining() / kMinTensorInfoBytes ||
      n_kv * kMinKvBytes + n_tensors * kMinTensorInfoBytes > c.remaining())
    c.fail("tensor count " + std::to_string(n_tensors) + " is absurd for a file of " + std::to_string(size_) +
           " bytes (corrupt or truncated file)");

  // Metadata.
  metadata_ = Metadata(path_);
  for (uint64_t i = 0; i < n_kv; ++i) {
    std::string key = c.read_string("metadata key #" + std::to_string(i));
    const std::string what = "key " + quoted(key);
    const auto type = c.read<uint32_t>(what);
    if (!is_valid_value_type(type)) c.fail(what + " has unknown value type " + std::to_string(type));
    Value value = read_value(c, static_cast<ValueType>(type), what, 0);
    metadata_.add(std::move(key), std::move(value));
  }

  if (metadata_.has("general.alignment")) {
    const uint64_t a = *metadata_.get_uint("general.alignment");
    if (a == 0 || !std::has_single_bit(a) || a > std::numeric_limits<uint32_t>::max())
      c.fail("key 'general.alignment' is " + std::to_string(a) + ", which is not a nonzero power of two");
    alignment_ = a;
  } else {
    alignment_ = kDefaultAlignment;
  }

  // Tensor table.
  reserve_bounded(tensors_, n_tensors);
  for (uint64_t i = 0; i < n_tensors; ++i) {
    TensorInfo t;
    t.name = c.read_string("name of tensor #" + std::to_string(i));
    const std::string what = "tensor " + quoted(t.name);
    const auto n_dims = c.read<uint32_t>(what + " info");
    if (n_dims == 0 || n_dims > static_cast<uint32_t>(kMaxDims))
      c.fail(what + " has " + std::to_string(n_dims) + " dimensions (must be 1 to " + std::to_string(kMaxDims) + ")");
    t.n_dims = static_cast<int>(n_dims);
    for (uint32_t d = 0; d < n_dims; ++d) {
      t.ne[d] = static_cast<int64_t>(c.read<uint64_t>(what + " info"));
      if (t.ne[d] <= 0)
        c.fail(what + " has dimension " + std::to_string(d) + " of size " + std::to_string(t.ne[d]) + " (must be positive)");
    }
    int64_t n_elements = 1;
    for (int64_t n : t.ne)
      if (__builtin_mul_overflow(n_elements, n, &n_elements))
        c.fail(what + " element count overflows (shape " + shape_string(std::span(t.ne).first(n_dims)) + ")");
    const auto type_id = c.read<uint32_t>(what + " info");
    const GgmlTypeInfo* info = ggml_type_info(type_id);
    if (!info) c.fail(what + " has unknown type id " + std::to_string(type_id));
    if (info->agentkv_only)
      c.fail(what + " has type " + std::string(info->name) + ", an agentkv KV cache type that GGUF tensors cannot have");
    t.type = info->type;
    if (t.ne[0] % info->block_size != 0)
      c.fail(what + " has ne[0] = " + std::to_string(t.ne[0]) + ", not a multiple of the " + std::string(info->name) +
             " block size " + std::to_string(info->block_size));
    const uint64_t blocks = static_cast<uint64_t>(n_elements / info->block_size);
    if (__builtin_mul_overflow(blocks, static_cast<uint64_t>(info->type_size), &t.nbytes))
      c.fail(what + " byte size overflows (shape " + shape_string(std::span(t.ne).first(n_dims)) + ")");
    t.offset = c.read<uint64_t>(what + " info");
    if (t.offset % alignment_ != 0)
      c.fail(what + " data offset " + std::to_string(t.offset) + " is not a multiple of the alignment " +
             std::to_string(alignment_));
    if (tensor_index_.count(t.name)) c.fail("duplicate tensor name " + quoted(t.name));
    tensor_index_.emplace(t.name, tensors_.size());
    tensors_.push_back(std::move(t));
  }

  // Data section: starts at the next multiple of the alignment after the tensor table.
  data_offset_ = c.pos() + (alignment_ - c.pos() % alignment_) % alignment_;
  // The padding before it is part of the file (a writer always puts it there): a data section
  // that would start past the end is a truncated file, or an alignment no real file has (2^31).
  // Except with no tensors at all: llama.cpp writes vocabulary-only files (its tokenizer tests')
  // ending right after the metadata, and reads them back — but only the padding a default
  // alignment would need may be missing (an absurd alignment stays refused, as above).
  if (tensors_.empty() && c.pos() == size_ && data_offset_ - size_ < kDefaultAlignment) data_offset_ = size_;
  if (data_offset_ > size_)
    c.fail("the data section would start at byte " + std::to_string(data_offset_) + " (alignment " +
           std::to_string(alignment_) + "), past the end of the " + std::to_string(size_) + "-byte file");
  for (auto& t : tensors_) {
    uint64_t begin = 0, end = 0;
    if (__builtin_add_overflow(data_offset_, t.offset, &begin) || __builtin_add_overflow(begin, t.nbytes, &end) ||
        end > size_)
      c.fail("tensor " + quoted(t.name) + " data out of bounds (truncated file?): " + std::to_string(t.nbytes) +
             " bytes at offset " + std::to_string(t.offset) + " of the data section, which starts at byte " +
             std::to_string(data_offset_) + " of a " + std::to_string(size_) + "-byte file");
    t.data = base_ + begin;
  }
  std::vector<const TensorInfo*> by_offset;
  by_offset.reserve(tensors_.size());
  for (const auto& t : tensors_) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const TensorInfo* a, const TensorInfo* b) { return a->offset < b->offset; });
  for (size_t i = 1; i < by_offset.size(); ++i) {
    const TensorInfo& prev = *by_offset[i - 1];
    const TensorInfo& cur = *by_offset[i];
    if (prev.offset + prev.nbytes > cur.offset)  // no overflow: both ends were checked against the file
      c.fail("tensor " + quoted(prev.name) + " data overlaps tensor " + quoted(cur.name) + " (offsets " +
             std::to_string(prev.offset) + " and " + std::to_string(cur.offset) + ")");
  }
}

// ---------------------------------------------------------------------------------------------
// Lookups

const TensorInfo* Reader::find_tensor(std::string_view name) const {
  auto it = tensor_index_.find(name);
  return it == tensor_index_.end() ? nullptr : &tensors_[it->second];
}

const TensorInfo& Reader::require_tensor(std::string_view name, std::span<const int64_t> expected_ne) const {
  const TensorInfo* t = find_tensor(name);
  if (!t) throw Error(path_ + ": missing required tensor " + quoted(name));
  // Trailing dimensions of 1 are implicit on both sides, as in ggml.
  bool match = expected_ne.size() <= static_cast<size_t>(kMaxDims);
  for (int d = 0; match && d < kMaxDims; ++d) {
    const int64_t want = static_cast<size_t>(d) < expected_ne.size() ? expected_ne[d] : 1;
    match = t->ne[d] == want;
  }
  if (!match)
    throw Error(path_ + ": tensor " + quoted(name) + " has shape " + shape_string(std::span(t->ne).first(t->n_dims)) +
                ", expected " + shape_string(expected_ne));
  return *t;
}

void Reader::release_metadata(std::initializer_list<std::string_view> keys) { metadata_.release(keys); }

}  // namespace agentkv::gguf
