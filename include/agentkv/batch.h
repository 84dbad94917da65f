// A batch of tokens to decode, like llama_batch: per token its position, its sequences and
// whether its logits are wanted; optionally, rows of input embeddings instead of token ids (image
// tokens) and multi-axis rope positions (Qwen3.5's interleaved M-RoPE).
#pragma once
#include <cstdint>
#include <vector>

#include "agentkv/memory.h"
#include "agentkv/tokenizer.h"

namespace agentkv {

// A token's rope position on the time, height and width axes. A text token at rope position p is
// (p, p, p); an image's token in row y, column x of its merged grid is (r0, r0 + y, r0 + x), r0 the
// rope position the image starts at (llama.cpp's mtmd). The memory never sees it: a token's cache
// position stays its index in the sequence (docs/vision.md, "Positions").
struct RopePos {
  int32_t t = 0, h = 0, w = 0;
  bool operator==(const RopePos&) const = default;
};

struct Batch {
  std::vector<Token> tokens;
  std::vector<MemoryPos> pos;
  std::vector<std::vector<MemorySeqId>> seq;
  std::vector<bool> output;
  // Empty, or one per token: the rope positions (empty: each token turns by its position).
  std::vector<RopePos> rope;
  // Empty, or one per token: a row of `embd` (Model::n_embd_input() floats each) that is the token's input
  // instead of its token_embd row, or -1. A token with a row keeps an id (the image's content
  // key in the prefix index) that need not be a vocabulary id.
  std::vector<int32_t> embd_row;
  std::vector<float> embd;

  size_t size() const { return tokens.size(); }
  void clear() {
    tokens.clear(); pos.clear(); seq.clear(); output.clear(); rope.clear(); embd_row.clear(); embd.clear();
  }
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
  // Appends a token with its rope position and (row non-null) its input row of n_embd floats
  // (Model::n_embd_input()).
  // Tokens added before by add() get the rope position of a text token at their position.
  void add_multimodal(Token t, MemoryPos p, MemorySeqId s, bool want_logits, RopePos r, const float* row,
                      size_t n_embd) {
    for (size_t i = rope.size(); i < tokens.size(); ++i) rope.push_back({pos[i], pos[i], pos[i]});
    embd_row.resize(tokens.size(), -1);
    add(t, p, {s}, want_logits);
    rope.push_back(r);
    embd_row.push_back(row ? static_cast<int32_t>(embd.size() / n_embd) : -1);
    if (row) embd.insert(embd.end(), row, row + n_embd);
  }
};

}  // namespace agentkv
