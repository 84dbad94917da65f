#include "kernels/delta_net.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "core/error.h"

// The 8-lane vector type below never crosses a non-inlined function boundary, so the ABI note
// GCC emits for it (without AVX enabled) does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace agentkv {
namespace {

// ---- small f32 vector helpers -------------------------------------------------------------
// GCC vector extensions give 8-lane code on any x86-64 (two SSE ops per lane group on the
// baseline target) without relying on the auto-vectoriser, which -O2 keeps very conservative.
typedef float f32x8 __attribute__((vector_size(32)));

inline f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
inline void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof(v)); }
inline f32x8 splat8(float x) { return f32x8{x, x, x, x, x, x, x, x}; }
inline float hsum8(f32x8 v) {
  return ((v[0] + v[4]) + (v[1] + v[5])) + ((v[2] + v[6]) + (v[3] + v[7]));
}

inline float dot(const float* a, const float* b, int n) {
  f32x8 acc0 = {}, acc1 = {};
  int i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 += load8(a + i) * load8(b + i);
    acc1 += load8(a + i + 8) * load8(b + i + 8);
  }
  for (; i + 8 <= n; i += 8) acc0 += load8(a + i) * load8(b + i);
  float s = hsum8(acc0 + acc1);
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += a * x
inline void axpy(float* y, const float* x, float a, int n) {
  const f32x8 va = splat8(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) store8(y + i, load8(y + i) + va * load8(x + i));
  for (; i < n; ++i) y[i] += a * x[i];
}

inline void scale(float* y, float a, int n) {
  const f32x8 va = splat8(a);
  int i = 0;
  for (; i + 8 <= n; i += 8) store8(y + i, load8(y + i) * va);
  for (; i < n; ++i) y[i] *= a;
}

inline float silu_f(float x) { return x / (1.0f + std::exp(-x)); }
inline float sigmoid_f(float x) { return 1.0f / (1.0f + std::exp(-x)); }
inline float softplus_f(float x) { return x > 20.0f ? x : std::log1p(std::exp(x)); }

// ---- small row-major GEMM: C[M x N] += A[M x K] * B[K x N] -----------------------------------
// A 4 x 16 register tile (8 vector accumulators) over the full K; edges fall back to narrower
// tiles. Sizes here are at most a few hundred, so no cache blocking is needed.
template <int MR>
inline void gemm_tile16(int K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
                        int64_t ldc) {
  f32x8 acc[MR][2] = {};
  for (int k = 0; k < K; ++k) {
    const f32x8 b0 = load8(B + k * ldb);
    const f32x8 b1 = load8(B + k * ldb + 8);
    for (int r = 0; r < MR; ++r) {
      const f32x8 a = splat8(A[r * lda + k]);
      acc[r][0] += a * b0;
      acc[r][1] += a * b1;
    }
  }
  for (int r = 0; r < MR; ++r) {
    store8(C + r * ldc, load8(C + r * ldc) + acc[r][0]);
    store8(C + r * ldc + 8, load8(C + r * ldc + 8) + acc[r][1]);
  }
}

void gemm_acc(int M, int N, int K, const float* A, int64_t lda, const float* B, int64_t ldb,
              float* C, int64_t ldc) {
  const int n16 = N - N % 16;
  for (int n0 = 0; n0 < n16; n0 += 16) {
    int m0 = 0;
    for (; m0 + 4 <= M; m0 += 4)
      gemm_tile16<4>(K, A + m0 * lda, lda, B + n0, ldb, C + m0 * ldc + n0, ldc);
    for (; m0 < M; ++m0) gemm_tile16<1>(K, A + m0 * lda, lda, B + n0, ldb, C + m0 * ldc + n0, ldc);
  }
  if (n16 < N) {  // column tail: plain axpy rows
    for (int m = 0; m < M; ++m) {
      float* c = C + m * ldc + n16;
      for (int k = 0; k < K; ++k) {
        const float a = A[m * lda + k];
        const float* b = B + k * ldb + n16;
        for (int n = 0; n < N - n16; ++n) c[n] += a * b[n];
      }
    }
  }
}

// ---- argument checks ------------------------------------------------------------------------
void check_shape(const DeltaNetShape& s) {
  if (s.n_k_heads <= 0 || s.n_v_heads <= 0 || s.head_k_dim <= 0 || s.head_v_dim <= 0)
    throw Error("delta net: head counts and head sizes must be positive (H_k=" +
                std::to_string(s.n_k_heads) + ", H_v=" + std::to_string(s.n_v_heads) +
                ", D_k=" + std::to_string(s.head_k_dim) + ", D_v=" + std::to_string(s.head_v_dim) +
                ")");
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
void step_head_token(float* M, const float* q, const float* k, const float* v, float g, float beta,
                     float* o, int dk, int dv) {
  const float decay = std::exp(g);
  for (int j = 0; j < dv; ++j) {
    float* row = M + int64_t(j) * dk;
    scale(row, decay, dk);
    const float delta = (v[j] - dot(row, k, dk)) * beta;
    axpy(row, k, delta, dk);
    o[j] = dot(row, q, dk);
  }
}

// ---- chunked form ---------------------------------------------------------------------------
// Within a chunk of L tokens, with G_t = g_0 + ... + g_t (cumulative log decay) and S0 the state
// at the chunk start, unrolling the recurrence gives
//   S_t   = e^{G_t} S0 + sum_{s<=t} e^{G_t-G_s} k_s delta_s^T
//   delta = (I + A)^{-1} [beta V - diag(beta e^G) K S0],   A[t][s] = beta_t e^{G_t-G_s} k_t.k_s (s<t)
//   o_t   = e^{G_t} S0^T q_t + sum_{s<=t} e^{G_t-G_s} (q_t.k_s) delta_s
//   S_L   = e^{G_L-1} S0 + sum_s e^{G_{L-1}-G_s} k_s delta_s^T
// The triangular solve is a forward substitution applied to U = beta V and W = beta e^G K, so
// delta = U' - W' S0; the rest are products with S0 (kept as [D_k][D_v], value index fastest).
// Every exponent is <= 0, so nothing overflows.
struct ChunkScratch {
  std::vector<float> S;     // D_k x D_v working state
  std::vector<float> K;     // L x D_k keys of the chunk
  std::vector<float> P;     // 2L x D_k: rows [0,L) = W, rows [L,2L) = e^{G_t} q_t
  std::vector<float> U;     // L x D_v: beta v, then delta
  std::vector<float> R;     // 2L x D_v: P * S0
  std::vector<float> A;     // L x L decayed beta k.k (strictly lower)
  std::vector<float> QK;    // L x L decayed q.k (lower, with diagonal)
  std::vector<float> KdT;   // D_k x L: e^{G_{L-1}-G_s} k_s, transposed
  std::vector<float> G;     // L cumulative log decays

  void reserve(int dk, int dv) {
    const int L = kDeltaNetChunk;
    S.resize(size_t(dk) * dv);
    K.resize(size_t(L) * dk);
    P.resize(size_t(2 * L) * dk);
    U.resize(size_t(L) * dv);
    R.resize(size_t(2 * L) * dv);
    A.resize(size_t(L) * L);
    QK.resize(size_t(L) * L);
    KdT.resize(size_t(dk) * L);
    G.resize(L);
  }
};

void chunked_head(const DeltaNetShape& shape, const DeltaNetIO& io, int h, float* state,
                  ChunkScratch& w) {
  const int dk = shape.head_k_dim, dv = shape.head_v_dim;
  const int hk = shape.k_head_of(h);
  float* stored = state + int64_t(h) * dk * dv;
  float* S = w.S.data();
  for (int j = 0; j < dv; ++j)
    for (int i = 0; i < dk; ++i) S[int64_t(i) * dv + j] = stored[int64_t(j) * dk + i];

  for (int64_t t0 = 0; t0 < io.n_tokens; t0 += kDeltaNetChunk) {
    const int L = int(std::min<int64_t>(kDeltaNetChunk, io.n_tokens - t0));
    float* G = w.G.data();
    float* K = w.K.data();
    float* W = w.P.data();
    float* Qg = w.P.data() + int64_t(L) * dk;
    float* U = w.U.data();
    float* A = w.A.data();
    float* QK = w.QK.data();

    float gsum = 0.0f;
    for (int t = 0; t < L; ++t) {
      gsum += io.g[(t0 + t) * io.g_stride + h];
      G[t] = gsum;
    }
    for (int t = 0; t < L; ++t) {
      const float* k = io.k + (t0 + t) * io.k_stride + int64_t(hk) * dk;
      const float* q = io.q + (t0 + t) * io.q_stride + int64_t(hk) * dk;
      const float* v = io.v + (t0 + t) * io.v_stride + int64_t(h) * dv;
      const float beta = io.beta[(t0 + t) * io.beta_stride + h];
      const float eg = std::exp(G[t]);
      float* kr = K + int64_t(t) * dk;
      std::memcpy(kr, k, sizeof(float) * dk);
      for (int i = 0; i < dk; ++i) {
        W[int64_t(t) * dk + i] = beta * eg * k[i];
        Qg[int64_t(t) * dk + i] = eg * q[i];
      }
      for (int j = 0; j < dv; ++j) U[int64_t(t) * dv + j] = beta * v[j];
      for (int s = 0; s <= t; ++s) {
        const float decay = std::exp(G[t] - G[s]);
        const float* ks = K + int64_t(s) * dk;
        QK[t * L + s] = decay * dot(q, ks, dk);
        if (s < t) A[t * L + s] = beta * decay * dot(kr, ks, dk);
      }
    }
    // Forward substitution with the unit lower-triangular (I + A).
    for (int t = 1; t < L; ++t) {
      for (int s = 0; s < t; ++s) {
        const float a = A[t * L + s];
        axpy(U + int64_t(t) * dv, U + int64_t(s) * dv, -a, dv);
        axpy(W + int64_t(t) * dk, W + int64_t(s) * dk, -a, dk);
      }
    }
    // R = [W; Qg] * S0, then delta = U - W S0, o = Qg S0 + QK delta.
    float* R = w.R.data();
    std::fill(R, R + int64_t(2 * L) * dv, 0.0f);
    gemm_acc(2 * L, dv, dk, w.P.data(), dk, S, dv, R, dv);
    for (int t = 0; t < L; ++t) axpy(U + int64_t(t) * dv, R + int64_t(t) * dv, -1.0f, dv);
    for (int t = 0; t < L; ++t) {
      float* o_acc = R + int64_t(L + t) * dv;
      for (int s = 0; s <= t; ++s) axpy(o_acc, U + int64_t(s) * dv, QK[t * L + s], dv);
      std::memcpy(io.out + (t0 + t) * io.out_stride + int64_t(h) * dv, o_acc, sizeof(float) * dv);
    }
    // S = e^{G_last} S0 + sum_s e^{G_last - G_s} k_s delta_s^T
    const float g_last = G[L - 1];
    float* KdT = w.KdT.data();
    for (int s = 0; s < L; ++s) {
      const float d = std::exp(g_last - G[s]);
      for (int i = 0; i < dk; ++i) KdT[int64_t(i) * L + s] = d * K[int64_t(s) * dk + i];
    }
    scale(S, std::exp(g_last), dk * dv);
    gemm_acc(dk, dv, L, KdT, L, U, dv, S, dv);
  }

  for (int j = 0; j < dv; ++j)
    for (int i = 0; i < dk; ++i) stored[int64_t(j) * dk + i] = S[int64_t(i) * dv + j];
}

// Below this many tokens the step form wins (measured; the chunked form pays for the state
// transposes and the triangular work even when a chunk is short).
constexpr int64_t kChunkedMinTokens = 8;

}  // namespace

void causal_conv1d_silu(const float* x, int64_t x_stride, int64_t n_tokens, int64_t channels,
                        const float* weight, int d_conv, float* conv_state, float* out,
                        int64_t out_stride, ThreadPool& pool) {
  if (d_conv < 1) throw Error("ssm conv: kernel size must be at least 1");
  if (channels <= 0) throw Error("ssm conv: channel count must be positive");
  if (n_tokens < 0) throw Error("ssm conv: negative token count");
  if (n_tokens == 0) return;
  if (!x || !weight || !out || (d_conv > 1 && !conv_state))
    throw Error("ssm conv: missing input, weight, state or output buffer");
  if (x_stride < channels || out_stride < channels)
    throw Error("ssm conv: a token row stride is shorter than the channel count");
  const int ns = d_conv - 1;  // state length per channel

  // Channel blocks are independent. Inside a block the taps are laid out tap-major so each tap
  // is a contiguous run over channels (the weight is channel-major in the file).
  constexpr int64_t kBlock = 64;
  const int64_t n_blocks = (channels + kBlock - 1) / kBlock;
  pool.parallel_for(n_blocks, [&](int64_t b0, int64_t b1) {
    std::vector<float> wt(size_t(d_conv) * kBlock);
    std::vector<float> acc(kBlock);
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t c0 = b * kBlock;
      const int nc = int(std::min<int64_t>(kBlock, channels - c0));
      for (int i = 0; i < d_conv; ++i)
        for (int c = 0; c < nc; ++c) wt[size_t(i) * kBlock + c] = weight[(c0 + c) * d_conv + i];
      // window position p in [0, ns + n_tokens): p < ns is state, else token p - ns.
      auto value = [&](int64_t p, int c) -> float {
        return p < ns ? conv_state[(c0 + c) * ns + p] : x[(p - ns) * x_stride + c0 + c];
      };
      for (int64_t t = 0; t < n_tokens; ++t) {
        // Taps summed oldest first, as ggml_ssm_conv does.
        if (t >= ns) {
          std::fill(acc.begin(), acc.begin() + nc, 0.0f);
          for (int i = 0; i < d_conv; ++i) {
            const float* xr = x + (t - ns + i) * x_stride + c0;
            const float* wr = wt.data() + size_t(i) * kBlock;
            for (int c = 0; c < nc; ++c) acc[c] += xr[c] * wr[c];
          }
        } else {
          for (int c = 0; c < nc; ++c) {
            float s = 0.0f;
            for (int i = 0; i < d_conv; ++i) s += value(t + i, c) * wt[size_t(i) * kBlock + c];
            acc[c] = s;
          }
        }
        float* o = out + t * out_stride + c0;
        for (int c = 0; c < nc; ++c) o[c] = silu_f(acc[c]);
      }
      // New state: the last ns entries of the window [state | tokens].
      for (int c = 0; c < nc; ++c) {
        float* st = conv_state + (c0 + c) * ns;
        if (n_tokens >= ns) {
          for (int t = 0; t < ns; ++t) st[t] = x[(n_tokens - ns + t) * x_stride + c0 + c];
        } else {
          const int keep = ns - int(n_tokens);
          std::memmove(st, st + n_tokens, sizeof(float) * keep);
          for (int t = 0; t < n_tokens; ++t) st[keep + t] = x[t * x_stride + c0 + c];
        }
      }
    }
  });
}

void l2_norm(const float* x, float* y, int64_t n, float eps) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += double(x[i] * x[i]);
  const float s = 1.0f / std::fmax(std::sqrt(float(sum)), eps);
  for (int64_t i = 0; i < n; ++i) y[i] = x[i] * s;
}

void delta_net_normalize_qk(float* q, int64_t q_stride, float* k, int64_t k_stride,
                            int64_t n_tokens, int n_k_heads, int head_k_dim, float eps) {
  if (n_k_heads <= 0 || head_k_dim <= 0) throw Error("delta net: bad key head shape");
  const int64_t width = int64_t(n_k_heads) * head_k_dim;
  if (n_tokens > 0 && (q_stride < width || k_stride < width))
    throw Error("delta net: q/k row stride shorter than H_k*D_k");
  const float q_scale = 1.0f / std::sqrt(float(head_k_dim));
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int h = 0; h < n_k_heads; ++h) {
      float* qh = q + t * q_stride + int64_t(h) * head_k_dim;
      float* kh = k + t * k_stride + int64_t(h) * head_k_dim;
      l2_norm(qh, qh, head_k_dim, eps);
      for (int i = 0; i < head_k_dim; ++i) qh[i] *= q_scale;
      l2_norm(kh, kh, head_k_dim, eps);
    }
  }
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
  const int dk = shape.head_k_dim, dv = shape.head_v_dim;
  pool.run([&](int ith, int nth) {
    for (int h = ith; h < shape.n_v_heads; h += nth) {
      const int hk = shape.k_head_of(h);
      float* M = state + int64_t(h) * dk * dv;
      for (int64_t t = 0; t < io.n_tokens; ++t) {
        step_head_token(M, io.q + t * io.q_stride + int64_t(hk) * dk,
                        io.k + t * io.k_stride + int64_t(hk) * dk,
                        io.v + t * io.v_stride + int64_t(h) * dv, io.g[t * io.g_stride + h],
                        io.beta[t * io.beta_stride + h], io.out + t * io.out_stride + int64_t(h) * dv,
                        dk, dv);
      }
    }
  });
}

void gated_delta_rule_chunked(const DeltaNetShape& shape, const DeltaNetIO& io, float* state,
                              ThreadPool& pool) {
  check_io(shape, io, state);
  if (io.n_tokens == 0) return;
  pool.run([&](int ith, int nth) {
    if (ith >= shape.n_v_heads) return;
    ChunkScratch scratch;
    scratch.reserve(shape.head_k_dim, shape.head_v_dim);
    for (int h = ith; h < shape.n_v_heads; h += nth) chunked_head(shape, io, h, state, scratch);
  });
}

void gated_delta_rule(const DeltaNetShape& shape, const DeltaNetIO& io, float* state,
                      ThreadPool& pool) {
  if (io.n_tokens < kChunkedMinTokens)
    gated_delta_rule_step(shape, io, state, pool);
  else
    gated_delta_rule_chunked(shape, io, state, pool);
}

void gated_rms_norm(const float* o, const float* z, const float* weight, float* y,
                    int64_t n_heads, int64_t head_dim, float eps) {
  for (int64_t h = 0; h < n_heads; ++h) {
    const float* oh = o + h * head_dim;
    const float* zh = z + h * head_dim;
    float* yh = y + h * head_dim;
    double sum = 0.0;
    for (int64_t d = 0; d < head_dim; ++d) sum += double(oh[d] * oh[d]);
    const float mean = float(sum / double(head_dim));
    const float s = 1.0f / std::sqrt(mean + eps);
    for (int64_t d = 0; d < head_dim; ++d) yh[d] = ((oh[d] * s) * weight[d]) * silu_f(zh[d]);
  }
}

}  // namespace agentkv
