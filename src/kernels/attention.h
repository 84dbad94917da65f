// Attention over stored K/V rows with online softmax over key tiles (flash-attention style).
// Numerics mirror llama.cpp's CPU flash-attention path: Q is converted to vec_dot_type(K type)
// before the K dot products; with F16 V the running output is accumulated in F16 as ggml does.
// It can return each row's log-sum-exp so partial attentions over disjoint key ranges can be
// merged exactly (merge_attention_partials).
#pragma once
#include <cstdint>

#include "agentkv/ggml_type.h"
#include "kernels/coded_rows.h"
#include "kernels/threadpool.h"

namespace agentkv {

struct AttentionShape {
  int n_head = 0;      // query heads
  int n_head_kv = 0;   // KV heads (GQA: q head h reads kv head h / (n_head / n_head_kv))
  int head_dim = 0;    // same for K and V
  float scale = 0.f;   // usually 1/sqrt(head_dim)
};

// Keys/values: n_kv keys; key j's K row is at k_rows[j] and its V row at v_rows[j], each
// n_head_kv*head_dim elements of k_type / v_type. Rows may lie anywhere (in pages of any buffer):
// the kernel only follows the pointers. Keys are taken in key order (j = 0, 1, ...): tiles, chunks
// and the online softmax follow j, never the addresses, so a caller that lists a sequence's keys by
// position gets results that do not depend on where the rows are stored. mask: n_tokens x n_kv floats over keys (0 = visible,
// -INFINITY = hidden), row stride mask_stride. q: n_tokens rows of n_head*head_dim floats; out likewise.
// lse (optional): n_tokens x n_head floats, log-sum-exp of the scaled, masked scores
// (-INFINITY where a row sees no key; its output row is then zero).
struct AttentionArgs {
  AttentionShape shape;
  int64_t n_tokens = 0;
  const float* q = nullptr;
  int64_t q_stride = 0;  // floats between token rows
  const uint8_t* const* k_rows = nullptr;  // n_kv row pointers
  const uint8_t* const* v_rows = nullptr;
  GgmlType k_type = GgmlType::F16;
  GgmlType v_type = GgmlType::F16;
  // tqc3 rows: the coordinates' widths per KV head (kernels/coded_rows.h), required for that type.
  // The kernel reads them in code units: the caller maps the query (K) and the output (V).
  const CodedHeads* k_code = nullptr;
  const CodedHeads* v_code = nullptr;
  int64_t n_kv = 0;
  const float* mask = nullptr;
  int64_t mask_stride = 0;
  float* out = nullptr;
  int64_t out_stride = 0;
  float* lse = nullptr;
  // Attention sinks (gpt-oss's attn_sinks): n_head learned logits, one per query head, that join
  // every row's softmax normaliser and contribute no value, as ggml-cpu's flash attention adds
  // them: after the keys (after the F16 accumulator is widened), once per row (split keys: with
  // the first key chunk), M = max(M, sink) and S = S * exp(M_old - M) + exp(sink - M) as one fused
  // multiply-add, VKQ scaled by exp(M_old - M). The lse then includes the sink. Null: none.
  const float* sinks = nullptr;
  // No llama.cpp order to follow for these keys (a windowed cache's tail, memory/kv_window.h): the
  // kernel may take agentkv's own algorithms for any type, as it does for tq4 / tq3.
  bool own_order = false;
};

void attention(const AttentionArgs& args, ThreadPool& pool);

// Keys per tile of the tiled path (llama.cpp's GGML_FA_TILE_KV): each tile's scores share one
// running maximum, so which keys share a tile decides the rounding. A caller leaving keys out of
// the front of a list (memory/attention_view.cpp: keys before every token's window) leaves a
// whole number of tiles out, so the others keep their tiles whatever the batch.
inline constexpr int64_t kAttentionKeyTile = 64;

// Merges two partial results over disjoint key sets for one row of `dim` outputs:
// out = (exp(lse_a - m) * a + exp(lse_b - m) * b) / (exp(lse_a - m) + exp(lse_b - m)).
// Returns the merged log-sum-exp.
float merge_attention_partials(const float* a, float lse_a, const float* b, float lse_b,
                               float* out, int64_t dim);

}  // namespace agentkv
