#include "memory/recurrent_state.h"

#include <cstring>
#include <stdexcept>
#include <string>

#include "agentkv/error.h"

namespace agentkv::memory {
namespace {

constexpr Pos kPosMax = 0x7ffffffe;
constexpr size_t kCellRecordMinBytes = 12;  // cell, pos, n_seq

const uint8_t* as_bytes(const float* p) { return reinterpret_cast<const uint8_t*>(p); }

std::vector<int32_t> recurrent_layers(const RecurrentLayout& L) {
  std::vector<int32_t> layers;
  for (size_t il = 0; il < L.layer_recurrent.size(); ++il)
    if (L.layer_recurrent[il]) layers.push_back(static_cast<int32_t>(il));
  return layers;
}

}  // namespace

RecImage rec_state_view(const RecurrentMemory& rec, SeqId seq) {
  const RecurrentLayout& L = rec.layout();
  if (seq >= static_cast<SeqId>(L.n_seq_max))
    throw Error("recurrent state: sequence id " + std::to_string(seq) + " outside [0, " +
                std::to_string(L.n_seq_max) + ")");
  RecImage img;
  img.layout.layers = recurrent_layers(L);
  img.layout.n_conv = L.n_conv;
  img.layout.n_ssm = L.n_ssm;
  img.layout.n_cells = rec.n_cells();
  img.layout.n_seq_max = L.n_seq_max;
  img.conv.resize(img.layout.layers.size());
  img.ssm.resize(img.layout.layers.size());

  auto add_cell = [&](uint32_t cell) {
    RecCellRecord c;
    c.cell = cell;
    c.pos = rec.cell_pos(cell);
    if (seq >= 0) c.seqs.set(static_cast<size_t>(seq));
    else
      for (SeqId s : rec.cell_seqs(cell)) c.seqs.set(static_cast<size_t>(s));
    img.cells.push_back(c);
    for (size_t l = 0; l < img.layout.layers.size(); ++l) {
      const int layer = img.layout.layers[l];
      img.conv[l].chunks.emplace_back(as_bytes(rec.conv_state(layer, cell)), img.layout.conv_bytes());
      img.ssm[l].chunks.emplace_back(as_bytes(rec.ssm_state(layer, cell)), img.layout.ssm_bytes());
    }
  };
  if (seq >= 0) {
    const int32_t cell = rec.seq_cell(seq);
    if (cell >= 0) add_cell(static_cast<uint32_t>(cell));
  } else {
    for (uint32_t c = 0; c < rec.n_cells(); ++c)
      if (!rec.cell_seqs(c).empty()) add_cell(c);
  }
  return img;
}

void write_rec_section(StateWriter& w, const RecImage& img) {
  const RecImageLayout& L = img.layout;
  w.u32(static_cast<uint32_t>(GgmlType::F32));
  w.u64(static_cast<uint64_t>(L.n_conv));
  w.u64(static_cast<uint64_t>(L.n_ssm));
  w.u32(L.n_cells);
  w.u32(L.n_seq_max);
  w.u32(static_cast<uint32_t>(L.layers.size()));
  for (int32_t il : L.layers) w.i32(il);
  w.u32(static_cast<uint32_t>(img.cells.size()));
  for (const RecCellRecord& c : img.cells) {
    w.u32(c.cell);
    w.i32(c.pos);
    w.u32(static_cast<uint32_t>(c.seqs.count()));
    for_each_seq(c.seqs, [&](SeqId s) { w.i32(s); });
  }
  for (size_t l = 0; l < L.layers.size(); ++l) {
    for (const auto& chunk : img.conv[l].chunks) w.bytes(chunk);
    for (const auto& chunk : img.ssm[l].chunks) w.bytes(chunk);
  }
}

RecImage read_rec_section(StateReader& r, bool per_sequence) {
  RecImage img;
  RecImageLayout& L = img.layout;
  const uint32_t type = r.u32("recurrent section: state type");
  if (type != static_cast<uint32_t>(GgmlType::F32))
    r.fail("recurrent section: state type id " + std::to_string(type) + " (only f32 = 0 exists)");
  const uint64_t n_conv = r.u64("recurrent section: conv state size");
  const uint64_t n_ssm = r.u64("recurrent section: delta state size");
  if (n_conv == 0 || n_ssm == 0 || n_conv > (uint64_t{1} << 40) || n_ssm > (uint64_t{1} << 40))
    r.fail("recurrent section: state sizes " + std::to_string(n_conv) + " / " + std::to_string(n_ssm) + " are invalid");
  L.n_conv = static_cast<int64_t>(n_conv);
  L.n_ssm = static_cast<int64_t>(n_ssm);
  L.n_cells = r.u32("recurrent section: cell count of the layout");
  L.n_seq_max = r.u32("recurrent section: n_seq_max");
  if (L.n_seq_max == 0 || L.n_seq_max > static_cast<uint32_t>(kMaxSeq) || L.n_cells == 0)
    r.fail("recurrent section: inconsistent layout (" + std::to_string(L.n_cells) + " cells, n_seq_max " +
           std::to_string(L.n_seq_max) + ")");
  const uint32_t n_layers = r.u32("recurrent section: layer count");
  if (n_layers == 0 || n_layers > r.remaining() / 4)
    r.fail("recurrent section: bad layer count " + std::to_string(n_layers));
  for (uint32_t l = 0; l < n_layers; ++l) {
    const int32_t il = r.i32("recurrent section: layer index");
    if (il < 0 || (!L.layers.empty() && il <= L.layers.back()))
      r.fail("recurrent section: layer indices are not ascending");
    L.layers.push_back(il);
  }
  const uint32_t n_cells = r.u32("recurrent section: saved cell count");
  if (n_cells > L.n_cells || n_cells > r.remaining() / kCellRecordMinBytes || (per_sequence && n_cells > 1))
    r.fail("recurrent section: " + std::to_string(n_cells) + " saved cells is invalid" +
           (per_sequence ? " (a sequence save holds at most 1)" : ""));
  SeqSet seen;
  for (uint32_t i = 0; i < n_cells; ++i) {
    RecCellRecord c;
    c.cell = r.u32("recurrent section: cell index");
    c.pos = r.i32("recurrent section: cell position");
    const uint32_t n_seq = r.u32("recurrent section: cell sequence count");
    if (c.cell >= L.n_cells || (!img.cells.empty() && c.cell <= img.cells.back().cell))
      r.fail("recurrent section: cell index " + std::to_string(c.cell) + " out of range or out of order");
    if (c.pos < 0 || c.pos > kPosMax)
      r.fail("recurrent section: cell " + std::to_string(c.cell) + " has invalid position " + std::to_string(c.pos));
    if (n_seq == 0 || n_seq > L.n_seq_max || (per_sequence && n_seq != 1))
      r.fail("recurrent section: cell " + std::to_string(c.cell) + " lists " + std::to_string(n_seq) + " sequences");
    for (uint32_t j = 0; j < n_seq; ++j) {
      const int32_t s = r.i32("recurrent section: cell sequence id");
      if (s < 0 || static_cast<uint32_t>(s) >= L.n_seq_max || seen.test(static_cast<size_t>(s)))
        r.fail("recurrent section: cell " + std::to_string(c.cell) + " has invalid or repeated sequence id " +
               std::to_string(s));
      seen.set(static_cast<size_t>(s));
      c.seqs.set(static_cast<size_t>(s));
    }
    img.cells.push_back(c);
  }
  img.conv.resize(n_layers);
  img.ssm.resize(n_layers);
  for (uint32_t l = 0; l < n_layers; ++l) {
    const std::string layer = std::to_string(L.layers[l]);
    img.conv[l].chunks.push_back(r.bytes(n_cells, L.conv_bytes(), "recurrent section: conv states of layer " + layer));
    img.ssm[l].chunks.push_back(r.bytes(n_cells, L.ssm_bytes(), "recurrent section: delta states of layer " + layer));
  }
  r.expect_end("recurrent section");
  return img;
}

void check_rec_layout(const RecurrentMemory& rec, const RecImageLayout& L) {
  const RecurrentLayout& mine = rec.layout();
  if (L.n_conv != mine.n_conv || L.n_ssm != mine.n_ssm)
    throw Error("state: recurrent state sizes " + std::to_string(L.n_conv) + "/" + std::to_string(L.n_ssm) +
                " floats in the state, but this memory has " + std::to_string(mine.n_conv) + "/" +
                std::to_string(mine.n_ssm));
  if (L.layers != recurrent_layers(mine))
    throw Error("state: the state's " + std::to_string(L.layers.size()) +
                " recurrent layers do not match this memory's");
}

RecRestorePlan plan_rec_restore(const RecurrentMemory& rec, const RecImage& img, SeqId dest) {
  check_rec_layout(rec, img.layout);
  const uint32_t n_seq_max = rec.layout().n_seq_max;
  const size_t n = img.cells.size();
  for (size_t l = 0; l < img.conv.size(); ++l)
    if (img.conv[l].total_bytes() != n * img.layout.conv_bytes() ||
        img.ssm[l].total_bytes() != n * img.layout.ssm_bytes())
      throw std::logic_error("recurrent state: image rows do not match its cells");

  RecRestorePlan plan;
  plan.dest = dest;
  if (dest < 0) {
    for (const RecCellRecord& c : img.cells) {
      if (c.cell >= rec.n_cells())
        throw Error("state: recurrent cell " + std::to_string(c.cell) + " does not exist in this memory of " +
                    std::to_string(rec.n_cells()) + " cells");
      for_each_seq(c.seqs, [&](SeqId s) {
        if (static_cast<uint32_t>(s) >= n_seq_max)
          throw Error("state: sequence " + std::to_string(s) + " outside this memory's n_seq_max " +
                      std::to_string(n_seq_max));
      });
      plan.targets.push_back(c.cell);
    }
    return plan;
  }

  if (static_cast<uint32_t>(dest) >= n_seq_max)
    throw Error("state: destination sequence " + std::to_string(dest) + " outside [0, " +
                std::to_string(n_seq_max) + ")");
  if (n > 1 || (n == 1 && img.cells[0].seqs.count() != 1))
    throw Error("state: a sequence state holds at most one recurrent cell of one sequence");
  if (n == 0) return plan;
  for (uint32_t c = 0; c < rec.n_cells(); ++c) {
    const auto& seqs = rec.cell_seqs(c);
    const bool free_after_rm = (seqs.empty() && rec.cell_pos(c) < 0) || (seqs.size() == 1 && *seqs.begin() == dest);
    if (free_after_rm) {
      plan.targets.push_back(c);
      return plan;
    }
  }
  throw Error("state: no free recurrent cell for sequence " + std::to_string(dest));
}

void apply_rec_restore(RecurrentMemory& rec, const RecImage& img, const RecRestorePlan& plan) {
  if (plan.dest < 0) rec.clear();
  else rec.seq_rm(plan.dest, -1, -1);

  for (size_t i = 0; i < img.cells.size(); ++i) {
    std::vector<SeqId> seqs;
    if (plan.dest >= 0) seqs.push_back(plan.dest);
    else for_each_seq(img.cells[i].seqs, [&](SeqId s) { seqs.push_back(s); });
    rec.restore_cell(plan.targets[i], img.cells[i].pos, seqs);
  }
  const size_t conv_bytes = img.layout.conv_bytes(), ssm_bytes = img.layout.ssm_bytes();
  for (size_t l = 0; l < img.layout.layers.size(); ++l) {
    const int layer = img.layout.layers[l];
    RowCursor conv(img.conv[l], conv_bytes), ssm(img.ssm[l], ssm_bytes);
    for (uint32_t cell : plan.targets) {
      std::memcpy(rec.conv_state(layer, cell), conv.next(), conv_bytes);
      std::memcpy(rec.ssm_state(layer, cell), ssm.next(), ssm_bytes);
    }
  }
}

}  // namespace agentkv::memory
