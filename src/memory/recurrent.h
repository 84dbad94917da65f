// Recurrent memory of hybrid models (Gated DeltaNet layers): per sequence one conv state and one
// delta (SSM) state per recurrent layer, f32. A cell holds one state; a sequence's state lives in
// its "tail" cell. seq_cp shares the cell; the next update of a shared cell copies it first
// (copy-on-write). See docs/memory-semantics.md.
#pragma once
#include <cstdint>
#include <optional>
#include <set>
#include <vector>

#include "agentkv/memory.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

struct RecurrentLayout {
  std::vector<bool> layer_recurrent;  // indexed by model layer
  int64_t n_conv = 0;                 // floats of conv state per cell per layer ((d_conv-1) * C)
  int64_t n_ssm = 0;                  // floats of delta state per cell per layer (D_k * D_v * H_v)
  uint32_t n_seq_max = 1;
};

// Which cell each sequence of a ubatch updates (after copy-on-write).
struct RecurrentPlacement {
  std::vector<std::pair<SeqId, uint32_t>> seq_cell;  // one entry per distinct sequence
  uint32_t cell_of(SeqId s) const {
    for (const auto& [seq, cell] : seq_cell)
      if (seq == s) return cell;
    return UINT32_MAX;
  }
};

class RecurrentMemory final : public MemoryInterface {
 public:
  explicit RecurrentMemory(const RecurrentLayout& layout);
  ~RecurrentMemory();

  const RecurrentLayout& layout() const;
  uint32_t n_cells() const;

  // Transactional placement. Requires every token to belong to exactly one sequence and each
  // sequence's tokens to be consecutive positions after its last absorbed one. nullopt: no free
  // cell for a copy-on-write (memory unchanged).
  std::optional<RecurrentPlacement> find_slot(const UBatch& ub) const;
  // Performs copy-on-write copies, zeroes states of new sequences, records the last position.
  void apply(const UBatch& ub, const RecurrentPlacement& placement);

  float* conv_state(int layer, uint32_t cell);
  float* ssm_state(int layer, uint32_t cell);
  const float* conv_state(int layer, uint32_t cell) const;
  const float* ssm_state(int layer, uint32_t cell) const;

  // llama.cpp semantics: positions are the last absorbed token's; seq_pos_min == seq_pos_max.
  void clear() override;
  // Removing a suffix that includes the last absorbed token cannot be undone: returns false and
  // leaves memory unchanged (a checkpoint restore is the way back). Ranges entirely before or
  // after the last position are accepted without touching the state.
  bool seq_rm(SeqId seq, Pos p0, Pos p1) override;
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) override;
  void seq_keep(SeqId seq) override;
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) override;
  void seq_div(SeqId seq, Pos p0, Pos p1, int d) override;
  Pos seq_pos_min(SeqId seq) const override;
  Pos seq_pos_max(SeqId seq) const override;
  MemoryUsage usage() const override;

  // Gives seq a cell of its own, positioned at `pos` (last absorbed position, >= 0), for a
  // caller about to write its whole state (checkpoint or state restore): a cell seq alone uses
  // is reused, otherwise (no cell, or one shared after seq_cp) seq moves to an empty cell and the
  // others keep the shared one. The state contents are left as they were (copy on write
  // semantics do not apply: the caller overwrites them). Returns the cell. agentkv::Error for a
  // bad seq id or pos.
  uint32_t seq_own_cell(SeqId seq, Pos pos);
  // Fake prefix: the empty sequence seq reports positions up to n - 1 with an all-zero state,
  // as if n tokens had been absorbed. n = 0 does nothing. agentkv::Error (nothing changed):
  // bad seq id, n < 0, seq not empty.
  void seq_fake_prefix(SeqId seq, Pos n);

  // Read access for state save / snapshots (src/memory/recurrent_state.cpp): the cell holding a
  // sequence's state (-1 if none), a cell's last absorbed position (-1 = empty) and its sequences.
  int32_t seq_cell(SeqId seq) const;
  Pos cell_pos(uint32_t cell) const;
  const std::set<SeqId>& cell_seqs(uint32_t cell) const;
  // State restore primitive: empty cell `cell` becomes the state of `seqs` (non-empty, none of
  // them holding a cell) at last position pos >= 0; the caller then writes the states. Throws
  // std::logic_error when a precondition does not hold; nothing changes then.
  void restore_cell(uint32_t cell, Pos pos, const std::vector<SeqId>& seqs);

 private:
  struct Impl;
  Impl* impl_;
};

}  // namespace agentkv::memory
