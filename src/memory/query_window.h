// The queries a sequence asked most recently, per attention layer: the observation window that an
// eviction policy in the manner of SnapKV scores keys with (agentkv/retention.h) when a context
// shift fires. The model records each token's query rows as the attention kernel sees them
// (after RoPE, and after the KV rotation when the cache stores rotated rows, so that a query times
// a stored key is the attention score). A ring of the last `window` tokens per sequence; it is
// cleared for a sequence whose positions change (its recorded queries carry the old positions).
#pragma once
#include <cstdint>
#include <vector>

#include "memory/ubatch.h"

namespace agentkv::memory {

class QueryWindow {
 public:
  // layer_has_kv: per model layer, whether it attends; n_q: floats per query row of one layer
  // (n_head * head_dim).
  QueryWindow(std::vector<bool> layer_has_kv, int64_t n_q, uint32_t n_seq_max, uint32_t window);

  uint32_t window() const { return window_; }
  int64_t n_q() const { return n_q_; }
  // Token at `pos` of `seq` asked `q` (n_q floats) in `layer`. A token that joins several
  // sequences is recorded for each. The first attention layer opens a token's slot (a micro-batch
  // runs layer by layer), the others fill it; a token the ring no longer holds is ignored.
  void record(int layer, SeqId seq, Pos pos, const float* q);
  // The recorded queries of seq in `layer`: count() rows, oldest first.
  uint32_t count(SeqId seq) const;
  const float* row(int layer, SeqId seq, uint32_t i) const;
  Pos pos(SeqId seq, uint32_t i) const;  // the position of the token that asked row i
  void clear(SeqId seq);

 private:
  struct Ring {
    std::vector<float> rows;  // n_layers * window * n_q
    std::vector<Pos> pos;     // per slot of the ring: the position of the token of layer 0's row
    uint32_t next = 0, filled = 0;
  };
  int n_layers_;
  int first_layer_;
  int64_t n_q_;
  uint32_t window_;
  std::vector<Ring> rings_;
};

}  // namespace agentkv::memory
