#include "memory/sequence_memory.h"

#include <algorithm>

namespace agentkv::memory {

SequenceMemory::SequenceMemory(std::unique_ptr<KvCache> kv, std::unique_ptr<RecurrentMemory> rec)
    : kv_(std::move(kv)), rec_(std::move(rec)) {}

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
  return p;
}

void SequenceMemory::apply(const UBatch& ub, const MemoryPlacement& placement) {
  if (rec_) rec_->apply(ub, placement.rec);
  if (kv_) kv_->apply(ub, placement.kv);
}

void SequenceMemory::clear() {
  if (kv_) kv_->clear();
  if (rec_) rec_->clear();
}

bool SequenceMemory::seq_rm(SeqId seq, Pos p0, Pos p1) {
  if (rec_ && !rec_->seq_rm(seq, p0, p1)) return false;
  if (kv_) return kv_->seq_rm(seq, p0, p1);
  return true;
}

void SequenceMemory::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  if (kv_) kv_->seq_cp(src, dst, p0, p1);
  if (rec_) rec_->seq_cp(src, dst, p0, p1);
}

void SequenceMemory::seq_keep(SeqId seq) {
  if (kv_) kv_->seq_keep(seq);
  if (rec_) rec_->seq_keep(seq);
}

void SequenceMemory::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  if (kv_) kv_->seq_add(seq, p0, p1, delta);
  if (rec_) rec_->seq_add(seq, p0, p1, delta);
}

void SequenceMemory::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  if (kv_) kv_->seq_div(seq, p0, p1, d);
  if (rec_) rec_->seq_div(seq, p0, p1, d);
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
  if (kv_ && rec_) {
    const Pos a = kv_->seq_pos_max(seq), r = rec_->seq_pos_max(seq);
    if (a < 0 || r < 0) return -1;
    return std::min(a, r);
  }
  return kv_ ? kv_->seq_pos_max(seq) : rec_->seq_pos_max(seq);
}

}  // namespace agentkv::memory
