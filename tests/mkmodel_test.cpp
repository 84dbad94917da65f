// mkmodel must write what llama.cpp writes: the generated files are compared key by key and tensor
// by tensor with the fixture models (made by llama.cpp's gguf writer and llama-quantize).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "gguf/gguf.h"
#include "kernels/quant.h"
#include "model/presets.h"
#include "model/quant_mix.h"
#include "fixtures.h"

namespace agentkv::mkmodel {
namespace {

const std::string kFixtures = AGENTKV_FIXTURES_DIR;

// The vocabulary exactly as the fixtures carry it (read from a fixture GGUF, so these tests do not
// depend on the tokenizer.json loader; HfTokenizerGivesTheFixtureVocabulary covers that path).
const VocabData& fixture_vocab() {
  static const VocabData vocab = [] {
    auto r = gguf::Reader::open(kFixtures + "/models/qwen3-micro.gguf");
    VocabData v;
    v.model = r->metadata().require_string("tokenizer.ggml.model");
    v.pre = r->metadata().require_string("tokenizer.ggml.pre");
    v.tokens = r->metadata().get_string_array("tokenizer.ggml.tokens").value();
    // Drop the padding: mkmodel adds it back for the preset's vocabulary size.
    while (!v.tokens.empty() && v.tokens.back().rfind("[PAD", 0) == 0) v.tokens.pop_back();
    const std::vector<int64_t> types = r->metadata().get_int_array("tokenizer.ggml.token_type").value();
    for (size_t i = 0; i < v.tokens.size(); ++i) v.types.push_back(static_cast<TokenType>(types.at(i)));
    v.merges = r->metadata().get_string_array("tokenizer.ggml.merges").value();
    v.eos = static_cast<Token>(r->metadata().require_uint("tokenizer.ggml.eos_token_id"));
    v.pad = static_cast<Token>(r->metadata().require_uint("tokenizer.ggml.padding_token_id"));
    v.bos = static_cast<Token>(r->metadata().require_uint("tokenizer.ggml.bos_token_id"));
    v.add_bos = r->metadata().get_bool("tokenizer.ggml.add_bos_token").value();
    v.chat_template = r->metadata().require_string("tokenizer.chat_template");
    return v;
  }();
  return vocab;
}

std::vector<uint8_t> build_bytes(const std::string& preset, FileType type, uint64_t seed = 42,
                                 int n_threads = 2) {
  gguf::Writer w;
  BuildOptions options;
  options.type = type;
  options.seed = seed;
  options.n_threads = n_threads;
  build_model(w, find_preset(preset), fixture_vocab(), options);
  return w.to_bytes();
}

std::unique_ptr<gguf::Reader> open_fixture(const std::string& name) {
  return gguf::Reader::open(kFixtures + "/models/" + name);
}

template <typename T>
std::string first_difference(const std::vector<T>& a, const std::vector<T>& b) {
  for (size_t i = 0; i < std::min(a.size(), b.size()); ++i)
    if (!(a[i] == b[i])) return " differs first at #" + std::to_string(i);
  return a.size() == b.size() ? "" : " sizes differ";
}

void expect_same_value(const std::string& key, const gguf::Value& ours, const gguf::Value& theirs) {
  ASSERT_EQ(ours.type, theirs.type) << key;
  if (ours.type == gguf::ValueType::ARRAY) {
    ASSERT_EQ(ours.elem_type, theirs.elem_type) << key;
    ASSERT_EQ(ours.array_size(), theirs.array_size()) << key;
    EXPECT_TRUE(ours.str_array == theirs.str_array) << key << first_difference(ours.str_array, theirs.str_array);
    EXPECT_TRUE(ours.int_array == theirs.int_array) << key << first_difference(ours.int_array, theirs.int_array);
    EXPECT_TRUE(ours.uint_array == theirs.uint_array) << key;
    EXPECT_TRUE(ours.float_array == theirs.float_array) << key;
  } else {
    EXPECT_TRUE(ours.scalar == theirs.scalar) << key;
  }
}

// Same keys in the same order with the same values (general.name aside), same tensors in the same
// order with the same shapes and types. `extra_file_type`: our F16 files also carry
// general.file_type, which the converter writes but the fixture writer did not.
void expect_matches_fixture(const gguf::Reader& ours, const gguf::Reader& fixture, bool extra_file_type) {
  std::vector<std::string> our_keys, fixture_keys;
  for (const auto& [key, value] : ours.metadata().entries())
    if (!(extra_file_type && key == "general.file_type")) our_keys.push_back(key);
  for (const auto& [key, value] : fixture.metadata().entries()) fixture_keys.push_back(key);
  ASSERT_EQ(our_keys, fixture_keys);
  for (const auto& [key, value] : fixture.metadata().entries()) {
    if (key == "general.name") continue;
    expect_same_value(key, *ours.metadata().find(key), value);
  }
  if (extra_file_type) {
    EXPECT_EQ(ours.metadata().get_uint("general.file_type"), 1u);
  }

  ASSERT_EQ(ours.tensors().size(), fixture.tensors().size());
  for (size_t i = 0; i < fixture.tensors().size(); ++i) {
    const gguf::TensorInfo& a = ours.tensors()[i];
    const gguf::TensorInfo& b = fixture.tensors()[i];
    EXPECT_EQ(a.name, b.name) << "tensor #" << i;
    EXPECT_EQ(a.n_dims, b.n_dims) << b.name;
    EXPECT_EQ(a.ne, b.ne) << b.name;
    EXPECT_EQ(ggml_type_name(a.type), ggml_type_name(b.type)) << b.name;
    EXPECT_EQ(a.nbytes, b.nbytes) << b.name;
  }
}

void expect_generated_matches(const std::string& preset, FileType type, const std::string& fixture_file) {
  const std::vector<uint8_t> bytes = build_bytes(preset, type);
  auto ours = gguf::Reader::from_memory(bytes, preset);
  expect_matches_fixture(*ours, *open_fixture(fixture_file), type == FileType::MostlyF16);
}

TEST(MkModel, Qwen3MicroF16MatchesFixture) {
  AGENTKV_NEEDS_FIXTURES();
  expect_generated_matches("qwen3-micro", FileType::MostlyF16, "qwen3-micro.gguf");
}

TEST(MkModel, Qwen3MicroQ8_0MatchesLlamaQuantize) {
  AGENTKV_NEEDS_FIXTURES();
  expect_generated_matches("qwen3-micro", FileType::MostlyQ8_0, "qwen3-micro-q8_0.gguf");
}

TEST(MkModel, Qwen35MicroF16MatchesFixture) {
  AGENTKV_NEEDS_FIXTURES();
  expect_generated_matches("qwen35-micro", FileType::MostlyF16, "qwen35-micro.gguf");
}

TEST(MkModel, Qwen35MoeMicroF16MatchesFixture) {
  AGENTKV_NEEDS_FIXTURES();
  expect_generated_matches("qwen35moe-micro", FileType::MostlyF16, "qwen35moe-micro.gguf");
}

TEST(MkModel, Qwen35MoeMicroQ8_0MatchesLlamaQuantize) {
  AGENTKV_NEEDS_FIXTURES();
  expect_generated_matches("qwen35moe-micro", FileType::MostlyQ8_0, "qwen35moe-micro-q8_0.gguf");
}

// The Q4_K_M mix (q6_K head, q6_K attn_v / ffn_down on "more bits" layers) without generating
// the 39M-element embedding: the plan is what build_model writes.
TEST(MkModel, Qwen3TinyQ4KMPlanMatchesLlamaQuantize) {
  AGENTKV_NEEDS_FIXTURES();
  const auto plan = plan_tensors(find_preset("qwen3-tiny"), FileType::MostlyQ4_K_M);
  auto fixture = open_fixture("qwen3-tiny-q4_k_m.gguf");
  ASSERT_EQ(plan.size(), fixture->tensors().size());
  for (size_t i = 0; i < plan.size(); ++i) {
    const gguf::TensorInfo& f = fixture->tensors()[i];
    EXPECT_EQ(plan[i].name, f.name);
    EXPECT_EQ(plan[i].ne, std::vector<int64_t>(f.ne.begin(), f.ne.begin() + f.n_dims)) << f.name;
    EXPECT_EQ(ggml_type_name(plan[i].type), ggml_type_name(f.type)) << f.name;
  }
  EXPECT_EQ(fixture->metadata().get_uint("general.file_type"), static_cast<uint64_t>(FileType::MostlyQ4_K_M));
}

TEST(MkModel, SameSeedSameBytesWhateverTheThreadCount) {
  AGENTKV_NEEDS_FIXTURES();
  const auto one_thread = build_bytes("qwen3-test", FileType::MostlyF16, 7, 1);
  const auto two_threads = build_bytes("qwen3-test", FileType::MostlyF16, 7, 2);
  EXPECT_TRUE(one_thread == two_threads);
}

TEST(MkModel, DifferentSeedDifferentWeights) {
  AGENTKV_NEEDS_FIXTURES();
  const auto a_bytes = build_bytes("qwen3-test", FileType::MostlyQ8_0, 1);
  const auto b_bytes = build_bytes("qwen3-test", FileType::MostlyQ8_0, 2);
  auto a = gguf::Reader::from_memory(a_bytes, "seed1");
  auto b = gguf::Reader::from_memory(b_bytes, "seed2");
  ASSERT_EQ(a->tensors().size(), b->tensors().size());
  for (size_t i = 0; i < a->tensors().size(); ++i) {
    const auto& ta = a->tensors()[i];
    const auto& tb = b->tensors()[i];
    const bool same = std::memcmp(ta.data, tb.data, ta.nbytes) == 0;
    // Norm weights are ones whatever the seed; everything else is drawn.
    if (ta.name.find("norm") != std::string::npos) {
      EXPECT_TRUE(same) << ta.name;
    } else {
      EXPECT_FALSE(same) << ta.name;
    }
  }
}

std::vector<float> tensor_values(const gguf::TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  if (t.type == GgmlType::F32) {
    std::memcpy(out.data(), t.data, out.size() * sizeof(float));
  } else {
    EXPECT_EQ(t.type, GgmlType::F16) << t.name;
    const auto* h = reinterpret_cast<const uint16_t*>(t.data);
    for (size_t i = 0; i < out.size(); ++i) out[i] = fp16_to_fp32(h[i]);
  }
  return out;
}

struct Moments {
  double mean = 0, stddev = 0, min = 0, max = 0;
};

Moments moments(const std::vector<float>& v) {
  Moments m;
  m.min = m.max = v.at(0);
  double sum = 0, sq = 0;
  for (float x : v) {
    sum += x;
    sq += double(x) * x;
    m.min = std::min<double>(m.min, x);
    m.max = std::max<double>(m.max, x);
  }
  m.mean = sum / v.size();
  m.stddev = std::sqrt(std::max(0.0, sq / v.size() - m.mean * m.mean));
  return m;
}

// The weights follow the fixtures' recipe: per tensor, same spread as the fixture's and the same
// sign / constant constraints.
TEST(MkModel, WeightRecipeMatchesFixture) {
  AGENTKV_NEEDS_FIXTURES();
  const auto bytes = build_bytes("qwen35moe-micro", FileType::MostlyF16);
  auto ours = gguf::Reader::from_memory(bytes, "qwen35moe-micro");
  auto fixture = open_fixture("qwen35moe-micro.gguf");
  for (const auto& f : fixture->tensors()) {
    const gguf::TensorInfo* o = ours->find_tensor(f.name);
    ASSERT_NE(o, nullptr) << f.name;
    const Moments a = moments(tensor_values(*o));
    const Moments b = moments(tensor_values(f));
    if (f.name.find("norm") != std::string::npos) {
      EXPECT_EQ(a.min, 1.0) << f.name;
      EXPECT_EQ(a.max, 1.0) << f.name;
    } else if (f.name.ends_with(".ssm_a") || f.name.ends_with(".ssm_dt.bias")) {
      // a handful of values each: compare sign and range, both files within the same bounds
      const bool is_a = f.name.ends_with(".ssm_a");
      for (const Moments& m : {a, b}) {
        if (is_a) {
          EXPECT_LT(m.max, -0.5) << f.name;
          EXPECT_GT(m.min, -16.5) << f.name;
        } else {
          EXPECT_LT(std::max(std::abs(m.min), std::abs(m.max)), 0.5) << f.name;
        }
      }
    } else {
      const int64_t n = f.n_elements();
      const double tolerance = n > 100000 ? 0.02 : n > 1000 ? 0.1 : 0.35;
      EXPECT_NEAR(a.stddev, b.stddev, tolerance * b.stddev) << f.name;
      EXPECT_NEAR(a.mean, 0.0, 4 * b.stddev / std::sqrt(double(n)) + 1e-3) << f.name;
    }
  }
}

// A small hybrid MoE whose every matrix row is a whole number of 256-blocks, with a made-up
// 300-token vocabulary, so the K-quant paths run in a fraction of a second.
ModelShape k_quantizable_shape() {
  ModelShape s = find_preset("qwen35moe-micro");
  s.name = "kquant-check";
  s.n_embd = 256;
  s.head_dim = 128;
  s.n_vocab = 512;
  s.ssm_state_size = 32;
  s.ssm_inner_size = 256;
  s.n_ff_exp = 256;
  s.n_ff_shexp = 256;
  return s;
}

VocabData small_vocab() {
  VocabData v;
  for (int i = 0; i < 300; ++i) {
    v.tokens.push_back("tok" + std::to_string(i));
    v.types.push_back(TokenType::Normal);
  }
  return v;
}

std::vector<float> decode_tensor(const gguf::TensorInfo& t) {
  std::vector<float> out(static_cast<size_t>(t.n_elements()));
  const int64_t row = t.ne[0];
  const size_t row_bytes = ggml_row_size(t.type, row);
  for (int64_t r = 0; r < t.n_elements() / row; ++r)
    dequantize_row(t.type, t.data + r * row_bytes, out.data() + r * row, row);
  return out;
}

// Quantized files hold the same weights as the f32 file of the same seed, up to each type's
// rounding error (relative RMS error of ggml's quantizers on Gaussian data).
TEST(MkModel, QuantizedFilesEncodeTheSameWeights) {
  const ModelShape shape = k_quantizable_shape();
  const VocabData vocab = small_vocab();
  auto build = [&](FileType type) {
    gguf::Writer w;
    BuildOptions options;
    options.type = type;
    options.seed = 5;
    options.n_threads = 2;
    build_model(w, shape, vocab, options);
    return w.to_bytes();
  };
  const auto f32_bytes = build(FileType::AllF32);
  auto f32 = gguf::Reader::from_memory(f32_bytes, "f32");
  auto max_rel_rms = [](GgmlType t) {
    switch (t) {
      case GgmlType::F32: return 0.0;
      case GgmlType::F16: return 1e-3;
      case GgmlType::Q8_0: return 0.01;
      case GgmlType::Q6_K: return 0.03;
      case GgmlType::Q5_K: return 0.06;
      case GgmlType::Q4_K: return 0.12;
      default: return -1.0;  // not expected for this shape
    }
  };
  for (FileType type : {FileType::MostlyF16, FileType::MostlyQ8_0, FileType::MostlyQ4_K_M,
                        FileType::MostlyQ5_K_M}) {
    const auto bytes = build(type);
    auto q = gguf::Reader::from_memory(bytes, std::string(file_type_name(type)));
    EXPECT_EQ(q->metadata().get_uint("general.file_type"), static_cast<uint64_t>(type));
    for (const auto& t : q->tensors()) {
      const gguf::TensorInfo* ref = f32->find_tensor(t.name);
      ASSERT_NE(ref, nullptr) << t.name;
      const std::vector<float> want = decode_tensor(*ref);
      const std::vector<float> got = decode_tensor(t);
      double err = 0, norm = 0;
      for (size_t i = 0; i < want.size(); ++i) {
        err += (double(got[i]) - want[i]) * (double(got[i]) - want[i]);
        norm += double(want[i]) * want[i];
      }
      const double rel = std::sqrt(err / norm);
      const double bound = max_rel_rms(t.type);
      ASSERT_GE(bound, 0.0) << t.name << " has unexpected type " << ggml_type_name(t.type);
      EXPECT_LE(rel, bound) << t.name << " (" << ggml_type_name(t.type) << ", " << file_type_name(type) << ")";
    }
  }
}

// Published sizes: Qwen3-0.6B has 0.6B parameters (0.44B without the embedding); the bench shape
// is specified at ~860M. Every matrix of both has K-quant-compatible rows.
TEST(MkModel, LargePresetsHaveTheirSizeAndQuantizeWithoutFallback) {
  auto count = [](const std::vector<PlannedTensor>& plan) {
    int64_t n = 0;
    for (const auto& t : plan) n += t.n_elements();
    return n;
  };
  const auto qwen3 = plan_tensors(find_preset("qwen3-0.6b"), FileType::MostlyQ4_K_M);
  EXPECT_NEAR(count(qwen3) / 1e6, 596.0, 1.0);
  const auto bench = plan_tensors(find_preset("qwen35moe-bench"), FileType::MostlyQ4_K_M);
  EXPECT_NEAR(count(bench) / 1e6, 860.0, 10.0);
  for (const auto* plan : {&qwen3, &bench})
    for (const auto& t : *plan) {
      EXPECT_NE(t.type, GgmlType::Q5_0) << t.name;
      EXPECT_NE(t.type, GgmlType::Q8_0) << t.name;
      EXPECT_NE(t.type, GgmlType::F16) << t.name;
    }
}

// llama-quantize's fallbacks when rows are not whole 256-element blocks (E=64 here): q4_K -> q5_0,
// q6_K -> q8_0 (and the tied / untied head rule: q8_0 for an incompatible head).
TEST(QuantMix, FallsBackForShortRows) {
  const auto plan = plan_tensors(find_preset("qwen35moe-micro"), FileType::MostlyQ4_K_M);
  auto type_of = [&](const std::string& name) {
    for (const auto& t : plan)
      if (t.name == name) return t.type;
    ADD_FAILURE() << "no tensor " << name;
    return GgmlType::F32;
  };
  EXPECT_EQ(type_of("output.weight"), GgmlType::Q8_0);
  EXPECT_EQ(type_of("token_embd.weight"), GgmlType::Q5_0);
  EXPECT_EQ(type_of("blk.0.ssm_out.weight"), GgmlType::Q5_0);
  // use_more_bits(i, 4) holds for layers 2 and 3: their attn_v-like (attn_qkv in Gated-DeltaNet
  // layers) and ffn_down tensors get q6_K, which falls back to q8_0; the others q4_K -> q5_0.
  EXPECT_EQ(type_of("blk.0.attn_qkv.weight"), GgmlType::Q5_0);
  EXPECT_EQ(type_of("blk.2.attn_qkv.weight"), GgmlType::Q8_0);
  EXPECT_EQ(type_of("blk.3.attn_v.weight"), GgmlType::Q8_0);
  EXPECT_EQ(type_of("blk.3.attn_k.weight"), GgmlType::Q5_0);
  EXPECT_EQ(type_of("blk.0.ffn_down_exps.weight"), GgmlType::Q5_0);
  EXPECT_EQ(type_of("blk.1.ffn_down_shexp.weight"), GgmlType::Q5_0);
  EXPECT_EQ(type_of("blk.2.ffn_down_exps.weight"), GgmlType::Q8_0);
  EXPECT_EQ(type_of("blk.2.ffn_down_shexp.weight"), GgmlType::Q8_0);
  EXPECT_EQ(type_of("blk.0.ssm_conv1d.weight"), GgmlType::F32);
  EXPECT_EQ(type_of("blk.0.ffn_gate_inp.weight"), GgmlType::F32);
  // A row length that no 32-element type fits cannot become q8_0.
  std::vector<MixTensor> odd = {{"blk.0.attn_q.weight", {48, 16}, GgmlType::F16}};
  EXPECT_THROW(choose_tensor_types(odd, FileType::MostlyQ8_0, 1, 0), Error);
  EXPECT_EQ(choose_tensor_types(odd, FileType::MostlyQ4_K_M, 1, 0)[0], GgmlType::F16);
}

TEST(QuantMix, QuantizeOrderSortsBlocksNumerically) {
  const std::vector<std::string> names = {"token_embd.weight", "blk.10.a", "blk.2.b", "blk.2.a",
                                          "output_norm.weight"};
  const std::vector<size_t> expected = {4, 0, 3, 2, 1};
  EXPECT_EQ(quantize_order(names), expected);
}

TEST(MkModel, RefusesBadInput) {
  EXPECT_THROW(find_preset("qwen9-huge"), Error);
  EXPECT_FALSE(file_type_from_name("q3_k_s").has_value());
  EXPECT_EQ(file_type_from_name("Q4_K_M"), FileType::MostlyQ4_K_M);
  ModelShape small = find_preset("qwen3-test");
  small.n_vocab = 1000;  // smaller than the tokenizer
  gguf::Writer w;
  EXPECT_THROW(write_metadata(w, small, fixture_vocab(), FileType::MostlyF16), Error);
  EXPECT_THROW(find_tokenizer_json("/nonexistent/tokenizer.json"), Error);
}

// The command's path: the Hugging Face tokenizer files give the vocabulary the fixtures carry.
TEST(MkModel, HfTokenizerGivesTheFixtureVocabulary) {
  AGENTKV_NEEDS_FIXTURES();
  const std::string json = find_tokenizer_json(kFixtures + "/tokenizer");
  const VocabData hf = load_vocab(json, sibling_tokenizer_config(json));
  gguf::Writer w;
  write_metadata(w, find_preset("qwen3-micro"), hf, FileType::MostlyF16);
  const auto bytes = w.to_bytes();
  auto ours = gguf::Reader::from_memory(bytes, "hf-vocab");
  auto fixture = open_fixture("qwen3-micro.gguf");
  for (const auto& [key, value] : fixture->metadata().entries()) {
    if (key.rfind("tokenizer.", 0) != 0) continue;
    const gguf::Value* mine = ours->metadata().find(key);
    ASSERT_NE(mine, nullptr) << key;
    expect_same_value(key, *mine, value);
  }
}

TEST(MkModel, FindsTheFixtureTokenizerAndItsConfig) {
  AGENTKV_NEEDS_FIXTURES();
  const std::string json = find_tokenizer_json(kFixtures + "/tokenizer");
  EXPECT_NE(json.find("qwen3-tokenizer.json"), std::string::npos);
  EXPECT_NE(sibling_tokenizer_config(json).find("qwen3-tokenizer_config.json"), std::string::npos);
}

}  // namespace
}  // namespace agentkv::mkmodel
