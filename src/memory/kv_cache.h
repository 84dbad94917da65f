// Attention KV cache: a cell table per stream that records for every cell its position and the set
// of sequences using it (a cell shared by several sequences after seq_cp holds its data once),
// placement of micro-batches into it, and llama.cpp's sequence operations over it. The K/V rows of
// the cells are its KvRows (memory/kv_rows.h), which cells keep hot rows its KvWindow
// (memory/kv_window.h); the cache hands both out (rows(), window()) and keeps the three in step.
// See docs/memory-semantics.md.
#pragma once
#include <cstdint>
#include <optional>
#include <utility>
#include <vector>

#include "agentkv/memory.h"
#include "memory/kv_cells.h"
#include "memory/kv_layout.h"
#include "memory/kv_rows.h"
#include "memory/kv_window.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

// Where each token of a ubatch goes.
struct CellRef {
  uint32_t stream = 0;
  uint32_t cell = 0;
};
using Placement = std::vector<CellRef>;

class KvCache final : public MemoryInterface {
 public:
  // Attention spans a prefix of cells rounded up to this many (see n_kv). llama.cpp uses 256;
  // a CPU kernel gains nothing from a large multiple and pays for every masked cell it scans.
  static constexpr uint32_t kNKvPad = 32;

  // Throws agentkv::Error for an unusable layout (no cells; n_seq_max outside [1, 256]; rows
  // KvRows refuses). Storage starts zeroed.
  explicit KvCache(const KvLayout& layout);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  // The shape (streams, stream_of a sequence: KvLayout).
  const KvLayout& layout() const { return layout_; }
  // The K/V rows of the cells, and which cells keep hot rows. Hoist rows() out of loops over rows.
  KvRows& rows() { return rows_; }
  const KvRows& rows() const { return rows_; }
  KvWindow& window() { return window_; }
  const KvWindow& window() const { return window_; }

  // Placement is transactional: find_slot only looks; apply mutates. If find_slot returns
  // nullopt the cache is unchanged and the batch does not fit. Tokens take the lowest-numbered
  // empty cells of their stream, in token order (not necessarily contiguous); Placement[i] is
  // token i's cell. Throws agentkv::Error for a malformed ubatch
  // (no sequence, seq id outside [0, n_seq_max), negative position, or, with one stream per
  // sequence, a token whose sequences live in different streams).
  std::optional<Placement> find_slot(const UBatch& ub) const;
  // Dry run of several ubatches applied one after another (as a decode of a long batch will):
  // all placements or nullopt, the cache unchanged either way.
  std::optional<std::vector<Placement>> find_slots(const std::vector<UBatch>& ubs) const;
  // Occupies the placed cells: position and every sequence of each token. The placement must
  // come from find_slot on the current state (throws std::logic_error otherwise, cache unchanged).
  // With a window the placed cells take hot rows first (KvWindow chooses whose rows leave).
  void apply(const UBatch& ub, const Placement& placement);
  // (How many cells a batch of a sequence could take: cells_free_for(cells(s), seq), memory/kv_cells.h.)

  // Attention spans cells [0, n_kv(stream)): every used cell lies below it. It is
  // min(n_cells, max(kNKvPad, used_max_p1 rounded up to kNKvPad)).
  uint32_t n_kv(uint32_t stream) const;
  // Causal mask rows for the given tokens of ub (token indices `tokens`), over [0, n_kv(stream)):
  // 0 where the cell holds the token's (first) sequence at a position <= the token's, else -inf.
  void fill_mask(const UBatch& ub, const std::vector<int>& tokens, uint32_t stream, float* mask,
                 int64_t mask_stride) const;

  // The cell table of a stream (positions, sequence sets, pending shifts), read-only.
  const KvCells& cells(uint32_t stream) const;

  // Context shift: seq_add / seq_div change cell positions only; the stored keys keep the RoPE
  // rotation of the old positions. cells(s).shift(i) is the pending delta (new - old) of cell i
  // (pending_shifts(cells(s)), memory/kv_cells.h: the cells whose keys need rotating).
  // Whoever owns RoPE rotates every used cell's K rows by its delta (all layers), then calls
  // reset_shift(). has_shift() may stay true after the shifted cells were removed (all deltas 0).
  bool has_shift() const;
  void reset_shift();

  // Sequence operations with llama.cpp's semantics: half-open [p0, p1), p0 < 0 means 0, p1 < 0
  // means no upper bound. Invalid seq ids throw agentkv::Error. Details and the reasons:
  // docs/memory-semantics.md.
  void clear() override { clear(false); }
  void clear(bool zero_data);
  // Drops seq from the cells in range (seq < 0: empties every cell in range, all streams).
  // Always true: any part of an attention sequence can be removed.
  bool seq_rm(SeqId seq, Pos p0, Pos p1) override;
  // Same stream: dst joins src's cells in range (no data copied). Different streams: only a
  // whole-sequence copy (range covering all of src) is allowed, else agentkv::Error; it replaces
  // dst by src's cells at the same cell indices and copies their K/V rows now.
  void seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) override;
  // Drops every other sequence, in every stream.
  void seq_keep(SeqId seq) override;
  // Moves seq's cells in range by delta (a cell going negative is removed); records the shift.
  // A cell shared with other sequences moves for them too (it holds one K row).
  void seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) override;
  // Integer-divides seq's positions in range by d >= 1; records the shift. Shared cells as above.
  void seq_div(SeqId seq, Pos p0, Pos p1, int d) override;
  Pos seq_pos_min(SeqId seq) const override;  // -1 when empty
  Pos seq_pos_max(SeqId seq) const override;
  MemoryUsage usage() const override;

  // Fake prefix: makes the empty sequence `seq` hold positions [0, n) without computing them.
  // Takes the n lowest empty cells of seq's stream; their K/V rows are zero (all-zero bytes, which
  // every KV type decodes as 0.0). Only the cell table is written, except for cells whose rows may
  // hold old data (known_zero() false: used before), whose rows are zeroed. O(n) small writes on a
  // fresh cache. Attention then reads these cells like real ones (same work, meaningless output).
  // agentkv::Error (nothing changed): n < 0, bad seq id, seq not empty, fewer than n empty cells.
  // first > 0: only positions [first, n) (a sliding-window cache keeps the last ones).
  void seq_fake_prefix(SeqId seq, Pos n, Pos first = 0);

  // State restore primitive (src/memory/kv_state.cpp, snapshots): sets cell `cell` of `stream` to
  // exactly (pos, seqs, shift), pos < 0 meaning empty; the caller writes the K/V rows. Throws
  // std::logic_error for a stream or cell out of range, a seq id outside [0, n_seq_max), or (one
  // stream per sequence) a sequence that does not live in `stream`; nothing changes then.
  void restore_cell(uint32_t stream, uint32_t cell, Pos pos, const SeqSet& seqs, Pos shift);

 private:
  std::optional<std::vector<Placement>> plan(const UBatch* ubs, size_t n_ubs) const;
  uint32_t token_stream(const UBatch& ub, size_t t) const;

  KvLayout layout_;
  std::vector<KvCells> cells_;  // one table per stream
  KvWindow window_;             // reads cells_
  KvRows rows_;                 // asks window_ where each cell's rows are
};

}  // namespace agentkv::memory
