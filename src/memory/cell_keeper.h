// What a SequenceMemory must respect of a cache that keeps KV cells alive under a sequence id of
// its own (the prefix index, prefix_index.h): that sequence belongs to no request, so clear(),
// seq_rm(-1, ...) and seq_keep leave it alone, and a cell it keeps is copied before a sequence
// moves its positions (seq_add / seq_div: copy-on-write). The memory knows the cache only through
// this interface, so the cache depends on the memory and not the other way round.
#pragma once
#include "memory/ubatch.h"

namespace agentkv::memory {

class CellKeeper {
 public:
  virtual ~CellKeeper() = default;
  // The sequence id the kept cells are held under.
  virtual SeqId keeper_seq() const = 0;
  // The memory is cleared: forget every kept cell.
  virtual void forget_all() = 0;
  // seq is about to move its positions [p0, p1): kept cells in that range must be copied first.
  virtual void before_move(SeqId seq, Pos p0, Pos p1) = 0;
};

}  // namespace agentkv::memory
