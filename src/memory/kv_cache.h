// Attention KV cache: per-layer K/V rows in a selectable element type, and a cell table that
// records for every cell its position and the set of sequences using it (a cell shared by several
// sequences after seq_cp holds its data once). See docs/memory-semantics.md.
#pragma once
#include <bitset>
#include <cstdint>
#include <optional>
#include <vector>

#include "core/ggml_type.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

struct KvLayout {
  std::vector<bool> layer_has_kv;  // indexed by model layer; false for recurrent layers
  int64_t n_embd_k = 0;            // K elements per cell per layer (n_head_kv * head_dim)
  int64_t n_embd_v = 0;
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  uint32_t n_cells = 0;   // cells per stream
  uint32_t n_seq_max = 1;
  bool unified = true;    // one stream shared by all sequences, else one stream per sequence
};

// Where each token of a ubatch goes.
struct CellRef {
  uint32_t stream = 0;
  uint32_t cell = 0;
};
using Placement = std::vector<CellRef>;

class KvCache {
 public:
  explicit KvCache(const KvLayout& layout);
  ~KvCache();

  const KvLayout& layout() const;
  uint32_t n_streams() const;
  uint32_t stream_of(SeqId seq) const;  // 0 when unified

  // Placement is transactional: find_slot only looks; apply mutates. If find_slot returns
  // nullopt the cache is unchanged and the batch does not fit.
  std::optional<Placement> find_slot(const UBatch& ub) const;
  void apply(const UBatch& ub, const Placement& placement);

  // Storage of one model layer (which must have KV) in one stream: n_cells rows of
  // row_bytes_k() bytes (K) and row_bytes_v() (V).
  uint8_t* k_data(int layer, uint32_t stream);
  uint8_t* v_data(int layer, uint32_t stream);
  const uint8_t* k_data(int layer, uint32_t stream) const;
  const uint8_t* v_data(int layer, uint32_t stream) const;
  size_t row_bytes_k() const;
  size_t row_bytes_v() const;

  // Attention spans cells [0, n_kv(stream)): every used cell lies below it.
  uint32_t n_kv(uint32_t stream) const;
  // Causal mask rows for the given tokens of ub (token indices `tokens`), over [0, n_kv(stream)):
  // 0 where the cell holds the token's (first) sequence at a position <= the token's, else -inf.
  void fill_mask(const UBatch& ub, const std::vector<int>& tokens, uint32_t stream, float* mask,
                 int64_t mask_stride) const;

  // Sequence operations with llama.cpp's semantics: half-open [p0, p1), negative = open end.
  void clear();
  bool seq_rm(SeqId seq, Pos p0, Pos p1);
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1);
  void seq_keep(SeqId seq);
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta);
  void seq_div(SeqId seq, Pos p0, Pos p1, int d);
  Pos seq_pos_min(SeqId seq) const;  // -1 when empty
  Pos seq_pos_max(SeqId seq) const;

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace agentkv::memory
