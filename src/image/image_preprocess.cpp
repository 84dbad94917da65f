// Qwen-VL preprocessing as llama.cpp's mtmd computes it (image_preprocess.h). Every float operation
// below is one of llama.cpp's, in its order and precision (float, not double), so that the pixels the
// encoder sees are the same bits.
#include "image/image_preprocess.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

// llama.cpp's libmtmd is built without -march (CMake's default flags), so its lerp rounds the product
// and then the sum. An FMA target would let the compiler fuse them; keep them apart here.
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

namespace agentkv::image {
namespace {

float lerp(float s, float e, float t) { return s + (e - s) * t; }

// img_tool::resize_bilinear: corner-aligned (the first and last pixels of a row map to the source's),
// interpolated in float and truncated to uint8.
RgbImage resize_bilinear(const RgbImage& src, int target_width, int target_height) {
  target_width = std::max(target_width, 1);
  target_height = std::max(target_height, 1);
  RgbImage dst;
  dst.width = target_width;
  dst.height = target_height;
  dst.rgb.resize(static_cast<size_t>(target_width) * target_height * 3);
  const float x_ratio = target_width > 1 ? static_cast<float>(src.width - 1) / (target_width - 1) : 0.0f;
  const float y_ratio = target_height > 1 ? static_cast<float>(src.height - 1) / (target_height - 1) : 0.0f;
  auto pixel = [&](int x, int y) { return src.rgb.data() + (static_cast<size_t>(y) * src.width + x) * 3; };
  for (int y = 0; y < target_height; ++y) {
    const float py = y * y_ratio;
    const int y0 = std::min(static_cast<int>(py), src.height - 1);
    const int y1 = std::min(y0 + 1, src.height - 1);
    const float yf = py - y0;
    uint8_t* out = dst.rgb.data() + static_cast<size_t>(y) * target_width * 3;
    for (int x = 0; x < target_width; ++x) {
      const float px = x * x_ratio;
      const int x0 = std::min(static_cast<int>(px), src.width - 1);
      const int x1 = std::min(x0 + 1, src.width - 1);
      const float xf = px - x0;
      const uint8_t* p00 = pixel(x0, y0);
      const uint8_t* p10 = pixel(x1, y0);
      const uint8_t* p01 = pixel(x0, y1);
      const uint8_t* p11 = pixel(x1, y1);
      for (int c = 0; c < 3; ++c) {
        const float top = lerp(p00[c], p10[c], xf);
        const float bottom = lerp(p01[c], p11[c], xf);
        out[x * 3 + c] = static_cast<uint8_t>(lerp(top, bottom, yf));
      }
    }
  }
  return dst;
}

}  // namespace

VisionPreprocessSpec qwen3vl_spec(int patch_size, int merge, const float mean[3], const float std[3],
                                  std::optional<int> min_tokens, std::optional<int> max_tokens) {
  VisionPreprocessSpec spec;
  spec.patch_size = patch_size;
  spec.merge = merge;
  // clip_hparams::set_limit_image_tokens(8, 4096); a custom count counts only when positive, as there.
  const int64_t token_area = int64_t{patch_size} * patch_size * merge * merge;
  spec.min_pixels = (min_tokens && *min_tokens > 0 ? *min_tokens : 8) * token_area;
  spec.max_pixels = (max_tokens && *max_tokens > 0 ? *max_tokens : 4096) * token_area;
  for (int c = 0; c < 3; ++c) {
    spec.mean[c] = mean[c];
    spec.std[c] = std[c];
  }
  return spec;
}

// img_tool::calc_size_preserved_ratio (the min / max pixels overload), "smart_resize" in transformers.
// The products are taken in 64 bits (llama.cpp's int products cannot overflow within ImageLimits).
ImageSize qwen_vl_target_size(int width, int height, int align, int64_t min_pixels, int64_t max_pixels) {
  if (width <= 0 || height <= 0 || align <= 0 || max_pixels <= 0) {
    throw std::invalid_argument("qwen_vl_target_size: sizes must be positive");
  }
  const float factor = static_cast<float>(align);
  auto round_by_factor = [&](float x) { return static_cast<int64_t>(std::round(x / factor)) * align; };
  auto ceil_by_factor = [&](float x) { return static_cast<int64_t>(std::ceil(x / factor)) * align; };
  auto floor_by_factor = [&](float x) { return static_cast<int64_t>(std::floor(x / factor)) * align; };
  const int64_t area = int64_t{width} * height;
  int64_t h_bar = std::max<int64_t>(align, round_by_factor(static_cast<float>(height)));
  int64_t w_bar = std::max<int64_t>(align, round_by_factor(static_cast<float>(width)));
  if (h_bar * w_bar > max_pixels) {
    const float beta = std::sqrt(static_cast<float>(area) / static_cast<float>(max_pixels));
    h_bar = std::max<int64_t>(align, floor_by_factor(static_cast<float>(height) / beta));
    w_bar = std::max<int64_t>(align, floor_by_factor(static_cast<float>(width) / beta));
  } else if (h_bar * w_bar < min_pixels) {
    const float beta = std::sqrt(static_cast<float>(min_pixels) / static_cast<float>(area));
    h_bar = ceil_by_factor(static_cast<float>(height) * beta);
    w_bar = ceil_by_factor(static_cast<float>(width) * beta);
  }
  return {static_cast<int>(w_bar), static_cast<int>(h_bar)};
}

// img_tool::resize with padding PAD_CEIL: scale to fit inside the target, centre, pad with black.
RgbImage resize_bilinear_padded(const RgbImage& src, ImageSize target) {
  if (src.width <= 0 || src.height <= 0 || target.width <= 0 || target.height <= 0) {
    throw std::invalid_argument("resize_bilinear_padded: sizes must be positive");
  }
  if (src.width == target.width && src.height == target.height) return src;
  const float scale_w = static_cast<float>(target.width) / static_cast<float>(src.width);
  const float scale_h = static_cast<float>(target.height) / static_cast<float>(src.height);
  const float scale = std::min(scale_w, scale_h);
  const int new_width =
      std::min(static_cast<int>(std::ceil(static_cast<float>(src.width) * scale)), target.width);
  const int new_height =
      std::min(static_cast<int>(std::ceil(static_cast<float>(src.height) * scale)), target.height);
  const RgbImage resized = resize_bilinear(src, new_width, new_height);

  RgbImage dst;
  dst.width = target.width;
  dst.height = target.height;
  dst.rgb.assign(static_cast<size_t>(target.width) * target.height * 3, 0);  // the pad colour, black
  const int offset_x = (target.width - new_width) / 2;
  const int offset_y = (target.height - new_height) / 2;
  for (int y = 0; y < resized.height; ++y) {
    const int dy = y + offset_y;
    if (dy < 0 || dy >= dst.height) continue;
    for (int x = 0; x < resized.width; ++x) {
      const int dx = x + offset_x;
      if (dx < 0 || dx >= dst.width) continue;
      std::copy_n(resized.rgb.data() + (static_cast<size_t>(y) * resized.width + x) * 3, 3,
                  dst.rgb.data() + (static_cast<size_t>(dy) * dst.width + dx) * 3);
    }
  }
  return dst;
}

PreprocessedImage preprocess_qwen_vl(const RgbImage& image, const VisionPreprocessSpec& spec) {
  if (image.width <= 0 || image.height <= 0 ||
      image.rgb.size() != static_cast<size_t>(image.width) * image.height * 3) {
    throw std::invalid_argument("preprocess_qwen_vl: empty or inconsistent image");
  }
  if (spec.patch_size <= 0 || spec.merge <= 0 || spec.min_pixels <= 0 || spec.max_pixels < spec.min_pixels) {
    throw std::invalid_argument(
        "preprocess_qwen_vl: the spec needs patch_size, merge, min_pixels > 0 and "
        "max_pixels >= min_pixels");
  }
  const int align = spec.patch_size * spec.merge;
  const ImageSize target =
      qwen_vl_target_size(image.width, image.height, align, spec.min_pixels, spec.max_pixels);
  const RgbImage resized = resize_bilinear_padded(image, target);

  PreprocessedImage out;
  out.width = resized.width;
  out.height = resized.height;
  out.grid_width = out.width / spec.patch_size;
  out.grid_height = out.height / spec.patch_size;
  out.n_tokens = int64_t{out.grid_width / spec.merge} * (out.grid_height / spec.merge);
  out.pixels.resize(resized.rgb.size());
  // clip_image_f32::from_u8 then ::normalize: two roundings, x / 255 first.
  for (size_t i = 0; i < resized.rgb.size(); i += 3) {
    for (int c = 0; c < 3; ++c) {
      const float unit = static_cast<float>(resized.rgb[i + c]) / 255.0f;
      out.pixels[i + c] = (unit - spec.mean[c]) / spec.std[c];
    }
  }
  return out;
}

}  // namespace agentkv::image
