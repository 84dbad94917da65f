// Sizes that benchmarks report: parameters, weight bytes, and the bytes one decode step must read.
#pragma once
#include <cstdint>

#include "agentkv/ggml_type.h"
#include "agentkv/model.h"

namespace agentkv {

struct ModelStats {
  int64_t n_params = 0;
  uint64_t weight_bytes = 0;        // all tensors of the file
  uint64_t decode_bytes_per_token = 0;  // weights read per decoded token (embedding: one row)
};

ModelStats model_stats(const Model& model);
// KV bytes attention reads per decoded token at context depth `depth`.
uint64_t kv_bytes_per_token(const Model& model, GgmlType type_k, GgmlType type_v, int64_t depth);

// Resident set size of this process now and at its peak (bytes; 0 where /proc is unavailable).
uint64_t current_rss_bytes();
uint64_t peak_rss_bytes();

}  // namespace agentkv
