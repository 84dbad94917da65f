#include "memory/query_window.h"

#include <algorithm>
#include <stdexcept>

namespace agentkv::memory {

QueryWindow::QueryWindow(std::vector<bool> layer_has_kv, int64_t n_q, uint32_t n_seq_max, uint32_t window)
    : n_layers_(static_cast<int>(layer_has_kv.size())),
      first_layer_(static_cast<int>(std::find(layer_has_kv.begin(), layer_has_kv.end(), true) - layer_has_kv.begin())),
      n_q_(n_q),
      window_(window),
      rings_(n_seq_max) {
  if (window_ == 0 || first_layer_ >= n_layers_ || n_q_ <= 0) throw std::logic_error("query window: empty shape");
}

void QueryWindow::record(int layer, SeqId seq, Pos pos, const float* q) {
  if (seq < 0 || static_cast<size_t>(seq) >= rings_.size() || layer < 0 || layer >= n_layers_) return;
  Ring& r = rings_[static_cast<size_t>(seq)];
  if (r.rows.empty()) {
    r.rows.assign(static_cast<size_t>(n_layers_) * window_ * static_cast<size_t>(n_q_), 0.f);
    r.pos.assign(window_, -1);
  }
  uint32_t slot = window_;
  if (layer == first_layer_) {
    slot = r.next;
    r.pos[slot] = pos;
    r.next = (r.next + 1) % window_;
    r.filled = std::min(r.filled + 1, window_);
  } else {
    for (uint32_t i = 0; i < window_; ++i)
      if (r.pos[i] == pos) slot = i;
    if (slot == window_) return;
  }
  std::copy(q, q + n_q_, r.rows.data() + (static_cast<size_t>(layer) * window_ + slot) * static_cast<size_t>(n_q_));
}

uint32_t QueryWindow::count(SeqId seq) const {
  if (seq < 0 || static_cast<size_t>(seq) >= rings_.size()) return 0;
  return rings_[static_cast<size_t>(seq)].filled;
}

const float* QueryWindow::row(int layer, SeqId seq, uint32_t i) const {
  const Ring& r = rings_[static_cast<size_t>(seq)];
  const uint32_t slot = (r.next + window_ - r.filled + i) % window_;
  return r.rows.data() + (static_cast<size_t>(layer) * window_ + slot) * static_cast<size_t>(n_q_);
}

Pos QueryWindow::pos(SeqId seq, uint32_t i) const {
  const Ring& r = rings_[static_cast<size_t>(seq)];
  return r.pos[(r.next + window_ - r.filled + i) % window_];
}

void QueryWindow::clear(SeqId seq) {
  if (seq < 0 || static_cast<size_t>(seq) >= rings_.size()) return;
  Ring& r = rings_[static_cast<size_t>(seq)];
  r.next = r.filled = 0;
  std::fill(r.pos.begin(), r.pos.end(), -1);
}

}  // namespace agentkv::memory
