// GGUF reader/writer: the fixture models (facts from the fixture README and llama.cpp's converter),
// an exact writer round trip of every value type, and one corrupted image per validation rule.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "gguf/gguf.h"
#include "fixtures.h"

using agentkv::Error;
using agentkv::GgmlType;
using namespace agentkv::gguf;
using Bytes = std::vector<uint8_t>;

namespace {

const std::string kModels = std::string(AGENTKV_FIXTURES_DIR) + "/models/";

// ---------------------------------------------------------------------------------------------
// Fixture models

struct FixtureFacts {
  const char* file;
  const char* arch;
  uint64_t block_count;
  int64_t n_embd;
  size_t n_tensors;
  const char* attn_q;  // first full-attention layer's Q projection
  GgmlType attn_q_type;
  std::vector<int64_t> attn_q_shape;
};

const std::vector<FixtureFacts>& fixtures() {
  static const std::vector<FixtureFacts> f = {
      // qwen3: token_embd, output_norm, 11 tensors per layer, tied output.
      {"qwen3-micro.gguf", "qwen3", 2, 64, 2 + 2 * 11, "blk.0.attn_q.weight", GgmlType::F16, {64, 64}},
      {"qwen3-micro-q8_0.gguf", "qwen3", 2, 64, 2 + 2 * 11, "blk.0.attn_q.weight", GgmlType::Q8_0, {64, 64}},
      {"qwen3-tiny-q4_k_m.gguf", "qwen3", 4, 256, 2 + 4 * 11, "blk.0.attn_q.weight", GgmlType::Q4_K, {256, 256}},
      // qwen35: token_embd, output_norm, output; 3 Gated-DeltaNet layers (14 tensors each with a dense
      // FFN), then one gated-attention layer (11; attn_q holds Q and the gate: 2 heads * 32 * 2).
      {"qwen35-micro.gguf", "qwen35", 4, 64, 3 + 3 * 14 + 11, "blk.3.attn_q.weight", GgmlType::F16, {64, 128}},
      // MoE FFN: router, 3 expert tensors, shared-expert gate input and 3 shared-expert tensors = 8
      // instead of 3 tensors per layer.
      {"qwen35moe-micro.gguf", "qwen35moe", 4, 64, 3 + 3 * 19 + 16, "blk.3.attn_q.weight", GgmlType::F16, {64, 128}},
      {"qwen35moe-micro-q8_0.gguf", "qwen35moe", 4, 64, 3 + 3 * 19 + 16, "blk.3.attn_q.weight", GgmlType::Q8_0, {64, 128}},
  };
  return f;
}

TEST(GgufFixtures, OpensEveryModelWithKnownValues) {
  AGENTKV_NEEDS_FIXTURES();
  for (const auto& f : fixtures()) {
    SCOPED_TRACE(f.file);
    auto r = Reader::open(kModels + f.file);
    EXPECT_EQ(r->version(), 3u);
    EXPECT_EQ(r->alignment(), 32u);
    EXPECT_EQ(r->data_offset() % 32, 0u);
    const std::string arch = r->metadata().require_string("general.architecture");
    EXPECT_EQ(arch, f.arch);
    EXPECT_EQ(r->metadata().require_uint(arch + ".block_count"), f.block_count);
    EXPECT_EQ(r->metadata().require_uint(arch + ".embedding_length"), static_cast<uint64_t>(f.n_embd));
    EXPECT_EQ(r->tensors().size(), f.n_tensors);
    EXPECT_EQ(r->metadata().get_string("tokenizer.ggml.pre"), "qwen2");
    auto tokens = r->metadata().get_string_array("tokenizer.ggml.tokens");
    ASSERT_TRUE(tokens.has_value());
    EXPECT_EQ(tokens->size(), 151936u);
    EXPECT_EQ((*tokens)[0], "!");
    EXPECT_EQ(r->metadata().get_int_array("tokenizer.ggml.token_type")->size(), 151936u);
    EXPECT_EQ(r->metadata().get_uint("tokenizer.ggml.eos_token_id"), 151645u);  // <|im_end|>
    EXPECT_EQ(r->metadata().get_bool("tokenizer.ggml.add_bos_token"), false);
    EXPECT_NEAR(r->metadata().require_float(arch + ".attention.layer_norm_rms_epsilon"), 1e-6, 1e-12);

    const TensorInfo& q = r->require_tensor(f.attn_q, f.attn_q_shape);
    EXPECT_EQ(q.type, f.attn_q_type);
    EXPECT_EQ(q.n_dims, 2);
    // Mapped, not copied: tensor data points into the file mapping.
    for (const auto& t : r->tensors()) {
      ASSERT_GE(t.data, r->base() + r->data_offset()) << t.name;
      ASSERT_LE(t.data + t.nbytes, r->base() + r->file_size()) << t.name;
    }
    // Norm weights are 1 in every fixture (README), stored as F32.
    const TensorInfo& norm = r->require_tensor("output_norm.weight", std::vector<int64_t>{f.n_embd});
    ASSERT_EQ(norm.type, GgmlType::F32);
    for (int64_t i = 0; i < norm.ne[0]; ++i) {
      float v;
      std::memcpy(&v, norm.data + 4 * i, 4);
      ASSERT_EQ(v, 1.0f) << i;
    }
  }
}

TEST(GgufFixtures, QuantizedTypesAndSizes) {
  AGENTKV_NEEDS_FIXTURES();
  auto r = Reader::open(kModels + "qwen3-tiny-q4_k_m.gguf");
  const TensorInfo* embd = r->find_tensor("token_embd.weight");
  ASSERT_NE(embd, nullptr);
  // Q4_K_M keeps the (tied) embedding/output matrix at Q6_K: 256 values per 210-byte block.
  EXPECT_EQ(embd->type, GgmlType::Q6_K);
  EXPECT_EQ(embd->nbytes, 151936u * 210u);
  EXPECT_EQ(r->find_tensor("no.such.tensor"), nullptr);

  auto m = Reader::open(kModels + "qwen35moe-micro.gguf");
  const TensorInfo& experts = m->require_tensor("blk.0.ffn_up_exps.weight", std::vector<int64_t>{64, 64, 4});
  EXPECT_EQ(experts.n_dims, 3);
  EXPECT_EQ(m->metadata().get_int_array("qwen35moe.rope.dimension_sections"), (std::vector<int64_t>{3, 3, 2, 0}));
  // ssm_a is negative in the fixtures (README).
  const TensorInfo& a = m->require_tensor("blk.0.ssm_a", std::vector<int64_t>{4});
  for (int i = 0; i < 4; ++i) {
    float v;
    std::memcpy(&v, a.data + 4 * i, 4);
    EXPECT_LT(v, 0.0f);
  }
}

TEST(GgufFixtures, RequireTensorShapeMismatchAndMissing) {
  AGENTKV_NEEDS_FIXTURES();
  auto r = Reader::open(kModels + "qwen3-micro.gguf");
  try {
    r->require_tensor("blk.0.attn_q.weight", std::vector<int64_t>{64, 128});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tensor 'blk.0.attn_q.weight' has shape [64, 64], expected [64, 128]"),
              std::string::npos)
        << e.what();
    EXPECT_NE(std::string(e.what()).find("qwen3-micro.gguf"), std::string::npos) << e.what();
  }
  try {
    r->require_tensor("output.weight", std::vector<int64_t>{64, 151936});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("missing required tensor 'output.weight'"), std::string::npos) << e.what();
  }
}

TEST(GgufFixtures, NotAFileIsAnError) {
  EXPECT_THROW(Reader::open(kModels + "does-not-exist.gguf"), Error);
  EXPECT_THROW(Reader::open(kModels), Error);  // a directory
}

// ---------------------------------------------------------------------------------------------
// Writer round trip

bool same_value(const Value& a, const Value& b) {
  if (a.type != b.type) return false;
  if (a.type != ValueType::ARRAY) return a.scalar == b.scalar;
  if (a.elem_type != b.elem_type || a.array_size() != b.array_size()) return false;
  if (a.str_array != b.str_array || a.int_array != b.int_array || a.uint_array != b.uint_array ||
      a.float_array != b.float_array || a.nested.size() != b.nested.size())
    return false;
  for (size_t i = 0; i < a.nested.size(); ++i)
    if (!same_value(a.nested[i], b.nested[i])) return false;
  return true;
}

Value array_value(ValueType elem) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = elem;
  return v;
}

Bytes pattern(size_t n, uint8_t seed) {
  Bytes b(n);
  for (size_t i = 0; i < n; ++i) b[i] = static_cast<uint8_t>(seed + i * 7);
  return b;
}

Writer every_type_writer() {
  Writer w;
  w.set_u8("v.u8", 200);
  w.set_i8("v.i8", -100);
  w.set_u16("v.u16", 60000);
  w.set_i16("v.i16", -30000);
  w.set_u32("v.u32", 4000000000u);
  w.set_i32("v.i32", -2000000000);
  w.set_u64("v.u64", (uint64_t{1} << 63) + 5);
  w.set_i64("v.i64", std::numeric_limits<int64_t>::min());
  w.set_f32("v.f32", 0.1f);
  w.set_f64("v.f64", 0.1);
  w.set_bool("v.bool", true);
  w.set_string("v.string", std::string("h\xC3\xA9llo\0world", 12));
  w.set_string("v.empty_string", "");
  w.set_array_string("a.string", {"a", "", "\xE4\xB8\xAD"});
  w.set_array_i32("a.i32", {-1, 0, std::numeric_limits<int32_t>::max()});
  w.set_array_u32("a.u32", {0, 4000000000u});
  w.set_array_f32("a.f32", {1.5f, -0.25f, 3e-8f});
  w.set_array_bool("a.bool", {true, false, true});
  Value u8 = array_value(ValueType::U8);
  u8.int_array = {0, 255};
  w.set_value("a.u8", u8);
  Value i8 = array_value(ValueType::I8);
  i8.int_array = {-128, 127};
  w.set_value("a.i8", i8);
  Value u16 = array_value(ValueType::U16);
  u16.int_array = {65535};
  w.set_value("a.u16", u16);
  Value i16 = array_value(ValueType::I16);
  i16.int_array = {-32768};
  w.set_value("a.i16", i16);
  Value u64 = array_value(ValueType::U64);
  u64.uint_array = {std::numeric_limits<uint64_t>::max(), 1};
  w.set_value("a.u64", u64);
  Value i64 = array_value(ValueType::I64);
  i64.int_array = {std::numeric_limits<int64_t>::min(), 42};
  w.set_value("a.i64", i64);
  Value f64 = array_value(ValueType::F64);
  f64.float_array = {0.1, -1e300};
  w.set_value("a.f64", f64);
  w.set_value("a.empty", array_value(ValueType::I32));
  // Arrays of arrays: [[1, 2], [], [3]] and [[["x"]], []].
  Value nested = array_value(ValueType::ARRAY);
  for (std::vector<int64_t> ints : {std::vector<int64_t>{1, 2}, std::vector<int64_t>{}, std::vector<int64_t>{3}}) {
    Value inner = array_value(ValueType::I32);
    inner.int_array = ints;
    nested.nested.push_back(inner);
  }
  w.set_value("a.nested", nested);
  Value deep = array_value(ValueType::ARRAY);
  Value mid = array_value(ValueType::ARRAY);
  Value leaf = array_value(ValueType::STRING);
  leaf.str_array = {"x"};
  mid.nested.push_back(leaf);
  deep.nested.push_back(mid);
  deep.nested.push_back(array_value(ValueType::ARRAY));
  w.set_value("a.deep", deep);
  w.set_alignment(64);

  w.add_tensor("t.f32", GgmlType::F32, {3, 2}, pattern(24, 1));
  w.add_tensor("t.f16", GgmlType::F16, {5}, pattern(10, 2));
  w.add_tensor("t.q8_0", GgmlType::Q8_0, {64, 3}, pattern(2 * 34 * 3, 3));
  w.add_tensor("t.q4_k", GgmlType::Q4_K, {256, 1, 2}, pattern(144 * 2, 4));
  w.add_tensor("t.i32", GgmlType::I32, {2, 2, 2, 2}, pattern(64, 5));
  return w;
}

TEST(GgufWriter, RoundTripsEveryValueTypeExactly) {
  const Writer w = every_type_writer();
  const Bytes image = w.to_bytes();
  auto r = Reader::from_memory(image, "roundtrip.gguf");
  EXPECT_EQ(r->version(), 3u);
  EXPECT_EQ(r->alignment(), 64u);
  EXPECT_EQ(r->data_offset() % 64, 0u);

  EXPECT_EQ(r->metadata().get_uint("v.u8"), 200u);
  EXPECT_EQ(r->metadata().get_int("v.i8"), -100);
  EXPECT_EQ(r->metadata().get_uint("v.u16"), 60000u);
  EXPECT_EQ(r->metadata().get_int("v.i16"), -30000);
  EXPECT_EQ(r->metadata().get_uint("v.u32"), 4000000000u);
  EXPECT_EQ(r->metadata().get_int("v.i32"), -2000000000);
  EXPECT_EQ(r->metadata().get_uint("v.u64"), (uint64_t{1} << 63) + 5);
  EXPECT_EQ(r->metadata().get_int("v.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(r->metadata().get_float("v.f32"), static_cast<double>(0.1f));  // f32 precision, exactly
  EXPECT_EQ(r->metadata().get_float("v.f64"), 0.1);
  EXPECT_EQ(r->metadata().get_bool("v.bool"), true);
  EXPECT_EQ(r->metadata().get_string("v.string"), std::string("h\xC3\xA9llo\0world", 12));
  EXPECT_EQ(r->metadata().get_string("v.empty_string"), "");
  EXPECT_EQ(r->metadata().get_string_array("a.string"), (std::vector<std::string>{"a", "", "\xE4\xB8\xAD"}));
  EXPECT_EQ(r->metadata().get_int_array("a.i32"), (std::vector<int64_t>{-1, 0, std::numeric_limits<int32_t>::max()}));
  EXPECT_EQ(r->metadata().get_int_array("a.u32"), (std::vector<int64_t>{0, 4000000000}));
  EXPECT_EQ(r->metadata().get_float_array("a.f32"), (std::vector<double>{1.5, -0.25, static_cast<double>(3e-8f)}));
  EXPECT_EQ(r->metadata().find("a.bool")->int_array, (std::vector<int64_t>{1, 0, 1}));
  EXPECT_EQ(r->metadata().find("a.u64")->uint_array, (std::vector<uint64_t>{std::numeric_limits<uint64_t>::max(), 1}));
  EXPECT_EQ(r->metadata().get_float_array("a.f64"), (std::vector<double>{0.1, -1e300}));
  EXPECT_EQ(r->metadata().find("a.empty")->array_size(), 0u);
  const Value* nested = r->metadata().find("a.nested");
  ASSERT_NE(nested, nullptr);
  ASSERT_EQ(nested->elem_type, ValueType::ARRAY);
  ASSERT_EQ(nested->array_size(), 3u);
  EXPECT_EQ(nested->nested[0].int_array, (std::vector<int64_t>{1, 2}));
  EXPECT_EQ(nested->nested[1].array_size(), 0u);
  EXPECT_EQ(r->metadata().find("a.deep")->nested[0].nested[0].str_array, (std::vector<std::string>{"x"}));

  // Same keys, same order, same values as written (general.alignment where set_alignment put it).
  std::vector<std::string> keys;
  for (const auto& [k, v] : r->metadata().entries()) keys.push_back(k);
  ASSERT_EQ(keys.size(), 13u + 15u + 1u);
  EXPECT_EQ(keys.front(), "v.u8");
  EXPECT_EQ(keys[13], "a.string");
  EXPECT_EQ(keys[27], "a.deep");
  EXPECT_EQ(keys.back(), "general.alignment");

  ASSERT_EQ(r->tensors().size(), 5u);
  const std::vector<std::string> names = {"t.f32", "t.f16", "t.q8_0", "t.q4_k", "t.i32"};
  const std::vector<uint8_t> seeds = {1, 2, 3, 4, 5};
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorInfo& t = r->tensors()[i];
    EXPECT_EQ(t.name, names[i]);
    EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_EQ((t.data - r->base()) % 64, 0);
    EXPECT_EQ(Bytes(t.data, t.data + t.nbytes), pattern(t.nbytes, seeds[i])) << t.name;
  }
  EXPECT_EQ(r->require_tensor("t.q4_k", std::vector<int64_t>{256, 1, 2}).n_dims, 3);
  EXPECT_EQ(r->require_tensor("t.i32", std::vector<int64_t>{2, 2, 2, 2}).nbytes, 64u);

  // Copying everything the reader saw into a new writer reproduces the file byte for byte.
  Writer copy;
  for (const auto& [k, v] : r->metadata().entries()) copy.set_value(k, v);
  for (const auto& t : r->tensors())
    copy.add_tensor(t.name, t.type, std::vector<int64_t>(t.ne.begin(), t.ne.begin() + t.n_dims),
                    Bytes(t.data, t.data + t.nbytes));
  EXPECT_EQ(copy.to_bytes(), image);
  for (const auto& [k, v] : r->metadata().entries()) {
    SCOPED_TRACE(k);
    EXPECT_TRUE(same_value(v, *Reader::from_memory(image, "again.gguf")->metadata().find(k)));
  }
}

TEST(GgufWriter, FileRoundTripThroughMmap) {
  const Writer w = every_type_writer();
  const std::string path = std::string(AGENTKV_BINARY_DIR) + "/gguf_test_roundtrip.gguf";
  w.write(path);
  {
    auto r = Reader::open(path);
    EXPECT_EQ(r->file_size(), w.to_bytes().size());
    std::ifstream in(path, std::ios::binary);
    const Bytes on_disk((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(on_disk, w.to_bytes());
    EXPECT_EQ(Bytes(r->base(), r->base() + r->file_size()), on_disk);
  }
  std::filesystem::remove(path);
  EXPECT_THROW(w.write("/nonexistent-dir/x.gguf"), Error);
}

TEST(GgufWriter, AlignmentKeyOnlyWhenSet) {
  Writer w;
  w.set_string("general.architecture", "test");
  w.add_tensor("a", GgmlType::F32, {3}, pattern(12, 0));
  w.add_tensor("b", GgmlType::F32, {1}, pattern(4, 0));
  auto r = Reader::from_memory(w.to_bytes(), "plain.gguf");
  EXPECT_FALSE(r->metadata().has("general.alignment"));
  EXPECT_EQ(r->alignment(), 32u);
  EXPECT_EQ(r->tensors()[1].offset, 32u);
  EXPECT_EQ(r->data_offset() % 32, 0u);

  // Setting a key twice keeps one entry in its first position.
  w.set_string("general.architecture", "again");
  auto r2 = Reader::from_memory(w.to_bytes(), "plain.gguf");
  EXPECT_EQ(r2->metadata().entries().size(), 1u);
  EXPECT_EQ(r2->metadata().get_string("general.architecture"), "again");

  EXPECT_THROW(w.set_alignment(0), Error);
  EXPECT_THROW(w.set_alignment(48), Error);
  EXPECT_THROW(w.add_tensor("a", GgmlType::F32, {1}, pattern(4, 0)), Error);        // duplicate name
  EXPECT_THROW(w.add_tensor("c", GgmlType::F32, {2}, pattern(4, 0)), Error);        // wrong byte count
  EXPECT_THROW(w.add_tensor("d", GgmlType::Q8_0, {16}, pattern(17, 0)), Error);     // not whole blocks
  EXPECT_THROW(w.add_tensor("e", GgmlType::F32, {1, 1, 1, 1, 1}, pattern(4, 0)), Error);
}

TEST(GgufReader, Version2IsAccepted) {
  Writer w;
  w.set_u32("k", 7);
  Bytes img = w.to_bytes();
  img[4] = 2;
  auto r = Reader::from_memory(img, "v2.gguf");
  EXPECT_EQ(r->version(), 2u);
  EXPECT_EQ(r->metadata().get_uint("k"), 7u);
}

TEST(GgufReader, TypedGetters) {
  Writer w;
  w.set_u32("u", 5);
  w.set_i32("neg", -5);
  w.set_u64("huge", std::numeric_limits<uint64_t>::max());
  w.set_f32("f", 2.5f);
  w.set_string("s", "text");
  w.set_array_u32("arr", {1, 2});
  w.set_bool("b", false);
  auto r = Reader::from_memory(w.to_bytes(), "getters.gguf");
  EXPECT_EQ(r->metadata().get_int("u"), 5);             // any integer type that fits
  EXPECT_EQ(r->metadata().get_float("u"), 5.0);         // integers are numbers too
  EXPECT_EQ(r->metadata().get_float_array("arr"), (std::vector<double>{1, 2}));
  EXPECT_EQ(r->metadata().get_uint("absent"), std::nullopt);
  EXPECT_EQ(r->metadata().get_bool("b"), false);
  EXPECT_THROW(r->metadata().get_uint("neg"), Error);   // does not fit
  EXPECT_THROW(r->metadata().get_int("huge"), Error);   // does not fit
  EXPECT_THROW(r->metadata().get_uint("f"), Error);
  EXPECT_THROW(r->metadata().get_bool("u"), Error);
  EXPECT_THROW(r->metadata().get_string_array("arr"), Error);
  EXPECT_THROW(r->metadata().get_int_array("s"), Error);
  EXPECT_EQ(r->metadata().require_float("f"), 2.5);
}

// ---------------------------------------------------------------------------------------------
// Corrupted images: each breaks one rule of a valid file and expects an Error naming the file and
// the offending key or tensor.

const char* const kBadName = "corrupt.gguf";

// A small valid file: scalar, string and string-array keys, an F32 and a Q8_0 tensor.
Writer base_writer() {
  Writer w;
  w.set_string("general.architecture", "test");
  w.set_u32("test.count", 7);
  w.set_string("test.label", "hello");
  w.set_array_string("test.words", {"alpha", "beta", "gamma"});
  w.set_array_i32("test.numbers", {1, 2, 3});
  w.set_u64("test.tail", 99);
  w.add_tensor("tensor.first", GgmlType::F32, {8, 2}, pattern(64, 9));
  w.add_tensor("tensor.second", GgmlType::Q8_0, {64, 2}, pattern(2 * 2 * 34, 8));
  return w;
}

size_t find_bytes(const Bytes& img, std::string_view s) {
  for (size_t i = 0; i + s.size() <= img.size(); ++i)
    if (std::memcmp(img.data() + i, s.data(), s.size()) == 0) return i;
  ADD_FAILURE() << "'" << s << "' not in image";
  return 0;
}

template <class T>
void poke(Bytes& img, size_t at, T v) {
  std::memcpy(img.data() + at, &v, sizeof(T));
}

template <class T>
T peek(const Bytes& img, size_t at) {
  T v;
  std::memcpy(&v, img.data() + at, sizeof(T));
  return v;
}

// Field offsets of a tensor's info record, found through its name.
struct InfoAt {
  size_t n_dims, ne, type, offset;
};
InfoAt info_at(const Bytes& img, const std::string& name) {
  const size_t p = find_bytes(img, name) + name.size();
  const uint32_t n_dims = peek<uint32_t>(img, p);
  return {p, p + 4, p + 4 + 8 * n_dims, p + 4 + 8 * n_dims + 4};
}

std::string error_of(const Bytes& img) {
  try {
    Reader::from_memory(img, kBadName);
  } catch (const Error& e) {
    return e.what();
  }
  return "<no error>";
}

void expect_error(const Bytes& img, std::initializer_list<std::string_view> words) {
  const std::string msg = error_of(img);
  EXPECT_NE(msg.find(kBadName), std::string::npos) << msg;
  for (auto w : words) EXPECT_NE(msg.find(w), std::string::npos) << "'" << w << "' not in: " << msg;
}

// llama.cpp's vocabulary-only files end right after the metadata, without padding up to the
// empty data section; a file with tensors cut there is still a truncated file.
TEST(GgufReader, TensorlessFileWithoutPaddingOpens) {
  Writer w;
  w.set_string("general.architecture", "test");
  w.set_array_string("tokenizer.ggml.tokens", {"a", "b"});
  w.set_string("test.last", "end");
  Bytes img = w.to_bytes();
  const size_t end = find_bytes(img, "test.last") + 9 + 4 + 8 + 3;  // key, type, length, "end"
  ASSERT_LT(end, img.size());  // the writer padded it
  img.resize(end);
  auto r = Reader::from_memory(img, kBadName);
  EXPECT_TRUE(r->tensors().empty());
  EXPECT_EQ(*r->metadata().get_string("test.last"), "end");

  // Missing padding of an absurd alignment (2^31, found by gguf_fuzz) is still a truncated file.
  Writer aligned;
  aligned.set_alignment(64);
  aligned.set_string("test.last", "end");
  Bytes unpadded = aligned.to_bytes();
  unpadded.resize(find_bytes(unpadded, "test.last") + 9 + 4 + 8 + 3);
  poke<uint32_t>(unpadded, find_bytes(unpadded, "general.alignment") + 17 + 4, uint32_t{1} << 31);
  expect_error(unpadded, {"past the end"});

  Writer with_tensor = base_writer();
  Bytes cut = with_tensor.to_bytes();
  cut.resize(info_at(cut, "tensor.second").offset + 8);  // the tensor table's end, no padding, no data
  expect_error(cut, {"past the end"});
}

TEST(GgufBadFile, BaseImageIsValid) {
  auto r = Reader::from_memory(base_writer().to_bytes(), kBadName);
  EXPECT_EQ(r->tensors().size(), 2u);
}

TEST(GgufBadFile, WrongMagic) {
  Bytes img = base_writer().to_bytes();
  img[0] = 'X';
  expect_error(img, {"magic"});
}

TEST(GgufBadFile, Version1Rejected) {
  Bytes img = base_writer().to_bytes();
  poke<uint32_t>(img, 4, 1);
  expect_error(img, {"version 1", "not supported"});
}

TEST(GgufBadFile, UnsupportedVersion) {
  Bytes img = base_writer().to_bytes();
  poke<uint32_t>(img, 4, 4);
  expect_error(img, {"unsupported GGUF version 4"});
}

TEST(GgufBadFile, BigEndian) {
  Bytes img = base_writer().to_bytes();
  poke<uint32_t>(img, 4, 0x03000000);
  expect_error(img, {"big-endian"});
}

TEST(GgufBadFile, TruncatedHeader) {
  Bytes img = base_writer().to_bytes();
  img.resize(12);
  expect_error(img, {"truncated", "header"});
  expect_error(Bytes{}, {"truncated", "header"});
}

TEST(GgufBadFile, TruncatedMetadata) {
  Bytes scalar = base_writer().to_bytes();
  scalar.resize(find_bytes(scalar, "test.tail") + 9 + 4 + 2);  // inside the u64 value
  expect_error(scalar, {"truncated file: key 'test.tail' needs 8 bytes"});
  // Cut inside an array: its length can no longer fit in what is left.
  Bytes img = base_writer().to_bytes();
  img.resize(find_bytes(img, "beta") - 3);  // inside the length of the second string of test.words
  expect_error(img, {"truncated", "test.words"});
  Bytes in_string = base_writer().to_bytes();
  in_string.resize(find_bytes(in_string, "beta") + 2);
  expect_error(in_string, {"truncated", "test.words"});
}

TEST(GgufBadFile, TruncatedTensorInfo) {
  Bytes img = base_writer().to_bytes();
  img.resize(info_at(img, "tensor.second").ne + 3);
  expect_error(img, {"truncated", "tensor.second"});
}

TEST(GgufBadFile, TruncatedData) {
  Bytes img = base_writer().to_bytes();
  img.resize(img.size() - 24 - 1);  // the last tensor: 136 bytes + 24 of padding
  expect_error(img, {"truncated", "tensor.second"});
}

TEST(GgufBadFile, StringLengthExceedsFile) {
  Bytes img = base_writer().to_bytes();
  poke<uint64_t>(img, find_bytes(img, "hello") - 8, uint64_t{1} << 40);
  expect_error(img, {"string length", "exceeds the file", "test.label"});
}

TEST(GgufBadFile, KeyLengthExceedsFile) {
  Bytes img = base_writer().to_bytes();
  poke<uint64_t>(img, find_bytes(img, "test.count") - 8, ~uint64_t{0});
  expect_error(img, {"string length", "exceeds the file", "metadata key #1"});
}

TEST(GgufBadFile, ArrayLengthExceedsFile) {
  Bytes img = base_writer().to_bytes();
  poke<uint64_t>(img, find_bytes(img, "alpha") - 16, uint64_t{1} << 61);  // count precedes the first string
  expect_error(img, {"array length", "exceeds the file", "test.words"});
  Bytes ints = base_writer().to_bytes();
  const size_t count_at = find_bytes(ints, "test.numbers") + 12 + 4 + 4;  // key, value type, element type
  ASSERT_EQ(peek<uint64_t>(ints, count_at), 3u);
  poke<uint64_t>(ints, count_at, uint64_t{1} << 62);  // * 4 bytes would overflow 64 bits
  expect_error(ints, {"array length", "test.numbers"});
}

TEST(GgufBadFile, AbsurdMetadataCount) {
  Bytes img = base_writer().to_bytes();
  poke<uint64_t>(img, 16, uint64_t{1} << 60);
  expect_error(img, {"metadata key count", "absurd"});
}

TEST(GgufBadFile, AbsurdTensorCount) {
  Bytes img = base_writer().to_bytes();
  poke<uint64_t>(img, 8, ~uint64_t{0});
  expect_error(img, {"tensor count", "absurd"});
}

TEST(GgufBadFile, UnknownValueType) {
  Bytes img = base_writer().to_bytes();
  poke<uint32_t>(img, find_bytes(img, "test.count") + 10, 13);
  expect_error(img, {"unknown value type 13", "test.count"});
}

TEST(GgufBadFile, ArraysNestedTooDeep) {
  Value v;
  v.type = ValueType::ARRAY;
  v.elem_type = ValueType::I32;
  for (int i = 1; i < kMaxArrayNesting; ++i) {
    Value outer;
    outer.type = ValueType::ARRAY;
    outer.elem_type = ValueType::ARRAY;
    outer.nested.push_back(v);
    v = outer;
  }
  Writer w;
  w.set_value("deep.ok", v);  // exactly kMaxArrayNesting levels: accepted
  EXPECT_EQ(Reader::from_memory(w.to_bytes(), kBadName)->metadata().find("deep.ok")->array_size(), 1u);
  // One level more, written by hand: an array of one array wrapping the value above.
  Bytes img = w.to_bytes();
  const size_t type_at = find_bytes(img, "deep.ok") + 7;
  Bytes wrapper(12);
  poke<uint32_t>(wrapper, 0, static_cast<uint32_t>(ValueType::ARRAY));
  poke<uint64_t>(wrapper, 4, 1);
  img.insert(img.begin() + type_at + 4, wrapper.begin(), wrapper.end());
  expect_error(img, {"nests arrays deeper", "deep.ok"});
}

TEST(GgufBadFile, DuplicateMetadataKey) {
  Writer w = base_writer();
  w.set_u32("dup.aaa", 1);
  w.set_u32("dup.bbb", 2);
  Bytes img = w.to_bytes();
  std::memcpy(img.data() + find_bytes(img, "dup.bbb"), "dup.aaa", 7);
  expect_error(img, {"duplicate metadata key 'dup.aaa'"});
}

TEST(GgufBadFile, AlignmentNotPowerOfTwo) {
  for (uint32_t bad : {0u, 48u}) {
    Writer w = base_writer();
    w.set_alignment(64);
    Bytes img = w.to_bytes();
    poke<uint32_t>(img, find_bytes(img, "general.alignment") + 17 + 4, bad);
    expect_error(img, {"general.alignment", "power of two"});
  }
  // A string where an integer must be (the writer refuses to write it, so rename a key).
  Writer w = base_writer();
  w.set_string("general.alignmenX", "32");
  Bytes img = w.to_bytes();
  img[find_bytes(img, "general.alignmenX") + 16] = 't';
  expect_error(img, {"general.alignment", "type string"});
}

TEST(GgufBadFile, TensorDataOutOfBounds) {
  Bytes img = base_writer().to_bytes();
  poke<uint64_t>(img, info_at(img, "tensor.second").offset, uint64_t{1} << 20);
  expect_error(img, {"tensor 'tensor.second' data out of bounds"});
  poke<uint64_t>(img, info_at(img, "tensor.second").offset, ~uint64_t{31});  // offset + size wraps around
  expect_error(img, {"tensor 'tensor.second' data out of bounds"});
}

TEST(GgufBadFile, OverlappingTensorData) {
  Bytes img = base_writer().to_bytes();
  ASSERT_EQ(peek<uint64_t>(img, info_at(img, "tensor.second").offset), 64u);
  poke<uint64_t>(img, info_at(img, "tensor.second").offset, 32);  // inside tensor.first's 64 bytes
  expect_error(img, {"tensor 'tensor.first' data overlaps tensor 'tensor.second'"});
}

TEST(GgufBadFile, MisalignedTensorOffset) {
  Bytes img = base_writer().to_bytes();
  poke<uint64_t>(img, info_at(img, "tensor.second").offset, 68);
  expect_error(img, {"tensor 'tensor.second'", "offset 68 is not a multiple of the alignment 32"});
}

TEST(GgufBadFile, UnknownTensorType) {
  Bytes img = base_writer().to_bytes();
  poke<uint32_t>(img, info_at(img, "tensor.second").type, 4);  // Q4_2, removed from ggml long ago
  expect_error(img, {"tensor 'tensor.second' has unknown type id 4"});
}

TEST(GgufBadFile, AgentkvKvCacheTypeIsNoTensorType) {
  // tq4 / tq3 exist only in agentkv KV caches and state files (docs/quant-types.md).
  Bytes img = base_writer().to_bytes();
  poke<uint32_t>(img, info_at(img, "tensor.second").type, static_cast<uint32_t>(GgmlType::TQ4));
  expect_error(img, {"tensor 'tensor.second' has type tq4, an agentkv KV cache type"});
  Writer w;
  EXPECT_THROW(w.add_tensor("t", GgmlType::TQ3, {64}, pattern(26, 0)), Error);
}

TEST(GgufBadFile, TooManyDimensions) {
  Bytes img = base_writer().to_bytes();
  poke<uint32_t>(img, info_at(img, "tensor.first").n_dims, 5);
  expect_error(img, {"tensor 'tensor.first' has 5 dimensions"});
  poke<uint32_t>(img, info_at(img, "tensor.first").n_dims, 0);
  expect_error(img, {"tensor 'tensor.first' has 0 dimensions"});
}

TEST(GgufBadFile, ZeroDimension) {
  Bytes img = base_writer().to_bytes();
  poke<int64_t>(img, info_at(img, "tensor.first").ne + 8, 0);
  expect_error(img, {"tensor 'tensor.first' has dimension 1 of size 0"});
}

TEST(GgufBadFile, NegativeDimension) {
  Bytes img = base_writer().to_bytes();
  poke<int64_t>(img, info_at(img, "tensor.first").ne, -3);
  expect_error(img, {"tensor 'tensor.first' has dimension 0 of size -3"});
}

TEST(GgufBadFile, ElementCountOverflow) {
  Bytes img = base_writer().to_bytes();
  poke<int64_t>(img, info_at(img, "tensor.first").ne, int64_t{1} << 40);
  poke<int64_t>(img, info_at(img, "tensor.first").ne + 8, int64_t{1} << 40);
  expect_error(img, {"tensor 'tensor.first' element count overflows"});
}

TEST(GgufBadFile, ByteSizeOverflow) {
  Bytes img = base_writer().to_bytes();
  // 2^62 f32 elements are a valid count but 2^64 bytes.
  poke<int64_t>(img, info_at(img, "tensor.first").ne, int64_t{1} << 61);
  expect_error(img, {"tensor 'tensor.first' byte size overflows"});
}

TEST(GgufBadFile, RowNotWholeBlocks) {
  Bytes img = base_writer().to_bytes();
  poke<int64_t>(img, info_at(img, "tensor.second").ne, 48);
  expect_error(img, {"tensor 'tensor.second' has ne[0] = 48, not a multiple of the q8_0 block size 32"});
}

TEST(GgufBadFile, DuplicateTensorName) {
  Writer w = base_writer();
  w.add_tensor("dup.t1", GgmlType::F32, {4}, pattern(16, 0));
  w.add_tensor("dup.t2", GgmlType::F32, {4}, pattern(16, 0));
  Bytes img = w.to_bytes();
  img[find_bytes(img, "dup.t2") + 5] = '1';
  expect_error(img, {"duplicate tensor name 'dup.t1'"});
}

TEST(GgufBadFile, WrongTypeInTypedGetter) {
  auto r = Reader::from_memory(base_writer().to_bytes(), kBadName);
  try {
    r->metadata().get_string("test.count");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_EQ(std::string(e.what()), std::string(kBadName) + ": key 'test.count' has type u32, expected string");
  }
  try {
    r->metadata().get_uint("test.words");
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("key 'test.words' has type array[string]"), std::string::npos) << e.what();
  }
}

TEST(GgufBadFile, MissingRequiredKey) {
  auto r = Reader::from_memory(base_writer().to_bytes(), kBadName);
  for (auto fn : {+[](const Reader& x) { x.metadata().require_uint("test.absent"); },
                  +[](const Reader& x) { x.metadata().require_float("test.absent"); },
                  +[](const Reader& x) { x.metadata().require_string("test.absent"); }}) {
    try {
      fn(*r);
      ADD_FAILURE() << "no error";
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()), std::string(kBadName) + ": missing required key 'test.absent'");
    }
  }
  EXPECT_EQ(r->metadata().require_uint("test.count"), 7u);
  EXPECT_EQ(r->metadata().require_string("test.label"), "hello");
}

}  // namespace

// Releasing consumed metadata (the model does it for the tokenizer arrays) removes exactly those
// keys and keeps every other key and tensor reachable.
TEST(GgufRelease, ReleasedKeysReadAsAbsentOthersStay) {
  AGENTKV_NEEDS_FIXTURES();
  auto r = agentkv::gguf::Reader::open(std::string(AGENTKV_FIXTURES_DIR) + "/models/qwen3-micro.gguf");
  const size_t n_before = r->metadata().entries().size();
  ASSERT_TRUE(r->metadata().has("tokenizer.ggml.tokens"));
  r->release_metadata({"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "no.such.key"});
  EXPECT_FALSE(r->metadata().has("tokenizer.ggml.tokens"));
  EXPECT_FALSE(r->metadata().has("tokenizer.ggml.merges"));
  EXPECT_EQ(r->metadata().entries().size(), n_before - 2);
  EXPECT_EQ(r->metadata().get_string("general.architecture").value_or(""), "qwen3");
  EXPECT_EQ(r->metadata().get_uint("qwen3.block_count").value_or(0), 2u);
  EXPECT_TRUE(r->metadata().has("tokenizer.ggml.token_type"));
  EXPECT_NE(r->find_tensor("token_embd.weight"), nullptr);
}
