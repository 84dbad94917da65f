// Context shift: seq_add / seq_div followed by the re-rotation of stored keys.
// 1. At the level of KV rows: a key stored for position p and rotated by the shift δ must equal
//    the key computed directly at p + δ (f32, f16, bf16, q8_0: up to each type's rounding).
// 2. End to end on qwen3-micro: RoPE attention depends only on relative positions, so moving a
//    whole cached sequence by +K and decoding the next token at its shifted position must give the
//    logits of the unshifted sequence (tight for f32 K); skipping the rotation must not.
// 3. The mechanism: closing a gap (seq_rm in the middle, seq_add of the tail) gives the right
//    positions, rotates each shifted cell once, and a model that cannot shift refuses cleanly.
// 4. A property test (issue 18): random sequences of shifts, divisions, removals and copies against
//    a reference of the cells, every K row checked against one rotation to its final position.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "agentkv/error.h"
#include "engine/context_impl.h"
#include "kernels/ops.h"
#include "kernels/quant.h"
#include "memory/kv_cache.h"
#include "model/kv_shift.h"
#include "model/model.h"
#include "fixtures.h"

namespace agentkv {
namespace {

using memory::KvCache;
using memory::KvLayout;
using memory::Pos;
using memory::UBatch;

const std::string kModels = std::string(AGENTKV_FIXTURES_DIR) + "/models/";

constexpr int64_t kHeadDim = 64, kHeads = 2, kEmbd = kHeadDim * kHeads;

KeyRotation test_rope(int64_t n_rot) {
  KeyRotation r;
  r.head_dim = kHeadDim;
  r.n_rot = n_rot;
  r.freq_base = 1000000.f;  // Qwen3's
  r.freq_scale = 1.f;
  return r;
}

// A raw (unrotated) key per token, N(0, 1).
std::vector<float> raw_keys(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> k(static_cast<size_t>(n) * kEmbd);
  for (auto& x : k) x = nd(rng);
  return k;
}

std::vector<float> rotated(const float* raw, Pos pos, const KeyRotation& r) {
  std::vector<float> k(raw, raw + kEmbd);
  for (int64_t h = 0; h < kHeads; ++h) rope_neox(k.data() + h * kHeadDim, kHeadDim, r.n_rot, static_cast<float>(pos), r.freq_base, r.freq_scale);
  return k;
}

// What the cache holds for a key: stored in the type, read back as f32.
std::vector<float> through_type(GgmlType t, const std::vector<float>& k) {
  std::vector<uint8_t> bytes(ggml_row_size(t, kEmbd));
  std::vector<float> back(kEmbd);
  quantize_row(t, k.data(), bytes.data(), kEmbd);
  dequantize_row(t, bytes.data(), back.data(), kEmbd);
  return back;
}

std::vector<float> read_row(const KvCache& kv, int layer, uint32_t cell) {
  std::vector<float> out(kEmbd);
  dequantize_row(kv.layout().type_k, kv.rows().k_data(layer, 0) + cell * kv.rows().row_bytes_k(), out.data(), kEmbd);
  return out;
}

// Largest error the type's rounding allows between two encodings of nearly equal rows. A rotation
// mixes element pairs of one head, so an element inherits its partner's rounding: bounds scale
// with the head's largest magnitude. f32: float rounding of angles and products; f16 / bf16: a few
// half-ulps (three roundings: stored, requantized, reference); q8_0: steps of amax/127 per block.
std::vector<float> tolerance(GgmlType t, const std::vector<float>& ref) {
  std::vector<float> tol(ref.size());
  for (int64_t h = 0; h < kHeads; ++h) {
    float amax = 0;
    for (int64_t d = 0; d < kHeadDim; ++d) amax = std::max(amax, std::fabs(ref[h * kHeadDim + d]));
    float bound = 0;
    switch (t) {
      case GgmlType::F32: bound = 5e-5f * amax; break;
      case GgmlType::F16: bound = 3.f * std::ldexp(amax, -11); break;
      case GgmlType::BF16: bound = 3.f * std::ldexp(amax, -8); break;
      default: bound = 2.5f * amax / 127.f; break;
    }
    for (int64_t d = 0; d < kHeadDim; ++d) tol[h * kHeadDim + d] = bound;
  }
  return tol;
}

class KeyRowShift : public ::testing::TestWithParam<GgmlType> {};

// Tokens 0..n-1 at positions 0..n-1 of sequence 0 in a one-stream cache of 2 KV layers; each
// layer's K row is rope(raw, pos) stored in the type (layer 1 gets the negated key, so a mix-up
// of layers shows).
struct ShiftFixture {
  KvCache kv;
  std::vector<float> raw;
  KeyRotation rope;
  int n;
  ShiftFixture(GgmlType t, int n_tokens, int64_t n_rot)
      : kv([&] {
          KvLayout l;
          l.layer_has_kv = {true, false, true};  // a recurrent-style gap: layer 1 has no KV
          l.n_embd_k = l.n_embd_v = kEmbd;
          l.type_k = t;
          l.type_v = GgmlType::F16;
          l.n_cells = 64;
          l.n_seq_max = 2;
          return l;
        }()),
        raw(raw_keys(n_tokens, 7)),
        rope(test_rope(n_rot)),
        n(n_tokens) {
    UBatch ub;
    for (int i = 0; i < n; ++i) ub.add(i, {0});
    kv.apply(ub, *kv.find_slot(ub));
    for (int i = 0; i < n; ++i)
      for (int layer : {0, 2}) {
        auto k = rotated(&raw[static_cast<size_t>(i) * kEmbd], i, rope);
        if (layer == 2)
          for (auto& x : k) x = -x;
        quantize_row(t, k.data(), kv.rows().k_data(layer, 0) + i * kv.rows().row_bytes_k(), kEmbd);
        std::vector<float> v(kEmbd, static_cast<float>(i));
        quantize_row(GgmlType::F16, v.data(), kv.rows().v_data(layer, 0) + i * kv.rows().row_bytes_v(), kEmbd);
      }
  }
  // Expected K row of cell i (at layer) once it is at position `pos`.
  std::vector<float> expected(int layer, int i, Pos pos) {
    auto k = rotated(&raw[static_cast<size_t>(i) * kEmbd], pos, rope);
    if (layer == 2)
      for (auto& x : k) x = -x;
    return k;
  }
  // Max |stored - expected| / tolerance over both layers for cells [c0, c1) at positions pos(i).
  template <typename PosOf>
  double worst_ratio(int c0, int c1, PosOf pos_of) {
    double worst = 0;
    for (int layer : {0, 2})
      for (int i = c0; i < c1; ++i) {
        const auto want = through_type(kv.layout().type_k, expected(layer, i, pos_of(i)));
        const auto tol = tolerance(kv.layout().type_k, want);
        const auto got = read_row(kv, layer, static_cast<uint32_t>(i));
        for (int64_t j = 0; j < kEmbd; ++j) worst = std::max(worst, std::fabs(got[j] - want[j]) / double(tol[j]));
      }
    return worst;
  }
};

TEST_P(KeyRowShift, RotatedKeyEqualsKeyComputedAtTheNewPosition) {
  const GgmlType t = GetParam();
  for (int64_t n_rot : {kHeadDim, int64_t{16}}) {  // full and partial rotary dims
    ShiftFixture f(t, 40, n_rot);
    std::vector<uint8_t> k_before(f.kv.rows().k_data(0, 0), f.kv.rows().k_data(0, 0) + 40 * f.kv.rows().row_bytes_k());
    std::vector<uint8_t> v_before(f.kv.rows().v_data(0, 0), f.kv.rows().v_data(0, 0) + 40 * f.kv.rows().row_bytes_v());
    f.kv.seq_add(0, 20, -1, 137);  // cells 20..39 move to 157..176; 0..19 stay
    ThreadPool pool(2);
    EXPECT_EQ(rotate_shifted_keys(f.kv, f.rope, pool), 20);
    EXPECT_FALSE(f.kv.has_shift());
    EXPECT_LE(f.worst_ratio(20, 40, [](int i) { return i + 137; }), 1.0) << ggml_type_name(t) << " n_rot " << n_rot;
    // Unshifted cells and every V row are untouched, bit for bit.
    EXPECT_EQ(0, std::memcmp(k_before.data(), f.kv.rows().k_data(0, 0), 20 * f.kv.rows().row_bytes_k()));
    EXPECT_EQ(0, std::memcmp(v_before.data(), f.kv.rows().v_data(0, 0), 40 * f.kv.rows().row_bytes_v()));
    // Dims beyond n_rot are never rotated.
    if (t == GgmlType::F32 && n_rot < kHeadDim) {
      const auto got = read_row(f.kv, 0, 30);
      for (int64_t h = 0; h < kHeads; ++h)
        for (int64_t d = n_rot; d < kHeadDim; ++d)
          EXPECT_EQ(got[h * kHeadDim + d], f.raw[30 * kEmbd + h * kHeadDim + d]);
    }
  }
}

TEST_P(KeyRowShift, WithoutTheRotationKeysAreWrong) {
  // The negative control for the test above: the tolerance is far tighter than what a missing
  // rotation costs.
  ShiftFixture f(GetParam(), 40, kHeadDim);
  f.kv.seq_add(0, 20, -1, 137);
  f.kv.reset_shift();
  EXPECT_GT(f.worst_ratio(20, 40, [](int i) { return i + 137; }), 20.0);
}

TEST_P(KeyRowShift, DivisionAndAccumulatedShifts) {
  const GgmlType t = GetParam();
  ShiftFixture f(t, 40, kHeadDim);
  ThreadPool pool(1);
  // Two shifts before one rotation: only the sum is applied. Then a division: pos -> pos / 3.
  f.kv.seq_add(0, 10, -1, 5);   // cells 10..39 at 15..44
  f.kv.seq_add(0, 30, -1, -7);  // cells 25..39 (at 30..44) at 23..37
  rotate_shifted_keys(f.kv, f.rope, pool);
  auto pos_after_adds = [](int i) { return i < 10 ? i : i < 25 ? i + 5 : i - 2; };
  EXPECT_LE(f.worst_ratio(0, 40, pos_after_adds), 1.0);
  f.kv.seq_div(0, 0, -1, 3);
  EXPECT_EQ(rotate_shifted_keys(f.kv, f.rope, pool), 39);  // every cell but position 0 moved
  // Each step rounds once more through the type: allow two roundings.
  EXPECT_LE(f.worst_ratio(0, 40, [&](int i) { return pos_after_adds(i) / 3; }), 2.0);
}

// Gemma 3's windowed layers rotate with their own base: each layer's keys turn by its rotation.
TEST(KeyRowShiftPerLayer, EachLayerTurnsByItsOwnRotation) {
  ShiftFixture f(GgmlType::F32, 40, kHeadDim);  // layer 0 stored with f.rope (base 1e6)
  KeyRotation local = test_rope(kHeadDim);
  local.freq_base = 10000.f;
  auto layer2_key = [&](int i, Pos pos) {
    auto k = rotated(&f.raw[static_cast<size_t>(i) * kEmbd], pos, local);
    for (auto& x : k) x = -x;
    return k;
  };
  for (int i = 0; i < 40; ++i)
    quantize_row(GgmlType::F32, layer2_key(i, i).data(), f.kv.rows().k_data(2, 0) + i * f.kv.rows().row_bytes_k(), kEmbd);
  f.kv.seq_add(0, 20, -1, 137);
  ThreadPool pool(2);
  const std::vector<KeyRotation> ropes{f.rope, local};
  const std::vector<int> rope_of_layer{0, 0, 1};
  EXPECT_EQ(rotate_shifted_keys(f.kv, ropes, rope_of_layer, pool), 20);
  for (int i = 20; i < 40; ++i)
    for (int layer : {0, 2}) {
      const auto want = layer == 0 ? f.expected(0, i, i + 137) : layer2_key(i, i + 137);
      const auto tol = tolerance(GgmlType::F32, want);
      const auto got = read_row(f.kv, layer, static_cast<uint32_t>(i));
      for (int64_t j = 0; j < kEmbd; ++j) ASSERT_LE(std::fabs(got[j] - want[j]), tol[j]) << "layer " << layer << " cell " << i;
    }
}

// A YaRN rotation (gpt-oss) turns a shifted key by the delta's YaRN table, magnitude factor
// included, as llama.cpp's build_rope_shift does: an F32 row, turned in place, equals the stored
// row rotated by rope_cache(delta, yarn) bit for bit (and not the plain table of the same scale).
TEST(KeyRowShiftYarn, TurnsByTheYarnTableOfTheDelta) {
  ShiftFixture f(GgmlType::F32, 40, kHeadDim);
  KeyRotation yarn = test_rope(kHeadDim);
  yarn.freq_base = 150000.f;
  yarn.freq_scale = 1.f / 32.f;
  yarn.ext_factor = 1.f;
  yarn.attn_factor = 1.25f;  // a visible magnitude
  yarn.n_ctx_orig = 4096;
  std::vector<float> before(static_cast<size_t>(kEmbd));
  std::memcpy(before.data(), f.kv.rows().k_data(0, 0) + 25 * f.kv.rows().row_bytes_k(), kEmbd * sizeof(float));
  f.kv.seq_add(0, 20, -1, 137);
  ThreadPool pool(2);
  EXPECT_EQ(rotate_shifted_keys(f.kv, yarn, pool), 20);
  std::vector<float> cos_sin(static_cast<size_t>(kHeadDim)), want = before, plain = before;
  rope_cache(137.f, kHeadDim, yarn.freq_base, yarn.freq_scale, nullptr, yarn.yarn(), cos_sin.data());
  for (int64_t h = 0; h < kHeads; ++h) rope_apply(RopeStyle::Neox, want.data() + h * kHeadDim, kHeadDim, cos_sin.data());
  rope_cache(137.f, kHeadDim, yarn.freq_base, yarn.freq_scale, nullptr, cos_sin.data());
  for (int64_t h = 0; h < kHeads; ++h) rope_apply(RopeStyle::Neox, plain.data() + h * kHeadDim, kHeadDim, cos_sin.data());
  const auto got = read_row(f.kv, 0, 25);
  EXPECT_EQ(got, want);
  EXPECT_NE(got, plain);
}

// Property: random sequences of seq_add / seq_div / seq_rm / seq_cp over two sequences, with the
// rotation applied after a random number of them, against a reference of the cells (position,
// sequence set, rotations undergone): positions, sequence sets, pos min / max and every live K row
// (a key rotated k times equals one rotation to its final position, within k + 1 roundings) agree.
// Positions stay below 256, where float RoPE angles compose to within the tolerance.
TEST_P(KeyRowShift, RandomShiftSequencesAgreeWithAReferenceModel) {
  const GgmlType t = GetParam();
  constexpr int kTokens = 40, kSeeds = 120, kOps = 90;  // 10,800 operations per K type
  struct RefCell {
    Pos pos;
    std::vector<bool> seqs;  // membership of sequences 0 and 1
    int rotations = 0;
    bool pending = false;    // moved since the last rotation
    bool live() const { return seqs[0] || seqs[1]; }
  };
  ThreadPool pool(2);
  int64_t ops = 0;
  for (uint32_t seed = 1; seed <= kSeeds; ++seed) {
    ShiftFixture f(t, kTokens, seed % 3 == 0 ? 16 : kHeadDim);  // partial rotary dims too
    std::vector<RefCell> ref;
    for (int i = 0; i < kTokens; ++i) ref.push_back({i, {true, false}});
    std::mt19937 rng(seed);
    auto uniform = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(rng); };
    auto range = [&](Pos& p0, Pos& p1) {
      p0 = uniform(-1, 120);
      p1 = uniform(0, 3) == 0 ? -1 : p0 + uniform(1, 120);
    };
    auto in_range = [](Pos pos, Pos p0, Pos p1) { return pos >= std::max<Pos>(p0, 0) && (p1 < 0 || pos < p1); };
    for (int op = 0; op < kOps; ++op, ++ops) {
      const memory::SeqId seq = uniform(0, 1);
      Pos p0 = 0, p1 = 0;
      range(p0, p1);
      const int kind = uniform(0, 9);
      if (kind <= 3) {  // seq_add, keeping every position below 256
        const Pos delta = uniform(-30, 30);
        bool fits = true;
        for (const RefCell& c : ref)
          if (c.live() && c.seqs[seq] && in_range(c.pos, p0, p1) && c.pos + delta >= 256) fits = false;
        if (!fits) continue;
        f.kv.seq_add(seq, p0, p1, delta);
        for (RefCell& c : ref) {
          if (!c.live() || !c.seqs[seq] || !in_range(c.pos, p0, p1) || delta == 0) continue;
          c.pos += delta;
          c.pending = true;
          if (c.pos < 0) c = RefCell{-1, {false, false}};  // a cell moved below 0 is removed
        }
      } else if (kind == 4) {  // seq_div
        const int d = uniform(1, 3);
        f.kv.seq_div(seq, p0, p1, d);
        for (RefCell& c : ref) {
          if (!c.live() || !c.seqs[seq] || !in_range(c.pos, p0, p1)) continue;
          const Pos moved = c.pos / d;
          c.pending = c.pending || moved != c.pos;
          c.pos = moved;
        }
      } else if (kind <= 6) {  // seq_rm (sometimes of every sequence)
        const memory::SeqId which = uniform(0, 4) == 0 ? -1 : seq;
        EXPECT_TRUE(f.kv.seq_rm(which, p0, p1));
        for (RefCell& c : ref) {
          if (!c.live() || !in_range(c.pos, p0, p1)) continue;
          if (which < 0) c.seqs = {false, false};
          else c.seqs[which] = false;
          if (!c.live()) c = RefCell{-1, {false, false}};
        }
      } else if (kind <= 8) {  // seq_cp to the other sequence
        f.kv.seq_cp(seq, 1 - seq, p0, p1);
        for (RefCell& c : ref)
          if (c.live() && c.seqs[seq] && in_range(c.pos, p0, p1)) c.seqs[1 - seq] = true;
      } else {  // apply the pending shifts
        int64_t moved = 0;
        for (RefCell& c : ref)
          if (c.live() && c.pending) ++moved;
        const int64_t rotated = rotate_shifted_keys(f.kv, f.rope, pool);
        EXPECT_LE(rotated, moved);  // a cell moved back to where it was needs no rotation
        for (RefCell& c : ref)
          if (c.live() && c.pending) {
            ++c.rotations;
            c.pending = false;
          }
        EXPECT_FALSE(f.kv.has_shift());
        // Every live key is its raw key rotated to its present position.
        for (int i = 0; i < kTokens; ++i) {
          if (!ref[i].live()) continue;
          const double worst = f.worst_ratio(i, i + 1, [&](int) { return ref[i].pos; });
          ASSERT_LE(worst, 1.0 + ref[i].rotations) << ggml_type_name(t) << " seed " << seed << " op " << op << " cell " << i
                                                   << " at " << ref[i].pos << " after " << ref[i].rotations << " rotations";
        }
      }
      // The cell table agrees after every operation.
      const memory::KvCells& cells = f.kv.cells(0);
      for (int i = 0; i < kTokens; ++i) {
        ASSERT_EQ(cells.is_empty(i), !ref[i].live()) << "seed " << seed << " op " << op << " cell " << i;
        if (!ref[i].live()) continue;
        ASSERT_EQ(cells.pos(i), ref[i].pos) << "seed " << seed << " op " << op << " cell " << i;
        ASSERT_EQ(cells.has_seq(i, 0), ref[i].seqs[0]) << "seed " << seed << " op " << op << " cell " << i;
        ASSERT_EQ(cells.has_seq(i, 1), ref[i].seqs[1]) << "seed " << seed << " op " << op << " cell " << i;
      }
      for (memory::SeqId s : {0, 1}) {
        Pos lo = -1, hi = -1;
        for (const RefCell& c : ref)
          if (c.live() && c.seqs[s]) {
            lo = lo < 0 ? c.pos : std::min(lo, c.pos);
            hi = std::max(hi, c.pos);
          }
        ASSERT_EQ(f.kv.seq_pos_min(s), lo) << "seed " << seed << " op " << op;
        ASSERT_EQ(f.kv.seq_pos_max(s), hi) << "seed " << seed << " op " << op;
      }
    }
  }
  EXPECT_GE(ops, 10000);
}

INSTANTIATE_TEST_SUITE_P(KTypes, KeyRowShift,
                         ::testing::Values(GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0),
                         [](const auto& info) { return std::string(ggml_type_name(info.param)); });

TEST(KeyRowShiftErrors, BadRotationShapesAreErrors) {
  ShiftFixture f(GgmlType::F32, 4, kHeadDim);
  ThreadPool pool(1);
  f.kv.seq_add(0, 0, -1, 1);
  KeyRotation r = f.rope;
  r.head_dim = 48;  // does not divide 128
  EXPECT_THROW(rotate_shifted_keys(f.kv, r, pool), Error);
  r = f.rope;
  r.n_rot = 15;
  EXPECT_THROW(rotate_shifted_keys(f.kv, r, pool), Error);
  EXPECT_TRUE(f.kv.has_shift());  // nothing applied
}

// ---------------------------------------------------------------------------------------------
// End to end on the model
// ---------------------------------------------------------------------------------------------

std::vector<Token> prompt_tokens(int n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<Token> d(0, 5000);
  std::vector<Token> t(static_cast<size_t>(n));
  for (auto& x : t) x = d(rng);
  return t;
}

ContextParams params(GgmlType type_k) {
  ContextParams cp;
  cp.n_ctx = 256;
  cp.n_threads = 1;
  cp.kv.type_k = type_k;
  cp.kv.type_v = GgmlType::F32;
  return cp;
}

std::vector<float> decode_one(Context& ctx, Token t, Pos pos) {
  Batch b;
  b.add(t, pos, {0}, true);
  EXPECT_EQ(ctx.decode(b), 0);
  const float* l = ctx.last_logits();
  return std::vector<float>(l, l + ctx.model().n_vocab());
}

void decode_prompt(Context& ctx, const std::vector<Token>& toks, Pos p0) {
  Batch b;
  b.add_sequence(toks.data(), toks.size(), p0, 0, true);
  ASSERT_EQ(ctx.decode(b), 0);
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, double(std::fabs(a[i] - b[i])));
  return m;
}

struct ShiftOutcome {
  double shifted_vs_plain;    // rotation applied by decode
  double unrotated_vs_plain;  // pending shift dropped: keys keep their old rotation
};

// Logits of the token after `prompt`: plain, after moving the whole prompt by +K (rotation applied
// by decode), and after moving it without rotating the keys.
ShiftOutcome shift_whole_prompt(const Model& model, GgmlType type_k, Pos K) {
  const auto prompt = prompt_tokens(24, 11);
  const Token next = 4242;
  const Pos n = static_cast<Pos>(prompt.size());

  Context plain(model, params(type_k));
  decode_prompt(plain, prompt, 0);
  const auto want = decode_one(plain, next, n);

  Context shifted(model, params(type_k));
  decode_prompt(shifted, prompt, 0);
  shifted.memory().seq_add(0, 0, -1, K);
  EXPECT_EQ(shifted.memory().seq_pos_min(0), K);
  EXPECT_EQ(shifted.memory().seq_pos_max(0), K + n - 1);
  const auto got = decode_one(shifted, next, K + n);
  EXPECT_EQ(shifted.stats().n_shifted_cells, n);

  Context unrotated(model, params(type_k));
  decode_prompt(unrotated, prompt, 0);
  unrotated.memory().seq_add(0, 0, -1, K);
  sequence_memory(unrotated).kv()->reset_shift();
  const auto wrong = decode_one(unrotated, next, K + n);
  return {max_abs_diff(got, want), max_abs_diff(wrong, want)};
}

TEST(ContextShiftModel, ShiftedSequencePredictsLikeTheUnshiftedOne) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kModels + "qwen3-micro.gguf");
  ASSERT_TRUE(ArchModel::of(*model).can_shift());
  // f32 K: only the float rounding of rotation angles separates the two.
  const ShiftOutcome f32 = shift_whole_prompt(*model, GgmlType::F32, 100);
  std::printf("f32 K: shifted vs plain %.2e, unrotated vs plain %.2e\n", f32.shifted_vs_plain, f32.unrotated_vs_plain);
  EXPECT_LT(f32.shifted_vs_plain, 5e-4);
  EXPECT_GT(f32.unrotated_vs_plain, 100 * f32.shifted_vs_plain);
  // f16 K is rounded again after the rotation.
  const ShiftOutcome f16 = shift_whole_prompt(*model, GgmlType::F16, 100);
  std::printf("f16 K: shifted vs plain %.2e, unrotated vs plain %.2e\n", f16.shifted_vs_plain, f16.unrotated_vs_plain);
  EXPECT_LT(f16.shifted_vs_plain, 2e-2);
  EXPECT_GT(f16.unrotated_vs_plain, 10 * f16.shifted_vs_plain);
}

TEST(ContextShiftModel, ClosingAGapMovesPositionsAndRotatesOnce) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kModels + "qwen3-micro.gguf");
  Context ctx(*model, params(GgmlType::F16));
  decode_prompt(ctx, prompt_tokens(20, 3), 0);
  auto& mem = sequence_memory(ctx);
  ASSERT_TRUE(ctx.can_shift());
  // Drop positions [5, 10) and move [10, 20) down to [5, 15).
  ASSERT_TRUE(mem.seq_rm(0, 5, 10));
  mem.seq_add(0, 10, -1, -5);
  EXPECT_EQ(mem.seq_pos_min(0), 0);
  EXPECT_EQ(mem.seq_pos_max(0), 14);
  EXPECT_TRUE(mem.kv()->has_shift());
  const auto& cells = mem.kv()->cells(0);
  for (uint32_t i = 0; i < 20; ++i) {
    if (i >= 5 && i < 10) {
      EXPECT_TRUE(cells.is_empty(i));
    } else {
      EXPECT_EQ(cells.pos(i), i < 5 ? Pos(i) : Pos(i) - 5);
      EXPECT_EQ(cells.shift(i), i < 5 ? 0 : -5);
    }
  }

  ctx.reset_stats();
  decode_one(ctx, 77, 15);  // continues at pos_max + 1
  EXPECT_EQ(ctx.stats().n_shifted_cells, 10);
  EXPECT_FALSE(mem.kv()->has_shift());
  EXPECT_EQ(mem.seq_pos_max(0), 15);
  // The new token took the lowest free cell (5) and sees 16 keys: 0..4, 10..19 and itself.
  EXPECT_EQ(cells.pos(5), 15);
  EXPECT_EQ(ctx.stats().last_keys_attended, 16);
  // Applied once: nothing pending, the next decode rotates nothing.
  ctx.apply_pending_shift();
  decode_one(ctx, 78, 16);
  EXPECT_EQ(ctx.stats().n_shifted_cells, 10);
}

TEST(ContextShiftModel, HybridAndImropeModelsRefuseShifts) {
  AGENTKV_NEEDS_FIXTURES();
  auto model = Model::load(kModels + "qwen35moe-micro.gguf");
  EXPECT_FALSE(ArchModel::of(*model).can_shift());
  Context ctx(*model, params(GgmlType::F16));
  decode_prompt(ctx, prompt_tokens(8, 5), 0);
  EXPECT_FALSE(ctx.can_shift());
  EXPECT_THROW(ctx.memory().seq_add(0, 0, -1, 3), Error);
  EXPECT_THROW(ctx.memory().seq_div(0, 0, -1, 2), Error);
  EXPECT_EQ(ctx.memory().seq_pos_max(0), 7);
  EXPECT_EQ(sequence_memory(ctx).kv()->seq_pos_min(0), 0);
  EXPECT_FALSE(sequence_memory(ctx).kv()->has_shift());
  EXPECT_EQ(sequence_memory(ctx).rec()->seq_pos_max(0), 7);
}

TEST(ContextShiftModel, AttentionOnlyMemoryWithoutRopeSupportRefuses) {
  KvLayout l;
  l.layer_has_kv = {true};
  l.n_embd_k = l.n_embd_v = 32;
  l.n_cells = 8;
  memory::SequenceMemory mem(std::make_unique<KvCache>(l), nullptr);
  EXPECT_TRUE(mem.can_shift());
  mem.set_shift_supported(false);
  EXPECT_FALSE(mem.can_shift());
  EXPECT_THROW(mem.seq_add(0, 0, -1, 1), Error);
}

}  // namespace
}  // namespace agentkv
