// Attention over stored K/V rows with online softmax over key tiles (flash-attention style).
// Numerics mirror llama.cpp's CPU flash-attention path: Q is converted to vec_dot_type(K type)
// before the K dot products; with F16 V the running output is accumulated in F16 as ggml does.
// It can return each row's log-sum-exp so partial attentions over disjoint key ranges can be
// merged exactly (merge_attention_partials).
#pragma once
#include <cstdint>

#include "core/ggml_type.h"
#include "kernels/threadpool.h"

namespace agentkv {

struct AttentionShape {
  int n_head = 0;      // query heads
  int n_head_kv = 0;   // KV heads (GQA: q head h reads kv head h / (n_head / n_head_kv))
  int head_dim = 0;    // same for K and V
  float scale = 0.f;   // usually 1/sqrt(head_dim)
};

// Keys/values: n_kv keys; key j is stored in row key_rows[j] (row j when key_rows is null), and
// row r holds n_head_kv*head_dim elements of k_type / v_type at k + r*k_row_bytes (same for v).
// Keys are taken in key order (j = 0, 1, ...): tiles, chunks and the online softmax follow j, never
// the row numbers, so a caller that lists a sequence's keys by position gets results that do not
// depend on where the rows are stored. mask: n_tokens x n_kv floats over keys (0 = visible,
// -INFINITY = hidden), row stride mask_stride. q: n_tokens rows of n_head*head_dim floats; out likewise.
// lse (optional): n_tokens x n_head floats, log-sum-exp of the scaled, masked scores
// (-INFINITY where a row sees no key; its output row is then zero).
struct AttentionArgs {
  AttentionShape shape;
  int64_t n_tokens = 0;
  const float* q = nullptr;
  int64_t q_stride = 0;  // floats between token rows
  const uint8_t* k = nullptr;
  const uint8_t* v = nullptr;
  GgmlType k_type = GgmlType::F16;
  GgmlType v_type = GgmlType::F16;
  size_t k_row_bytes = 0;
  size_t v_row_bytes = 0;
  int64_t n_kv = 0;
  const int32_t* key_rows = nullptr;  // n_kv row numbers, or null
  const float* mask = nullptr;
  int64_t mask_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  float* lse = nullptr;
};

void attention(const AttentionArgs& args, ThreadPool& pool);

// Merges two partial results over disjoint key sets for one row of `dim` outputs:
// out = (exp(lse_a - m) * a + exp(lse_b - m) * b) / (exp(lse_a - m) + exp(lse_b - m)).
// Returns the merged log-sum-exp.
float merge_attention_partials(const float* a, float lse_a, const float* b, float lse_b,
                               float* out, int64_t dim);

}  // namespace agentkv
