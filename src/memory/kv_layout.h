// The shape of an attention KV cache: which layers have rows, their widths and types, the cells and
// sequences, and windowed residency's hot window and tail (docs/memory-semantics.md §9). KvCache,
// KvRows and KvWindow are all made from one.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "agentkv/ggml_type.h"
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

  // One stream shared by all sequences (unified), else one per sequence.
  uint32_t n_streams() const { return unified ? 1 : n_seq_max; }
  // The stream seq lives in (0 when unified); agentkv::Error for an id outside [0, n_seq_max).
  uint32_t stream_of(SeqId seq) const {
    check_seq(seq, "stream_of");
    return unified ? 0 : static_cast<uint32_t>(seq);
  }
  // The checks of ids every part of the cache shares (inline: row access checks every row):
  // agentkv::Error for a sequence id outside [0, n_seq_max) (`op` names the operation) or a stream
  // out of range; std::logic_error for a cell out of range (cells come from the memory, not a user).
  void check_seq(SeqId seq, const char* op) const {
    if (seq < 0 || static_cast<uint32_t>(seq) >= n_seq_max) refuse_seq(seq, op);
  }
  void check_stream(uint32_t stream) const {
    if (stream >= n_streams()) refuse_stream(stream);
  }
  void check_cell(uint32_t stream, uint32_t cell) const {
    check_stream(stream);
    if (cell >= n_cells) refuse_cell(cell);
  }

 private:
  [[noreturn]] void refuse_seq(SeqId seq, const char* op) const;
  [[noreturn]] void refuse_stream(uint32_t stream) const;
  [[noreturn]] static void refuse_cell(uint32_t cell);
};

}  // namespace agentkv::memory
