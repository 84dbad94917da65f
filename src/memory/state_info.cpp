#include "memory/state_info.h"

#include <algorithm>
#include <cinttypes>
#include <cstdio>

namespace agentkv::memory {
namespace {

std::string fmt(const char* f, auto... args) {
  char buf[256];
  std::snprintf(buf, sizeof buf, f, args...);
  return buf;
}

std::string list(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

std::string seq_list(const SeqSet& seqs) {
  std::string s = "{";
  bool first = true;
  for_each_seq(seqs, [&](SeqId id) {
    s += (first ? "" : ", ") + std::to_string(id);
    first = false;
  });
  return s + "}";
}

std::string type_name(GgmlType t) { return std::string(ggml_type_name(t)); }

void describe_kv(std::string& out, const KvImage& kv, const std::string& indent) {
  const KvImageLayout& L = kv.layout;
  out += indent + "attention KV: K " + type_name(L.type_k) + " x " + std::to_string(L.n_embd_k) + " (" +
         std::to_string(L.row_bytes_k()) + " B/row), V " + type_name(L.type_v) + " x " +
         std::to_string(L.n_embd_v) + " (" + std::to_string(L.row_bytes_v()) + " B/row), " +
         std::to_string(L.kv_layers.size()) + " layers " + list(L.kv_layers) + "\n";
  out += indent + "  saved from: " + (L.unified ? "a unified cache" : "per-sequence streams") + ", " +
         std::to_string(L.n_streams) + " stream(s) x " + std::to_string(L.n_cells) + " cells, n_seq_max " +
         std::to_string(L.n_seq_max) + "\n";
  if (L.rotation.active())
    out += indent + "  rows stored under " + describe(L.rotation) + "\n";
  if (L.code_id != 0) out += indent + "  tqc3 rows written under KV code " + hex64(L.code_id) + "\n";
  std::string ranges;
  size_t n_ranges = 0;
  Pos lo = -1, hi = -1;
  size_t shifted = 0;
  for (size_t i = 0; i < kv.cells.size(); ++i) {
    const KvCellRecord& c = kv.cells[i];
    const bool starts = i == 0 || kv.cells[i - 1].stream != c.stream || kv.cells[i - 1].cell + 1 != c.cell;
    if (starts) {
      size_t j = i;
      while (j + 1 < kv.cells.size() && kv.cells[j + 1].stream == c.stream && kv.cells[j + 1].cell == kv.cells[j].cell + 1) ++j;
      if (n_ranges < 16) ranges += fmt(" s%u[%u, %u)", c.stream, c.cell, kv.cells[j].cell + 1);
      ++n_ranges;
    }
    lo = lo < 0 ? c.pos : std::min(lo, c.pos);
    hi = std::max(hi, c.pos);
    if (c.shift != 0) ++shifted;
  }
  if (n_ranges > 16) ranges += " ...";
  out += indent + "  cells: " + std::to_string(kv.cells.size()) + " in " + std::to_string(n_ranges) + " range(s)" +
         ranges + "\n";
  if (!kv.cells.empty())
    out += indent + "  positions: " + std::to_string(lo) + " .. " + std::to_string(hi) +
           ", pending shifts: " + std::to_string(shifted) + " cell(s)\n";
  size_t bytes = 0;
  for (size_t l = 0; l < kv.k.size(); ++l) bytes += kv.k[l].total_bytes() + kv.v[l].total_bytes();
  out += indent + "  row bytes: " + std::to_string(bytes) + "\n";
}

void describe_rec(std::string& out, const RecImage& rec, const std::string& indent) {
  const RecImageLayout& L = rec.layout;
  out += indent + "recurrent: f32 states, conv " + std::to_string(L.n_conv) + " + delta " + std::to_string(L.n_ssm) +
         " floats per cell and layer, " + std::to_string(L.layers.size()) + " layers " + list(L.layers) +
         ", saved from " + std::to_string(L.n_cells) + " cells\n";
  out += indent + "  cells: " + std::to_string(rec.cells.size());
  for (const RecCellRecord& c : rec.cells)
    out += "; cell " + std::to_string(c.cell) + " at position " + std::to_string(c.pos) + " for " + seq_list(c.seqs);
  out += "\n";
}

void describe_image(std::string& out, const MemoryImage& img, const std::string& indent) {
  out += indent + "contents: " + (img.per_sequence() ? "sequence " + std::to_string(img.seq) : std::string("whole memory")) +
         ", flags " + ((img.flags & kStatePartialOnly) ? "partial (recurrent / sliding-window part only)" : "all") + "\n";
  if (img.kv) describe_kv(out, *img.kv, indent);
  if (img.rec) describe_rec(out, *img.rec, indent);
  if (img.window) {
    out += indent + "sliding-window part:\n";
    describe_kv(out, *img.window, indent + "  ");
  }
  if (!img.kv && !img.rec && !img.window) out += indent + "(no memory parts)\n";
}

}  // namespace

std::string describe_state(const StateContents& c, size_t blob_bytes) {
  std::string out;
  out += "format: agentkv state, version " + std::to_string(c.version) + ", " + std::to_string(blob_bytes) +
         " bytes, checksum ok\n";
  out += fmt("model fingerprint: %016" PRIx64 "\n", c.fingerprint);
  describe_image(out, c.memory, "");
  if (c.has_tokens) {
    out += "tokens: " + std::to_string(c.tokens.size());
    for (size_t i = 0; i < c.tokens.size() && i < 16; ++i) out += (i ? " " : ": ") + std::to_string(c.tokens[i]);
    if (c.tokens.size() > 16) out += " ...";
    out += "\n";
  } else {
    out += "tokens: not saved\n";
  }
  if (!c.logits.empty()) {
    const auto best = std::max_element(c.logits.begin(), c.logits.end());
    out += "logits: " + std::to_string(c.logits.size()) + fmt(" (argmax %td = %.4f)\n", best - c.logits.begin(), *best);
  } else {
    out += "logits: not saved\n";
  }
  if (!c.page_hashes.empty()) {
    out += "page chain: " + std::to_string(c.page_hashes.size()) + " pages of " + std::to_string(c.page_tokens) +
           " tokens";
    for (size_t i = 0; i < c.page_hashes.size() && i < 4; ++i) out += fmt(i ? " %016" PRIx64 : ": %016" PRIx64, c.page_hashes[i]);
    out += c.page_hashes.size() > 4 ? " ...\n" : "\n";
  } else {
    out += "page chain: not saved\n";
  }
  out += "checkpoints: " + std::to_string(c.checkpoints.size()) + "\n";
  for (size_t i = 0; i < c.checkpoints.size(); ++i) {
    out += "  checkpoint " + std::to_string(i) + " at position " + std::to_string(c.checkpoints[i].pos) + "\n";
    describe_image(out, c.checkpoints[i].image, "    ");
  }
  return out;
}

}  // namespace agentkv::memory
