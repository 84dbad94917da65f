// The program that makes llama.cpp's reference outputs for image input (libmtmd: a vision projector
// GGUF, "mmproj", beside a language model). It links llama.cpp's libllama and libmtmd and is never
// part of agentkv's build. Built from the repository root against llama.cpp d32676d7 configured as in
// tests/reference/README.md plus -DLLAMA_BUILD_MTMD=ON (`cmake --build build --target mtmd -j2`):
//
//   L=../peer/llama.cpp
//   g++ -O2 -std=c++17 tests/reference/mtmd_reference.cpp -I $L/include -I $L/ggml/include
//       -I $L/tools/mtmd -L $L/build/bin -lmtmd -lllama -lggml -lggml-base
//       -Wl,-rpath,$L/build/bin -o mtmd_reference                                   (one command)
//
//   mtmd_reference --model LM.gguf --mmproj MMPROJ.gguf --image IMG.png [--image IMG2.png ...]
//                  --prompt "text <__media__> text" [--threads 2] [--batch 512] [--flash-attn on|off]
//                  [--flash-attn-vision on|off] [--n-gen 16] [--add-special] [--dump-vision-nodes]
//                  [--verbose] --out-dir DIR
//
// The prompt holds one media marker (mtmd_default_marker(), "<__media__>") per --image, in order.
// Text is tokenized as llama_reference does (add_special = false unless --add-special,
// parse_special = true). --batch sets the context's n_batch and n_ubatch and the n_batch given to
// mtmd_helper_eval_chunks; --threads sets the text context's and the vision encoder's threads;
// --flash-attn sets both (default off; --flash-attn-vision sets the encoder's alone: with it on,
// clip casts K and V to F16). llama.cpp's log shows warnings and errors only, everything
// with --verbose (the projector's keys and tensors as clip_model_loader reads them). Nothing is
// drawn at random. Writes to DIR (all binaries little-endian):
//
//   pixels-K.bin   the f32 image the vision encoder was fed for image K (the graph input "inp_raw",
//                  read through the scheduler's eval callback, mtmd_context_params.cb_eval, as the
//                  first node that reads it is computed): planar, [frame][channel][y][x], channels
//                  R, G, B, i.e. ggml ne = (nx, ny, 3, n_frames); resized and normalized.
//   vision-pos-K.bin  the encoder's int32 graph input "positions" (M-RoPE models: 4 sections of
//                  n_patches each, [section][patch]), when the graph has one.
//   embd-K.bin     mtmd_encode_chunk + mtmd_get_output_embd for image K: n_tokens x n_embd f32,
//                  token-major (n_embd = llama_model_n_embd_inp of the language model).
//   nodes-K/       with --dump-vision-nodes: every contiguous f32 node of the encoder graph that is
//                  not a view (reshape, view, permute, transpose), in compute order, as
//                  NNNN-NAME.bin, with nodes-K/index.json (name, op, ne).
//   result.json    chunks (kind, n_tokens, n_pos, text tokens, image grid and the positions
//                  llama.cpp's mtmd_helper gives each token), per image the pixel / embedding
//                  metadata and statistics, then the prompt evaluated with mtmd_helper_eval_chunks
//                  (logits of the last token only): the top-10 next tokens as [id, logprob]
//                  (log-softmax over the whole vocabulary), and N_GEN greedy tokens with the top 10
//                  each was taken from (generated_top[0] == prompt_top). The helper encodes each
//                  image again; last_image_reencode_bitwise_equal says whether the last image's
//                  embeddings came out bit for bit as in embd-K.bin.
//
// Positions, as mtmd_helper_eval_chunks sets them: n_past starts at 0 and grows by each chunk's
// n_pos. Text token i of a chunk gets n_past + i (llama.cpp broadcasts it to every M-RoPE section).
// An image chunk on an M-RoPE model gets, for embedding i of its nx x ny grid (row-major),
// the four sections [t, h, w, e] = [n_past, n_past + i / nx, n_past + i % nx, 0]
// (mtmd_image_tokens_get_decoder_pos; mtmd-helper-common.h set_position_mrope_2d writes .t, .y, .x, .z
// in that order), and its n_pos is max(nx, ny). Other models: n_past + i, n_pos = n_tokens.
// Generated token s is decoded at position n_past_end + s.
#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <sys/stat.h>

#include "ggml-backend.h"
#include "ggml.h"
#include "llama.h"
#include "mtmd-helper.h"
#include "mtmd.h"

namespace {

constexpr int kTop = 10;

[[noreturn]] void die(const std::string& msg) {
  std::fprintf(stderr, "mtmd_reference: %s\n", msg.c_str());
  std::exit(1);
}

void make_dir(const std::string& path) {
  if (mkdir(path.c_str(), 0755) != 0 && errno != EEXIST) die("cannot create " + path);
}

void write_file(const std::string& path, const void* data, size_t n_bytes) {
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) die("cannot write " + path);
  if (n_bytes && std::fwrite(data, 1, n_bytes, f) != n_bytes) die("short write to " + path);
  std::fclose(f);
}

std::string json_string(const std::string& s) {
  std::string out = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += static_cast<char>(c);
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += static_cast<char>(c);
    }
  }
  return out + "\"";
}

std::string fmt_g(double v) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.9g", v);
  return buf;
}

template <typename T>
std::string json_ints(const T* v, size_t n) {
  std::string out = "[";
  for (size_t i = 0; i < n; ++i) {
    if (i) out += ", ";
    out += std::to_string(v[i]);
  }
  return out + "]";
}

// The top kTop tokens of a logits row as [id, logprob] JSON, log-softmax over the vocabulary (as
// llama_reference.cpp).
std::string top_json(const float* logits, int n_vocab, int* argmax) {
  double max = logits[0];
  for (int i = 1; i < n_vocab; ++i) max = std::max(max, static_cast<double>(logits[i]));
  double sum = 0;
  for (int i = 0; i < n_vocab; ++i) sum += std::exp(static_cast<double>(logits[i]) - max);
  const double log_z = max + std::log(sum);
  std::vector<int> ids(static_cast<size_t>(n_vocab));
  for (int i = 0; i < n_vocab; ++i) ids[static_cast<size_t>(i)] = i;
  const int k_top = std::min(kTop, n_vocab);
  std::partial_sort(ids.begin(), ids.begin() + k_top, ids.end(), [&](int a, int b) {
    return logits[a] > logits[b] || (logits[a] == logits[b] && a < b);
  });
  if (argmax) *argmax = ids[0];
  std::string out = "[";
  for (int k = 0; k < k_top; ++k) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%s[%d, %.6f]", k ? ", " : "", ids[static_cast<size_t>(k)],
                  static_cast<double>(logits[ids[static_cast<size_t>(k)]]) - log_z);
    out += buf;
  }
  return out + "]";
}

struct Stats {
  double min = 0, max = 0, mean = 0, mean_abs = 0, max_abs = 0;
};

Stats stats_of(const float* v, size_t n) {
  Stats s;
  if (n == 0) return s;
  s.min = s.max = v[0];
  double sum = 0, sum_abs = 0;
  for (size_t i = 0; i < n; ++i) {
    const double x = v[i];
    s.min = std::min(s.min, x);
    s.max = std::max(s.max, x);
    sum += x;
    sum_abs += std::fabs(x);
    s.max_abs = std::max(s.max_abs, std::fabs(x));
  }
  s.mean = sum / static_cast<double>(n);
  s.mean_abs = sum_abs / static_cast<double>(n);
  return s;
}

std::string stats_json(const Stats& s) {
  return "{\"min\": " + fmt_g(s.min) + ", \"max\": " + fmt_g(s.max) + ", \"mean\": " + fmt_g(s.mean) +
         ", \"mean_abs\": " + fmt_g(s.mean_abs) + ", \"max_abs\": " + fmt_g(s.max_abs) + "}";
}

std::string ne_json(const ggml_tensor* t) {
  return "[" + std::to_string(t->ne[0]) + ", " + std::to_string(t->ne[1]) + ", " + std::to_string(t->ne[2]) +
         ", " + std::to_string(t->ne[3]) + "]";
}

// What the vision encoder's eval callback captures during one mtmd_encode_chunk.
struct Capture {
  bool active = false;  // only during this program's own encode of image `image`
  bool dump_nodes = false;
  int image = 0;
  std::string out_dir;
  bool have_pixels = false;
  std::vector<float> pixels;
  int64_t pixels_ne[4] = {0, 0, 0, 0};
  bool have_positions = false;
  std::vector<int32_t> positions;
  int n_nodes = 0;
  std::string nodes_index;
};

bool reads_input(const ggml_tensor* t, const char* name) {
  for (int j = 0; j < GGML_MAX_SRC; ++j)
    if (t->src[j] && std::strcmp(t->src[j]->name, name) == 0) return true;
  return false;
}

const ggml_tensor* src_named(const ggml_tensor* t, const char* name) {
  for (int j = 0; j < GGML_MAX_SRC; ++j)
    if (t->src[j] && std::strcmp(t->src[j]->name, name) == 0) return t->src[j];
  return nullptr;
}

bool eval_callback(ggml_tensor* t, bool ask, void* user_data) {
  auto* cap = static_cast<Capture*>(user_data);
  if (!cap->active) return ask ? false : true;
  if (ask) {
    if (cap->dump_nodes) return true;
    return (!cap->have_pixels && reads_input(t, "inp_raw")) ||
           (!cap->have_positions && reads_input(t, "positions"));
  }
  if (const ggml_tensor* raw = src_named(t, "inp_raw"); raw && !cap->have_pixels) {
    if (raw->type != GGML_TYPE_F32 || !ggml_is_contiguous(raw)) die("inp_raw is not contiguous f32");
    cap->pixels.resize(static_cast<size_t>(ggml_nelements(raw)));
    ggml_backend_tensor_get(raw, cap->pixels.data(), 0, ggml_nbytes(raw));
    for (int d = 0; d < 4; ++d) cap->pixels_ne[d] = raw->ne[d];
    cap->have_pixels = true;
  }
  if (const ggml_tensor* pos = src_named(t, "positions"); pos && !cap->have_positions) {
    if (pos->type == GGML_TYPE_I32 && ggml_is_contiguous(pos)) {
      cap->positions.resize(static_cast<size_t>(ggml_nelements(pos)));
      ggml_backend_tensor_get(pos, cap->positions.data(), 0, ggml_nbytes(pos));
      cap->have_positions = true;
    }
  }
  const bool is_view = t->op == GGML_OP_RESHAPE || t->op == GGML_OP_VIEW || t->op == GGML_OP_PERMUTE ||
                       t->op == GGML_OP_TRANSPOSE;
  if (cap->dump_nodes && !is_view && t->type == GGML_TYPE_F32 && ggml_is_contiguous(t)) {
    std::string name = t->name;
    for (char& c : name)
      if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.')) c = '_';
    char prefix[16];
    std::snprintf(prefix, sizeof prefix, "%04d-", cap->n_nodes);
    const std::string file = std::string(prefix) + (name.empty() ? "unnamed" : name) + ".bin";
    std::vector<float> data(static_cast<size_t>(ggml_nelements(t)));
    ggml_backend_tensor_get(t, data.data(), 0, ggml_nbytes(t));
    write_file(cap->out_dir + "/nodes-" + std::to_string(cap->image) + "/" + file, data.data(), ggml_nbytes(t));
    cap->nodes_index += std::string(cap->n_nodes ? ",\n  " : "\n  ") + "{\"file\": " + json_string(file) +
                        ", \"name\": " + json_string(t->name) + ", \"op\": " + json_string(ggml_op_desc(t)) +
                        ", \"ne\": " + ne_json(t) + "}";
    ++cap->n_nodes;
  }
  return true;
}

// llama.cpp's and libmtmd's log: warnings and errors (with their continuation lines) unless --verbose.
bool g_verbose = false;
ggml_log_level g_last_level = GGML_LOG_LEVEL_INFO;

void log_callback(ggml_log_level level, const char* text, void*) {
  if (level != GGML_LOG_LEVEL_CONT) g_last_level = level;
  if (g_verbose || g_last_level == GGML_LOG_LEVEL_WARN || g_last_level == GGML_LOG_LEVEL_ERROR) {
    std::fputs(text, stderr);
    std::fflush(stderr);
  }
}

struct Args {
  std::string model, mmproj, prompt, out_dir;
  std::vector<std::string> images;
  int threads = 2;
  int batch = 512;
  bool flash_attn = false;
  int flash_attn_vision = -1;  // -1: as --flash-attn
  int n_gen = 16;
  bool add_special = false;
  bool dump_nodes = false;
  bool verbose = false;
};

[[noreturn]] void usage(const char* argv0) {
  std::fprintf(stderr,
               "usage: %s --model LM.gguf --mmproj MMPROJ.gguf --image IMG [--image IMG2 ...]\n"
               "          --prompt \"text %s text\" [--threads 2] [--batch 512] [--flash-attn on|off]\n"
               "          [--flash-attn-vision on|off] [--n-gen 16] [--add-special] [--dump-vision-nodes]\n"
               "          [--verbose] --out-dir DIR\n",
               argv0, mtmd_default_marker());
  std::exit(2);
}

Args parse_args(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    const std::string k = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(argv[0]);
      return argv[++i];
    };
    if (k == "--model") a.model = value();
    else if (k == "--mmproj") a.mmproj = value();
    else if (k == "--image") a.images.push_back(value());
    else if (k == "--prompt") a.prompt = value();
    else if (k == "--out-dir") a.out_dir = value();
    else if (k == "--threads") a.threads = std::atoi(value().c_str());
    else if (k == "--batch") a.batch = std::atoi(value().c_str());
    else if (k == "--n-gen") a.n_gen = std::atoi(value().c_str());
    else if (k == "--add-special") a.add_special = true;
    else if (k == "--dump-vision-nodes") a.dump_nodes = true;
    else if (k == "--verbose") a.verbose = true;
    else if (k == "--flash-attn" || k == "--flash-attn-vision") {
      const std::string v = value();
      if (v != "on" && v != "off") usage(argv[0]);
      if (k == "--flash-attn") a.flash_attn = v == "on";
      else a.flash_attn_vision = v == "on";
    } else usage(argv[0]);
  }
  if (a.model.empty() || a.mmproj.empty() || a.out_dir.empty() || a.images.empty() || a.prompt.empty() ||
      a.threads <= 0 || a.batch <= 0 || a.n_gen <= 0)
    usage(argv[0]);
  return a;
}

const char* chunk_kind(mtmd_input_chunk_type t) {
  switch (t) {
    case MTMD_INPUT_CHUNK_TYPE_TEXT: return "text";
    case MTMD_INPUT_CHUNK_TYPE_IMAGE: return "image";
    case MTMD_INPUT_CHUNK_TYPE_AUDIO: return "audio";
    default: return "unknown";
  }
}

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"
size_t image_nx(const mtmd_image_tokens* it) { return mtmd_image_tokens_get_nx(it); }
size_t image_ny(const mtmd_image_tokens* it) { return mtmd_image_tokens_get_ny(it); }
#pragma GCC diagnostic pop

}  // namespace

int main(int argc, char** argv) {
  const Args args = parse_args(argc, argv);
  make_dir(args.out_dir);
  g_verbose = args.verbose;
  llama_log_set(log_callback, nullptr);
  mtmd_helper_log_set(log_callback, nullptr);

  llama_backend_init();
  llama_model_params mp = llama_model_default_params();
  mp.n_gpu_layers = 0;
  llama_model* model = llama_model_load_from_file(args.model.c_str(), mp);
  if (!model) die("cannot load the language model " + args.model);
  const llama_vocab* vocab = llama_model_get_vocab(model);
  const int n_vocab = llama_vocab_n_tokens(vocab);
  const int n_embd_inp = llama_model_n_embd_inp(model);

  const llama_flash_attn_type fa = args.flash_attn ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  llama_context_params cp = llama_context_default_params();
  cp.n_ctx = 4096;
  cp.n_batch = static_cast<uint32_t>(args.batch);
  cp.n_ubatch = static_cast<uint32_t>(args.batch);
  cp.n_threads = args.threads;
  cp.n_threads_batch = args.threads;
  cp.n_seq_max = 1;
  cp.flash_attn_type = fa;
  llama_context* lctx = llama_init_from_model(model, cp);
  if (!lctx) die("cannot create the llama context");

  Capture cap;
  cap.out_dir = args.out_dir;
  cap.dump_nodes = args.dump_nodes;
  mtmd_context_params mparams = mtmd_context_params_default();
  mparams.use_gpu = false;
  mparams.print_timings = false;
  mparams.n_threads = args.threads;
  const bool fa_vision = args.flash_attn_vision < 0 ? args.flash_attn : args.flash_attn_vision != 0;
  mparams.flash_attn_type = fa_vision ? LLAMA_FLASH_ATTN_TYPE_ENABLED : LLAMA_FLASH_ATTN_TYPE_DISABLED;
  mparams.warmup = false;
  mparams.cb_eval = eval_callback;
  mparams.cb_eval_user_data = &cap;
  mtmd_context* mctx = mtmd_init_from_file(args.mmproj.c_str(), model, mparams);
  if (!mctx) die("mtmd_init_from_file failed for " + args.mmproj + " (llama.cpp's reason is logged above)");
  if (!mtmd_support_vision(mctx)) die(args.mmproj + " has no vision encoder");
  const bool mrope = mtmd_decode_use_mrope(mctx);

  std::vector<mtmd_bitmap*> bitmaps;
  for (const std::string& path : args.images) {
    mtmd_helper_bitmap_wrapper w = mtmd_helper_bitmap_init_from_file(mctx, path.c_str(), false);
    if (!w.bitmap) die("cannot read the image " + path);
    if (w.video_ctx) die(path + " was opened as a video");
    bitmaps.push_back(w.bitmap);
  }

  mtmd_input_chunks* chunks = mtmd_input_chunks_init();
  mtmd_input_text text{args.prompt.c_str(), args.prompt.size(), args.add_special, /*parse_special=*/true};
  std::vector<const mtmd_bitmap*> cbitmaps(bitmaps.begin(), bitmaps.end());
  const int32_t tok_rc = mtmd_tokenize(mctx, chunks, &text, cbitmaps.data(), cbitmaps.size());
  if (tok_rc != 0)
    die("mtmd_tokenize returned " + std::to_string(tok_rc) +
        (tok_rc == 1 ? " (the number of images does not match the markers in the prompt)" : " (preprocessing error)"));

  // Chunks, their positions, and every image encoded once here (pixels and embeddings captured).
  const size_t n_chunks = mtmd_input_chunks_size(chunks);
  std::string chunks_json, images_json;
  llama_pos n_past = 0;
  int image_index = 0;
  std::vector<float> last_embd;  // the last image's embeddings, to compare with the helper's encode
  for (size_t ci = 0; ci < n_chunks; ++ci) {
    const mtmd_input_chunk* chunk = mtmd_input_chunks_get(chunks, ci);
    const mtmd_input_chunk_type type = mtmd_input_chunk_get_type(chunk);
    const size_t n_tokens = mtmd_input_chunk_get_n_tokens(chunk);
    const llama_pos n_pos = mtmd_input_chunk_get_n_pos(chunk);
    std::string j = std::string(ci ? ",\n  " : "\n  ") + "{\"kind\": \"" + chunk_kind(type) +
                    "\", \"n_tokens\": " + std::to_string(n_tokens) + ", \"n_pos\": " + std::to_string(n_pos) +
                    ", \"pos_0\": " + std::to_string(n_past);
    if (type == MTMD_INPUT_CHUNK_TYPE_TEXT) {
      size_t n = 0;
      const llama_token* toks = mtmd_input_chunk_get_tokens_text(chunk, &n);
      j += ", \"tokens\": " + json_ints(toks, n);
      std::string pieces = "[";
      for (size_t i = 0; i < n; ++i) {
        char buf[256];
        const int len = llama_token_to_piece(vocab, toks[i], buf, sizeof buf, 0, /*special=*/true);
        pieces += (i ? ", " : "") + json_string(std::string(buf, static_cast<size_t>(std::max(0, len))));
      }
      j += ", \"pieces\": " + pieces + "]";
      std::vector<llama_pos> pos(n);
      for (size_t i = 0; i < n; ++i) pos[i] = n_past + static_cast<llama_pos>(i);
      j += ", \"positions\": " + json_ints(pos.data(), n);
    } else if (type == MTMD_INPUT_CHUNK_TYPE_IMAGE) {
      const mtmd_image_tokens* it = mtmd_input_chunk_get_tokens_image(chunk);
      const size_t nx = image_nx(it), ny = image_ny(it);
      j += ", \"image\": " + std::to_string(image_index) + ", \"grid_nx\": " + std::to_string(nx) +
           ", \"grid_ny\": " + std::to_string(ny) + ", \"image_tokens_n_pos\": " +
           std::to_string(mtmd_image_tokens_get_n_pos(it));
      // The positions mtmd_helper_decode_image_chunk gives the embeddings.
      std::string pj = "[";
      for (size_t i = 0; i < n_tokens; ++i) {
        if (i) pj += ", ";
        if (mrope) {
          const mtmd_decoder_pos p = mtmd_image_tokens_get_decoder_pos(it, n_past, i);
          pj += "[" + std::to_string(p.t) + ", " + std::to_string(p.y) + ", " + std::to_string(p.x) + ", " +
                std::to_string(p.z) + "]";
        } else {
          pj += std::to_string(n_past + static_cast<llama_pos>(i));
        }
      }
      j += std::string(", \"positions_layout\": ") +
           (mrope ? "\"[t, h, w, e] per embedding (M-RoPE sections 0..3)\"" : "\"one position per embedding\"") +
           ", \"positions\": " + pj + "]";

      // Encode it here: pixels, encoder positions and embeddings.
      cap.active = true;
      cap.image = image_index;
      cap.have_pixels = cap.have_positions = false;
      cap.n_nodes = 0;
      cap.nodes_index.clear();
      if (cap.dump_nodes) make_dir(args.out_dir + "/nodes-" + std::to_string(image_index));
      const int32_t enc_rc = mtmd_encode_chunk(mctx, chunk);
      cap.active = false;
      if (enc_rc != 0) die("mtmd_encode_chunk failed for image " + std::to_string(image_index));
      const float* embd = mtmd_get_output_embd(mctx);
      const size_t n_embd_values = n_tokens * static_cast<size_t>(n_embd_inp);
      last_embd.assign(embd, embd + n_embd_values);
      const std::string k = std::to_string(image_index);
      write_file(args.out_dir + "/embd-" + k + ".bin", embd, n_embd_values * sizeof(float));
      if (!cap.have_pixels) die("the encoder graph of image " + k + " read no tensor named inp_raw");
      write_file(args.out_dir + "/pixels-" + k + ".bin", cap.pixels.data(), cap.pixels.size() * sizeof(float));
      if (cap.have_positions)
        write_file(args.out_dir + "/vision-pos-" + k + ".bin", cap.positions.data(),
                   cap.positions.size() * sizeof(int32_t));
      if (cap.dump_nodes) {
        const std::string idx = "[" + cap.nodes_index + "\n]\n";
        write_file(args.out_dir + "/nodes-" + k + "/index.json", idx.data(), idx.size());
      }
      const mtmd_bitmap* bmp = bitmaps[static_cast<size_t>(image_index)];
      std::string ij = std::string(image_index ? ",\n  " : "\n  ") + "{\"image\": " + k +
                       ", \"file\": " + json_string(args.images[static_cast<size_t>(image_index)]) +
                       ", \"bitmap_nx\": " + std::to_string(mtmd_bitmap_get_nx(bmp)) +
                       ", \"bitmap_ny\": " + std::to_string(mtmd_bitmap_get_ny(bmp)) + ", \"chunk\": " +
                       std::to_string(ci) + ",\n   \"pixels_file\": \"pixels-" + k + ".bin\", \"pixels_nx\": " +
                       std::to_string(cap.pixels_ne[0]) + ", \"pixels_ny\": " + std::to_string(cap.pixels_ne[1]) +
                       ", \"pixels_channels\": " + std::to_string(cap.pixels_ne[2]) +
                       ", \"pixels_frames\": " + std::to_string(cap.pixels_ne[3]) +
                       ", \"pixels_layout\": \"f32 planar [frame][channel RGB][y][x]\", \"pixels_stats\": " +
                       stats_json(stats_of(cap.pixels.data(), cap.pixels.size()));
      if (cap.have_positions)
        ij += ",\n   \"vision_pos_file\": \"vision-pos-" + k + ".bin\", \"vision_pos_count\": " +
              std::to_string(cap.positions.size());
      ij += ",\n   \"embd_file\": \"embd-" + k + ".bin\", \"n_tokens\": " + std::to_string(n_tokens) +
            ", \"n_embd\": " + std::to_string(n_embd_inp) + ", \"grid_nx\": " + std::to_string(nx) +
            ", \"grid_ny\": " + std::to_string(ny) + ", \"n_pos\": " + std::to_string(mtmd_image_tokens_get_n_pos(it)) +
            ", \"embd_layout\": \"f32 [token][n_embd]\", \"embd_stats\": " +
            stats_json(stats_of(embd, n_embd_values));
      if (cap.dump_nodes) ij += ", \"vision_nodes\": " + std::to_string(cap.n_nodes);
      images_json += ij + "}";
      ++image_index;
    } else {
      die("audio chunks are not handled");
    }
    chunks_json += j + "}";
    n_past += n_pos;
  }

  // The whole prompt through mtmd_helper_eval_chunks (it encodes each image again).
  llama_pos n_past_end = 0;
  const int32_t eval_rc =
      mtmd_helper_eval_chunks(mctx, lctx, chunks, 0, 0, args.batch, /*logits_last=*/true, &n_past_end);
  if (eval_rc != 0) die("mtmd_helper_eval_chunks returned " + std::to_string(eval_rc));
  if (n_past_end != n_past)
    die("mtmd_helper_eval_chunks ended at position " + std::to_string(n_past_end) + ", expected " +
        std::to_string(n_past));

  // mtmd_helper_eval_chunks encoded every image again; the context's output holds the last one's.
  const float* reencoded = mtmd_get_output_embd(mctx);
  const bool reencode_equal =
      reencoded && std::memcmp(reencoded, last_embd.data(), last_embd.size() * sizeof(float)) == 0;

  std::vector<llama_token> generated;
  std::vector<std::string> generated_top;
  llama_batch one = llama_batch_init(1, 0, 1);
  const float* logits = llama_get_logits_ith(lctx, -1);
  if (!logits) die("no logits after the prompt (does it end with an image chunk?)");
  std::string prompt_top;
  for (int step = 0; step < args.n_gen; ++step) {
    int next = 0;
    generated_top.push_back(top_json(logits, n_vocab, &next));
    if (step == 0) prompt_top = generated_top.back();
    generated.push_back(next);
    if (step + 1 == args.n_gen) break;
    one.token[0] = next;
    one.pos[0] = n_past_end + step;
    one.n_seq_id[0] = 1;
    one.seq_id[0][0] = 0;
    one.logits[0] = 1;
    one.n_tokens = 1;
    if (llama_decode(lctx, one) != 0) die("llama_decode failed at generation step " + std::to_string(step));
    logits = llama_get_logits_ith(lctx, 0);
  }
  llama_batch_free(one);

  std::string out = "{\"model\": " + json_string(args.model) + ", \"mmproj\": " + json_string(args.mmproj) +
                    ",\n \"prompt\": " + json_string(args.prompt) + ", \"add_special\": " +
                    (args.add_special ? "true" : "false") + ", \"parse_special\": true" +
                    ",\n \"threads\": " + std::to_string(args.threads) + ", \"batch\": " + std::to_string(args.batch) +
                    ", \"flash_attn\": " + (args.flash_attn ? "true" : "false") +
                    ", \"flash_attn_vision\": " + (fa_vision ? "true" : "false") +
                    ", \"n_vocab\": " + std::to_string(n_vocab) + ", \"n_embd_inp\": " + std::to_string(n_embd_inp) +
                    ", \"use_mrope\": " + (mrope ? "true" : "false") +
                    ", \"use_non_causal\": " + (mtmd_decode_use_non_causal(mctx, nullptr) ? "true" : "false") +
                    ", \"marker\": " + json_string(mtmd_default_marker()) +
                    ",\n \"n_tokens_total\": " + std::to_string(mtmd_helper_get_n_tokens(chunks)) +
                    ", \"n_pos_total\": " + std::to_string(mtmd_helper_get_n_pos(chunks)) +
                    ", \"n_past_end\": " + std::to_string(n_past_end) +
                    ", \"last_image_reencode_bitwise_equal\": " + (reencode_equal ? "true" : "false") +
                    ",\n \"chunks\": [" + chunks_json +
                    "\n ],\n \"images\": [" + images_json + "\n ],\n \"prompt_top\": " + prompt_top +
                    ",\n \"generated\": " + json_ints(generated.data(), generated.size()) +
                    ",\n \"generated_top\": [";
  for (size_t i = 0; i < generated_top.size(); ++i) out += (i ? ",\n  " : "\n  ") + generated_top[i];
  out += "\n ]}\n";
  write_file(args.out_dir + "/result.json", out.data(), out.size());

  mtmd_input_chunks_free(chunks);
  for (mtmd_bitmap* b : bitmaps) mtmd_bitmap_free(b);
  mtmd_free(mctx);
  llama_free(lctx);
  llama_model_free(model);
  llama_backend_free();
  std::fprintf(stderr, "mtmd_reference: wrote %s/result.json (%d image(s), %d prompt positions)\n",
               args.out_dir.c_str(), image_index, n_past_end);
  return 0;
}
