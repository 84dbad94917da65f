#include "memory/checkpoints.h"

#include <algorithm>

#include "memory/memory_state.h"

namespace agentkv::memory {
namespace {

struct AttentionCells {
  uint32_t count = 0;
  Pos min = -1;
};

// seq's attention cells at positions <= p.
AttentionCells attention_cells_upto(const KvCache& kv, SeqId seq, Pos p) {
  const KvCells& c = kv.cells(kv.stream_of(seq));
  AttentionCells r;
  for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
    if (!c.has_seq(i, seq) || c.pos(i) > p) continue;
    ++r.count;
    r.min = r.min < 0 ? c.pos(i) : std::min(r.min, c.pos(i));
  }
  return r;
}

}  // namespace

CheckpointStore::CheckpointStore(size_t byte_budget) : budget_(byte_budget) {}

uint64_t CheckpointStore::hash_tokens(std::span<const int32_t> tokens) {
  uint64_t h = 0xcbf29ce484222325ull;  // FNV-1a 64
  for (int32_t t : tokens) {
    const auto u = static_cast<uint32_t>(t);
    for (int b = 0; b < 4; ++b) {
      h ^= (u >> (8 * b)) & 0xffu;
      h *= 0x100000001b3ull;
    }
  }
  return h;
}

std::vector<CheckpointInfo> CheckpointStore::list(SeqId seq) const {
  std::vector<CheckpointInfo> out;
  for (const auto& c : entries_)
    if (c.info.seq == seq) out.push_back(c.info);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.pos < b.pos; });
  return out;
}

bool CheckpointStore::take(const SequenceMemory& mem, SeqId seq, std::span<const int32_t> tokens) {
  const Pos pos = mem.seq_pos_max(seq);
  if (pos < 0) return false;
  Checkpoint c;
  c.info.seq = seq;
  c.info.pos = pos;
  c.info.n_tokens = static_cast<int64_t>(tokens.size());
  c.has_tokens = !tokens.empty();
  c.token_hash = hash_tokens(tokens);
  if (mem.kv()) {
    const AttentionCells a = attention_cells_upto(*mem.kv(), seq, pos);
    c.attn_cells = a.count;
    c.attn_pos_min = a.min;
  }
  // The recurrent part only: the attention cells up to pos stay in the cache.
  if (mem.rec()) c.state = MemorySnapshot::capture(mem, seq, kStatePartialOnly);
  c.info.bytes = c.state.row_bytes() + sizeof(Checkpoint);
  if (c.info.bytes > budget_) return false;

  for (size_t i = 0; i < entries_.size(); ++i)
    if (entries_[i].info.seq == seq && entries_[i].info.pos == pos) {
      erase_at(i);
      break;
    }
  c.last_used = ++tick_;
  bytes_ += c.info.bytes;
  entries_.push_back(std::move(c));
  evict_to_budget();
  return true;
}

bool CheckpointStore::still_applies(const SequenceMemory& mem, const Checkpoint& c,
                                    std::span<const int32_t> tokens) const {
  if (c.has_tokens && !tokens.empty()) {
    if (c.info.n_tokens > static_cast<int64_t>(tokens.size())) return false;
    if (hash_tokens(tokens.first(static_cast<size_t>(c.info.n_tokens))) != c.token_hash) return false;
  }
  if (mem.kv()) {
    const AttentionCells a = attention_cells_upto(*mem.kv(), c.info.seq, c.info.pos);
    if (a.count != c.attn_cells || a.min != c.attn_pos_min) return false;
  }
  return true;
}

std::optional<CheckpointInfo> CheckpointStore::restore_latest_before(SequenceMemory& mem, SeqId seq, Pos pos,
                                                                     std::span<const int32_t> tokens) {
  while (true) {
    // The latest candidate; stale ones are dropped and the search goes on.
    size_t best = entries_.size();
    for (size_t i = 0; i < entries_.size(); ++i) {
      const auto& c = entries_[i];
      if (c.info.seq != seq || c.info.pos >= pos) continue;
      if (best == entries_.size() || c.info.pos > entries_[best].info.pos) best = i;
    }
    if (best == entries_.size()) return std::nullopt;
    if (!still_applies(mem, entries_[best], tokens)) {
      erase_at(best);
      continue;
    }
    Checkpoint& c = entries_[best];
    if (mem.rec()) c.state.restore(mem, seq);  // validates first; throws with memory unchanged
    if (mem.kv()) mem.kv()->seq_rm(seq, c.info.pos + 1, -1);
    c.last_used = ++tick_;
    const CheckpointInfo info = c.info;
    drop_after(seq, info.pos);
    return info;
  }
}

void CheckpointStore::drop(SeqId seq) {
  for (size_t i = entries_.size(); i-- > 0;)
    if (entries_[i].info.seq == seq) erase_at(i);
}

void CheckpointStore::drop_after(SeqId seq, Pos pos) {
  for (size_t i = entries_.size(); i-- > 0;)
    if (entries_[i].info.seq == seq && entries_[i].info.pos > pos) erase_at(i);
}

void CheckpointStore::clear() {
  entries_.clear();
  bytes_ = 0;
}

void CheckpointStore::erase_at(size_t i) {
  bytes_ -= entries_[i].info.bytes;
  entries_.erase(entries_.begin() + static_cast<std::ptrdiff_t>(i));
}

void CheckpointStore::evict_to_budget() {
  while (bytes_ > budget_ && !entries_.empty()) {
    size_t lru = 0;
    for (size_t i = 1; i < entries_.size(); ++i)
      if (entries_[i].last_used < entries_[lru].last_used) lru = i;
    erase_at(lru);
  }
}

}  // namespace agentkv::memory
