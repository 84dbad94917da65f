// Attention against a double-precision softmax(QK^T * scale + mask) V reference, plus the
// llama.cpp-specific numerics (F16 accumulation of short batches, F32 tiles for long ones).
#include "kernels/attention.h"

#include <gtest/gtest.h>

#include "hwy/targets.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/ggml_expf-inl.h"
#include "agentkv/numerics.h"
#include "kernels/quant.h"

namespace agentkv {
namespace {

struct Case {
  int n_head = 2, n_head_kv = 1, head_dim = 32;
  int64_t n_tokens = 1, n_kv = 1;
  GgmlType k_type = GgmlType::F32, v_type = GgmlType::F32;
  uint32_t seed = 1;
  int hole_every = 0;  // hide key j when j % hole_every == 3
  bool causal = true;
  int64_t hidden_begin = 0, hidden_end = 0;  // keys hidden from every row
  bool own_order = false;  // AttentionArgs::own_order (a windowed cache's tail)
  bool sinks = false;      // AttentionArgs::sinks: one learned logit per query head
};

// Inputs plus the stored K/V bytes (quantized by the engine's own quantizer) and their
// dequantized values, which the reference uses: the test measures attention error only.
struct Problem {
  Case c;
  std::vector<float> q, mask;
  std::vector<float> sinks;  // n_head when Case::sinks
  std::vector<uint8_t> k, v;
  std::vector<float> k_deq, v_deq;  // n_kv x (n_head_kv * head_dim)
  size_t k_row_bytes = 0, v_row_bytes = 0;
  int64_t row_width = 0;
  // Key j's rows in k / v (what the kernel reads); they point into k and v, so a Problem is
  // moved, never copied.
  std::vector<const uint8_t*> k_rows, v_rows;
};

// Row pointers of n keys stored in row order at base with row_bytes between rows.
std::vector<const uint8_t*> rows_in_order(const uint8_t* base, size_t row_bytes, int64_t n) {
  std::vector<const uint8_t*> rows(static_cast<size_t>(n));
  for (int64_t j = 0; j < n; ++j) rows[static_cast<size_t>(j)] = base + static_cast<size_t>(j) * row_bytes;
  return rows;
}

Problem make_problem(const Case& c) {
  Problem p;
  p.c = c;
  std::mt19937 rng(c.seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  p.row_width = static_cast<int64_t>(c.n_head_kv) * c.head_dim;
  p.q.resize(static_cast<size_t>(c.n_tokens * c.n_head * c.head_dim));
  for (auto& x : p.q) x = nd(rng) * 1.5f;
  // Rows padded by 16 bytes so the code must honour the row stride.
  p.k_row_bytes = ggml_row_size(c.k_type, p.row_width) + 16;
  p.v_row_bytes = ggml_row_size(c.v_type, p.row_width) + 16;
  p.k.assign(p.k_row_bytes * static_cast<size_t>(c.n_kv), 0xEE);
  p.v.assign(p.v_row_bytes * static_cast<size_t>(c.n_kv), 0xEE);
  p.k_deq.resize(static_cast<size_t>(c.n_kv * p.row_width));
  p.v_deq.resize(p.k_deq.size());
  std::vector<float> row(static_cast<size_t>(p.row_width));
  for (int64_t j = 0; j < c.n_kv; ++j) {
    for (auto& x : row) x = nd(rng);
    quantize_row(c.k_type, row.data(), p.k.data() + j * p.k_row_bytes, p.row_width);
    dequantize_row(c.k_type, p.k.data() + j * p.k_row_bytes, p.k_deq.data() + j * p.row_width, p.row_width);
    for (auto& x : row) x = nd(rng);
    quantize_row(c.v_type, row.data(), p.v.data() + j * p.v_row_bytes, p.row_width);
    dequantize_row(c.v_type, p.v.data() + j * p.v_row_bytes, p.v_deq.data() + j * p.row_width, p.row_width);
  }
  p.k_rows = rows_in_order(p.k.data(), p.k_row_bytes, c.n_kv);
  p.v_rows = rows_in_order(p.v.data(), p.v_row_bytes, c.n_kv);
  if (c.sinks) {  // above every score for some heads (the sink is the new maximum), below for others
    for (int h = 0; h < c.n_head; ++h) p.sinks.push_back(h % 2 == 0 ? 6.0f + nd(rng) : nd(rng) - 1.0f);
  }
  // Tokens sit at the last n_tokens positions; key j is at position j.
  p.mask.assign(static_cast<size_t>(c.n_tokens * c.n_kv), 0.0f);
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    const int64_t pos = c.n_kv - c.n_tokens + t;
    for (int64_t j = 0; j < c.n_kv; ++j) {
      bool hidden = c.causal && j > pos;
      if (c.hole_every > 0 && j % c.hole_every == 3) hidden = true;
      if (j >= c.hidden_begin && j < c.hidden_end) hidden = true;
      if (hidden) p.mask[t * c.n_kv + j] = -INFINITY;
    }
  }
  return p;
}

AttentionArgs args_for(const Problem& p, std::vector<float>& out, std::vector<float>& lse) {
  const Case& c = p.c;
  AttentionArgs a;
  a.shape.n_head = c.n_head;
  a.shape.n_head_kv = c.n_head_kv;
  a.shape.head_dim = c.head_dim;
  a.shape.scale = 1.0f / std::sqrt(static_cast<float>(c.head_dim));
  a.n_tokens = c.n_tokens;
  a.q = p.q.data();
  a.q_stride = static_cast<int64_t>(c.n_head) * c.head_dim;
  a.k_rows = p.k_rows.data();
  a.v_rows = p.v_rows.data();
  a.k_type = c.k_type;
  a.v_type = c.v_type;
  a.n_kv = c.n_kv;
  a.mask = p.mask.data();
  a.mask_stride = c.n_kv;
  out.assign(p.q.size(), NAN);
  lse.assign(static_cast<size_t>(c.n_tokens * c.n_head), NAN);
  a.out = out.data();
  a.out_stride = a.q_stride;
  a.lse = lse.data();
  a.own_order = c.own_order;
  a.sinks = p.sinks.empty() ? nullptr : p.sinks.data();
  return a;
}

// llama.cpp's kernel choice: >= 64 query rows over an F16/F32 cache (K and V alike) run the
// tiled kernel, which keeps Q in F32; otherwise Q is first converted to vec_dot_type(K). A cache
// with one of agentkv's own types (tq4, tq3) has no llama.cpp order and is tiled too.
bool uses_tiled_kernel(const Case& c) {
  const bool own_type = ggml_type_info(c.k_type).agentkv_only || ggml_type_info(c.v_type).agentkv_only || c.own_order;
  // agentkv's own types (and keys in own order) have no llama.cpp order to follow: batches of any
  // size are tiled and a single row has its own kernel (attention.cpp, "own-type decoding"); both
  // take the query in q8_0 over keys read as levels, in f32 over other keys (query_precision)
  return own_type || (c.n_tokens >= 64 && c.k_type == c.v_type && (c.k_type == GgmlType::F16 || c.k_type == GgmlType::F32));
}

// The precision Q carries into the K dot products. Q8_1 holds the same values as Q8_0 (same
// scale, same rounding; it only adds a block sum), so Q8_0 models both.
GgmlType query_precision(const Case& c) {
  // agentkv's own algorithms (decoding and tiled) read tq4 / tq3 / q8_0 keys as int8 levels dotted
  // with a q8_0 query
  const bool own_type = ggml_type_info(c.k_type).agentkv_only || ggml_type_info(c.v_type).agentkv_only || c.own_order;
  const bool level_keys = c.k_type == GgmlType::TQ4 || c.k_type == GgmlType::TQ3 || c.k_type == GgmlType::Q8_0;
  if (own_type && level_keys) return GgmlType::Q8_0;
  if (uses_tiled_kernel(c)) return GgmlType::F32;
  const GgmlType t = vec_dot_type(c.k_type);
  return t == GgmlType::Q8_1 ? GgmlType::Q8_0 : t;
}

// Double-precision softmax(q k^T * scale + mask) v over the stored (dequantized) K/V, with q
// rounded as the kernel rounds it: the remaining differences are float arithmetic only.
void reference(const Problem& p, std::vector<double>& out, std::vector<double>& lse) {
  const Case& c = p.c;
  const int64_t D = c.head_dim;
  const int group = c.n_head / c.n_head_kv;
  const double scale = 1.0 / std::sqrt(static_cast<double>(c.head_dim));
  const GgmlType q_type = query_precision(c);
  std::vector<uint8_t> q_bytes(ggml_row_size(q_type, D));
  std::vector<float> q(static_cast<size_t>(D));
  out.assign(p.q.size(), 0.0);
  lse.assign(static_cast<size_t>(c.n_tokens * c.n_head), -INFINITY);
  std::vector<double> s(static_cast<size_t>(c.n_kv));
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    for (int h = 0; h < c.n_head; ++h) {
      const int g = h / group;
      quantize_row(q_type, p.q.data() + (t * c.n_head + h) * D, q_bytes.data(), D);
      dequantize_row(q_type, q_bytes.data(), q.data(), D);
      double mx = -INFINITY;
      for (int64_t j = 0; j < c.n_kv; ++j) {
        const float m = p.mask[t * c.n_kv + j];
        if (m == -INFINITY) {
          s[j] = -INFINITY;
          continue;
        }
        const float* k = p.k_deq.data() + j * p.row_width + g * D;
        double dot = 0;
        for (int64_t i = 0; i < D; ++i) dot += static_cast<double>(q[i]) * k[i];
        s[j] = dot * scale + m;
        mx = std::max(mx, s[j]);
      }
      // A sink joins the normaliser only: one more logit, no value.
      const double sink = p.sinks.empty() ? -INFINITY : static_cast<double>(p.sinks[static_cast<size_t>(h)]);
      mx = std::max(mx, sink);
      if (mx == -INFINITY) continue;
      double sum = sink == -INFINITY ? 0.0 : std::exp(sink - mx);
      for (int64_t j = 0; j < c.n_kv; ++j) sum += s[j] == -INFINITY ? 0.0 : std::exp(s[j] - mx);
      lse[t * c.n_head + h] = mx + std::log(sum);
      double* o = out.data() + (t * c.n_head + h) * D;
      for (int64_t j = 0; j < c.n_kv; ++j) {
        if (s[j] == -INFINITY) continue;
        const double w = std::exp(s[j] - mx) / sum;
        const float* v = p.v_deq.data() + j * p.row_width + g * D;
        for (int64_t i = 0; i < D; ++i) o[i] += w * v[i];
      }
    }
  }
}

// Expected accuracy: F32 arithmetic everywhere except llama.cpp's per-key kernel over an F16 V,
// whose running output is kept in F16: the unnormalised accumulator grows to ~S*|v| (S up to the
// number of keys) and is rounded to 11 bits after every key, up to ~1e-2 after normalisation.
// Q4_1/Q5_1 keys are dotted with Q8_1 queries, whose block sum (multiplied by the key block's
// offset m) is stored in F16: up to ~1e-3 in the scores, not modelled by the reference.
double expected_tolerance(const Case& c) {
  if (c.v_type == GgmlType::F16 && !uses_tiled_kernel(c)) return 1.5e-2;
  if (vec_dot_type(c.k_type) == GgmlType::Q8_1) return 2e-3;
  return 3e-5;
}

// Runs a case and compares with the reference; returns the largest output error.
double check_case(const Case& c, ThreadPool& pool) {
  const double tol = expected_tolerance(c);
  const Problem p = make_problem(c);
  std::vector<float> out, lse;
  attention(args_for(p, out, lse), pool);
  std::vector<double> ref, ref_lse;
  reference(p, ref, ref_lse);
  const std::string what = "k=" + std::string(ggml_type_name(c.k_type)) + " v=" +
                           std::string(ggml_type_name(c.v_type)) + " heads=" + std::to_string(c.n_head) +
                           "/" + std::to_string(c.n_head_kv) + " D=" + std::to_string(c.head_dim) +
                           " tokens=" + std::to_string(c.n_tokens) + " n_kv=" + std::to_string(c.n_kv);
  double worst = 0;
  for (size_t i = 0; i < out.size(); ++i) {
    const double err = std::abs(out[i] - ref[i]);
    worst = std::max(worst, err);
    if (!(err <= tol)) {
      ADD_FAILURE() << what << ": out[" << i << "] = " << out[i] << ", reference " << ref[i];
      return worst;
    }
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    if (ref_lse[i] == -INFINITY) {
      EXPECT_EQ(lse[i], -INFINITY) << what << " lse[" << i << "]";
    } else {
      // the log-sum-exp depends on the scores only, never on V's accumulation; the F16 block
      // sum of Q8_1 shifts all scores of a row alike (invisible in the output, not in the lse)
      const double lse_tol = vec_dot_type(c.k_type) == GgmlType::Q8_1 ? 8e-3 : 2e-5 * (1.0 + std::abs(ref_lse[i]));
      EXPECT_NEAR(lse[i], ref_lse[i], lse_tol) << what << " lse[" << i << "]";
    }
  }
  return worst;
}

TEST(Attention, F32CacheMatchesReferenceAcrossShapes) {
  ThreadPool pool(2);
  for (int ratio : {1, 2, 4}) {
    for (int head_dim : {32, 64, 128, 256}) {
      for (int64_t n_kv : {1, 2, 63, 64, 65, 130, 300}) {
        for (int64_t n_tokens : {int64_t{1}, int64_t{3}}) {
          Case c;
          c.n_head_kv = 2;
          c.n_head = 2 * ratio;
          c.head_dim = head_dim;
          c.n_kv = std::max(n_kv, n_tokens);
          c.n_tokens = n_tokens;
          c.hole_every = n_kv > 8 ? 5 : 0;
          c.seed = static_cast<uint32_t>(ratio * 1000 + head_dim + n_kv);
          check_case(c, pool);
        }
      }
    }
  }
}

TEST(Attention, F16CacheShortBatchMatchesReferenceWithF16Query) {
  // Short batches: Q rounded to F16 for the dot products (modelled in the reference), output
  // accumulated in F16: the unnormalised accumulator grows to ~S*|v| (S up to the number of keys)
  // and is rounded to 11 bits after every key, which costs up to ~1e-2 after normalisation.
  ThreadPool pool(2);
  double worst = 0;
  for (int ratio : {1, 2, 4}) {
    for (int head_dim : {32, 64, 128, 256}) {
      for (int64_t n_kv : {1, 65, 300}) {
        Case c;
        c.n_head_kv = 1;
        c.n_head = ratio;
        c.head_dim = head_dim;
        c.n_kv = n_kv;
        c.n_tokens = std::min<int64_t>(n_kv, 5);
        c.k_type = c.v_type = GgmlType::F16;
        c.hole_every = 7;
        c.seed = static_cast<uint32_t>(ratio * 77 + head_dim + n_kv);
        worst = std::max(worst, check_case(c, pool));
      }
    }
  }
  EXPECT_GT(worst, 1e-6) << "F16 accumulation should leave a visible trace";
}

TEST(Attention, F16CacheLongBatchIsComputedInF32) {
  // >= 64 query rows over an F16/F32 cache: llama.cpp's tiled kernel keeps Q, scores and the
  // output in F32, so the result is as accurate as the F32 cache case.
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::F16, GgmlType::F32}) {
    for (int head_dim : {64, 128}) {
      Case c;
      c.n_head_kv = 2;
      c.n_head = 4;
      c.head_dim = head_dim;
      c.n_tokens = 70;
      c.n_kv = 200;
      c.k_type = c.v_type = type;
      c.hole_every = 9;
      c.hidden_begin = 64;  // one whole key tile hidden from every row
      c.hidden_end = 128;
      c.seed = 42u + static_cast<uint32_t>(head_dim);
      check_case(c, pool);
    }
  }
}

TEST(Attention, OtherCacheTypes) {
  ThreadPool pool(2);
  struct TypeCase {
    GgmlType k, v;
  };
  const TypeCase types[] = {
      {GgmlType::BF16, GgmlType::BF16}, {GgmlType::Q8_0, GgmlType::Q8_0}, {GgmlType::Q4_0, GgmlType::Q4_0},
      {GgmlType::Q4_1, GgmlType::Q4_1}, {GgmlType::Q5_0, GgmlType::Q5_0}, {GgmlType::Q5_1, GgmlType::Q5_1},
      {GgmlType::IQ4_NL, GgmlType::IQ4_NL}, {GgmlType::F16, GgmlType::Q8_0}, {GgmlType::Q8_0, GgmlType::F16},
      {GgmlType::F32, GgmlType::Q4_0},  {GgmlType::F16, GgmlType::F32},
      {GgmlType::TQ4, GgmlType::TQ4},   {GgmlType::TQ3, GgmlType::TQ3},   {GgmlType::Q8_0, GgmlType::TQ3},
      {GgmlType::TQ4, GgmlType::F16},
  };
  for (const auto& tc : types) {
    for (int64_t n_tokens : {int64_t{1}, int64_t{4}, int64_t{66}}) {
      Case c;
      c.n_head_kv = 2;
      c.n_head = 4;
      c.head_dim = 64;
      c.n_tokens = n_tokens;
      c.n_kv = 150;
      c.k_type = tc.k;
      c.v_type = tc.v;
      c.hole_every = 6;
      c.seed = 7u + static_cast<uint32_t>(tc.k) * 31u + static_cast<uint32_t>(tc.v);
      check_case(c, pool);
    }
  }
}

// One token over agentkv's own types is its own kernel (levels read in place, key chunks of every
// KV head merged by log-sum-exp): long enough for several chunks, GQA groups of 1, 2, 3 (an odd
// head scored alone), hidden keys, and one thread (a single chunk, final rows written directly).
TEST(Attention, OwnTypeDecodingInChunks) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const auto& [k, v] : {std::pair{GgmlType::TQ4, GgmlType::TQ4}, std::pair{GgmlType::TQ3, GgmlType::TQ3},
                               std::pair{GgmlType::Q8_0, GgmlType::TQ3}, std::pair{GgmlType::TQ4, GgmlType::F16}}) {
      for (int ratio : {1, 2, 3}) {
        Case c;
        c.n_head_kv = 2;
        c.n_head = 2 * ratio;
        c.head_dim = 128;
        c.n_tokens = 1;
        c.n_kv = 4100;
        c.k_type = k;
        c.v_type = v;
        c.hole_every = ratio == 2 ? 5 : 0;
        c.seed = 11u * static_cast<uint32_t>(ratio) + static_cast<uint32_t>(k);
        check_case(c, pool);
      }
    }
  }
}

// A windowed cache's tail (AttentionArgs::own_order) takes agentkv's own algorithms for llama.cpp's
// types too: one token by own-type decoding (q8_0 V as int8 levels in blocks of 32), batches tiled.
TEST(Attention, OwnOrderForLlamaTypes) {
  for (int threads : {1, 2}) {
    ThreadPool pool(threads);
    for (const auto& [k, v] : {std::pair{GgmlType::Q8_0, GgmlType::Q8_0}, std::pair{GgmlType::F16, GgmlType::F16},
                               std::pair{GgmlType::Q8_0, GgmlType::F16}, std::pair{GgmlType::F16, GgmlType::Q8_0}}) {
      for (int64_t n_tokens : {int64_t{1}, int64_t{5}}) {
        for (int ratio : {1, 3}) {
          Case c;
          c.n_head_kv = 2;
          c.n_head = 2 * ratio;
          c.head_dim = 128;
          c.n_tokens = n_tokens;
          c.n_kv = 2600;
          c.k_type = k;
          c.v_type = v;
          c.hole_every = 7;
          c.own_order = true;
          c.seed = 5u * static_cast<uint32_t>(ratio) + static_cast<uint32_t>(n_tokens);
          check_case(c, pool);
        }
      }
    }
  }
}

TEST(Attention, EveryCompiledCpuTargetMatchesReference) {
  // The kernels are dispatched at run time (AVX-512, AVX2, SSE4, ..., scalar): each must hold.
  ThreadPool pool(1);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (GgmlType type : {GgmlType::F16, GgmlType::F32, GgmlType::BF16, GgmlType::Q8_0, GgmlType::TQ4, GgmlType::TQ3}) {
      for (int64_t n_tokens : {int64_t{3}, int64_t{64}}) {
        Case c;
        c.n_head_kv = 1;
        c.n_head = 2;
        // not a multiple of every vector width: exercises the tails (tq blocks are 64 wide)
        c.head_dim = ggml_type_info(type).block_size == 64 ? 128 : 96;
        c.n_tokens = n_tokens;
        c.n_kv = 100;
        c.k_type = c.v_type = type;
        c.hole_every = 5;
        check_case(c, pool);
      }
      Case tail;  // one token, own order (a windowed tail): own-type decoding of any type
      tail.n_head_kv = 1;
      tail.n_head = 2;
      tail.head_dim = 128;
      tail.n_kv = 300;
      tail.k_type = tail.v_type = type;
      tail.hole_every = 5;
      tail.own_order = true;
      check_case(tail, pool);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Attention sinks (gpt-oss): every path — per-key short batches over F32 / F16 / q8_0, tiled
// batches, one row split over key chunks, own-type decoding in chunks and a tail's own order —
// against the naive softmax with the sink in its normaliser, at every compiled CPU target; a row
// that sees no key gives zeros and the sink as its log-sum-exp.
TEST(Attention, SinksJoinTheNormaliserOnEveryPath) {
  ThreadPool pool1(1), pool4(4);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::TQ4}) {
      for (int64_t n_tokens : {int64_t{1}, int64_t{3}, int64_t{64}}) {
        for (int64_t n_kv : {int64_t{70}, int64_t{1500}}) {
          Case c;
          c.n_head_kv = 2;
          c.n_head = 6;
          c.head_dim = 64;
          c.n_tokens = n_tokens;
          c.n_kv = n_kv;
          c.k_type = c.v_type = type;
          c.hole_every = 5;
          c.sinks = true;
          c.seed = static_cast<uint32_t>(n_tokens * 7 + n_kv) + static_cast<uint32_t>(type);
          check_case(c, pool1);
          check_case(c, pool4);  // one token over 1500 keys: split keys / own-type chunks
          c.own_order = true;
          check_case(c, pool4);
        }
      }
    }
    for (int64_t n_tokens : {int64_t{2}, int64_t{64}}) {
      Case c;
      c.n_tokens = n_tokens;
      c.n_kv = 80;
      c.hidden_begin = 0;
      c.hidden_end = 80;
      c.sinks = true;
      const Problem p = make_problem(c);
      std::vector<float> out, lse;
      attention(args_for(p, out, lse), pool1);
      for (float x : out) ASSERT_EQ(x, 0.0f);
      for (int64_t t = 0; t < n_tokens; ++t)
        for (int h = 0; h < c.n_head; ++h) ASSERT_EQ(lse[static_cast<size_t>(t * c.n_head + h)], p.sinks[static_cast<size_t>(h)]);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Attention, RowWithoutVisibleKeysIsZeroWithMinusInfinityLse) {
  ThreadPool pool(1);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    for (int64_t n_tokens : {int64_t{2}, int64_t{64}}) {
      Case c;
      c.n_tokens = n_tokens;
      c.n_kv = 80;
      c.k_type = c.v_type = type;
      c.hidden_begin = 0;
      c.hidden_end = 80;
      const Problem p = make_problem(c);
      std::vector<float> out, lse;
      attention(args_for(p, out, lse), pool);
      for (float x : out) ASSERT_EQ(x, 0.0f);
      for (float x : lse) ASSERT_EQ(x, -INFINITY);
    }
  }
}

TEST(Attention, SingleTokenOverManyKeysSplitAcrossThreads) {
  // One query row over >= 512 keys is split into per-thread key chunks and merged.
  ThreadPool pool4(4), pool1(1);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0}) {
    Case c;
    c.n_head_kv = 2;
    c.n_head = 8;
    c.head_dim = 128;
    c.n_tokens = 1;
    c.n_kv = 1500;
    c.k_type = c.v_type = type;
    c.hole_every = 11;
    check_case(c, pool4);
    check_case(c, pool1);
  }
}

// The thread count changes how a batch is cut into units (smaller token blocks when units would
// leave threads idle; own types' units are twice as tall): no row's bits may follow.
TEST(Attention, ResultDoesNotDependOnThreadCount) {
  ThreadPool pool1(1), pool3(3);
  for (GgmlType type : {GgmlType::F16, GgmlType::TQ4, GgmlType::TQ3}) {
    for (int64_t n_tokens : {int64_t{5}, int64_t{80}, int64_t{200}}) {
      SCOPED_TRACE(std::string(ggml_type_name(type)) + ", " + std::to_string(n_tokens) + " tokens");
      Case c;
      c.n_head_kv = 2;
      c.n_head = 8;
      c.head_dim = type == GgmlType::F16 ? 64 : 128;  // tq blocks are 64 wide
      c.n_tokens = n_tokens;
      c.n_kv = 257 + n_tokens;
      c.k_type = c.v_type = type;
      c.hole_every = 4;
      const Problem p = make_problem(c);
      std::vector<float> out1, lse1, out3, lse3;
      attention(args_for(p, out1, lse1), pool1);
      attention(args_for(p, out3, lse3), pool3);
      EXPECT_EQ(out1, out3);
      EXPECT_EQ(lse1, lse3);
    }
  }
}

// llama.cpp's per-key kernel for an F16 cache, written out step by step: Q rounded to F16,
// scores in f32, running output rounded to F16 after every scale and multiply-add.
std::vector<float> ggml_per_key_f16(const Problem& p) {
  const Case& c = p.c;
  const int64_t D = c.head_dim;
  const int group = c.n_head / c.n_head_kv;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  std::vector<float> out(p.q.size());
  std::vector<uint16_t> q16(static_cast<size_t>(D)), acc(static_cast<size_t>(D));
  for (int64_t t = 0; t < c.n_tokens; ++t) {
    for (int h = 0; h < c.n_head; ++h) {
      const int g = h / group;
      for (int64_t i = 0; i < D; ++i) q16[i] = fp32_to_fp16(p.q[(t * c.n_head + h) * D + i]);
      std::fill(acc.begin(), acc.end(), uint16_t{0});
      float M = -INFINITY, S = 0.0f;
      for (int64_t j = 0; j < c.n_kv; ++j) {
        const float mv = p.mask[t * c.n_kv + j];
        if (mv == -INFINITY) continue;
        const auto* k = reinterpret_cast<const uint16_t*>(p.k.data() + j * p.k_row_bytes) + g * D;
        const auto* v = reinterpret_cast<const uint16_t*>(p.v.data() + j * p.v_row_bytes) + g * D;
        float s = 0.0f;
        for (int64_t i = 0; i < D; ++i) s += fp16_to_fp32(k[i]) * fp16_to_fp32(q16[i]);
        s = s * scale + mv;
        float ms = 1.0f, vs = 1.0f;
        if (s > M) {
          const float m_old = M;
          M = s;
          ms = std::exp(m_old - M);
          for (auto& a : acc) a = fp32_to_fp16(fp16_to_fp32(a) * ms);
        } else {
          vs = std::exp(s - M);
        }
        for (int64_t i = 0; i < D; ++i) acc[i] = fp32_to_fp16(fp16_to_fp32(acc[i]) + fp16_to_fp32(v[i]) * vs);
        S = S * ms + vs;
      }
      for (int64_t i = 0; i < D; ++i) {
        out[(t * c.n_head + h) * D + i] = S == 0.0f ? 0.0f : fp16_to_fp32(acc[i]) * (1.0f / S);
      }
    }
  }
  return out;
}

TEST(Attention, F16CacheShortBatchFollowsGgmlStepByStep) {
  // Far closer to the step-by-step kernel than to the exact result: only the order of the f32
  // additions inside each dot product differs (rarely flipping one F16 rounding).
  ThreadPool pool(2);
  for (int head_dim : {32, 128}) {
    Case c;
    c.n_head_kv = 2;
    c.n_head = 4;
    c.head_dim = head_dim;
    c.n_tokens = 5;
    c.n_kv = 300;
    c.k_type = c.v_type = GgmlType::F16;
    c.hole_every = 7;
    const Problem p = make_problem(c);
    std::vector<float> out, lse;
    attention(args_for(p, out, lse), pool);
    const auto emulated = ggml_per_key_f16(p);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], emulated[i], 1e-3) << i;
  }
}

TEST(Attention, F16ValueAccumulationMirrorsGgml) {
  // Key 0 has V = 1000, keys 1..300 have V = 0.1, all scores equal (K = 0). llama.cpp's
  // per-key kernel keeps the running output in F16, where 1000 + 0.1 rounds back to 1000, so
  // the output is 1000/301; its tiled kernel (>= 64 rows) accumulates in F32: 1030/301.
  ThreadPool pool(1);
  for (int64_t n_tokens : {int64_t{1}, int64_t{64}}) {
    const int D = 32;
    const int64_t n_kv = 301;
    std::vector<uint16_t> k(static_cast<size_t>(n_kv * D), fp32_to_fp16(0.0f));
    std::vector<uint16_t> v(static_cast<size_t>(n_kv * D), fp32_to_fp16(0.1f));
    for (int i = 0; i < D; ++i) v[static_cast<size_t>(i)] = fp32_to_fp16(1000.0f);
    std::vector<float> q(static_cast<size_t>(n_tokens * D), 0.5f), out(q.size()), lse(static_cast<size_t>(n_tokens));
    AttentionArgs a;
    a.shape = {1, 1, D, 1.0f};
    a.n_tokens = n_tokens;
    a.q = q.data();
    a.q_stride = D;
    const auto k_rows = rows_in_order(reinterpret_cast<const uint8_t*>(k.data()), D * sizeof(uint16_t), n_kv);
    const auto v_rows = rows_in_order(reinterpret_cast<const uint8_t*>(v.data()), D * sizeof(uint16_t), n_kv);
    a.k_rows = k_rows.data();
    a.v_rows = v_rows.data();
    a.n_kv = n_kv;
    a.out = out.data();
    a.out_stride = D;
    a.lse = lse.data();
    attention(a, pool);
    const double expected = n_tokens == 1 ? 1000.0 / 301.0 : (1000.0 + 300 * static_cast<double>(fp16_to_fp32(fp32_to_fp16(0.1f)))) / 301.0;
    for (int64_t t = 0; t < n_tokens; ++t) {
      EXPECT_NEAR(out[static_cast<size_t>(t * D)], expected, 1e-4) << "n_tokens=" << n_tokens;
      EXPECT_NEAR(lse[static_cast<size_t>(t)], std::log(301.0), 1e-5);
    }
  }
}

TEST(Attention, SplitKeyRangesMergeToWhole) {
  ThreadPool pool(2);
  for (GgmlType type : {GgmlType::F32, GgmlType::F16}) {
    for (int64_t split : {int64_t{1}, int64_t{64}, int64_t{100}, int64_t{199}}) {
      Case c;
      c.n_head_kv = 2;
      c.n_head = 4;
      c.head_dim = 64;
      c.n_tokens = 3;
      c.n_kv = 200;
      c.k_type = c.v_type = type;
      c.hole_every = 5;
      const Problem p = make_problem(c);
      std::vector<float> whole, whole_lse, first, first_lse, second, second_lse;
      attention(args_for(p, whole, whole_lse), pool);

      AttentionArgs a1 = args_for(p, first, first_lse);
      a1.n_kv = split;  // keys [0, split): same mask rows, shorter
      attention(a1, pool);
      AttentionArgs a2 = args_for(p, second, second_lse);
      a2.k_rows = p.k_rows.data() + split;  // keys [split, n_kv)
      a2.v_rows = p.v_rows.data() + split;
      a2.mask = p.mask.data() + split;
      a2.n_kv = c.n_kv - split;
      attention(a2, pool);

      const int64_t D = c.head_dim;
      std::vector<float> merged(static_cast<size_t>(D));
      for (int64_t t = 0; t < c.n_tokens; ++t) {
        for (int h = 0; h < c.n_head; ++h) {
          const int64_t row = t * c.n_head + h;
          const float lse = merge_attention_partials(first.data() + row * D, first_lse[row],
                                                     second.data() + row * D, second_lse[row],
                                                     merged.data(), D);
          if (whole_lse[row] == -INFINITY) {
            EXPECT_EQ(lse, -INFINITY);
          } else {
            EXPECT_NEAR(lse, whole_lse[row], 1e-5);
          }
          for (int64_t i = 0; i < D; ++i) {
            ASSERT_NEAR(merged[i], whole[row * D + i], type == GgmlType::F32 ? 1e-5 : 1.5e-2)
                << "split=" << split << " row=" << row;
          }
        }
      }
    }
  }
}

TEST(MergeAttentionPartials, EmptySidesAndWeights) {
  const float a[2] = {1.0f, 2.0f}, b[2] = {3.0f, 5.0f};
  float out[2];
  EXPECT_EQ(merge_attention_partials(a, -INFINITY, b, -INFINITY, out, 2), -INFINITY);
  EXPECT_EQ(out[0], 0.0f);
  const float nan_row[2] = {NAN, NAN};
  EXPECT_FLOAT_EQ(merge_attention_partials(nan_row, -INFINITY, b, 0.5f, out, 2), 0.5f);
  EXPECT_FLOAT_EQ(out[0], 3.0f);
  EXPECT_FLOAT_EQ(out[1], 5.0f);
  // equal weights: mean, lse + log 2
  EXPECT_NEAR(merge_attention_partials(a, 1.0f, b, 1.0f, out, 2), 1.0 + std::log(2.0), 1e-6);
  EXPECT_FLOAT_EQ(out[0], 2.0f);
  EXPECT_FLOAT_EQ(out[1], 3.5f);
}

// Hidden keys are skipped, not weighted by zero: a hidden cell's V may hold anything (a NaN from an
// unwritten or reused cell), and the output must not see it. Prefill batches take the tiled path,
// which drops the per-key zero test only for tiles without a zero weight; the causal diagonal tile,
// a hidden block inside a tile and holes must still take it.
TEST(Attention, HiddenKeysWithNanValuesAreSkipped) {
  ThreadPool pool(2);
  for (int64_t n_tokens : {int64_t{1}, int64_t{8}, int64_t{70}}) {
    Case c;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 64;
    c.k_type = c.v_type = GgmlType::F16;
    c.n_tokens = n_tokens;
    c.n_kv = 200 + n_tokens;
    c.hidden_begin = 40;  // inside the first key tile
    c.hidden_end = 50;
    c.hole_every = 9;
    Problem p = make_problem(c);
    std::vector<float> want, want_lse, got, got_lse;
    attention(args_for(p, want, want_lse), pool);
    for (int64_t j = 0; j < c.n_kv; ++j) {
      if (p.mask[static_cast<size_t>((c.n_tokens - 1) * c.n_kv + j)] != -INFINITY) continue;  // seen by the last token
      auto* v = reinterpret_cast<uint16_t*>(p.v.data() + j * p.v_row_bytes);
      for (int64_t i = 0; i < p.row_width; ++i) v[i] = 0x7E00;  // F16 NaN
    }
    attention(args_for(p, got, got_lse), pool);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0) << n_tokens << " tokens";
    ASSERT_EQ(std::memcmp(got_lse.data(), want_lse.data(), got_lse.size() * sizeof(float)), 0);
  }
}

TEST(Attention, RefusesBadShapesAndTypes) {
  ThreadPool pool(1);
  Case c;
  c.n_kv = 4;
  Problem p = make_problem(c);
  std::vector<float> out, lse;
  AttentionArgs a = args_for(p, out, lse);
  AttentionArgs bad = a;
  bad.shape.n_head = 3;  // not a multiple of n_head_kv
  bad.shape.n_head_kv = 2;
  EXPECT_THROW(attention(bad, pool), Error);
  bad = a;
  bad.k_type = GgmlType::Q4_K;
  EXPECT_THROW(attention(bad, pool), Error);
  bad = a;
  bad.shape.head_dim = 48;  // not a multiple of the Q8_0 block
  bad.k_type = GgmlType::Q8_0;
  EXPECT_THROW(attention(bad, pool), Error);
  bad = a;
  bad.shape.head_dim = 0;
  EXPECT_THROW(attention(bad, pool), Error);
}


// ---------------------------------------------------------------------------------------------
// Bit-exact reference: llama.cpp's three CPU flash-attention orders written out one float
// operation at a time (explicit std::fma where ggml fuses; this file is compiled without FMA
// contraction for the baseline target). The optimised kernels must reproduce every bit.
namespace exact {

float reduce_add16(const float* v) {  // _mm512_reduce_add_ps
  float h8[8], h4[4];
  for (int l = 0; l < 8; ++l) h8[l] = v[l + 8] + v[l];
  for (int l = 0; l < 4; ++l) h4[l] = h8[l + 4] + h8[l];
  return (h4[0] + h4[2]) + (h4[1] + h4[3]);
}

float reduce_hadd8(const float* v) {  // GGML_F32x8_REDUCE's last steps (AVX2 build)
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = v[l] + v[l + 4];
  return (t[0] + t[1]) + (t[2] + t[3]);
}

float hsum8(const float* v) {  // ggml_vec_soft_max_f32's group sum on the AVX2 build
  float t[4];
  for (int l = 0; l < 4; ++l) t[l] = v[l + 4] + v[l];
  return (t[0] + t[2]) + (t[1] + t[3]);
}

// The llama.cpp build whose orders the active CPU level follows: 16 floats per vector (AVX-512
// build) or 8 (AVX2 build).
int build_lanes() { return ggml_build_lanes(); }

// ggml_vec_dot_f16 / _f32 (n a multiple of 64 here: no scalar tail): four L-lane fused
// accumulators over 4L-element steps, (0 + 2) + (1 + 3), that build's reduction.
template <class LoadK, class LoadQ>
float ggml_dot(int64_t n, LoadK load_k, LoadQ load_q) {
  const int L = build_lanes();
  float acc[4][16] = {};
  for (int64_t i = 0; i < n; i += 4 * L)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < L; ++l) acc[j][l] = std::fma(load_k(i + L * j + l), load_q(i + L * j + l), acc[j][l]);
  float red[16];
  for (int l = 0; l < L; ++l) red[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
  return L == 16 ? reduce_add16(red) : reduce_hadd8(red);
}

struct RowState {
  float m = -INFINITY, s = 0.0f;
  std::vector<float> acc32;
  std::vector<uint16_t> acc16;
};

// Per-key algorithm for one (token, head) row over keys [k0, k1).
RowState per_key_row(const AttentionArgs& a, int64_t t, int64_t h, int64_t k0, int64_t k1) {
  const int64_t D = a.shape.head_dim;
  const int64_t g = h / (a.shape.n_head / a.shape.n_head_kv);
  const GgmlType q_type = vec_dot_type(a.k_type);
  std::vector<uint8_t> qb(ggml_row_size(q_type, D));
  const float* q = a.q + t * a.q_stride + h * D;
  if (q_type == GgmlType::F32) {
    std::memcpy(qb.data(), q, static_cast<size_t>(D) * sizeof(float));
  } else if (q_type == GgmlType::F16) {
    for (int64_t i = 0; i < D; ++i) reinterpret_cast<uint16_t*>(qb.data())[i] = fp32_to_fp16(q[i]);
  } else {
    quantize_row(q_type, q, qb.data(), D);
  }
  const bool v_f16 = a.v_type == GgmlType::F16;
  RowState st;
  st.acc32.assign(static_cast<size_t>(D), 0.0f);
  st.acc16.assign(static_cast<size_t>(D), uint16_t{0});
  std::vector<float> vrow(static_cast<size_t>(D));
  const size_t k_off = ggml_row_size(a.k_type, D) * static_cast<size_t>(g);
  const size_t v_off = ggml_row_size(a.v_type, D) * static_cast<size_t>(g);
  const float* mask_row = a.mask ? a.mask + t * a.mask_stride : nullptr;
  for (int64_t c = k0; c < k1; ++c) {
    if (mask_row && mask_row[c] == -INFINITY) continue;
    const uint8_t* kb = a.k_rows[c] + k_off;
    float dot;
    if (a.k_type == GgmlType::F32) {
      const auto* kf = reinterpret_cast<const float*>(kb);
      const auto* qf = reinterpret_cast<const float*>(qb.data());
      dot = ggml_dot(D, [&](int64_t i) { return kf[i]; }, [&](int64_t i) { return qf[i]; });
    } else if (a.k_type == GgmlType::F16) {
      const auto* kh = reinterpret_cast<const uint16_t*>(kb);
      const auto* qh = reinterpret_cast<const uint16_t*>(qb.data());
      dot = ggml_dot(D, [&](int64_t i) { return fp16_to_fp32(kh[i]); }, [&](int64_t i) { return fp16_to_fp32(qh[i]); });
    } else {
      dot = vec_dot(a.k_type, D, kb, qb.data());
    }
    // ggml's scalar code is compiled with FMA contraction: these two lines fuse
    const float s = std::fma(dot, a.shape.scale, mask_row ? mask_row[c] : 0.0f);
    float ms = 1.0f, vs = 1.0f;
    if (s > st.m) {
      const float m_old = st.m;
      st.m = s;
      ms = std::exp(m_old - st.m);
      if (m_old != -INFINITY) {
        for (int64_t i = 0; i < D; ++i) {
          if (v_f16) {
            st.acc16[i] = fp32_to_fp16(fp16_to_fp32(st.acc16[i]) * ms);
          } else {
            st.acc32[i] = st.acc32[i] * ms;
          }
        }
      }
    } else {
      vs = std::exp(s - st.m);
    }
    const uint8_t* vb = a.v_rows[c] + v_off;
    if (v_f16) {
      const auto* vh = reinterpret_cast<const uint16_t*>(vb);
      for (int64_t i = 0; i < D; ++i) {
        st.acc16[i] = fp32_to_fp16(std::fma(fp16_to_fp32(vh[i]), vs, fp16_to_fp32(st.acc16[i])));
      }
    } else {
      dequantize_row(a.v_type, vb, vrow.data(), D);
      for (int64_t i = 0; i < D; ++i) st.acc32[i] = std::fma(vrow[i], vs, st.acc32[i]);
    }
    st.s = std::fma(st.s, ms, vs);
  }
  if (v_f16)
    for (int64_t i = 0; i < D; ++i) st.acc32[i] = fp16_to_fp32(st.acc16[i]);
  return st;
}

// Tiled algorithm for one row: K.Q one fused chain per key, tiles of 64 keys, vector expf (in
// the form of the build the active level follows), summed per vector group.
RowState tiled_row(const AttentionArgs& a, int64_t t, int64_t h) {
  const int64_t D = a.shape.head_dim;
  const int64_t g = h / (a.shape.n_head / a.shape.n_head_kv);
  const bool f16 = a.k_type == GgmlType::F16;
  const float* q = a.q + t * a.q_stride + h * D;
  const float* mask_row = a.mask ? a.mask + t * a.mask_stride : nullptr;
  const size_t esz = f16 ? 2 : 4;
  auto elem = [&](const uint8_t* const* rows, int64_t c, int64_t i) {
    const uint8_t* p = rows[c] + (static_cast<size_t>(g * D) + static_cast<size_t>(i)) * esz;
    if (f16) return fp16_to_fp32(*reinterpret_cast<const uint16_t*>(p));
    return *reinterpret_cast<const float*>(p);
  };
  RowState st;
  st.acc32.assign(static_cast<size_t>(D), 0.0f);
  float kq[64];
  for (int64_t c0 = 0; c0 < a.n_kv; c0 += 64) {
    const int64_t c1 = std::min<int64_t>(c0 + 64, a.n_kv);
    float tile_max = -INFINITY;
    for (int64_t j = 0; j < 64; ++j) {
      const int64_t c = c0 + j;
      float s = 0.0f;
      for (int64_t i = 0; i < D; ++i) s = std::fma(c < c1 ? elem(a.k_rows, c, i) : 0.0f, q[i], s);
      s = s * a.shape.scale;
      const bool seen = c < c1 && !(mask_row && mask_row[c] == -INFINITY);
      kq[j] = seen ? s + (mask_row ? mask_row[c] : 0.0f) : -INFINITY;
      tile_max = std::max(tile_max, kq[j]);
    }
    if (tile_max == -INFINITY) continue;
    const float m_new = std::max(st.m, tile_max);
    if (m_new > st.m) {
      const float ms = std::exp(st.m - m_new);
      for (auto& x : st.acc32) x = x * ms;
      st.s = st.s * ms;
    }
    st.m = m_new;
    const int L = build_lanes();
    for (float& x : kq) x = L == 16 ? ggml_math::GgmlExpLane(x - m_new) : ggml_math::GgmlExpLaneAvx2(x - m_new);
    double tile_sum = 0.0;
    for (int j = 0; j < 64; j += L) tile_sum += L == 16 ? reduce_add16(kq + j) : hsum8(kq + j);
    st.s = static_cast<float>(static_cast<double>(st.s) + tile_sum);
    for (int64_t c = c0; c < c1; ++c) {
      const float p = kq[c - c0];
      if ((mask_row && mask_row[c] == -INFINITY) || p == 0.0f) continue;
      for (int64_t i = 0; i < D; ++i) st.acc32[i] = std::fma(elem(a.v_rows, c, i), p, st.acc32[i]);
    }
  }
  return st;
}

void finish(const AttentionArgs& a, int64_t t, int64_t h, const RowState& st, std::vector<float>& out,
            std::vector<float>& lse) {
  const int64_t D = a.shape.head_dim;
  const float inv = st.s == 0.0f ? 0.0f : 1.0f / st.s;
  for (int64_t i = 0; i < D; ++i) out[static_cast<size_t>(t * a.out_stride + h * D + i)] = st.acc32[i] * inv;
  lse[static_cast<size_t>(t * a.shape.n_head + h)] = st.s == 0.0f ? -INFINITY : st.m + std::log(st.s);
}

// The whole call as attention() runs it with a pool of n_threads.
void attention(const AttentionArgs& a, int n_threads, std::vector<float>& out, std::vector<float>& lse) {
  out.assign(static_cast<size_t>(a.n_tokens * a.out_stride), 0.0f);
  lse.assign(static_cast<size_t>(a.n_tokens * a.shape.n_head), 0.0f);
  const int64_t D = a.shape.head_dim;
  const bool tiled = a.n_tokens >= 64 && a.k_type == a.v_type &&
                     (a.k_type == GgmlType::F16 || a.k_type == GgmlType::F32);
  // Split keys: chunks cut from the key count rounded up to 32 (the span of the cell-indexed
  // kernel, whose callers padded n_kv to 32).
  const int64_t span = (a.n_kv + 31) / 32 * 32;
  if (!tiled && a.n_tokens == 1 && span >= 512 && n_threads > 1) {
    const int64_t chunk = (span + n_threads - 1) / n_threads;
    for (int64_t h = 0; h < a.shape.n_head; ++h) {
      RowState m;
      m.acc32.assign(static_cast<size_t>(D), 0.0f);
      for (int c = 0; c < n_threads; ++c) {
        const int64_t k0 = c * chunk, k1 = std::max(k0, std::min(k0 + chunk, a.n_kv));
        const RowState r = per_key_row(a, 0, h, k0, k1);
        if (r.s == 0.0f) continue;
        const float m_new = std::max(m.m, r.m);
        const float so = std::exp(m.m - m_new), sn = std::exp(r.m - m_new);
        for (int64_t i = 0; i < D; ++i) m.acc32[i] = m.acc32[i] * so + r.acc32[i] * sn;
        m.s = m.s * so + r.s * sn;
        m.m = m_new;
      }
      finish(a, 0, h, m, out, lse);
    }
    return;
  }
  for (int64_t t = 0; t < a.n_tokens; ++t)
    for (int64_t h = 0; h < a.shape.n_head; ++h)
      finish(a, t, h, tiled ? tiled_row(a, t, h) : per_key_row(a, t, h, 0, a.n_kv), out, lse);
}

}  // namespace exact

bool same_bits(float x, float y) { return std::memcmp(&x, &y, sizeof(float)) == 0; }

// Runs the kernel and the exact reference on one case; every output and lse must match bit for bit.
void expect_bit_exact(const Case& c, ThreadPool& pool) {
  const Problem p = make_problem(c);
  std::vector<float> out, lse, ref_out, ref_lse;
  const AttentionArgs a = args_for(p, out, lse);
  attention(a, pool);
  exact::attention(a, pool.size(), ref_out, ref_lse);
  const std::string what = "k=" + std::string(ggml_type_name(c.k_type)) + " v=" +
                           std::string(ggml_type_name(c.v_type)) + " heads=" + std::to_string(c.n_head) +
                           "/" + std::to_string(c.n_head_kv) + " D=" + std::to_string(c.head_dim) +
                           " tokens=" + std::to_string(c.n_tokens) + " n_kv=" + std::to_string(c.n_kv) +
                           " threads=" + std::to_string(pool.size());
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_TRUE(same_bits(lse[i], ref_lse[i])) << what << ": lse[" << i << "] = " << lse[i] << ", exact " << ref_lse[i];
  }
  for (size_t i = 0; i < out.size(); ++i) {
    ASSERT_TRUE(same_bits(out[i], ref_out[i])) << what << ": out[" << i << "] = " << out[i] << ", exact " << ref_out[i];
  }
  for (size_t i = 0; i < lse.size(); ++i) {
    ASSERT_TRUE(same_bits(lse[i], ref_lse[i])) << what << ": lse[" << i << "] = " << lse[i] << ", exact " << ref_lse[i];
  }
}

void EveryPathMatchesLlamaOrder();
void EveryCompiledTargetWithFma();
void WithoutMaskAtLevel();

// Runs `body` at both llama.cpp orders the machine can run: the AVX-512 level follows llama.cpp's
// AVX-512 build, the AVX2 level its AVX2 build (ggml_build_lanes). The scalar level runs the same
// attention kernels (Highway picks the target) in the AVX2 build's order, so it is not repeated.
template <class Body>
void at_every_level(Body body) {
  const CpuLevel before = active_cpu_level();
  for (CpuLevel level : {CpuLevel::Avx512, CpuLevel::Avx2, CpuLevel::Scalar}) {
    if (detected_cpu_level() < level) continue;
    if (level == CpuLevel::Scalar && detected_cpu_level() > CpuLevel::Scalar) continue;
    set_cpu_level(level);
    SCOPED_TRACE(std::string(cpu_level_name(level)));
    body();
    if (::testing::Test::HasFatalFailure()) break;
  }
  set_cpu_level(before);
}

TEST(AttentionExact, EveryPathMatchesLlamaOrderBitForBit) {
  at_every_level([] { EveryPathMatchesLlamaOrder(); });
}

void EveryPathMatchesLlamaOrder() {
  ThreadPool pool1(1), pool3(3);
  std::mt19937 rng(2024);
  const GgmlType types[] = {GgmlType::F16, GgmlType::F32, GgmlType::Q8_0};
  int n = 0;
  for (int ratio : {1, 2, 4}) {
    for (int head_dim : {64, 128, 256}) {
      for (int64_t n_tokens : {int64_t{1}, int64_t{5}, int64_t{64}, int64_t{130}}) {
        for (GgmlType type : types) {
          Case c;
          c.n_head_kv = 2;
          c.n_head = 2 * ratio;
          c.head_dim = head_dim;
          c.n_tokens = n_tokens;
          // long key ranges for the cheap shapes, short ones for the costly
          const int64_t max_kv = n_tokens >= 64 ? (head_dim == 256 ? 300 : 700) : 1500;
          c.n_kv = n_tokens + static_cast<int64_t>(rng() % static_cast<uint32_t>(max_kv));
          if (n_tokens == 1 && n % 2 == 0) c.n_kv = std::max<int64_t>(c.n_kv, 600);  // split keys
          c.k_type = c.v_type = type;
          if (n % 3 == 1) c.v_type = GgmlType::F16;  // mixed K/V types
          c.hole_every = (n % 4 == 0) ? 0 : 3 + n % 5;
          c.causal = n % 5 != 4;
          if (n % 6 == 2) {
            c.hidden_begin = c.n_kv / 3;
            c.hidden_end = c.hidden_begin + 70;
          }
          c.seed = 100u + static_cast<uint32_t>(n);
          expect_bit_exact(c, n % 2 ? pool3 : pool1);
          if (::testing::Test::HasFatalFailure()) return;
          ++n;
        }
      }
    }
  }
}

TEST(AttentionExact, EveryCompiledTargetWithFmaMatchesBitForBit) {
  at_every_level([] { EveryCompiledTargetWithFma(); });
}

void EveryCompiledTargetWithFma() {
  // The fast forms are lane-wise or emulate the 16- or 8-lane order, so every target with fused
  // multiply-adds (AVX2 and up) must give the same bits; targets without FMA are checked for
  // accuracy only (EveryCompiledCpuTargetMatchesReference).
  ThreadPool pool(2);
  int checked = 0;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
#if HWY_ARCH_X86
    if (target > HWY_AVX2) continue;
#else
    continue;
#endif
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (int64_t n_tokens : {int64_t{1}, int64_t{6}, int64_t{70}}) {
      for (GgmlType type : {GgmlType::F16, GgmlType::F32}) {
        Case c;
        c.n_head_kv = 2;
        c.n_head = 4;
        c.head_dim = 128;
        c.n_tokens = n_tokens;
        c.n_kv = 600;
        c.k_type = c.v_type = type;
        c.hole_every = 6;
        expect_bit_exact(c, pool);
      }
    }
    ++checked;
  }
  hwy::SetSupportedTargetsForTest(0);
#if HWY_ARCH_X86
  EXPECT_GT(checked, 0);
#endif
}

TEST(AttentionExact, WithoutMask) {
  at_every_level([] { WithoutMaskAtLevel(); });
}

void WithoutMaskAtLevel() {
  ThreadPool pool(2);
  for (int64_t n_tokens : {int64_t{1}, int64_t{7}, int64_t{96}}) {
    for (GgmlType type : {GgmlType::F16, GgmlType::F32}) {
      Case c;
      c.n_head_kv = 1;
      c.n_head = 3;  // a group size that does not divide the vector width
      c.head_dim = 64;
      c.n_tokens = n_tokens;
      c.n_kv = 700;
      c.k_type = c.v_type = type;
      const Problem p = make_problem(c);
      std::vector<float> out, lse, ref_out, ref_lse;
      AttentionArgs a = args_for(p, out, lse);
      a.mask = nullptr;
      attention(a, pool);
      exact::attention(a, pool.size(), ref_out, ref_lse);
      for (size_t i = 0; i < out.size(); ++i) ASSERT_TRUE(same_bits(out[i], ref_out[i])) << i;
      for (size_t i = 0; i < lse.size(); ++i) ASSERT_TRUE(same_bits(lse[i], ref_lse[i])) << i;
    }
  }
}

// Keys whose rows lie scattered in a buffer give the bits of the same keys stored in order: every
// mode (key by key, tiled, split keys) follows the key order, not the addresses.
TEST(AttentionExact, ScatteredRowsGiveTheBitsOfKeysStoredInOrder) {
  ThreadPool pool(2);
  struct Mode {
    int64_t n_tokens, n_kv;
    GgmlType type;
    int hole_every;
  };
  for (const Mode& m : {Mode{1, 40, GgmlType::F16, 0}, Mode{5, 150, GgmlType::F16, 7}, Mode{70, 200, GgmlType::F16, 0},
                        Mode{70, 200, GgmlType::F32, 5}, Mode{1, 700, GgmlType::F16, 0}, Mode{1, 700, GgmlType::Q8_0, 0},
                        Mode{9, 130, GgmlType::Q4_0, 4}}) {
    Case c;
    c.n_head = 4;
    c.n_head_kv = 2;
    c.head_dim = 64;
    c.n_tokens = m.n_tokens;
    c.n_kv = m.n_kv;
    c.k_type = c.v_type = m.type;
    c.hole_every = m.hole_every;
    const Problem p = make_problem(c);
    std::vector<float> want, want_lse;
    attention(args_for(p, want, want_lse), pool);

    // The same rows at random places of a buffer three times as large (garbage elsewhere).
    const int64_t n_rows = 3 * c.n_kv;
    std::vector<int32_t> rows(static_cast<size_t>(n_rows));
    for (int64_t r = 0; r < n_rows; ++r) rows[static_cast<size_t>(r)] = static_cast<int32_t>(r);
    std::shuffle(rows.begin(), rows.end(), std::mt19937(42));
    rows.resize(static_cast<size_t>(c.n_kv));
    std::vector<uint8_t> k(p.k_row_bytes * static_cast<size_t>(n_rows), 0x7B), v(p.v_row_bytes * static_cast<size_t>(n_rows), 0x7B);
    for (int64_t j = 0; j < c.n_kv; ++j) {
      std::memcpy(k.data() + rows[static_cast<size_t>(j)] * p.k_row_bytes, p.k.data() + j * p.k_row_bytes, p.k_row_bytes);
      std::memcpy(v.data() + rows[static_cast<size_t>(j)] * p.v_row_bytes, p.v.data() + j * p.v_row_bytes, p.v_row_bytes);
    }
    std::vector<const uint8_t*> k_rows(static_cast<size_t>(c.n_kv)), v_rows(k_rows.size());
    for (int64_t j = 0; j < c.n_kv; ++j) {
      k_rows[static_cast<size_t>(j)] = k.data() + rows[static_cast<size_t>(j)] * p.k_row_bytes;
      v_rows[static_cast<size_t>(j)] = v.data() + rows[static_cast<size_t>(j)] * p.v_row_bytes;
    }
    std::vector<float> got, got_lse;
    AttentionArgs a = args_for(p, got, got_lse);
    a.k_rows = k_rows.data();
    a.v_rows = v_rows.data();
    attention(a, pool);
    ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)), 0)
        << m.n_tokens << " tokens over " << m.n_kv << " " << ggml_type_name(m.type) << " keys";
    ASSERT_EQ(std::memcmp(got_lse.data(), want_lse.data(), got_lse.size() * sizeof(float)), 0);
  }
  std::vector<float> out, lse;
  Case c;
  const Problem p = make_problem(c);
  AttentionArgs a = args_for(p, out, lse);
  std::vector<const uint8_t*> with_null = p.k_rows;
  with_null[0] = nullptr;
  a.k_rows = with_null.data();
  EXPECT_THROW(attention(a, pool), Error);
}

// Timing of attention() alone on the Qwen3-0.6B shape (16 query heads, 8 KV heads, head dim 128,
// F16 cache). Run with --gtest_also_run_disabled_tests --gtest_filter='*Timing*';
// ATTN_BENCH_THREADS sets the pool size (default 1), ATTN_BENCH_ONLY=prefix runs the shapes named so.
TEST(AttentionExact, DISABLED_Timing) {
  const char* env = std::getenv("ATTN_BENCH_THREADS");
  ThreadPool pool(env ? std::atoi(env) : 1);
  struct Shape {
    const char* name;
    int64_t n_tokens, depth;
  };
  for (const Shape& s : {Shape{"prefill 128 @ d2048", 128, 2048}, Shape{"batch 8 @ d2048", 8, 2048},
                         Shape{"batch 32 @ d8192", 32, 8192},
                         Shape{"decode 1 @ d4096", 1, 4096}}) {
    if (const char* only = std::getenv("ATTN_BENCH_ONLY"); only && std::strncmp(s.name, only, std::strlen(only)) != 0) {
      continue;
    }
    Case c;
    c.n_head_kv = 8;
    c.n_head = 16;
    c.head_dim = 128;
    c.n_tokens = s.n_tokens;
    c.n_kv = s.depth + s.n_tokens;
    c.k_type = c.v_type = GgmlType::F16;
    const Problem p = make_problem(c);
    std::vector<float> out, lse;
    const AttentionArgs a = args_for(p, out, lse);
    attention(a, pool);  // warm-up
    const int reps = s.n_tokens == 1 ? 200 : 3;
    // CPU time of the calling thread (worker 0; all of the work with one thread): the machine is
    // shared, and wall time would count the time spent waiting for a core.
    auto cpu_now = [] {
      timespec ts;
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
      return static_cast<double>(ts.tv_sec) + 1e-9 * static_cast<double>(ts.tv_nsec);
    };
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = cpu_now();
    for (int r = 0; r < reps; ++r) attention(a, pool);
    const double cpu = (cpu_now() - c0) / reps;
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
    // visible (query, key) pairs x heads x 4 flops per head-dim element (K.Q and V)
    double pairs = 0;
    for (int64_t t = 0; t < c.n_tokens; ++t) pairs += static_cast<double>(s.depth + t + 1);
    const double gflop = pairs * c.n_head * c.head_dim * 4 / 1e9;
    std::printf("%-22s wall %9.3f ms  %7.2f GFLOP/s | thread-0 cpu %9.3f ms  %7.2f GFLOP/s  (%d threads)\n", s.name,
                sec * 1e3, gflop / sec, cpu * 1e3, gflop / cpu, pool.size());
  }
}

// One token (or a batch) over 16,384 keys of the Qwen3-0.6B shape, f16 KV and agentkv's own types interleaved
// in one process (the VM's speed drifts between runs: compare within a run), min of 12 rounds.
// Run with --gtest_also_run_disabled_tests --gtest_filter='*OwnTypeDecodeTiming*';
// ATTN_BENCH_THREADS sets the pool size (default 2), ATTN_BENCH_KEYS the depth, ATTN_BENCH_TOKENS
// the query rows (a prefill batch after the depth, causal), ATTN_BENCH_ROUNDS the rounds.
TEST(AttentionExact, DISABLED_OwnTypeDecodeTiming) {
  const char* env = std::getenv("ATTN_BENCH_THREADS");
  ThreadPool pool(env ? std::atoi(env) : 2);
  const char* keys = std::getenv("ATTN_BENCH_KEYS");
  const char* tokens = std::getenv("ATTN_BENCH_TOKENS");
  const std::pair<GgmlType, GgmlType> types[] = {{GgmlType::F16, GgmlType::F16}, {GgmlType::TQ4, GgmlType::TQ4},
                                                 {GgmlType::TQ3, GgmlType::TQ3}, {GgmlType::Q8_0, GgmlType::TQ3}};
  std::vector<Problem> problems;
  for (const auto& [k, v] : types) {
    Case c;
    c.n_head_kv = 8;
    c.n_head = 16;
    c.head_dim = 128;
    c.n_tokens = tokens ? std::atoll(tokens) : 1;
    c.n_kv = (keys ? std::atoll(keys) : 16384) + c.n_tokens - 1;
    c.k_type = k;
    c.v_type = v;
    problems.push_back(make_problem(c));
  }
  std::vector<double> best(problems.size(), 1e30);
  std::vector<float> out, lse;
  const char* rounds = std::getenv("ATTN_BENCH_ROUNDS");
  for (int round = 0, n = rounds ? std::atoi(rounds) : 12; round < n; ++round) {
    for (size_t i = 0; i < problems.size(); ++i) {
      const AttentionArgs a = args_for(problems[i], out, lse);
      const auto t0 = std::chrono::steady_clock::now();
      attention(a, pool);
      best[i] = std::min(best[i], std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
  }
  for (size_t i = 0; i < problems.size(); ++i)
    std::printf("k=%-5s v=%-5s %8.3f ms  %.2f x f16\n", std::string(ggml_type_name(types[i].first)).c_str(),
                std::string(ggml_type_name(types[i].second)).c_str(),
                best[i] * 1e3, best[0] / best[i]);
}

// The Qwen3-0.6B decode at depth as the model reads it: 28 layers, each with its own K and V rows
// of exactly 2 KiB (row after row, as the cache stores them; 470 MB at 4096 keys, so DRAM serves
// them), 4 tokens through every layer per round, min and median of 15 rounds. Run with
// --gtest_also_run_disabled_tests --gtest_filter='*ModelDecodeTiming*'; ATTN_BENCH_THREADS (2),
// ATTN_BENCH_KEYS (4096), ATTN_BENCH_LAYERS (28; 1 keeps the rows in cache: the arithmetic alone).
TEST(AttentionExact, DISABLED_ModelDecodeTiming) {
  const auto env_or = [](const char* name, int64_t fallback) {
    const char* v = std::getenv(name);
    return v ? std::atoll(v) : fallback;
  };
  ThreadPool pool(static_cast<int>(env_or("ATTN_BENCH_THREADS", 2)));
  const int64_t n_kv = env_or("ATTN_BENCH_KEYS", 4096);
  const int64_t layers = env_or("ATTN_BENCH_LAYERS", 28);
  const int64_t H = 16, HK = 8, D = 128;
  // ATTN_BENCH_TYPE: the cache's K/V type (f16 by default; tq4, tq3, q8_0 take the own-type path).
  const char* type_name = std::getenv("ATTN_BENCH_TYPE");
  GgmlType type = GgmlType::F16;
  for (GgmlType t : {GgmlType::TQ4, GgmlType::TQ3, GgmlType::Q8_0})
    if (type_name && std::string(type_name) == ggml_type_name(t)) type = t;
  const size_t row_bytes = ggml_row_size(type, HK * D);
  // Layer 0's rows quantized once (the tq scale search is slow), copied to the other layers.
  std::vector<std::vector<uint8_t>> k(static_cast<size_t>(layers)), v(k.size());
  std::vector<std::vector<const uint8_t*>> k_rows(k.size()), v_rows(k.size());
  std::mt19937 rng(1);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> row(static_cast<size_t>(HK * D));
  for (auto* kv : {&k[0], &v[0]}) {
    kv->resize(static_cast<size_t>(n_kv) * row_bytes);
    for (int64_t j = 0; j < n_kv; ++j) {
      for (auto& x : row) x = nd(rng);
      quantize_row(type, row.data(), kv->data() + j * row_bytes, HK * D);
    }
  }
  for (size_t l = 0; l < k.size(); ++l) {
    if (l > 0) {
      k[l] = k[0];
      v[l] = v[0];
    }
    for (int64_t j = 0; j < n_kv; ++j) {
      k_rows[l].push_back(k[l].data() + j * row_bytes);
      v_rows[l].push_back(v[l].data() + j * row_bytes);
    }
  }
  std::vector<float> q(static_cast<size_t>(H * D)), out(q.size());
  for (auto& x : q) x = nd(rng);
  std::vector<double> ms;
  for (int round = 0; round < 15; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int token = 0; token < 4; ++token) {
      for (size_t l = 0; l < k.size(); ++l) {
        AttentionArgs a;
        a.shape.n_head = H;
        a.shape.n_head_kv = HK;
        a.shape.head_dim = D;
        a.shape.scale = 1.0f / std::sqrt(static_cast<float>(D));
        a.n_tokens = 1;
        a.q = q.data();
        a.q_stride = H * D;
        a.k_rows = k_rows[l].data();
        a.v_rows = v_rows[l].data();
        a.k_type = a.v_type = type;
        a.n_kv = n_kv;
        a.out = out.data();
        a.out_stride = H * D;
        attention(a, pool);
      }
    }
    ms.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / 4 * 1e3);
  }
  std::sort(ms.begin(), ms.end());
  const double bytes = 2.0 * static_cast<double>(row_bytes) * static_cast<double>(n_kv * layers);
  std::printf("%lld layers x %lld %s keys: per token min %.2f ms, median %.2f ms (%.1f GB/s at the min)\n",
              static_cast<long long>(layers), static_cast<long long>(n_kv), std::string(ggml_type_name(type)).c_str(), ms.front(), ms[ms.size() / 2],
              bytes / (ms.front() * 1e-3) / 1e9);
}

}  // namespace
}  // namespace agentkv
