// src/image/: decoding (image_decode.h) and Qwen-VL preprocessing (image_preprocess.h).
// - PNGs written here with libpng, of every colour type and depth, decode to the bytes stb_image gives
//   (worked out here from the samples written);
// - the files of tests/data/vision/preprocess/ decode to llama.cpp's own bytes (NAME.stb.rgb, written by
//   llama.cpp's mtmd helper: stb_image), exactly for PNG and within the measured bounds for JPEG, and
//   preprocess to llama.cpp's own floats bit for bit (CASE.f32, its mtmd_image_preprocessor_dyn_size),
//   and the target sizes equal llama.cpp's over a grid of sizes (sizes.txt); see its README.md;
// - broken, truncated, oversized and foreign files are refused with the right ImageErrorKind.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <csetjmp>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include <jpeglib.h>  // after <cstdio>
#include <png.h>

#include "binary_files.h"
#include "image/image_decode.h"
#include "image/image_preprocess.h"

namespace agentkv::image {
namespace {

const std::string kDataDir = std::string(AGENTKV_SOURCE_DIR) + "/tests/data/vision/preprocess/";

// ---- writing test images --------------------------------------------------------------------------

struct PngPicture {  // what write_png_steps needs: plain data, set up before the setjmp
  int width, height, color_type, bit_depth;
  bool interlaced;
  const png_color* palette;
  int palette_size;
  const png_byte* trans_alpha;      // palette alpha, or null
  const png_color_16* trans_color;  // the tRNS colour of a gray / RGB image, or null
  png_bytepp rows;
};

void append_to_vector(png_structp png, png_bytep data, size_t size) {
  auto* out = static_cast<std::vector<uint8_t>*>(png_get_io_ptr(png));
  out->insert(out->end(), data, data + size);
}

bool write_png_steps(png_structp png, png_infop info, const PngPicture& p) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_set_IHDR(png, info, p.width, p.height, p.bit_depth, p.color_type,
               p.interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (p.palette) png_set_PLTE(png, info, p.palette, p.palette_size);
  if (p.trans_alpha) png_set_tRNS(png, info, p.trans_alpha, p.palette_size, nullptr);
  if (p.trans_color) png_set_tRNS(png, info, nullptr, 0, p.trans_color);
  png_set_gAMA(png, info, 0.45);  // ignored by stb, so by the decoder
  png_set_sRGB(png, info, PNG_sRGB_INTENT_PERCEPTUAL);
  png_write_info(png, info);
  png_write_image(png, p.rows);
  png_write_end(png, info);
  return true;
}

// samples: width * height * channels values (palette indices for a palette image), packed into rows
// of the given bit depth, big-endian as PNG stores them.
std::vector<uint8_t> encode_png(int width, int height, int color_type, int bit_depth, bool interlaced,
                                const std::vector<int>& samples, const std::vector<png_color>& palette = {},
                                const std::vector<png_byte>& palette_alpha = {},
                                const png_color_16* trans_color = nullptr) {
  const int channels = color_type == PNG_COLOR_TYPE_RGB          ? 3
                       : color_type == PNG_COLOR_TYPE_RGB_ALPHA  ? 4
                       : color_type == PNG_COLOR_TYPE_GRAY_ALPHA ? 2
                                                                 : 1;
  EXPECT_EQ(samples.size(), size_t(width) * height * channels);
  std::vector<std::vector<uint8_t>> rows(height);
  const size_t per_row = size_t(width) * channels;
  for (int y = 0; y < height; ++y) {
    std::vector<uint8_t>& row = rows[y];
    row.assign((per_row * bit_depth + 7) / 8, 0);
    for (size_t i = 0; i < per_row; ++i) {
      const int v = samples[y * per_row + i];
      if (bit_depth == 16) {
        row[2 * i] = uint8_t(v >> 8);
        row[2 * i + 1] = uint8_t(v);
      } else {
        const size_t bit = i * bit_depth;
        row[bit / 8] |= uint8_t(v << (8 - bit_depth - bit % 8));
      }
    }
  }
  std::vector<png_bytep> pointers;
  for (auto& row : rows) pointers.push_back(row.data());
  std::vector<uint8_t> out;
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  png_set_write_fn(png, &out, append_to_vector, nullptr);
  const PngPicture picture{width,
                           height,
                           color_type,
                           bit_depth,
                           interlaced,
                           palette.empty() ? nullptr : palette.data(),
                           int(palette.size()),
                           palette_alpha.empty() ? nullptr : palette_alpha.data(),
                           trans_color,
                           pointers.data()};
  const bool ok = write_png_steps(png, info, picture);
  png_destroy_write_struct(&png, &info);
  EXPECT_TRUE(ok) << "libpng could not write the test image";
  return out;
}

// A test pattern: every sample differs from its neighbours; values in [0, max].
std::vector<int> pattern(int width, int height, int channels, int max, uint32_t seed) {
  std::vector<int> out(size_t(width) * height * channels);
  uint32_t state = seed;
  for (size_t i = 0; i < out.size(); ++i) {
    state = 1664525u * state + 1013904223u;
    out[i] = int((state >> 8) % uint32_t(max + 1));
  }
  return out;
}

std::vector<uint8_t> encode_jpeg(int width, int height, int components, J_COLOR_SPACE space,
                                 const std::vector<uint8_t>& px, int quality, bool progressive) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);  // a failure here ends the test program: a broken test
  jpeg_create_compress(&cinfo);
  unsigned char* buffer = nullptr;
  unsigned long size = 0;
  jpeg_mem_dest(&cinfo, &buffer, &size);
  cinfo.image_width = width;
  cinfo.image_height = height;
  cinfo.input_components = components;
  cinfo.in_color_space = space;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (components == 3) cinfo.comp_info[0].h_samp_factor = cinfo.comp_info[0].v_samp_factor = 1;  // 4:4:4
  if (progressive) jpeg_simple_progression(&cinfo);
  jpeg_start_compress(&cinfo, TRUE);
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = const_cast<uint8_t*>(px.data()) + size_t(cinfo.next_scanline) * width * components;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::vector<uint8_t> out(buffer, buffer + size);
  std::free(buffer);
  return out;
}

// A smooth picture (JPEG's home ground): gradients and a slow wave.
std::vector<uint8_t> smooth_rgb(int width, int height) {
  std::vector<uint8_t> out(size_t(width) * height * 3);
  for (int y = 0; y < height; ++y) {
    for (int x = 0; x < width; ++x) {
      uint8_t* p = out.data() + (size_t(y) * width + x) * 3;
      p[0] = uint8_t(x * 255 / (width - 1));
      p[1] = uint8_t(y * 255 / (height - 1));
      p[2] = uint8_t(128 + 100 * std::sin((x + y) * 0.1));
    }
  }
  return out;
}

uint32_t crc32(const uint8_t* data, size_t size) {
  uint32_t crc = 0xffffffffu;
  for (size_t i = 0; i < size; ++i) {
    crc ^= data[i];
    for (int k = 0; k < 8; ++k) crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
  }
  return ~crc;
}

void put_be32(std::vector<uint8_t>& out, uint32_t v) {
  for (int shift = 24; shift >= 0; shift -= 8) out.push_back(uint8_t(v >> shift));
}

// A PNG of just a signature and an IHDR chunk (valid CRC): the header of an image never decoded.
std::vector<uint8_t> png_header_only(uint32_t width, uint32_t height) {
  std::vector<uint8_t> out = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  put_be32(out, 13);
  const size_t type_at = out.size();
  out.insert(out.end(), {'I', 'H', 'D', 'R'});
  put_be32(out, width);
  put_be32(out, height);
  out.insert(out.end(), {8, 2, 0, 0, 0});  // 8-bit RGB
  put_be32(out, crc32(out.data() + type_at, out.size() - type_at));
  return out;
}

ImageErrorKind decode_error(const std::vector<uint8_t>& bytes, const ImageLimits& limits = {}) {
  try {
    decode_image(bytes.data(), bytes.size(), limits);
  } catch (const ImageError& e) {
    return e.kind();
  }
  ADD_FAILURE() << "decoded without an error";
  return ImageErrorKind::kEmpty;
}

std::vector<uint8_t> rgb_of(const std::vector<int>& samples, int channels, int shift, bool gray) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < samples.size(); i += channels) {
    for (int c = 0; c < 3; ++c) out.push_back(uint8_t(samples[i + (gray ? 0 : c)] >> shift));
  }
  return out;
}

RgbImage decode(const std::vector<uint8_t>& bytes) { return decode_image(bytes.data(), bytes.size()); }

void expect_rgb(const RgbImage& image, int width, int height, const std::vector<uint8_t>& rgb) {
  EXPECT_EQ(image.width, width);
  EXPECT_EQ(image.height, height);
  EXPECT_EQ(image.rgb, rgb);
}

// ---- PNG: every colour type and depth, against stb's rules ------------------------------------------

TEST(ImageDecode, PngRgbKeepsTheSamples) {
  const auto samples = pattern(13, 7, 3, 255, 1);
  expect_rgb(decode(encode_png(13, 7, PNG_COLOR_TYPE_RGB, 8, false, samples)), 13, 7,
             rgb_of(samples, 3, 0, false));
}

TEST(ImageDecode, PngRgbaDropsAlphaWithoutBlending) {
  const auto samples = pattern(9, 11, 4, 255, 2);
  expect_rgb(decode(encode_png(9, 11, PNG_COLOR_TYPE_RGB_ALPHA, 8, false, samples)), 9, 11,
             rgb_of(samples, 4, 0, false));
}

TEST(ImageDecode, PngGrayIsReplicated) {
  const auto samples = pattern(10, 3, 1, 255, 3);
  expect_rgb(decode(encode_png(10, 3, PNG_COLOR_TYPE_GRAY, 8, false, samples)), 10, 3,
             rgb_of(samples, 1, 0, true));
}

TEST(ImageDecode, PngGrayAlphaReplicatesGrayAndDropsAlpha) {
  const auto samples = pattern(6, 5, 2, 255, 4);
  expect_rgb(decode(encode_png(6, 5, PNG_COLOR_TYPE_GRAY_ALPHA, 8, false, samples)), 6, 5,
             rgb_of(samples, 2, 0, true));
}

TEST(ImageDecode, PngLowBitGrayIsScaledToFullRange) {
  // stb multiplies 1, 2 and 4-bit gray by 255, 85 and 17 (stbi__depth_scale_table).
  for (int depth : {1, 2, 4}) {
    const auto samples = pattern(19, 4, 1, (1 << depth) - 1, 5 + depth);
    const int scale = depth == 1 ? 255 : depth == 2 ? 85 : 17;
    std::vector<uint8_t> expected;
    for (int v : samples) expected.insert(expected.end(), 3, uint8_t(v * scale));
    expect_rgb(decode(encode_png(19, 4, PNG_COLOR_TYPE_GRAY, depth, false, samples)), 19, 4, expected);
  }
}

TEST(ImageDecode, PngPaletteIsExpandedAndItsAlphaDropped) {
  for (int depth : {2, 4, 8}) {
    std::vector<png_color> palette;
    std::vector<png_byte> alpha;
    for (int i = 0; i < (1 << depth); ++i) {
      palette.push_back({png_byte(i * 37), png_byte(255 - i * 5), png_byte(i * 101)});
      alpha.push_back(png_byte(i * 13));
    }
    const auto indices = pattern(17, 6, 1, (1 << depth) - 1, 10 + depth);
    std::vector<uint8_t> expected;
    for (int i : indices)
      expected.insert(expected.end(), {palette[i].red, palette[i].green, palette[i].blue});
    expect_rgb(decode(encode_png(17, 6, PNG_COLOR_TYPE_PALETTE, depth, false, indices, palette, alpha)), 17,
               6, expected);
  }
}

TEST(ImageDecode, PngTransparentColourIsIgnored) {
  const auto samples = pattern(8, 8, 3, 255, 20);
  const png_color_16 transparent{0, png_uint_16(samples[0]), png_uint_16(samples[1]), png_uint_16(samples[2]),
                                 0};
  expect_rgb(decode(encode_png(8, 8, PNG_COLOR_TYPE_RGB, 8, false, samples, {}, {}, &transparent)), 8, 8,
             rgb_of(samples, 3, 0, false));
}

TEST(ImageDecode, Png16BitKeepsTheHighByte) {
  // stbi__convert_16_to_8: (v >> 8), no rounding: 0x12ff becomes 0x12.
  const auto rgb16 = pattern(7, 9, 3, 65535, 30);
  expect_rgb(decode(encode_png(7, 9, PNG_COLOR_TYPE_RGB, 16, false, rgb16)), 7, 9,
             rgb_of(rgb16, 3, 8, false));
  const auto rgba16 = pattern(5, 4, 4, 65535, 31);
  expect_rgb(decode(encode_png(5, 4, PNG_COLOR_TYPE_RGB_ALPHA, 16, false, rgba16)), 5, 4,
             rgb_of(rgba16, 4, 8, false));
  const auto gray16 = pattern(6, 6, 1, 65535, 32);
  expect_rgb(decode(encode_png(6, 6, PNG_COLOR_TYPE_GRAY, 16, false, gray16)), 6, 6,
             rgb_of(gray16, 1, 8, true));
  const std::vector<int> edge = {0x12ff, 0x00ff, 0xff00};
  expect_rgb(decode(encode_png(1, 1, PNG_COLOR_TYPE_RGB, 16, false, edge)), 1, 1, {0x12, 0x00, 0xff});
}

TEST(ImageDecode, PngInterlacedEqualsProgressive) {
  const auto rgb = pattern(23, 17, 3, 255, 40);
  expect_rgb(decode(encode_png(23, 17, PNG_COLOR_TYPE_RGB, 8, true, rgb)), 23, 17, rgb_of(rgb, 3, 0, false));
  const auto graya16 = pattern(5, 9, 2, 65535, 41);  // smaller than an Adam7 block: empty passes
  expect_rgb(decode(encode_png(5, 9, PNG_COLOR_TYPE_GRAY_ALPHA, 16, true, graya16)), 5, 9,
             rgb_of(graya16, 2, 8, true));
  const auto one = pattern(1, 1, 4, 255, 42);
  expect_rgb(decode(encode_png(1, 1, PNG_COLOR_TYPE_RGB_ALPHA, 8, true, one)), 1, 1,
             rgb_of(one, 4, 0, false));
}

// ---- JPEG -----------------------------------------------------------------------------------------------

struct Difference {
  int max = 0;
  double mean = 0;
};

Difference difference(const std::vector<uint8_t>& a, const std::vector<uint8_t>& b) {
  Difference d;
  EXPECT_EQ(a.size(), b.size());
  if (a.size() != b.size() || a.empty()) return d;
  double sum = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const int delta = std::abs(int(a[i]) - int(b[i]));
    d.max = std::max(d.max, delta);
    sum += delta;
  }
  d.mean = sum / double(a.size());
  return d;
}

TEST(ImageDecode, JpegRoundTripIsCloseToTheSource) {
  const auto rgb = smooth_rgb(40, 24);
  for (bool progressive : {false, true}) {
    const RgbImage image = decode(encode_jpeg(40, 24, 3, JCS_RGB, rgb, 95, progressive));
    ASSERT_EQ(image.width, 40);
    ASSERT_EQ(image.height, 24);
    const Difference d = difference(image.rgb, rgb);
    EXPECT_LE(d.max, 16) << "progressive " << progressive;
    EXPECT_LE(d.mean, 2.0) << "progressive " << progressive;
  }
  std::vector<uint8_t> gray(33 * 21);
  for (size_t i = 0; i < gray.size(); ++i) gray[i] = uint8_t(i * 255 / gray.size());
  const RgbImage image = decode(encode_jpeg(33, 21, 1, JCS_GRAYSCALE, gray, 95, false));
  ASSERT_EQ(image.rgb.size(), gray.size() * 3);
  for (size_t i = 0; i < gray.size(); ++i) {  // replicated
    EXPECT_EQ(image.rgb[3 * i], image.rgb[3 * i + 1]);
    EXPECT_EQ(image.rgb[3 * i], image.rgb[3 * i + 2]);
    EXPECT_NEAR(image.rgb[3 * i], gray[i], 6);
  }
}

// ---- the committed files against llama.cpp ------------------------------------------------------------

struct SizedBuffer {
  int width = 0, height = 0;
  std::vector<uint8_t> bytes;  // after the two int32 sizes
};

SizedBuffer read_sized(const std::string& path) {
  const std::vector<uint8_t> file = test::read_file(path);
  SizedBuffer out;
  if (file.size() < 8) {
    ADD_FAILURE() << path << " is too short";
    return out;
  }
  int32_t w, h;
  std::memcpy(&w, file.data(), 4);
  std::memcpy(&h, file.data() + 4, 4);
  out.width = w;
  out.height = h;
  out.bytes.assign(file.begin() + 8, file.end());
  return out;
}

struct Case {
  std::string name, input;
  int patch_size = 0, merge = 0, min_tokens = 0, max_tokens = 0;
  float mean[3] = {}, std[3] = {};
};

std::vector<Case> read_cases() {
  std::ifstream in(kDataDir + "cases.txt");
  EXPECT_TRUE(in.good()) << "cannot read " << kDataDir << "cases.txt";
  std::vector<Case> cases;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream fields(line);
    Case c;
    std::string mean[3], std_[3];
    fields >> c.name >> c.input >> c.patch_size >> c.merge >> c.min_tokens >> c.max_tokens >> mean[0] >>
        mean[1] >> mean[2] >> std_[0] >> std_[1] >> std_[2];
    EXPECT_TRUE(bool(fields)) << line;
    for (int k = 0; k < 3; ++k) {  // strtof, as the reference program: the same floats
      c.mean[k] = std::strtof(mean[k].c_str(), nullptr);
      c.std[k] = std::strtof(std_[k].c_str(), nullptr);
    }
    cases.push_back(c);
  }
  EXPECT_GE(cases.size(), 10u);
  return cases;
}

bool is_jpeg(const std::string& name) { return name.size() > 4 && name.substr(name.size() - 4) == ".jpg"; }

TEST(ImageDecode, PngFilesDecodeToLlamaCppsBytes) {
  int checked = 0;
  for (const Case& c : read_cases()) {
    if (is_jpeg(c.input)) continue;
    const SizedBuffer stb = read_sized(kDataDir + c.input + ".stb.rgb");
    const RgbImage image = decode(test::read_file(kDataDir + c.input));
    EXPECT_EQ(image.width, stb.width) << c.input;
    EXPECT_EQ(image.height, stb.height) << c.input;
    EXPECT_TRUE(image.rgb == stb.bytes) << c.input << " differs from llama.cpp's (stb_image's) decoding";
    ++checked;
  }
  EXPECT_GE(checked, 8);
}

// The JPEGs' bounds: what was measured (image_decode.cpp), a little looser. Gray is the IDCT alone; the
// colour files add chroma upsampling and the YCbCr conversion. The last two columns are left out of
// the largest difference: there stb's horizontal (4:2:2) upsampler weights the wrong neighbour, by as
// much as half the step between the last two chroma samples.
TEST(ImageDecode, JpegFilesDecodeCloseToLlamaCppsBytes) {
  int checked = 0;
  for (const Case& c : read_cases()) {
    if (!is_jpeg(c.input)) continue;
    const SizedBuffer stb = read_sized(kDataDir + c.input + ".stb.rgb");
    const RgbImage image = decode(test::read_file(kDataDir + c.input));
    ASSERT_EQ(image.width, stb.width) << c.input;
    ASSERT_EQ(image.height, stb.height) << c.input;
    ASSERT_EQ(image.rgb.size(), stb.bytes.size()) << c.input;
    int interior_max = 0;
    for (size_t i = 0; i < image.rgb.size(); ++i) {
      if (int(i / 3 % image.width) < image.width - 2) {
        interior_max = std::max(interior_max, std::abs(int(image.rgb[i]) - int(stb.bytes[i])));
      }
    }
    const Difference d = difference(image.rgb, stb.bytes);
    const bool gray = c.input.rfind("gray", 0) == 0;
    EXPECT_LE(interior_max, gray ? 1 : 3) << c.input;
    EXPECT_LE(d.mean, gray ? 0.05 : 0.4) << c.input;
    std::printf("%s: max %d (%d but in the last two columns), mean %.4f levels from stb_image\n",
                c.input.c_str(), d.max, interior_max, d.mean);
    ++checked;
  }
  EXPECT_GE(checked, 6);
}

VisionPreprocessSpec spec_of(const Case& c) {
  return qwen3vl_spec(c.patch_size, c.merge, c.mean, c.std, c.min_tokens, c.max_tokens);
}

void expect_same_floats(const PreprocessedImage& out, const SizedBuffer& expected, const std::string& what) {
  EXPECT_EQ(out.width, expected.width) << what;
  EXPECT_EQ(out.height, expected.height) << what;
  ASSERT_EQ(out.pixels.size() * sizeof(float), expected.bytes.size()) << what;
  size_t first_difference = out.pixels.size();
  size_t differences = 0;
  for (size_t i = 0; i < out.pixels.size(); ++i) {
    if (std::memcmp(&out.pixels[i], expected.bytes.data() + 4 * i, 4) != 0) {
      first_difference = std::min(first_difference, i);
      ++differences;
    }
  }
  if (differences > 0) {
    float want;
    std::memcpy(&want, expected.bytes.data() + 4 * first_difference, 4);
    ADD_FAILURE() << what << ": " << differences << " floats differ from llama.cpp's, the first at "
                  << first_difference << " (x " << first_difference / 3 % out.width << ", y "
                  << first_difference / 3 / out.width << "): " << out.pixels[first_difference] << " vs "
                  << want;
  }
}

// From llama.cpp's decoded bytes (so JPEGs too): the preprocessing alone, bit for bit.
TEST(ImagePreprocess, EqualsLlamaCppBitForBit) {
  for (const Case& c : read_cases()) {
    const SizedBuffer stb = read_sized(kDataDir + c.input + ".stb.rgb");
    RgbImage image;
    image.width = stb.width;
    image.height = stb.height;
    image.rgb = stb.bytes;
    const PreprocessedImage out = preprocess_qwen_vl(image, spec_of(c));
    expect_same_floats(out, read_sized(kDataDir + c.name + ".f32"), c.name);
  }
}

// The whole path from the file, where decoding is exact.
TEST(ImagePreprocess, PngFileToFloatsEqualsLlamaCpp) {
  for (const Case& c : read_cases()) {
    if (is_jpeg(c.input)) continue;
    const PreprocessedImage out = preprocess_qwen_vl(decode(test::read_file(kDataDir + c.input)), spec_of(c));
    expect_same_floats(out, read_sized(kDataDir + c.name + ".f32"), c.name + " from the file");
  }
}

// ---- sizes -----------------------------------------------------------------------------------------------

TEST(ImagePreprocess, Qwen3vlSpecHasLlamaCppsDefaults) {
  const float mean[3] = {0.5f, 0.5f, 0.5f}, std_[3] = {0.5f, 0.5f, 0.5f};
  const VisionPreprocessSpec spec = qwen3vl_spec(16, 2, mean, std_);
  EXPECT_EQ(spec.min_pixels, 8 * 32 * 32);     // set_limit_image_tokens(8, 4096)
  EXPECT_EQ(spec.max_pixels, 4096 * 32 * 32);  // 4194304
  const VisionPreprocessSpec qwen25 = qwen3vl_spec(14, 2, mean, std_, 1024, 16384);  // --image-min/max-tokens
  EXPECT_EQ(qwen25.min_pixels, 1024 * 28 * 28);
  EXPECT_EQ(qwen25.max_pixels, 16384 * 28 * 28);
  const VisionPreprocessSpec unset = qwen3vl_spec(16, 2, mean, std_, 0, -1);  // not positive: the defaults
  EXPECT_EQ(unset.min_pixels, spec.min_pixels);
  EXPECT_EQ(unset.max_pixels, spec.max_pixels);
}

// Worked by hand from calc_size_preserved_ratio (align 32 = patch 16 x merge 2; min 8192, max 4194304):
TEST(ImagePreprocess, TargetSizesWorkedByHand) {
  const int64_t lo = 8 * 1024, hi = 4096 * 1024;
  auto size = [](int w, int h, int align, int64_t min, int64_t max) {
    const ImageSize s = qwen_vl_target_size(w, h, align, min, max);
    return std::to_string(s.width) + "x" + std::to_string(s.height);
  };
  // 61x37: rounded 64x32 = 2048 < 8192: beta = sqrt(8192 / 2257) = 1.905, ceil(116.2 / 32) = 4 -> 128,
  // ceil(70.5 / 32) = 3 -> 96.
  EXPECT_EQ(size(61, 37, 32, lo, hi), "128x96");
  // 1x1: rounded up to 32x32 = 1024 < 8192: beta = 90.51, ceil(90.51 / 32) = 3 -> 96 each way.
  EXPECT_EQ(size(1, 1, 32, lo, hi), "96x96");
  // 1920x1080: rounded 1920x1088 (33.75 -> 34), within the range.
  EXPECT_EQ(size(1920, 1080, 32, lo, hi), "1920x1088");
  // 4032x3024: rounded 4032x3040 (94.5 -> 95) = 12257280 > 4194304: beta = sqrt(12192768 / 4194304)
  // = 1.7050, floor(2364.8 / 32) = 73 -> 2336, floor(1773.6 / 32) = 55 -> 1760.
  EXPECT_EQ(size(4032, 3024, 32, lo, hi), "2336x1760");
  // 150x100 with max 6 tokens (6144): rounded 160x96 = 15360 > 6144: beta = sqrt(15000 / 6144) = 1.5625
  // exactly, 150 / beta = 96 and 100 / beta = 64, both exact multiples.
  EXPECT_EQ(size(150, 100, 32, 1024, 6 * 1024), "96x64");
  // 64x32 with min 1 token: already aligned and within the range.
  EXPECT_EQ(size(64, 32, 32, 1024, hi), "64x32");
  // 45x80, patch 14 (align 28), min 2 tokens (1568): rounded 56x84 = 4704, within the range.
  EXPECT_EQ(size(45, 80, 28, 2 * 784, 4096 * 784), "56x84");
  // 16384x1: rounded 16384x32 (the height at least one align) = 524288, within the range.
  EXPECT_EQ(size(16384, 1, 32, lo, hi), "16384x32");
}

TEST(ImagePreprocess, TargetSizesEqualLlamaCppsOverAGrid) {
  std::ifstream in(kDataDir + "sizes.txt");
  ASSERT_TRUE(in.good()) << "cannot read " << kDataDir << "sizes.txt";
  std::string line;
  int checked = 0;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream f(line);
    int w, h, patch, merge, min_tokens, max_tokens, want_w, want_h;
    f >> w >> h >> patch >> merge >> min_tokens >> max_tokens >> want_w >> want_h;
    ASSERT_TRUE(bool(f)) << line;
    const float ones[3] = {1, 1, 1};
    const VisionPreprocessSpec spec = qwen3vl_spec(patch, merge, ones, ones, min_tokens, max_tokens);
    const ImageSize s = qwen_vl_target_size(w, h, patch * merge, spec.min_pixels, spec.max_pixels);
    EXPECT_EQ(s.width, want_w) << line;
    EXPECT_EQ(s.height, want_h) << line;
    ++checked;
  }
  EXPECT_GE(checked, 1000);
}

TEST(ImagePreprocess, GridTokensAndPadding) {
  // 50x9 gray, min 1 token: target 64x32; scale min(64 / 50, 32 / 9) = 1.28 gives 64x12, centred
  // with 10 black rows above and 10 below.
  const float mean[3] = {0.5f, 0.5f, 0.5f}, std_[3] = {0.5f, 0.5f, 0.5f};
  RgbImage white;
  white.width = 50;
  white.height = 9;
  white.rgb.assign(50 * 9 * 3, 255);
  const PreprocessedImage out = preprocess_qwen_vl(white, qwen3vl_spec(16, 2, mean, std_, 1, 0));
  ASSERT_EQ(out.width, 64);
  ASSERT_EQ(out.height, 32);
  EXPECT_EQ(out.grid_width, 4);
  EXPECT_EQ(out.grid_height, 2);
  EXPECT_EQ(out.n_tokens, 2);
  for (int y = 0; y < 32; ++y) {
    const float want = y >= 10 && y < 22 ? 1.0f : -1.0f;  // (1 - 0.5) / 0.5 and (0 - 0.5) / 0.5
    for (int x = 0; x < 64; ++x) ASSERT_EQ(out.pixels[(y * 64 + x) * 3 + 1], want) << x << "," << y;
  }
  // The default spec on 61x37: 128x96, an 8x6 patch grid, 4x3 = 12 tokens.
  RgbImage small;
  small.width = 61;
  small.height = 37;
  small.rgb.assign(61 * 37 * 3, 7);
  const PreprocessedImage def = preprocess_qwen_vl(small, qwen3vl_spec(16, 2, mean, std_));
  EXPECT_EQ(def.grid_width, 8);
  EXPECT_EQ(def.grid_height, 6);
  EXPECT_EQ(def.n_tokens, 12);
  EXPECT_EQ(def.pixels.size(), size_t(128 * 96 * 3));
}

TEST(ImagePreprocess, RefusesAnEmptyImageOrSpec) {
  const float mean[3] = {0, 0, 0}, std_[3] = {1, 1, 1};
  EXPECT_THROW(preprocess_qwen_vl(RgbImage{}, qwen3vl_spec(16, 2, mean, std_)), std::invalid_argument);
  RgbImage one{1, 1, {1, 2, 3}};
  EXPECT_THROW(preprocess_qwen_vl(one, VisionPreprocessSpec{}), std::invalid_argument);  // no pixel range
  RgbImage short_buffer{2, 2, {1, 2, 3}};
  EXPECT_THROW(preprocess_qwen_vl(short_buffer, qwen3vl_spec(16, 2, mean, std_)), std::invalid_argument);
  EXPECT_THROW(qwen_vl_target_size(0, 5, 32, 1024, 4096), std::invalid_argument);
  EXPECT_THROW(resize_bilinear_padded(RgbImage{}, {32, 32}), std::invalid_argument);
}

// ---- refusals ---------------------------------------------------------------------------------------

TEST(ImageDecode, SniffsFormats) {
  auto sniff = [](const std::string& s) {
    return sniff_format(reinterpret_cast<const uint8_t*>(s.data()), s.size());
  };
  EXPECT_EQ(sniff(std::string("\x89PNG\r\n\x1a\n....", 12)), ImageFormat::kPng);
  EXPECT_EQ(sniff("\xff\xd8\xff\xe0"), ImageFormat::kJpeg);
  EXPECT_EQ(sniff("RIFF\x10\x20\x30\x40WEBPVP8 "), ImageFormat::kWebp);
  EXPECT_EQ(sniff("GIF89a...."), ImageFormat::kGif);
  EXPECT_EQ(sniff("BM......"), ImageFormat::kBmp);
  EXPECT_EQ(sniff("<html>"), ImageFormat::kUnknown);
  EXPECT_EQ(sniff(std::string("\x89PNG", 4)), ImageFormat::kUnknown);  // too short to tell
  EXPECT_EQ(sniff_format(nullptr, 0), ImageFormat::kUnknown);
}

TEST(ImageDecode, RefusesEmptyAndForeignData) {
  EXPECT_EQ(decode_error({}), ImageErrorKind::kEmpty);
  EXPECT_THROW(decode_image(nullptr, 10), ImageError);
  EXPECT_EQ(decode_error({'<', 'h', 't', 'm', 'l', '>'}), ImageErrorKind::kUnsupportedFormat);
  for (const std::string& head : {std::string("GIF89a\1\0\1\0"), std::string("RIFF\0\0\0\0WEBPVP8 ", 16),
                                  std::string("BM\0\0\0\0\0\0\0\0", 10)}) {
    const std::vector<uint8_t> bytes(head.begin(), head.end());
    try {
      decode_image(bytes.data(), bytes.size());
      ADD_FAILURE() << "decoded " << head;
    } catch (const ImageError& e) {
      EXPECT_EQ(e.kind(), ImageErrorKind::kUnsupportedFormat);
      const std::string name = format_name(sniff_format(bytes.data(), bytes.size()));
      EXPECT_NE(std::string(e.what()).find(name), std::string::npos) << e.what();
    }
  }
}

TEST(ImageDecode, RefusesHugeHeadersBeforeDecoding) {
  // 30000x30000 RGB would be 2.7 GB: refused from the header, nothing allocated.
  const std::vector<uint8_t> header = png_header_only(30000, 30000);
  try {
    decode_image(header.data(), header.size());
    ADD_FAILURE() << "decoded";
  } catch (const ImageError& e) {
    EXPECT_EQ(e.kind(), ImageErrorKind::kTooLarge);
    EXPECT_STREQ(e.what(),
                 "image is 30000x30000, over the limit of 16384 pixels per side; refused before decoding");
  }
  ImageLimits wide_sides;
  wide_sides.max_side = 40000;
  try {
    decode_image(header.data(), header.size(), wide_sides);
    ADD_FAILURE() << "decoded";
  } catch (const ImageError& e) {
    EXPECT_EQ(e.kind(), ImageErrorKind::kTooLarge);
    EXPECT_STREQ(
        e.what(),
        "image is 30000x30000 = 900000000 pixels, over the limit of 67108864; refused before decoding");
  }
  EXPECT_EQ(decode_error(png_header_only(20000, 10)), ImageErrorKind::kTooLarge);
  EXPECT_EQ(decode_error(png_header_only(0xffffffffu, 1)), ImageErrorKind::kTooLarge);
  EXPECT_EQ(decode_error(png_header_only(0, 10)), ImageErrorKind::kCorrupt);

  // A JPEG whose SOF0 says 30000x30000 (and one at 65535, over libjpeg's own 65500).
  const std::vector<uint8_t> jpeg = encode_jpeg(16, 8, 3, JCS_RGB, smooth_rgb(16, 8), 80, false);
  size_t sof = 0;
  for (size_t i = 2; i + 9 < jpeg.size(); ++i) {
    if (jpeg[i] == 0xff && jpeg[i + 1] == 0xc0) {
      sof = i;
      break;
    }
  }
  ASSERT_NE(sof, 0u);
  for (int side : {30000, 65535}) {
    std::vector<uint8_t> huge = jpeg;
    huge[sof + 5] = huge[sof + 7] = uint8_t(side >> 8);  // height, then width, big-endian
    huge[sof + 6] = huge[sof + 8] = uint8_t(side & 0xff);
    EXPECT_EQ(decode_error(huge), ImageErrorKind::kTooLarge) << side;
  }

  // Caller limits: pixels, sides and bytes.
  const std::vector<uint8_t> png =
      encode_png(20, 10, PNG_COLOR_TYPE_RGB, 8, false, pattern(20, 10, 3, 255, 50));
  ImageLimits small;
  small.max_pixels = 127;
  EXPECT_EQ(decode_error(png, small), ImageErrorKind::kTooLarge);
  EXPECT_EQ(decode_error(jpeg, small), ImageErrorKind::kTooLarge);
  small = {};
  small.max_side = 15;
  EXPECT_EQ(decode_error(png, small), ImageErrorKind::kTooLarge);
  EXPECT_EQ(decode_error(jpeg, small), ImageErrorKind::kTooLarge);
  small = {};
  small.max_bytes = png.size() - 1;
  EXPECT_EQ(decode_error(png, small), ImageErrorKind::kTooLarge);
  small.max_bytes = png.size();
  EXPECT_EQ(decode_image(png.data(), png.size(), small).width, 20);
}

// Every prefix of a file is refused (but those that lack only what follows the pixel data), never
// read past.
TEST(ImageDecode, RefusesTruncatedFiles) {
  const std::vector<uint8_t> png =
      encode_png(21, 13, PNG_COLOR_TYPE_RGB_ALPHA, 8, true, pattern(21, 13, 4, 255, 60));
  const size_t png_iend = png.size() - 12;  // the last chunk, IEND, has no data
  for (size_t cut = 0; cut < png_iend; ++cut) {
    const std::vector<uint8_t> prefix(png.begin(), png.begin() + cut);
    const ImageErrorKind want = cut == 0  ? ImageErrorKind::kEmpty
                                : cut < 8 ? ImageErrorKind::kUnsupportedFormat
                                          : ImageErrorKind::kCorrupt;
    EXPECT_EQ(decode_error(prefix), want) << "PNG cut at " << cut << " of " << png.size();
  }
  for (bool progressive : {false, true}) {
    const std::vector<uint8_t> jpeg = encode_jpeg(40, 24, 3, JCS_RGB, smooth_rgb(40, 24), 90, progressive);
    for (size_t cut = 0; cut + 2 < jpeg.size(); ++cut) {  // all but the EOI marker
      const std::vector<uint8_t> prefix(jpeg.begin(), jpeg.begin() + cut);
      const ImageErrorKind want = cut == 0  ? ImageErrorKind::kEmpty
                                  : cut < 3 ? ImageErrorKind::kUnsupportedFormat
                                            : ImageErrorKind::kCorrupt;
      EXPECT_EQ(decode_error(prefix), want) << "JPEG cut at " << cut << " of " << jpeg.size();
    }
  }
}

TEST(ImageDecode, RefusesDamagedFiles) {
  std::vector<uint8_t> png = encode_png(16, 16, PNG_COLOR_TYPE_RGB, 8, false, pattern(16, 16, 3, 255, 70));
  png[png.size() - 20] ^= 0x55;  // inside IDAT: its CRC no longer matches
  EXPECT_EQ(decode_error(png), ImageErrorKind::kCorrupt);
  std::vector<uint8_t> garbage = {0x89, 'P', 'N', 'G', '\r', '\n', 0x1a, '\n'};
  garbage.resize(64, 0x41);
  EXPECT_EQ(decode_error(garbage), ImageErrorKind::kCorrupt);
  EXPECT_EQ(decode_error({0xff, 0xd8, 0xff, 0xd9}), ImageErrorKind::kCorrupt);  // SOI, EOI: no image
}

// Random damage anywhere: an image or an ImageError, nothing else (the fuzz target goes further:
// fuzz/image_decode_fuzz.cpp).
TEST(ImageDecode, SurvivesRandomDamage) {
  const std::vector<std::vector<uint8_t>> files = {
      encode_png(12, 9, PNG_COLOR_TYPE_PALETTE, 4, true, pattern(12, 9, 1, 15, 80),
                 std::vector<png_color>(16, png_color{1, 2, 3})),
      encode_png(10, 7, PNG_COLOR_TYPE_GRAY_ALPHA, 16, false, pattern(10, 7, 2, 65535, 81)),
      encode_jpeg(24, 16, 3, JCS_RGB, smooth_rgb(24, 16), 75, false),
      encode_jpeg(24, 16, 3, JCS_RGB, smooth_rgb(24, 16), 75, true)};
  uint32_t state = 12345;
  auto next = [&] { return state = 1664525u * state + 1013904223u; };
  ImageLimits limits;
  limits.max_pixels = 1 << 16;
  for (const auto& file : files) {
    for (int round = 0; round < 400; ++round) {
      std::vector<uint8_t> damaged = file;
      const int flips = 1 + int(next() >> 29);
      for (int k = 0; k < flips; ++k)
        damaged[(next() >> 8) % damaged.size()] ^= uint8_t(1u << (next() >> 29));
      try {
        const RgbImage image = decode_image(damaged.data(), damaged.size(), limits);
        EXPECT_EQ(image.rgb.size(), size_t(image.width) * image.height * 3);
      } catch (const ImageError&) {
      }
    }
  }
}

}  // namespace
}  // namespace agentkv::image
