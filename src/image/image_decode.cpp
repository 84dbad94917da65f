// PNG and JPEG decoding to RGB (image_decode.h says which of stb_image's conversions are matched).
//
// libpng and libjpeg report errors by longjmp. Every function here that calls setjmp holds only plain
// C data (no object with a destructor), so a longjmp skips no C++ cleanup; the codec structs and the
// pixel buffer belong to the caller, which frees them by RAII whatever the outcome. Decoding runs in
// two such steps: the header (dimensions checked, then the buffer allocated in C++), then the pixels.
//
// JPEG against stb_image (llama.cpp's decoder), measured with a throwaway program (stb_image.h from
// llama.cpp d32676d7 against decode_image) on 10 real JPEGs (llama.cpp's tools/mtmd/test-1.jpeg and
// its UI's 1.jpg, photos and diagrams, 58x493 to 2241x2013) and 28 written by libjpeg-turbo at quality
// 50 / 75 / 90 / 100, 4:2:0 / 4:2:2 / 4:4:4 / gray, baseline and progressive: 29 M samples, 2.7% of
// them differ, mean absolute difference 0.035 levels (per file at most 0.19), largest difference 3
// (gray files: 1) except in 4:2:2 files' right-edge column, where it reached 11 (and 14 in the
// committed ycc422 test file): stb's horizontal upsampler (stbi__resample_row_h_2) weights the wrong
// neighbour for the last chroma sample, off by up to half the step between the last two. The IDCTs
// round differently (gray, 4:4:4), the chroma upsampling and the YCbCr conversion add the rest.
// tests/image_decode_test.cpp holds the committed JPEGs to stb's bytes (tests/data/vision/preprocess).
#include "image/image_decode.h"

#include <algorithm>
#include <csetjmp>
#include <cstdio>
#include <cstring>
#include <string>

#include <jpeglib.h>  // after <cstdio>: it uses FILE
#include <jerror.h>
#include <png.h>

namespace agentkv::image {
namespace {

[[noreturn]] void fail(ImageErrorKind kind, const std::string& message) { throw ImageError(kind, message); }

uint32_t read_be32(const uint8_t* p) {
  return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | uint32_t{p[3]};
}

// ---------------------------------------------------------------------------------------------------
// PNG (libpng's classic API: its simplified API converts 16-bit samples as linear light and composes
// alpha on a background, which is not what stb does).

struct PngInput {  // the read callback's state and the error message: plain data (see the top)
  const uint8_t* data;
  size_t size;
  size_t offset;
  char error[256];
};

void png_read_input(png_structp png, png_bytep out, size_t count) {
  auto* input = static_cast<PngInput*>(png_get_io_ptr(png));
  if (count > input->size - input->offset) png_error(png, "the file ends early (truncated)");
  std::memcpy(out, input->data + input->offset, count);
  input->offset += count;
}

void png_on_error(png_structp png, png_const_charp message) {
  auto* input = static_cast<PngInput*>(png_get_error_ptr(png));
  std::snprintf(input->error, sizeof input->error, "%s", message);
  png_longjmp(png, 1);
}

void png_on_warning(png_structp, png_const_charp) {}  // libpng went on: nothing for the user

bool png_read_header(png_structp png, png_infop info) {
  if (setjmp(png_jmpbuf(png))) return false;
  png_read_info(png, info);
  return true;
}

// The transformations to stb's bytes: palettes and low bit depths expanded, 16 bits to their high
// byte (png_set_strip_16 truncates; png_set_scale_16 would round), alpha and tRNS dropped
// (png_set_strip_alpha also cancels the tRNS expansion), gray replicated. No gamma call: raw samples.
bool png_read_rgb(png_structp png, png_infop info, png_bytep* rows, size_t row_bytes) {
  if (setjmp(png_jmpbuf(png))) return false;
  const int color_type = png_get_color_type(png, info);
  const int bit_depth = png_get_bit_depth(png, info);
  if (color_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (bit_depth == 16) png_set_strip_16(png);
  png_set_strip_alpha(png);
  if (color_type == PNG_COLOR_TYPE_GRAY || color_type == PNG_COLOR_TYPE_GRAY_ALPHA) png_set_gray_to_rgb(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  if (png_get_channels(png, info) != 3 || png_get_bit_depth(png, info) != 8 ||
      png_get_rowbytes(png, info) != row_bytes) {
    png_error(png, "unexpected pixel layout after conversion to RGB");
  }
  // Reading stops after the last row: what follows the image data (IEND, trailing chunks) is not
  // needed for the pixels, and stb does not check it either.
  png_read_image(png, rows);
  return true;
}

struct PngStructs {  // frees libpng's state on every path
  png_structp png = nullptr;
  png_infop info = nullptr;
  ~PngStructs() { png_destroy_read_struct(&png, info ? &info : nullptr, nullptr); }
};

RgbImage decode_png(const uint8_t* data, size_t size, const ImageLimits& limits) {
  // The IHDR chunk must come first, at a fixed place: its dimensions are checked before libpng runs.
  constexpr size_t kIhdrEnd = 8 + 8 + 13;
  if (size < kIhdrEnd) fail(ImageErrorKind::kCorrupt, "PNG file ends inside its header (truncated)");
  if (std::memcmp(data + 12, "IHDR", 4) != 0)
    fail(ImageErrorKind::kCorrupt, "PNG file does not start with IHDR");
  check_dimensions(read_be32(data + 16), read_be32(data + 20), limits);

  PngInput input{data, size, 0, {}};
  PngStructs s;
  s.png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &input, png_on_error, png_on_warning);
  if (s.png == nullptr) fail(ImageErrorKind::kTooLarge, "out of memory starting the PNG decoder");
  s.info = png_create_info_struct(s.png);
  if (s.info == nullptr) fail(ImageErrorKind::kTooLarge, "out of memory starting the PNG decoder");
  png_set_read_fn(s.png, &input, png_read_input);
  png_set_user_limits(s.png, static_cast<png_uint_32>(limits.max_side),
                      static_cast<png_uint_32>(limits.max_side));
  // Text and ICC chunks are never used: skipped unread, so their compressed contents cost nothing.
  static const png_byte kIgnoredChunks[] = "iCCP\0iTXt\0tEXt\0zTXt\0sPLT\0eXIf";
  png_set_keep_unknown_chunks(s.png, PNG_HANDLE_CHUNK_NEVER, kIgnoredChunks, 6);
  png_set_chunk_malloc_max(s.png, 8u << 20);

  if (!png_read_header(s.png, s.info))
    fail(ImageErrorKind::kCorrupt, std::string("corrupt PNG: ") + input.error);
  const int64_t width = png_get_image_width(s.png, s.info);
  const int64_t height = png_get_image_height(s.png, s.info);
  check_dimensions(width, height, limits);

  RgbImage image;
  image.width = static_cast<int>(width);
  image.height = static_cast<int>(height);
  const size_t row_bytes = static_cast<size_t>(width) * 3;
  image.rgb.resize(row_bytes * static_cast<size_t>(height));
  std::vector<png_bytep> rows(static_cast<size_t>(height));
  for (size_t y = 0; y < rows.size(); ++y) rows[y] = image.rgb.data() + y * row_bytes;
  if (!png_read_rgb(s.png, s.info, rows.data(), row_bytes)) {
    fail(ImageErrorKind::kCorrupt, std::string("corrupt PNG: ") + input.error);
  }
  return image;
}

// ---------------------------------------------------------------------------------------------------
// JPEG (libjpeg-turbo)

constexpr int kMaxJpegScans = 256;  // a real progressive file has about 10; thousands are a CPU bomb

struct JpegErrorManager {
  jpeg_error_mgr pub;  // first: libjpeg hands back cinfo->err
  std::jmp_buf jump;
  char message[JMSG_LENGTH_MAX + 64];
  int error_code;  // the J_MESSAGE_CODE that stopped decoding, or -1 for our own reasons
};

[[noreturn]] void jpeg_stop(j_common_ptr cinfo) {
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  err->error_code = cinfo->err->msg_code;
  (*cinfo->err->format_message)(cinfo, err->message);
  std::longjmp(err->jump, 1);
}

void jpeg_on_error(j_common_ptr cinfo) { jpeg_stop(cinfo); }

// Warnings libjpeg recovers from by guessing (truncated or damaged entropy data) stop decoding: the
// image would be partly invented. Harmless ones (extraneous bytes between markers, an unknown Adobe
// transform code) are let through, as real encoders produce them.
void jpeg_on_message(j_common_ptr cinfo, int level) {
  if (level >= 0) return;  // trace output
  const int code = cinfo->err->msg_code;
  if (code == JWRN_JPEG_EOF || code == JWRN_HIT_MARKER || code == JWRN_HUFF_BAD_CODE ||
      code == JWRN_ARITH_BAD_CODE || code == JWRN_MUST_RESYNC) {
    jpeg_stop(cinfo);
  }
  ++cinfo->err->num_warnings;
}

void jpeg_on_progress(j_common_ptr cinfo) {
  auto* decompress = reinterpret_cast<j_decompress_ptr>(cinfo);
  if (decompress->input_scan_number <= kMaxJpegScans) return;
  auto* err = reinterpret_cast<JpegErrorManager*>(cinfo->err);
  err->error_code = -1;
  std::snprintf(err->message, sizeof err->message, "more than %d scans", kMaxJpegScans);
  std::longjmp(err->jump, 1);
}

bool jpeg_open(j_decompress_ptr cinfo, JpegErrorManager* err, const uint8_t* data, size_t size,
               bool* created) {
  if (setjmp(err->jump)) return false;
  jpeg_create_decompress(cinfo);
  *created = true;
  jpeg_mem_src(cinfo, data, static_cast<unsigned long>(size));
  if (jpeg_read_header(cinfo, TRUE) != JPEG_HEADER_OK) {
    err->error_code = -1;
    std::snprintf(err->message, sizeof err->message, "no image in the file (only tables)");
    return false;
  }
  return true;
}

// How stb_image turns an Adobe CMYK / YCCK pixel into RGB: a rounded product with K (stbi__blinn_8x8).
uint8_t blinn_8x8(uint8_t x, uint8_t y) {
  const unsigned t = unsigned{x} * y + 128;
  return static_cast<uint8_t>((t + (t >> 8)) >> 8);
}

enum class FourChannel { kNone, kCmyk, kInvertedNoK };

// Decodes every row into rgb (width * 3 per row); four-channel files go through cmyk_row.
bool jpeg_read_rgb(j_decompress_ptr cinfo, JpegErrorManager* err, uint8_t* rgb, uint8_t* cmyk_row,
                   FourChannel four) {
  if (setjmp(err->jump)) return false;
  jpeg_start_decompress(cinfo);
  const size_t width = cinfo->output_width;
  while (cinfo->output_scanline < cinfo->output_height) {
    uint8_t* out = rgb + static_cast<size_t>(cinfo->output_scanline) * width * 3;
    JSAMPROW row = four == FourChannel::kNone ? out : cmyk_row;
    if (jpeg_read_scanlines(cinfo, &row, 1) != 1) {
      err->error_code = -1;
      std::snprintf(err->message, sizeof err->message, "no scan line returned");
      return false;
    }
    if (four == FourChannel::kNone) continue;
    for (size_t x = 0; x < width; ++x) {
      const uint8_t* cmyk = cmyk_row + x * 4;
      for (int c = 0; c < 3; ++c) {
        out[x * 3 + c] =
            four == FourChannel::kCmyk ? blinn_8x8(cmyk[c], cmyk[3]) : static_cast<uint8_t>(255 - cmyk[c]);
      }
    }
  }
  // jpeg_finish_decompress is not called: it would read on to EOI, which the pixels do not need (stb
  // does not insist on it either); jpeg_destroy_decompress cleans up.
  return true;
}

struct JpegStructs {  // frees libjpeg's state on every path
  jpeg_decompress_struct cinfo{};
  JpegErrorManager err{};
  jpeg_progress_mgr progress{};
  bool created = false;
  ~JpegStructs() {
    if (created) jpeg_destroy_decompress(&cinfo);
  }
};

[[noreturn]] void fail_jpeg(const JpegErrorManager& err) {
  switch (err.error_code) {
    case JERR_IMAGE_TOO_BIG:
    case JERR_OUT_OF_MEMORY:
    case JERR_NO_BACKING_STORE:
      fail(ImageErrorKind::kTooLarge, std::string("JPEG too large to decode: ") + err.message);
    case JERR_BAD_PRECISION:
    case JERR_CONVERSION_NOTIMPL:
      fail(ImageErrorKind::kUnsupportedFormat, std::string("unsupported JPEG: ") + err.message);
    default: fail(ImageErrorKind::kCorrupt, std::string("corrupt JPEG: ") + err.message);
  }
}

// stb_image's choice of colour model (load_jpeg_image), which libjpeg would make differently for
// some files: three components are RGB when their ids are 'R' 'G' 'B', or when an Adobe marker says
// "no transform" and there is no JFIF marker; YCbCr otherwise. Four components are CMYK (Adobe
// transform 0) or YCCK (transform 2), both multiplied by K; any other four-component file stb reads as
// YCbCr and drops the fourth channel (decoded here as YCCK, whose C, M, Y are 255 - R, G, B).
FourChannel set_stb_color_model(j_decompress_ptr cinfo) {
  cinfo->out_color_space = JCS_RGB;
  if (cinfo->num_components == 1) {
    cinfo->jpeg_color_space = JCS_GRAYSCALE;
    return FourChannel::kNone;
  }
  if (cinfo->num_components == 3) {
    const jpeg_component_info* c = cinfo->comp_info;
    const bool rgb_ids = c[0].component_id == 'R' && c[1].component_id == 'G' && c[2].component_id == 'B';
    const bool adobe_rgb = cinfo->saw_Adobe_marker && cinfo->Adobe_transform == 0 && !cinfo->saw_JFIF_marker;
    cinfo->jpeg_color_space = rgb_ids || adobe_rgb ? JCS_RGB : JCS_YCbCr;
    return FourChannel::kNone;
  }
  if (cinfo->num_components == 4) {
    cinfo->out_color_space = JCS_CMYK;
    const int transform = cinfo->saw_Adobe_marker ? cinfo->Adobe_transform : -1;
    cinfo->jpeg_color_space = transform == 0 ? JCS_CMYK : JCS_YCCK;
    return transform == 0 || transform == 2 ? FourChannel::kCmyk : FourChannel::kInvertedNoK;
  }
  fail(ImageErrorKind::kUnsupportedFormat, "unsupported JPEG: " + std::to_string(cinfo->num_components) +
                                               " colour components (1, 3 or 4 are read)");
}

RgbImage decode_jpeg(const uint8_t* data, size_t size, const ImageLimits& limits) {
  JpegStructs s;
  s.cinfo.err = jpeg_std_error(&s.err.pub);
  s.err.pub.error_exit = jpeg_on_error;
  s.err.pub.emit_message = jpeg_on_message;
  if (!jpeg_open(&s.cinfo, &s.err, data, size, &s.created)) fail_jpeg(s.err);
  check_dimensions(s.cinfo.image_width, s.cinfo.image_height, limits);

  const FourChannel four = set_stb_color_model(&s.cinfo);
  s.cinfo.dct_method = JDCT_ISLOW;     // stb's IDCT is derived from this one
  s.cinfo.do_fancy_upsampling = TRUE;  // stb interpolates chroma too
  s.cinfo.do_block_smoothing = FALSE;  // stb does not smooth progressive files' early scans
  s.cinfo.progress = &s.progress;
  s.progress.progress_monitor = jpeg_on_progress;
  // A progressive file keeps every coefficient (up to 8 bytes a pixel); more than that is refused.
  const int64_t pixels = int64_t{s.cinfo.image_width} * s.cinfo.image_height;
  s.cinfo.mem->max_memory_to_use = static_cast<long>(16 * pixels + (64 << 20));

  RgbImage image;
  image.width = static_cast<int>(s.cinfo.image_width);
  image.height = static_cast<int>(s.cinfo.image_height);
  image.rgb.resize(static_cast<size_t>(pixels) * 3);
  std::vector<uint8_t> cmyk_row(four == FourChannel::kNone ? 0 : static_cast<size_t>(image.width) * 4);
  if (!jpeg_read_rgb(&s.cinfo, &s.err, image.rgb.data(), cmyk_row.data(), four)) fail_jpeg(s.err);
  if (static_cast<int>(s.cinfo.output_width) != image.width ||
      static_cast<int>(s.cinfo.output_height) != image.height) {
    fail(ImageErrorKind::kCorrupt, "corrupt JPEG: the decoder's size differs from the header's");
  }
  return image;
}

}  // namespace

const char* format_name(ImageFormat format) {
  switch (format) {
    case ImageFormat::kPng: return "PNG";
    case ImageFormat::kJpeg: return "JPEG";
    case ImageFormat::kWebp: return "WebP";
    case ImageFormat::kGif: return "GIF";
    case ImageFormat::kBmp: return "BMP";
    case ImageFormat::kUnknown: break;
  }
  return "unknown";
}

ImageFormat sniff_format(const uint8_t* data, size_t size) {
  auto starts_with = [&](const char* magic, size_t n, size_t at = 0) {
    return size >= at + n && std::memcmp(data + at, magic, n) == 0;
  };
  if (data == nullptr) return ImageFormat::kUnknown;
  if (starts_with("\x89PNG\r\n\x1a\n", 8)) return ImageFormat::kPng;
  if (starts_with("\xff\xd8\xff", 3)) return ImageFormat::kJpeg;
  if (starts_with("RIFF", 4) && starts_with("WEBP", 4, 8)) return ImageFormat::kWebp;
  if (starts_with("GIF87a", 6) || starts_with("GIF89a", 6)) return ImageFormat::kGif;
  if (starts_with("BM", 2)) return ImageFormat::kBmp;
  return ImageFormat::kUnknown;
}

void check_dimensions(int64_t width, int64_t height, const ImageLimits& limits) {
  const std::string size = std::to_string(width) + "x" + std::to_string(height);
  if (width <= 0 || height <= 0) fail(ImageErrorKind::kCorrupt, "image has no pixels (" + size + ")");
  if (width > limits.max_side || height > limits.max_side) {
    fail(ImageErrorKind::kTooLarge, "image is " + size + ", over the limit of " +
                                        std::to_string(limits.max_side) +
                                        " pixels per side; refused before decoding");
  }
  if (width * height > limits.max_pixels) {
    fail(ImageErrorKind::kTooLarge, "image is " + size + " = " + std::to_string(width * height) +
                                        " pixels, over the limit of " + std::to_string(limits.max_pixels) +
                                        "; refused before decoding");
  }
}

RgbImage decode_image(const uint8_t* data, size_t size, const ImageLimits& limits) {
  if (data == nullptr || size == 0) fail(ImageErrorKind::kEmpty, "the image is empty (0 bytes)");
  if (size > limits.max_bytes) {
    fail(ImageErrorKind::kTooLarge, "the image file is " + std::to_string(size) +
                                        " bytes, over the limit of " + std::to_string(limits.max_bytes));
  }
  const ImageFormat format = sniff_format(data, size);
  switch (format) {
    case ImageFormat::kPng: return decode_png(data, size, limits);
    case ImageFormat::kJpeg: return decode_jpeg(data, size, limits);
    case ImageFormat::kUnknown: {
      char head[3 * 8 + 1] = {};
      for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) std::snprintf(head + 3 * i, 4, " %02x", data[i]);
      fail(ImageErrorKind::kUnsupportedFormat,
           std::string("unrecognised image format (the data starts with") + head +
               "); PNG and JPEG are supported");
    }
    default:
      fail(ImageErrorKind::kUnsupportedFormat,
           std::string(format_name(format)) + " images are not supported; PNG and JPEG are");
  }
}

}  // namespace agentkv::image
