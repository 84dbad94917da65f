#include "kernels/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#elif defined(__SSE2__)
#include <xmmintrin.h>
#endif

#include "agentkv/error.h"
#include "agentkv/numerics.h"
#include "kernels/dispatch.h"
#include "kernels/ops.h"
#include "kernels/ggml_expf-inl.h"
#include "kernels/vec_ext.h"

// The vector types below never cross a non-inlined function boundary, so the ABI notes GCC
// emits for them (without AVX enabled) do not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace agentkv {
namespace {

// ---- small f32 vector helpers -------------------------------------------------------------
// Written against vec::Vec<W> and always inlined into one entry point per instruction set (see
// the end of this section): W = 4 generic SSE2, 8 AVX2, 16 AVX-512.
#define DN_INLINE AGENTKV_VEC_INLINE
using vec::Vec;

// y += a x, each element one fused multiply-add as ggml_vec_mad_f32 computes it (its vector part
// by intrinsics, its leftovers `y[i] += x[i]*v` contracted by GCC: no loop-carried chain). The
// FMA entries (W >= 8) get that by contraction; the generic one (the scalar level, no FMA unit to
// contract to) calls std::fma.
template <int W>
DN_INLINE void axpy(float* y, const float* x, float a, int n) {  // y += a x
  int i = 0;
  if constexpr (W >= 8) {
    for (; i + W <= n; i += W) vec::store<W>(y + i, vec::load<W>(y + i) + a * vec::load<W>(x + i));
    for (; i < n; ++i) y[i] += a * x[i];
  } else {
    for (; i < n; ++i) y[i] = std::fma(a, x[i], y[i]);
  }
}

template <int W>
DN_INLINE void scale(float* y, float a, int n) {  // y *= a
  int i = 0;
  for (; i + W <= n; i += W) vec::store<W>(y + i, vec::load<W>(y + i) * a);
  for (; i < n; ++i) y[i] *= a;
}

template <int W>
DN_INLINE void scale_copy(float* y, const float* x, float a, int n) {  // y = a x
  int i = 0;
  for (; i + W <= n; i += W) vec::store<W>(y + i, a * vec::load<W>(x + i));
  for (; i < n; ++i) y[i] = a * x[i];
}

// A product the compiler may not fuse into the addition that consumes it: ggml's scalar loops
// round it on its own (see ggml_dot).
DN_INLINE float unfused_product(float a, float b) {
  float p = a * b;
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(p));
#else
  volatile float opaque = p;
  p = opaque;
#endif
  return p;
}

// Floats per vector of the llama.cpp build an entry point of lane width W reproduces: the AVX-512
// entry (W = 16, only at the AVX-512 level) its AVX-512 build, the AVX2 entry (W = 8) and the
// generic one (W = 4, the scalar level) its AVX2 build. Group boundaries (SiLU's vector part),
// ggml_vec_dot_f32's steps and reduction and the form of ggml_v_expf follow from it.
template <int W>
inline constexpr int kGgmlLanes = W == 16 ? 16 : 8;

// dot(x, y) in ggml_vec_dot_f32's float order, the dot llama.cpp's GATED_DELTA_NET op takes for
// S^T k and S^T q: four G-lane fused multiply-add accumulators over steps of 4G elements,
// combined (a0 + a2) + (a1 + a3) and reduced (G = 16: _mm512_reduce_add_ps, i.e. halving;
// G = 8: GGML_F32x8_REDUCE, the 128-bit halves added, then (t0 + t1) + (t2 + t3)), then the
// elements after the last whole step one at a time in float, each product rounded before it is
// added. For head size 16 (qwen35-micro) the whole dot is that sequential part; it is what makes
// the fixture bit-exact (a 16-lane tree, a fused chain or a double sum each drift from llama.cpp
// at a few positions, through f16 roundings of the gated-norm output downstream).
template <int W>
DN_INLINE float ggml_dot(const float* x, const float* y, int n) {
  constexpr int G = kGgmlLanes<W>;
  const int np = n & ~(4 * G - 1);
  float sum = 0.0f;
  if (np > 0) {
    if constexpr (W == G) {
      Vec<W> acc[4] = {};
      for (int i = 0; i < np; i += 4 * W)
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) acc[j] += vec::load<W>(x + i + j * W) * vec::load<W>(y + i + j * W);
      const Vec<W> v = (acc[0] + acc[2]) + (acc[1] + acc[3]);
      if constexpr (G == 16) {
        sum = vec::hsum(v);
      } else {
        const float t0 = v[0] + v[4], t1 = v[1] + v[5], t2 = v[2] + v[6], t3 = v[3] + v[7];
        sum = (t0 + t1) + (t2 + t3);
      }
    } else {  // the generic entry: G = 8 lanes one at a time, fused as the AVX2 build's steps
      float acc[4][G] = {};
      for (int i = 0; i < np; i += 4 * G)
        for (int j = 0; j < 4; ++j)
          for (int l = 0; l < G; ++l) acc[j][l] = std::fma(x[i + j * G + l], y[i + j * G + l], acc[j][l]);
      float v[G];
      for (int l = 0; l < G; ++l) v[l] = (acc[0][l] + acc[2][l]) + (acc[1][l] + acc[3][l]);
      sum = ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
    }
  }
  for (int i = np; i < n; ++i) sum += unfused_product(x[i], y[i]);
  return sum;
}

// Whether any lane of n (integer-valued floats) lies outside [-126, 126], without vector
// comparisons: GCC lowers a comparison whose result is a lane mask to one scalar compare and
// extract per lane on AVX-512F, which used to dominate every SiLU vector. With m = int(n) + 126,
// n is inside iff both m and 252 - m are non-negative, so OR-ing them over all lanes leaves the
// sign bit set iff some lane is outside (also for |n| >= 2^31, which converts to INT_MIN).
// NaN lanes count as outside here but not in a float comparison; either path returns x itself
// for a NaN x, so the results agree.
DN_INLINE int32_t or_fold(const vec::IVec<4>& m) {
  const vec::IVec<4> h = m | __builtin_shufflevector(m, m, 2, 3, 0, 1);
  return h[0] | h[1];
}
DN_INLINE int32_t or_fold(const vec::IVec<8>& m) {
  return or_fold(vec::IVec<4>(__builtin_shufflevector(m, m, 0, 1, 2, 3) |
                              __builtin_shufflevector(m, m, 4, 5, 6, 7)));
}
DN_INLINE int32_t or_fold(const vec::IVec<16>& m) {
  return or_fold(vec::IVec<8>(__builtin_shufflevector(m, m, 0, 1, 2, 3, 4, 5, 6, 7) |
                              __builtin_shufflevector(m, m, 8, 9, 10, 11, 12, 13, 14, 15)));
}
template <int W>
DN_INLINE bool any_exponent_outside_126(const Vec<W>& n) {
  const vec::IVec<W> m = __builtin_convertvector(n, vec::IVec<W>) + 126;
  return or_fold(m | (252 - m)) < 0;
}

#if defined(__x86_64__) || defined(__i386__)
// The AVX2 build's ggml_v_silu on 8 lanes: its ggml_v_expf (see ggml_expf-inl.h) with the same
// intrinsics, lanes outside |n| <= 126 by the scalar form. Out of line (the generic templates that
// call it carry no target attribute), through memory (no vector type crosses the call).
__attribute__((target("avx2,fma"), noinline)) void ggml_silu8_avx2_form(const float* xp, float* yp) {
  const __m256 x = _mm256_loadu_ps(xp);
  const __m256 nx = _mm256_sub_ps(_mm256_setzero_ps(), x);
  const __m256 r = _mm256_set1_ps(0x1.8p23f);
  const __m256 z = _mm256_fmadd_ps(nx, _mm256_set1_ps(0x1.715476p+0f), r);
  const __m256 n = _mm256_sub_ps(z, r);
  const __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                    _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), nx));
  const __m256i e = _mm256_slli_epi32(_mm256_castps_si256(z), 23);
  const __m256 k = _mm256_castsi256_ps(_mm256_add_epi32(e, _mm256_castps_si256(_mm256_set1_ps(1))));
  const __m256 c = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.f), n), _mm256_set1_ps(126), _CMP_GT_OQ);
  const __m256 u = _mm256_mul_ps(b, b);
  const __m256 j = _mm256_fmadd_ps(
      _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                      _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
      u, _mm256_mul_ps(_mm256_set1_ps(0x1.ffffecp-1f), b));
  __m256 ex;
  if (!_mm256_movemask_ps(c)) {
    ex = _mm256_fmadd_ps(j, k, k);
  } else {
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, nx);
    for (int l = 0; l < 8; ++l) lanes[l] = ggml_math::GgmlExpLaneAvx2(lanes[l]);
    ex = _mm256_load_ps(lanes);
  }
  _mm256_storeu_ps(yp, _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), ex)));
}
#endif

// ggml_v_silu (x / (1 + ggml_v_expf(-x)), see ggml_expf-inl.h) on W lanes: what
// ggml_vec_silu_f32 applies to whole groups of kGgmlLanes<W> elements of a row. AVX-512 form
// (W = 16): its fused steps are written as a * b + c, which this file's FMA targets contract; the
// final scaling by 2^n is an exact product, so contracting it into 1 + e^-x changes nothing; lanes
// outside |n| <= 126 take the scalar form. AVX2 form: the intrinsics above (W = 8) or lane by lane
// (the generic entry).
template <int W>
DN_INLINE Vec<W> ggml_silu_vec(const Vec<W>& x) {
  if constexpr (kGgmlLanes<W> == 8) {
#if defined(__x86_64__) || defined(__i386__)
    if constexpr (W == 8) {
      float in[8], out[8];
      vec::store<8>(in, x);
      ggml_silu8_avx2_form(in, out);
      return vec::load<8>(out);
    }
#endif
    Vec<W> y;
    for (int l = 0; l < W; ++l) y[l] = x[l] / (1.0f + ggml_math::GgmlExpLaneAvx2(0.0f - x[l]));
    return y;
  }
  const Vec<W> nx = Vec<W>{} - x;
  const Vec<W> z = nx * 0x1.715476p+0f + 0x1.8p23f;
  const Vec<W> n = z - 0x1.8p23f;
  const Vec<W> b0 = nx - n * 0x1.62e4p-1f;
  const Vec<W> b = b0 - n * 0x1.7f7d1cp-20f;
  const Vec<W> u = b * b;
  const Vec<W> p_hi = (0x1.0e4020p-7f * b + 0x1.573e2ep-5f) * u + (0x1.555e66p-3f * b + 0x1.fffdb6p-2f);
  const Vec<W> j = p_hi * u + (0x1.ffffecp-1f * b + 1.0f);
  Vec<W> e;
  if (!any_exponent_outside_126<W>(n)) {
    const vec::IVec<W> bits = (__builtin_convertvector(n, vec::IVec<W>) + 127) << 23;
    Vec<W> pow2n;
    std::memcpy(&pow2n, &bits, sizeof(pow2n));
    e = j * pow2n;
  } else {
    for (int l = 0; l < W; ++l) e[l] = ggml_math::GgmlExpLane(nx[l]);
  }
  return x / (1.0f + e);
}

// The scalar tail of ggml_vec_silu_f32 (elements after the last whole vector group).
inline float ggml_silu_scalar(float x) { return x / (1.0f + std::exp(-x)); }

// y[i] = silu(x[i]) for i < n as ggml_vec_silu_f32 computes element `first + i` of a row whose
// leading `n_vec` elements (a multiple of kGgmlLanes<W>) are in whole vector groups: ggml_v_silu
// there, the scalar formula after. W divides the group width, so groups never straddle it.
template <int W>
DN_INLINE void ggml_silu_span(const float* x, float* y, int64_t first, int64_t n, int64_t n_vec) {
  int64_t i = 0;
  const int64_t vec_end = std::max<int64_t>(0, std::min(n, n_vec - first));
  for (; i + W <= vec_end; i += W) vec::store<W>(y + i, ggml_silu_vec<W>(vec::load<W>(x + i)));
  for (; i < vec_end; ++i) {  // only when first is not W-aligned (not the case in this file)
    float lane[W] = {x[i]};
    vec::store<W>(lane, ggml_silu_vec<W>(vec::load<W>(lane)));
    y[i] = lane[0];
  }
  for (; i < n; ++i) y[i] = ggml_silu_scalar(x[i]);
}

// R rows at once (the same arithmetic per row): y_r *= a; s_r = dot(y_r, b).
template <int W, int R>
DN_INLINE void scale_dot_rows(float* const* y, float a, const float* b, int n, float* s) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    scale<W>(y[r], a, n);
    s[r] = ggml_dot<W>(y[r], b, n);
  }
}

// R rows at once: y_r += a_r x; s_r = dot(y_r, b).
template <int W, int R>
DN_INLINE void axpy_dot_rows(float* const* y, const float* x, const float* a, const float* b, int n,
                             float* s) {
#pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    axpy<W>(y[r], x, a[r], n);
    s[r] = ggml_dot<W>(y[r], b, n);
  }
}

// dst[c][r] = src[r][c] for an R x C source (row strides lds, ldd), in 8 x 8 blocks so both
// sides stay within a few cache lines.
DN_INLINE void transpose(const float* src, int64_t lds, float* dst, int64_t ldd, int R, int C) {
  for (int r0 = 0; r0 < R; r0 += 8) {
    const int r1 = std::min(R, r0 + 8);
    for (int c0 = 0; c0 < C; c0 += 8) {
      const int c1 = std::min(C, c0 + 8);
      for (int c = c0; c < c1; ++c)
        for (int r = r0; r < r1; ++r) dst[c * ldd + r] = src[r * lds + c];
    }
  }
}

// ---- small row-major GEMM: C[M x N] += A[M x K] * B[K x N] -----------------------------------
// Register tiles of MR rows x NV vectors over the whole K; the sizes here are at most a few
// hundred, so no cache blocking is needed. Two structural shortcuts:
//   a_lower: A is lower triangular (A[m][k] = 0 for k > m), so row block m0 stops at k < m0+MR;
//   c_lower: only C[m][n] with n <= m is wanted, so row block m0 stops at the column tile that
//            holds column m0+MR-1 (the caller ignores, or clears, what lands above the diagonal).
// A rounded product the compiler may not fuse into the addition that consumes it (vector form).
template <int W>
DN_INLINE Vec<W> unfused(Vec<W> p) {
#if defined(__GNUC__) && (defined(__x86_64__) || defined(__i386__))
  __asm__("" : "+x"(p));
#else
  volatile Vec<W> opaque = p;
  p = opaque;
#endif
  return p;
}

// ScaleC: C <- (C * c_scale) + A B, the product rounded before the addition (as a separate
// scaling pass over C followed by the plain tile would round it).
template <int W, int MR, int NV, bool ScaleC = false>
DN_INLINE void gemm_tile(int K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                         int64_t ldc, float c_scale = 1.0f) {
  Vec<W> acc[MR][NV] = {};
  for (int k = 0; k < K; ++k) {
    Vec<W> b[NV];
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) b[v] = vec::load<W>(B + k * ldb + W * v);
#pragma GCC unroll 8
    for (int r = 0; r < MR; ++r) {
      const float a = A[r * lda + k];
#pragma GCC unroll 2
      for (int v = 0; v < NV; ++v) acc[r][v] += a * b[v];
    }
  }
#pragma GCC unroll 8
  for (int r = 0; r < MR; ++r)
#pragma GCC unroll 2
    for (int v = 0; v < NV; ++v) {
      Vec<W> c = vec::load<W>(C + r * ldc + W * v);
      if constexpr (ScaleC) c = unfused<W>(c * c_scale);
      vec::store<W>(C + r * ldc + W * v, c + acc[r][v]);
    }
}

template <int W, int MR>
DN_INLINE void gemm_acc(int M, int N, int K, const float* A, int64_t lda, const float* B,
                        int64_t ldb, float* C, int64_t ldc, bool a_lower = false,
                        bool c_lower = false) {
  for (int m0 = 0; m0 < M; m0 += MR) {
    const int mr = std::min(MR, M - m0);
    const int k_end = a_lower ? std::min(K, m0 + mr) : K;
    const int n_end = c_lower ? std::min(N, (m0 + mr + 2 * W - 1) / (2 * W) * (2 * W)) : N;
    const float* a = A + int64_t(m0) * lda;
    float* c = C + int64_t(m0) * ldc;
    const int n_vec = n_end - n_end % W;
    if (mr == MR) {
      int n0 = 0;
      for (; n0 + 2 * W <= n_vec; n0 += 2 * W)
        gemm_tile<W, MR, 2>(k_end, a, lda, B + n0, ldb, c + n0, ldc);
      if (n0 < n_vec) gemm_tile<W, MR, 1>(k_end, a, lda, B + n0, ldb, c + n0, ldc);
    } else {
      for (int r = 0; r < mr; ++r) {
        int n0 = 0;
        for (; n0 + 2 * W <= n_vec; n0 += 2 * W)
          gemm_tile<W, 1, 2>(k_end, a + r * lda, lda, B + n0, ldb, c + r * ldc + n0, ldc);
        if (n0 < n_vec)
          gemm_tile<W, 1, 1>(k_end, a + r * lda, lda, B + n0, ldb, c + r * ldc + n0, ldc);
      }
    }
    if (n_vec < n_end) {  // column tail narrower than a vector
      for (int r = 0; r < mr; ++r)
        for (int k = 0; k < k_end; ++k) {
          const float av = a[r * lda + k];
          const float* b = B + int64_t(k) * ldb;
          for (int n = n_vec; n < n_end; ++n) c[r * ldc + n] += av * b[n];
        }
    }
  }
}

// C <- c_scale C + A B with the same roundings as scale<W>(C, c_scale) followed by gemm_acc, in
// one pass over C where every tile is whole (else exactly those two steps).
template <int W, int MR>
DN_INLINE void gemm_scale_acc(int M, int N, int K, const float* A, int64_t lda, const float* B,
                              int64_t ldb, float* C, int64_t ldc, float c_scale) {
  if (M % MR != 0 || N % (2 * W) != 0) {
    for (int m = 0; m < M; ++m) scale<W>(C + int64_t(m) * ldc, c_scale, N);
    gemm_acc<W, MR>(M, N, K, A, lda, B, ldb, C, ldc);
    return;
  }
  for (int m0 = 0; m0 < M; m0 += MR)
    for (int n0 = 0; n0 < N; n0 += 2 * W)
      gemm_tile<W, MR, 2, true>(K, A + int64_t(m0) * lda, lda, B + n0, ldb,
                                C + int64_t(m0) * ldc + n0, ldc, c_scale);
}

inline float sigmoid_f(float x) { return 1.0f / (1.0f + std::exp(-x)); }
// ggml's softplus: log(1 + e^x) as written, not log1p (the roundings differ).
inline float softplus_f(float x) { return x > 20.0f ? x : std::log(1.0f + std::exp(x)); }

// ---- argument checks ------------------------------------------------------------------------
void check_shape(const DeltaNetShape& s) {
  if (s.n_k_heads <= 0 || s.n_v_heads <= 0 || s.head_k_dim <= 0 || s.head_v_dim <= 0)
    throw Error("delta net: head counts and head sizes must be positive (H_k=" +
                std::to_string(s.n_k_heads) + ", H_v=" + std::to_string(s.n_v_heads) + ", D_k=" +
                std::to_string(s.head_k_dim) + ", D_v=" + std::to_string(s.head_v_dim) + ")");
  if (s.n_v_heads % s.n_k_heads != 0)
    throw Error("delta net: value heads (" + std::to_string(s.n_v_heads) +
                ") must be a multiple of key heads (" + std::to_string(s.n_k_heads) + ")");
}

void check_io(const DeltaNetShape& s, const DeltaNetIO& io, const float* state) {
  check_shape(s);
  if (io.n_tokens < 0) throw Error("delta net: negative token count");
  if (io.n_tokens == 0) return;
  if (!io.q || !io.k || !io.v || !io.g || !io.beta || !io.out || !state)
    throw Error("delta net: missing input, output or state buffer");
  const int64_t qk = int64_t(s.n_k_heads) * s.head_k_dim;
  const int64_t vo = int64_t(s.n_v_heads) * s.head_v_dim;
  if (io.q_stride < qk || io.k_stride < qk || io.v_stride < vo || io.out_stride < vo ||
      io.g_stride < s.n_v_heads || io.beta_stride < s.n_v_heads)
    throw Error("delta net: a token row stride is shorter than the row it holds");
}

// ---- step (recurrent) form ------------------------------------------------------------------
// One token on one head, in a single pass over the state: row j of the stored matrix is column j
// of S, and everything the update needs for column j (its dot with k, its delta, its dot with q)
// depends on that row only.
template <int W>
DN_INLINE void step_head_token(float* M, const float* q, const float* k, const float* v, float g,
                               float beta, float* o, int dk, int dv) {
  const float decay = std::exp(g);
  // S *= e^g; delta = beta (v - S^T k); S += k delta^T; o = S^T q — in two passes over each row
  // (row j of the stored matrix is column j of S and needs nothing from the other rows).
  // kRows rows at a time: their reductions are independent chains, which hides their latency.
  constexpr int kRows = 2;
  int j = 0;
  for (; j + kRows <= dv; j += kRows) {
    float* rows[kRows];
    float dots[kRows], deltas[kRows];
    for (int r = 0; r < kRows; ++r) rows[r] = M + int64_t(j + r) * dk;
    scale_dot_rows<W, kRows>(rows, decay, k, dk, dots);
    for (int r = 0; r < kRows; ++r) deltas[r] = (v[j + r] - dots[r]) * beta;
    axpy_dot_rows<W, kRows>(rows, k, deltas, q, dk, o + j);
  }
  for (; j < dv; ++j) {
    float* rows[1] = {M + int64_t(j) * dk};
    float dot, delta;
    scale_dot_rows<W, 1>(rows, decay, k, dk, &dot);
    delta = (v[j] - dot) * beta;
    axpy_dot_rows<W, 1>(rows, k, &delta, q, dk, o + j);
  }
}

template <int W>
DN_INLINE void step_head_impl(const DeltaNetShape& shape, const DeltaNetIO& io, int h,
                              float* state) {
  const int dk = shape.head_k_dim, dv = shape.head_v_dim;
  const int hk = shape.k_head_of(h);
  float* M = state + int64_t(h) * dk * dv;
  for (int64_t t = 0; t < io.n_tokens; ++t) {
    step_head_token<W>(
        M, io.q + t * io.q_stride + int64_t(hk) * dk, io.k + t * io.k_stride + int64_t(hk) * dk,
        io.v + t * io.v_stride + int64_t(h) * dv, io.g[t * io.g_stride + h],
        io.beta[t * io.beta_stride + h], io.out + t * io.out_stride + int64_t(h) * dv, dk, dv);
  }
}

// ---- chunked form ---------------------------------------------------------------------------
// Within a chunk of L tokens, with G_t = g_0 + ... + g_t (cumulative log decay) and S0 the state
// at the chunk start, unrolling the recurrence gives
//   S_t   = e^{G_t} S0 + sum_{s<=t} e^{G_t-G_s} k_s delta_s^T
//   delta = T [beta V - diag(beta e^G) K S0],  T = (I + A)^{-1},
//           A[t][s] = beta_t e^{G_t-G_s} k_t.k_s  (s < t)
//   o_t   = e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t-G_s} (q_t.k_s) delta_s
//   S_L   = e^{G_{L-1}} S0 + sum_s e^{G_{L-1}-G_s} k_s delta_s^T
// (the UT transform of flash-linear-attention / llama.cpp's chunked graph). Per chunk and head
// that is: two L x L Gram matrices, the unit-triangular inverse T (L^3/6), and five products
// done by the register-tiled GEMM; S0 is kept as [D_k][D_v] (value index fastest) so every
// product streams rows.

// Largest |G| within a chunk for which the decays are factored as e^{G_t} * e^{-G_s}
// (e^60 ~ 1e26 and e^-60 ~ 1e-26 stay far from the float range limits, so the factored
// products lose nothing).
constexpr float kMaxFactoredDecay = 60.0f;

struct ChunkScratch {
  std::vector<float> S;   // D_k x D_v working state of each head the thread runs
  std::vector<float> KT;  // D_k x L: keys of the chunk (times e^{-G_s} when factored), transposed
  std::vector<float> Qg;  // L x D_k: e^{G_t} q_t
  std::vector<float> X;   // L x (D_k + D_v): [-beta e^{G_t} k_t | beta v_t]
  std::vector<float> Y;   // L x (D_k + D_v): T X = [-W | U], then [-W | delta]
  std::vector<float> QK;  // L x L: decayed q.k (lower with diagonal)
  std::vector<float> NA;  // L x L: -A (strictly lower)
  std::vector<float> T;   // L x L: (I + A)^{-1}
  std::vector<float> Dd;  // L x D_v: delta_s with its decay to the chunk end
  std::vector<float> G;   // L cumulative log decays

  // Grows only: the buffers live in thread_local storage and are reused across calls, so a
  // short prefill does not pay for fresh pages every time.
  void reserve(int dk, int dv, int chunk, int n_heads) {
    const size_t L = size_t(chunk);
    auto grow = [](std::vector<float>& v, size_t n) {
      if (v.size() < n) v.resize(n);
    };
    grow(S, size_t(dk) * dv * size_t(n_heads));
    grow(KT, size_t(dk) * L);
    grow(Qg, L * dk);
    grow(X, L * (dk + dv));
    grow(Y, L * (dk + dv));
    grow(QK, L * L);
    grow(NA, L * L);
    grow(T, L * L);
    grow(Dd, L * dv);
    grow(G, L);
  }
};

// The token rows of one head are far apart (a whole projected row, 16 KiB at qwen35moe's width,
// and the rows left the caches since the conv wrote them), a stride the hardware prefetchers
// do not follow: without help every row of q, k and v costs a cache miss when the chunk reads
// it, and every output row one when the chunk writes it. The next chunk's rows are requested
// (the output rows for writing) while the current one computes.
template <bool ForWrite = false>
DN_INLINE void prefetch_rows(const float* first, int64_t stride, int64_t n_rows, int row_floats) {
  constexpr int kLineFloats = 16;
  for (int64_t r = 0; r < n_rows; ++r)
    for (int i = 0; i < row_floats; i += kLineFloats)
      __builtin_prefetch(first + r * stride + i, ForWrite ? 1 : 0);
}
DN_INLINE void prefetch_chunk_rows(const DeltaNetIO& io, int hk, int h, int dk, int dv, int64_t t0,
                                   int chunk) {
  const int64_t n = std::min<int64_t>(chunk, io.n_tokens - t0);
  if (n <= 0) return;
  prefetch_rows(io.q + t0 * io.q_stride + int64_t(hk) * dk, io.q_stride, n, dk);
  prefetch_rows(io.k + t0 * io.k_stride + int64_t(hk) * dk, io.k_stride, n, dk);
  prefetch_rows(io.v + t0 * io.v_stride + int64_t(h) * dv, io.v_stride, n, dv);
  prefetch_rows<true>(io.out + t0 * io.out_stride + int64_t(h) * dv, io.out_stride, n, dv);
}

// One chunk [t0, t0+L) of one head, S its working state ([D_k][D_v]).
template <int W, int MR>
DN_INLINE void chunk_impl(const DeltaNetShape& shape, const DeltaNetIO& io, int h, int64_t t0,
                          int L, int chunk, float* S, ChunkScratch& w) {
  const int dk = shape.head_k_dim, dv = shape.head_v_dim, dx = dk + dv;
  const int hk = shape.k_head_of(h);
  float* G = w.G.data();
  float* KT = w.KT.data();
  float* Qg = w.Qg.data();
  float* X = w.X.data();
  float* Y = w.Y.data();
  float* QK = w.QK.data();
  float* NA = w.NA.data();
  float* T = w.T.data();
  float* Dd = w.Dd.data();

  {
    const float* q0 = io.q + t0 * io.q_stride + int64_t(hk) * dk;  // row t at q0 + t*q_stride
    const float* k0 = io.k + t0 * io.k_stride + int64_t(hk) * dk;
    prefetch_chunk_rows(io, hk, h, dk, dv, t0 + chunk, chunk);

    float gsum = 0.0f;
    for (int t = 0; t < L; ++t) {
      gsum += io.g[(t0 + t) * io.g_stride + h];
      G[t] = gsum;
    }
    // The decay between tokens s <= t is e^{G_t - G_s}. When the chunk's total decay is moderate
    // it factors as e^{G_t} * e^{-G_s}: the Gram products then come out decayed from the GEMM,
    // with L exponentials instead of L^2/2. Strong decay would overflow e^{-G_s}; then the
    // pairwise factors are applied after the products of the raw vectors.
    const auto [g_min, g_max] = std::minmax_element(G, G + L);
    const bool factored = *g_min >= -kMaxFactoredDecay && *g_max <= kMaxFactoredDecay;
    for (int t = 0; t < L; ++t) {
      const float* k = k0 + t * io.k_stride;
      const float* q = q0 + t * io.q_stride;
      const float* v = io.v + (t0 + t) * io.v_stride + int64_t(h) * dv;
      const float beta = io.beta[(t0 + t) * io.beta_stride + h];
      const float eg = std::exp(G[t]);
      const float col = factored ? std::exp(-G[t]) : 1.0f;
      for (int i = 0; i < dk; ++i) KT[int64_t(i) * L + t] = col * k[i];
      float* x = X + int64_t(t) * dx;
      scale_copy<W>(x, k, -beta * eg, dk);  // negated: T X then holds -W, and U - W S0 is one GEMM
      scale_copy<W>(x + dk, v, beta, dv);
      scale_copy<W>(Qg + int64_t(t) * dk, q, eg, dk);
    }

    // QK[t][s] = e^{G_t-G_s} q_t.k_s (s <= t);  NA[t][s] = -beta_t e^{G_t-G_s} k_t.k_s = -A (s < t)
    std::fill(QK, QK + L * L, 0.0f);
    std::fill(NA, NA + L * L, 0.0f);
    if (factored) {
      gemm_acc<W, MR>(L, L, dk, Qg, dk, KT, L, QK, L, false, true);
      gemm_acc<W, MR>(L, L, dk, X, dx, KT, L, NA, L, false, true);
    } else {
      gemm_acc<W, MR>(L, L, dk, q0, io.q_stride, KT, L, QK, L, false, true);
      gemm_acc<W, MR>(L, L, dk, k0, io.k_stride, KT, L, NA, L, false, true);
      for (int t = 0; t < L; ++t) {
        const float beta = io.beta[(t0 + t) * io.beta_stride + h];
        for (int s = 0; s < t; ++s) {
          const float decay = std::exp(G[t] - G[s]);
          QK[t * L + s] *= decay;
          NA[t * L + s] *= -beta * decay;
        }
      }
    }
    for (int t = 0; t < L; ++t) {  // causal masks (the GEMM fills whole tiles)
      std::fill(QK + t * L + t + 1, QK + (t + 1) * L, 0.0f);
      std::fill(NA + t * L + t, NA + (t + 1) * L, 0.0f);
    }
    // T = (I + A)^{-1} by forward substitution: row t = e_t - sum_{r<t} A[t][r] T[r].
    for (int t = 0; t < L; ++t) {
      float* Tt = T + t * L;
      std::fill(Tt, Tt + L, 0.0f);
      Tt[t] = 1.0f;
      for (int r = 0; r < t; ++r) axpy<W>(Tt, T + r * L, NA[t * L + r], r + 1);
    }
    // Y = [-W | U] = T [-beta e^G K | beta V], then U <- delta = U - W S0 in place.
    std::fill(Y, Y + int64_t(L) * dx, 0.0f);
    gemm_acc<W, MR>(L, dx, L, T, L, X, dx, Y, dx, true, false);
    float* delta = Y + dk;  // row t at delta + t*dx
    gemm_acc<W, MR>(L, dv, dk, Y, dx, S, dv, delta, dx);
    // o = diag(e^G) Q S0 + QK delta, straight into the output rows.
    float* out0 = io.out + t0 * io.out_stride + int64_t(h) * dv;
    for (int t = 0; t < L; ++t)
      std::fill(out0 + t * io.out_stride, out0 + t * io.out_stride + dv, 0.0f);
    gemm_acc<W, MR>(L, dv, dk, Qg, dk, S, dv, out0, io.out_stride);
    gemm_acc<W, MR>(L, dv, L, QK, L, delta, dx, out0, io.out_stride, true, false);
    // S = e^{G_last} S0 + sum_s e^{G_last - G_s} k_s delta_s^T, the e^{-G_s} part (when
    // factored) already in KT.
    const float g_last = G[L - 1];
    for (int s = 0; s < L; ++s) {
      const float d = factored ? std::exp(g_last) : std::exp(g_last - G[s]);
      scale_copy<W>(Dd + int64_t(s) * dv, delta + int64_t(s) * dx, d, dv);
    }
    gemm_scale_acc<W, MR>(dk, dv, L, KT, L, Dd, dv, S, dv, std::exp(g_last));
  }
}

// The heads heads[0..n_heads) over the whole sequence: chunks outermost, the heads inside, so
// the token rows a chunk reads and writes are this thread's whole contiguous span of heads (a
// few KiB of every row, which the hardware prefetchers follow) and a key head's q/k rows serve
// its value heads from cache. Each head's arithmetic is the same in any order.
template <int W, int MR>
DN_INLINE void chunked_heads_impl(const DeltaNetShape& shape, const DeltaNetIO& io,
                                  const int* heads, int n_heads, float* state, int chunk,
                                  ChunkScratch& w) {
  const int dk = shape.head_k_dim, dv = shape.head_v_dim;
  const int64_t state_floats = int64_t(dk) * dv;
  for (int i = 0; i < n_heads; ++i)  // stored [j][i] -> S [i][j]
    transpose(state + heads[i] * state_floats, dk, w.S.data() + i * state_floats, dv, dv, dk);
  for (int64_t t0 = 0; t0 < io.n_tokens; t0 += chunk) {
    const int L = int(std::min<int64_t>(chunk, io.n_tokens - t0));
    for (int i = 0; i < n_heads; ++i)
      chunk_impl<W, MR>(shape, io, heads[i], t0, L, chunk, w.S.data() + i * state_floats, w);
  }
  for (int i = 0; i < n_heads; ++i)
    transpose(w.S.data() + i * state_floats, dv, state + heads[i] * state_floats, dk, dk, dv);
}

// Strong decay (a large cumulative |g| within a chunk) drives e^{G} products far below the
// normal float range; x86 handles denormal operands in microcode, which made the chunked form
// 10-20x slower than the step form on such gates. Below 1e-38 the terms are already lost
// against the sums they enter, so the chunked form flushes them to zero (FTZ / DAZ) while it
// runs, restoring the caller's mode afterwards.
class DenormalsAsZero {
 public:
#if defined(__SSE2__)
  DenormalsAsZero() : saved_(_mm_getcsr()) { _mm_setcsr(saved_ | kFtzDaz); }
  ~DenormalsAsZero() { _mm_setcsr(saved_); }

 private:
  static constexpr unsigned kFtzDaz = 0x8040;  // MXCSR flush-to-zero | denormals-are-zero
  unsigned saved_;
#endif
};

// The entry points per instruction set: lanes W and GEMM tile rows MR, with 2*MR accumulators
// (8 of the 16 xmm / ymm registers for generic / AVX2, 16 of the 32 zmm ones for AVX-512).
#define DN_AVX2 __attribute__((target("avx2,fma")))
#define DN_AVX512 __attribute__((target("avx2,fma,avx512f")))

void step_head_generic(const DeltaNetShape& s, const DeltaNetIO& io, int h, float* st) {
  step_head_impl<4>(s, io, h, st);
}
DN_AVX2 void step_head_avx2(const DeltaNetShape& s, const DeltaNetIO& io, int h, float* st) {
  step_head_impl<8>(s, io, h, st);
}
DN_AVX512 void step_head_avx512(const DeltaNetShape& s, const DeltaNetIO& io, int h, float* st) {
  step_head_impl<16>(s, io, h, st);
}
void chunked_heads_generic(const DeltaNetShape& s, const DeltaNetIO& io, const int* heads, int n,
                           float* st, int L, ChunkScratch& w) {
  chunked_heads_impl<4, 4>(s, io, heads, n, st, L, w);
}
DN_AVX2 void chunked_heads_avx2(const DeltaNetShape& s, const DeltaNetIO& io, const int* heads,
                                int n, float* st, int L, ChunkScratch& w) {
  chunked_heads_impl<8, 4>(s, io, heads, n, st, L, w);
}
DN_AVX512 void chunked_heads_avx512(const DeltaNetShape& s, const DeltaNetIO& io, const int* heads,
                                    int n, float* st, int L, ChunkScratch& w) {
  chunked_heads_impl<16, 8>(s, io, heads, n, st, L, w);
}

// ---- sums of squares in double, several rows at once -------------------------------------------
// ggml's RMS_NORM and L2_NORM add the float squares of a row into one double, in index order:
// a chain of dependent additions. Rows are independent, so R chains advance together (each still
// in its own index order), which hides the addition latency without changing any sum.
template <int R>
DN_INLINE void sum_squares_rows(const float* const* rows, int64_t n, double* sums) {
  double acc[R] = {};
  for (int64_t d = 0; d < n; ++d)
#pragma GCC unroll 16
    for (int r = 0; r < R; ++r) acc[r] += double(rows[r][d] * rows[r][d]);
  for (int r = 0; r < R; ++r) sums[r] = acc[r];
}

// sums[r] = sum_d row_r[d]^2 for n_rows rows row_r = first + r * row_stride, 8 chains at a time.
DN_INLINE void sum_squares(const float* first, int64_t row_stride, int64_t n_rows, int64_t n,
                           double* sums) {
  constexpr int kChains = 8;
  const float* rows[kChains];
  int64_t r0 = 0;
  for (; r0 + kChains <= n_rows; r0 += kChains) {
    for (int r = 0; r < kChains; ++r) rows[r] = first + (r0 + r) * row_stride;
    sum_squares_rows<kChains>(rows, n, sums + r0);
  }
  for (; r0 < n_rows; ++r0) {
    rows[0] = first + r0 * row_stride;
    sum_squares_rows<1>(rows, n, sums + r0);
  }
}

// ---- gated RMSNorm ---------------------------------------------------------------------------
constexpr int64_t kMaxNormHeads = 1024;  // per token row (heads of one token)

struct GatedNormArgs {
  const float* o;
  int64_t o_stride;
  const float* z;
  int64_t z_stride;
  const float* weight;
  float* y;
  int64_t y_stride;
  int64_t n_heads, head_dim;
  float eps;
};

template <int W>
DN_INLINE void gated_rms_norm_impl(const GatedNormArgs& a, int64_t t0, int64_t t1) {
  const int64_t head_dim = a.head_dim;
  double sums[kMaxNormHeads];
  for (int64_t t = t0; t < t1; ++t) {
    const float* o = a.o + t * a.o_stride;
    const float* z = a.z + t * a.z_stride;
    float* y = a.y + t * a.y_stride;
    // As ggml: sum of squares in double, then the rounded scale; RMS_NORM, MUL by the weight
    // and MUL by silu(z) are separate roundings there too.
    sum_squares(o, head_dim, a.n_heads, head_dim, sums);
    for (int64_t h = 0; h < a.n_heads; ++h) {
      const float* oh = o + h * head_dim;
      const float* zh = z + h * head_dim;
      float* yh = y + h * head_dim;
      const float mean = float(sums[h] / double(head_dim));
      const float s = 1.0f / std::sqrt(mean + a.eps);
      // silu(z) as ggml_silu computes it on rows of head_dim: ggml_v_silu on whole vector groups,
      // the scalar formula after.
      const int64_t n_vec = head_dim - head_dim % kGgmlLanes<W>;
      int64_t d = 0;
      for (; d < n_vec; d += W) {
        const Vec<W> on = vec::load<W>(oh + d) * s;
        const Vec<W> ow = on * vec::load<W>(a.weight + d);
        vec::store<W>(yh + d, ow * ggml_silu_vec<W>(vec::load<W>(zh + d)));
      }
      for (; d < head_dim; ++d) yh[d] = ((oh[d] * s) * a.weight[d]) * ggml_silu_scalar(zh[d]);
    }
  }
}

// ---- q/k L2 normalisation --------------------------------------------------------------------
struct NormalizeQKArgs {
  float* q;
  int64_t q_stride;
  float* k;
  int64_t k_stride;
  int n_heads, head_dim;
  float eps, q_scale;
};

// y = x * (1 / max(sqrt(float(sum)), eps)) [* extra, a separate rounding], as l2_norm.
template <int W>
DN_INLINE void l2_scale_row(float* x, int64_t n, double sum, float eps, bool scaled, float extra) {
  const float s = 1.0f / std::fmax(std::sqrt(float(sum)), eps);
  int64_t i = 0;
  if (scaled) {
    for (; i + W <= n; i += W) vec::store<W>(x + i, (vec::load<W>(x + i) * s) * extra);
    for (; i < n; ++i) x[i] = (x[i] * s) * extra;
  } else {
    for (; i + W <= n; i += W) vec::store<W>(x + i, vec::load<W>(x + i) * s);
    for (; i < n; ++i) x[i] = x[i] * s;
  }
}

template <int W>
DN_INLINE void normalize_qk_impl(const NormalizeQKArgs& a, int64_t t0, int64_t t1) {
  double sums[kMaxNormHeads];
  for (int64_t t = t0; t < t1; ++t) {
    float* q = a.q + t * a.q_stride;
    float* k = a.k + t * a.k_stride;
    sum_squares(q, a.head_dim, a.n_heads, a.head_dim, sums);
    for (int h = 0; h < a.n_heads; ++h)
      l2_scale_row<W>(q + int64_t(h) * a.head_dim, a.head_dim, sums[h], a.eps, true, a.q_scale);
    sum_squares(k, a.head_dim, a.n_heads, a.head_dim, sums);
    for (int h = 0; h < a.n_heads; ++h)
      l2_scale_row<W>(k + int64_t(h) * a.head_dim, a.head_dim, sums[h], a.eps, false, 1.0f);
  }
}

// ---- conv1d ----------------------------------------------------------------------------------
constexpr int kMaxConvKernel = 64;
constexpr int64_t kConvTokensPerTask = 8;
constexpr int64_t kConvInPlaceMaxTokens = 2;  // decoding: no layout pass (see conv_in_place_impl)

// The conv's inputs laid out for a token-major walk: the weights tap-major (row i = tap i over
// all channels) and the state as d_conv-1 rows over channels, oldest first, so every window
// row — from the state or from x — is a contiguous row of channels.
struct ConvArgs {
  int64_t channels;  // the whole row: ggml's SiLU groups are counted from channel 0
  const float* x;
  int64_t x_stride;
  int64_t n_tokens;
  int d_conv;
  const float* taps;     // d_conv x channels
  const float* history;  // (d_conv-1) x channels
  float* out;
  int64_t out_stride;
  // When set, each token's q and k channels (the first 2 H_k D_k of its output row) are then
  // L2-normalised as delta_net_normalize_qk does, while the row is still in L1.
  const NormalizeQKArgs* normalize;

  // Row p of [history | tokens]: the window of token t is rows t .. t+d_conv-1.
  const float* window_row(int64_t p) const {
    const int64_t ns = d_conv - 1;
    return p < ns ? history + p * channels : x + (p - ns) * x_stride;
  }
};

// Tokens [t0, t1), each over all channels: contiguous rows in, contiguous rows out (a walk down
// channel blocks instead would jump a whole row between tokens, which the prefetchers do not
// follow). Taps are summed oldest first, as ggml_ssm_conv's loop `sumf += s * c` compiles: the
// AVX-512 reference build fused it into one multiply-add chain; the AVX2 one (GCC tuned for Zen,
// which keeps loop-carried multiply-add chains unfused) rounds every product before adding it —
// measured on the fixtures (fused there: qwen35-micro drifts from llama.cpp at a few positions of
// every prompt; unfused: bit-exact but for the 480-token prompt's last positions). The AVX2 and
// scalar levels follow the AVX2 build (kGgmlLanes<W> == 8), the AVX-512 level the AVX-512 one.
// SiLU as ggml_vec_silu_f32 on the conv output row (ggml_silu over C channels per token):
// ggml_v_silu on whole vector groups of channels (16 or 8, kGgmlLanes), the scalar formula (libm
// expf) on the rest. Every token takes the same vector path whether it reads the state or not,
// which keeps results independent of how a sequence is split into calls.
template <int W>
DN_INLINE void conv_tokens_impl(const ConvArgs& a, int64_t t0, int64_t t1) {
  const int d_conv = a.d_conv;
  const int64_t nc = a.channels;
  const float* rows[kMaxConvKernel];
  for (int64_t t = t0; t < t1; ++t) {
    for (int i = 0; i < d_conv; ++i) rows[i] = a.window_row(t + i);
    float* o = a.out + t * a.out_stride;
    int64_t c = 0;
    for (; c + W <= nc; c += W) {
      Vec<W> acc = {};
      for (int i = 0; i < d_conv; ++i) {
        const Vec<W> p = vec::load<W>(rows[i] + c) * vec::load<W>(a.taps + i * nc + c);
        if constexpr (kGgmlLanes<W> == 16) {
          acc += p;  // contracted: one fused chain, as the AVX-512 build compiles ggml_ssm_conv
        } else {
          acc += unfused<W>(p);  // the AVX2 build rounds every product (see above)
        }
      }
      vec::store<W>(o + c, acc);
    }
    if (c < nc) {  // channel tail through a zero-padded vector
      float xb[W], wb[W];
      Vec<W> acc = {};
      for (int i = 0; i < d_conv; ++i) {
        std::fill(xb, xb + W, 0.0f);
        std::fill(wb, wb + W, 0.0f);
        std::memcpy(xb, rows[i] + c, sizeof(float) * (nc - c));
        std::memcpy(wb, a.taps + i * nc + c, sizeof(float) * (nc - c));
        const Vec<W> p = vec::load<W>(xb) * vec::load<W>(wb);
        if constexpr (kGgmlLanes<W> == 16) {
          acc += p;
        } else {
          acc += unfused<W>(p);
        }
      }
      vec::store<W>(xb, acc);
      std::memcpy(o + c, xb, sizeof(float) * (nc - c));
    }
    ggml_silu_span<W>(o, o, 0, nc, nc - nc % kGgmlLanes<W>);
    if (a.normalize) normalize_qk_impl<W>(*a.normalize, t, t + 1);
  }
}

// One or two tokens (decoding): laying the weights and state out would cost more than the
// conv itself, so each channel reads its taps and state in place. Per element the same
// operations as conv_tokens_impl: from zero, oldest tap first, a fused multiply-add chain (the
// AVX-512 entry) or rounded products and sums (the AVX2 and generic entries); then the same SiLU.
template <int W>
DN_INLINE void conv_in_place_impl(const float* x, int64_t x_stride, int64_t n_tokens,
                                  int64_t channels, const float* weight, int d_conv,
                                  const float* conv_state, float* out, int64_t out_stride) {
  const int ns = d_conv - 1;
  for (int64_t t = 0; t < n_tokens; ++t) {
    float* o = out + t * out_stride;
    for (int64_t c = 0; c < channels; ++c) {
      const float* w = weight + c * d_conv;
      float acc = 0.0f;
      for (int i = 0; i < d_conv; ++i) {
        const int64_t p = t + i;
        const float v = p < ns ? conv_state[c * ns + p] : x[(p - ns) * x_stride + c];
        if constexpr (kGgmlLanes<W> == 16)
          acc = std::fma(v, w[i], acc);
        else
          acc = acc + unfused_product(v, w[i]);
      }
      o[c] = acc;
    }
    ggml_silu_span<W>(o, o, 0, channels, channels - channels % kGgmlLanes<W>);
  }
}

void conv_tokens_generic(const ConvArgs& a, int64_t t0, int64_t t1) {
  conv_tokens_impl<4>(a, t0, t1);
}
DN_AVX2 void conv_tokens_avx2(const ConvArgs& a, int64_t t0, int64_t t1) {
  conv_tokens_impl<8>(a, t0, t1);
}
DN_AVX512 void conv_tokens_avx512(const ConvArgs& a, int64_t t0, int64_t t1) {
  conv_tokens_impl<16>(a, t0, t1);
}
void conv_in_place_generic(const float* x, int64_t xs, int64_t n, int64_t ch, const float* w,
                           int d, const float* st, float* o, int64_t os) {
  conv_in_place_impl<4>(x, xs, n, ch, w, d, st, o, os);
}
DN_AVX2 void conv_in_place_avx2(const float* x, int64_t xs, int64_t n, int64_t ch, const float* w,
                                int d, const float* st, float* o, int64_t os) {
  conv_in_place_impl<8>(x, xs, n, ch, w, d, st, o, os);
}
DN_AVX512 void conv_in_place_avx512(const float* x, int64_t xs, int64_t n, int64_t ch,
                                    const float* w, int d, const float* st, float* o,
                                    int64_t os) {
  conv_in_place_impl<16>(x, xs, n, ch, w, d, st, o, os);
}
void gated_rms_norm_generic(const GatedNormArgs& a, int64_t t0, int64_t t1) {
  gated_rms_norm_impl<4>(a, t0, t1);
}
DN_AVX2 void gated_rms_norm_avx2(const GatedNormArgs& a, int64_t t0, int64_t t1) {
  gated_rms_norm_impl<8>(a, t0, t1);
}
DN_AVX512 void gated_rms_norm_avx512(const GatedNormArgs& a, int64_t t0, int64_t t1) {
  gated_rms_norm_impl<16>(a, t0, t1);
}
void gated_rms_norm_tokens(const GatedNormArgs& a, int64_t t0, int64_t t1) {
  const CpuLevel level = active_cpu_level();
  if (level >= CpuLevel::Avx512)
    gated_rms_norm_avx512(a, t0, t1);
  else if (level >= CpuLevel::Avx2)
    gated_rms_norm_avx2(a, t0, t1);
  else
    gated_rms_norm_generic(a, t0, t1);
}
void normalize_qk_generic(const NormalizeQKArgs& a, int64_t t0, int64_t t1) {
  normalize_qk_impl<4>(a, t0, t1);
}
DN_AVX2 void normalize_qk_avx2(const NormalizeQKArgs& a, int64_t t0, int64_t t1) {
  normalize_qk_impl<8>(a, t0, t1);
}
DN_AVX512 void normalize_qk_avx512(const NormalizeQKArgs& a, int64_t t0, int64_t t1) {
  normalize_qk_impl<16>(a, t0, t1);
}
void normalize_qk_tokens(const NormalizeQKArgs& a, int64_t t0, int64_t t1) {
  const CpuLevel level = active_cpu_level();
  if (level >= CpuLevel::Avx512)
    normalize_qk_avx512(a, t0, t1);
  else if (level >= CpuLevel::Avx2)
    normalize_qk_avx2(a, t0, t1);
  else
    normalize_qk_generic(a, t0, t1);
}

// Per-token row work is split across the pool only when there is enough of it to pay for a
// dispatch (a decode token runs on the caller's thread).
constexpr int64_t kRowsPerTask = 16;

}  // namespace

namespace {
NormalizeQKArgs normalize_qk_args(float* q, int64_t q_stride, float* k, int64_t k_stride,
                                  int64_t n_tokens, int n_k_heads, int head_k_dim, float eps) {
  if (n_k_heads <= 0 || head_k_dim <= 0 || n_k_heads > kMaxNormHeads)
    throw Error("delta net: bad key head shape");
  const int64_t width = int64_t(n_k_heads) * head_k_dim;
  if (n_tokens > 0 && (q_stride < width || k_stride < width))
    throw Error("delta net: q/k row stride shorter than H_k*D_k");
  const float q_scale = 1.0f / std::sqrt(float(head_k_dim));
  return NormalizeQKArgs{q, q_stride, k, k_stride, n_k_heads, head_k_dim, eps, q_scale};
}

void conv1d_silu(const float* x, int64_t x_stride, int64_t n_tokens, int64_t channels,
                 const float* weight, int d_conv, float* conv_state, float* out,
                 int64_t out_stride, const NormalizeQKArgs* normalize, ThreadPool& pool) {
  if (d_conv < 1 || d_conv > kMaxConvKernel)
    throw Error("ssm conv: kernel size " + std::to_string(d_conv) + " outside [1, " +
                std::to_string(kMaxConvKernel) + "]");
  if (channels <= 0) throw Error("ssm conv: channel count must be positive");
  if (n_tokens < 0) throw Error("ssm conv: negative token count");
  if (n_tokens == 0) return;
  if (!x || !weight || !out || (d_conv > 1 && !conv_state))
    throw Error("ssm conv: missing input, weight, state or output buffer");
  if (x_stride < channels || out_stride < channels)
    throw Error("ssm conv: a token row stride is shorter than the channel count");
  const int ns = d_conv - 1;
  const CpuLevel level = active_cpu_level();
  if (n_tokens <= kConvInPlaceMaxTokens) {
    if (level >= CpuLevel::Avx512)
      conv_in_place_avx512(x, x_stride, n_tokens, channels, weight, d_conv, conv_state, out,
                           out_stride);
    else if (level >= CpuLevel::Avx2)
      conv_in_place_avx2(x, x_stride, n_tokens, channels, weight, d_conv, conv_state, out,
                         out_stride);
    else
      conv_in_place_generic(x, x_stride, n_tokens, channels, weight, d_conv, conv_state, out,
                            out_stride);
    if (normalize) normalize_qk_tokens(*normalize, 0, n_tokens);
    // New state: the last ns raw inputs, shifted in per channel (oldest first).
    for (int64_t c = 0; c < channels; ++c) {
      float* st = conv_state + c * ns;
      for (int p = 0; p < ns; ++p) {
        const int64_t src = n_tokens + p;  // window row
        st[p] = src < ns ? st[src] : x[(src - ns) * x_stride + c];
      }
    }
    return;
  }
  // Weights and state as rows over channels (grow-only scratch of the calling thread).
  thread_local std::vector<float> layout;
  if (layout.size() < size_t(2 * d_conv - 1) * channels)
    layout.resize(size_t(2 * d_conv - 1) * channels);
  float* taps = layout.data();
  float* history = taps + int64_t(d_conv) * channels;
  for (int64_t c = 0; c < channels; ++c)
    for (int i = 0; i < d_conv; ++i) taps[i * channels + c] = weight[c * d_conv + i];
  for (int64_t c = 0; c < channels; ++c)
    for (int p = 0; p < ns; ++p) history[p * channels + c] = conv_state[c * ns + p];
  const ConvArgs args{channels, x, x_stride, n_tokens, d_conv,   taps,
                      history,  out, out_stride, normalize};
  auto run_tokens = [&](int64_t t0, int64_t t1) {
    if (level >= CpuLevel::Avx512)
      conv_tokens_avx512(args, t0, t1);
    else if (level >= CpuLevel::Avx2)
      conv_tokens_avx2(args, t0, t1);
    else
      conv_tokens_generic(args, t0, t1);
  };
  if (n_tokens <= kConvTokensPerTask)
    run_tokens(0, n_tokens);
  else
    pool.parallel_for(n_tokens, run_tokens, kConvTokensPerTask);
  // New state: window rows n_tokens .. n_tokens+ns-1 (the last ns raw inputs).
  for (int p = 0; p < ns; ++p) {
    const float* src = args.window_row(n_tokens + p);
    for (int64_t c = 0; c < channels; ++c) conv_state[c * ns + p] = src[c];
  }
}

}  // namespace

void causal_conv1d_silu(const float* x, int64_t x_stride, int64_t n_tokens, int64_t channels,
                        const float* weight, int d_conv, float* conv_state, float* out,
                        int64_t out_stride, ThreadPool& pool) {
  conv1d_silu(x, x_stride, n_tokens, channels, weight, d_conv, conv_state, out, out_stride,
              nullptr, pool);
}

void causal_conv1d_silu_normalize_qk(const float* x, int64_t x_stride, int64_t n_tokens,
                                     int64_t channels, const float* weight, int d_conv,
                                     float* conv_state, float* out, int64_t out_stride,
                                     int n_k_heads, int head_k_dim, float eps, ThreadPool& pool) {
  const int64_t width = int64_t(n_k_heads) * head_k_dim;
  if (n_k_heads > 0 && head_k_dim > 0 && 2 * width > channels)
    throw Error("ssm conv: q and k (2 H_k D_k channels) do not fit in the conv channels");
  const NormalizeQKArgs normalize = normalize_qk_args(out, out_stride, out + width, out_stride,
                                                      n_tokens, n_k_heads, head_k_dim, eps);
  conv1d_silu(x, x_stride, n_tokens, channels, weight, d_conv, conv_state, out, out_stride,
              &normalize, pool);
}

void l2_norm(const float* x, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  const float s = 1.0f / std::fmax(std::sqrt(float(sum)), eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

void delta_net_normalize_qk(float* q, int64_t q_stride, float* k, int64_t k_stride,
                            int64_t n_tokens, int n_k_heads, int head_k_dim, float eps) {
  const NormalizeQKArgs a =
      normalize_qk_args(q, q_stride, k, k_stride, n_tokens, n_k_heads, head_k_dim, eps);
  if (n_tokens > 0) normalize_qk_tokens(a, 0, n_tokens);
}

void delta_net_normalize_qk(float* q, int64_t q_stride, float* k, int64_t k_stride,
                            int64_t n_tokens, int n_k_heads, int head_k_dim, float eps,
                            ThreadPool& pool) {
  const NormalizeQKArgs a =
      normalize_qk_args(q, q_stride, k, k_stride, n_tokens, n_k_heads, head_k_dim, eps);
  if (n_tokens <= kRowsPerTask) {
    if (n_tokens > 0) normalize_qk_tokens(a, 0, n_tokens);
    return;
  }
  pool.parallel_for(
      n_tokens, [&](int64_t t0, int64_t t1) { normalize_qk_tokens(a, t0, t1); }, kRowsPerTask);
}

void delta_net_gates(const float* beta_logit, const float* alpha, const float* dt_bias,
                     const float* ssm_a, int n_v_heads, float* beta, float* g) {
  for (int h = 0; h < n_v_heads; ++h) {
    beta[h] = sigmoid_f(beta_logit[h]);
    g[h] = softplus_f(alpha[h] + dt_bias[h]) * ssm_a[h];
  }
}

void gated_delta_rule_step(const DeltaNetShape& shape, const DeltaNetIO& io, float* state,
                           ThreadPool& pool) {
  check_io(shape, io, state);
  if (io.n_tokens == 0) return;
  const CpuLevel level = active_cpu_level();
  pool.run([&](int ith, int nth) {
    for (int h = ith; h < shape.n_v_heads; h += nth) {
      if (level >= CpuLevel::Avx512)
        step_head_avx512(shape, io, h, state);
      else if (level >= CpuLevel::Avx2)
        step_head_avx2(shape, io, h, state);
      else
        step_head_generic(shape, io, h, state);
    }
  });
}

void gated_delta_rule_chunked(const DeltaNetShape& shape, const DeltaNetIO& io, float* state,
                              ThreadPool& pool, int chunk_len) {
  check_io(shape, io, state);
  if (chunk_len < 1 || chunk_len > kDeltaNetMaxChunk)
    throw Error("delta net: chunk length " + std::to_string(chunk_len) + " outside [1, " +
                std::to_string(kDeltaNetMaxChunk) + "]");
  if (io.n_tokens == 0) return;
  const CpuLevel level = active_cpu_level();
  pool.run([&](int ith, int nth) {
    // A contiguous span of heads per thread (sizes differ by at most one).
    const int h0 = int(int64_t(shape.n_v_heads) * ith / nth);
    const int h1 = int(int64_t(shape.n_v_heads) * (ith + 1) / nth);
    if (h0 >= h1) return;
    const DenormalsAsZero no_denormals;
    thread_local ChunkScratch scratch;
    scratch.reserve(shape.head_k_dim, shape.head_v_dim, chunk_len, h1 - h0);
    std::vector<int> heads(size_t(h1 - h0));
    for (int h = h0; h < h1; ++h) heads[size_t(h - h0)] = h;
    const int n = h1 - h0;
    if (level >= CpuLevel::Avx512)
      chunked_heads_avx512(shape, io, heads.data(), n, state, chunk_len, scratch);
    else if (level >= CpuLevel::Avx2)
      chunked_heads_avx2(shape, io, heads.data(), n, state, chunk_len, scratch);
    else
      chunked_heads_generic(shape, io, heads.data(), n, state, chunk_len, scratch);
  });
}

void gated_delta_rule(const DeltaNetShape& shape, const DeltaNetIO& io, float* state,
                      ThreadPool& pool) {
  // llama.cpp's CPU backend runs the fused GATED_DELTA_NET op token by token for prompts as well
  // as for decoding; only the step form rounds as it does (the chunked form differs in the last
  // bits, which the fidelity fixtures resolve). Long runs of one sequence take the chunked form,
  // about twice as fast per layer from a few dozen tokens on (see kDeltaNetChunkedMinTokens).
  // Batch-invariant numerics keep the step form: the chunked form rounds by where its chunks fall
  // in the micro-batch, so a prefix evaluated in another split (a cached one) would differ.
  if (io.n_tokens >= kDeltaNetChunkedMinTokens && !batch_invariant()) {
    gated_delta_rule_chunked(shape, io, state, pool, kDeltaNetChunk);
  } else {
    gated_delta_rule_step(shape, io, state, pool);
  }
}

void gated_rms_norm(const float* o, const float* z, const float* weight, float* y, int64_t n_heads,
                    int64_t head_dim, float eps) {
  if (n_heads > kMaxNormHeads) throw Error("gated norm: more heads per token than supported");
  const GatedNormArgs a{o, 0, z, 0, weight, y, 0, n_heads, head_dim, eps};
  gated_rms_norm_tokens(a, 0, 1);
}

void gated_rms_norm_rows(const float* o, int64_t o_stride, const float* z, int64_t z_stride,
                         const float* weight, float* y, int64_t y_stride, int64_t n_tokens,
                         int64_t n_heads, int64_t head_dim, float eps, ThreadPool& pool) {
  if (n_heads > kMaxNormHeads) throw Error("gated norm: more heads per token than supported");
  const int64_t width = n_heads * head_dim;
  if (n_tokens > 1 && (o_stride < width || z_stride < width || y_stride < width))
    throw Error("gated norm: a token row stride is shorter than n_heads*head_dim");
  const GatedNormArgs a{o, o_stride, z, z_stride, weight, y, y_stride, n_heads, head_dim, eps};
  if (n_tokens <= kRowsPerTask) {
    if (n_tokens > 0) gated_rms_norm_tokens(a, 0, n_tokens);
    return;
  }
  pool.parallel_for(
      n_tokens, [&](int64_t t0, int64_t t1) { gated_rms_norm_tokens(a, t0, t1); }, kRowsPerTask);
}

}  // namespace agentkv
