// The Qwen3.5 / Qwen3-VL vision tower (an mmproj GGUF of clip.projector_type "qwen3vl_merger", as
// llama.cpp's converter writes it): patch embedding (the two temporal kernels of the Conv3D applied
// to the one still frame), learned position embeddings resized to the patch grid, ViT blocks with
// 2-D RoPE over all patches (no mask), the post-norm, and the 2x2 spatial merger into the language
// model's width; Qwen3-VL's deepstack mergers beside it where the file has them. The computation and its float order follow llama.cpp's clip graph
// (tools/mtmd/models/qwen3vl.cpp) on its CPU backend; matmuls, attention and norms are src/kernels'.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kernels/matmul.h"
#include "kernels/threadpool.h"

namespace agentkv {

namespace gguf { class Reader; }
class WeightBinder;

struct VisionHparams {
  int64_t n_embd = 0;
  int64_t n_layer = 0;
  int64_t n_head = 0;
  int64_t head_dim = 0;
  int64_t n_ff = 0;
  int64_t patch_size = 0;
  int64_t merge = 2;            // spatial_merge_size
  int64_t n_pos_per_side = 0;   // the learned position grid is side x side
  int64_t out_dim = 0;          // the language model's width
  int64_t n_deepstack = 0;      // ViT layers with a deepstack merger (Qwen3-VL; none in Qwen3.5)
  float eps = 1e-6f;
  float image_mean[3] = {0.5f, 0.5f, 0.5f};
  float image_std[3] = {0.5f, 0.5f, 0.5f};
  int64_t image_min_pixels = 0;  // clip.vision.image_min_pixels / max_pixels; 0: llama.cpp's default
  int64_t image_max_pixels = 0;
};

class VisionProjector {
 public:
  // Throws agentkv::Error naming the file and the problem (not a qwen3vl_merger projector, a
  // missing key or tensor, a shape that does not fit).
  static std::unique_ptr<VisionProjector> load(const std::string& path);
  ~VisionProjector();

  const VisionHparams& hparams() const { return hp_; }
  // XXH3 of the whole file (metadata and weights).
  uint64_t file_hash() const;
  // Floats per merged token: out_dim, then out_dim more per deepstack layer (llama.cpp's order).
  int64_t output_width() const { return hp_.out_dim * (1 + hp_.n_deepstack); }
  // Merged tokens of an nx x ny pixel image (nx, ny multiples of patch_size * merge).
  int64_t n_tokens(int64_t nx, int64_t ny) const;

  // pixels: ny rows of nx pixels of 3 floats (R, G, B interleaved; normalised), as llama.cpp's
  // clip_image_f32. Returns n_tokens(nx, ny) rows of output_width() floats, the merged tokens in raster
  // order of the merged grid (row by row), as llama.cpp's image embeddings.
  std::vector<float> encode(const float* pixels, int64_t nx, int64_t ny, ThreadPool& pool) const;

 private:
  // A 2x2 merger: its norm (the main path's post-norm over E before merging; a deepstack merger's
  // over the merged 4E), fc1 + bias (4E -> 4E), GELU, fc2 + bias (4E -> out_dim).
  struct Merger {
    const float* norm_w = nullptr;
    const float* norm_b = nullptr;
    WeightMatrix fc1;
    const float* fc1_b = nullptr;
    WeightMatrix fc2;
    const float* fc2_b = nullptr;
  };
  struct Layer {
    const float* ln1_w = nullptr;
    const float* ln1_b = nullptr;
    WeightMatrix qkv;
    const float* qkv_b = nullptr;
    WeightMatrix out;
    const float* out_b = nullptr;
    const float* ln2_w = nullptr;
    const float* ln2_b = nullptr;
    WeightMatrix up;
    const float* up_b = nullptr;
    WeightMatrix down;
    const float* down_b = nullptr;
    Merger deepstack;  // Qwen3-VL's merger of this layer's output; no norm_w: none
  };
  VisionProjector() = default;
  // The learned position embeddings at a gx x gy patch grid (bilinear, corners aligned, as
  // ggml_interpolate), gy rows of gx rows of n_embd floats.
  std::vector<float> position_embeddings(int64_t gx, int64_t gy) const;
  WeightMatrix patch_kernel_f16(const WeightMatrix& w, std::vector<uint16_t>* owned) const;
  void run_layer(const Layer& l, float* x, int64_t n, const std::vector<float>& rope, ThreadPool& pool) const;
  // A merger's MLP over m merged tokens of 4E floats (normed already) into m rows of out_dim
  // floats, written `stride` floats apart.
  static Merger bind_merger(WeightBinder& b, const std::string& norm, int64_t norm_width, const std::string& fc1,
                            const std::string& fc2, int64_t m, int64_t out);
  void merge_mlp(const Merger& g, const float* in, int64_t m, float* out, int64_t stride, ThreadPool& pool) const;

  std::unique_ptr<gguf::Reader> file_;
  VisionHparams hp_;
  WeightMatrix patch0_, patch1_;
  std::vector<uint16_t> patch0_f16_, patch1_f16_;  // F32 kernels as the product reads them
  const float* patch_b_ = nullptr;
  const float* pos_ = nullptr;
  std::vector<Layer> layers_;
  Merger merger_;  // the main path: post_ln, mm.0, mm.2
};

}  // namespace agentkv
