// Qwen-VL image preprocessing (Qwen2-VL, Qwen2.5-VL, Qwen3-VL / Qwen3.5: llama.cpp's projector types
// qwen2vl_merger, qwen2.5vl_merger, qwen3vl_merger), bit for bit as llama.cpp d32676d7's mtmd does it
// (mtmd_image_preprocessor_dyn_size with the hparams clip.cpp sets for these projectors):
//
// 1. target size ("smart resize", img_tool::calc_size_preserved_ratio): width and height rounded to
//    multiples of patch_size * merge, then scaled down or up, aspect ratio kept, so that
//    min_pixels <= width * height <= max_pixels, every step in llama.cpp's float arithmetic;
// 2. bilinear resize with aspect-preserving padding (img_tool::resize, RESIZE_ALGO_BILINEAR,
//    PAD_CEIL, black): the image is scaled by min(target_w / w, target_h / h) to ceil(w * scale) x
//    ceil(h * scale) (at most the target), centred, and the rest (a row or column or so) is black;
//    the resampling is llama.cpp's corner-aligned bilinear with truncation to uint8;
// 3. to float: x / 255.0f, then (x - mean[c]) / std[c] (clip_image_f32::from_u8 and ::normalize).
//
// tests/image_decode_test.cpp compares all of it with llama.cpp's own output
// (tests/data/vision/preprocess/, made by tests/reference/mtmd_preprocess_reference.cpp).
#pragma once
#include <cstdint>
#include <optional>
#include <vector>

#include "image/image_decode.h"

namespace agentkv::image {

struct VisionPreprocessSpec {
  int patch_size = 16;     // clip.vision.patch_size
  int merge = 2;           // clip.vision.spatial_merge_size (n_merge): merge x merge patches make a token
  int64_t min_pixels = 0;  // of the resized image; llama.cpp's hparams.image_min_pixels
  int64_t max_pixels = 0;  // hparams.image_max_pixels
  float mean[3] = {0.f, 0.f, 0.f};  // clip.vision.image_mean
  float std[3] = {1.f, 1.f, 1.f};   // clip.vision.image_std
};

// The spec llama.cpp builds for a qwen3vl_merger (and qwen2vl / qwen2.5vl) projector: patch_size,
// merge, mean and std from the GGUF (merge is 2 unless clip.vision.spatial_merge_size says otherwise),
// and the pixel range from set_limit_image_tokens(8, 4096): between 8 and 4096 merged tokens, i.e.
// min_pixels = 8 * (patch_size * merge)^2, max_pixels = 4096 * (patch_size * merge)^2. llama.cpp reads
// no clip.vision.image_min_pixels / image_max_pixels key for these projectors; only its command-line
// options --image-min-tokens / --image-max-tokens replace the 8 and 4096, as min_tokens / max_tokens
// do here.
VisionPreprocessSpec qwen3vl_spec(int patch_size, int merge, const float mean[3], const float std[3],
                                  std::optional<int> min_tokens = std::nullopt,
                                  std::optional<int> max_tokens = std::nullopt);

struct ImageSize {
  int width = 0;
  int height = 0;
};

// Step 1: the resized image's size for an input of width x height; align = patch * merge. Throws
// std::invalid_argument unless the sizes are positive.
ImageSize qwen_vl_target_size(int width, int height, int align, int64_t min_pixels, int64_t max_pixels);

// Step 2: src resized to target as llama.cpp's img_tool::resize does with RESIZE_ALGO_BILINEAR and
// PAD_CEIL (black padding); a copy when the sizes are equal. Throws std::invalid_argument for an empty
// image or target.
RgbImage resize_bilinear_padded(const RgbImage& src, ImageSize target);

// The encoder's input for one image.
struct PreprocessedImage {
  int width = 0;   // a multiple of patch_size * merge (clip_image_f32::nx())
  int height = 0;  // likewise (ny())
  // Interleaved RGB, row-major, the layout of clip_image_f32's buf:
  //   pixels[(y * width + x) * 3 + c], c = 0 R, 1 G, 2 B; width * height * 3 floats.
  // (clip_image_batch_encode copies it into the planar tensor inp_raw [width, height, 3]:
  //  inp_raw[c * width * height + y * width + x] = pixels[(y * width + x) * 3 + c].)
  std::vector<float> pixels;
  int grid_width = 0;   // width / patch_size: patches per row
  int grid_height = 0;  // height / patch_size
  // Merged tokens: (grid_width / merge) * (grid_height / merge), the encoder's output rows (llama.cpp's
  // clip_n_output_tokens divides by 2, the merge of every Qwen-VL).
  int64_t n_tokens = 0;
};

// Steps 1 to 3. Throws std::invalid_argument for an empty image or a spec without positive sizes.
PreprocessedImage preprocess_qwen_vl(const RgbImage& image, const VisionPreprocessSpec& spec);

}  // namespace agentkv::image
