#include "memory/kv_rows.h"

#include <algorithm>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>

#include "agentkv/error.h"
#include "memory/kv_row_convert.h"

namespace agentkv::memory {
namespace {

// The KV cache types llama.cpp accepts for -ctk / -ctv, and agentkv's tq4 / tq3 / tqc3.
bool kv_type_supported(GgmlType t) {
  switch (t) {
    case GgmlType::F32: case GgmlType::F16: case GgmlType::BF16: case GgmlType::Q8_0:
    case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1:
    case GgmlType::IQ4_NL: case GgmlType::TQ4: case GgmlType::TQ3: case GgmlType::TQC3:
      return true;
    default:
      return false;
  }
}

std::string type_name(GgmlType t) {
  const GgmlTypeInfo* info = ggml_type_info(static_cast<uint32_t>(t));
  return info ? std::string(info->name) : "type id " + std::to_string(static_cast<uint32_t>(t));
}

size_t checked_row_bytes(GgmlType t, int64_t n_embd, const char* which) {
  if (!kv_type_supported(t))
    throw Error(std::string("kv cache: ") + which + " type " + type_name(t) +
                " is not a KV cache type (f32, f16, bf16, q8_0, q4_0, q4_1, q5_0, q5_1, iq4_nl, tq4, tq3, tqc3)");
  if (n_embd <= 0)
    throw Error(std::string("kv cache: ") + which + " width " + std::to_string(n_embd) +
                " must be positive");
  const int64_t block = ggml_type_info(t).block_size;
  if (n_embd % block != 0)
    throw Error(std::string("kv cache: ") + which + " width " + std::to_string(n_embd) +
                " is not a multiple of the " + type_name(t) + " block size " +
                std::to_string(block));
  return ggml_row_size(t, n_embd);
}

// One row of n elements from one KV type to another (a copy when they are the same).
void convert_row(GgmlType from, const uint8_t* src, GgmlType to, uint8_t* dst, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, ggml_row_size(to, n));
    return;
  }
  convert_kv_row(from, src, to, dst, n);
}

Error dropped_heads_error(uint32_t cell) {
  return Error("kv cache: cell " + std::to_string(cell) +
               " is in a tail that keeps only the retrieval heads' rows (--kv-retrieval-heads): its whole rows are gone, "
               "so it cannot be saved, exported or copied out");
}

}  // namespace

KvRows::KvRows(const KvLayout& layout, KvWindow& window)
    : layout_(layout), window_(window), windowed_(window.windowed()), n_hot_(window.hot_cells()) {
  row_k_ = checked_row_bytes(layout.type_k, layout.n_embd_k, "K");
  row_v_ = checked_row_bytes(layout.type_v, layout.n_embd_v, "V");
  if (layout.type_k == GgmlType::TQC3 || layout.type_v == GgmlType::TQC3) {
    if (!layout.code) throw Error("kv cache: tqc3 rows need their calibrated code (KvLayout::code)");
    if (layout.code->n_head_kv() * layout.code->head_dim() != layout.n_embd_k || layout.n_embd_k != layout.n_embd_v)
      throw Error("kv cache: the KV code's heads do not make rows of " + std::to_string(layout.n_embd_k));
  }
  // Moving rows to a window's tail converts them through floats, which tqc3 rows reach only with
  // their code's maps.
  if (windowed_)
    for (GgmlType t : {layout.type_k, layout.type_v, layout.tail_type_k, layout.tail_type_v})
      if (t == GgmlType::TQC3) throw Error("kv cache: tqc3 rows cannot be in a windowed cache (--kv-hot)");
  if (!layout.tail_heads.empty()) check_tail_heads();

  const size_t hot_rows = static_cast<size_t>(layout.n_streams()) * n_hot_;
  const size_t tail_rows = windowed_ ? static_cast<size_t>(layout.n_streams()) * layout.n_cells : 0;
  kv_index_.assign(layout.layer_has_kv.size(), -1);
  int n_kv_layers = 0;
  for (size_t il = 0; il < layout.layer_has_kv.size(); ++il) {
    if (!layout.layer_has_kv[il]) continue;
    kv_index_[il] = n_kv_layers++;
    k_.emplace_back(hot_rows * row_k_);
    v_.emplace_back(hot_rows * row_v_);
    if (!windowed_) continue;
    std::vector<int> keep;
    if (!layout.tail_heads.empty())
      for (int h = 0; h < static_cast<int>(layout.n_head_kv); ++h)
        if (layout.tail_heads[il] >> h & 1) keep.push_back(h);
    const bool partial = !layout.tail_heads.empty() && keep.size() < layout.n_head_kv;
    const auto kept = static_cast<int64_t>(keep.size());
    row_tk_.push_back(partial ? ggml_row_size(layout.tail_type_k, kept * head_k_)
                              : checked_row_bytes(layout.tail_type_k, layout.n_embd_k, "tail K"));
    row_tv_.push_back(partial ? ggml_row_size(layout.tail_type_v, kept * head_v_)
                              : checked_row_bytes(layout.tail_type_v, layout.n_embd_v, "tail V"));
    drops_heads_ = drops_heads_ || partial;
    tail_partial_.push_back(partial ? 1 : 0);
    tail_keep_.push_back(partial ? std::move(keep) : std::vector<int>{});
    tk_.emplace_back(tail_rows * row_tk_.back(), layout.tail_dir);
    tv_.emplace_back(tail_rows * row_tv_.back(), layout.tail_dir);
  }
}

// KvLayout::tail_heads is usable: a window, a mask per model layer over n_head_kv heads, and heads
// whole blocks of every row type and of the rotation (a head's rows are cut out of a row as bytes).
void KvRows::check_tail_heads() {
  const KvLayout& l = layout_;
  if (!windowed_) throw Error("kv cache: retrieval heads (tail_heads) need a window (--kv-hot below the context)");
  if (l.tail_heads.size() != l.layer_has_kv.size())
    throw Error("kv cache: tail_heads has " + std::to_string(l.tail_heads.size()) + " masks for " +
                std::to_string(l.layer_has_kv.size()) + " layers");
  if (l.n_head_kv == 0 || l.n_head_kv > 64 || l.n_embd_k % l.n_head_kv != 0 || l.n_embd_v % l.n_head_kv != 0)
    throw Error("kv cache: tail_heads needs n_head_kv in [1, 64] dividing the row widths");
  head_k_ = l.n_embd_k / l.n_head_kv;
  head_v_ = l.n_embd_v / l.n_head_kv;
  for (uint64_t mask : l.tail_heads)
    if (l.n_head_kv < 64 && (mask >> l.n_head_kv) != 0) throw Error("kv cache: a tail_heads mask names a head past n_head_kv");
  checked_row_bytes(l.type_k, head_k_, "K head");
  checked_row_bytes(l.type_v, head_v_, "V head");
  checked_row_bytes(l.tail_type_k, head_k_, "tail K head");
  checked_row_bytes(l.tail_type_v, head_v_, "tail V head");
  if ((l.rotation.k_block > 0 && head_k_ % l.rotation.k_block != 0) || (l.rotation.v_block > 0 && head_v_ % l.rotation.v_block != 0))
    throw Error("kv cache: tail_heads needs rotation blocks within a head (" + describe(l.rotation) + ")");
}

int KvRows::kv_layer(int layer) const {
  if (!layer_has_kv(layer)) throw Error("kv cache: model layer " + std::to_string(layer) + " has no KV storage");
  return kv_index_[static_cast<size_t>(layer)];
}

uint8_t* KvRows::tail(bool is_k, int kv_layer, uint32_t stream, uint32_t cell) const {
  return (is_k ? tk_ : tv_)[static_cast<size_t>(kv_layer)].data() +
         (static_cast<size_t>(stream) * layout_.n_cells + cell) * tail_row_bytes(is_k, kv_layer);
}

KvRows::StoredRow KvRows::stored(bool is_k, int kl, uint32_t stream, uint32_t cell) const {
  const int32_t sl = slot(stream, cell);
  if (sl >= 0) return {hot(is_k, kl, stream, sl), is_k ? layout_.type_k : layout_.type_v, is_k ? row_k_ : row_v_, false};
  return {tail(is_k, kl, stream, cell), is_k ? layout_.tail_type_k : layout_.tail_type_v, tail_row_bytes(is_k, kl),
          tail_partial_[static_cast<size_t>(kl)] != 0};
}

KvRows::StoredRow KvRows::checked_stored(bool is_k, int layer, uint32_t stream, uint32_t cell) const {
  const int kl = kv_layer(layer);
  layout_.check_cell(stream, cell);
  return stored(is_k, kl, stream, cell);
}

uint8_t* KvRows::hot_row(bool is_k, int layer, uint32_t stream, uint32_t cell) const {
  const int kl = kv_layer(layer);
  layout_.check_cell(stream, cell);
  const int32_t sl = slot(stream, cell);
  if (sl < 0)
    throw std::logic_error(std::string("kv cache: ") + (is_k ? "k_row" : "v_row") + " of cell " + std::to_string(cell) +
                           ", which is not hot");
  return hot(is_k, kl, stream, sl);
}

void KvRows::put(const StoredRow& to, bool is_k, int kl, GgmlType from, const uint8_t* src) const {
  const int64_t width = is_k ? layout_.n_embd_k : layout_.n_embd_v;
  if (!to.partial) {
    convert_row(from, src, to.type, to.row, width);
    return;
  }
  const int64_t hd = is_k ? head_k_ : head_v_;
  const size_t from_head = ggml_row_size(from, hd), to_head = ggml_row_size(to.type, hd);
  const std::vector<int>& keep = tail_keep_[static_cast<size_t>(kl)];
  for (size_t i = 0; i < keep.size(); ++i)
    convert_row(from, src + static_cast<size_t>(keep[i]) * from_head, to.type, to.row + i * to_head, hd);
}

uint8_t* KvRows::k_row(int layer, uint32_t stream, uint32_t cell) { return hot_row(true, layer, stream, cell); }
uint8_t* KvRows::v_row(int layer, uint32_t stream, uint32_t cell) { return hot_row(false, layer, stream, cell); }
const uint8_t* KvRows::k_row(int layer, uint32_t stream, uint32_t cell) const { return hot_row(true, layer, stream, cell); }
const uint8_t* KvRows::v_row(int layer, uint32_t stream, uint32_t cell) const { return hot_row(false, layer, stream, cell); }

void KvRows::read_k(int layer, uint32_t stream, uint32_t cell, uint8_t* out) const {
  const StoredRow r = checked_stored(true, layer, stream, cell);
  if (r.partial) throw dropped_heads_error(cell);
  convert_row(r.type, r.row, layout_.type_k, out, layout_.n_embd_k);
}
void KvRows::read_v(int layer, uint32_t stream, uint32_t cell, uint8_t* out) const {
  const StoredRow r = checked_stored(false, layer, stream, cell);
  if (r.partial) throw dropped_heads_error(cell);
  convert_row(r.type, r.row, layout_.type_v, out, layout_.n_embd_v);
}
void KvRows::write_k(int layer, uint32_t stream, uint32_t cell, const uint8_t* src) {
  put(checked_stored(true, layer, stream, cell), true, kv_layer(layer), layout_.type_k, src);
}
void KvRows::write_v(int layer, uint32_t stream, uint32_t cell, const uint8_t* src) {
  put(checked_stored(false, layer, stream, cell), false, kv_layer(layer), layout_.type_v, src);
}

void KvRows::dequantize_k(int layer, uint32_t stream, uint32_t cell, float* out) const {
  const StoredRow r = checked_stored(true, layer, stream, cell);
  if (r.type == GgmlType::TQC3) {  // through the code's maps: the key as the model wrote it, give or take the code's error
    layout_.code->decode_row(*coded_layer(layer), false, r.row, out);
    return;
  }
  if (!r.partial) {
    dequantize_kv_row(r.type, r.row, out, layout_.n_embd_k);
    return;
  }
  std::fill(out, out + layout_.n_embd_k, 0.f);
  const std::vector<int>& keep = tail_keep_[static_cast<size_t>(kv_layer(layer))];
  const size_t head_bytes = ggml_row_size(r.type, head_k_);
  for (size_t i = 0; i < keep.size(); ++i)
    dequantize_kv_row(r.type, r.row + i * head_bytes, out + keep[i] * head_k_, head_k_);
}
void KvRows::quantize_k(int layer, uint32_t stream, uint32_t cell, const float* src) {
  const StoredRow r = checked_stored(true, layer, stream, cell);
  if (r.type == GgmlType::TQC3) {
    layout_.code->encode_row(*coded_layer(layer), false, src, r.row);
    return;
  }
  if (!r.partial) {
    quantize_kv_row(r.type, src, r.row, layout_.n_embd_k);
    return;
  }
  const std::vector<int>& keep = tail_keep_[static_cast<size_t>(kv_layer(layer))];
  const size_t head_bytes = ggml_row_size(r.type, head_k_);
  for (size_t i = 0; i < keep.size(); ++i)
    quantize_kv_row(r.type, src + keep[i] * head_k_, r.row + i * head_bytes, head_k_);
}

const KvCodeLayer* KvRows::coded_layer(int layer) const {
  const KvCodeLayer* l = layout_.code ? layout_.code->layer(layer) : nullptr;
  if (!l) throw Error("kv cache: the KV code has no entry for layer " + std::to_string(layer));
  return l;
}

const uint8_t* KvRows::tail_k_row(int layer, uint32_t stream, uint32_t cell) const {
  if (window_.is_hot(stream, cell)) throw std::logic_error("kv cache: tail_k_row of a hot cell");
  return tail(true, kv_layer(layer), stream, cell);
}

const std::vector<int>* KvRows::tail_kept_heads(int layer) const {
  const int kl = kv_layer(layer);
  if (!windowed_ || !tail_partial_[static_cast<size_t>(kl)]) return nullptr;
  return &tail_keep_[static_cast<size_t>(kl)];
}

void KvRows::row_pointers(int layer, uint32_t stream, const int32_t* cells, size_t n, const uint8_t** k,
                          const uint8_t** v) const {
  layout_.check_stream(stream);
  const int kl = kv_layer(layer);
  const uint8_t* k_hot = hot(true, kl, stream, 0);
  const uint8_t* v_hot = hot(false, kl, stream, 0);
  const size_t row_k = row_k_, row_v = row_v_;
  if (!windowed_) {
    for (size_t j = 0; j < n; ++j) {
      const auto cell = static_cast<size_t>(cells[j]);
      k[j] = k_hot + cell * row_k;
      v[j] = v_hot + cell * row_v;
    }
    return;
  }
  const uint8_t* k_tail = tail(true, kl, stream, 0);
  const uint8_t* v_tail = tail(false, kl, stream, 0);
  const size_t row_tk = tail_row_bytes(true, kl), row_tv = tail_row_bytes(false, kl);
  const int32_t* slots = window_.slots(stream);
  for (size_t j = 0; j < n; ++j) {
    const int32_t cell = cells[j], sl = slots[cell];
    k[j] = sl >= 0 ? k_hot + static_cast<size_t>(sl) * row_k : k_tail + static_cast<size_t>(cell) * row_tk;
    v[j] = sl >= 0 ? v_hot + static_cast<size_t>(sl) * row_v : v_tail + static_cast<size_t>(cell) * row_tv;
  }
}

uint8_t* KvRows::k_data(int layer, uint32_t stream) {
  return const_cast<uint8_t*>(std::as_const(*this).k_data(layer, stream));
}
uint8_t* KvRows::v_data(int layer, uint32_t stream) {
  return const_cast<uint8_t*>(std::as_const(*this).v_data(layer, stream));
}
const uint8_t* KvRows::k_data(int layer, uint32_t stream) const {
  layout_.check_stream(stream);
  if (windowed_) throw std::logic_error("kv cache: k_data of a windowed cache");
  return hot(true, kv_layer(layer), stream, 0);
}
const uint8_t* KvRows::v_data(int layer, uint32_t stream) const {
  layout_.check_stream(stream);
  if (windowed_) throw std::logic_error("kv cache: v_data of a windowed cache");
  return hot(false, kv_layer(layer), stream, 0);
}

size_t KvRows::storage_bytes() const {
  size_t total = 0;
  for (const auto* bufs : {&k_, &v_, &tk_, &tv_})
    for (const auto& b : *bufs) total += b.bytes();
  return total;
}

KvRowBytes KvRows::bytes(const KvResidency& held) const {
  KvRowBytes b;
  for (const auto* bufs : {&k_, &v_})
    for (const auto& s : *bufs) b.hot += s.bytes();
  for (const auto* bufs : {&tk_, &tv_})
    for (const auto& s : *bufs) b.tail += s.bytes();
  b.held = k_.size() * held.hot_used * (row_k_ + row_v_);
  for (size_t l = 0; l < row_tk_.size(); ++l) b.held += held.tail_used * (row_tk_[l] + row_tv_[l]);
  return b;
}

void KvRows::prefault() {
  // A write to each page gives it its own frame; until then calloc's pages all read as the
  // kernel's shared zero page, which stays in cache and makes reads of untouched rows free.
  // Each byte written is the one read, so the contents never change.
  constexpr size_t kPage = 4096;
  for (auto* bufs : {&k_, &v_, &tk_, &tv_})
    for (auto& b : *bufs)
      for (size_t off = 0; off < b.bytes(); off += kPage) {
        volatile uint8_t* byte = b.data() + off;
        *byte = *byte;
      }
}

void KvRows::copy_cell_rows(uint32_t stream, uint32_t src, uint32_t dst) {
  if (stream >= layout_.n_streams() || src >= layout_.n_cells || dst >= layout_.n_cells)
    throw std::logic_error("kv cache: copy_cell_rows: cell out of range");
  copy_cell(stream, src, stream, dst);
}

void KvRows::copy_cell(uint32_t src_stream, uint32_t src, uint32_t dst_stream, uint32_t dst) {
  if (drops_heads_ && slot(src_stream, src) < 0) window_.release(dst_stream, dst);
  for (size_t l = 0; l < k_.size(); ++l)
    for (bool is_k : {true, false}) {
      const int kl = static_cast<int>(l);
      const StoredRow from = stored(is_k, kl, src_stream, src), to = stored(is_k, kl, dst_stream, dst);
      if (from.partial) {
        std::memcpy(to.row, from.row, from.bytes);  // same layer, same kept heads, same type
      } else {
        put(to, is_k, kl, from.type, from.row);
      }
    }
}

void KvRows::copy_rows(uint32_t src_stream, uint32_t dst_stream, uint32_t cell0, uint32_t n) {
  if (windowed_) {
    for (uint32_t i = cell0; i < cell0 + n; ++i) copy_cell(src_stream, i, dst_stream, i);
    return;
  }
  for (size_t l = 0; l < k_.size(); ++l) {
    const int kl = static_cast<int>(l);
    std::memcpy(hot(true, kl, dst_stream, static_cast<int32_t>(cell0)), hot(true, kl, src_stream, static_cast<int32_t>(cell0)),
                n * row_k_);
    std::memcpy(hot(false, kl, dst_stream, static_cast<int32_t>(cell0)), hot(false, kl, src_stream, static_cast<int32_t>(cell0)),
                n * row_v_);
  }
}

void KvRows::demote(uint32_t stream, uint32_t cell, int32_t slot) {
  for (size_t l = 0; l < k_.size(); ++l) {
    const int kl = static_cast<int>(l);
    put(stored(true, kl, stream, cell), true, kl, layout_.type_k, hot(true, kl, stream, slot));
    put(stored(false, kl, stream, cell), false, kl, layout_.type_v, hot(false, kl, stream, slot));
  }
}

void KvRows::zero_cells(uint32_t stream, uint32_t first, uint32_t n) {
  if (windowed_) {
    for (uint32_t cell = first; cell < first + n; ++cell)
      for (size_t l = 0; l < k_.size(); ++l)
        for (bool is_k : {true, false}) {
          const StoredRow r = stored(is_k, static_cast<int>(l), stream, cell);
          std::memset(r.row, 0, r.bytes);
        }
    return;
  }
  for (size_t l = 0; l < k_.size(); ++l) {
    const int kl = static_cast<int>(l);
    std::memset(hot(true, kl, stream, static_cast<int32_t>(first)), 0, n * row_k_);
    std::memset(hot(false, kl, stream, static_cast<int32_t>(first)), 0, n * row_v_);
  }
}

void KvRows::zero_all() {
  for (auto* bufs : {&k_, &v_, &tk_, &tv_})
    for (auto& b : *bufs) std::memset(b.data(), 0, b.bytes());
}

}  // namespace agentkv::memory
