#include "agentkv/vision.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>

#define XXH_INLINE_ALL  // header-only, as src/memory/prefix_index.cpp uses it
#include <xxhash.h>

#include "agentkv/error.h"
#include "image/image_decode.h"
#include "image/image_preprocess.h"
#include "kernels/threadpool.h"
#include "model/model.h"
#include "model/vision_projector.h"

namespace agentkv {

struct ImageEmbedding::Pending {
  std::vector<float> pixels;  // preprocessed: pixels_y rows of pixels_x RGB floats
  XXH128_hash_t file_key;     // the encoder cache's key (the file's bytes)
};

struct VisionEncoder::Impl {
  std::unique_ptr<VisionProjector> projector;
  std::unique_ptr<ThreadPool> pool;
  image::VisionPreprocessSpec spec;
  uint64_t fingerprint = 0;
  // The encoder cache: file-bytes hash (XXH3-128) -> embedding, most recently used first.
  struct Entry {
    XXH128_hash_t key;
    std::shared_ptr<const ImageEmbedding> image;
  };
  mutable std::mutex mutex;  // one encode at a time (the pool is not reentrant); guards the cache
  mutable std::list<Entry> lru;
  size_t max_bytes = size_t{256} << 20;
  mutable size_t bytes = 0;
  mutable Stats stats;
  static size_t bytes_of(const ImageEmbedding& e) { return e.rows.size() * sizeof(float); }
  void trim() const {
    while (bytes > max_bytes && !lru.empty()) {
      bytes -= bytes_of(*lru.back().image);
      lru.pop_back();
    }
  }
  // The cached image of file `key`, made the most recently used and counted as a hit; null when
  // the cache has none. The caller holds the mutex.
  std::shared_ptr<const ImageEmbedding> cached(const XXH128_hash_t& key) const {
    for (auto it = lru.begin(); it != lru.end(); ++it) {
      if (!XXH128_isEqual(it->key, key)) continue;
      lru.splice(lru.begin(), lru, it);
      ++stats.cache_hits;
      return it->image;
    }
    return nullptr;
  }
  // Runs the projector on e's pending pixels: e.rows filled, e.pending dropped, the time added to
  // e.encode_seconds. The caller holds the mutex (the pool is not reentrant).
  void run_projector(ImageEmbedding& e) const {
    const auto t0 = std::chrono::steady_clock::now();
    e.rows = projector->encode(e.pending->pixels.data(), e.pixels_x, e.pixels_y, *pool);
    if (static_cast<int64_t>(e.rows.size()) != e.n_tokens * e.n_embd)
      throw Error("vision encoder: the projector wrote " + std::to_string(e.rows.size()) + " floats for a grid of " +
                  std::to_string(e.n_tokens) + " rows of " + std::to_string(e.n_embd));
    e.pending.reset();
    e.encode_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
};

VisionEncoder::VisionEncoder() : impl_(std::make_unique<Impl>()) {}
VisionEncoder::~VisionEncoder() = default;

std::unique_ptr<VisionEncoder> VisionEncoder::load(const std::string& mmproj_path, int n_threads) {
  std::unique_ptr<VisionEncoder> e(new VisionEncoder());
  e->impl_->projector = VisionProjector::load(mmproj_path);
  e->impl_->pool = std::make_unique<ThreadPool>(std::max(1, n_threads));
  const VisionHparams& hp = e->impl_->projector->hparams();
  // llama.cpp's defaults for this projector (8 to 4096 merged tokens); it reads no pixel limits
  // from the file for it.
  e->impl_->fingerprint = e->impl_->projector->file_hash();
  e->impl_->spec = image::qwen3vl_spec(static_cast<int>(hp.patch_size), static_cast<int>(hp.merge), hp.image_mean,
                                       hp.image_std);
  return e;
}

int64_t VisionEncoder::output_width() const { return impl_->projector->output_width(); }
uint64_t VisionEncoder::fingerprint() const { return impl_->fingerprint; }

void VisionEncoder::check_language_model(const Model& model) const {
  if (!ArchModel::of(model).takes_images())
    throw Error(std::string("the ") + arch_name(model.config().arch) + " model takes no image input (a vision projector "
                "needs a Qwen3.5 or Qwen3-VL model)");
  const int64_t deepstack = impl_->projector->hparams().n_deepstack;
  if (model.n_embd_input() != output_width())
    throw Error("the vision projector writes rows of " + std::to_string(output_width()) + " floats (" +
                std::to_string(deepstack) + " deepstack layers) but the model reads rows of " +
                std::to_string(model.n_embd_input()) + " (width " + std::to_string(model.n_embd()) + ", " +
                std::to_string(model.config().n_deepstack_layers) + " deepstack layers): they do not belong together");
}

std::vector<float> VisionEncoder::encode_pixels(const float* pixels, int64_t nx, int64_t ny) const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  return impl_->projector->encode(pixels, nx, ny, *impl_->pool);
}

namespace {

// Preprocesses decoded pixels and names them: the grid, the row count and the content hash, the
// pixels kept for the projector (ImageEmbedding::pending).
ImageEmbedding prepare_decoded(const image::VisionPreprocessSpec& spec, const image::RgbImage& rgb, int64_t n_embd,
                               XXH128_hash_t file_key) {
  using clock = std::chrono::steady_clock;
  const auto t0 = clock::now();
  image::PreprocessedImage pre = image::preprocess_qwen_vl(rgb, spec);
  ImageEmbedding e;
  e.source_x = rgb.width;
  e.source_y = rgb.height;
  e.pixels_x = pre.width;
  e.pixels_y = pre.height;
  e.grid_x = pre.grid_width / spec.merge;
  e.grid_y = pre.grid_height / spec.merge;
  e.n_embd = n_embd;
  e.n_tokens = e.grid_x * e.grid_y;  // the merger's output: one row per merged patch
  // Content key: the pixels as decoded and the grid they were resampled to (the preprocessing
  // spec is the projector's, whose identity the caller adds to its cache salt).
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  const int64_t dims[4] = {rgb.width, rgb.height, pre.width, pre.height};
  XXH3_64bits_update(st, dims, sizeof dims);
  XXH3_64bits_update(st, rgb.rgb.data(), rgb.rgb.size());
  e.content_hash = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  auto pending = std::make_shared<ImageEmbedding::Pending>();
  pending->pixels = std::move(pre.pixels);
  pending->file_key = file_key;
  e.pending = std::move(pending);
  e.encode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  return e;
}

}  // namespace

ImageEmbedding VisionEncoder::prepare(const uint8_t* data, size_t size, const ImageInputLimits& limits) const {
  using clock = std::chrono::steady_clock;
  Impl& m = *impl_;
  const XXH128_hash_t key = XXH3_128bits(data, size);
  {
    std::lock_guard<std::mutex> lock(m.mutex);
    if (const std::shared_ptr<const ImageEmbedding> hit = m.cached(key)) {
      ImageEmbedding e = *hit;
      e.decode_seconds = e.encode_seconds = 0;
      return e;
    }
  }
  const auto t0 = clock::now();
  image::ImageLimits l;
  l.max_bytes = limits.max_bytes;
  l.max_pixels = limits.max_pixels;
  l.max_side = limits.max_side;
  const image::RgbImage rgb = image::decode_image(data, size, l);
  const double decode_seconds = std::chrono::duration<double>(clock::now() - t0).count();
  ImageEmbedding e = prepare_decoded(m.spec, rgb, output_width(), key);
  e.decode_seconds = decode_seconds;
  return e;
}

void VisionEncoder::project(ImageEmbedding& e) const {
  if (e.projected() || !e.pending) return;
  Impl& m = *impl_;
  std::lock_guard<std::mutex> lock(m.mutex);
  const XXH128_hash_t key = e.pending->file_key;
  if (const std::shared_ptr<const ImageEmbedding> hit = m.cached(key)) {  // another request projected it meanwhile
    e.rows = hit->rows;
    e.pending.reset();
    return;
  }
  m.run_projector(e);
  ++m.stats.images_encoded;
  m.stats.encode_seconds += e.decode_seconds + e.encode_seconds;
  if (m.max_bytes > 0 && Impl::bytes_of(e) <= m.max_bytes) {
    m.lru.push_front({key, std::make_shared<const ImageEmbedding>(e)});
    m.bytes += Impl::bytes_of(e);
    m.trim();
  }
}

ImageEmbedding VisionEncoder::encode(const uint8_t* data, size_t size, const ImageInputLimits& limits) const {
  ImageEmbedding e = prepare(data, size, limits);
  project(e);
  return e;
}

ImageEmbedding VisionEncoder::encode_rgb(const uint8_t* rgb, int width, int height) const {
  if (width <= 0 || height <= 0) throw Error("vision encoder: an image of " + std::to_string(width) + "x" +
                                             std::to_string(height) + " pixels");
  image::RgbImage img;
  img.width = width;
  img.height = height;
  img.rgb.assign(rgb, rgb + static_cast<size_t>(width) * static_cast<size_t>(height) * 3);
  ImageEmbedding e = prepare_decoded(impl_->spec, img, output_width(), XXH128_hash_t{0, 0});
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->run_projector(e);
  return e;
}

void VisionEncoder::set_cache_bytes(size_t bytes) {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  impl_->max_bytes = bytes;
  impl_->trim();
}

VisionEncoder::Stats VisionEncoder::stats() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  Stats s = impl_->stats;
  s.cache_bytes = impl_->bytes;
  return s;
}

RopePos rope_position(std::span<const ImageSpan> spans, size_t i) {
  int64_t saved = 0;  // rope positions the images before i did not use
  for (const ImageSpan& s : spans) {
    if (i < s.first) break;
    const int64_t n = s.grid_x * s.grid_y;
    if (i < s.end()) {
      const auto r = static_cast<int32_t>(static_cast<int64_t>(s.first) - saved);
      const auto k = static_cast<int64_t>(i - s.first);
      return {r, r + static_cast<int32_t>(k / s.grid_x), r + static_cast<int32_t>(k % s.grid_x)};
    }
    saved += n - std::max(s.grid_x, s.grid_y);
  }
  const auto p = static_cast<int32_t>(static_cast<int64_t>(i) - saved);
  return {p, p, p};
}

Token image_row_token(uint64_t content_hash, int64_t k) {
  const uint64_t key[2] = {content_hash, static_cast<uint64_t>(k)};
  const uint64_t h = XXH3_64bits(key, sizeof key);
  return static_cast<Token>(0x80000000u | static_cast<uint32_t>(h & 0x7fffffffu));
}

std::vector<std::string> text_pieces_around_images(std::string_view text) {
  std::vector<std::string> pieces;
  for (size_t from = 0;;) {
    const size_t at = text.find(kMediaMarker, from);
    std::string piece(text.substr(from, at == std::string_view::npos ? std::string_view::npos : at - from));
    if (from > 0) piece = "<|vision_end|>" + piece;
    if (at != std::string_view::npos) piece += "<|vision_start|>";
    pieces.push_back(std::move(piece));
    if (at == std::string_view::npos) return pieces;
    from = at + kMediaMarker.size();
  }
}

void add_text(Batch& b, const Token* tokens, size_t n, MemorySeqId seq, PromptCursor& cursor, bool logits_last) {
  for (size_t i = 0; i < n; ++i) {
    b.add_multimodal(tokens[i], cursor.pos++, seq, logits_last && i + 1 == n, {cursor.rope, cursor.rope, cursor.rope},
                     nullptr, 0);
    ++cursor.rope;
  }
}

void add_image(Batch& b, const ImageEmbedding& image, MemorySeqId seq, PromptCursor& cursor) {
  const auto nx = static_cast<int32_t>(image.grid_x), ny = static_cast<int32_t>(image.grid_y);
  const int32_t r = cursor.rope;
  for (int32_t k = 0; k < nx * ny; ++k)
    b.add_multimodal(image_row_token(image.content_hash, k), cursor.pos++, seq, false, {r, r + k / nx, r + k % nx},
                     image.rows.data() + static_cast<size_t>(k) * image.n_embd, static_cast<size_t>(image.n_embd));
  cursor.rope = r + std::max(nx, ny);
}

}  // namespace agentkv
