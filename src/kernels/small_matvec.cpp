#include "kernels/small_matvec.h"

#include "kernels/dispatch.h"
#include "kernels/quant_simd_x86.h"

namespace agentkv {
namespace {

void mat_t_vec_portable(const float* m, const float* x, float* y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] = 0.0f;
  for (int64_t i = 0; i < n; ++i) {
    const float* r = m + i * n;
    const float xi = x[i];
    for (int64_t k = 0; k < n; ++k) y[k] += r[k] * xi;
  }
}

#ifdef AGENTKV_HAVE_X86_SIMD
// Columns in strips of up to 8 vectors held in registers while every row passes (n % 8 == 0).
AGENTKV_AVX2 void mat_t_vec_avx2(const float* m, const float* x, float* y, int64_t n) {
  for (int64_t k0 = 0; k0 < n; k0 += 64) {
    const int64_t nv = (n - k0 < 64 ? n - k0 : 64) / 8;
    __m256 acc[8];
    for (int v = 0; v < 8; ++v) acc[v] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m256 xi = _mm256_set1_ps(x[i]);
      const float* r = m + i * n + k0;
      for (int v = 0; v < 8; ++v)
        if (v < nv) acc[v] = _mm256_fmadd_ps(_mm256_loadu_ps(r + 8 * v), xi, acc[v]);
    }
    for (int v = 0; v < nv; ++v) _mm256_storeu_ps(y + k0 + 8 * v, acc[v]);
  }
}

// The same with 16 lanes (n % 16 == 0).
__attribute__((target(AGENTKV_TARGET_AVX512))) void mat_t_vec_avx512(const float* m, const float* x, float* y, int64_t n) {
  for (int64_t k0 = 0; k0 < n; k0 += 128) {
    const int64_t nv = (n - k0 < 128 ? n - k0 : 128) / 16;
    __m512 acc[8];
    for (int v = 0; v < 8; ++v) acc[v] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; ++i) {
      const __m512 xi = _mm512_set1_ps(x[i]);
      const float* r = m + i * n + k0;
      for (int v = 0; v < 8; ++v)
        if (v < nv) acc[v] = _mm512_fmadd_ps(_mm512_loadu_ps(r + 16 * v), xi, acc[v]);
    }
    for (int v = 0; v < nv; ++v) _mm512_storeu_ps(y + k0 + 16 * v, acc[v]);
  }
}
#endif

}  // namespace

void small_mat_t_vec(const float* m, const float* x, float* y, int64_t n) {
#ifdef AGENTKV_HAVE_X86_SIMD
  const CpuLevel level = active_cpu_level();
  if (level >= CpuLevel::Avx512 && n % 16 == 0) return mat_t_vec_avx512(m, x, y, n);
  if (level >= CpuLevel::Avx2 && n % 8 == 0) return mat_t_vec_avx2(m, x, y, n);
#endif
  mat_t_vec_portable(m, x, y, n);
}

}  // namespace agentkv
