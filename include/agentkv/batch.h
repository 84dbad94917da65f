// A batch of tokens to decode, like llama_batch: per token its position, its sequences and
// whether its logits are wanted.
#pragma once
#include <vector>

#include "agentkv/memory.h"
#include "agentkv/tokenizer.h"

namespace agentkv {

struct Batch {
  std::vector<Token> tokens;
  std::vector<MemoryPos> pos;
  std::vector<std::vector<MemorySeqId>> seq;
  std::vector<bool> output;

  size_t size() const { return tokens.size(); }
  void clear() { tokens.clear(); pos.clear(); seq.clear(); output.clear(); }
  void add(Token t, MemoryPos p, std::vector<MemorySeqId> s, bool want_logits) {
    tokens.push_back(t);
    pos.push_back(p);
    seq.push_back(std::move(s));
    output.push_back(want_logits);
  }
  // Appends tokens [first, first+n) of one sequence at consecutive positions from p0; logits only
  // for the last one when `logits_last`.
  void add_sequence(const Token* toks, size_t n, MemoryPos p0, MemorySeqId s, bool logits_last) {
    for (size_t i = 0; i < n; ++i) add(toks[i], p0 + static_cast<MemoryPos>(i), {s}, logits_last && i + 1 == n);
  }
};

}  // namespace agentkv
