#include "kernels/small_matvec.h"

#include "kernels/dispatch.h"
#include "kernels/vec_ext.h"

// The vector types never cross a non-inlined function boundary (vec_ext.h), so GCC's ABI notes
// for them do not apply.
#pragma GCC diagnostic ignored "-Wpsabi"

namespace agentkv {
namespace {

// Columns in strips of up to 8 vectors of W lanes, held in registers while every row passes
// (n % W == 0). With FMA in the target, GCC fuses the multiply-add.
template <int W>
AGENTKV_VEC_INLINE void mat_t_vec_strips(const float* m, const float* x, float* y, int64_t n) {
  constexpr int64_t kStrip = 8 * W;
  for (int64_t k0 = 0; k0 < n; k0 += kStrip) {
    const int64_t nv = (n - k0 < kStrip ? n - k0 : kStrip) / W;
    vec::Vec<W> acc[8] = {};
    for (int64_t i = 0; i < n; ++i) {
      const float xi = x[i];
      const float* r = m + i * n + k0;
#pragma GCC unroll 8
      for (int v = 0; v < 8; ++v)
        if (v < nv) acc[v] += vec::load<W>(r + W * v) * xi;
    }
    for (int v = 0; v < nv; ++v) vec::store<W>(y + k0 + W * v, acc[v]);
  }
}

void mat_t_vec_generic(const float* m, const float* x, float* y, int64_t n) { mat_t_vec_strips<4>(m, x, y, n); }
__attribute__((target("avx2,fma"))) void mat_t_vec_avx2(const float* m, const float* x, float* y, int64_t n) {
  mat_t_vec_strips<8>(m, x, y, n);
}
__attribute__((target("avx2,fma,avx512f"))) void mat_t_vec_avx512(const float* m, const float* x, float* y, int64_t n) {
  mat_t_vec_strips<16>(m, x, y, n);
}

void mat_t_vec_scalar(const float* m, const float* x, float* y, int64_t n) {
  for (int64_t k = 0; k < n; ++k) y[k] = 0.0f;
  for (int64_t i = 0; i < n; ++i)
    for (int64_t k = 0; k < n; ++k) y[k] += m[i * n + k] * x[i];
}

}  // namespace

void small_mat_t_vec(const float* m, const float* x, float* y, int64_t n) {
  const CpuLevel level = active_cpu_level();
  if (level >= CpuLevel::Avx512 && n % 16 == 0) return mat_t_vec_avx512(m, x, y, n);
  if (level >= CpuLevel::Avx2 && n % 8 == 0) return mat_t_vec_avx2(m, x, y, n);
  if (n % 4 == 0) return mat_t_vec_generic(m, x, y, n);
  mat_t_vec_scalar(m, x, y, n);
}

}  // namespace agentkv
