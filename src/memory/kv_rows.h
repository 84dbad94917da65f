// The K/V rows of an attention KV cache: per layer with KV, a hot row per slot in type_k / type_v
// and, with a window (KvWindow), a tail row per cell in tail_type_k / tail_type_v (only the kept
// heads' rows with retrieval heads). Which slot a cell holds is the window's; where its bytes are
// and how they convert between the types is this class's. The cell table is the cache's (KvCache).
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

#include "memory/kv_code.h"
#include "memory/kv_layout.h"
#include "memory/kv_storage.h"
#include "memory/kv_window.h"

namespace agentkv::memory {

// The K/V storage of a cache (KvRows::bytes).
struct KvRowBytes {
  size_t hot = 0;   // hot K/V storage, all layers and streams
  size_t tail = 0;  // tail K/V storage reserved (pages touched only when written)
  size_t held = 0;  // K/V rows of the used cells, each in the type it is stored in
};

class KvRows {
 public:
  // Throws agentkv::Error for an unusable layout (KV type not one of f32, f16, bf16, q8_0, q4_0,
  // q4_1, q5_0, q5_1, iq4_nl, tq4, tq3, tqc3; n_embd not a multiple of the type's block size; tqc3
  // without its code or in a window; retrieval heads that do not cut rows into whole blocks).
  // Storage starts zeroed. The window decides which cells' rows are hot.
  KvRows(const KvLayout& layout, KvWindow& window);
  KvRows(const KvRows&) = delete;
  KvRows& operator=(const KvRows&) = delete;

  // One hot cell's K / V row of one model layer (which must have KV): row_bytes_k() /
  // row_bytes_v() bytes of type_k / type_v. Where a row lives is the memory's business; a cell
  // a batch was just placed in is always hot. std::logic_error for a cell whose rows are in the
  // tail (KvWindow::is_hot false): read and write those through the calls below.
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
  // A tail cell's stored K row (tail_type_k; std::logic_error for a hot cell).
  const uint8_t* tail_k_row(int layer, uint32_t stream, uint32_t cell) const;
  // The KV heads whose rows a layer's tail keeps, ascending, when it keeps only some
  // (KvLayout::tail_heads); nullptr when it keeps every head. Its tail rows hold those heads'
  // rows back to back (what row_pointers hands out for a tail cell).
  const std::vector<int>* tail_kept_heads(int layer) const;
  // Whether some layer's tail keeps only some heads: its tail cells' full rows are gone, so
  // read_k / read_v (state files, page records) refuse them with agentkv::Error.
  bool tail_drops_heads() const { return drops_heads_; }
  // The stored K and V rows of cells[0..n) of one layer (hot or tail rows, in their own types):
  // what attention follows (memory/attention_view.h).
  void row_pointers(int layer, uint32_t stream, const int32_t* cells, size_t n, const uint8_t** k,
                    const uint8_t** v) const;
  // Storage of one model layer (which must have KV) in one stream of a cache that is not
  // windowed: n_cells rows of row_bytes_k() bytes (K) and row_bytes_v() (V), indexed by cell.
  // For tests and state views (std::logic_error on a windowed cache).
  uint8_t* k_data(int layer, uint32_t stream);
  uint8_t* v_data(int layer, uint32_t stream);
  const uint8_t* k_data(int layer, uint32_t stream) const;
  const uint8_t* v_data(int layer, uint32_t stream) const;
  size_t row_bytes_k() const { return row_k_; }
  size_t row_bytes_v() const { return row_v_; }
  bool layer_has_kv(int layer) const {
    return layer >= 0 && static_cast<size_t>(layer) < kv_index_.size() && kv_index_[static_cast<size_t>(layer)] >= 0;
  }
  uint32_t n_kv_layers() const { return static_cast<uint32_t>(k_.size()); }
  // The storage, and the rows the cells of `held` (KvWindow::residency) hold in it.
  KvRowBytes bytes(const KvResidency& held) const;
  // Backs every page of the K/V storage with memory (contents unchanged), so that rows never
  // written cost real memory traffic when read: for benchmarks that read fake-prefix cells.
  void prefault();
  // Copy-on-write primitive (PrefixIndex::unshare): copies cell src's K/V rows of every layer
  // into cell dst of the same stream; the cell table is the caller's to update.
  void copy_cell_rows(uint32_t stream, uint32_t src, uint32_t dst);

 private:
  // Rows change wholesale only with the cell table that says what they hold (known-zero marks,
  // copies across streams, demotions the window chose): the cache does that.
  friend class KvCache;

  // Where one K (or V) row of a cell is stored: its bytes, their type, and whether it holds only the
  // kept heads (a tail row of a layer that drops heads).
  struct StoredRow {
    uint8_t* row;
    GgmlType type;
    size_t bytes;
    bool partial;
  };
  int kv_layer(int layer) const;  // agentkv::Error for a layer without KV
  // A cell's hot slot (-1: tail); without a window the cell itself, the window not read.
  int32_t slot(uint32_t stream, uint32_t cell) const {
    return windowed_ ? window_.slot_of(stream, cell) : static_cast<int32_t>(cell);
  }
  uint8_t* hot(bool is_k, int kv_layer, uint32_t stream, int32_t slot) const {
    return (is_k ? k_ : v_)[static_cast<size_t>(kv_layer)].data() +
           (static_cast<size_t>(stream) * n_hot_ + static_cast<size_t>(slot)) * (is_k ? row_k_ : row_v_);
  }
  size_t tail_row_bytes(bool is_k, int kv_layer) const { return (is_k ? row_tk_ : row_tv_)[static_cast<size_t>(kv_layer)]; }
  uint8_t* tail(bool is_k, int kv_layer, uint32_t stream, uint32_t cell) const;
  StoredRow stored(bool is_k, int kv_layer, uint32_t stream, uint32_t cell) const;
  // stored() of a model layer, stream and cell checked (std::logic_error / agentkv::Error).
  StoredRow checked_stored(bool is_k, int layer, uint32_t stream, uint32_t cell) const;
  // A hot cell's row; std::logic_error for a cell whose rows are in the tail.
  uint8_t* hot_row(bool is_k, int layer, uint32_t stream, uint32_t cell) const;
  // A whole row of type `from` into its stored place (the kept heads only, for a partial row).
  void put(const StoredRow& to, bool is_k, int kv_layer, GgmlType from, const uint8_t* src) const;
  // tqc3 caches: the code's entry for `layer` (throws when it has none).
  const KvCodeLayer* coded_layer(int layer) const;
  void check_tail_heads();

  // For the cache (the cell table changes with them):
  // Every layer's rows of one cell into another cell's place (either may be hot or in the tail). A
  // tail cell whose rows lack the dropped heads makes a tail cell: its copy cannot be hot either.
  void copy_cell(uint32_t src_stream, uint32_t src, uint32_t dst_stream, uint32_t dst);
  // Cells [cell0, cell0 + n) of one stream into the same cells of another.
  void copy_rows(uint32_t src_stream, uint32_t dst_stream, uint32_t cell0, uint32_t n);
  // A cell the window moved out of hot slot `slot` (KvWindow::make_hot): its rows, still in the
  // slot, converted into its tail rows.
  void demote(uint32_t stream, uint32_t cell, int32_t slot);
  // Zeroes every layer's rows of cells [first, first + n) of a stream, wherever they live; zero_all
  // every byte of the storage.
  void zero_cells(uint32_t stream, uint32_t first, uint32_t n);
  void zero_all();
  size_t storage_bytes() const;  // hot and tail storage, all layers and streams

  const KvLayout& layout_;
  KvWindow& window_;
  bool windowed_ = false;      // window_.windowed(), read with every row
  uint32_t n_hot_ = 0;         // hot rows per stream: window_.hot_cells()
  std::vector<int> kv_index_;  // model layer -> index into k_/v_, or -1
  size_t row_k_ = 0, row_v_ = 0;
  std::vector<KvStorage> k_, v_;  // hot rows per KV layer: n_streams * n_hot rows, stream-major
  // With a window: tail rows per KV layer (n_streams * n_cells rows indexed by cell) and their
  // bytes per row.
  std::vector<size_t> row_tk_, row_tv_;
  std::vector<KvStorage> tk_, tv_;
  // Retrieval heads (KvLayout::tail_heads): per KV layer whether its tail keeps only some heads,
  // and which (ascending, maybe none); a tail row then holds those heads' rows back to back.
  std::vector<char> tail_partial_;
  std::vector<std::vector<int>> tail_keep_;
  bool drops_heads_ = false;
  int64_t head_k_ = 0, head_v_ = 0;  // elements per head (with tail_heads)
};

}  // namespace agentkv::memory
