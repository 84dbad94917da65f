// KV rotation (kernels/hadamard.h, model/kv_rotation.h): the transform is llama.cpp's orthonormal
// Walsh-Hadamard matrix, attention over rotated K/V equals attention over plain K/V, a context
// shift of rotated keys equals keys computed at the new position, and a state is only restored
// under the rotation it was made with.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "agentkv/session_state.h"
#include "gguf/gguf.h"
#include "kernels/hadamard.h"
#include "model/kv_rotation.h"
#include "model/model.h"
#include "model/presets.h"
#include "fixtures.h"

namespace agentkv {
namespace {

using memory::Pos;

std::vector<float> gaussian(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  return v;
}

// llama.cpp's matrix (ggml_gen_hadamard): Sylvester's construction scaled by 1/sqrt(n).
std::vector<double> sylvester(int n) {
  std::vector<double> h(static_cast<size_t>(n) * n);
  h[0] = 1.0 / std::sqrt(double(n));
  for (int s = 1; s < n; s *= 2)
    for (int i = 0; i < s; ++i)
      for (int j = 0; j < s; ++j) {
        const double v = h[i * n + j];
        h[(i + s) * n + j] = v;
        h[i * n + j + s] = v;
        h[(i + s) * n + j + s] = -v;
      }
  return h;
}

TEST(Hadamard, BlockTransformIsLlamaCppsMatrix) {
  for (int n : {64, 128, 256}) {
    const auto h = sylvester(n);
    auto x = gaussian(static_cast<size_t>(n), n);
    std::vector<float> y = x;
    fwht_block(y.data(), n);
    for (int i = 0; i < n; ++i) {
      double want = 0;
      for (int j = 0; j < n; ++j) want += h[i * n + j] * x[j];
      EXPECT_NEAR(y[i], want, 1e-5) << "n=" << n << " i=" << i;
    }
  }
}

TEST(Hadamard, RotationIsOrthonormalAndInvertible) {
  for (uint64_t seed : {0ull, 1ull, 12345ull}) {
    HadamardRotation r;
    r.block = 64;
    r.signs = hadamard_signs(seed, 64);
    EXPECT_EQ(r.signs.empty(), seed == 0);
    const auto a = gaussian(256, 1), b = gaussian(256, 2);
    auto ra = a, rb = b;
    r.apply(ra.data(), 256);
    r.apply(rb.data(), 256);
    double dot = 0, rdot = 0, na = 0, nra = 0;
    for (int i = 0; i < 256; ++i) {
      dot += double(a[i]) * b[i];
      rdot += double(ra[i]) * rb[i];
      na += double(a[i]) * a[i];
      nra += double(ra[i]) * ra[i];
    }
    EXPECT_NEAR(rdot, dot, 1e-3) << "dot products are kept";
    EXPECT_NEAR(nra, na, 1e-3) << "norms are kept";
    EXPECT_NE(ra, a);
    r.apply_inverse(ra.data(), 256);
    for (int i = 0; i < 256; ++i) EXPECT_NEAR(ra[i], a[i], 1e-5);
  }
}

TEST(Hadamard, SignsAreAFunctionOfTheSeed) {
  EXPECT_EQ(hadamard_signs(7, 128), hadamard_signs(7, 128));
  EXPECT_NE(hadamard_signs(7, 128), hadamard_signs(8, 128));
  const auto s = hadamard_signs(7, 128);
  int neg = 0;
  for (float v : s) {
    EXPECT_TRUE(v == 1.f || v == -1.f);
    neg += v < 0;
  }
  EXPECT_GT(neg, 40);
  EXPECT_LT(neg, 88);
}

ModelConfig config_with_heads(int64_t head_dim) {
  ModelConfig c;
  c.n_layer = 2;
  c.head_dim_k = c.head_dim_v = head_dim;
  return c;
}

TEST(KvRotationChoice, AsLlamaCppQuantizedTypesOnlyAndWidthsOf64) {
  const auto q4 = GgmlType::Q4_0, f16 = GgmlType::F16;
  auto r = choose_kv_rotation(config_with_heads(128), q4, q4, KvRotationMode::Auto, 0);
  EXPECT_EQ(r.k_block, 128u);  // K: the largest power of two dividing the head width
  EXPECT_EQ(r.v_block, 64u);   // V: blocks of 64
  r = choose_kv_rotation(config_with_heads(64), f16, q4, KvRotationMode::Auto, 0);
  EXPECT_EQ(r.k_block, 0u);
  EXPECT_EQ(r.v_block, 64u);
  r = choose_kv_rotation(config_with_heads(256), GgmlType::Q8_0, f16, KvRotationMode::Auto, 3);
  EXPECT_EQ(r.k_block, 256u);
  EXPECT_EQ(r.v_block, 0u);
  EXPECT_EQ(r.seed, 3u);
  EXPECT_FALSE(choose_kv_rotation(config_with_heads(64), f16, f16, KvRotationMode::Auto, 0).active());
  EXPECT_FALSE(choose_kv_rotation(config_with_heads(32), q4, q4, KvRotationMode::Auto, 0).active());
  EXPECT_FALSE(choose_kv_rotation(config_with_heads(128), q4, q4, KvRotationMode::Off, 0).active());
  r = choose_kv_rotation(config_with_heads(64), f16, f16, KvRotationMode::On, 0);
  EXPECT_EQ(r.k_block, 64u);
  EXPECT_EQ(r.v_block, 64u);
  // agentkv's tq4 / tq3 are quantized types: rotated by default, K and V independently.
  r = choose_kv_rotation(config_with_heads(128), GgmlType::TQ4, GgmlType::TQ3, KvRotationMode::Auto, 0);
  EXPECT_EQ(r.k_block, 128u);
  EXPECT_EQ(r.v_block, 64u);
  r = choose_kv_rotation(config_with_heads(128), GgmlType::Q8_0, GgmlType::TQ3, KvRotationMode::Auto, 0);
  EXPECT_EQ(r.k_block, 128u);
  EXPECT_EQ(r.v_block, 64u);
  EXPECT_THROW(parse_kv_rotation_mode("sometimes"), std::invalid_argument);
}

// A small dense qwen3 with head width 64 (the fixtures' is 32, which llama.cpp does not rotate),
// random weights at the fixtures' scale.
const std::string& head64_model_path() {
  static const std::string path = [] {
    mkmodel::ModelShape s = mkmodel::find_preset("qwen3-micro");
    s.name = "qwen3-micro-head64";
    s.head_dim = 64;
    const std::string tok = std::string(AGENTKV_FIXTURES_DIR) + "/tokenizer/qwen3-tokenizer.json";
    gguf::Writer w;
    mkmodel::BuildOptions o;
    o.seed = 3;
    mkmodel::build_model(w, s, mkmodel::load_vocab(tok, mkmodel::sibling_tokenizer_config(tok)), o);
    const std::string out = (std::filesystem::temp_directory_path() /
                             ("agentkv-kv-rotation-" + std::to_string(::getpid()) + ".gguf")).string();
    w.write(out);
    return out;
  }();
  return path;
}

const Model& head64_model() {
  static const std::unique_ptr<Model> m = Model::load(head64_model_path());
  return *m;
}

ContextParams params(GgmlType t, KvRotationMode mode, uint64_t seed = 0) {
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 1;
  cp.kv.type_k = cp.kv.type_v = t;
  cp.kv.rotation = mode;
  cp.kv.rotation_seed = seed;
  return cp;
}

std::vector<Token> prompt(int n) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<Token> d(0, 5000);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

// Logits of every prompt position and of two decoded tokens after it.
std::vector<float> run(Context& ctx, Pos p0 = 0) {
  const auto toks = prompt(40);
  Batch b;
  b.add_sequence(toks.data(), toks.size(), p0, 0, true);
  EXPECT_EQ(ctx.decode(b), 0);
  const int64_t nv = ctx.model().n_vocab();
  std::vector<float> out;
  for (int i = 0; i < ctx.n_outputs(); ++i) out.insert(out.end(), ctx.logits(i), ctx.logits(i) + nv);
  for (Token t : {Token(17), Token(4242)}) {
    Batch d;
    d.add(t, p0 + static_cast<Pos>(toks.size() + (t == 17 ? 0 : 1)), {0}, true);
    EXPECT_EQ(ctx.decode(d), 0);
    out.insert(out.end(), ctx.last_logits(), ctx.last_logits() + nv);
  }
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  EXPECT_EQ(a.size(), b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

// Float rounding bound for logits of this size: a rotation reorders the sums of every score, and
// random models of the fixtures' scale amplify such noise (llama.cpp's own two runs of qwen3-micro
// differ by up to 0.044 in a logprob: ../shared/fixtures/README.md).
double rounding_bound(const std::vector<float>& logits) {
  double m = 0;
  for (float x : logits) m = std::max(m, double(std::fabs(x)));
  return 1e-3 * m;
}

TEST(KvRotationModel, RotatedF32CacheGivesThePlainLogits) {
  AGENTKV_NEEDS_FIXTURES();
  Context plain(head64_model(), params(GgmlType::F32, KvRotationMode::Off));
  const auto want = run(plain);
  for (uint64_t seed : {0ull, 9ull}) {
    Context rotated(head64_model(), params(GgmlType::F32, KvRotationMode::On, seed));
    ASSERT_TRUE(sequence_memory(rotated).kv()->layout().rotation.active());
    EXPECT_EQ(sequence_memory(rotated).kv()->layout().rotation.k_block, 64u);
    const double d = max_abs_diff(run(rotated), want);
    std::printf("f32 KV, rotation seed %llu: max |logit diff| %.2e (bound %.2e)\n",
                static_cast<unsigned long long>(seed), d, rounding_bound(want));
    EXPECT_LT(d, rounding_bound(want));
  }
}

TEST(KvRotationModel, QuantizedCacheIsRotatedByDefaultAndChangesItsRounding) {
  AGENTKV_NEEDS_FIXTURES();
  Context exact(head64_model(), params(GgmlType::F32, KvRotationMode::Off));
  const auto want = run(exact);
  Context rotated(head64_model(), params(GgmlType::Q4_0, KvRotationMode::Auto));
  Context plain(head64_model(), params(GgmlType::Q4_0, KvRotationMode::Off));
  EXPECT_TRUE(sequence_memory(rotated).kv()->layout().rotation.active());
  EXPECT_FALSE(sequence_memory(plain).kv()->layout().rotation.active());
  const auto r = run(rotated), p = run(plain);
  const double dr = max_abs_diff(r, want), dp = max_abs_diff(p, want);
  std::printf("q4_0 KV vs f32 KV: rotated %.3f, unrotated %.3f (max |logit diff|)\n", dr, dp);
  EXPECT_GT(max_abs_diff(r, p), 1e-4) << "rotation must reach the stored rows";
  EXPECT_LT(dr, 10 * dp + 0.5) << "rotated q4_0 stays in the range of plain q4_0";
}

TEST(KvRotationModel, ShiftOfRotatedKeysEqualsKeysComputedThere) {
  AGENTKV_NEEDS_FIXTURES();
  Context plain(head64_model(), params(GgmlType::F32, KvRotationMode::On));
  const auto toks = prompt(24);
  Batch b;
  b.add_sequence(toks.data(), toks.size(), 0, 0, false);
  ASSERT_EQ(plain.decode(b), 0);
  Batch n1;
  n1.add(4242, 24, {0}, true);  // RoPE sees relative positions: as the shifted run's 124
  ASSERT_EQ(plain.decode(n1), 0);
  const std::vector<float> want(plain.last_logits(), plain.last_logits() + plain.model().n_vocab());

  Context shifted(head64_model(), params(GgmlType::F32, KvRotationMode::On));
  Batch c;
  c.add_sequence(toks.data(), toks.size(), 0, 0, false);
  ASSERT_EQ(shifted.decode(c), 0);
  shifted.memory().seq_add(0, 0, -1, 100);
  ASSERT_EQ(shifted.memory().seq_pos_min(0), 100);
  Batch n2;
  n2.add(4242, 124, {0}, true);
  ASSERT_EQ(shifted.decode(n2), 0);
  const std::vector<float> got(shifted.last_logits(), shifted.last_logits() + shifted.model().n_vocab());
  EXPECT_EQ(shifted.stats().n_shifted_cells, 24);
  const double d = max_abs_diff(got, want);
  std::printf("rotated f32 keys shifted by 100: max |logit diff| %.2e (bound %.2e)\n", d, rounding_bound(want));
  EXPECT_LT(d, rounding_bound(want));
}

TEST(KvRotationState, RestoredOnlyUnderTheSameRotation) {
  AGENTKV_NEEDS_FIXTURES();
  Context src(head64_model(), params(GgmlType::Q8_0, KvRotationMode::Auto, 4));
  const auto toks = prompt(30);
  Batch b;
  b.add_sequence(toks.data(), toks.size(), 0, 0, true);
  ASSERT_EQ(src.decode(b), 0);
  const auto blob = save_seq(src, 0);

  Context other_seed(head64_model(), params(GgmlType::Q8_0, KvRotationMode::Auto, 5));
  try {
    load_seq(other_seed, blob, 0);
    FAIL() << "a state made under another rotation was restored";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("rotation"), std::string::npos) << e.what();
  }
  Context unrotated(head64_model(), params(GgmlType::Q8_0, KvRotationMode::Off));
  EXPECT_THROW(load_seq(unrotated, blob, 0), Error);

  Context same(head64_model(), params(GgmlType::Q8_0, KvRotationMode::Auto, 4));
  load_seq(same, blob, 0);
  Batch n1, n2;
  n1.add(4242, 30, {0}, true);
  n2.add(4242, 30, {0}, true);
  ASSERT_EQ(src.decode(n1), 0);
  ASSERT_EQ(same.decode(n2), 0);
  EXPECT_EQ(std::vector<float>(src.last_logits(), src.last_logits() + src.model().n_vocab()),
            std::vector<float>(same.last_logits(), same.last_logits() + same.model().n_vocab()))
      << "restored rows read exactly as the saved ones";

  // A state without rotation does not load into a rotated cache either.
  Context plain_src(head64_model(), params(GgmlType::Q8_0, KvRotationMode::Off));
  ASSERT_EQ(plain_src.decode(b), 0);
  Context rotated(head64_model(), params(GgmlType::Q8_0, KvRotationMode::Auto));
  EXPECT_THROW(load_seq(rotated, save_seq(plain_src, 0), 0), Error);
}

}  // namespace
}  // namespace agentkv
