// Images into a language model that reads them (Qwen3.5 with its vision projector, an mmproj GGUF
// of llama.cpp's qwen3vl_merger kind): decode a PNG / JPEG, preprocess it as llama.cpp's mtmd does,
// encode it into rows of the language model's input embeddings, and lay those rows into a Batch at
// the positions mtmd gives them (docs/vision.md).
#pragma once
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/batch.h"
#include "agentkv/model.h"

namespace agentkv {

// An encoded image: n_tokens rows of n_embd floats, the merged patch grid in raster order.
struct ImageEmbedding {
  int64_t n_tokens = 0;
  int64_t n_embd = 0;
  int64_t grid_x = 0, grid_y = 0;      // merged tokens per row / per column
  int64_t pixels_x = 0, pixels_y = 0;  // the preprocessed image fed to the encoder
  int64_t source_x = 0, source_y = 0;  // the decoded image
  std::vector<float> rows;
  // XXH3 of the decoded RGB bytes, their size and the preprocessing: equal images give equal rows
  // from one projector, so the prefix index keys image rows by it (image_row_token).
  uint64_t content_hash = 0;
  double decode_seconds = 0;  // the file into pixels
  double encode_seconds = 0;  // preprocessing and the projector
  // VisionEncoder::prepare: the preprocessed pixels, until VisionEncoder::project runs the
  // projector on them and fills `rows` (null once projected, and for an image from the cache).
  struct Pending;
  std::shared_ptr<const Pending> pending;
  bool projected() const { return !rows.empty(); }
};

// What bounds the images a request may send (checked from the header, before decoding).
struct ImageInputLimits {
  size_t max_bytes = size_t{64} << 20;
  int64_t max_pixels = int64_t{8192} * 8192;
  int max_side = 16384;
};

class VisionEncoder {
 public:
  // Loads the projector; throws agentkv::Error naming the file and the problem.
  static std::unique_ptr<VisionEncoder> load(const std::string& mmproj_path, int n_threads);
  ~VisionEncoder();

  // Floats per image token the projector writes: the language model width, times 1 + its
  // deepstack layers (Qwen3-VL).
  int64_t output_width() const;
  // XXH3 of the projector file: what cached image rows depend on besides the image (a prefix
  // cache's salt takes it).
  uint64_t fingerprint() const;
  // Throws agentkv::Error when `model` cannot take this projector's rows (an architecture without
  // image input, or a width that differs), saying which.
  void check_language_model(const Model& model) const;

  // Decodes, preprocesses and encodes one image file (PNG or JPEG). Throws agentkv::Error with a
  // message for the user on any image it refuses (empty, unsupported format, corrupt, too large).
  // An image whose file bytes were encoded before comes from the encoder cache (bounded by
  // set_cache_bytes, least recently used first out) without decoding. Thread-safe: one encode
  // runs at a time (the encoder uses every thread it was given).
  ImageEmbedding encode(const uint8_t* data, size_t size, const ImageInputLimits& limits = {}) const;
  // encode in two halves, so that an image whose rows a cache already holds is never projected:
  // prepare decodes and preprocesses (the same refusals), which gives the grid, n_tokens and the
  // content hash, and takes the rows from the encoder cache when it has them; project runs the
  // projector on a prepared image (no-op once projected), counting it as encoded and caching it.
  ImageEmbedding prepare(const uint8_t* data, size_t size, const ImageInputLimits& limits = {}) const;
  void project(ImageEmbedding& image) const;
  void set_cache_bytes(size_t bytes);  // 0: no cache (default 256 MiB)
  struct Stats {
    int64_t images_encoded = 0;   // decoded and run through the projector
    int64_t cache_hits = 0;       // served from the encoder cache
    double encode_seconds = 0;    // decoding, preprocessing and the projector, in all
    size_t cache_bytes = 0;       // rows held by the cache now
  };
  Stats stats() const;
  // The same from decoded pixels (height rows of width RGB triples, 8 bits each): no file, no
  // encoder cache (benchmarks, callers that decode themselves).
  ImageEmbedding encode_rgb(const uint8_t* rgb, int width, int height) const;
  // Encodes already preprocessed pixels (ny rows of nx RGB floats, interleaved, normalised).
  std::vector<float> encode_pixels(const float* pixels, int64_t nx, int64_t ny) const;

 private:
  VisionEncoder();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The token id an image's row k carries in a Batch and in the prefix index: negative (never a
// vocabulary id) and a function of the image's content hash and k only, so a prompt's pages with
// an image are shared exactly when the image (and everything before it) is the same.
Token image_row_token(uint64_t content_hash, int64_t k);

// Where a prompt's images sit: rows [first, first + grid_x * grid_y) of the token list.
struct ImageSpan {
  size_t first = 0;
  int64_t grid_x = 0, grid_y = 0;
  size_t end() const { return first + static_cast<size_t>(grid_x * grid_y); }
};
// The rope position of token i of a sequence whose images are `spans` (ascending, not
// overlapping): text turns by its index less what the images before it saved (an image of n rows
// advances the rope by max(grid_x, grid_y)); an image row by its grid row and column.
RopePos rope_position(std::span<const ImageSpan> spans, size_t i);

// The text that stands for an image in a prompt (llama.cpp's media marker, llama-server's default).
inline constexpr std::string_view kMediaMarker = "<__media__>";
// A prompt's text pieces around its kMediaMarker markers (markers + 1 pieces, to be tokenized with
// special tokens parsed), each image's place closed by the vision start / end tokens that surround
// its rows, as llama.cpp's mtmd lays a Qwen-VL prompt out: "A<m>B" -> {"A<|vision_start|>",
// "<|vision_end|>B"}.
std::vector<std::string> text_pieces_around_images(std::string_view text);

// Where a sequence's next token goes: its cache position (the token's index in the sequence) and
// its rope position (text advances it by one, an image by max(grid_x, grid_y), as mtmd does).
struct PromptCursor {
  MemoryPos pos = 0;
  int32_t rope = 0;
};
// Appends text tokens to `b` for sequence `seq` (logits for the last one when `logits_last`).
void add_text(Batch& b, const Token* tokens, size_t n, MemorySeqId seq, PromptCursor& cursor, bool logits_last);
// Appends an image's rows: row k of its grid_x x grid_y grid at rope (r, r + k / grid_x, r + k % grid_x).
void add_image(Batch& b, const ImageEmbedding& image, MemorySeqId seq, PromptCursor& cursor);

}  // namespace agentkv
