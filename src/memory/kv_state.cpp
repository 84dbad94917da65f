#include "memory/kv_state.h"

#include <array>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>

#include "agentkv/error.h"

namespace agentkv::memory {
namespace {

constexpr Pos kPosMax = std::numeric_limits<Pos>::max() - 1;  // as KvCache
constexpr size_t kCellRecordMinBytes = 12;                      // pos, shift, n_seq

std::string type_label(GgmlType t) { return std::string(ggml_type_name(t)); }

// Views of rows [first, first + n) of one layer's storage of `stream`, appended as a chunk.
void add_chunk(RowChunks& rows, const uint8_t* base, size_t row_bytes, uint32_t first, uint32_t n) {
  rows.chunks.emplace_back(base + static_cast<size_t>(first) * row_bytes,
                           static_cast<size_t>(n) * row_bytes);
}

GgmlType read_type(StateReader& r, const char* field) {
  const uint32_t id = r.u32(field);
  const GgmlTypeInfo* info = ggml_type_info(id);
  if (!info) r.fail(std::string(field) + ": unknown ggml type id " + std::to_string(id));
  return info->type;
}

int64_t read_width(StateReader& r, GgmlType type, const char* field) {
  const uint64_t n = r.u64(field);
  const int64_t block = ggml_type_info(type).block_size;
  if (n == 0 || n > (uint64_t{1} << 32) || n % static_cast<uint64_t>(block) != 0)
    r.fail(std::string(field) + ": " + std::to_string(n) + " elements is not a positive multiple of the " +
           type_label(type) + " block size " + std::to_string(block));
  return static_cast<int64_t>(n);
}

}  // namespace

KvImage kv_state_view(const KvCache& kv, SeqId seq) {
  const KvLayout& L = kv.layout();
  if (seq >= 0) L.stream_of(seq);  // validates the id
  KvImage img;
  img.layout.type_k = L.type_k;
  img.layout.type_v = L.type_v;
  img.layout.rotation = L.rotation;
  img.layout.code_id = L.code ? L.code->id() : 0;
  img.layout.n_embd_k = L.n_embd_k;
  img.layout.n_embd_v = L.n_embd_v;
  for (size_t il = 0; il < L.layer_has_kv.size(); ++il)
    if (L.layer_has_kv[il]) img.layout.kv_layers.push_back(static_cast<int32_t>(il));
  img.layout.unified = L.unified;
  img.layout.n_streams = L.n_streams();
  img.layout.n_cells = L.n_cells;
  img.layout.n_seq_max = L.n_seq_max;

  const size_t n_layers = img.layout.kv_layers.size();
  img.k.resize(n_layers);
  img.v.resize(n_layers);
  const KvRows& rows = kv.rows();
  const size_t rk = rows.row_bytes_k(), rv = rows.row_bytes_v();
  // A windowed cache's rows live in two places and types: the image owns copies in type_k /
  // type_v (read_k / read_v), one chunk per layer, instead of viewing the storage.
  const bool windowed = kv.window().windowed();
  for (uint32_t s = 0; s < L.n_streams(); ++s) {
    if (seq >= 0 && s != L.stream_of(seq)) continue;
    const KvCells& c = kv.cells(s);
    // Cells of the image in this stream, in contiguous runs: one chunk per run and layer.
    uint32_t run_start = 0, run_len = 0;
    auto close_run = [&] {
      if (run_len == 0 || windowed) return;
      for (size_t l = 0; l < n_layers; ++l) {
        const int layer = img.layout.kv_layers[l];
        add_chunk(img.k[l], rows.k_data(layer, s), rk, run_start, run_len);
        add_chunk(img.v[l], rows.v_data(layer, s), rv, run_start, run_len);
      }
      run_len = 0;
    };
    for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
      const bool take = !c.is_empty(i) && (seq < 0 || c.has_seq(i, seq));
      if (!take) {
        close_run();
        continue;
      }
      KvCellRecord rec;
      rec.stream = s;
      rec.cell = i;
      rec.pos = c.pos(i);
      rec.shift = c.shift(i);
      if (seq >= 0) rec.seqs.set(static_cast<size_t>(seq));
      else rec.seqs = c.seqs(i);
      img.cells.push_back(rec);
      if (run_len == 0) run_start = i;
      ++run_len;
    }
    close_run();
  }
  if (windowed) {
    img.owned.resize(2 * n_layers);
    for (size_t l = 0; l < n_layers; ++l) {
      const int layer = img.layout.kv_layers[l];
      std::vector<uint8_t>& k = img.owned[2 * l];
      std::vector<uint8_t>& v = img.owned[2 * l + 1];
      k.resize(img.cells.size() * rk);
      v.resize(img.cells.size() * rv);
      for (size_t i = 0; i < img.cells.size(); ++i) {
        rows.read_k(layer, img.cells[i].stream, img.cells[i].cell, k.data() + i * rk);
        rows.read_v(layer, img.cells[i].stream, img.cells[i].cell, v.data() + i * rv);
      }
      if (!img.cells.empty()) {
        img.k[l].chunks.emplace_back(k.data(), k.size());
        img.v[l].chunks.emplace_back(v.data(), v.size());
      }
    }
  }
  return img;
}

void write_kv_section(StateWriter& w, const KvImage& img) {
  const KvImageLayout& L = img.layout;
  w.u32(static_cast<uint32_t>(L.type_k));
  w.u32(static_cast<uint32_t>(L.type_v));
  w.u64(static_cast<uint64_t>(L.n_embd_k));
  w.u64(static_cast<uint64_t>(L.n_embd_v));
  w.u64(L.row_bytes_k());
  w.u64(L.row_bytes_v());
  w.u32(L.unified ? 1 : 0);
  w.u32(L.n_streams);
  w.u32(L.n_cells);
  w.u32(L.n_seq_max);
  w.u32(static_cast<uint32_t>(L.kv_layers.size()));
  for (int32_t il : L.kv_layers) w.i32(il);

  // Cell ranges: maximal runs of consecutive cells of one stream.
  std::vector<std::array<uint32_t, 3>> ranges;  // stream, first cell, count
  for (const KvCellRecord& c : img.cells) {
    if (!ranges.empty() && ranges.back()[0] == c.stream &&
        ranges.back()[1] + ranges.back()[2] == c.cell)
      ++ranges.back()[2];
    else
      ranges.push_back({c.stream, c.cell, 1});
  }
  w.u32(static_cast<uint32_t>(img.cells.size()));
  w.u32(static_cast<uint32_t>(ranges.size()));
  for (const auto& r : ranges) {
    w.u32(r[0]);
    w.u32(r[1]);
    w.u32(r[2]);
  }
  for (const KvCellRecord& c : img.cells) {
    w.i32(c.pos);
    w.i32(c.shift);
    w.u32(static_cast<uint32_t>(c.seqs.count()));
    for_each_seq(c.seqs, [&](SeqId s) { w.i32(s); });
  }
  for (size_t l = 0; l < L.kv_layers.size(); ++l) {
    for (const auto& chunk : img.k[l].chunks) w.bytes(chunk);
    for (const auto& chunk : img.v[l].chunks) w.bytes(chunk);
  }
}

KvImage read_kv_section(StateReader& r, bool per_sequence) {
  KvImage img;
  KvImageLayout& L = img.layout;
  L.type_k = read_type(r, "KV section: K type");
  L.type_v = read_type(r, "KV section: V type");
  L.n_embd_k = read_width(r, L.type_k, "KV section: K width");
  L.n_embd_v = read_width(r, L.type_v, "KV section: V width");
  // The row sizes are stored redundantly: a writer that got the block arithmetic wrong
  // (elements instead of elements / block_size * type_size) is caught here.
  const uint64_t row_k = r.u64("KV section: K row bytes");
  const uint64_t row_v = r.u64("KV section: V row bytes");
  if (row_k != L.row_bytes_k() || row_v != L.row_bytes_v())
    r.fail("KV section: row sizes " + std::to_string(row_k) + " / " + std::to_string(row_v) +
           " bytes do not match " + type_label(L.type_k) + " x " + std::to_string(L.n_embd_k) + " = " +
           std::to_string(L.row_bytes_k()) + " / " + type_label(L.type_v) + " x " +
           std::to_string(L.n_embd_v) + " = " + std::to_string(L.row_bytes_v()));
  const uint32_t unified = r.u32("KV section: unified flag");
  if (unified > 1) r.fail("KV section: unified flag " + std::to_string(unified) + " is not 0 or 1");
  L.unified = unified == 1;
  L.n_streams = r.u32("KV section: stream count");
  L.n_cells = r.u32("KV section: cells per stream");
  L.n_seq_max = r.u32("KV section: n_seq_max");
  if (L.n_seq_max == 0 || L.n_seq_max > static_cast<uint32_t>(kMaxSeq) || L.n_cells == 0 ||
      L.n_streams != (L.unified ? 1u : L.n_seq_max))
    r.fail("KV section: inconsistent layout (" + std::to_string(L.n_streams) + " streams, " +
           std::to_string(L.n_cells) + " cells, n_seq_max " + std::to_string(L.n_seq_max) + ")");
  const uint32_t n_layers = r.u32("KV section: layer count");
  if (n_layers == 0 || n_layers > r.remaining() / 4) r.fail("KV section: bad layer count " + std::to_string(n_layers));
  for (uint32_t l = 0; l < n_layers; ++l) {
    const int32_t il = r.i32("KV section: layer index");
    if (il < 0 || (!L.kv_layers.empty() && il <= L.kv_layers.back()))
      r.fail("KV section: layer indices are not ascending");
    L.kv_layers.push_back(il);
  }

  const uint32_t n_cells = r.u32("KV section: cell count");
  const uint32_t n_ranges = r.u32("KV section: range count");
  if (n_cells > r.remaining() / kCellRecordMinBytes || n_ranges > n_cells)
    r.fail("KV section: " + std::to_string(n_cells) + " cells in " + std::to_string(n_ranges) +
           " ranges cannot fit the section (corrupt)");
  img.cells.reserve(n_cells);
  uint64_t covered = 0;
  for (uint32_t i = 0; i < n_ranges; ++i) {
    const uint32_t stream = r.u32("KV section: range stream");
    const uint32_t first = r.u32("KV section: range first cell");
    const uint32_t count = r.u32("KV section: range cell count");
    if (stream >= L.n_streams || count == 0 || first >= L.n_cells || count > L.n_cells - first)
      r.fail("KV section: range " + std::to_string(i) + " (stream " + std::to_string(stream) + ", cells " +
             std::to_string(first) + "+" + std::to_string(count) + ") lies outside the saved layout");
    if (!img.cells.empty()) {
      const KvCellRecord& prev = img.cells.back();
      if (stream < prev.stream || (stream == prev.stream && first <= prev.cell))
        r.fail("KV section: ranges overlap or are out of order");
    }
    covered += count;
    if (covered > n_cells) r.fail("KV section: ranges cover more than the " + std::to_string(n_cells) + " cells");
    for (uint32_t j = 0; j < count; ++j) {
      KvCellRecord c;
      c.stream = stream;
      c.cell = first + j;
      img.cells.push_back(c);
    }
  }
  if (covered != n_cells)
    r.fail("KV section: ranges cover " + std::to_string(covered) + " cells, header says " + std::to_string(n_cells));

  for (KvCellRecord& c : img.cells) {
    c.pos = r.i32("KV section: cell position");
    c.shift = r.i32("KV section: cell shift");
    const uint32_t n_seq = r.u32("KV section: cell sequence count");
    if (c.pos < 0 || c.pos > kPosMax)
      r.fail("KV section: cell " + std::to_string(c.cell) + " has invalid position " + std::to_string(c.pos));
    if (n_seq == 0 || n_seq > L.n_seq_max || (per_sequence && n_seq != 1))
      r.fail("KV section: cell " + std::to_string(c.cell) + " lists " + std::to_string(n_seq) + " sequences" +
             (per_sequence ? " (a sequence save lists exactly 1)" : ""));
    for (uint32_t j = 0; j < n_seq; ++j) {
      const int32_t s = r.i32("KV section: cell sequence id");
      if (s < 0 || static_cast<uint32_t>(s) >= L.n_seq_max || c.seqs.test(static_cast<size_t>(s)) ||
          (!L.unified && static_cast<uint32_t>(s) != c.stream))
        r.fail("KV section: cell " + std::to_string(c.cell) + " has invalid sequence id " + std::to_string(s));
      c.seqs.set(static_cast<size_t>(s));
    }
  }

  img.k.resize(n_layers);
  img.v.resize(n_layers);
  for (uint32_t l = 0; l < n_layers; ++l) {
    const std::string layer = std::to_string(L.kv_layers[l]);
    img.k[l].chunks.push_back(r.bytes(n_cells, L.row_bytes_k(), "KV section: K rows of layer " + layer));
    img.v[l].chunks.push_back(r.bytes(n_cells, L.row_bytes_v(), "KV section: V rows of layer " + layer));
  }
  r.expect_end("KV section");
  return img;
}

void write_kv_code_section(StateWriter& w, uint64_t code_id) { w.u64(code_id); }

uint64_t read_kv_code_section(StateReader& r) {
  const uint64_t id = r.u64("KV code id");
  r.expect_end("KV code section");
  if (id == 0) r.fail("KV code section naming no code");
  return id;
}

void write_kv_rotation_section(StateWriter& w, const KvRotation& rot) {
  w.u32(rot.k_block);
  w.u32(rot.v_block);
  w.u64(rot.seed);
}

KvRotation read_kv_rotation_section(StateReader& r) {
  KvRotation rot;
  rot.k_block = r.u32("KV rotation: K block");
  rot.v_block = r.u32("KV rotation: V block");
  rot.seed = r.u64("KV rotation: seed");
  r.expect_end("KV rotation section");
  if (!rot.active()) r.fail("KV rotation section that rotates nothing");
  for (uint32_t b : {rot.k_block, rot.v_block})
    if (b != 0 && (b & (b - 1)) != 0) r.fail("KV rotation: block " + std::to_string(b) + " is not a power of two");
  return rot;
}

void check_kv_layout(const KvCache& kv, const KvImageLayout& L) {
  const KvLayout& mine = kv.layout();
  if (!(L.rotation == mine.rotation))
    throw Error("state: made with " + describe(L.rotation) + ", but this cache stores rows with " +
                describe(mine.rotation) + " (the same --kv-rotation and seed are needed to restore it)");
  const uint64_t my_code = mine.code ? mine.code->id() : 0;
  if (L.code_id != my_code)
    throw Error("state: rows written under " + (L.code_id ? "KV code " + hex64(L.code_id) : std::string("no KV code")) +
                ", but this cache has " + (my_code ? "KV code " + hex64(my_code) : std::string("none")) +
                " (tqc3 rows are read only under the --kv-code they were written under)");
  if (L.type_k != mine.type_k || L.type_v != mine.type_v)
    throw Error("state: KV types K=" + type_label(L.type_k) + " V=" + type_label(L.type_v) +
                " in the state, but this cache stores K=" + type_label(mine.type_k) + " V=" +
                type_label(mine.type_v));
  if (L.n_embd_k != mine.n_embd_k || L.n_embd_v != mine.n_embd_v)
    throw Error("state: KV widths " + std::to_string(L.n_embd_k) + "/" + std::to_string(L.n_embd_v) +
                " in the state, but this cache has " + std::to_string(mine.n_embd_k) + "/" +
                std::to_string(mine.n_embd_v));
  std::vector<int32_t> layers;
  for (size_t il = 0; il < mine.layer_has_kv.size(); ++il)
    if (mine.layer_has_kv[il]) layers.push_back(static_cast<int32_t>(il));
  if (layers != L.kv_layers)
    throw Error("state: the state has " + std::to_string(L.kv_layers.size()) +
                " KV layers that do not match this cache's " + std::to_string(layers.size()));
}

KvRestorePlan plan_kv_restore(const KvCache& kv, const KvImage& img, SeqId dest) {
  check_kv_layout(kv, img.layout);
  const KvLayout& mine = kv.layout();
  const size_t n = img.cells.size();
  for (size_t l = 0; l < img.k.size(); ++l)
    if (img.k[l].total_bytes() != n * kv.rows().row_bytes_k() || img.v[l].total_bytes() != n * kv.rows().row_bytes_v())
      throw std::logic_error("kv state: image rows do not match its cells");

  KvRestorePlan plan;
  plan.dest = dest;
  plan.targets.reserve(n);
  if (dest < 0) {
    // Whole cache: every cell back at its saved index, sequences as saved.
    if (img.layout.unified != mine.unified || img.layout.n_streams != mine.n_streams())
      throw Error("state: saved from a cache with " + std::to_string(img.layout.n_streams) +
                  " stream(s), this cache has " + std::to_string(mine.n_streams()));
    for (const KvCellRecord& c : img.cells) {
      if (c.cell >= mine.n_cells)
        throw Error("state: cell " + std::to_string(c.cell) + " does not exist in this cache of " +
                    std::to_string(mine.n_cells) + " cells");
      for_each_seq(c.seqs, [&](SeqId s) {
        if (static_cast<uint32_t>(s) >= mine.n_seq_max)
          throw Error("state: sequence " + std::to_string(s) + " outside this cache's n_seq_max " +
                      std::to_string(mine.n_seq_max));
      });
      plan.targets.push_back(CellRef{c.stream, c.cell});
    }
    return plan;
  }

  const uint32_t stream = mine.stream_of(dest);  // throws for a bad id
  for (const KvCellRecord& c : img.cells)
    if (c.seqs.count() != 1)
      throw Error("state: a sequence state must list one sequence per cell");
  const KvCells& cells = kv.cells(stream);
  for (uint32_t i = 0; i < cells.size() && plan.targets.size() < n; ++i) {
    const bool free_after_rm =
        cells.is_empty(i) || (cells.has_seq(i, dest) && cells.seqs(i).count() == 1);
    if (free_after_rm) plan.targets.push_back(CellRef{stream, i});
  }
  if (plan.targets.size() < n)
    throw Error("state: sequence needs " + std::to_string(n) + " KV cells but only " +
                std::to_string(plan.targets.size()) + " are free for sequence " + std::to_string(dest));
  return plan;
}

void apply_kv_restore(KvCache& kv, const KvImage& img, const KvRestorePlan& plan) {
  if (plan.dest < 0) kv.clear();
  else kv.seq_rm(plan.dest, -1, -1);

  SeqSet only_dest;
  if (plan.dest >= 0) only_dest.set(static_cast<size_t>(plan.dest));
  for (size_t i = 0; i < img.cells.size(); ++i) {
    const KvCellRecord& c = img.cells[i];
    const CellRef t = plan.targets[i];
    kv.restore_cell(t.stream, t.cell, c.pos, plan.dest < 0 ? c.seqs : only_dest, c.shift);
  }

  KvRows& rows = kv.rows();
  const size_t rk = rows.row_bytes_k(), rv = rows.row_bytes_v();
  for (size_t l = 0; l < img.layout.kv_layers.size(); ++l) {
    const int layer = img.layout.kv_layers[l];
    RowCursor k_rows(img.k[l], rk), v_rows(img.v[l], rv);
    for (const CellRef& t : plan.targets) {
      rows.write_k(layer, t.stream, t.cell, k_rows.next());
      rows.write_v(layer, t.stream, t.cell, v_rows.next());
    }
  }
}

}  // namespace agentkv::memory
