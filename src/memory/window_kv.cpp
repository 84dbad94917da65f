#include "memory/window_kv.h"

#include <algorithm>
#include <map>
#include <string>

#include "agentkv/error.h"

namespace agentkv::memory {

WindowKv::WindowKv(std::unique_ptr<KvCache> kv, Pos window, uint32_t cached_cells)
    : kv_(std::move(kv)), window_(window), cached_cells_(cached_cells) {
  if (!kv_) throw Error("sliding-window memory: no cache");
  if (window_ < 1) throw Error("sliding-window memory: window " + std::to_string(window_) + " must be positive");
  if (cached_cells_ > kv_->layout().n_cells)
    throw Error("sliding-window memory: " + std::to_string(cached_cells_) + " cells for cached pages in a cache of " +
                std::to_string(kv_->layout().n_cells));
}

uint32_t WindowKv::cells_needed(Pos window, uint32_t n_seq_max, bool unified, uint32_t n_ubatch) {
  const uint64_t per_seq = static_cast<uint64_t>(window - 1 + kRollback);
  // A micro-batch is placed before the previous one's rows are pruned: room for both.
  const uint64_t n = (unified ? n_seq_max : 1) * per_seq + 2 * static_cast<uint64_t>(n_ubatch);
  const uint64_t padded = (n + KvCache::kNKvPad - 1) / KvCache::kNKvPad * KvCache::kNKvPad;
  return static_cast<uint32_t>(std::min<uint64_t>(padded, UINT32_MAX));
}

void WindowKv::prune(const UBatch& ub) {
  std::map<SeqId, Pos> first;  // each sequence of ub: its first position there
  for (size_t t = 0; t < ub.size(); ++t)
    for (SeqId s : ub.seq[t]) {
      auto [it, fresh] = first.emplace(s, ub.pos[t]);
      if (!fresh) it->second = std::min(it->second, ub.pos[t]);
    }
  const auto n_seq = static_cast<SeqId>(kv_->layout().n_seq_max);
  for (SeqId s = 0; s < n_seq; ++s) {
    if (s == keeper_) continue;
    const Pos lo = kv_->seq_pos_min(s);
    if (lo < 0) continue;
    const auto it = first.find(s);
    const Pos next = it != first.end() ? it->second : kv_->seq_pos_max(s) + 1;
    const Pos from = next - keep();
    if (lo < from) kv_->seq_rm(s, 0, from);
  }
}

bool WindowKv::can_remove_one(SeqId seq, Pos p0, Pos p1) const {
  const Pos hi = kv_->seq_pos_max(seq);
  if (hi < 0 || p0 <= 0) return true;  // empty, or everything goes
  const bool removes_end = p1 < 0 || p1 > hi;
  if (!removes_end || p0 > hi) return true;
  // The sequence goes on at p0: it must still hold positions [p0 - window + 1, p0).
  return kv_->seq_pos_min(seq) <= std::max<Pos>(0, p0 - window_ + 1);
}

bool WindowKv::can_remove(SeqId seq, Pos p0, Pos p1) const {
  if (seq >= 0) return can_remove_one(seq, p0, p1);
  for (SeqId s = 0; s < static_cast<SeqId>(kv_->layout().n_seq_max); ++s)
    if (s != keeper_ && !can_remove_one(s, p0, p1)) return false;
  return true;
}

void WindowKv::fake_prefix(SeqId seq, Pos n) { kv_->seq_fake_prefix(seq, n, std::max<Pos>(0, n - keep())); }

}  // namespace agentkv::memory
