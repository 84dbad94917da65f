// Attention KV cache: per-layer K/V rows in a selectable element type, and a cell table that
// records for every cell its position and the set of sequences using it (a cell shared by several
// sequences after seq_cp holds its data once). See docs/memory-semantics.md.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "agentkv/memory.h"
#include "agentkv/ggml_type.h"
#include "memory/kv_cells.h"
#include "memory/kv_code.h"
#include "memory/kv_row_rotation.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

struct KvLayout {
  std::vector<bool> layer_has_kv;  // indexed by model layer; false for recurrent layers
  int64_t n_embd_k = 0;            // K elements per cell per layer (n_head_kv * head_dim)
  int64_t n_embd_v = 0;
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  KvRotation rotation;
  // The calibrated code tqc3 rows are written under (memory/kv_code.h); set when either type is tqc3.
  std::shared_ptr<const KvCode> code;
  uint32_t n_cells = 0;   // cells per stream
  uint32_t n_seq_max = 1;
  bool unified = true;    // one stream shared by all sequences, else one stream per sequence
  // Windowed residency (docs/memory-semantics.md §9). 0 or >= n_cells: every cell's rows are hot
  // (type_k / type_v). Otherwise at most hot_cells cells per stream hold hot rows and every other
  // cell holds its rows in the tail, as tail_type_k / tail_type_v: a cell being written takes a hot
  // row, and when none is free the hot cell furthest behind its sequence's newest position moves to
  // the tail (converted: exact when the tail type equals the hot type). Attention reads both.
  uint32_t hot_cells = 0;
  GgmlType tail_type_k = GgmlType::F16;
  GgmlType tail_type_v = GgmlType::F16;
  // Where the tail's rows live: "" = RAM; a folder = files mapped from it (created and unlinked at
  // once, so nothing is left behind), which the OS pages to disk: a context beyond RAM.
  std::string tail_dir;
  // Retrieval heads (DuoAttention's split, docs/memory-semantics.md §9): per model layer, a mask
  // of the KV heads whose rows the tail keeps (bit h: head h). A cell leaving the hot window keeps
  // only those heads' rows; every other head then attends over the hot window alone (a streaming
  // head). Empty: the tail keeps every head (the default). Needs a window and n_head_kv.
  std::vector<uint64_t> tail_heads;
  uint32_t n_head_kv = 0;  // heads per row, for tail_heads: a head is n_embd / n_head_kv elements
};

// Where the rows of a windowed cache live (KvCache::residency).
struct KvResidency {
  bool windowed = false;
  uint32_t hot_cells = 0;       // hot rows per stream
  uint64_t hot_used = 0;        // used cells whose rows are hot (all streams)
  uint64_t tail_used = 0;       // used cells whose rows are in the tail
  uint64_t demotions = 0;       // cells moved from hot rows to the tail since construction
  size_t hot_bytes = 0;         // hot K/V storage, all layers and streams
  size_t tail_bytes = 0;        // tail K/V storage reserved (pages touched only when written)
  size_t held_bytes = 0;        // K/V rows of the used cells, each in the type it is stored in
};

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

  // Throws agentkv::Error for an unusable layout (KV type not one of f32, f16, bf16, q8_0, q4_0,
  // q4_1, q5_0, q5_1, iq4_nl, tq4, tq3; n_embd not a multiple of the type's block size; no cells; n_seq_max
  // outside [1, 256]). Storage starts zeroed.
  explicit KvCache(const KvLayout& layout);
  ~KvCache();
  KvCache(const KvCache&) = delete;
  KvCache& operator=(const KvCache&) = delete;

  const KvLayout& layout() const;
  uint32_t n_streams() const;
  uint32_t stream_of(SeqId seq) const;  // 0 when unified

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
  void apply(const UBatch& ub, const Placement& placement);

  // One hot cell's K / V row of one model layer (which must have KV): row_bytes_k() /
  // row_bytes_v() bytes of type_k / type_v. Where a row lives is the memory's business; a cell
  // a batch was just placed in is always hot. std::logic_error for a cell whose rows are in the
  // tail (is_hot false): read and write those through the calls below.
  uint8_t* k_row(int layer, uint32_t stream, uint32_t cell);
  uint8_t* v_row(int layer, uint32_t stream, uint32_t cell);
  const uint8_t* k_row(int layer, uint32_t stream, uint32_t cell) const;
  const uint8_t* v_row(int layer, uint32_t stream, uint32_t cell) const;
  // Any cell's rows, wherever they live, as type_k / type_v bytes (read_*: converted from the
  // tail type when the cell is in the tail) or floats; write_* / quantize_k store them in the
  // cell's current place (converted to the tail type there). A tail that keeps only some heads
  // (tail_kept_heads): read_* throw agentkv::Error for its cells, dequantize_k gives the dropped
  // heads as zeros, write_* / quantize_k store the kept heads.
  void read_k(int layer, uint32_t stream, uint32_t cell, uint8_t* out) const;
  void read_v(int layer, uint32_t stream, uint32_t cell, uint8_t* out) const;
  void write_k(int layer, uint32_t stream, uint32_t cell, const uint8_t* row);
  void write_v(int layer, uint32_t stream, uint32_t cell, const uint8_t* row);
  void dequantize_k(int layer, uint32_t stream, uint32_t cell, float* out) const;
  void quantize_k(int layer, uint32_t stream, uint32_t cell, const float* row);
  // tqc3 caches: the code's entry for `layer` (throws when it has none).
  const KvCodeLayer* coded_layer(int layer) const;
  // Windowed residency: whether a cell's rows are hot, a tail cell's stored rows (tail_type_k /
  // tail_type_v; std::logic_error for a hot cell), and the counts.
  bool is_hot(uint32_t stream, uint32_t cell) const;
  const uint8_t* tail_k_row(int layer, uint32_t stream, uint32_t cell) const;
  const uint8_t* tail_v_row(int layer, uint32_t stream, uint32_t cell) const;
  // The KV heads whose rows a layer's tail keeps, ascending, when it keeps only some
  // (KvLayout::tail_heads); nullptr when it keeps every head. Its tail rows hold those heads'
  // rows back to back (what row_pointers hands out for a tail cell).
  const std::vector<int>* tail_kept_heads(int layer) const;
  // Whether some layer's tail keeps only some heads: its tail cells' full rows are gone, so
  // read_k / read_v (state files, page records) refuse them with agentkv::Error.
  bool tail_drops_heads() const;
  // Windowed residency: the sequence whose cells are kept for later, not read now (the prefix
  // index's holder): a cell only it holds leaves the window before any other sequence's. -1: none.
  // Otherwise the window gives up the cells furthest behind their own sequence's newest position.
  void set_window_background(SeqId seq);
  // Whether the cache has a window (KvLayout::hot_cells below n_cells); residency() also counts
  // cells, a scan of the cell table.
  bool windowed() const;
  KvResidency residency() const;
  // Cells of one sequence whose rows are hot / in the tail (first, second).
  std::pair<uint64_t, uint64_t> seq_residency(SeqId seq) const;
  // The stored K and V rows of cells[0..n) of one layer (hot or tail rows, in their own types):
  // what attention follows (memory/attention_view.h).
  void row_pointers(int layer, uint32_t stream, const int32_t* cells, size_t n, const uint8_t** k,
                    const uint8_t** v) const;
  // Storage of one model layer (which must have KV) in one stream of a cache that is not
  // windowed: n_cells rows of row_bytes_k() bytes (K) and row_bytes_v() (V), indexed by cell.
  // For tests only (std::logic_error on a windowed cache).
  uint8_t* k_data(int layer, uint32_t stream);
  uint8_t* v_data(int layer, uint32_t stream);
  const uint8_t* k_data(int layer, uint32_t stream) const;
  const uint8_t* v_data(int layer, uint32_t stream) const;
  size_t row_bytes_k() const;
  size_t row_bytes_v() const;
  bool layer_has_kv(int layer) const;
  uint32_t n_kv_layers() const;
  size_t total_bytes() const;  // K and V storage of all layers and streams
  // Backs every page of the K/V storage with memory (contents unchanged), so that rows never
  // written cost real memory traffic when read: for benchmarks that read fake-prefix cells.
  void prefault();

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
  // rotation of the old positions. cells(s).shift(i) is the pending delta (new - old) of cell i.
  // Whoever owns RoPE rotates every used cell's K rows by its delta (all layers), then calls
  // reset_shift(). has_shift() may stay true after the shifted cells were removed (all deltas 0).
  bool has_shift() const;
  void reset_shift();
  // The cells of a stream whose keys need rotating: (cell, pending delta) for every used cell with
  // a delta != 0 whose rows are not known to be all zero (rotating zeros changes nothing).
  std::vector<std::pair<uint32_t, Pos>> pending_shifts(uint32_t stream) const;
  // Cells of seq's stream that a batch of seq could take without touching another sequence:
  // empty ones and those only seq uses (they go when seq drops its suffix).
  size_t cells_free_for(SeqId seq) const;

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
  void seq_fake_prefix(SeqId seq, Pos n);

  // State restore primitive (src/memory/kv_state.cpp, snapshots): sets cell `cell` of `stream` to
  // exactly (pos, seqs, shift), pos < 0 meaning empty; the caller writes the K/V rows. Throws
  // std::logic_error for a stream or cell out of range, a seq id outside [0, n_seq_max), or (one
  // stream per sequence) a sequence that does not live in `stream`; nothing changes then.
  void restore_cell(uint32_t stream, uint32_t cell, Pos pos, const SeqSet& seqs, Pos shift);
  // Copy-on-write primitive (PrefixIndex::unshare): copies cell src's K/V rows of every layer
  // into cell dst of the same stream; the cell table is the caller's to update.
  void copy_cell_rows(uint32_t stream, uint32_t src, uint32_t dst);

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentkv::memory
