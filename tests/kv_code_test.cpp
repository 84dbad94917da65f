// The calibrated KV code (KV type tqc3: kernels/coded_rows.h, memory/kv_code.h, kv_code_fit.h):
// rows round-trip to the nearest level of each coordinate's width at exactly 3.25 bits, widths go
// where they remove the most weighted distortion, the query / output maps make attention over
// coded rows equal attention over the decoded ones, code files refuse damage, and on the trained
// model the code beats tq3 and rotated q4_0, survives a context shift, and a state is restored
// only under the code it was written under.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "agentkv/batch.h"
#include "agentkv/context.h"
#include "agentkv/error.h"
#include "agentkv/kv_code.h"
#include "agentkv/kv_status.h"
#include "agentkv/model.h"
#include "agentkv/session_state.h"
#include "engine/context_impl.h"
#include "kernels/attention.h"
#include "kernels/coded_rows.h"
#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "kernels/small_matvec.h"
#include "kernels/threadpool.h"
#include "memory/kv_code.h"
#include "memory/kv_code_fit.h"
#include "trained_model.h"

namespace agentkv {
namespace {

using memory::KvCode;

// A descending width profile of head_dim coordinates spending exactly 3.25 bits per element.
std::vector<uint8_t> random_widths(int64_t hd, std::mt19937& rng) {
  std::vector<uint8_t> w(static_cast<size_t>(hd), 0);
  int64_t left = hd / 32 * kCodedBitsPer32;
  std::uniform_int_distribution<int64_t> pick(0, hd - 1);
  while (left > 0) {
    const size_t i = static_cast<size_t>(pick(rng));
    if (w[i] < kCodedMaxWidth) ++w[i], --left;
  }
  std::sort(w.rbegin(), w.rend());
  return w;
}

// The level a width holds nearest to u: c - (2^w - 1)/2 for c = clamp(floor(u + 2^(w-1))).
float reference_level(float u, int w) {
  if (w == 0) return 0.0f;
  const int top = (1 << w) - 1;
  const int c = std::clamp(static_cast<int>(std::floor(static_cast<double>(u) + (1 << (w - 1)))), 0, top);
  return static_cast<float>(c) - 0.5f * static_cast<float>(top);
}

// Every level's unpacking (portable, AVX2 in-lane shuffles, AVX-512 VBMI permutes) gives the same floats.
class CodedRows : public ::testing::TestWithParam<CpuLevel> {
 protected:
  void SetUp() override {
    if (set_cpu_level(GetParam()) != GetParam()) GTEST_SKIP() << "the CPU lacks this level";
  }
  void TearDown() override { set_cpu_level(detected_cpu_level()); }
};
INSTANTIATE_TEST_SUITE_P(Levels, CodedRows, ::testing::Values(CpuLevel::Scalar, CpuLevel::Avx2, CpuLevel::Avx512),
                         [](const auto& info) { return std::string(cpu_level_name(info.param)); });

TEST_P(CodedRows, RoundTripIsTheNearestLevelAtThreePointTwoFiveBits) {
  EXPECT_EQ(ggml_row_size(GgmlType::TQC3, 64), 26u);  // 3.25 bits per element, nothing else stored
  EXPECT_EQ(ggml_row_size(GgmlType::TQC3, 128) * 8, 128u * 13 / 4);
  std::mt19937 rng(7);
  for (int64_t hd : {32, 64, 128, 256}) {
    std::vector<std::vector<uint8_t>> widths;
    for (int h = 0; h < 3; ++h) widths.push_back(random_widths(hd, rng));
    widths.push_back(std::vector<uint8_t>(static_cast<size_t>(hd), 0));
    std::fill(widths.back().begin(), widths.back().begin() + hd * 13 / 28, kCodedMaxWidth);  // 7-bit head
    widths.back()[static_cast<size_t>(hd * 13 / 28)] = static_cast<uint8_t>(hd * 13 / 4 - hd * 13 / 28 * 7);
    const CodedHeads heads(hd, widths);
    ASSERT_EQ(heads.head_bytes(), static_cast<size_t>(hd * 13 / 32));
    std::normal_distribution<float> nd(0.f, 40.f);
    std::vector<float> u(static_cast<size_t>(hd)), back(static_cast<size_t>(hd));
    std::vector<uint8_t> bytes(heads.head_bytes() + 8, 0xAB);
    std::vector<int8_t> levels(static_cast<size_t>(hd));
    for (int trial = 0; trial < 200; ++trial)
      for (int64_t h = 0; h < heads.n_heads(); ++h) {
        for (auto& x : u) x = trial % 3 == 0 ? nd(rng) * 0.05f : nd(rng);  // inside and far outside the range
        heads.encode(h, u.data(), bytes.data());
        EXPECT_EQ(bytes[heads.head_bytes()], 0xAB) << "wrote past the head's bytes";
        heads.decode(h, bytes.data(), back.data());
        const uint8_t flip = trial % 2 ? 0x80 : 0;
        heads.levels(h, bytes.data(), levels.data(), flip);
        for (int64_t i = 0; i < hd; ++i) {
          const float want = reference_level(u[static_cast<size_t>(i)], heads.widths(h)[static_cast<size_t>(i)]);
          ASSERT_EQ(back[static_cast<size_t>(i)], want)
              << "hd " << hd << " head " << h << " coordinate " << i << " u " << u[static_cast<size_t>(i)];
          ASSERT_EQ(static_cast<int8_t>(static_cast<uint8_t>(levels[static_cast<size_t>(i)]) ^ flip), static_cast<int>(2 * want))
              << "doubled int8 level, hd " << hd << " coordinate " << i;
        }
      }
    // A whole row (every head's slice back to back, nothing readable past it) unpacks as its heads
    // do one by one, from any first head on.
    const size_t hb = heads.head_bytes();
    const int64_t nh = heads.n_heads();
    std::vector<uint8_t> row(static_cast<size_t>(nh) * hb);
    std::vector<int8_t> whole(static_cast<size_t>(nh * hd)), one(static_cast<size_t>(hd));
    for (int64_t h = 0; h < nh; ++h) {
      for (auto& x : u) x = nd(rng);
      heads.encode(h, u.data(), row.data() + h * hb);
    }
    for (int64_t first = 0; first < nh; ++first)
      for (const uint8_t flip : {uint8_t{0}, uint8_t{0x80}}) {
        heads.levels(CodedHeads::active_unpack(), first, nh - first, row.data() + first * hb, whole.data(), flip);
        for (int64_t h = first; h < nh; ++h) {
          heads.levels(CodedUnpack::kPortable, h, 1, row.data() + h * hb, one.data(), flip);
          ASSERT_TRUE(std::equal(one.begin(), one.end(), whole.begin() + (h - first) * hd)) << "hd " << hd << " heads " << first << ".. head " << h;
        }
      }
  }
}

// The maps' product (kernels/small_matvec.h) at every level: a double-precision sum of the rows,
// for widths that fill whole register strips, part of one, or no vector at all.
TEST_P(CodedRows, SmallMatrixProductIsTheRowsSum) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  for (int64_t n : {20, 40, 64, 96, 128, 160, 256}) {
    std::vector<float> m(static_cast<size_t>(n * n)), x(static_cast<size_t>(n)), y(x.size() + 1, 7.0f);
    for (auto& v : m) v = nd(rng);
    for (auto& v : x) v = nd(rng);
    small_mat_t_vec(m.data(), x.data(), y.data(), n);
    for (int64_t k = 0; k < n; ++k) {
      double want = 0;
      for (int64_t i = 0; i < n; ++i) want += static_cast<double>(m[static_cast<size_t>(i * n + k)]) * x[static_cast<size_t>(i)];
      ASSERT_NEAR(y[static_cast<size_t>(k)], want, 1e-4 * std::sqrt(static_cast<double>(n))) << "n " << n << " column " << k;
    }
    EXPECT_EQ(y[static_cast<size_t>(n)], 7.0f) << "wrote past y";
  }
}

TEST(CodedRowsProfile, RefusesProfilesThatDoNotFillTheType) {
  std::vector<uint8_t> w(64, 3);
  w[0] = w[1] = w[2] = w[3] = 7;
  w[4] = 4;  // 4*7 + 4 + 59*3 = 209 bits: one too many
  EXPECT_THROW(CodedHeads(64, {w}), Error);
  w[4] = 3;
  EXPECT_NO_THROW(CodedHeads(64, {w}));
  std::swap(w[0], w[10]);
  EXPECT_THROW(CodedHeads(64, {w}), Error);  // not descending
  std::vector<uint8_t> wide(64, 0);
  wide[0] = 8;
  EXPECT_THROW(CodedHeads(64, {wide}), Error);
  EXPECT_THROW(CodedHeads(48, {std::vector<uint8_t>(48, 3)}), Error);  // not a multiple of 32
}

TEST(KvCodeFit, WidthsFollowImportanceAndSpendTheBudget) {
  std::mt19937 rng(3);
  std::lognormal_distribution<double> ld(0.0, 2.0);
  for (int trial = 0; trial < 50; ++trial) {
    std::vector<double> imp(64);
    for (auto& x : imp) x = ld(rng);
    if (trial % 5 == 0)
      for (int i = 0; i < 40; ++i) imp[static_cast<size_t>(i)] = 0.0;  // silent coordinates
    const auto w = memory::allocate_widths(imp, 208);
    int64_t sum = 0;
    for (uint8_t x : w) sum += x;
    EXPECT_EQ(sum, 208);
    for (size_t i = 0; i < w.size(); ++i)
      for (size_t j = 0; j < w.size(); ++j)
        if (imp[i] > imp[j]) {
          EXPECT_GE(w[i], w[j]) << "more important coordinate got fewer bits";
        }
    if (trial % 5 == 0) {  // 24 loud coordinates x 7 bits = 168 < 208: the rest spill to silent ones only then
      for (size_t i = 40; i < 64; ++i) EXPECT_EQ(w[i], kCodedMaxWidth);
    }
  }
  // The tabulated steps are the uniform quantizer's optimum: a step 2 % off either way does worse.
  for (int b = 1; b <= kCodedMaxWidth; ++b) {
    const auto mse = [&](double step) {
      double s = 0, wsum = 0;
      const int top = (1 << b) - 1;
      for (int g = 0; g <= 20000; ++g) {
        const double x = -9 + 18.0 * g / 20000, wt = std::exp(-x * x / 2);
        const double c = std::clamp(std::floor(x / step + (1 << (b - 1))), 0.0, double(top)) - top / 2.0;
        s += wt * (x - c * step) * (x - c * step);
        wsum += wt;
      }
      return s / wsum;
    };
    const double at = mse(memory::uniform_step(b));
    EXPECT_NEAR(at, memory::uniform_distortion(b), 2e-4 + 0.01 * at) << b << " bits";
    EXPECT_LT(at, mse(memory::uniform_step(b) * 1.02)) << b;
    EXPECT_LT(at, mse(memory::uniform_step(b) * 0.98)) << b;
  }
}

// Rows drawn with a known V covariance (a random rotation of a steep spectrum) and K coordinates of
// known scales, read by queries of known per-coordinate energy.
struct Synthetic {
  int64_t hd = 64, heads = 2, q_heads = 4;
  std::vector<double> v_basis;  // hd x hd orthonormal (rows)
  std::vector<double> v_sd, k_sd, q_sd;
  std::mt19937 rng{11};
  Synthetic() {
    std::normal_distribution<double> g(0, 1);
    v_basis.resize(static_cast<size_t>(hd * hd));
    for (int64_t i = 0; i < hd; ++i) {
      for (int64_t k = 0; k < hd; ++k) v_basis[static_cast<size_t>(i * hd + k)] = g(rng);
      for (int64_t j = 0; j < i; ++j) {
        double dot = 0;
        for (int64_t k = 0; k < hd; ++k) dot += v_basis[static_cast<size_t>(i * hd + k)] * v_basis[static_cast<size_t>(j * hd + k)];
        for (int64_t k = 0; k < hd; ++k) v_basis[static_cast<size_t>(i * hd + k)] -= dot * v_basis[static_cast<size_t>(j * hd + k)];
      }
      double n = 0;
      for (int64_t k = 0; k < hd; ++k) n += v_basis[static_cast<size_t>(i * hd + k)] * v_basis[static_cast<size_t>(i * hd + k)];
      for (int64_t k = 0; k < hd; ++k) v_basis[static_cast<size_t>(i * hd + k)] /= std::sqrt(n);
    }
    for (int64_t i = 0; i < hd; ++i) {
      v_sd.push_back(std::pow(0.9, static_cast<double>(i)));
      k_sd.push_back(i % 32 < 8 ? 4.0 : 0.5);        // loud low pairs (both halves of a NEOX pair)
      q_sd.push_back(i % 32 >= 24 ? 0.01 : 1.0);      // queries that barely read the last pairs
    }
  }
  void token(float* q, float* k, float* v) {
    std::normal_distribution<double> g(0, 1);
    for (int64_t h = 0; h < heads; ++h) {
      std::vector<double> z(static_cast<size_t>(hd));
      for (int64_t i = 0; i < hd; ++i) z[static_cast<size_t>(i)] = g(rng) * v_sd[static_cast<size_t>(i)];
      for (int64_t k2 = 0; k2 < hd; ++k2) {
        double s = 0;
        for (int64_t i = 0; i < hd; ++i) s += v_basis[static_cast<size_t>(i * hd + k2)] * z[static_cast<size_t>(i)];
        v[h * hd + k2] = static_cast<float>(s);
        k[h * hd + k2] = static_cast<float>(g(rng) * k_sd[static_cast<size_t>(k2)]);
      }
    }
    for (int64_t h = 0; h < q_heads; ++h)
      for (int64_t i = 0; i < hd; ++i) q[h * hd + i] = static_cast<float>(g(rng) * q_sd[static_cast<size_t>(i)]);
  }
  std::shared_ptr<const KvCode> fit(int n) {
    memory::KvMoments m({0, 2}, hd, q_heads, heads);
    std::vector<float> q(static_cast<size_t>(q_heads * hd)), k(static_cast<size_t>(heads * hd)), v(k.size());
    for (int t = 0; t < n; ++t)
      for (int layer : {0, 2}) {
        token(q.data(), k.data(), v.data());
        m.add(layer, q.data(), k.data(), v.data());
      }
    return memory::fit_kv_code(m, hd / 2, hd);
  }
};

TEST(KvCodeFit, SyntheticRowsGetTheirSpectrumsCode) {
  Synthetic s;
  const auto code = s.fit(4000);
  ASSERT_EQ(code->layers().size(), 2u);
  EXPECT_EQ(code->layer(1), nullptr);
  const memory::KvCodeLayer& l = *code->layer(2);
  // K: the loud pairs read by loud queries get the widest codes, the unread pairs the fewest bits.
  const auto& kw = l.k_rows.widths(0);
  EXPECT_GE(kw.front(), 5);
  EXPECT_LE(kw.back(), 1);
  // V: fresh rows through the code, against the isotropic 3.25-bit uniform code's error (~0.02-0.04).
  std::vector<float> q(static_cast<size_t>(s.q_heads * s.hd)), k(static_cast<size_t>(s.heads * s.hd)), v(k.size());
  std::vector<uint8_t> bytes(ggml_row_size(GgmlType::TQC3, s.heads * s.hd));
  std::vector<float> back(k.size());
  double err = 0, energy = 0, score_err = 0, score_energy = 0;
  for (int t = 0; t < 2000; ++t) {
    s.token(q.data(), k.data(), v.data());
    code->encode_row(l, true, v.data(), bytes.data());
    code->decode_row(l, true, bytes.data(), back.data());
    for (size_t i = 0; i < v.size(); ++i) err += (back[i] - v[i]) * (back[i] - v[i]), energy += v[i] * v[i];
    code->encode_row(l, false, k.data(), bytes.data());
    code->decode_row(l, false, bytes.data(), back.data());
    for (int64_t h = 0; h < s.q_heads; ++h) {  // the score error q . dk is what K's code minimizes
      double d = 0, e = 0;
      for (int64_t i = 0; i < s.hd; ++i) {
        const size_t ki = static_cast<size_t>((h / 2) * s.hd + i);
        d += q[static_cast<size_t>(h * s.hd + i)] * (back[ki] - k[ki]);
        e += q[static_cast<size_t>(h * s.hd + i)] * k[ki];
      }
      score_err += d * d, score_energy += e * e;
    }
  }
  std::printf("synthetic rows: V relative error %.4f, K relative score error %.4f\n", err / energy, score_err / score_energy);
  EXPECT_LT(err / energy, 0.006);
  EXPECT_LT(score_err / score_energy, 0.006);
}

TEST(KvCodeFit, MapsTurnCodeUnitsIntoScoresAndOutputs) {
  Synthetic s;
  const auto code = s.fit(500);
  const memory::KvCodeLayer& l = *code->layer(0);
  std::vector<float> q(static_cast<size_t>(s.q_heads * s.hd)), k(static_cast<size_t>(s.heads * s.hd)), v(k.size());
  std::vector<uint8_t> kb(ggml_row_size(GgmlType::TQC3, s.heads * s.hd)), vb(kb.size());
  std::vector<float> k_back(k.size()), v_back(v.size()), u(static_cast<size_t>(s.hd));
  s.token(q.data(), k.data(), v.data());
  code->encode_row(l, false, k.data(), kb.data());
  code->encode_row(l, true, v.data(), vb.data());
  code->decode_row(l, false, kb.data(), k_back.data());
  code->decode_row(l, true, vb.data(), v_back.data());
  std::vector<float> q_mapped = q, out(q.size());
  code->map_query(l, q_mapped.data(), s.q_heads);
  for (int64_t h = 0; h < s.q_heads; ++h) {
    const int64_t g = h / 2;
    l.k_rows.decode(g, kb.data() + g * l.k_rows.head_bytes(), u.data());
    double plain = 0, mapped = 0;
    for (int64_t i = 0; i < s.hd; ++i) {
      plain += q[static_cast<size_t>(h * s.hd + i)] * k_back[static_cast<size_t>(g * s.hd + i)];
      mapped += q_mapped[static_cast<size_t>(h * s.hd + i)] * u[static_cast<size_t>(i)];
    }
    EXPECT_NEAR(mapped, plain, 1e-4 * (1 + std::fabs(plain)));
    l.v_rows.decode(g, vb.data() + g * l.v_rows.head_bytes(), out.data() + h * s.hd);  // one key: output = its row
  }
  code->map_output(l, out.data(), s.q_heads);
  for (int64_t h = 0; h < s.q_heads; ++h)
    for (int64_t i = 0; i < s.hd; ++i)
      EXPECT_NEAR(out[static_cast<size_t>(h * s.hd + i)], v_back[static_cast<size_t>((h / 2) * s.hd + i)], 1e-4);
}

TEST(KvCodeFile, RoundTripsAndRefusesDamage) {
  Synthetic s;
  const auto code = s.fit(300);
  const std::vector<uint8_t> bytes = code->serialize();
  const auto again = KvCode::parse(bytes, "test");
  EXPECT_EQ(again->id(), code->id());
  EXPECT_EQ(again->serialize(), bytes);
  std::vector<uint8_t> flipped = bytes;
  flipped[flipped.size() / 2] ^= 0x10;
  try {
    KvCode::parse(flipped, "code.bin");
    FAIL() << "a damaged code file was read";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("damaged"), std::string::npos) << e.what();
  }
  std::vector<uint8_t> cut(bytes.begin(), bytes.begin() + static_cast<std::ptrdiff_t>(bytes.size() / 3));
  EXPECT_THROW(KvCode::parse(cut, "cut"), Error);
  EXPECT_THROW(KvCode::parse(std::vector<uint8_t>(100, 'x'), "foreign"), Error);
  EXPECT_THROW(load_kv_code("/nonexistent/agentkv.kvcode"), Error);
  Synthetic other;
  other.rng.seed(99);
  EXPECT_NE(other.fit(300)->id(), code->id()) << "the id names the code's contents";
}

// Attention over tqc3 rows equals attention over f32 rows holding the decoded levels (both tiled,
// agentkv's order), for a prefill batch and for one decoded token over many keys. tqc3 keys are
// scored as integer levels against the query in q8_0 (their vec_dot_type, as tq3's), so the f32
// reference reads the query rounded to q8_0.
TEST(KvCodeAttention, CodedRowsReadAsTheirLevels) {
  std::mt19937 rng(5);
  const int64_t hd = 64, hk = 2, hq = 4, n_kv = 2300;
  const CodedHeads k_code(hd, {random_widths(hd, rng), random_widths(hd, rng)});
  const CodedHeads v_code(hd, {random_widths(hd, rng), random_widths(hd, rng)});
  std::normal_distribution<float> nd(0.f, 3.f);
  std::vector<std::vector<uint8_t>> kc(n_kv), vc(n_kv);
  std::vector<std::vector<float>> kf(n_kv), vf(n_kv);
  std::vector<float> u(static_cast<size_t>(hd));
  for (int64_t j = 0; j < n_kv; ++j) {
    for (auto* rows : {&kc, &vc}) (*rows)[static_cast<size_t>(j)].resize(2 * k_code.head_bytes());
    kf[static_cast<size_t>(j)].resize(static_cast<size_t>(hk * hd));
    vf[static_cast<size_t>(j)].resize(static_cast<size_t>(hk * hd));
    for (int64_t h = 0; h < hk; ++h) {
      for (auto& x : u) x = nd(rng);
      k_code.encode(h, u.data(), kc[static_cast<size_t>(j)].data() + h * k_code.head_bytes());
      k_code.decode(h, kc[static_cast<size_t>(j)].data() + h * k_code.head_bytes(), kf[static_cast<size_t>(j)].data() + h * hd);
      for (auto& x : u) x = nd(rng);
      v_code.encode(h, u.data(), vc[static_cast<size_t>(j)].data() + h * v_code.head_bytes());
      v_code.decode(h, vc[static_cast<size_t>(j)].data() + h * v_code.head_bytes(), vf[static_cast<size_t>(j)].data() + h * hd);
    }
  }
  std::vector<const uint8_t*> kcp, vcp, kfp, vfp;
  for (int64_t j = 0; j < n_kv; ++j) {
    kcp.push_back(kc[static_cast<size_t>(j)].data());
    vcp.push_back(vc[static_cast<size_t>(j)].data());
    kfp.push_back(reinterpret_cast<const uint8_t*>(kf[static_cast<size_t>(j)].data()));
    vfp.push_back(reinterpret_cast<const uint8_t*>(vf[static_cast<size_t>(j)].data()));
  }
  ThreadPool pool(2);
  for (int64_t n_tokens : {int64_t{1}, int64_t{37}}) {
    std::vector<float> q(static_cast<size_t>(n_tokens * hq * hd));
    for (auto& x : q) x = nd(rng) * 0.05f;
    std::vector<float> mask(static_cast<size_t>(n_tokens * n_kv), 0.0f);
    for (int64_t t = 0; t < n_tokens; ++t)
      for (int64_t j = n_kv - n_tokens + t + 1; j < n_kv; ++j) mask[static_cast<size_t>(t * n_kv + j)] = -INFINITY;
    std::vector<float> got(q.size()), want(q.size()), q_rounded(q.size());
    std::vector<uint8_t> q8(ggml_row_size(GgmlType::Q8_0, hd));
    for (int64_t r = 0; r < n_tokens * hq; ++r) {
      quantize_row(GgmlType::Q8_0, q.data() + r * hd, q8.data(), hd);
      dequantize_row(GgmlType::Q8_0, q8.data(), q_rounded.data() + r * hd, hd);
    }
    AttentionArgs a;
    a.shape = {static_cast<int>(hq), static_cast<int>(hk), static_cast<int>(hd), 0.125f};
    a.n_tokens = n_tokens;
    a.q = q.data();
    a.q_stride = hq * hd;
    a.n_kv = n_kv;
    a.mask = mask.data();
    a.mask_stride = n_kv;
    a.out_stride = hq * hd;
    a.own_order = true;
    AttentionArgs f = a;
    a.k_rows = kcp.data(), a.v_rows = vcp.data(), a.k_type = a.v_type = GgmlType::TQC3;
    a.k_code = &k_code, a.v_code = &v_code, a.out = got.data();
    f.k_rows = kfp.data(), f.v_rows = vfp.data(), f.k_type = f.v_type = GgmlType::F32, f.out = want.data();
    f.q = q_rounded.data();
    attention(a, pool);
    attention(f, pool);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << n_tokens << " tokens, " << i;
    a.k_code = nullptr;
    EXPECT_THROW(attention(a, pool), Error) << "tqc3 rows without their widths";
  }
}

// ---- the trained model (trained/agentkv-tiny: head width 64, 2 KV heads) ----

// Calibrated on the held-out text's second half (the checks below read its first tokens).
std::shared_ptr<const KvCode> trained_code(uint32_t windows, size_t from) {
  const auto& t = testing_support::trained_model();
  KvCalibrationParams p;
  p.window = 512;
  p.max_windows = windows;
  return calibrate_kv_code(*t.model, std::vector<Token>(t.tokens.begin() + static_cast<std::ptrdiff_t>(from), t.tokens.end()), p);
}

const testing_support::TrainedModel& trained() { return testing_support::trained_model(); }

ContextParams coded(GgmlType k, GgmlType v, std::shared_ptr<const KvCode> code) {
  ContextParams cp;
  cp.n_ctx = 1024;
  cp.kv.type_k = k;
  cp.kv.type_v = v;
  cp.kv.code = std::move(code);
  return cp;
}

// A logits row's log-softmax, in double.
std::vector<double> log_softmax(const float* l, int64_t nv) {
  double m = -1e300, s = 0;
  for (int64_t j = 0; j < nv; ++j) m = std::max(m, double(l[j]));
  for (int64_t j = 0; j < nv; ++j) s += std::exp(double(l[j]) - m);
  std::vector<double> lp(static_cast<size_t>(nv));
  for (int64_t j = 0; j < nv; ++j) lp[static_cast<size_t>(j)] = double(l[j]) - m - std::log(s);
  return lp;
}

// Log-softmax of the last 512 positions of a 1,024-token window (as `bench quality -c 1024` scores).
std::vector<std::vector<double>> window_logprobs(Context& ctx, size_t first) {
  const auto& t = trained();
  Batch head, tail;
  head.add_sequence(t.tokens.data() + first, 512, 0, 0, false);
  tail.add_sequence(t.tokens.data() + first + 512, 512, 512, 0, true);
  EXPECT_EQ(ctx.decode(head), 0);
  EXPECT_EQ(ctx.decode(tail), 0);
  std::vector<std::vector<double>> out;
  const int64_t nv = ctx.model().n_vocab();
  for (int i = 0; i < ctx.n_outputs(); ++i) out.push_back(log_softmax(ctx.logits(i), nv));
  return out;
}

double mean_kl(const std::vector<std::vector<double>>& ref, const std::vector<std::vector<double>>& got) {
  double kl = 0;
  for (size_t i = 0; i < ref.size(); ++i)
    for (size_t j = 0; j < ref[i].size(); ++j) kl += std::exp(ref[i][j]) * (ref[i][j] - got[i][j]);
  return kl / static_cast<double>(ref.size());
}

TEST(KvCodeModel, BeatsTq3AndRotatedQ4_0OnTheTrainedModel) {
  const auto& t = trained();
  const auto code = trained_code(16, t.tokens.size() / 2);
  Context f16(*t.model, coded(GgmlType::F16, GgmlType::F16, nullptr));
  Context c(*t.model, coded(GgmlType::TQC3, GgmlType::TQC3, code));
  Context tq3(*t.model, coded(GgmlType::TQ3, GgmlType::TQ3, nullptr));
  Context q4(*t.model, coded(GgmlType::Q4_0, GgmlType::Q4_0, nullptr));
  EXPECT_EQ(kv_status(c).code_id, code->id());
  EXPECT_FALSE(sequence_memory(c).kv()->layout().rotation.active()) << "a coded side is never Hadamard-rotated";
  double kl_c = 0, kl_tq3 = 0, kl_q4 = 0;
  for (size_t first = 0; first < 12288; first += 1536) {  // 8 windows over what bench quality reads
    for (Context* ctx : {&f16, &c, &tq3, &q4}) ctx->memory().clear();
    const auto ref = window_logprobs(f16, first);
    kl_c += mean_kl(ref, window_logprobs(c, first));
    kl_tq3 += mean_kl(ref, window_logprobs(tq3, first));
    kl_q4 += mean_kl(ref, window_logprobs(q4, first));
  }
  std::printf("KL vs f16 KV over 8 windows: tqc3 %.5f, tq3 %.5f, rotated q4_0 %.5f\n", kl_c / 8, kl_tq3 / 8, kl_q4 / 8);
  EXPECT_LT(kl_c, 0.7 * kl_q4);
  EXPECT_LT(kl_c, 0.4 * kl_tq3);
}

TEST(KvCodeModel, NeedsItsCodeAndRestoresOnlyUnderIt) {
  const auto& t = trained();
  EXPECT_THROW(Context(*t.model, coded(GgmlType::TQC3, GgmlType::F16, nullptr)), Error);
  const auto code = trained_code(4, t.tokens.size() / 2), other = trained_code(4, t.tokens.size() / 2 + 20000);
  ASSERT_NE(code->id(), other->id());
  Context src(*t.model, coded(GgmlType::Q8_0, GgmlType::TQC3, code));
  Batch b;
  b.add_sequence(t.tokens.data(), 100, 0, 0, true);
  ASSERT_EQ(src.decode(b), 0);
  const auto blob = save_seq(src, 0);
  Context wrong(*t.model, coded(GgmlType::Q8_0, GgmlType::TQC3, other));
  try {
    load_seq(wrong, blob, 0);
    FAIL() << "tqc3 rows were restored under another code";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("KV code"), std::string::npos) << e.what();
  }
  Context same(*t.model, coded(GgmlType::Q8_0, GgmlType::TQC3, code));
  load_seq(same, blob, 0);
  Batch n1, n2;
  n1.add(t.tokens[100], 100, {0}, true);
  n2.add(t.tokens[100], 100, {0}, true);
  ASSERT_EQ(src.decode(n1), 0);
  ASSERT_EQ(same.decode(n2), 0);
  EXPECT_EQ(std::vector<float>(src.last_logits(), src.last_logits() + src.model().n_vocab()),
            std::vector<float>(same.last_logits(), same.last_logits() + same.model().n_vocab()));
  const auto saved = KvCode::parse(code->serialize(), "copy");  // a reloaded file is the same code
  Context reloaded(*t.model, coded(GgmlType::Q8_0, GgmlType::TQC3, saved));
  EXPECT_NO_THROW(load_seq(reloaded, blob, 0));
}

// Shifted coded keys are decoded, turned by RoPE and coded again: the logits after a shift stay
// as close to f16 KV computed at the new positions as unshifted coded keys are.
TEST(KvCodeModel, ShiftedKeysStayCloseToKeysComputedThere) {
  const auto& t = trained();
  const auto code = trained_code(8, t.tokens.size() / 2);
  const auto after = [&](GgmlType type, int shift) {
    Context ctx(*t.model, coded(type, type, type == GgmlType::TQC3 ? code : nullptr));
    Batch b;
    b.add_sequence(t.tokens.data() + 500, 300, 0, 0, false);
    EXPECT_EQ(ctx.decode(b), 0);
    if (shift) ctx.memory().seq_add(0, 0, -1, shift);
    std::vector<std::vector<double>> lp;
    for (int i = 0; i < 20; ++i) {
      Batch n;
      n.add(t.tokens[800 + static_cast<size_t>(i)], 300 + shift + i, {0}, true);
      EXPECT_EQ(ctx.decode(n), 0);
      lp.push_back(log_softmax(ctx.last_logits(), ctx.model().n_vocab()));
    }
    return lp;
  };
  const auto ref = after(GgmlType::F16, 0);
  const double unshifted = mean_kl(ref, after(GgmlType::TQC3, 0)), shifted = mean_kl(ref, after(GgmlType::TQC3, 200));
  std::printf("tqc3 KL vs f16: unshifted %.5f, keys shifted by 200 %.5f\n", unshifted, shifted);
  EXPECT_LT(shifted, 2.5 * unshifted + 0.005);
}

}  // namespace
}  // namespace agentkv
