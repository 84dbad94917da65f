#include "model/vision_projector.h"

#include <algorithm>
#include <cmath>

#define XXH_INLINE_ALL  // header-only, as src/memory/prefix_index.cpp uses it
#include <xxhash.h>

#include "agentkv/error.h"
#include "agentkv/fp16.h"
#include "gguf/gguf.h"
#include "kernels/attention.h"
#include "kernels/layer_norm.h"
#include "kernels/ops.h"
#include "model/weights.h"

namespace agentkv {
namespace {

constexpr float kRopeBase = 10000.0f;  // the clip graph's fixed 2-D RoPE base

int64_t require_u(const gguf::Reader& g, const std::string& key) {
  const auto v = g.metadata().get_uint(key);
  if (!v || *v == 0) throw Error(g.path() + ": missing or zero '" + key + "' (not a vision projector?)");
  return static_cast<int64_t>(*v);
}

void read_triplet(const gguf::Reader& g, const std::string& key, float out[3]) {
  const auto v = g.metadata().get_float_array(key);
  if (!v || v->size() < 3) throw Error(g.path() + ": '" + key + "' must hold 3 floats");
  for (int i = 0; i < 3; ++i) out[i] = static_cast<float>((*v)[i]);
}

// x[i] += y[i] for whole rows, split over the pool.
void add_rows(float* x, const float* y, int64_t n, ThreadPool& pool) {
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t i = b; i < e; ++i) x[i] += y[i];
  }, 4096);
}

}  // namespace

// Tensors NORM.weight / .bias (norm_width), FC1.weight / .bias (m -> m), FC2.weight / .bias (m -> out).
VisionProjector::Merger VisionProjector::bind_merger(WeightBinder& b, const std::string& norm, int64_t norm_width,
                                                     const std::string& fc1, const std::string& fc2, int64_t m,
                                                     int64_t out) {
  Merger g;
  g.norm_w = b.vector(norm + ".weight", norm_width);
  g.norm_b = b.vector(norm + ".bias", norm_width);
  g.fc1 = b.matrix(fc1 + ".weight", m, m);
  g.fc1_b = b.vector(fc1 + ".bias", m);
  g.fc2 = b.matrix(fc2 + ".weight", m, out);
  g.fc2_b = b.vector(fc2 + ".bias", out);
  return g;
}

VisionProjector::~VisionProjector() = default;

std::unique_ptr<VisionProjector> VisionProjector::load(const std::string& path) {
  std::unique_ptr<VisionProjector> p(new VisionProjector());
  p->file_ = gguf::Reader::open(path);
  const gguf::Reader& g = *p->file_;
  const auto& md = g.metadata();
  const std::string arch = md.get_string("general.architecture").value_or("");
  if (arch != "clip")
    throw Error(path + ": not a vision projector (general.architecture is '" + arch + "', expected 'clip')");
  std::string type = md.get_string("clip.projector_type").value_or("");
  if (type.empty()) type = md.get_string("clip.vision.projector_type").value_or("");
  if (type != "qwen3vl_merger")
    throw Error(path + ": projector type '" + type + "' is not supported (agentkv reads qwen3vl_merger: Qwen3.5 / Qwen3-VL)");
  if (!md.get_bool("clip.has_vision_encoder").value_or(false)) throw Error(path + ": the projector has no vision encoder");
  if (!md.get_bool("clip.use_gelu").value_or(false))
    throw Error(path + ": qwen3vl_merger projectors use GELU (clip.use_gelu); this one does not");

  VisionHparams& hp = p->hp_;
  hp.n_embd = require_u(g, "clip.vision.embedding_length");
  hp.n_layer = require_u(g, "clip.vision.block_count");
  hp.n_head = require_u(g, "clip.vision.attention.head_count");
  hp.n_ff = require_u(g, "clip.vision.feed_forward_length");
  hp.patch_size = require_u(g, "clip.vision.patch_size");
  hp.out_dim = require_u(g, "clip.vision.projection_dim");
  hp.merge = static_cast<int64_t>(md.get_uint("clip.vision.spatial_merge_size").value_or(2));
  hp.eps = static_cast<float>(md.get_float("clip.vision.attention.layer_norm_epsilon").value_or(1e-6));
  hp.head_dim = static_cast<int64_t>(md.get_uint("clip.vision.attention.head_dim").value_or(0));
  if (hp.head_dim == 0) hp.head_dim = hp.n_embd / hp.n_head;
  read_triplet(g, "clip.vision.image_mean", hp.image_mean);
  read_triplet(g, "clip.vision.image_std", hp.image_std);
  hp.image_min_pixels = static_cast<int64_t>(md.get_uint("clip.vision.image_min_pixels").value_or(0));
  hp.image_max_pixels = static_cast<int64_t>(md.get_uint("clip.vision.image_max_pixels").value_or(0));
  if (hp.merge != 2) throw Error(path + ": spatial_merge_size " + std::to_string(hp.merge) + " (the qwen3vl merger is 2x2)");
  if (hp.head_dim * hp.n_head != hp.n_embd || hp.head_dim % 4 != 0)
    throw Error(path + ": head size " + std::to_string(hp.head_dim) + " x " + std::to_string(hp.n_head) +
                " heads does not fit width " + std::to_string(hp.n_embd) + " with 2-D rope (a multiple of 4)");
  WeightBinder b(g);
  const int64_t E = hp.n_embd, P = hp.patch_size, M = hp.merge * hp.merge * E;
  const int64_t patch_ne[4] = {P, P, 3, E};
  p->patch0_ = p->patch_kernel_f16(b.flattened("v.patch_embd.weight", patch_ne), &p->patch0_f16_);
  p->patch1_ = p->patch_kernel_f16(b.flattened("v.patch_embd.weight.1", patch_ne), &p->patch1_f16_);
  p->patch_b_ = b.vector("v.patch_embd.bias", E);
  const gguf::TensorInfo* pos = g.find_tensor("v.position_embd.weight");
  if (!pos) throw Error(path + ": missing tensor 'v.position_embd.weight'");
  hp.n_pos_per_side = static_cast<int64_t>(std::lround(std::sqrt(static_cast<double>(pos->ne[1]))));
  p->pos_ = b.f32_matrix("v.position_embd.weight", E, hp.n_pos_per_side * hp.n_pos_per_side);
  for (int64_t il = 0; il < hp.n_layer; ++il) {
    const std::string n = "v.blk." + std::to_string(il) + ".";
    Layer l;
    l.ln1_w = b.vector(n + "ln1.weight", E);
    l.ln1_b = b.vector(n + "ln1.bias", E);
    l.qkv = b.matrix(n + "attn_qkv.weight", E, 3 * E);
    l.qkv_b = b.vector(n + "attn_qkv.bias", 3 * E);
    l.out = b.matrix(n + "attn_out.weight", E, E);
    l.out_b = b.vector(n + "attn_out.bias", E);
    l.ln2_w = b.vector(n + "ln2.weight", E);
    l.ln2_b = b.vector(n + "ln2.bias", E);
    l.up = b.matrix(n + "ffn_up.weight", E, hp.n_ff);
    l.up_b = b.vector(n + "ffn_up.bias", hp.n_ff);
    l.down = b.matrix(n + "ffn_down.weight", hp.n_ff, E);
    l.down_b = b.vector(n + "ffn_down.bias", E);
    // As llama.cpp's clip loader: a layer has a deepstack merger when its tensors are there.
    const std::string d = "v.deepstack." + std::to_string(il) + ".";
    if (b.has(d + "fc1.weight")) {
      l.deepstack = bind_merger(b, d + "norm", M, d + "fc1", d + "fc2", M, hp.out_dim);
      ++hp.n_deepstack;
    }
    p->layers_.push_back(l);
  }
  p->merger_ = bind_merger(b, "v.post_ln", E, "mm.0", "mm.2", M, hp.out_dim);
  b.check_all_used();
  return p;
}

// ggml_conv_2d makes its im2col in F16 (for every kernel type but BF16), and its MUL_MAT with an F16
// first operand converts the kernel to F16: the patch embedding is an F16 x F16 product whatever
// type the file stores the kernel in (the converter keeps the second temporal kernel F32).
WeightMatrix VisionProjector::patch_kernel_f16(const WeightMatrix& w, std::vector<uint16_t>* owned) const {
  if (w.type == GgmlType::F16) return w;
  if (w.type != GgmlType::F32)
    throw Error("vision projector: patch kernel of type " + std::string(ggml_type_name(w.type)) + " (F16 or F32 expected)");
  owned->resize(static_cast<size_t>(w.n_in * w.n_out));
  const float* src = reinterpret_cast<const float*>(w.data);
  for (size_t i = 0; i < owned->size(); ++i) (*owned)[i] = fp32_to_fp16(src[i]);
  WeightMatrix f16 = w;
  f16.type = GgmlType::F16;
  f16.row_bytes = ggml_row_size(GgmlType::F16, w.n_in);
  f16.data = reinterpret_cast<const uint8_t*>(owned->data());
  return f16;
}

uint64_t VisionProjector::file_hash() const { return XXH3_64bits(file_->base(), file_->file_size()); }

int64_t VisionProjector::n_tokens(int64_t nx, int64_t ny) const {
  const int64_t unit = hp_.patch_size * hp_.merge;
  return (nx / unit) * (ny / unit);
}

namespace {

// One axis of ggml_interpolate(BILINEAR | ALIGN_CORNERS) from n_src to n_dst samples, its float
// order: the two source indices of destination index i and the weight of the second.
struct AxisSample {
  int64_t lo = 0, hi = 0;
  float frac = 0.f;
};
AxisSample sample_axis(int64_t i, int64_t n_dst, int64_t n_src) {
  const float sf = n_dst > 1 && n_src > 1 ? static_cast<float>(n_dst - 1) / static_cast<float>(n_src - 1)
                                          : static_cast<float>(n_dst) / static_cast<float>(n_src);
  const float v = static_cast<float>(i) / sf;
  const auto floor_v = static_cast<int64_t>(std::floor(v));
  AxisSample a;
  a.lo = std::max<int64_t>(0, std::min(floor_v, n_src - 1));
  a.hi = std::max<int64_t>(0, std::min(floor_v + 1, n_src - 1));
  a.frac = std::max(0.0f, std::min(v - static_cast<float>(a.lo), 1.0f));
  return a;
}

}  // namespace

std::vector<float> VisionProjector::position_embeddings(int64_t gx, int64_t gy) const {
  const int64_t E = hp_.n_embd, S = hp_.n_pos_per_side;
  if (gx == S && gy == S) return std::vector<float>(pos_, pos_ + E * S * S);
  // ggml_interpolate(BILINEAR | ALIGN_CORNERS) of the {S, S, E} grid to {gx, gy, E}.
  std::vector<float> out(static_cast<size_t>(E * gx * gy));
  for (int64_t i1 = 0; i1 < gy; ++i1) {
    const AxisSample y = sample_axis(i1, gy, S);
    const float dy = y.frac;
    for (int64_t i0 = 0; i0 < gx; ++i0) {
      const AxisSample x = sample_axis(i0, gx, S);
      const float dx = x.frac;
      const float* a = pos_ + (y.lo * S + x.lo) * E;
      const float* b = pos_ + (y.lo * S + x.hi) * E;
      const float* c = pos_ + (y.hi * S + x.lo) * E;
      const float* d = pos_ + (y.hi * S + x.hi) * E;
      float* o = out.data() + (i1 * gx + i0) * E;
      // a(1-dx)(1-dy) + b dx(1-dy) + c(1-dx)dy + d dx dy with the fused multiply-adds GCC makes of
      // ggml-cpu's expression in its -march builds (x86 llama.cpp has FMA at both levels).
      for (int64_t e = 0; e < E; ++e) {
        const float bd = b[e] * dx * (1 - dy);
        o[e] = std::fma(d[e] * dx, dy, std::fma(c[e] * (1 - dx), dy, std::fma(a[e] * (1 - dx), 1 - dy, bd)));
      }
    }
  }
  return out;
}

void VisionProjector::run_layer(const Layer& l, float* x, int64_t n, const std::vector<float>& rope,
                                ThreadPool& pool) const {
  const int64_t E = hp_.n_embd, D = hp_.head_dim, H = hp_.n_head, F = hp_.n_ff;
  std::vector<float> cur(static_cast<size_t>(n * E));
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) layer_norm(x + t * E, l.ln1_w, l.ln1_b, cur.data() + t * E, E, hp_.eps);
  });
  std::vector<float> qkv(static_cast<size_t>(n * 3 * E));
  matmul(l.qkv, cur.data(), n, E, qkv.data(), 3 * E, pool);
  add_row_bias(qkv.data(), n, 3 * E, l.qkv_b);
  // 2-D RoPE on Q and K; K and V cast to F16 as the clip graph does before its flash attention.
  std::vector<uint16_t> k16(static_cast<size_t>(n * E)), v16(static_cast<size_t>(n * E));
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) {
      float* row = qkv.data() + t * 3 * E;
      for (int64_t h = 0; h < H; ++h) {
        rope_neox_apply(row + h * D, D, rope.data() + t * D);
        rope_neox_apply(row + E + h * D, D, rope.data() + t * D);
      }
      for (int64_t i = 0; i < E; ++i) {
        k16[t * E + i] = fp32_to_fp16(row[E + i]);
        v16[t * E + i] = fp32_to_fp16(row[2 * E + i]);
      }
    }
  });
  std::vector<const uint8_t*> k_rows(static_cast<size_t>(n)), v_rows(static_cast<size_t>(n));
  for (int64_t t = 0; t < n; ++t) {
    k_rows[t] = reinterpret_cast<const uint8_t*>(k16.data() + t * E);
    v_rows[t] = reinterpret_cast<const uint8_t*>(v16.data() + t * E);
  }
  AttentionArgs a;
  a.shape = {static_cast<int>(H), static_cast<int>(H), static_cast<int>(D), 1.0f / std::sqrt(static_cast<float>(D))};
  a.n_tokens = n;
  a.q = qkv.data();
  a.q_stride = 3 * E;
  a.k_rows = k_rows.data();
  a.v_rows = v_rows.data();
  a.n_kv = n;
  a.out = cur.data();
  a.out_stride = E;
  attention(a, pool);
  std::vector<float> proj(static_cast<size_t>(n * E));
  matmul(l.out, cur.data(), n, E, proj.data(), E, pool);
  add_row_bias(proj.data(), n, E, l.out_b);
  add_rows(x, proj.data(), n * E, pool);
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) layer_norm(x + t * E, l.ln2_w, l.ln2_b, cur.data() + t * E, E, hp_.eps);
  });
  std::vector<float> up(static_cast<size_t>(n * F));
  matmul(l.up, cur.data(), n, E, up.data(), F, pool);
  add_row_bias(up.data(), n, F, l.up_b);
  pool.parallel_for(n, [&](int64_t b, int64_t e) { gelu(up.data() + b * F, up.data() + b * F, (e - b) * F); });
  matmul(l.down, up.data(), n, F, proj.data(), E, pool);
  add_row_bias(proj.data(), n, E, l.down_b);
  add_rows(x, proj.data(), n * E, pool);
}

std::vector<float> VisionProjector::encode(const float* pixels, int64_t nx, int64_t ny, ThreadPool& pool) const {
  const int64_t P = hp_.patch_size, unit = P * hp_.merge, E = hp_.n_embd, D = hp_.head_dim;
  if (nx <= 0 || ny <= 0 || nx % unit != 0 || ny % unit != 0)
    throw Error("vision encoder: image of " + std::to_string(nx) + "x" + std::to_string(ny) +
                " pixels is not a multiple of " + std::to_string(unit) + " on each side");
  const int64_t gx = nx / P, gy = ny / P, n = gx * gy, K = 3 * P * P, mx = gx / 2;
  // Patch k in the merger's order: the 2x2 blocks in raster order, each block's four patches
  // (top-left, top-right, bottom-left, bottom-right) in a row, as the clip graph permutes them.
  const auto patch_xy = [&](int64_t k, int64_t* px, int64_t* py) {
    const int64_t block = k / 4, within = k % 4;
    *px = (block % mx) * 2 + within % 2;
    *py = (block / mx) * 2 + within / 2;
  };
  // im2col: each patch's values channel by channel, row by row (the kernel's {KW, KH, C} order).
  std::vector<float> patches(static_cast<size_t>(n * K));
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t k = b; k < e; ++k) {
      int64_t px, py;
      patch_xy(k, &px, &py);
      float* row = patches.data() + k * K;
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t ky = 0; ky < P; ++ky)
          for (int64_t kx = 0; kx < P; ++kx)
            row[(c * P + ky) * P + kx] = pixels[((py * P + ky) * nx + px * P + kx) * 3 + c];
    }
  });
  std::vector<float> x(static_cast<size_t>(n * E)), tmp(static_cast<size_t>(n * E));
  matmul(patch0_, patches.data(), n, K, x.data(), E, pool);
  matmul(patch1_, patches.data(), n, K, tmp.data(), E, pool);
  add_rows(x.data(), tmp.data(), n * E, pool);
  add_row_bias(x.data(), n, E, patch_b_);
  const std::vector<float> pos = position_embeddings(gx, gy);
  std::vector<float> rope(static_cast<size_t>(n * D));
  for (int64_t k = 0; k < n; ++k) {
    int64_t px, py;
    patch_xy(k, &px, &py);
    const float* p = pos.data() + (py * gx + px) * E;
    for (int64_t e = 0; e < E; ++e) x[k * E + e] += p[e];
    // Vision RoPE: the first quarter of the pairs turn with the row, the second with the column
    // (each section restarting its frequencies), rotating dims i and i + D/2.
    rope_cache(static_cast<float>(py), D / 2, kRopeBase, 1.0f, nullptr, RopeYarn{}, rope.data() + k * D);
    rope_cache(static_cast<float>(px), D / 2, kRopeBase, 1.0f, nullptr, RopeYarn{}, rope.data() + k * D + D / 2);
  }
  // Four consecutive patches are one merged token's 4E input.
  const int64_t m = n / 4, M = 4 * E, W = output_width(), O = hp_.out_dim;
  std::vector<float> out(static_cast<size_t>(m * W));
  int64_t deepstack = 0;
  std::vector<float> feat;
  for (const Layer& l : layers_) {
    run_layer(l, x.data(), n, rope, pool);
    const Merger& g = l.deepstack;
    if (!g.norm_w) continue;
    // Deepstack: the layer's output merged 2x2, normed over the 4E floats, through its own MLP.
    feat.resize(static_cast<size_t>(m * M));
    pool.parallel_for(m, [&](int64_t b, int64_t e) {
      for (int64_t t = b; t < e; ++t) layer_norm(x.data() + t * M, g.norm_w, g.norm_b, feat.data() + t * M, M, hp_.eps);
    });
    merge_mlp(g, feat.data(), m, out.data() + (++deepstack) * O, W, pool);
  }
  const Merger& g = merger_;
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    for (int64_t t = b; t < e; ++t) layer_norm(x.data() + t * E, g.norm_w, g.norm_b, x.data() + t * E, E, hp_.eps);
  });
  merge_mlp(g, x.data(), m, out.data(), W, pool);
  return out;
}

void VisionProjector::merge_mlp(const Merger& g, const float* in, int64_t m, float* out, int64_t stride,
                                ThreadPool& pool) const {
  const int64_t M = g.fc1.n_in, O = hp_.out_dim;
  std::vector<float> h(static_cast<size_t>(m * M));
  matmul(g.fc1, in, m, M, h.data(), M, pool);
  add_row_bias(h.data(), m, M, g.fc1_b);
  gelu(h.data(), h.data(), m * M);
  std::vector<float> y(static_cast<size_t>(m * O));
  matmul(g.fc2, h.data(), m, M, y.data(), O, pool);
  add_row_bias(y.data(), m, O, g.fc2_b);
  for (int64_t t = 0; t < m; ++t) std::copy_n(y.data() + t * O, O, out + t * stride);
}

}  // namespace agentkv
