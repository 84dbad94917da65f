// llama.cpp's own decoding and Qwen-VL preprocessing, for tests/data/vision/preprocess/ (what
// tests/image_decode_test.cpp holds src/image/ to). Not part of agentkv's build; nothing of llama.cpp
// is copied: it links llama.cpp's libmtmd and calls, unchanged,
// - mtmd_helper_bitmap_init_from_buf: the image file to RGB bytes (stb_image, 3 channels), and
// - mtmd_image_preprocessor_dyn_size::preprocess: the preprocessor mtmd.cpp picks for
//   PROJECTOR_TYPE_QWEN2VL / QWEN25VL / QWEN3VL, on clip_hparams set as clip.cpp's loader sets them
//   for those projectors (n_merge, RESIZE_ALGO_BILINEAR, set_limit_image_tokens(8, 4096) with the
//   --image-min-tokens / --image-max-tokens overrides, image_mean / image_std).
// The preprocessor reads its hparams through clip_get_hparams(ctx), which only offsets the pointer
// (&ctx->model.hparams), so a zeroed block stands in for a clip_ctx: no model file is needed.
//
// Build (llama.cpp d32676d7 with -DLLAMA_BUILD_MTMD=ON, as tests/reference/README.md; L its checkout):
//   L=../peer/llama.cpp
//   g++ -O2 -std=c++17 tests/reference/mtmd_preprocess_reference.cpp -I $L/tools/mtmd -I $L/include \
//       -I $L/ggml/include -I $L/vendor -L $L/build/bin -lmtmd -lllama -lggml -lggml-base -lpng -ljpeg \
//       -Wl,-rpath,$L/build/bin -o mtmd_preprocess_reference
// Run (from the repository root; D = tests/data/vision/preprocess):
//   ./mtmd_preprocess_reference make-inputs $D   # the input images (libpng / libjpeg, deterministic)
//   ./mtmd_preprocess_reference run $D           # NAME.stb.rgb per input, CASE.f32 per line of cases.txt
//   ./mtmd_preprocess_reference sizes $D         # sizes.txt: target sizes over a grid of inputs
// File formats (little-endian): .stb.rgb = int32 width, int32 height, width*height*3 bytes;
// .f32 = int32 nx, int32 ny, nx*ny*3 floats (clip_image_f32's buf: interleaved RGB, row-major).
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <vector>

#include <jpeglib.h>
#include <png.h>

#include "mtmd-helper.h"
#include "mtmd-image.h"

namespace {

[[noreturn]] void die(const std::string& message) {
  std::fprintf(stderr, "mtmd_preprocess_reference: %s\n", message.c_str());
  std::exit(1);
}

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) die("cannot read " + path);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

void write_bytes(const std::string& path, const void* data, size_t size) {
  std::ofstream f(path, std::ios::binary);
  f.write(static_cast<const char*>(data), static_cast<std::streamsize>(size));
  if (!f) die("cannot write " + path);
}

void write_with_size(const std::string& path, int32_t nx, int32_t ny, const void* data, size_t size) {
  std::vector<uint8_t> out(8 + size);
  std::memcpy(out.data(), &nx, 4);
  std::memcpy(out.data() + 4, &ny, 4);
  std::memcpy(out.data() + 8, data, size);
  write_bytes(path, out.data(), out.size());
}

// ---- inputs -----------------------------------------------------------------------------------------

uint32_t lcg_state = 12345;
int noise(int amplitude) {  // uniform in [-amplitude, amplitude]
  lcg_state = 1664525u * lcg_state + 1013904223u;
  return static_cast<int>((lcg_state >> 16) % (2 * amplitude + 1)) - amplitude;
}

int clamp(int v, int hi) { return v < 0 ? 0 : v > hi ? hi : v; }

// Photo-like samples: smooth ramps and a blob, plus noise; channel c of pixel (x, y) in [0, max].
int sample(int x, int y, int c, int w, int h, int max, int amplitude) {
  const double u = double(x) / w, v = double(y) / h;
  const double blob = std::exp(-((u - 0.6) * (u - 0.6) + (v - 0.4) * (v - 0.4)) * 12.0);
  const double base = c == 0 ? u : c == 1 ? v : 0.5 * (1 - u) + 0.5 * blob;
  return clamp(static_cast<int>(base * max) + noise(amplitude), max);
}

void write_png(const std::string& path, int w, int h, int color_type, int bit_depth, bool interlaced) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) die("cannot write " + path);
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, nullptr, nullptr, nullptr);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) die("libpng failed on " + path);
  png_init_io(png, f);
  png_set_IHDR(png, info, w, h, bit_depth, color_type, interlaced ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE,
               PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  if (color_type == PNG_COLOR_TYPE_PALETTE) {
    std::vector<png_color> palette(1u << bit_depth);
    std::vector<png_byte> alpha(palette.size());
    for (size_t i = 0; i < palette.size(); ++i) {
      palette[i] = {png_byte(i * 37 % 256), png_byte(255 - i * 11 % 256), png_byte(i * 91 % 256)};
      alpha[i] = png_byte(i * 17 % 256);
    }
    png_set_PLTE(png, info, palette.data(), static_cast<int>(palette.size()));
    png_set_tRNS(png, info, alpha.data(), static_cast<int>(alpha.size()), nullptr);
  }
  png_set_gAMA(png, info, 0.7);  // stb ignores it; so must the decoder under test
  png_write_info(png, info);
  if (bit_depth == 16) png_set_swap(png);  // rows below are little-endian uint16
  const int channels = png_get_channels(png, info);
  const int max = color_type == PNG_COLOR_TYPE_PALETTE ? (1 << bit_depth) - 1 : (1 << bit_depth) - 1;
  std::vector<std::vector<uint8_t>> rows(h);
  for (int y = 0; y < h; ++y) {
    std::vector<int> samples;
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < channels; ++c) samples.push_back(sample(x, y, c % 3, w, h, max, max / 12 + 1));
    }
    std::vector<uint8_t>& row = rows[y];
    if (bit_depth == 16) {
      for (int s : samples) row.push_back(uint8_t(s & 0xff)), row.push_back(uint8_t(s >> 8));
    } else if (bit_depth == 8) {
      for (int s : samples) row.push_back(uint8_t(s));
    } else {  // packed, most significant bits first
      row.assign((samples.size() * bit_depth + 7) / 8, 0);
      for (size_t i = 0; i < samples.size(); ++i) {
        const size_t bit = i * bit_depth;
        row[bit / 8] |= uint8_t(samples[i] << (8 - bit_depth - bit % 8));
      }
    }
  }
  std::vector<png_bytep> pointers;
  for (auto& row : rows) pointers.push_back(row.data());
  png_write_image(png, pointers.data());
  png_write_end(png, info);
  png_destroy_write_struct(&png, &info);
  std::fclose(f);
}

enum class JpegKind { kYcc420, kYcc422, kYcc444Progressive, kGray, kCmyk, kYcck };

void write_jpeg(const std::string& path, int w, int h, JpegKind kind, int quality) {
  jpeg_compress_struct cinfo;
  jpeg_error_mgr err;
  cinfo.err = jpeg_std_error(&err);
  jpeg_create_compress(&cinfo);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) die("cannot write " + path);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = w;
  cinfo.image_height = h;
  const bool four = kind == JpegKind::kCmyk || kind == JpegKind::kYcck;
  cinfo.input_components = kind == JpegKind::kGray ? 1 : four ? 4 : 3;
  cinfo.in_color_space = kind == JpegKind::kGray ? JCS_GRAYSCALE : four ? JCS_CMYK : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  if (kind == JpegKind::kCmyk) jpeg_set_colorspace(&cinfo, JCS_CMYK);  // Adobe marker, transform 0
  if (kind == JpegKind::kYcck) jpeg_set_colorspace(&cinfo, JCS_YCCK);  // Adobe marker, transform 2
  jpeg_set_quality(&cinfo, quality, TRUE);
  if (kind == JpegKind::kYcc422) cinfo.comp_info[0].v_samp_factor = 1;
  if (kind == JpegKind::kYcc444Progressive) {
    cinfo.comp_info[0].h_samp_factor = cinfo.comp_info[0].v_samp_factor = 1;
    jpeg_simple_progression(&cinfo);
  }
  jpeg_start_compress(&cinfo, TRUE);
  std::vector<uint8_t> row(size_t(w) * cinfo.input_components);
  while (cinfo.next_scanline < cinfo.image_height) {
    const int y = cinfo.next_scanline;
    for (int x = 0; x < w; ++x) {
      for (int c = 0; c < cinfo.input_components; ++c)
        row[x * cinfo.input_components + c] = uint8_t(sample(x, y, c % 3, w, h, 255, 6));
    }
    JSAMPROW p = row.data();
    jpeg_write_scanlines(&cinfo, &p, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  std::fclose(f);
}

void make_inputs(const std::string& dir) {
  write_png(dir + "/rgb8-61x37.png", 61, 37, PNG_COLOR_TYPE_RGB, 8, false);
  write_png(dir + "/rgb8-64x32.png", 64, 32, PNG_COLOR_TYPE_RGB, 8, false);
  write_png(dir + "/rgb8-100x70.png", 100, 70, PNG_COLOR_TYPE_RGB, 8, false);
  write_png(dir + "/rgba8-45x80.png", 45, 80, PNG_COLOR_TYPE_RGB_ALPHA, 8, false);
  write_png(dir + "/gray8-33x20.png", 33, 20, PNG_COLOR_TYPE_GRAY, 8, false);
  write_png(dir + "/gray1-50x9.png", 50, 9, PNG_COLOR_TYPE_GRAY, 1, false);
  write_png(dir + "/graya16-24x30.png", 24, 30, PNG_COLOR_TYPE_GRAY_ALPHA, 16, false);
  write_png(dir + "/palette4-40x25.png", 40, 25, PNG_COLOR_TYPE_PALETTE, 4, false);
  write_png(dir + "/rgb16-adam7-29x31.png", 29, 31, PNG_COLOR_TYPE_RGB, 16, true);
  write_jpeg(dir + "/ycc420-q90-70x46.jpg", 70, 46, JpegKind::kYcc420, 90);
  write_jpeg(dir + "/ycc422-q75-50x30.jpg", 50, 30, JpegKind::kYcc422, 75);
  write_jpeg(dir + "/ycc444-progressive-q95-48x40.jpg", 48, 40, JpegKind::kYcc444Progressive, 95);
  write_jpeg(dir + "/gray-q85-40x30.jpg", 40, 30, JpegKind::kGray, 85);
  write_jpeg(dir + "/cmyk-q90-32x24.jpg", 32, 24, JpegKind::kCmyk, 90);
  write_jpeg(dir + "/ycck-q90-32x24.jpg", 32, 24, JpegKind::kYcck, 90);
}

// ---- llama.cpp ----------------------------------------------------------------------------------------

struct Decoded {
  int nx = 0, ny = 0;
  std::vector<uint8_t> rgb;
};

Decoded stb_decode(const std::string& path) {  // mtmd's decoder, as llama-server and mtmd-cli call it
  const std::vector<uint8_t> file = read_bytes(path);
  mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_buf(nullptr, file.data(), file.size(), false);
  if (w.bitmap == nullptr) die("llama.cpp cannot decode " + path);
  Decoded d;
  d.nx = static_cast<int>(mtmd_bitmap_get_nx(w.bitmap));
  d.ny = static_cast<int>(mtmd_bitmap_get_ny(w.bitmap));
  const uint8_t* data = mtmd_bitmap_get_data(w.bitmap);
  d.rgb.assign(data, data + mtmd_bitmap_get_n_bytes(w.bitmap));
  mtmd_bitmap_free(w.bitmap);
  return d;
}

struct Spec {
  int patch_size = 16, merge = 2, min_tokens = 0, max_tokens = 0;
  float mean[3] = {}, std[3] = {};
};

// A clip_ctx stand-in holding clip_hparams where clip_get_hparams looks for them.
class FakeClip {
 public:
  explicit FakeClip(const Spec& spec) {
    storage_.assign(1 << 20, 0);
    ctx_ = reinterpret_cast<clip_ctx*>(storage_.data());
    auto* where = reinterpret_cast<uint8_t*>(const_cast<clip_hparams*>(clip_get_hparams(ctx_)));
    if (where < storage_.data() || where + sizeof(clip_hparams) > storage_.data() + storage_.size()) {
      die("clip_hparams lies outside the stand-in clip_ctx");
    }
    hparams_ = new (where) clip_hparams();
    // clip.cpp, clip_model_loader::load_hparams, case PROJECTOR_TYPE_QWEN3VL (and QWEN2VL / QWEN25VL):
    hparams_->patch_size = spec.patch_size;
    hparams_->n_merge = spec.merge;
    hparams_->image_resize_algo = RESIZE_ALGO_BILINEAR;
    hparams_->custom_image_min_tokens = spec.min_tokens > 0 ? spec.min_tokens : -1;
    hparams_->custom_image_max_tokens = spec.max_tokens > 0 ? spec.max_tokens : -1;
    hparams_->set_limit_image_tokens(8, 4096);
    for (int c = 0; c < 3; ++c) {
      hparams_->image_mean[c] = spec.mean[c];
      hparams_->image_std[c] = spec.std[c];
    }
  }
  ~FakeClip() { hparams_->~clip_hparams(); }
  const clip_ctx* ctx() const { return ctx_; }

 private:
  std::vector<uint8_t> storage_;
  clip_ctx* ctx_ = nullptr;
  clip_hparams* hparams_ = nullptr;
};

clip_image_f32 preprocess(const Spec& spec, const clip_image_u8& image) {
  FakeClip clip(spec);
  mtmd_image_preprocessor_dyn_size preprocessor(clip.ctx());
  mtmd_image_preproc_out out = preprocessor.preprocess(image);
  if (out.entries.size() != 1) die("expected one preprocessed image");
  return std::move(out.entries[0]);
}

void run(const std::string& dir) {
  std::ifstream cases(dir + "/cases.txt");
  if (!cases) die("cannot read " + dir + "/cases.txt");
  std::string line;
  std::vector<std::string> decoded_inputs;
  while (std::getline(cases, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream in(line);
    std::string name, input, mean[3], std_[3];
    Spec spec;
    in >> name >> input >> spec.patch_size >> spec.merge >> spec.min_tokens >> spec.max_tokens >> mean[0] >>
        mean[1] >> mean[2] >> std_[0] >> std_[1] >> std_[2];
    if (!in) die("bad line in cases.txt: " + line);
    for (int c = 0; c < 3; ++c) {  // strtof, as the unit test parses them: the same floats
      spec.mean[c] = std::strtof(mean[c].c_str(), nullptr);
      spec.std[c] = std::strtof(std_[c].c_str(), nullptr);
    }
    const Decoded d = stb_decode(dir + "/" + input);
    write_with_size(dir + "/" + input + ".stb.rgb", d.nx, d.ny, d.rgb.data(), d.rgb.size());
    clip_image_u8 image;
    image.set_size({d.nx, d.ny}, false);
    image.cpy_buf(d.rgb);
    const clip_image_f32 out = preprocess(spec, image);
    const std::vector<float>& buf = out.get_ro_buf();
    write_with_size(dir + "/" + name + ".f32", out.nx(), out.ny(), buf.data(), buf.size() * sizeof(float));
    std::printf("%s: %s %dx%d -> %dx%d\n", name.c_str(), input.c_str(), d.nx, d.ny, out.nx(), out.ny());
  }
}

// Target sizes from the preprocessor itself, on placeholder images (no pixels: mtmd only sizes them).
void sizes(const std::string& dir) {
  const int specs[][4] = {{16, 2, 0, 0}, {14, 2, 0, 0}, {16, 2, 1024, 16384}, {16, 2, 0, 64}};
  const int sides[] = {1,   3,   16,  17,  31,   33,   48,   63,   65,   127,
                       224, 333, 511, 720, 1080, 1920, 4032, 8192, 16384};
  std::string out =
      "# w h patch merge min_tokens max_tokens -> W H (0 tokens: llama.cpp's default 8 / 4096)\n";
  for (const auto& s : specs) {
    Spec spec;
    spec.patch_size = s[0];
    spec.merge = s[1];
    spec.min_tokens = s[2];
    spec.max_tokens = s[3];
    for (int w : sides) {
      for (int h : sides) {
        if (int64_t{w} * h > int64_t{1} << 26) continue;  // ImageLimits' default: agentkv refuses larger
        clip_image_u8 image;
        image.set_size({w, h}, true);
        const clip_image_f32 f = preprocess(spec, image);
        out += std::to_string(w) + " " + std::to_string(h) + " " + std::to_string(s[0]) + " " +
               std::to_string(s[1]) + " " + std::to_string(s[2]) + " " + std::to_string(s[3]) + " " +
               std::to_string(f.nx()) + " " + std::to_string(f.ny()) + "\n";
      }
    }
  }
  write_bytes(dir + "/sizes.txt", out.data(), out.size());
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) die("usage: mtmd_preprocess_reference make-inputs|run|sizes DIR");
  const std::string mode = argv[1], dir = argv[2];
  if (mode == "make-inputs")
    make_inputs(dir);
  else if (mode == "run")
    run(dir);
  else if (mode == "sizes")
    sizes(dir);
  else
    die("unknown mode " + mode);
  return 0;
}
