#include "memory/cell_positions.h"

#include <algorithm>
#include <string>

#include "agentkv/error.h"

namespace agentkv::memory {

std::vector<uint32_t> cells_by_position(const KvCache& kv, SeqId seq, Pos n) {
  const KvCells& c = kv.cells(kv.layout().stream_of(seq));
  auto refuse = [&](const char* what) {
    return Error("sequence " + std::to_string(seq) + " " + what + " positions [0, " + std::to_string(n) + ")");
  };
  if (n > 0 && (c.seq_pos_min(seq) != 0 || c.seq_pos_max(seq) != n - 1 || c.seq_positions(seq).max_count(0, n) != 1))
    throw refuse("does not hold exactly");
  std::vector<uint32_t> out(static_cast<size_t>(std::max<Pos>(n, 0)), UINT32_MAX);
  bool noted = true;
  for (Pos p = 0; p < n && noted; ++p) {
    out[static_cast<size_t>(p)] = c.cell_at(seq, p);
    noted = out[static_cast<size_t>(p)] < KvCells::kUnnoted;
  }
  if (noted) return out;
  // A cell not noted for its position (e.g. restored from a state): the scan.
  std::fill(out.begin(), out.end(), UINT32_MAX);
  for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
    if (c.is_empty(i) || !c.has_seq(i, seq)) continue;
    const Pos p = c.pos(i);
    if (p >= 0 && p < n) out[static_cast<size_t>(p)] = i;
  }
  if (std::find(out.begin(), out.end(), UINT32_MAX) != out.end()) throw refuse("misses");
  return out;
}

std::vector<uint32_t> cells_holding_positions(const KvCache& kv, Pos n) {
  std::vector<uint32_t> cell_of(static_cast<size_t>(std::max<Pos>(n, 0)));
  const KvCells& cells = kv.cells(0);
  for (uint32_t i = 0; i < cells.size(); ++i)
    if (!cells.is_empty(i) && cells.pos(i) < n) cell_of[static_cast<size_t>(cells.pos(i))] = i;
  return cell_of;
}

}  // namespace agentkv::memory
