// Gated DeltaNet kernels: conv1d with state, q/k normalisation, gates, the delta rule (step and
// chunked forms against a plain double-precision reference written here), gated RMSNorm.
#include "kernels/delta_net.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "kernels/dispatch.h"

namespace agentkv {
namespace {

// ---- test data ------------------------------------------------------------------------------

// Inputs as the model would feed them: q/k from the library's normaliser, gates from the
// library's gate helper with Qwen-like parameter ranges (A in [1,16], dt ~ softplus(N(-2,1))).
struct Inputs {
  DeltaNetShape shape;
  int64_t n = 0;
  std::vector<float> q, k, v, g, beta;
};

Inputs make_inputs(const DeltaNetShape& shape, int64_t n, uint32_t seed, float g_scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> uni(0.0f, 1.0f);
  Inputs in;
  in.shape = shape;
  in.n = n;
  const int64_t qk = int64_t(shape.n_k_heads) * shape.head_k_dim;
  const int64_t vd = int64_t(shape.n_v_heads) * shape.head_v_dim;
  in.q.resize(n * qk);
  in.k.resize(n * qk);
  in.v.resize(n * vd);
  in.g.resize(n * shape.n_v_heads);
  in.beta.resize(n * shape.n_v_heads);
  // Keys share a common direction so consecutive keys are correlated, as real keys are.
  std::vector<float> common(qk);
  for (auto& x : common) x = normal(rng);
  for (int64_t i = 0; i < n * qk; ++i) {
    in.q[i] = normal(rng);
    in.k[i] = normal(rng) + 0.7f * common[i % qk];
  }
  for (auto& x : in.v) x = normal(rng);
  delta_net_normalize_qk(in.q.data(), qk, in.k.data(), qk, n, shape.n_k_heads, shape.head_k_dim,
                         1e-6f);
  std::vector<float> dt_bias(shape.n_v_heads), ssm_a(shape.n_v_heads);
  for (int h = 0; h < shape.n_v_heads; ++h) {
    dt_bias[h] = -2.0f + normal(rng);
    ssm_a[h] = -std::exp(std::log(16.0f) * uni(rng)) * g_scale;
  }
  std::vector<float> beta_logit(shape.n_v_heads), alpha(shape.n_v_heads);
  for (int64_t t = 0; t < n; ++t) {
    for (int h = 0; h < shape.n_v_heads; ++h) {
      beta_logit[h] = normal(rng);
      alpha[h] = normal(rng);
    }
    delta_net_gates(beta_logit.data(), alpha.data(), dt_bias.data(), ssm_a.data(), shape.n_v_heads,
                    in.beta.data() + t * shape.n_v_heads, in.g.data() + t * shape.n_v_heads);
  }
  return in;
}

std::vector<float> random_state(const DeltaNetShape& shape, uint32_t seed, float amplitude) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, amplitude);
  std::vector<float> s(shape.state_floats());
  for (auto& x : s) x = normal(rng);
  return s;
}

// Runs tokens [t0, t0+n) of `in` through `fn` (step or chunked), appending to out.
template <typename Fn>
void run_range(Fn fn, const Inputs& in, int64_t t0, int64_t n, float* state, float* out,
               ThreadPool& pool) {
  const DeltaNetShape& s = in.shape;
  const int64_t qk = int64_t(s.n_k_heads) * s.head_k_dim;
  const int64_t vd = int64_t(s.n_v_heads) * s.head_v_dim;
  DeltaNetIO io;
  io.n_tokens = n;
  io.q = in.q.data() + t0 * qk;
  io.q_stride = qk;
  io.k = in.k.data() + t0 * qk;
  io.k_stride = qk;
  io.v = in.v.data() + t0 * vd;
  io.v_stride = vd;
  io.g = in.g.data() + t0 * s.n_v_heads;
  io.g_stride = s.n_v_heads;
  io.beta = in.beta.data() + t0 * s.n_v_heads;
  io.beta_stride = s.n_v_heads;
  io.out = out + t0 * vd;
  io.out_stride = vd;
  fn(s, io, state, pool);
}

// ---- plain double-precision reference --------------------------------------------------------
// HF-style state S[h][i][j] (key i, value j); the head mapping is spelled out independently.
struct RefResult {
  std::vector<double> out;    // n x H_v x D_v
  std::vector<double> state;  // converted to llama.cpp layout [h][j][i]
};

RefResult reference(const Inputs& in, const std::vector<float>& state0) {
  const DeltaNetShape& s = in.shape;
  const int Hk = s.n_k_heads, Hv = s.n_v_heads, Dk = s.head_k_dim, Dv = s.head_v_dim;
  std::vector<double> S(size_t(Hv) * Dk * Dv);
  for (int h = 0; h < Hv; ++h)
    for (int i = 0; i < Dk; ++i)
      for (int j = 0; j < Dv; ++j)
        S[(size_t(h) * Dk + i) * Dv + j] = state0[(size_t(h) * Dv + j) * Dk + i];
  RefResult r;
  r.out.assign(size_t(in.n) * Hv * Dv, 0.0);
  std::vector<double> u(Dv);
  for (int64_t t = 0; t < in.n; ++t) {
    for (int h = 0; h < Hv; ++h) {
      const int hk = s.head_map == DeltaNetHeadMap::Tiled ? h % Hk : h / (Hv / Hk);
      const float* q = &in.q[(size_t(t) * Hk + hk) * Dk];
      const float* k = &in.k[(size_t(t) * Hk + hk) * Dk];
      const float* v = &in.v[(size_t(t) * Hv + h) * Dv];
      const double decay = std::exp(double(in.g[size_t(t) * Hv + h]));
      const double beta = in.beta[size_t(t) * Hv + h];
      double* Sh = &S[size_t(h) * Dk * Dv];
      for (int i = 0; i < Dk * Dv; ++i) Sh[i] *= decay;
      for (int j = 0; j < Dv; ++j) {
        double kv = 0.0;
        for (int i = 0; i < Dk; ++i) kv += Sh[size_t(i) * Dv + j] * k[i];
        u[j] = beta * (v[j] - kv);
      }
      for (int i = 0; i < Dk; ++i)
        for (int j = 0; j < Dv; ++j) Sh[size_t(i) * Dv + j] += double(k[i]) * u[j];
      for (int j = 0; j < Dv; ++j) {
        double o = 0.0;
        for (int i = 0; i < Dk; ++i) o += Sh[size_t(i) * Dv + j] * q[i];
        r.out[(size_t(t) * Hv + h) * Dv + j] = o;
      }
    }
  }
  r.state.resize(S.size());
  for (int h = 0; h < Hv; ++h)
    for (int i = 0; i < Dk; ++i)
      for (int j = 0; j < Dv; ++j)
        r.state[(size_t(h) * Dv + j) * Dk + i] = S[(size_t(h) * Dk + i) * Dv + j];
  return r;
}

// max |a - b| / max |b|
template <typename A, typename B>
double rel_err(const std::vector<A>& a, const std::vector<B>& b) {
  EXPECT_EQ(a.size(), b.size());
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) {
    num = std::max(num, std::fabs(double(a[i]) - double(b[i])));
    den = std::max(den, std::fabs(double(b[i])));
  }
  return den > 0.0 ? num / den : num;
}

DeltaNetShape make_shape(int hk, int hv, int dk, int dv, DeltaNetHeadMap map) {
  DeltaNetShape s;
  s.n_k_heads = hk;
  s.n_v_heads = hv;
  s.head_k_dim = dk;
  s.head_v_dim = dv;
  s.head_map = map;
  return s;
}

// The shapes exercised: the micro fixture's (2 K / 4 V heads of 16), a grouped qwen3next-like
// one, odd sizes that hit every vector tail, and a full-size head (128).
std::vector<DeltaNetShape> test_shapes() {
  return {
      make_shape(2, 4, 16, 16, DeltaNetHeadMap::Tiled),
      make_shape(2, 6, 16, 16, DeltaNetHeadMap::Grouped),
      make_shape(1, 3, 24, 20, DeltaNetHeadMap::Tiled),
      make_shape(3, 3, 13, 37, DeltaNetHeadMap::Grouped),
      make_shape(1, 2, 128, 128, DeltaNetHeadMap::Tiled),
  };
}

void step_fn(const DeltaNetShape& s, const DeltaNetIO& io, float* st, ThreadPool& p) {
  gated_delta_rule_step(s, io, st, p);
}
int g_chunk_len = kDeltaNetChunk;  // chunk length chunked_fn uses
void chunked_fn(const DeltaNetShape& s, const DeltaNetIO& io, float* st, ThreadPool& p) {
  gated_delta_rule_chunked(s, io, st, p, g_chunk_len);
}

// The kernel tests run once per instruction set the machine has (generic, AVX2, AVX-512).
class AtCpuLevel : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    if (GetParam() > detected_cpu_level()) GTEST_SKIP() << "CPU lacks this level";
    ASSERT_EQ(set_cpu_level(GetParam()), GetParam());
    g_chunk_len = kDeltaNetChunk;
  }
  void TearDown() override {
    set_cpu_level(detected_cpu_level());
    g_chunk_len = kDeltaNetChunk;
  }
};
class DeltaRule : public AtCpuLevel {};
class Conv1d : public AtCpuLevel {};
class GatedRmsNorm : public AtCpuLevel {};

std::string level_name(const ::testing::TestParamInfo<CpuLevel>& info) {
  return std::string(cpu_level_name(info.param));
}
#define INSTANTIATE_PER_CPU_LEVEL(suite)                                                          \
  INSTANTIATE_TEST_SUITE_P(CpuLevels, suite,                                                      \
                           ::testing::Values(CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512), \
                           level_name)

// ---- delta rule -----------------------------------------------------------------------------

TEST_P(DeltaRule, StateLayoutMatchesLlamaCpp) {
  // One head, D_k = 2, D_v = 3, zero state, one token: S = k (beta v)^T, stored S[i][j] at
  // j*D_k + i; o = S^T q = (q.k) beta v.
  ThreadPool pool(1);
  const DeltaNetShape s = make_shape(1, 1, 2, 3, DeltaNetHeadMap::Tiled);
  const float q[2] = {0.5f, -1.0f}, k[2] = {0.6f, 0.8f}, v[3] = {1.0f, 2.0f, -3.0f};
  const float g = -0.25f, beta = 0.5f;
  float out[3];
  std::vector<float> state(6, 0.0f);
  DeltaNetIO io{1, q, 2, k, 2, v, 3, &g, 1, &beta, 1, out, 3};
  gated_delta_rule_step(s, io, state.data(), pool);
  const float expect_state[6] = {0.6f * 0.5f * 1.0f,  0.8f * 0.5f * 1.0f,    // j = 0
                                 0.6f * 0.5f * 2.0f,  0.8f * 0.5f * 2.0f,    // j = 1
                                 0.6f * 0.5f * -3.0f, 0.8f * 0.5f * -3.0f};  // j = 2
  for (int i = 0; i < 6; ++i) EXPECT_FLOAT_EQ(state[i], expect_state[i]) << i;
  const float qk = 0.5f * 0.6f - 1.0f * 0.8f;
  for (int j = 0; j < 3; ++j) EXPECT_FLOAT_EQ(out[j], qk * beta * v[j]) << j;

  // Second token: the old state decays by exp(g) before the delta is taken.
  std::vector<float> state_c = state;
  float out2[3], out2_c[3];
  DeltaNetIO io2{1, q, 2, k, 2, v, 3, &g, 1, &beta, 1, out2, 3};
  gated_delta_rule_step(s, io2, state.data(), pool);
  io2.out = out2_c;
  gated_delta_rule_chunked(s, io2, state_c.data(), pool);
  const double d = std::exp(-0.25);
  for (int j = 0; j < 3; ++j) {
    // S1 = d*S0; S1^T k = d * beta v_j (|k| = 1); delta_j = beta (v_j - d beta v_j)
    const double delta = 0.5 * (v[j] - d * 0.5 * v[j]);
    const double col_i0 = d * 0.6 * 0.5 * v[j] + 0.6 * delta;
    const double col_i1 = d * 0.8 * 0.5 * v[j] + 0.8 * delta;
    EXPECT_NEAR(state[j * 2 + 0], col_i0, 1e-6);
    EXPECT_NEAR(state[j * 2 + 1], col_i1, 1e-6);
    EXPECT_NEAR(out2[j], 0.5 * col_i0 - 1.0 * col_i1, 1e-6);
    EXPECT_NEAR(out2_c[j], out2[j], 1e-6);
    EXPECT_NEAR(state_c[j * 2 + 0], state[j * 2 + 0], 1e-6);
  }
}

TEST_P(DeltaRule, StepMatchesDoubleReference) {
  ThreadPool pool(2);
  uint32_t seed = 1;
  for (const DeltaNetShape& s : test_shapes()) {
    const Inputs in = make_inputs(s, 150, seed++);
    const std::vector<float> state0 = random_state(s, seed++, 0.3f);
    const RefResult ref = reference(in, state0);
    std::vector<float> state = state0;
    std::vector<float> out(in.n * s.n_v_heads * s.head_v_dim);
    run_range(step_fn, in, 0, in.n, state.data(), out.data(), pool);
    EXPECT_LT(rel_err(out, ref.out), 2e-5) << "H_k=" << s.n_k_heads << " H_v=" << s.n_v_heads;
    EXPECT_LT(rel_err(state, ref.state), 2e-5) << "H_k=" << s.n_k_heads << " H_v=" << s.n_v_heads;
  }
}

TEST_P(DeltaRule, ChunkedMatchesStepAcrossChunkBoundaries) {
  ThreadPool pool(2);
  uint32_t seed = 100;
  for (const DeltaNetShape& s : test_shapes()) {
    for (int chunk : {kDeltaNetChunk, 64, 7}) {
      g_chunk_len = chunk;
      for (int64_t n : {1, 2, 15, 16, 17, 63, 64, 65, 200}) {
        const Inputs in = make_inputs(s, n, seed++);
        const std::vector<float> state0 = random_state(s, seed++, 0.3f);
        std::vector<float> st_step = state0, st_chunk = state0;
        std::vector<float> o_step(n * s.n_v_heads * s.head_v_dim, NAN);
        std::vector<float> o_chunk(o_step.size(), NAN);
        run_range(step_fn, in, 0, n, st_step.data(), o_step.data(), pool);
        run_range(chunked_fn, in, 0, n, st_chunk.data(), o_chunk.data(), pool);
        EXPECT_LT(rel_err(o_chunk, o_step), 1e-4)
            << "n=" << n << " chunk=" << chunk << " H_k=" << s.n_k_heads << " H_v=" << s.n_v_heads
            << " D_k=" << s.head_k_dim;
        EXPECT_LT(rel_err(st_chunk, st_step), 1e-4)
            << "n=" << n << " chunk=" << chunk << " H_k=" << s.n_k_heads << " H_v=" << s.n_v_heads
            << " D_k=" << s.head_k_dim;
        if (n == 200) {  // and both against the double reference
          const RefResult ref = reference(in, state0);
          EXPECT_LT(rel_err(o_chunk, ref.out), 1e-4);
          EXPECT_LT(rel_err(st_chunk, ref.state), 1e-4);
        }
      }
    }
  }
}

TEST_P(DeltaRule, ChunkedHandlesExtremeDecays) {
  // Almost no decay (g ~ -1e-4: the state keeps everything, the hardest case for rounding) and
  // very strong decay (g ~ -30: exp underflows towards 0 inside a chunk).
  ThreadPool pool(1);
  const DeltaNetShape s = make_shape(2, 4, 32, 32, DeltaNetHeadMap::Tiled);
  for (float g_scale : {1e-4f, 20.0f}) {
    const Inputs in = make_inputs(s, 200, 7, g_scale);
    const std::vector<float> state0 = random_state(s, 8, 0.3f);
    const RefResult ref = reference(in, state0);
    std::vector<float> st = state0, out(in.n * s.n_v_heads * s.head_v_dim);
    run_range(chunked_fn, in, 0, in.n, st.data(), out.data(), pool);
    EXPECT_LT(rel_err(out, ref.out), 1e-4) << "g_scale=" << g_scale;
    EXPECT_LT(rel_err(st, ref.state), 1e-4) << "g_scale=" << g_scale;
    for (float x : out) ASSERT_TRUE(std::isfinite(x));
  }
}

TEST_P(DeltaRule, StateContinuesAcrossCallsAndForms) {
  // 100 tokens chunked, then 37 by step == 137 by step; also 137 chunked in uneven calls.
  ThreadPool pool(2);
  for (const DeltaNetShape& s : {make_shape(2, 4, 16, 16, DeltaNetHeadMap::Tiled),
                                 make_shape(2, 6, 32, 24, DeltaNetHeadMap::Grouped)}) {
    const Inputs in = make_inputs(s, 137, 21);
    const int64_t vd = int64_t(s.n_v_heads) * s.head_v_dim;
    std::vector<float> st_ref(s.state_floats(), 0.0f), o_ref(137 * vd);
    run_range(step_fn, in, 0, 137, st_ref.data(), o_ref.data(), pool);

    std::vector<float> st(s.state_floats(), 0.0f), o(137 * vd);
    run_range(chunked_fn, in, 0, 100, st.data(), o.data(), pool);
    run_range(step_fn, in, 100, 37, st.data(), o.data(), pool);
    EXPECT_LT(rel_err(o, o_ref), 1e-4);
    EXPECT_LT(rel_err(st, st_ref), 1e-4);

    std::vector<float> st2(s.state_floats(), 0.0f), o2(137 * vd);
    int64_t t = 0;
    for (int64_t len : {5, 70, 1, 61}) {
      run_range(chunked_fn, in, t, len, st2.data(), o2.data(), pool);
      t += len;
    }
    ASSERT_EQ(t, 137);
    EXPECT_LT(rel_err(o2, o_ref), 1e-4);
    EXPECT_LT(rel_err(st2, st_ref), 1e-4);
  }
}

TEST_P(DeltaRule, HeadMappingSelectsTheDocumentedKeyHead) {
  // Key head 1 is all zeros for q and k: v-heads reading it output exactly 0 (zero state).
  // Tiled: v-heads 1, 3 read k-head 1. Grouped: v-heads 2, 3 do.
  ThreadPool pool(1);
  for (DeltaNetHeadMap map : {DeltaNetHeadMap::Tiled, DeltaNetHeadMap::Grouped}) {
    const DeltaNetShape s = make_shape(2, 4, 8, 8, map);
    Inputs in = make_inputs(s, 3, 5);
    for (int64_t t = 0; t < 3; ++t)
      for (int i = 0; i < 8; ++i) in.q[(t * 2 + 1) * 8 + i] = in.k[(t * 2 + 1) * 8 + i] = 0.0f;
    for (auto fn : {step_fn, chunked_fn}) {
      std::vector<float> st(s.state_floats(), 0.0f), out(3 * 4 * 8);
      run_range(fn, in, 0, 3, st.data(), out.data(), pool);
      for (int h = 0; h < 4; ++h) {
        const bool reads_zero_head = map == DeltaNetHeadMap::Tiled ? (h % 2 == 1) : (h / 2 == 1);
        double mag = 0.0;
        for (int64_t t = 0; t < 3; ++t)
          for (int j = 0; j < 8; ++j) mag += std::fabs(out[(t * 4 + h) * 8 + j]);
        if (reads_zero_head)
          EXPECT_EQ(mag, 0.0) << "head " << h;
        else
          EXPECT_GT(mag, 1e-3) << "head " << h;
      }
    }
  }
}

TEST_P(DeltaRule, ThreadCountDoesNotChangeResults) {
  const DeltaNetShape s = make_shape(2, 6, 16, 16, DeltaNetHeadMap::Tiled);
  const Inputs in = make_inputs(s, 90, 3);
  const int64_t vd = int64_t(s.n_v_heads) * s.head_v_dim;
  std::vector<float> st1(s.state_floats(), 0.0f), o1(90 * vd), st3 = st1, o3 = o1;
  ThreadPool p1(1), p3(3);
  run_range(chunked_fn, in, 0, 90, st1.data(), o1.data(), p1);
  run_range(chunked_fn, in, 0, 90, st3.data(), o3.data(), p3);
  EXPECT_EQ(o1, o3);
  EXPECT_EQ(st1, st3);
}

TEST_P(DeltaRule, DispatcherAgreesWithBothForms) {
  ThreadPool pool(2);
  const DeltaNetShape s = make_shape(2, 4, 16, 16, DeltaNetHeadMap::Tiled);
  for (int64_t n : {1, 3, 100}) {
    const Inputs in = make_inputs(s, n, 11);
    const int64_t vd = int64_t(s.n_v_heads) * s.head_v_dim;
    std::vector<float> st_a(s.state_floats(), 0.0f), o_a(n * vd), st_b = st_a, o_b = o_a;
    run_range(step_fn, in, 0, n, st_a.data(), o_a.data(), pool);
    run_range(gated_delta_rule, in, 0, n, st_b.data(), o_b.data(), pool);
    EXPECT_LT(rel_err(o_b, o_a), 1e-4);
    EXPECT_LT(rel_err(st_b, st_a), 1e-4);
  }
}

INSTANTIATE_PER_CPU_LEVEL(DeltaRule);

TEST(DeltaRuleArgs, RefusesBadShapes) {
  ThreadPool pool(1);
  float dummy[64] = {};
  DeltaNetIO io{1, dummy, 8, dummy, 8, dummy, 24, dummy, 3, dummy, 3, dummy + 32, 24};
  DeltaNetShape s = make_shape(2, 3, 4, 8, DeltaNetHeadMap::Tiled);  // 3 % 2 != 0
  EXPECT_THROW(gated_delta_rule_step(s, io, dummy, pool), Error);
  EXPECT_THROW(gated_delta_rule_chunked(s, io, dummy, pool), Error);
  s = make_shape(1, 1, 0, 8, DeltaNetHeadMap::Tiled);
  EXPECT_THROW(gated_delta_rule(s, io, dummy, pool), Error);
  s = make_shape(1, 1, 8, 8, DeltaNetHeadMap::Tiled);
  io.v_stride = 4;  // shorter than H_v*D_v
  EXPECT_THROW(gated_delta_rule_step(s, io, dummy, pool), Error);
  io.v_stride = 8;
  io.beta = nullptr;
  EXPECT_THROW(gated_delta_rule_chunked(s, io, dummy, pool), Error);
  io.beta = dummy;
  EXPECT_THROW(gated_delta_rule_chunked(s, io, dummy, pool, 0), Error);  // chunk length
  EXPECT_THROW(gated_delta_rule_chunked(s, io, dummy, pool, kDeltaNetMaxChunk + 1), Error);
  io.n_tokens = 0;  // nothing to do: no buffer needed
  EXPECT_NO_THROW(gated_delta_rule_chunked(s, io, nullptr, pool));
}

// Informational: run with --gtest_also_run_disabled_tests to see step vs chunked prefill time
// for a Qwen3.5-like layer (16 K / 32 V heads of 128).
TEST(DeltaRuleSpeed, DISABLED_PrefillSpeed) {
  ThreadPool pool(2);
  const DeltaNetShape s = make_shape(16, 32, 128, 128, DeltaNetHeadMap::Tiled);
  const int64_t n = 512;
  const Inputs in = make_inputs(s, n, 1);
  std::vector<float> out(n * 32 * 128);
  using Fn = void (*)(const DeltaNetShape&, const DeltaNetIO&, float*, ThreadPool&);
  const std::pair<const char*, Fn> forms[] = {{"step", step_fn}, {"chunked", chunked_fn}};
  for (auto [name, fn] : forms) {
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep) {
      std::vector<float> st(s.state_floats(), 0.0f);
      const auto t0 = std::chrono::steady_clock::now();
      run_range(fn, in, 0, n, st.data(), out.data(), pool);
      best = std::min(best,
                      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    std::printf("%-8s %lld tokens: %.1f ms (%.1f us/token)\n", name, (long long)n, best * 1e3,
                best * 1e6 / double(n));
  }
}

// ---- conv1d ---------------------------------------------------------------------------------

// Plain definition: window = [state | x], out[t][c] = silu(sum_i w[c][i] * window[t+i][c]).
std::vector<double> conv_reference(const std::vector<float>& x, int64_t n, int C,
                                   const std::vector<float>& w, int d_conv,
                                   const std::vector<float>& state) {
  const int ns = d_conv - 1;
  std::vector<double> out(n * C);
  for (int64_t t = 0; t < n; ++t)
    for (int c = 0; c < C; ++c) {
      double s = 0.0;
      for (int i = 0; i < d_conv; ++i) {
        const int64_t p = t + i;
        const double val = p < ns ? state[size_t(c) * ns + p] : x[(p - ns) * C + c];
        s += double(w[size_t(c) * d_conv + i]) * val;
      }
      out[t * C + c] = s / (1.0 + std::exp(-s));
    }
  return out;
}

TEST_P(Conv1d, HandComputedValuesAndStateUpdate) {
  // 2 channels, d_conv 3, 2 tokens; state holds 2 past inputs per channel, time fastest.
  ThreadPool pool(1);
  const float w[6] = {0.5f, -1.0f, 2.0f,   // channel 0: taps oldest..newest
                      1.0f, 1.0f,  1.0f};  // channel 1
  float state[4] = {1.0f, 2.0f,            // channel 0: x_{-2}, x_{-1}
                    -1.0f, 3.0f};          // channel 1
  const float x[4] = {3.0f, 0.5f,          // token 0: ch0, ch1
                      -2.0f, 4.0f};        // token 1
  float out[4];
  causal_conv1d_silu(x, 2, 2, 2, w, 3, state, out, 2, pool);
  auto silu = [](double v) { return v / (1.0 + std::exp(-v)); };
  EXPECT_NEAR(out[0], silu(0.5 * 1 - 1.0 * 2 + 2.0 * 3), 1e-6);   // ch0 t0
  EXPECT_NEAR(out[1], silu(-1.0 + 3.0 + 0.5), 1e-6);              // ch1 t0
  EXPECT_NEAR(out[2], silu(0.5 * 2 - 1.0 * 3 + 2.0 * -2), 1e-6);  // ch0 t1
  EXPECT_NEAR(out[3], silu(3.0 + 0.5 + 4.0), 1e-6);               // ch1 t1
  EXPECT_EQ(state[0], 3.0f);  // last two raw inputs of channel 0, oldest first
  EXPECT_EQ(state[1], -2.0f);
  EXPECT_EQ(state[2], 0.5f);
  EXPECT_EQ(state[3], 4.0f);
}

TEST_P(Conv1d, MatchesReferenceAndContinuesAcrossCalls) {
  // 150 channels (several blocks plus a tail), d_conv 4; 10 tokens at once == 1 + 2 + 7 tokens
  // in separate calls (the 1- and 2-token calls are shorter than the state).
  ThreadPool pool(2);
  const int C = 150, d_conv = 4;
  const int64_t n = 10;
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * C), w(size_t(C) * d_conv), state0(size_t(C) * (d_conv - 1));
  for (auto& v : x) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  for (auto& v : state0) v = normal(rng);

  const std::vector<double> ref = conv_reference(x, n, C, w, d_conv, state0);
  std::vector<float> state = state0, out(n * C);
  causal_conv1d_silu(x.data(), C, n, C, w.data(), d_conv, state.data(), out.data(), C, pool);
  for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref[i], 1e-5) << i;
  for (int c = 0; c < C; ++c)
    for (int t = 0; t < d_conv - 1; ++t)
      EXPECT_EQ(state[size_t(c) * (d_conv - 1) + t], x[(n - (d_conv - 1) + t) * C + c]);

  std::vector<float> state_split = state0, out_split(n * C);
  int64_t t0 = 0;
  for (int64_t len : {1, 2, 7}) {
    causal_conv1d_silu(x.data() + t0 * C, C, len, C, w.data(), d_conv, state_split.data(),
                       out_split.data() + t0 * C, C, pool);
    t0 += len;
  }
  EXPECT_EQ(out_split, out);
  EXPECT_EQ(state_split, state);
}

TEST_P(Conv1d, StridedRowsAndKernelOfOne) {
  ThreadPool pool(1);
  // Rows of 5 floats of which 3 are channels; d_conv 1 has no state at all.
  const float x[10] = {1, 2, 3, 99, 99, -1, -2, -3, 99, 99};
  const float w[3] = {2.0f, 0.0f, -1.0f};
  float out[8] = {7, 7, 7, 7, 7, 7, 7, 7};
  causal_conv1d_silu(x, 5, 2, 3, w, 1, nullptr, out, 4, pool);
  auto silu = [](float v) { return v / (1.0f + std::exp(-v)); };
  EXPECT_FLOAT_EQ(out[0], silu(2.0f));
  EXPECT_FLOAT_EQ(out[1], 0.0f);
  EXPECT_FLOAT_EQ(out[2], silu(-3.0f));
  EXPECT_EQ(out[3], 7.0f);  // padding untouched
  EXPECT_FLOAT_EQ(out[4], silu(-2.0f));
  EXPECT_FLOAT_EQ(out[6], silu(3.0f));
}

TEST_P(Conv1d, SiluIsAccurateOverTheWholeRange) {
  // d_conv 1 with weight 1 makes the output silu(x): within 2 ulp of the exact value wherever it
  // is a normal float, exactly x for large x and +-0 far below.
  ThreadPool pool(1);
  std::vector<float> x;
  for (double v = -87.0; v <= 95.0; v += 0.0173) x.push_back(float(v));
  for (float v : {0.0f, -0.0f, 1e-30f, -1e-30f, -100.0f, -1000.0f, 1000.0f}) x.push_back(v);
  std::vector<float> out(x.size());
  const float w = 1.0f;
  causal_conv1d_silu(x.data(), 1, int64_t(x.size()), 1, &w, 1, nullptr, out.data(), 1, pool);
  for (size_t i = 0; i < x.size(); ++i) {
    const double ref = double(x[i]) / (1.0 + std::exp(-double(x[i])));
    if (x[i] < -87.0f)
      EXPECT_LT(std::fabs(out[i]), 1e-36) << x[i];
    else
      EXPECT_LE(std::fabs(out[i] - ref), 2.5e-7 * std::fabs(ref)) << x[i];
  }
}

TEST_P(Conv1d, FusedNormalizationMatchesSeparateCalls) {
  // Rows of 2 k-heads of 24 for q, the same for k, and 40 v channels (136 channels, a vector
  // tail), padded to 140 floats; 20 tokens in one call (split across threads) and as 1 + 2 + 17
  // tokens (the 1- and 2-token calls take the decoding path): bit-identical to the conv followed
  // by delta_net_normalize_qk, state included.
  const int hk = 2, dk = 24, C = 2 * hk * dk + 40, stride = 140, d_conv = 4;
  const int64_t n = 20;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(n * stride), w(size_t(C) * d_conv), state0(size_t(C) * (d_conv - 1));
  for (auto& v : x) v = normal(rng);
  for (auto& v : w) v = normal(rng);
  for (auto& v : state0) v = normal(rng);
  ThreadPool one(1);
  std::vector<float> state_expect = state0, expect(n * stride, 5.0f);
  causal_conv1d_silu(x.data(), stride, n, C, w.data(), d_conv, state_expect.data(), expect.data(),
                     stride, one);
  delta_net_normalize_qk(expect.data(), stride, expect.data() + hk * dk, stride, n, hk, dk, 1e-6f);
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    std::vector<float> state = state0, out(n * stride, 5.0f);
    causal_conv1d_silu_normalize_qk(x.data(), stride, n, C, w.data(), d_conv, state.data(),
                                    out.data(), stride, hk, dk, 1e-6f, pool);
    EXPECT_EQ(out, expect) << threads << " threads";
    EXPECT_EQ(state, state_expect);
    std::vector<float> state_split = state0, out_split(n * stride, 5.0f);
    int64_t t0 = 0;
    for (int64_t len : {1, 2, 17}) {
      causal_conv1d_silu_normalize_qk(x.data() + t0 * stride, stride, len, C, w.data(), d_conv,
                                      state_split.data(), out_split.data() + t0 * stride, stride,
                                      hk, dk, 1e-6f, pool);
      t0 += len;
    }
    EXPECT_EQ(out_split, expect) << threads << " threads";
    EXPECT_EQ(state_split, state_expect);
  }
  std::vector<float> state = state0, out(n * stride);
  EXPECT_THROW(causal_conv1d_silu_normalize_qk(x.data(), stride, n, C, w.data(), d_conv,
                                               state.data(), out.data(), stride, 3, 24, 1e-6f,
                                               one),
               Error);  // 2 * 3 * 24 channels do not fit in 136
}

INSTANTIATE_PER_CPU_LEVEL(Conv1d);

TEST(Conv1dArgs, RefusesBadArguments) {
  ThreadPool pool(1);
  float buf[16] = {};
  EXPECT_THROW(causal_conv1d_silu(buf, 2, 1, 2, buf, 0, buf, buf, 2, pool), Error);
  EXPECT_THROW(causal_conv1d_silu(buf, 2, 1, 2, buf, 65, buf, buf, 2, pool), Error);
  EXPECT_THROW(causal_conv1d_silu(buf, 1, 1, 2, buf, 2, buf, buf, 2, pool), Error);
  EXPECT_THROW(causal_conv1d_silu(buf, 2, 1, 2, buf, 2, nullptr, buf, 2, pool), Error);
}

// ---- small helpers --------------------------------------------------------------------------

TEST(L2Norm, UnitNormAndEpsFloor) {
  float x[4] = {3.0f, 0.0f, -4.0f, 0.0f}, y[4];
  l2_norm(x, y, 4, 1e-6f);
  EXPECT_FLOAT_EQ(y[0], 0.6f);
  EXPECT_FLOAT_EQ(y[2], -0.8f);
  // ||x|| = 5e-8 < eps = 1e-6: ggml divides by eps, not by sqrt(sum + eps) (which would give
  // 5e-8 / 1e-3 = 5e-5 for x[0]).
  float tiny[2] = {3e-8f, 4e-8f};
  l2_norm(tiny, tiny, 2, 1e-6f);
  EXPECT_NEAR(tiny[0], 0.03f, 1e-7);
  EXPECT_NEAR(tiny[1], 0.04f, 1e-7);
}

TEST(NormalizeQK, NormalisesEachHeadAndScalesQ) {
  // 2 tokens, 2 k-heads of 4, rows padded to 10 floats.
  std::vector<float> q(20), k(20);
  for (int i = 0; i < 20; ++i) {
    q[i] = float(i % 7) - 2.5f;
    k[i] = float(i % 5) + 0.5f;
  }
  const std::vector<float> q0 = q, k0 = k;
  delta_net_normalize_qk(q.data(), 10, k.data(), 10, 2, 2, 4, 1e-6f);
  for (int t = 0; t < 2; ++t)
    for (int h = 0; h < 2; ++h) {
      const int b = t * 10 + h * 4;
      double nq = 0, nk = 0;
      for (int i = 0; i < 4; ++i) {
        nq += double(q0[b + i]) * q0[b + i];
        nk += double(k0[b + i]) * k0[b + i];
      }
      for (int i = 0; i < 4; ++i) {
        EXPECT_NEAR(q[b + i], q0[b + i] / std::sqrt(nq) * 0.5, 1e-6);  // 1/sqrt(4)
        EXPECT_NEAR(k[b + i], k0[b + i] / std::sqrt(nk), 1e-6);
      }
    }
  for (int t = 0; t < 2; ++t)
    for (int i = 8; i < 10; ++i) EXPECT_EQ(q[t * 10 + i], q0[t * 10 + i]);  // padding untouched
}

TEST(Gates, SoftplusSigmoidAndDecay) {
  const float beta_logit[3] = {0.0f, 2.0f, -30.0f};
  const float alpha[3] = {0.0f, 25.0f, -1.0f};
  const float dt_bias[3] = {0.5f, 0.0f, -1.0f};
  const float ssm_a[3] = {-2.0f, -0.5f, -16.0f};
  float beta[3], g[3];
  delta_net_gates(beta_logit, alpha, dt_bias, ssm_a, 3, beta, g);
  EXPECT_FLOAT_EQ(beta[0], 0.5f);
  EXPECT_NEAR(beta[1], 1.0 / (1.0 + std::exp(-2.0)), 1e-7);
  EXPECT_GT(beta[2], 0.0f);
  EXPECT_NEAR(g[0], std::log1p(std::exp(0.5)) * -2.0, 1e-6);
  EXPECT_FLOAT_EQ(g[1], 25.0f * -0.5f);  // softplus(x) = x above 20
  EXPECT_NEAR(g[2], std::log1p(std::exp(-2.0)) * -16.0, 1e-5);
}

TEST_P(GatedRmsNorm, MatchesFormula) {
  // 2 heads of 5; weight shared by the heads.
  const float o[10] = {1, -2, 3, 0.5f, 0, 4, 4, -4, 1, 2};
  const float z[10] = {0.3f, -1, 2, 0, 5, -0.5f, 1, 1, -3, 0.1f};
  const float w[5] = {1.0f, 0.5f, 2.0f, -1.0f, 1.5f};
  float y[10];
  gated_rms_norm(o, z, w, y, 2, 5, 1e-6f);
  for (int h = 0; h < 2; ++h) {
    double ms = 0;
    for (int d = 0; d < 5; ++d) ms += double(o[h * 5 + d]) * o[h * 5 + d];
    ms /= 5;
    for (int d = 0; d < 5; ++d) {
      const double zz = z[h * 5 + d];
      const double expect = o[h * 5 + d] / std::sqrt(ms + 1e-6) * w[d] * zz / (1 + std::exp(-zz));
      EXPECT_NEAR(y[h * 5 + d], expect, 1e-5) << h << "," << d;
    }
  }
  float inplace[10];
  std::copy(o, o + 10, inplace);
  gated_rms_norm(inplace, z, w, inplace, 2, 5, 1e-6f);
  for (int i = 0; i < 10; ++i) EXPECT_EQ(inplace[i], y[i]);
}

TEST_P(GatedRmsNorm, TokenRowsAcrossThreadsMatchOneTokenAtATime) {
  // 40 tokens (enough to be split across the pool), 11 heads of 24 (a whole group of 8 heads
  // plus 3, a SiLU tail of 8), rows padded to 300 floats; bit-identical to gated_rms_norm per
  // token, whatever the thread count, in place too.
  const int64_t n = 40, heads = 11, hd = 24, stride = 300;
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> o(n * stride), z(n * stride), w(hd);
  for (auto& v : o) v = normal(rng);
  for (auto& v : z) v = normal(rng);
  for (auto& v : w) v = 1.0f + 0.1f * normal(rng);
  z[5] = 150.0f;  // a SiLU exponent outside the plain power-of-two range
  z[stride + 7] = -150.0f;
  std::vector<float> expect(n * stride, 7.0f);
  for (int64_t t = 0; t < n; ++t)
    gated_rms_norm(o.data() + t * stride, z.data() + t * stride, w.data(),
                   expect.data() + t * stride, heads, hd, 1e-6f);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    std::vector<float> y(n * stride, 7.0f);
    gated_rms_norm_rows(o.data(), stride, z.data(), stride, w.data(), y.data(), stride, n, heads,
                        hd, 1e-6f, pool);
    EXPECT_EQ(y, expect) << threads << " threads";
    std::vector<float> inplace = o;
    gated_rms_norm_rows(inplace.data(), stride, z.data(), stride, w.data(), inplace.data(),
                        stride, n, heads, hd, 1e-6f, pool);
    for (int64_t t = 0; t < n; ++t)
      for (int64_t i = 0; i < heads * hd; ++i)
        ASSERT_EQ(inplace[t * stride + i], expect[t * stride + i]) << t << "," << i;
  }
}

INSTANTIATE_PER_CPU_LEVEL(GatedRmsNorm);

TEST(NormalizeQK, MatchesL2NormPerHeadOnEveryThreadCount) {
  // 37 tokens, 9 k-heads of 20 (a group of 8 plus 1, vector tails), rows padded: every head is
  // bit-identical to l2_norm followed by the 1/sqrt(D_k) scaling of q, pool or not.
  const int64_t n = 37, stride = 200;
  const int heads = 9, hd = 20;
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> q0(n * stride), k0(n * stride);
  for (auto& v : q0) v = normal(rng);
  for (auto& v : k0) v = normal(rng);
  std::vector<float> q_expect = q0, k_expect = k0;
  const float q_scale = 1.0f / std::sqrt(float(hd));
  for (int64_t t = 0; t < n; ++t)
    for (int h = 0; h < heads; ++h) {
      float* qh = q_expect.data() + t * stride + h * hd;
      float* kh = k_expect.data() + t * stride + h * hd;
      l2_norm(qh, qh, hd, 1e-6f);
      for (int i = 0; i < hd; ++i) qh[i] *= q_scale;
      l2_norm(kh, kh, hd, 1e-6f);
    }
  std::vector<float> q = q0, k = k0;
  delta_net_normalize_qk(q.data(), stride, k.data(), stride, n, heads, hd, 1e-6f);
  EXPECT_EQ(q, q_expect);
  EXPECT_EQ(k, k_expect);
  for (int threads : {1, 2, 3}) {
    ThreadPool pool(threads);
    q = q0;
    k = k0;
    delta_net_normalize_qk(q.data(), stride, k.data(), stride, n, heads, hd, 1e-6f, pool);
    EXPECT_EQ(q, q_expect) << threads << " threads";
    EXPECT_EQ(k, k_expect) << threads << " threads";
  }
}

}  // namespace
}  // namespace agentkv
