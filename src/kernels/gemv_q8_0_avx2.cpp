// Decode GEMV for q8_0 at the AVX2 level. Like the AVX-512 VNNI kernel in gemv.cpp, it reads a
// group of 4 rows at once with a software prefetch running a few KB ahead of the row stream, the
// activation block loaded once for the group; each row keeps dot_q8_0's operations in its order
// (quant_dot_avx2.cpp): per block maddubs(|w|, sign(a, w)), madd by ones, one FMA of the scale
// fp16(w.d) * fp16(a.d) into its own 8 lanes, then hsum_ps.
#include "kernels/gemv_q8_0_avx2.h"

#include <algorithm>

#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "kernels/quant_kernels.h"
#include "kernels/quant_simd_x86.h"
#include "kernels/thread_scratch.h"

namespace agentkv {

#ifdef AGENTKV_HAVE_X86_SIMD
namespace {
using namespace quant_detail;
using namespace quant_detail::x86;

constexpr int kRows = static_cast<int>(kQ8_0GemvAvx2Rows);

// How far ahead of the rows being read the prefetch runs (bytes of the row stream), as gemv.cpp.
constexpr size_t kPrefetchBytes = 4096;

// The activation's block scales as floats, converted once per call.
struct ActivationScaleTag;

AGENTKV_AVX2 void q8_0_group(const uint8_t* row0, size_t w_stride, int64_t nb, const BlockQ8_0* a,
                             const float* a_scale, const uint8_t* pf, float* out) {
  const BlockQ8_0* x[kRows];
  for (int i = 0; i < kRows; ++i) x[i] = reinterpret_cast<const BlockQ8_0*>(row0 + i * w_stride);
  __m256 acc[kRows];
#pragma GCC unroll 4
  for (int i = 0; i < kRows; ++i) acc[i] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    const size_t at = static_cast<size_t>(b) * sizeof(BlockQ8_0);
#pragma GCC unroll 4
    for (int i = 0; i < kRows; ++i) _mm_prefetch(reinterpret_cast<const char*>(pf + i * w_stride + at), _MM_HINT_T0);
    const __m256i act = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(a[b].qs));
#pragma GCC unroll 4
    for (int i = 0; i < kRows; ++i) {
      const __m256 d = _mm256_set1_ps(half_to_float(x[i][b].d) * a_scale[b]);
      const __m256i p = dot_s8s8(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[i][b].qs)), act);
      acc[i] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(p), acc[i]);
    }
  }
#pragma GCC unroll 4
  for (int i = 0; i < kRows; ++i) out[i] = hsum_ps(acc[i]);
}

AGENTKV_AVX2 void convert_scales(const BlockQ8_0* a, int64_t nb, float* scale) {
  for (int64_t b = 0; b < nb; ++b) scale[b] = half_to_float(a[b].d);
}

}  // namespace

bool q8_0_gemv_avx2_available() { return active_cpu_level() >= CpuLevel::Avx2; }

void q8_0_gemv_rows_avx2(const uint8_t* weights, size_t w_stride, int64_t n_in, const uint8_t* act, int64_t row_begin,
                         int64_t row_end, float* y) {
  const int64_t nb = n_in / kQK8_0;
  const auto* a = reinterpret_cast<const BlockQ8_0*>(act);
  float* a_scale = thread_scratch<float, ActivationScaleTag>(static_cast<size_t>(nb));
  convert_scales(a, nb, a_scale);
  const size_t group_bytes = w_stride * kRows;
  const int64_t ahead = static_cast<int64_t>((kPrefetchBytes + group_bytes - 1) / group_bytes) * kRows;
  const int64_t grouped_end = row_begin + (row_end - row_begin) / kRows * kRows;
  int64_t r = row_begin;
  for (; r < grouped_end; r += kRows) {
    // Never prefetch past the last whole group of the range (re-touching rows read is harmless).
    const uint8_t* pf = weights + static_cast<size_t>(std::min(r + ahead, grouped_end - kRows)) * w_stride;
    q8_0_group(weights + static_cast<size_t>(r) * w_stride, w_stride, nb, a, a_scale, pf, y + r);
  }
  const VecDotFn dot = vec_dot_fn(GgmlType::Q8_0);
  for (; r < row_end; ++r) y[r] = dot(n_in, weights + static_cast<size_t>(r) * w_stride, act);
}

#else
bool q8_0_gemv_avx2_available() { return false; }
void q8_0_gemv_rows_avx2(const uint8_t*, size_t, int64_t, const uint8_t*, int64_t, int64_t, float*) {}
#endif

}  // namespace agentkv
