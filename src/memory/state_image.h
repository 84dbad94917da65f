// What a state save holds, independent of where its bytes live: the cells of one sequence (or of
// the whole memory) with their metadata, and for every layer the rows of those cells. Rows are
// views in cell order, split into chunks: a live cache gives one chunk per contiguous cell range,
// a parsed blob one chunk into the blob, a snapshot one chunk into its own vectors. Saving,
// loading and snapshots all go through these images, so they share one validation and one
// restore path. Row sizes follow the block arithmetic of agentkv/ggml_type.h.
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "agentkv/ggml_type.h"
#include "memory/kv_cells.h"
#include "memory/kv_row_rotation.h"
#include "memory/ubatch.h"

namespace agentkv::memory {

// The rows of one tensor (K or V of one layer, conv or delta state of one layer) for an image's
// cells, concatenated in cell order.
struct RowChunks {
  std::vector<std::span<const uint8_t>> chunks;
  size_t total_bytes() const {
    size_t n = 0;
    for (const auto& c : chunks) n += c.size();
    return n;
  }
};

// Walks a RowChunks row by row (rows never straddle chunks).
class RowCursor {
 public:
  RowCursor(const RowChunks& rows, size_t row_bytes) : rows_(rows), row_bytes_(row_bytes) {}
  const uint8_t* next() {
    while (rows_.chunks[chunk_].size() == offset_) {
      ++chunk_;
      offset_ = 0;
    }
    const uint8_t* p = rows_.chunks[chunk_].data() + offset_;
    offset_ += row_bytes_;
    return p;
  }

 private:
  const RowChunks& rows_;
  size_t row_bytes_;
  size_t chunk_ = 0;
  size_t offset_ = 0;
};

// ---- attention KV cache ----

struct KvImageLayout {
  GgmlType type_k = GgmlType::F16;
  GgmlType type_v = GgmlType::F16;
  KvRotation rotation;  // its own section (kSectionKvRotation), present only when active
  uint64_t code_id = 0;  // tqc3's calibrated code (memory/kv_code.h): its own section (kSectionKvCode), else 0
  int64_t n_embd_k = 0;
  int64_t n_embd_v = 0;
  std::vector<int32_t> kv_layers;  // model layer index of every KV layer, ascending
  bool unified = true;
  uint32_t n_streams = 1;
  uint32_t n_cells = 0;    // cells per stream of the saving cache
  uint32_t n_seq_max = 1;

  size_t row_bytes_k() const { return ggml_row_size(type_k, n_embd_k); }
  size_t row_bytes_v() const { return ggml_row_size(type_v, n_embd_v); }
};

struct KvCellRecord {
  uint32_t stream = 0;
  uint32_t cell = 0;  // index in the saving cache (whole restores put it back there)
  Pos pos = 0;
  Pos shift = 0;      // pending key rotation (docs/memory-semantics.md)
  SeqSet seqs;        // per-sequence saves: exactly the saved sequence
};

struct KvImage {
  KvImageLayout layout;
  std::vector<KvCellRecord> cells;  // ascending (stream, cell)
  std::vector<RowChunks> k, v;      // per KV layer: cells.size() rows each
  // Row copies the chunks point into, when the rows could not be viewed in place (a windowed
  // cache, memory/kv_rows.h); empty otherwise. Moving the image keeps the pointers valid.
  std::vector<std::vector<uint8_t>> owned;
};

// ---- recurrent memory ----

struct RecImageLayout {
  std::vector<int32_t> layers;  // model layer index of every recurrent layer, ascending
  int64_t n_conv = 0;           // f32 elements of conv state per cell per layer
  int64_t n_ssm = 0;            // f32 elements of delta state per cell per layer
  uint32_t n_cells = 0;         // cells of the saving memory
  uint32_t n_seq_max = 1;

  size_t conv_bytes() const { return ggml_row_size(GgmlType::F32, n_conv); }
  size_t ssm_bytes() const { return ggml_row_size(GgmlType::F32, n_ssm); }
};

struct RecCellRecord {
  uint32_t cell = 0;
  Pos pos = 0;   // last absorbed position
  SeqSet seqs;   // sequences sharing the state
};

struct RecImage {
  RecImageLayout layout;
  std::vector<RecCellRecord> cells;  // ascending cell
  std::vector<RowChunks> conv, ssm;  // per recurrent layer: cells.size() rows each
};

// Copies every chunk of `src` into one vector (snapshots) and repoints `src` at it.
inline void own_rows(RowChunks& src, std::vector<uint8_t>& storage) {
  storage.clear();
  storage.reserve(src.total_bytes());
  for (const auto& c : src.chunks) storage.insert(storage.end(), c.begin(), c.end());
  src.chunks.assign(1, std::span<const uint8_t>(storage));
}

}  // namespace agentkv::memory
