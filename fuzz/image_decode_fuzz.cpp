// libFuzzer target for image input (src/image/): the input is an image file, decoded with small limits
// and, when it decodes, preprocessed for Qwen-VL (two specs: Qwen3-VL's 16 x 2 and Qwen2.5-VL's 14 x 2,
// few tokens). A finding: a crash, a sanitizer report (a read outside the input is one), an exception
// other than ImageError from decoding or any from preprocessing, or a broken invariant of the output.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>

#include "image/image_decode.h"
#include "image/image_preprocess.h"

using namespace agentkv::image;

namespace {

#define FUZZ_CHECK(cond)       \
  do {                         \
    if (!(cond)) std::abort(); \
  } while (0)

void check_preprocessed(const RgbImage& image, int patch_size, const float mean[3], const float std[3]) {
  const VisionPreprocessSpec spec = qwen3vl_spec(patch_size, 2, mean, std, 1, 16);
  const PreprocessedImage out = preprocess_qwen_vl(image, spec);
  const int align = patch_size * 2;
  FUZZ_CHECK(out.width >= align && out.height >= align);
  FUZZ_CHECK(out.width % align == 0 && out.height % align == 0);
  FUZZ_CHECK(out.pixels.size() == size_t(out.width) * out.height * 3);
  FUZZ_CHECK(out.n_tokens == int64_t{out.width / align} * (out.height / align));
  for (size_t i = 0; i < out.pixels.size(); ++i) {  // (x / 255 - mean) / std for x in 0..255
    const int c = int(i % 3);
    FUZZ_CHECK(out.pixels[i] >= (0.f - mean[c]) / std[c] && out.pixels[i] <= (1.f - mean[c]) / std[c]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  ImageLimits limits;  // small, so that every input runs fast: 512x512 or 4096x64 at most
  limits.max_pixels = 512 * 512;
  limits.max_side = 4096;
  limits.max_bytes = 1 << 20;
  RgbImage image;
  try {
    image = decode_image(data, size, limits);
  } catch (const ImageError&) {
    return 0;  // refused: expected for most inputs
  }
  FUZZ_CHECK(image.width > 0 && image.height > 0);
  FUZZ_CHECK(int64_t{image.width} * image.height <= limits.max_pixels);
  FUZZ_CHECK(image.rgb.size() == size_t(image.width) * image.height * 3);
  const float qwen3_mean[3] = {0.5f, 0.5f, 0.5f}, qwen3_std[3] = {0.5f, 0.5f, 0.5f};
  const float clip_mean[3] = {0.48145466f, 0.4578275f, 0.40821073f};
  const float clip_std[3] = {0.26862954f, 0.26130258f, 0.27577711f};
  check_preprocessed(image, 16, qwen3_mean, qwen3_std);
  check_preprocessed(image, 14, clip_mean, clip_std);
  return 0;
}
