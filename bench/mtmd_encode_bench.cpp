// llama.cpp's side of `agentkv bench vision`: mtmd's encode time for a synthetic screenshot of the
// same pixels (tools/bench_vision.cpp draws the same), in the same process layout (one image, N
// threads, flash attention as llama.cpp's CPU default picks it). Links the peer's libllama and
// libmtmd; never part of agentkv's build (bench/README.md):
//   L=/path/to/llama.cpp   (d32676d7, built with -DLLAMA_BUILD_MTMD=ON, target mtmd)
//   g++ -O2 -std=c++17 bench/mtmd_encode_bench.cpp -I $L/include -I $L/ggml/include -I $L/tools/mtmd \
//       -L $L/build/bin -lmtmd -lllama -lggml -lggml-base -Wl,-rpath,$L/build/bin -o mtmd_encode_bench
//   mtmd_encode_bench LM.gguf MMPROJ.gguf WIDTH HEIGHT THREADS REPS
// The language model is loaded vocabulary-only: mtmd needs only its width.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "llama.h"
#include "mtmd.h"

static std::vector<unsigned char> synthetic_screen(int w, int h) {  // as tools/bench_vision.cpp
  std::vector<unsigned char> rgb(static_cast<size_t>(w) * h * 3);
  for (int y = 0; y < h; ++y)
    for (int x = 0; x < w; ++x) {
      unsigned char* p = rgb.data() + (static_cast<size_t>(y) * w + x) * 3;
      const bool stripe = (y / 12) % 3 == 0 && (x / 7) % 5 != 0;
      p[0] = stripe ? 20 : static_cast<unsigned char>(200 + x * 40 / w);
      p[1] = stripe ? 20 : static_cast<unsigned char>(210 + y * 30 / h);
      p[2] = stripe ? 30 : 235;
    }
  return rgb;
}

int main(int argc, char** argv) {
  if (argc != 7) {
    std::fprintf(stderr, "usage: %s LM.gguf MMPROJ.gguf WIDTH HEIGHT THREADS REPS\n", argv[0]);
    return 1;
  }
  const int w = std::atoi(argv[3]), h = std::atoi(argv[4]), threads = std::atoi(argv[5]), reps = std::atoi(argv[6]);
  llama_log_set([](ggml_log_level level, const char* text, void*) { if (level >= GGML_LOG_LEVEL_WARN) std::fputs(text, stderr); }, nullptr);
  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.vocab_only = true;
  llama_model* model = llama_model_load_from_file(argv[1], mp);
  if (!model) return 1;
  mtmd_context_params cp = mtmd_context_params_default();
  cp.n_threads = threads;
  cp.print_timings = false;
  cp.warmup = false;
  mtmd_context* ctx = mtmd_init_from_file(argv[2], model, cp);
  if (!ctx) return 1;
  const std::vector<unsigned char> rgb = synthetic_screen(w, h);
  mtmd_bitmap* bmp = mtmd_bitmap_init(w, h, rgb.data());
  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  const char* marker = mtmd_default_marker();
  mtmd_input_text text{marker, std::strlen(marker), false, true};
  const mtmd_bitmap* bitmaps[1] = {bmp};
  if (mtmd_tokenize(ctx, chunks, &text, bitmaps, 1) != 0) return 1;
  const mtmd_input_chunk* image = nullptr;
  for (size_t i = 0; i < mtmd_input_chunks_size(chunks); ++i)
    if (mtmd_input_chunk_get_type(mtmd_input_chunks_get(chunks, i)) == MTMD_INPUT_CHUNK_TYPE_IMAGE)
      image = mtmd_input_chunks_get(chunks, i);
  if (!image) return 1;
  double best = 1e30, sum = 0;
  for (int r = 0; r < reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    if (mtmd_encode_chunk(ctx, image) != 0) return 1;
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::min(best, s);
    sum += s;
  }
  const size_t n = mtmd_input_chunk_get_n_tokens(image);
  std::printf("| llama.cpp mtmd %dx%d | %zu tokens | %d threads | best %.1f ms | mean %.1f ms | %.1f tokens/s |\n", w, h, n,
              threads, best * 1e3, sum / reps * 1e3, n / best);
  mtmd_input_chunks_free(chunks);
  mtmd_bitmap_free(bmp);
  mtmd_free(ctx);
  llama_model_free(model);
  return 0;
}
