#include "kernels/f16_row.h"

#include "agentkv/fp16.h"
#include "kernels/dispatch.h"
#include "kernels/quant_simd_x86.h"

#ifdef AGENTKV_HAVE_X86_SIMD
#include <immintrin.h>
#endif

namespace agentkv {
namespace {

// Not inlined into the SIMD functions: under their FMA targets GCC could fuse fp32_to_fp16's
// multiply and add, which would change its rounding.
__attribute__((noinline)) void convert_scalar(const float* src, uint16_t* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) dst[i] = fp32_to_fp16(src[i]);
}

#ifdef AGENTKV_HAVE_X86_SIMD
// vcvtps2ph differs from fp32_to_fp16 only for NaN (it keeps the payload): those lanes, rare,
// are redone one value at a time.
AGENTKV_AVX2 void convert_avx2(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 x = _mm256_loadu_ps(src + i);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i), _mm256_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    if (_mm256_movemask_ps(_mm256_cmp_ps(x, x, _CMP_UNORD_Q)) != 0) convert_scalar(src + i, dst + i, 8);
  }
  convert_scalar(src + i, dst + i, n - i);
}

__attribute__((target(AGENTKV_TARGET_AVX512))) void convert_avx512(const float* src, uint16_t* dst, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(src + i);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(dst + i), _mm512_cvtps_ph(x, _MM_FROUND_TO_NEAREST_INT));
    if (_mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q) != 0) convert_scalar(src + i, dst + i, 16);
  }
  convert_scalar(src + i, dst + i, n - i);
}
#endif

}  // namespace

void fp32_to_fp16_row(const float* src, uint16_t* dst, int64_t n) {
#ifdef AGENTKV_HAVE_X86_SIMD
  switch (active_cpu_level()) {
    case CpuLevel::Avx512: return convert_avx512(src, dst, n);
    case CpuLevel::Avx2: return convert_avx2(src, dst, n);
    default: break;
  }
#endif
  convert_scalar(src, dst, n);
}

}  // namespace agentkv
