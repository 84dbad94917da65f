// A micro-batch as the memory sees it: for every token its position and the sequences it joins.
#pragma once
#include <cstddef>
#include <cstdint>
#include <vector>

namespace agentkv::memory {

using SeqId = int32_t;
using Pos = int32_t;
constexpr int kMaxSeq = 256;  // same bound as llama.cpp's LLAMA_MAX_SEQ

struct UBatch {
  std::vector<Pos> pos;                 // one per token
  std::vector<std::vector<SeqId>> seq;  // one non-empty list per token
  size_t size() const { return pos.size(); }
  void add(Pos p, std::vector<SeqId> s) { pos.push_back(p); seq.push_back(std::move(s)); }
};

}  // namespace agentkv::memory
