#include "model/attention_block.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/op_profile.h"
#include "kernels/ops.h"
#include "kernels/hadamard.h"
#include "kernels/quant.h"
#include "memory/query_window.h"

namespace agentkv {

namespace {

// Applies RoPE to every head of each token, the cos/sin table of token t from cache(t, n_rot, yarn,
// out): the angles depend on the position only, so every head of a token shares one table (per
// head, the sines and cosines were most of a prefill's rope time).
template <class CacheOf>
void rope_heads(float* x, int64_t n_tokens, int64_t stride, int n_heads, int64_t head_stride, int64_t head_dim,
                const RopeSpec& rope, const CacheOf& cache) {
  const int64_t n_rot = std::min(rope.n_rot, head_dim) & ~int64_t{1};  // rope_neox's clamping
  if (n_rot <= 0) return;
  thread_local std::vector<float> cos_sin;
  cos_sin.resize(static_cast<size_t>(n_rot));
  const RopeYarn yarn = rope.yarn();
  for (int64_t t = 0; t < n_tokens; ++t) {
    cache(t, n_rot, yarn, cos_sin.data());
    for (int h = 0; h < n_heads; ++h) rope_apply(rope.style, x + t * stride + h * head_stride, n_rot, cos_sin.data());
  }
}

}  // namespace

void rope_rows(float* x, int64_t n_tokens, int64_t stride, int n_heads, int64_t head_stride,
               int64_t head_dim, const RopeSpec& rope, const int32_t* pos) {
  rope_heads(x, n_tokens, stride, n_heads, head_stride, head_dim, rope,
             [&](int64_t t, int64_t n_rot, const RopeYarn& yarn, float* cos_sin) {
               rope_cache(static_cast<float>(pos[t]), n_rot, rope.freq_base, rope.freq_scale, rope.freq_factors, yarn,
                          cos_sin);
             });
}

void rope_rows_imrope(float* x, int64_t n_tokens, int64_t stride, int n_heads, int64_t head_stride,
                      int64_t head_dim, const RopeSpec& rope, const int32_t sections[4], const RopePos* rope_pos) {
  rope_heads(x, n_tokens, stride, n_heads, head_stride, head_dim, rope,
             [&](int64_t t, int64_t n_rot, const RopeYarn& yarn, float* cos_sin) {
               const int32_t thw[3] = {rope_pos[t].t, rope_pos[t].h, rope_pos[t].w};
               rope_cache_imrope(thw, n_rot, sections, rope.freq_base, rope.freq_scale, rope.freq_factors, yarn, cos_sin);
             });
}

void rope_batch_rows(const ForwardBatch& b, float* x, int64_t stride, int n_heads, int64_t head_stride,
                     int64_t head_dim, const RopeSpec& rope, const int32_t sections[4]) {
  const auto n = static_cast<int64_t>(b.tokens.size());
  if (!b.rope.empty()) rope_rows_imrope(x, n, stride, n_heads, head_stride, head_dim, rope, sections, b.rope.data());
  else rope_rows(x, n, stride, n_heads, head_stride, head_dim, rope, b.ub->pos.data());
}

void rms_norm_heads(float* x, int64_t n_tokens, int64_t stride, int n_heads, int64_t head_stride,
                    int64_t head_dim, const float* w, float eps) {
  for (int64_t t = 0; t < n_tokens; ++t)
    for (int h = 0; h < n_heads; ++h) {
      float* row = x + t * stride + h * head_stride;
      rms_norm(row, w, row, head_dim, eps);
    }
}

namespace {
// The attention view of the batch for a layer with this window (0: full attention), made once per
// micro-batch and window kind (every layer of a kind reads the same keys).
const std::vector<memory::AttentionGroup>& attention_view(const ForwardBatch& batch, const memory::KvCache& kv,
                                                         int32_t window, Workspace& ws) {
  if (window <= 0) {
    if (batch.attention) return *batch.attention;
    if (batch.id == 0 || ws.groups_batch_id != batch.id) {
      memory::attention_groups(kv, *batch.ub, ws.attention_groups);
      ws.groups_batch_id = batch.id;
    }
    return ws.attention_groups;
  }
  if (batch.id == 0 || ws.window_groups_batch_id != batch.id || ws.window_groups_window != window) {
    memory::attention_groups(kv, *batch.ub, ws.window_attention_groups, window);
    ws.window_groups_batch_id = batch.id;
    ws.window_groups_window = window;
  }
  return ws.window_attention_groups;
}
}  // namespace

void cached_attention(const ForwardBatch& batch, const ModelMemory& mem, int layer,
                      const AttentionShape& shape, const float* q, int64_t q_stride,
                      const float* k, const float* v, float* out, Workspace& ws, ThreadPool& pool,
                      int32_t window, const float* sinks) {
  if (!mem.window_kv || !mem.window_kv->rows().layer_has_kv(layer)) {
    cached_attention(batch, *mem.kv, layer, shape, q, q_stride, k, v, out, ws, pool, window, sinks);
    return;
  }
  ForwardBatch in_window = batch;
  in_window.placement = batch.window_placement;
  in_window.attention = nullptr;  // the main cache's view; the window part makes its own
  in_window.queries = nullptr;    // recorded queries score the main cache's keys
  cached_attention(in_window, *mem.window_kv, layer, shape, q, q_stride, k, v, out, ws, pool, window, sinks);
}

void cached_attention(const ForwardBatch& batch, memory::KvCache& kv, int layer,
                      const AttentionShape& shape, const float* q, int64_t q_stride,
                      const float* k, const float* v, float* out, Workspace& ws, ThreadPool& pool,
                      int32_t window, const float* sinks) {
  op_profile::Scope profile(op_profile::Kind::kAttention);
  const auto& ub = *batch.ub;
  const auto& placement = *batch.placement;
  const int64_t n_tokens = static_cast<int64_t>(ub.size());
  const int64_t n_embd_k = static_cast<int64_t>(shape.n_head_kv) * shape.head_dim;
  const int64_t n_q = static_cast<int64_t>(shape.n_head) * shape.head_dim;
  const auto& layout = kv.layout();

  // 1. Store K and V rows in their cells (converted to the cache's element type), rotated first
  //    when the cache stores them rotated (model/kv_rotation.h): then Q is rotated as K, and the
  //    output (a mix of rotated V rows) is turned back once per token.
  //    A batch's rows are stored by every thread (quantizing a tq row searches its scale: done
  //    by one thread, that was a tenth of a tq4 prefill at depth).
  const KvRotators* rot = layout.rotation.active() ? &ws.rotators(layout.rotation) : nullptr;
  const int n_store_threads = n_tokens > 1 ? pool.size() : 1;
  float* rotated_rows =
      rot ? ws.get(kAttentionWorkspaceSlot + 3, static_cast<size_t>(n_embd_k) * static_cast<size_t>(n_store_threads)) : nullptr;
  // tqc3 rows are written through the calibrated code's maps instead (memory/kv_code.h): it has
  // its own basis, so a side it codes is never Hadamard-rotated (model/kv_rotation.cpp).
  const memory::KvCodeLayer* code_layer = layout.code ? layout.code->layer(layer) : nullptr;
  if ((layout.type_k == GgmlType::TQC3 || layout.type_v == GgmlType::TQC3) && !code_layer)
    throw Error("attention layer " + std::to_string(layer) + ": the KV code has no entry for it");
  memory::KvRows& rows = kv.rows();
  auto store_rows = [&](int ith, int nth) {
    float* rotated_row = rotated_rows ? rotated_rows + static_cast<size_t>(ith) * static_cast<size_t>(n_embd_k) : nullptr;
    auto store = [&](const HadamardRotation* r, bool is_v, GgmlType type, const float* row, uint8_t* cell_row) {
      if (type == GgmlType::TQC3) {
        layout.code->encode_row(*code_layer, is_v, row, cell_row);
        return;
      }
      if (r && r->active()) {
        std::copy(row, row + n_embd_k, rotated_row);
        r->apply(rotated_row, n_embd_k);
        row = rotated_row;
      }
      quantize_row(type, row, cell_row, n_embd_k);
    };
    for (int64_t t = ith; t < n_tokens; t += nth) {
      const auto& ref = placement[t];
      store(rot ? &rot->k : nullptr, false, layout.type_k, k + t * n_embd_k, rows.k_row(layer, ref.stream, ref.cell));
      store(rot ? &rot->v : nullptr, true, layout.type_v, v + t * n_embd_k, rows.v_row(layer, ref.stream, ref.cell));
    }
  };
  if (n_store_threads > 1) {
    pool.run(store_rows);
  } else {
    store_rows(0, 1);
  }
  // Recorded queries are in the space KvRows::dequantize_k gives keys in (memory/query_window.h):
  // after the Hadamard rotation, before a calibrated code's map.
  const bool coded_k = layout.type_k == GgmlType::TQC3;
  const auto record_queries = [&] {
    if (batch.queries)
      for (int64_t t = 0; t < n_tokens; ++t)
        for (memory::SeqId s : ub.seq[static_cast<size_t>(t)]) batch.queries->record(layer, s, ub.pos[static_cast<size_t>(t)], q + t * q_stride);
  };
  if (coded_k) record_queries();
  if ((rot && rot->k.active()) || coded_k) {  // rotated (mapped) queries, so that scores equal the plain ones
    float* q_rot = ws.get(kAttentionWorkspaceSlot + 4, static_cast<size_t>(n_tokens * n_q));
    for (int64_t t = 0; t < n_tokens; ++t) {
      std::copy(q + t * q_stride, q + t * q_stride + n_q, q_rot + t * n_q);
      if (coded_k) {
        layout.code->map_query(*code_layer, q_rot + t * n_q, shape.n_head);
      } else {
        rot->k.apply(q_rot + t * n_q, n_q);
      }
    }
    q = q_rot;
    q_stride = n_q;
  }
  if (!coded_k) record_queries();

  // 2. Attention per group of tokens that see one sequence's keys, listed by position: the sums
  //    do not depend on which cells hold the keys (memory/attention_view.h).
  for (const memory::AttentionGroup& g : attention_view(batch, kv, window, ws)) {
    const std::vector<int>& tokens = g.tokens;
    const int64_t nt = static_cast<int64_t>(tokens.size());
    const bool contiguous = tokens.front() == 0 && nt == n_tokens;
    const float* q_rows = q;
    int64_t q_rows_stride = q_stride;
    float* out_rows = out;
    if (!contiguous) {  // gather this group's query rows
      float* qg = ws.get(kAttentionWorkspaceSlot + 1, static_cast<size_t>(nt * n_q));
      for (int64_t i = 0; i < nt; ++i)
        std::copy(q + tokens[i] * q_stride, q + tokens[i] * q_stride + n_q, qg + i * n_q);
      q_rows = qg;
      q_rows_stride = n_q;
      out_rows = ws.get(kAttentionWorkspaceSlot + 2, static_cast<size_t>(nt * n_q));
    }
    AttentionArgs a;
    a.shape = shape;
    a.n_tokens = nt;
    a.q = q_rows;
    a.q_stride = q_rows_stride;
    memory::layer_key_rows(kv, g, layer, ws.key_k_rows, ws.key_v_rows);
    a.k_rows = ws.key_k_rows.data();
    a.v_rows = ws.key_v_rows.data();
    a.k_type = layout.type_k;
    a.v_type = layout.type_v;
    if (coded_k) a.k_code = &code_layer->k_rows;
    if (layout.type_v == GgmlType::TQC3) a.v_code = &code_layer->v_rows;
    a.n_kv = static_cast<int64_t>(g.rows.size());
    a.mask = g.mask.empty() ? nullptr : g.mask.data();  // empty: every token sees every key
    a.mask_stride = a.n_kv;
    a.out = out_rows;
    a.out_stride = n_q;
    a.sinks = sinks;
    if (g.n_tail == 0) {
      attention(a, pool);
    } else {
      // Windowed cache, tail in another type or without every head's rows: attention over the
      // tail keys and over the hot ones, each with its log-sum-exp, merged per head
      // (memory/attention_view.h). A head whose rows the tail dropped (a streaming head) reads
      // the hot window alone.
      const auto n_tail = static_cast<int64_t>(g.n_tail);
      const int64_t n_heads = shape.n_head;
      const int64_t hd = shape.head_dim;
      const std::vector<int>* kept = rows.tail_kept_heads(layer);
      const int group = shape.n_head / shape.n_head_kv;
      // Query heads the tail answers, in the order of its rows' heads: all, or the kept heads' groups.
      std::vector<int>& tail_heads = ws.tail_query_heads;
      tail_heads.clear();
      for (int hk = 0; hk < shape.n_head_kv; ++hk)
        if (!kept || std::binary_search(kept->begin(), kept->end(), hk))
          for (int j = 0; j < group; ++j) tail_heads.push_back(hk * group + j);
      const auto n_tail_heads = static_cast<int64_t>(tail_heads.size());
      const int64_t tail_q = n_tail_heads * hd;
      float* tail_out = ws.get(kAttentionWorkspaceSlot + 5, static_cast<size_t>(nt * tail_q));
      float* lse = ws.get(kAttentionWorkspaceSlot + 6, static_cast<size_t>(nt * (n_tail_heads + n_heads)));
      if (n_tail_heads > 0) {
        AttentionArgs tail = a;
        tail.k_type = layout.tail_type_k;
        tail.v_type = layout.tail_type_v;
        tail.n_kv = n_tail;
        tail.out = tail_out;
        tail.out_stride = tail_q;
        tail.lse = lse;
        tail.sinks = nullptr;  // the sinks join the hot part's normaliser (and lse) alone
        tail.own_order = true;  // no llama.cpp order exists for a tail of another type
        if (kept) {  // the kept heads' query rows, back to back as their K/V rows are
          float* q_kept = ws.get(kAttentionWorkspaceSlot + 7, static_cast<size_t>(nt * tail_q));
          for (int64_t i = 0; i < nt; ++i)
            for (int64_t j = 0; j < n_tail_heads; ++j)
              std::copy_n(q_rows + i * q_rows_stride + tail_heads[static_cast<size_t>(j)] * hd, hd, q_kept + i * tail_q + j * hd);
          tail.shape.n_head_kv = static_cast<int>(kept->size());
          tail.shape.n_head = static_cast<int>(n_tail_heads);
          tail.q = q_kept;
          tail.q_stride = tail_q;
        }
        attention(tail, pool);
      }
      a.k_rows += n_tail;
      a.v_rows += n_tail;
      a.n_kv -= n_tail;
      if (a.mask) a.mask += n_tail;
      a.lse = lse + nt * n_tail_heads;
      attention(a, pool);
      for (int64_t i = 0; i < nt; ++i)
        for (int64_t j = 0; j < n_tail_heads; ++j) {
          const int64_t h = tail_heads[static_cast<size_t>(j)];
          float* o = out_rows + i * n_q + h * hd;
          merge_attention_partials(tail_out + i * tail_q + j * hd, lse[i * n_tail_heads + j], o, a.lse[i * n_heads + h], o, hd);
        }
    }
    if (!contiguous)
      for (int64_t i = 0; i < nt; ++i)
        std::copy(out_rows + i * n_q, out_rows + (i + 1) * n_q, out + tokens[i] * n_q);
  }
  if (rot && rot->v.active())
    for (int64_t t = 0; t < n_tokens; ++t) rot->v.apply_inverse(out + t * n_q, n_q);
  if (layout.type_v == GgmlType::TQC3)  // the output mixes V rows in code units: map it back once
    for (int64_t t = 0; t < n_tokens; ++t) layout.code->map_output(*code_layer, out + t * n_q, shape.n_head);
}

}  // namespace agentkv
