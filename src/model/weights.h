// Binding GGUF tensors to typed views with shape checks (the engine keeps pointers into the
// mapping; nothing is copied). Every tensor in the file must be claimed (as llama.cpp requires).
#pragma once
#include <set>
#include <span>
#include <string>

#include "kernels/matmul.h"

namespace agentkv {

namespace gguf { class Reader; }

class WeightBinder {
 public:
  explicit WeightBinder(const gguf::Reader& g) : g_(g) {}
  // A 2-D matrix of ne {n_in, n_out}.
  WeightMatrix matrix(const std::string& name, int64_t n_in, int64_t n_out);
  // Slice `index` of a 3-D stacked tensor {n_in, n_out, n_slices} (MoE experts).
  WeightMatrix matrix3d(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_slices,
                        int64_t index);
  // A tensor of any rank read as a matrix: rows along its last dimension, each the flattened rest
  // (a conv kernel {KW, KH, C_in, C_out}: C_out rows of KW*KH*C_in, as ggml's im2col orders them).
  WeightMatrix flattened(const std::string& name, std::span<const int64_t> ne);
  // A 1-D F32 vector of n elements.
  const float* vector(const std::string& name, int64_t n);
  // A 2-D F32 tensor {n0, n1}, returned as a flat pointer.
  const float* f32_matrix(const std::string& name, int64_t n0, int64_t n1);
  bool has(const std::string& name) const;
  // Throws if some tensor of the file was never bound (optionally ignoring a name prefix set).
  void check_all_used(const std::set<std::string>& ignored_prefixes = {}) const;

 private:
  const gguf::Reader& g_;
  std::set<std::string> used_;
};

}  // namespace agentkv
