// F16 / F32 batched matmul in llamafile tinyBLAS<16, __m512>'s float order (see gemm_float.h).
// Built for baseline x86-64 like the other kernels: the AVX-512 code carries its own target
// attribute and float_gemm_applies only says yes when the active CPU level is AVX-512.
#include "kernels/gemm_float.h"

#include <algorithm>
#include <string>
#include <vector>

#include "core/error.h"
#include "kernels/dispatch.h"

#if defined(__x86_64__) || defined(__i386__)
#define AGENTKV_GEMM_FLOAT_X86 1
#include <immintrin.h>
#endif

// GCC 12 reports the undefined upper halves inside its own _mm512_reduce_add_ps as uninitialized.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

namespace agentkv {
namespace {

constexpr int kTileRows = 4;        // weight rows per register tile (tinyBLAS's RM)
constexpr int kTileTokens = 6;      // tokens per register tile: 24 accumulators + 4 + 1 live zmm
constexpr int64_t kStep = 16;       // elements per fused multiply-add (one zmm of floats)
constexpr size_t kChunkBytes = 256 * 1024;  // activation rows kept hot in L2 while rows stream

#ifdef AGENTKV_GEMM_FLOAT_X86
#define AGENTKV_GEMM_AVX512 __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq")))
#define AGENTKV_GEMM_AVX512_INLINE \
  static inline __attribute__((target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512dq"), always_inline))

AGENTKV_GEMM_AVX512_INLINE __m512 load16(const float* p) { return _mm512_loadu_ps(p); }
AGENTKV_GEMM_AVX512_INLINE __m512 load16(const uint16_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

// Outputs rows [row, row + 4) x tokens [tok, tok + RN): each one 16-lane chain over the row.
template <int RN, class WeightT>
AGENTKV_GEMM_AVX512_INLINE void tile(const WeightT* w, int64_t w_stride, const float* b, int64_t b_stride,
                                     int64_t n_in, float* y, int64_t y_stride) {
  // Fully unrolled (the pragmas: -O2 does not unroll these by itself) so the RN x 4 accumulators
  // stay in registers.
  __m512 acc[RN][kTileRows];
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i) acc[j][i] = _mm512_setzero_ps();
  for (int64_t l = 0; l < n_in; l += kStep) {
    __m512 a[kTileRows];
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i) a[i] = load16(w + i * w_stride + l);
#pragma GCC unroll 8
    for (int j = 0; j < RN; ++j) {
      const __m512 bv = _mm512_loadu_ps(b + j * b_stride + l);
#pragma GCC unroll 4
      for (int i = 0; i < kTileRows; ++i) acc[j][i] = _mm512_fmadd_ps(a[i], bv, acc[j][i]);
    }
  }
#pragma GCC unroll 8
  for (int j = 0; j < RN; ++j)
#pragma GCC unroll 4
    for (int i = 0; i < kTileRows; ++i) y[j * y_stride + i] = _mm512_reduce_add_ps(acc[j][i]);
}

// Weight rows [row_begin, row_end) (multiples of 4) against every token; tokens in chunks that
// stay in cache while the thread's rows pass over them.
template <class WeightT>
AGENTKV_GEMM_AVX512 void rows_avx512(const WeightT* w, int64_t w_stride, const float* b, int64_t b_stride,
                                     int64_t n_tokens, int64_t n_in, float* y, int64_t y_stride,
                                     int64_t row_begin, int64_t row_end) {
  const int64_t chunk_rows = static_cast<int64_t>(kChunkBytes / (static_cast<size_t>(n_in) * sizeof(float)));
  const int64_t chunk = std::max<int64_t>(kTileTokens, chunk_rows / kTileTokens * kTileTokens);
  for (int64_t t0 = 0; t0 < n_tokens; t0 += chunk) {
    const int64_t t1 = std::min(t0 + chunk, n_tokens);
    for (int64_t r = row_begin; r < row_end; r += kTileRows) {
      const WeightT* wr = w + r * w_stride;
      int64_t t = t0;
      for (; t + kTileTokens <= t1; t += kTileTokens)
        tile<kTileTokens>(wr, w_stride, b + t * b_stride, b_stride, n_in, y + t * y_stride + r, y_stride);
      const float* bt = b + t * b_stride;
      float* yt = y + t * y_stride + r;
      switch (t1 - t) {
        case 5: tile<5>(wr, w_stride, bt, b_stride, n_in, yt, y_stride); break;
        case 4: tile<4>(wr, w_stride, bt, b_stride, n_in, yt, y_stride); break;
        case 3: tile<3>(wr, w_stride, bt, b_stride, n_in, yt, y_stride); break;
        case 2: tile<2>(wr, w_stride, bt, b_stride, n_in, yt, y_stride); break;
        case 1: tile<1>(wr, w_stride, bt, b_stride, n_in, yt, y_stride); break;
        default: break;
      }
    }
  }
}

// dst = float(f16(src)): ggml converts the activations of an F16 product to f16 (round to
// nearest even); widening back is exact, so the kernel can read floats.
AGENTKV_GEMM_AVX512 void round_through_f16(const float* src, float* dst, int64_t n) {
  for (int64_t i = 0; i < n; i += kStep) {
    const __m256i h = _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    _mm512_storeu_ps(dst + i, _mm512_cvtph_ps(h));
  }
}
#endif  // AGENTKV_GEMM_FLOAT_X86

std::vector<float>& activation_copy(size_t n) {
  thread_local std::vector<float> scratch;
  if (scratch.size() < n) scratch.resize(n);
  return scratch;
}

}  // namespace

bool float_gemm_applies(const WeightMatrix& w, int64_t n_tokens) {
#ifdef AGENTKV_GEMM_FLOAT_X86
  return (w.type == GgmlType::F16 || w.type == GgmlType::F32) && n_tokens >= 2 && w.n_out % kTileRows == 0 &&
         w.n_in % kStep == 0 && active_cpu_level() == CpuLevel::Avx512;
#else
  (void)w;
  (void)n_tokens;
  return false;
#endif
}

void float_gemm(const WeightMatrix& w, const float* x, int64_t n_tokens, int64_t x_stride, float* y,
                int64_t y_stride, ThreadPool& pool) {
  if (!float_gemm_applies(w, n_tokens)) {
    throw Error("float_gemm: weight " + std::string(ggml_type_name(w.type)) + " [" + std::to_string(w.n_in) + " x " +
                std::to_string(w.n_out) + "] with " + std::to_string(n_tokens) + " tokens is not a tinyBLAS shape");
  }
#ifdef AGENTKV_GEMM_FLOAT_X86
  const int64_t n_in = w.n_in;
  const float* b = x;
  int64_t b_stride = x_stride;
  if (w.type == GgmlType::F16) {
    std::vector<float>& copy = activation_copy(static_cast<size_t>(n_tokens * n_in));
    float* dst = copy.data();
    pool.parallel_for(n_tokens, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) round_through_f16(x + t * x_stride, dst + t * n_in, n_in);
    });
    b = dst;
    b_stride = n_in;
  }
  const size_t row_bytes = w.row_bytes != 0 ? w.row_bytes : ggml_row_size(w.type, n_in);
  const int64_t n_quads = w.n_out / kTileRows;
  pool.parallel_for(n_quads, [&](int64_t q0, int64_t q1) {
    if (w.type == GgmlType::F16) {
      rows_avx512(reinterpret_cast<const uint16_t*>(w.data), static_cast<int64_t>(row_bytes / sizeof(uint16_t)), b,
                  b_stride, n_tokens, n_in, y, y_stride, q0 * kTileRows, q1 * kTileRows);
    } else {
      rows_avx512(reinterpret_cast<const float*>(w.data), static_cast<int64_t>(row_bytes / sizeof(float)), b,
                  b_stride, n_tokens, n_in, y, y_stride, q0 * kTileRows, q1 * kTileRows);
    }
  });
#endif
}

}  // namespace agentkv
