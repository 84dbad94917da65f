// Image files to 8-bit RGB pixels: PNG (libpng) and JPEG (libjpeg-turbo), with the bytes llama.cpp's
// mtmd gets from stb_image (mtmd-helper.cpp: stbi_load_from_memory(..., 3)), so that a picture is the
// same input to the vision encoder here as there.
//
// What stb does, and so what this does:
// - PNG: exact. Gray is replicated into R, G and B; alpha (gray+alpha, RGBA, palette or tRNS
//   transparency) is dropped, never blended; palettes and 1/2/4-bit samples are expanded; 16-bit
//   samples keep their high byte (stbi__convert_16_to_8: v >> 8); interlaced files are supported;
//   gAMA, cHRM, sRGB, iCCP and sBIT are ignored (the raw sample values, no colour management).
// - JPEG: stb has its own decoder; libjpeg-turbo is set up as close to it as it goes (accurate
//   integer IDCT, fancy upsampling, no block smoothing, stb's rule for RGB vs YCbCr and for Adobe
//   CMYK / YCCK). The IDCT, chroma upsampling and colour conversion still round differently: see
//   image_decode.cpp for the measured differences (at most 3 levels but at 4:2:2 files' right edge,
//   0.035 on average; 2.7% of the samples differ).
// - EXIF orientation is ignored, as stb ignores it: a photo taken sideways reaches the model sideways
//   in llama.cpp too, and the two must see the same pixels.
// Everything else is refused with an ImageError (WebP, GIF, BMP, ... are named): stb also reads GIF,
// BMP, TGA, PSD, HDR and PNM, which a client converts first. Damaged files stb would still turn into
// pixels (a PNG chunk whose CRC fails, a truncated JPEG) are refused too.
//
// Decompression bombs: the dimensions are read from the header and checked against ImageLimits before
// any pixel memory is allocated or any pixel decoded.
#pragma once
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "agentkv/error.h"

namespace agentkv::image {

// Limits on what decode_image accepts. The defaults take any real photograph (a 50-megapixel one is
// 8688x5792) and bound the decoded buffer at 192 MiB.
struct ImageLimits {
  int64_t max_pixels = 8192LL * 8192;   // width * height
  int max_side = 16384;                 // width and height each
  size_t max_bytes = size_t{64} << 20;  // the encoded file
};

// An 8-bit RGB image: rgb[(y * width + x) * 3 + c], rows top to bottom, c = R, G, B. The layout of
// llama.cpp's clip_image_u8.
struct RgbImage {
  int width = 0;
  int height = 0;
  std::vector<uint8_t> rgb;
};

enum class ImageErrorKind {
  kEmpty,              // no bytes at all
  kUnsupportedFormat,  // not PNG or JPEG (or a JPEG colour model stb would not read the same way)
  kCorrupt,            // truncated or malformed data
  kTooLarge,           // over an ImageLimits limit
};

// The one exception decode_image throws; its message is for the user. An agentkv::Error (a
// std::runtime_error), the engine's exception for refused input.
class ImageError : public agentkv::Error {
 public:
  ImageError(ImageErrorKind kind, const std::string& message) : agentkv::Error(message), kind_(kind) {}
  ImageErrorKind kind() const { return kind_; }

 private:
  ImageErrorKind kind_;
};

enum class ImageFormat { kUnknown, kPng, kJpeg, kWebp, kGif, kBmp };

// "PNG", "JPEG", "WebP", "GIF", "BMP" or "unknown".
const char* format_name(ImageFormat format);

// The format by its magic bytes (only PNG and JPEG are decoded).
ImageFormat sniff_format(const uint8_t* data, size_t size);

// Throws ImageError kTooLarge if width x height breaks a limit (kCorrupt if either is not positive).
// decode_image calls it with the header's dimensions; exposed for callers that learn sizes elsewhere.
void check_dimensions(int64_t width, int64_t height, const ImageLimits& limits);

// Decodes a PNG or JPEG file held in memory to RGB. Throws ImageError, never reads outside
// [data, data + size).
RgbImage decode_image(const uint8_t* data, size_t size, const ImageLimits& limits = {});

}  // namespace agentkv::image
