// A context's KV cache as plain figures (agentkv/kv_status.h), read from its layout and residency.
#include "agentkv/kv_status.h"

#include <string>
#include <vector>

#include "engine/context_impl.h"
#include "memory/kv_code.h"
#include "memory/kv_row_rotation.h"

namespace agentkv {

KvStatus kv_status(const Context& ctx) {
  KvStatus s;
  const memory::KvCache* kv = sequence_memory(ctx).kv();
  if (!kv) return s;
  const memory::KvLayout& l = kv->layout();
  s.present = true;
  s.type_k = l.type_k;
  s.type_v = l.type_v;
  s.n_cells = l.n_cells;
  s.cells_used = kv->usage().cells_used;
  s.rotated = l.rotation.active();
  s.rotation_k_block = l.rotation.k_block;
  s.rotation_v_block = l.rotation.v_block;
  s.rotation_seed = l.rotation.seed;
  s.rotation = memory::describe(l.rotation);
  s.code_id = l.code ? l.code->id() : 0;
  s.storage_bytes = kv->usage().bytes_total;
  if (const memory::KvCache* w = memory::window_kv_of(sequence_memory(ctx))) {
    s.window_cells = w->layout().n_cells;
    s.window_storage_bytes = w->usage().bytes_total;
  }
  const memory::KvResidency r = kv->window().residency();
  const memory::KvRowBytes bytes = kv->rows().bytes(r);
  s.windowed = r.windowed;
  s.hot_cells = l.hot_cells;
  s.tail_type_k = l.tail_type_k;
  s.tail_type_v = l.tail_type_v;
  s.tail_dir = l.tail_dir;
  s.hot_used = r.hot_used;
  s.tail_used = r.tail_used;
  s.hot_bytes = bytes.hot;
  s.tail_bytes = bytes.tail;
  s.demotions = r.demotions;
  s.held_bytes = bytes.held;
  const auto n_head_kv = static_cast<uint32_t>(ctx.model().config().n_head_kv);
  for (int layer = 0; layer < static_cast<int>(l.layer_has_kv.size()); ++layer) {
    if (!kv->rows().layer_has_kv(layer)) continue;
    s.tail_heads_total += n_head_kv;
    const std::vector<int>* kept = kv->rows().tail_kept_heads(layer);
    s.tail_heads_kept += kept ? static_cast<uint32_t>(kept->size()) : n_head_kv;
    if (!kept) continue;
    for (int h : *kept) s.tail_heads += (s.tail_heads.empty() ? "" : ",") + std::to_string(layer) + "." + std::to_string(h);
  }
  return s;
}

std::pair<uint64_t, uint64_t> seq_residency(const Context& ctx, MemorySeqId seq) {
  const memory::KvCache* kv = sequence_memory(ctx).kv();
  return kv && kv->window().windowed() ? kv->window().seq_residency(seq) : std::pair<uint64_t, uint64_t>{0, 0};
}

namespace {
uint64_t seq_bytes(const memory::KvCache* kv, MemorySeqId seq) {
  if (!kv || seq < 0 || static_cast<uint32_t>(seq) >= kv->layout().n_seq_max) return 0;
  const uint64_t n = kv->cells(kv->layout().stream_of(seq)).seq_positions(seq).size();
  const memory::KvRows& rows = kv->rows();
  return n * rows.n_kv_layers() * (rows.row_bytes_k() + rows.row_bytes_v());
}
}  // namespace

SeqKvBytes seq_kv_bytes(const Context& ctx, MemorySeqId seq) {
  const memory::SequenceMemory& mem = sequence_memory(ctx);
  return SeqKvBytes{seq_bytes(mem.kv(), seq), seq_bytes(memory::window_kv_of(mem), seq)};
}

}  // namespace agentkv
