#include "memory/sequence_memory.h"

#include <algorithm>
#include <string>

#include "agentkv/error.h"

namespace agentkv::memory {

SequenceMemory::SequenceMemory(std::unique_ptr<KvCache> kv, std::unique_ptr<RecurrentMemory> rec,
                               std::unique_ptr<WindowKv> window)
    : kv_(std::move(kv)), rec_(std::move(rec)), window_(std::move(window)) {
  if (window_ && !kv_) throw Error("sequence memory: a window part needs the main KV cache");
}

SequenceMemory::~SequenceMemory() = default;

std::optional<MemoryPlacement> SequenceMemory::prepare(const UBatch& ub) const {
  MemoryPlacement p;
  if (rec_) {
    auto r = rec_->find_slot(ub);
    if (!r) return std::nullopt;
    p.rec = std::move(*r);
  }
  if (kv_) {
    auto k = kv_->find_slot(ub);
    if (!k) return std::nullopt;
    p.kv = std::move(*k);
  }
  if (window_) {
    auto w = window_->kv().find_slot(ub);
    if (!w) return std::nullopt;
    p.window = std::move(*w);
  }
  return p;
}

void SequenceMemory::apply(const UBatch& ub, const MemoryPlacement& placement) {
  if (rec_) rec_->apply(ub, placement.rec);
  if (kv_) kv_->apply(ub, placement.kv);
  if (window_) {
    window_->kv().apply(ub, placement.window);
    window_->prune(ub);
  }
}

void SequenceMemory::set_cell_keeper(std::unique_ptr<CellKeeper> keeper) {
  if (keeper_) throw Error("sequence memory: a cache already keeps this memory's cells");
  keeper_ = std::move(keeper);
  if (window_ && keeper_) window_->set_keeper_seq(keeper_->keeper_seq());  // its rows there are not pruned either
}

void SequenceMemory::clear() {
  if (keeper_) keeper_->forget_all();
  if (kv_) kv_->clear();
  if (rec_) rec_->clear();
  if (window_) window_->kv().clear();
}

bool SequenceMemory::seq_rm(SeqId seq, Pos p0, Pos p1) {
  if (window_ && !window_->can_remove(seq, p0, p1)) return false;
  if (rec_ && !rec_->seq_rm(seq, p0, p1)) return false;
  // Every sequence, but not the kept cells (of either cache).
  auto remove = [&](KvCache& kv) {
    if (seq >= 0 || !keeper_) return kv.seq_rm(seq, p0, p1);
    for (SeqId s = 0; s < static_cast<SeqId>(kv.layout().n_seq_max); ++s)
      if (s != keeper_->keeper_seq()) kv.seq_rm(s, p0, p1);
    return true;
  };
  if (window_) remove(window_->kv());
  return !kv_ || remove(*kv_);
}

void SequenceMemory::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  if (kv_) kv_->seq_cp(src, dst, p0, p1);
  if (rec_) rec_->seq_cp(src, dst, p0, p1);
  if (window_) window_->kv().seq_cp(src, dst, p0, p1);
}

void SequenceMemory::seq_keep(SeqId seq) {
  // Every other sequence goes, but not the kept cells (of either cache).
  auto keep = [&](KvCache& kv) {
    if (!keeper_) return kv.seq_keep(seq);
    if (seq < 0 || seq >= static_cast<SeqId>(kv.layout().n_seq_max))
      throw Error("sequence memory: seq_keep: sequence id " + std::to_string(seq) + " out of range");
    for (SeqId s = 0; s < static_cast<SeqId>(kv.layout().n_seq_max); ++s)
      if (s != seq && s != keeper_->keeper_seq()) kv.seq_rm(s, -1, -1);
  };
  if (kv_) keep(*kv_);
  if (rec_) rec_->seq_keep(seq);
  if (window_) keep(window_->kv());
}

namespace {
void refuse_shift(const char* op, bool has_kv, bool has_rec) {
  if (!has_kv)
    throw Error(std::string("sequence memory: ") + op + ": there is no attention KV cache to shift");
  if (has_rec)
    throw Error(std::string("sequence memory: ") + op +
                ": a recurrent state cannot be shifted (it absorbed its tokens in order; a gap cannot be cut "
                "out of it). Roll back with a checkpoint instead");
  throw Error(std::string("sequence memory: ") + op +
              ": this model's RoPE cannot re-rotate stored keys (context shift unsupported)");
}
}  // namespace

void SequenceMemory::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  if (!can_shift()) refuse_shift("seq_add", kv_ != nullptr, rec_ != nullptr);
  if (keeper_) keeper_->before_move(seq, p0, p1);
  kv_->seq_add(seq, p0, p1, delta);
  if (window_) window_->kv().seq_add(seq, p0, p1, delta);
}

void SequenceMemory::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  if (!can_shift()) refuse_shift("seq_div", kv_ != nullptr, rec_ != nullptr);
  if (keeper_) keeper_->before_move(seq, p0, p1);
  kv_->seq_div(seq, p0, p1, d);
  if (window_) window_->kv().seq_div(seq, p0, p1, d);
}

void SequenceMemory::seq_fake_prefix(SeqId seq, Pos n) {
  // Validate both parts before changing either, so a refusal leaves the hybrid in lockstep.
  if (n < 0) throw Error("sequence memory: seq_fake_prefix length " + std::to_string(n) + " is negative");
  if (seq < 0 || seq >= kMaxSeq) throw Error("sequence memory: seq_fake_prefix: sequence id " + std::to_string(seq) + " out of range");
  if (kv_) {
    if (kv_->seq_pos_max(seq) >= 0)
      throw Error("sequence memory: seq_fake_prefix: sequence " + std::to_string(seq) + " is not empty");
    const KvCells& c = kv_->cells(kv_->layout().stream_of(seq));
    if (static_cast<uint32_t>(n) > c.size() - c.used())
      throw Error("sequence memory: seq_fake_prefix of " + std::to_string(n) + " positions: only " +
                  std::to_string(c.size() - c.used()) + " empty KV cells");
  }
  if (rec_) {
    if (seq >= static_cast<SeqId>(rec_->n_cells()))
      throw Error("sequence memory: seq_fake_prefix: sequence id " + std::to_string(seq) + " out of range");
    if (rec_->seq_cell(seq) >= 0)
      throw Error("sequence memory: seq_fake_prefix: sequence " + std::to_string(seq) + " is not empty");
  }
  if (window_) {
    const KvCache& w = window_->kv();
    if (w.seq_pos_max(seq) >= 0)
      throw Error("sequence memory: seq_fake_prefix: sequence " + std::to_string(seq) + " is not empty");
    const KvCells& c = w.cells(w.layout().stream_of(seq));
    if (static_cast<uint32_t>(std::min(n, window_->keep())) > c.size() - c.used())
      throw Error("sequence memory: seq_fake_prefix: only " + std::to_string(c.size() - c.used()) +
                  " empty cells in the sliding-window cache");
  }
  if (kv_) kv_->seq_fake_prefix(seq, n);
  if (rec_) rec_->seq_fake_prefix(seq, n);
  if (window_) window_->fake_prefix(seq, n);
}

Pos SequenceMemory::seq_pos_min(SeqId seq) const {
  if (kv_ && rec_) {
    const Pos a = kv_->seq_pos_min(seq), r = rec_->seq_pos_min(seq);
    if (a < 0 || r < 0) return -1;
    return std::max(a, r);
  }
  return kv_ ? kv_->seq_pos_min(seq) : rec_->seq_pos_min(seq);
}

Pos SequenceMemory::seq_pos_max(SeqId seq) const {
  Pos p = -1;
  if (kv_ && rec_) {
    const Pos a = kv_->seq_pos_max(seq), r = rec_->seq_pos_max(seq);
    if (a < 0 || r < 0) return -1;
    p = std::min(a, r);
  } else {
    p = kv_ ? kv_->seq_pos_max(seq) : rec_->seq_pos_max(seq);
  }
  // The window part holds a sequence's last positions: both parts must vouch for the end.
  if (window_ && p >= 0) {
    const Pos w = window_->kv().seq_pos_max(seq);
    return w < 0 ? -1 : std::min(p, w);
  }
  return p;
}

MemoryUsage SequenceMemory::usage() const {
  MemoryUsage u;
  for (const MemoryInterface* part : {static_cast<const MemoryInterface*>(kv_.get()),
                                      static_cast<const MemoryInterface*>(rec_.get()),
                                      static_cast<const MemoryInterface*>(window_ ? &window_->kv() : nullptr)}) {
    if (!part) continue;
    const MemoryUsage p = part->usage();
    u.cells_used += p.cells_used;
    u.cells_total += p.cells_total;
    u.bytes_total += p.bytes_total;
  }
  return u;
}

}  // namespace agentkv::memory
