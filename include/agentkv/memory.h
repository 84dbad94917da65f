// agentkv's memory interface (the role of llama.cpp's llama_memory_i): the sequence operations every
// memory of a context offers — the attention KV cache, the recurrent state of hybrid models, and
// the two moved in lockstep — with llama.cpp's semantics (docs/memory-semantics.md).
//
// Positions are int32; every range is half-open [p0, p1), p0 < 0 meaning 0 and p1 < 0 meaning no
// upper bound. Sequence ids outside [0, n_seq_max) are an agentkv::Error, except seq_rm's -1 (all
// sequences). A refused operation changes nothing. Placement of a micro-batch (prepare / apply)
// and state read / write are part of the implementations' own headers (src/memory/), since their
// types (micro-batches, images) are internal.
#pragma once
#include <cstddef>
#include <cstdint>

namespace agentkv {

using MemorySeqId = int32_t;
using MemoryPos = int32_t;

struct MemoryUsage {
  uint64_t cells_used = 0;    // attention: KV cells in use; recurrent: state cells in use
  uint64_t cells_total = 0;
  uint64_t bytes_total = 0;   // storage allocated for rows / states
};

class MemoryInterface {
 public:
  virtual ~MemoryInterface() = default;

  // Empties every sequence.
  virtual void clear() = 0;
  // Drops seq's positions in range (seq < 0: every sequence). False when the memory cannot honour
  // it (a recurrent state cannot forget a suffix it absorbed); nothing changes then.
  virtual bool seq_rm(MemorySeqId seq, MemoryPos p0, MemoryPos p1) = 0;
  // dst shares src's positions in range (no data copied where the memory can share).
  virtual void seq_cp(MemorySeqId src, MemorySeqId dst, MemoryPos p0, MemoryPos p1) = 0;
  // Drops every sequence but seq.
  virtual void seq_keep(MemorySeqId seq) = 0;
  // Moves seq's positions in range by delta / divides them by d (context shift).
  virtual void seq_add(MemorySeqId seq, MemoryPos p0, MemoryPos p1, MemoryPos delta) = 0;
  virtual void seq_div(MemorySeqId seq, MemoryPos p0, MemoryPos p1, int d) = 0;
  // Smallest / largest position seq holds; -1 when it holds none.
  virtual MemoryPos seq_pos_min(MemorySeqId seq) const = 0;
  virtual MemoryPos seq_pos_max(MemorySeqId seq) const = 0;

  virtual MemoryUsage usage() const = 0;
};

}  // namespace agentkv
