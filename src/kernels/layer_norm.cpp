#include "kernels/layer_norm.h"

#include <cmath>

#include "kernels/dispatch.h"

namespace agentkv {
namespace {

// One vector of (x - mean)^2 reduced as ggml_vec_cvar_f32's intrinsics do: AVX2 adds the high
// 128 bits to the low, then pairs (0 + 2, 1 + 3), then the two; AVX-512's reduce_add first folds
// 512 to 256 bits the same way.
float reduce_vector(const float* sq, int lanes) {
  float v[16];
  for (int i = 0; i < lanes; ++i) v[i] = sq[i];
  for (int width = lanes / 2; width >= 4; width /= 2)
    for (int i = 0; i < width; ++i) v[i] = v[i + width] + v[i];
  const float a = v[0] + v[2];
  const float b = v[1] + v[3];
  return a + b;
}

}  // namespace

void layer_norm(const float* x, const float* w, const float* b, float* y, int64_t n, float eps) {
  if (n <= 0) return;
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(sum) / static_cast<float>(n);
  const int lanes = ggml_build_lanes();
  double var_sum = 0.0;
  int64_t i = 0;
  float sq[16];
  for (; i + lanes <= n; i += lanes) {
    for (int l = 0; l < lanes; ++l) {
      const float d = x[i + l] - mean;
      y[i + l] = d;
      sq[l] = d * d;
    }
    var_sum += static_cast<double>(reduce_vector(sq, lanes));
  }
  for (; i < n; ++i) {
    const float d = x[i] - mean;
    y[i] = d;
    var_sum += static_cast<double>(d * d);
  }
  const float variance = static_cast<float>(var_sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t k = 0; k < n; ++k) y[k] *= scale;
  if (w)
    for (int64_t k = 0; k < n; ++k) y[k] *= w[k];
  if (b)
    for (int64_t k = 0; k < n; ++k) y[k] += b[k];
}

}  // namespace agentkv
