#include "memory/kv_cache.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>

#include "agentkv/error.h"
#include "memory/kv_row_convert.h"

namespace agentkv::memory {
namespace {

constexpr Pos kPosEnd = std::numeric_limits<Pos>::max();  // "no upper bound" of a range
constexpr Pos kPosMax = kPosEnd - 1;                        // largest storable position
constexpr size_t kStorageAlign = 64;                        // cache line / AVX-512 vector

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

// Zeroed, 64-byte aligned storage. calloc hands large requests fresh zero pages from the OS,
// so an untouched cache costs no memset. With a folder: a sparse file there, mapped shared and
// unlinked at once (the OS writes its pages out and drops them under memory pressure; nothing
// stays on disk after the process).
class Storage {
 public:
  explicit Storage(size_t bytes, const std::string& dir = "") : bytes_(bytes) {
    if (!dir.empty()) {
      map_file(dir);
      return;
    }
    raw_ = std::calloc(bytes + kStorageAlign, 1);
    if (!raw_) throw Error("kv cache: cannot allocate " + std::to_string(bytes) + " bytes");
    const auto addr = reinterpret_cast<uintptr_t>(raw_);
    data_ = reinterpret_cast<uint8_t*>((addr + kStorageAlign - 1) & ~(kStorageAlign - 1));
  }
  ~Storage() {
    if (mapped_) munmap(data_, std::max<size_t>(bytes_, 1));
    std::free(raw_);
  }
  Storage(Storage&& o) noexcept
      : raw_(std::exchange(o.raw_, nullptr)), data_(o.data_), bytes_(o.bytes_), mapped_(std::exchange(o.mapped_, false)) {}
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  Storage& operator=(Storage&&) = delete;

  uint8_t* data() const { return data_; }
  size_t bytes() const { return bytes_; }

 private:
  void map_file(const std::string& dir) {
    std::string path = dir + "/agentkv-kv-tail-XXXXXX";
    const int fd = mkstemp(path.data());
    if (fd < 0) throw Error("kv cache: cannot create a tail file in " + dir + ": " + std::strerror(errno));
    unlink(path.c_str());
    const size_t n = std::max<size_t>(bytes_, 1);
    if (ftruncate(fd, static_cast<off_t>(n)) != 0) {
      const int e = errno;
      close(fd);
      throw Error("kv cache: cannot size a tail file of " + std::to_string(n) + " bytes in " + dir + ": " + std::strerror(e));
    }
    void* p = mmap(nullptr, n, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);  // the mapping keeps the file
    if (p == MAP_FAILED) throw Error("kv cache: cannot map a tail file in " + dir + ": " + std::strerror(errno));
    data_ = static_cast<uint8_t*>(p);
    mapped_ = true;
  }

  void* raw_ = nullptr;
  uint8_t* data_ = nullptr;
  size_t bytes_ = 0;
  bool mapped_ = false;
};

struct Range {
  Pos p0, p1;
  bool empty() const { return p0 >= p1; }
};

Range normalize(Pos p0, Pos p1) { return {p0 < 0 ? 0 : p0, p1 < 0 ? kPosEnd : p1}; }

// One row of n elements from one KV type to another (a copy when they are the same).
void convert_row(GgmlType from, const uint8_t* src, GgmlType to, uint8_t* dst, int64_t n) {
  if (from == to) {
    std::memcpy(dst, src, ggml_row_size(to, n));
    return;
  }
  convert_kv_row(from, src, to, dst, n);
}

}  // namespace

struct KvCache::Impl {
  KvLayout layout;
  uint32_t n_streams = 1;
  std::vector<KvCells> cells;      // one table per stream
  std::vector<int> kv_index;       // model layer -> index into k/v, or -1
  size_t row_k = 0, row_v = 0;
  std::vector<Storage> k, v;       // hot rows per KV layer: n_streams * n_hot rows, stream-major
  // Windowed residency (KvLayout::hot_cells): without it n_hot == n_cells and cell i's hot row is
  // row i. With it a cell's hot row is slot_of[stream][cell] (-1: its rows are in the tail, the
  // tk / tv buffers of n_streams * n_cells rows indexed by cell), cell_of the reverse (-1: free).
  bool windowed = false;
  uint32_t n_hot = 0;
  std::vector<size_t> row_tk, row_tv;  // tail row bytes per KV layer
  std::vector<Storage> tk, tv;
  // Retrieval heads (KvLayout::tail_heads): per KV layer whether its tail keeps only some heads,
  // and which (ascending, maybe none); a tail row then holds those heads' rows back to back.
  std::vector<char> tail_partial;
  std::vector<std::vector<int>> tail_keep;
  bool drops_heads = false;
  int64_t head_k = 0, head_v = 0;  // elements per head (with tail_heads)
  std::vector<std::vector<int32_t>> slot_of, cell_of;
  uint64_t demotions = 0;
  SeqId window_background = -1;  // set_window_background

  int32_t slot(uint32_t stream, uint32_t cell) const {
    return windowed ? slot_of[stream][cell] : static_cast<int32_t>(cell);
  }
  uint8_t* hot(const std::vector<Storage>& bufs, size_t row_bytes, int kv_layer, uint32_t stream,
               int32_t slot) const {
    return bufs[static_cast<size_t>(kv_layer)].data() +
           (static_cast<size_t>(stream) * n_hot + static_cast<size_t>(slot)) * row_bytes;
  }
  size_t tail_row_bytes(bool is_k, int kv_layer) const { return (is_k ? row_tk : row_tv)[static_cast<size_t>(kv_layer)]; }
  uint8_t* tail(bool is_k, int kv_layer, uint32_t stream, uint32_t cell) const {
    return (is_k ? tk : tv)[static_cast<size_t>(kv_layer)].data() +
           (static_cast<size_t>(stream) * layout.n_cells + cell) * tail_row_bytes(is_k, kv_layer);
  }
  // Where one K (or V) row of a cell is stored: its bytes, their type, and whether it holds only the
  // kept heads (a tail row of a layer that drops heads).
  struct StoredRow {
    uint8_t* row;
    GgmlType type;
    size_t bytes;
    bool partial;
  };
  StoredRow stored(bool is_k, int kl, uint32_t stream, uint32_t cell) const {
    const int32_t sl = slot(stream, cell);
    if (sl >= 0)
      return {is_k ? hot(k, row_k, kl, stream, sl) : hot(v, row_v, kl, stream, sl), is_k ? layout.type_k : layout.type_v,
              is_k ? row_k : row_v, false};
    return {tail(is_k, kl, stream, cell), is_k ? layout.tail_type_k : layout.tail_type_v, tail_row_bytes(is_k, kl),
            tail_partial[static_cast<size_t>(kl)] != 0};
  }
  int64_t width(bool is_k) const { return is_k ? layout.n_embd_k : layout.n_embd_v; }
  // A whole row of type `from` into its stored place (the kept heads only, for a partial row).
  void put(const StoredRow& to, bool is_k, int kl, GgmlType from, const uint8_t* src) const {
    if (!to.partial) {
      convert_row(from, src, to.type, to.row, width(is_k));
      return;
    }
    const int64_t hd = is_k ? head_k : head_v;
    const size_t from_head = ggml_row_size(from, hd), to_head = ggml_row_size(to.type, hd);
    const std::vector<int>& keep = tail_keep[static_cast<size_t>(kl)];
    for (size_t i = 0; i < keep.size(); ++i)
      convert_row(from, src + static_cast<size_t>(keep[i]) * from_head, to.type, to.row + i * to_head, hd);
  }
  // A hot cell's rows give up their slot (its rows are about to be overwritten with tail rows).
  void release_hot(uint32_t stream, uint32_t cell) {
    const int32_t sl = slot_of[stream][cell];
    if (sl < 0) return;
    cell_of[stream][static_cast<size_t>(sl)] = -1;
    slot_of[stream][cell] = -1;
  }
  void check_cell(uint32_t stream, uint32_t cell) const {
    check_stream(stream);
    if (cell >= layout.n_cells) throw std::logic_error("kv cache: cell " + std::to_string(cell) + " out of range");
  }
  // stored() of a model layer, stream and cell checked (std::logic_error / agentkv::Error).
  StoredRow checked_stored(bool is_k, int layer, uint32_t stream, uint32_t cell) const {
    const int kl = kv_layer(layer);
    check_cell(stream, cell);
    return stored(is_k, kl, stream, cell);
  }
  // A hot cell's row; std::logic_error for a cell whose rows are in the tail.
  uint8_t* hot_row(bool is_k, int layer, uint32_t stream, uint32_t cell) const {
    const int kl = kv_layer(layer);
    check_cell(stream, cell);
    const int32_t sl = slot(stream, cell);
    if (sl < 0)
      throw std::logic_error(std::string("kv cache: ") + (is_k ? "k_row" : "v_row") + " of cell " + std::to_string(cell) +
                             ", which is not hot");
    return is_k ? hot(k, row_k, kl, stream, sl) : hot(v, row_v, kl, stream, sl);
  }
  // Every layer's rows of one cell into another cell's place (either may be hot or in the tail). A
  // tail cell whose rows lack the dropped heads makes a tail cell: its copy cannot be hot either.
  void copy_cell(uint32_t src_stream, uint32_t src, uint32_t dst_stream, uint32_t dst) {
    if (drops_heads && slot(src_stream, src) < 0) release_hot(dst_stream, dst);
    for (size_t l = 0; l < k.size(); ++l)
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
  // Gives every target cell (one stream, ascending) a hot row: free rows first, then those of the hot cells
  // with the lowest positions (empty cells before all), whose rows move to the tail.
  void make_hot(uint32_t stream, const std::vector<uint32_t>& targets);

  void check_seq(SeqId s, const char* op) const {
    if (s < 0 || static_cast<uint32_t>(s) >= layout.n_seq_max)
      throw Error(std::string("kv cache: ") + op + ": sequence id " + std::to_string(s) +
                  " outside [0, " + std::to_string(layout.n_seq_max) + ")");
  }
  void check_stream(uint32_t stream) const {
    if (stream >= n_streams)
      throw Error("kv cache: stream " + std::to_string(stream) + " outside [0, " +
                  std::to_string(n_streams) + ")");
  }
  uint32_t stream_of(SeqId s) const { return layout.unified ? 0 : static_cast<uint32_t>(s); }

  // Validates token t of ub and returns the stream its sequences live in.
  uint32_t token_stream(const UBatch& ub, size_t t) const {
    const auto& seqs = ub.seq[t];
    if (seqs.empty()) throw Error("kv cache: token " + std::to_string(t) + " has no sequence");
    const Pos p = ub.pos[t];
    if (p < 0 || p > kPosMax)
      throw Error("kv cache: token " + std::to_string(t) + " has invalid position " +
                  std::to_string(p));
    for (SeqId s : seqs) check_seq(s, "ubatch");
    const uint32_t stream = stream_of(seqs[0]);
    for (SeqId s : seqs)
      if (stream_of(s) != stream)
        throw Error("kv cache: token " + std::to_string(t) + " belongs to sequences " +
                    std::to_string(seqs[0]) + " and " + std::to_string(s) +
                    ", which live in different streams (the cache is not unified)");
    return stream;
  }

  static void check_shape(const UBatch& ub) {
    if (ub.pos.size() != ub.seq.size())
      throw Error("kv cache: ubatch has " + std::to_string(ub.pos.size()) + " positions but " +
                  std::to_string(ub.seq.size()) + " sequence lists");
  }

  int kv_layer(int layer) const {
    if (layer < 0 || static_cast<size_t>(layer) >= kv_index.size() ||
        kv_index[static_cast<size_t>(layer)] < 0)
      throw Error("kv cache: model layer " + std::to_string(layer) + " has no KV storage");
    return kv_index[static_cast<size_t>(layer)];
  }

  std::optional<std::vector<Placement>> plan(const UBatch* ubs, size_t n_ubs) const;
  void check_tail_heads();
  void copy_rows(uint32_t src_stream, uint32_t dst_stream, uint32_t cell0, uint32_t n);
};

void KvCache::Impl::make_hot(uint32_t stream, const std::vector<uint32_t>& targets) {
  std::vector<int32_t>& slots = slot_of[stream];
  std::vector<int32_t>& owners = cell_of[stream];
  size_t needed = 0;
  for (uint32_t c : targets) needed += slots[c] < 0;
  if (needed == 0) return;
  if (targets.size() > n_hot)
    throw std::logic_error("kv cache: a batch of " + std::to_string(targets.size()) + " cells does not fit " +
                           std::to_string(n_hot) + " hot rows");
  // Candidates in order: free rows, empty cells, cells only the background sequence holds (pages
  // cached for later, by position), then the cells furthest behind their own sequence's newest
  // position (for a cell several sequences share, the nearest of them): each sequence keeps its
  // newest rows, whatever the others' lengths. One sequence: the lowest positions go first.
  // (targets are ascending: apply sorts them)
  const KvCells& c = cells[stream];
  std::vector<Pos> newest(c.n_seq());
  for (uint32_t s = 0; s < c.n_seq(); ++s) newest[s] = c.seq_pos_max(static_cast<SeqId>(s));
  enum : int { kFree, kEmpty, kBackground, kActive };
  std::vector<std::tuple<int, int64_t, int32_t>> order;  // (kind, key, slot)
  order.reserve(n_hot);
  for (int32_t sl = 0; sl < static_cast<int32_t>(n_hot); ++sl) {
    const int32_t owner = owners[static_cast<size_t>(sl)];
    if (owner < 0) {
      order.emplace_back(kFree, 0, sl);
      continue;
    }
    const auto oc = static_cast<uint32_t>(owner);
    if (std::binary_search(targets.begin(), targets.end(), oc)) continue;
    if (c.is_empty(oc)) {
      order.emplace_back(kEmpty, 0, sl);
      continue;
    }
    int64_t behind = std::numeric_limits<int64_t>::max();
    for_each_seq(c.seqs(oc), [&](SeqId s) {
      if (s != window_background) behind = std::min<int64_t>(behind, int64_t{newest[static_cast<size_t>(s)]} - c.pos(oc));
    });
    if (behind == std::numeric_limits<int64_t>::max()) {
      order.emplace_back(kBackground, c.pos(oc), sl);
    } else {
      order.emplace_back(kActive, -behind, sl);
    }
  }
  std::partial_sort(order.begin(), order.begin() + static_cast<std::ptrdiff_t>(needed), order.end());
  size_t next = 0;
  for (uint32_t cell : targets) {
    if (slots[cell] >= 0) continue;
    const int32_t sl = std::get<2>(order[next++]);
    const int32_t owner = owners[static_cast<size_t>(sl)];
    if (owner >= 0) {  // its rows move to the tail (an empty cell's rows are never read again)
      const auto oc = static_cast<uint32_t>(owner);
      if (!c.is_empty(oc)) {
        slots[oc] = -1;  // stored() now names its tail rows
        for (size_t l = 0; l < k.size(); ++l) {
          const int kl = static_cast<int>(l);
          put(stored(true, kl, stream, oc), true, kl, layout.type_k, hot(k, row_k, kl, stream, sl));
          put(stored(false, kl, stream, oc), false, kl, layout.type_v, hot(v, row_v, kl, stream, sl));
        }
        ++demotions;
      }
      slots[oc] = -1;
    }
    owners[static_cast<size_t>(sl)] = static_cast<int32_t>(cell);
    slots[cell] = sl;
  }
}

// Simulates placing the ubatches in order without touching the cells. Tokens take the
// lowest-numbered empty cells of their stream, in token order. A search starts at the stream's
// first free cell; within one plan the next ubatch starts after the last cell the previous one
// took, since everything below it is used or already taken by the plan.
std::optional<std::vector<Placement>> KvCache::Impl::plan(const UBatch* ubs, size_t n_ubs) const {
  std::vector<uint32_t> start(n_streams), free_left(n_streams);
  for (uint32_t s = 0; s < n_streams; ++s) {
    start[s] = cells[s].first_free();
    free_left[s] = cells[s].size() - cells[s].used();
  }

  std::vector<Placement> result;
  result.reserve(n_ubs);
  std::vector<std::vector<uint32_t>> tokens_of(n_streams);
  for (size_t u = 0; u < n_ubs; ++u) {
    const UBatch& ub = ubs[u];
    check_shape(ub);
    for (auto& list : tokens_of) list.clear();
    for (size_t t = 0; t < ub.size(); ++t)
      tokens_of[token_stream(ub, t)].push_back(static_cast<uint32_t>(t));

    Placement placement(ub.size());
    for (uint32_t s = 0; s < n_streams; ++s) {
      const auto& toks = tokens_of[s];
      if (toks.empty()) continue;
      if (toks.size() > free_left[s] || toks.size() > n_hot) return std::nullopt;
      const KvCells& c = cells[s];
      uint32_t idx = start[s];
      for (uint32_t tok : toks) {
        while (idx < c.size() && !c.is_empty(idx)) ++idx;
        if (idx >= c.size())  // cannot happen: no empty cell lies below first_free()
          throw std::logic_error("kv cache: free cell count and cell table disagree");
        placement[tok] = CellRef{s, idx++};
      }
      free_left[s] -= static_cast<uint32_t>(toks.size());
      start[s] = idx;
    }
    result.push_back(std::move(placement));
  }
  return result;
}

void KvCache::Impl::copy_rows(uint32_t src_stream, uint32_t dst_stream, uint32_t cell0,
                              uint32_t n) {
  if (windowed) {
    for (uint32_t i = cell0; i < cell0 + n; ++i) copy_cell(src_stream, i, dst_stream, i);
    return;
  }
  for (size_t l = 0; l < k.size(); ++l) {
    const int kl = static_cast<int>(l);
    std::memcpy(hot(k, row_k, kl, dst_stream, static_cast<int32_t>(cell0)),
                hot(k, row_k, kl, src_stream, static_cast<int32_t>(cell0)), n * row_k);
    std::memcpy(hot(v, row_v, kl, dst_stream, static_cast<int32_t>(cell0)),
                hot(v, row_v, kl, src_stream, static_cast<int32_t>(cell0)), n * row_v);
  }
}

// KvLayout::tail_heads is usable: a window, a mask per model layer over n_head_kv heads, and heads
// whole blocks of every row type and of the rotation (a head's rows are cut out of a row as bytes).
void KvCache::Impl::check_tail_heads() {
  Impl& m = *this;
  const KvLayout& l = m.layout;
  if (!m.windowed) throw Error("kv cache: retrieval heads (tail_heads) need a window (--kv-hot below the context)");
  if (l.tail_heads.size() != l.layer_has_kv.size())
    throw Error("kv cache: tail_heads has " + std::to_string(l.tail_heads.size()) + " masks for " +
                std::to_string(l.layer_has_kv.size()) + " layers");
  if (l.n_head_kv == 0 || l.n_head_kv > 64 || l.n_embd_k % l.n_head_kv != 0 || l.n_embd_v % l.n_head_kv != 0)
    throw Error("kv cache: tail_heads needs n_head_kv in [1, 64] dividing the row widths");
  m.head_k = l.n_embd_k / l.n_head_kv;
  m.head_v = l.n_embd_v / l.n_head_kv;
  for (uint64_t mask : l.tail_heads)
    if (l.n_head_kv < 64 && (mask >> l.n_head_kv) != 0) throw Error("kv cache: a tail_heads mask names a head past n_head_kv");
  checked_row_bytes(l.type_k, m.head_k, "K head");
  checked_row_bytes(l.type_v, m.head_v, "V head");
  checked_row_bytes(l.tail_type_k, m.head_k, "tail K head");
  checked_row_bytes(l.tail_type_v, m.head_v, "tail V head");
  if ((l.rotation.k_block > 0 && m.head_k % l.rotation.k_block != 0) || (l.rotation.v_block > 0 && m.head_v % l.rotation.v_block != 0))
    throw Error("kv cache: tail_heads needs rotation blocks within a head (" + describe(l.rotation) + ")");
}

KvCache::KvCache(const KvLayout& layout) : impl_(std::make_unique<Impl>()) {
  Impl& m = *impl_;
  m.layout = layout;
  if (layout.n_cells == 0 || layout.n_cells > static_cast<uint32_t>(kPosEnd))
    throw Error("kv cache: cell count " + std::to_string(layout.n_cells) + " outside [1, 2^31)");
  if (layout.n_seq_max == 0 || layout.n_seq_max > static_cast<uint32_t>(kMaxSeq))
    throw Error("kv cache: n_seq_max " + std::to_string(layout.n_seq_max) + " outside [1, " +
                std::to_string(kMaxSeq) + "]");
  m.row_k = checked_row_bytes(layout.type_k, layout.n_embd_k, "K");
  m.row_v = checked_row_bytes(layout.type_v, layout.n_embd_v, "V");
  m.n_streams = layout.unified ? 1 : layout.n_seq_max;
  if (layout.type_k == GgmlType::TQC3 || layout.type_v == GgmlType::TQC3) {
    if (!layout.code) throw Error("kv cache: tqc3 rows need their calibrated code (KvLayout::code)");
    if (layout.code->n_head_kv() * layout.code->head_dim() != layout.n_embd_k || layout.n_embd_k != layout.n_embd_v)
      throw Error("kv cache: the KV code's heads do not make rows of " + std::to_string(layout.n_embd_k));
  }
  // Moving rows to a window's tail converts them through floats, which tqc3 rows reach only with
  // their code's maps.
  if (layout.hot_cells > 0 && layout.hot_cells < layout.n_cells)
    for (GgmlType t : {layout.type_k, layout.type_v, layout.tail_type_k, layout.tail_type_v})
      if (t == GgmlType::TQC3) throw Error("kv cache: tqc3 rows cannot be in a windowed cache (--kv-hot)");

  m.cells.reserve(m.n_streams);
  for (uint32_t s = 0; s < m.n_streams; ++s) m.cells.emplace_back(layout.n_cells, layout.n_seq_max);

  m.windowed = layout.hot_cells > 0 && layout.hot_cells < layout.n_cells;
  m.n_hot = m.windowed ? layout.hot_cells : layout.n_cells;
  if (!layout.tail_heads.empty()) m.check_tail_heads();
  if (m.windowed) {
    m.slot_of.assign(m.n_streams, std::vector<int32_t>(layout.n_cells, -1));
    m.cell_of.assign(m.n_streams, std::vector<int32_t>(m.n_hot, -1));
  }
  const size_t hot_rows = static_cast<size_t>(m.n_streams) * m.n_hot;
  const size_t tail_rows = m.windowed ? static_cast<size_t>(m.n_streams) * layout.n_cells : 0;
  m.kv_index.assign(layout.layer_has_kv.size(), -1);
  int n_kv_layers = 0;
  for (size_t il = 0; il < layout.layer_has_kv.size(); ++il) {
    if (!layout.layer_has_kv[il]) continue;
    m.kv_index[il] = n_kv_layers++;
    m.k.emplace_back(hot_rows * m.row_k);
    m.v.emplace_back(hot_rows * m.row_v);
    if (m.windowed) {
      std::vector<int> keep;
      if (!layout.tail_heads.empty())
        for (int h = 0; h < static_cast<int>(layout.n_head_kv); ++h)
          if (layout.tail_heads[il] >> h & 1) keep.push_back(h);
      const bool partial = !layout.tail_heads.empty() && keep.size() < layout.n_head_kv;
      const auto kept = static_cast<int64_t>(keep.size());
      m.row_tk.push_back(partial ? ggml_row_size(layout.tail_type_k, kept * m.head_k)
                                 : checked_row_bytes(layout.tail_type_k, layout.n_embd_k, "tail K"));
      m.row_tv.push_back(partial ? ggml_row_size(layout.tail_type_v, kept * m.head_v)
                                 : checked_row_bytes(layout.tail_type_v, layout.n_embd_v, "tail V"));
      m.drops_heads = m.drops_heads || partial;
      m.tail_partial.push_back(partial ? 1 : 0);
      m.tail_keep.push_back(partial ? std::move(keep) : std::vector<int>{});
      m.tk.emplace_back(tail_rows * m.row_tk.back(), layout.tail_dir);
      m.tv.emplace_back(tail_rows * m.row_tv.back(), layout.tail_dir);
    }
  }
}

KvCache::~KvCache() = default;

const KvLayout& KvCache::layout() const { return impl_->layout; }
uint32_t KvCache::n_streams() const { return impl_->n_streams; }

uint32_t KvCache::stream_of(SeqId seq) const {
  impl_->check_seq(seq, "stream_of");
  return impl_->stream_of(seq);
}

std::optional<Placement> KvCache::find_slot(const UBatch& ub) const {
  auto plans = impl_->plan(&ub, 1);
  if (!plans) return std::nullopt;
  return std::move(plans->front());
}

std::optional<std::vector<Placement>> KvCache::find_slots(const std::vector<UBatch>& ubs) const {
  return impl_->plan(ubs.data(), ubs.size());
}

void KvCache::apply(const UBatch& ub, const Placement& placement) {
  Impl& m = *impl_;
  Impl::check_shape(ub);
  if (placement.size() != ub.size())
    throw std::logic_error("kv cache: placement of " + std::to_string(placement.size()) +
                           " cells for a ubatch of " + std::to_string(ub.size()) + " tokens");
  // Validate everything before the first change so a bad placement leaves the cache as it was.
  std::vector<std::pair<uint32_t, uint32_t>> targets;
  targets.reserve(ub.size());
  for (size_t t = 0; t < ub.size(); ++t) {
    const uint32_t stream = m.token_stream(ub, t);
    const CellRef ref = placement[t];
    if (ref.stream != stream || ref.cell >= m.layout.n_cells ||
        !m.cells[stream].is_empty(ref.cell))
      throw std::logic_error("kv cache: placement of token " + std::to_string(t) +
                             " is not an empty cell of its stream (stale find_slot result?)");
    targets.emplace_back(ref.stream, ref.cell);
  }
  std::sort(targets.begin(), targets.end());
  if (std::adjacent_find(targets.begin(), targets.end()) != targets.end())
    throw std::logic_error("kv cache: placement uses a cell twice");

  if (m.windowed) {  // before occupying: the rows moved out are chosen among the cells as they were
    std::vector<uint32_t> in_stream;
    for (uint32_t s = 0; s < m.n_streams; ++s) {
      in_stream.clear();
      for (const auto& [stream, cell] : targets)
        if (stream == s) in_stream.push_back(cell);
      if (!in_stream.empty()) m.make_hot(s, in_stream);
    }
  }
  for (size_t t = 0; t < ub.size(); ++t) {
    SeqSet seqs;
    for (SeqId s : ub.seq[t]) seqs.set(static_cast<size_t>(s));
    const CellRef ref = placement[t];
    m.cells[ref.stream].occupy(ref.cell, ub.pos[t], seqs);
  }
}

uint8_t* KvCache::k_data(int layer, uint32_t stream) {
  return const_cast<uint8_t*>(std::as_const(*this).k_data(layer, stream));
}
uint8_t* KvCache::v_data(int layer, uint32_t stream) {
  return const_cast<uint8_t*>(std::as_const(*this).v_data(layer, stream));
}
const uint8_t* KvCache::k_data(int layer, uint32_t stream) const {
  impl_->check_stream(stream);
  if (impl_->windowed) throw std::logic_error("kv cache: k_data of a windowed cache");
  return impl_->hot(impl_->k, impl_->row_k, impl_->kv_layer(layer), stream, 0);
}
const uint8_t* KvCache::v_data(int layer, uint32_t stream) const {
  impl_->check_stream(stream);
  if (impl_->windowed) throw std::logic_error("kv cache: v_data of a windowed cache");
  return impl_->hot(impl_->v, impl_->row_v, impl_->kv_layer(layer), stream, 0);
}
uint8_t* KvCache::k_row(int layer, uint32_t stream, uint32_t cell) {
  return const_cast<uint8_t*>(std::as_const(*this).k_row(layer, stream, cell));
}
uint8_t* KvCache::v_row(int layer, uint32_t stream, uint32_t cell) {
  return const_cast<uint8_t*>(std::as_const(*this).v_row(layer, stream, cell));
}
const uint8_t* KvCache::k_row(int layer, uint32_t stream, uint32_t cell) const {
  return impl_->hot_row(true, layer, stream, cell);
}
const uint8_t* KvCache::v_row(int layer, uint32_t stream, uint32_t cell) const {
  return impl_->hot_row(false, layer, stream, cell);
}

namespace {
Error dropped_heads_error(uint32_t cell) {
  return Error("kv cache: cell " + std::to_string(cell) +
               " is in a tail that keeps only the retrieval heads' rows (--kv-retrieval-heads): its whole rows are gone, "
               "so it cannot be saved, exported or copied out");
}
}  // namespace

void KvCache::read_k(int layer, uint32_t stream, uint32_t cell, uint8_t* out) const {
  const Impl::StoredRow r = impl_->checked_stored(true, layer, stream, cell);
  if (r.partial) throw dropped_heads_error(cell);
  convert_row(r.type, r.row, impl_->layout.type_k, out, impl_->layout.n_embd_k);
}
void KvCache::read_v(int layer, uint32_t stream, uint32_t cell, uint8_t* out) const {
  const Impl::StoredRow r = impl_->checked_stored(false, layer, stream, cell);
  if (r.partial) throw dropped_heads_error(cell);
  convert_row(r.type, r.row, impl_->layout.type_v, out, impl_->layout.n_embd_v);
}
void KvCache::write_k(int layer, uint32_t stream, uint32_t cell, const uint8_t* src) {
  impl_->put(impl_->checked_stored(true, layer, stream, cell), true, impl_->kv_layer(layer), impl_->layout.type_k, src);
}
void KvCache::write_v(int layer, uint32_t stream, uint32_t cell, const uint8_t* src) {
  impl_->put(impl_->checked_stored(false, layer, stream, cell), false, impl_->kv_layer(layer), impl_->layout.type_v, src);
}
void KvCache::dequantize_k(int layer, uint32_t stream, uint32_t cell, float* out) const {
  const Impl::StoredRow r = impl_->checked_stored(true, layer, stream, cell);
  if (r.type == GgmlType::TQC3) {  // through the code's maps: the key as the model wrote it, give or take the code's error
    impl_->layout.code->decode_row(*coded_layer(layer), false, r.row, out);
    return;
  }
  if (!r.partial) {
    dequantize_kv_row(r.type, r.row, out, impl_->layout.n_embd_k);
    return;
  }
  const Impl& m = *impl_;
  std::fill(out, out + m.layout.n_embd_k, 0.f);
  const std::vector<int>& keep = m.tail_keep[static_cast<size_t>(m.kv_layer(layer))];
  const size_t head_bytes = ggml_row_size(r.type, m.head_k);
  for (size_t i = 0; i < keep.size(); ++i)
    dequantize_kv_row(r.type, r.row + i * head_bytes, out + keep[i] * m.head_k, m.head_k);
}
void KvCache::quantize_k(int layer, uint32_t stream, uint32_t cell, const float* src) {
  const Impl::StoredRow r = impl_->checked_stored(true, layer, stream, cell);
  if (r.type == GgmlType::TQC3) {
    impl_->layout.code->encode_row(*coded_layer(layer), false, src, r.row);
    return;
  }
  if (!r.partial) {
    quantize_kv_row(r.type, src, r.row, impl_->layout.n_embd_k);
    return;
  }
  const Impl& m = *impl_;
  const std::vector<int>& keep = m.tail_keep[static_cast<size_t>(m.kv_layer(layer))];
  const size_t head_bytes = ggml_row_size(r.type, m.head_k);
  for (size_t i = 0; i < keep.size(); ++i)
    quantize_kv_row(r.type, src + keep[i] * m.head_k, r.row + i * head_bytes, m.head_k);
}
const std::vector<int>* KvCache::tail_kept_heads(int layer) const {
  const Impl& m = *impl_;
  const int kl = m.kv_layer(layer);
  if (!m.windowed || !m.tail_partial[static_cast<size_t>(kl)]) return nullptr;
  return &m.tail_keep[static_cast<size_t>(kl)];
}
bool KvCache::tail_drops_heads() const { return impl_->drops_heads; }
void KvCache::set_window_background(SeqId seq) {
  if (seq >= 0) impl_->check_seq(seq, "set_window_background");
  impl_->window_background = seq;
}
const KvCodeLayer* KvCache::coded_layer(int layer) const {
  const KvCodeLayer* l = impl_->layout.code ? impl_->layout.code->layer(layer) : nullptr;
  if (!l) throw Error("kv cache: the KV code has no entry for layer " + std::to_string(layer));
  return l;
}
bool KvCache::is_hot(uint32_t stream, uint32_t cell) const {
  impl_->check_cell(stream, cell);
  return impl_->slot(stream, cell) >= 0;
}
const uint8_t* KvCache::tail_k_row(int layer, uint32_t stream, uint32_t cell) const {
  if (is_hot(stream, cell)) throw std::logic_error("kv cache: tail_k_row of a hot cell");
  return impl_->tail(true, impl_->kv_layer(layer), stream, cell);
}
const uint8_t* KvCache::tail_v_row(int layer, uint32_t stream, uint32_t cell) const {
  if (is_hot(stream, cell)) throw std::logic_error("kv cache: tail_v_row of a hot cell");
  return impl_->tail(false, impl_->kv_layer(layer), stream, cell);
}
void KvCache::row_pointers(int layer, uint32_t stream, const int32_t* cells, size_t n, const uint8_t** k,
                           const uint8_t** v) const {
  const Impl& m = *impl_;
  m.check_stream(stream);
  const int kl = m.kv_layer(layer);
  const uint8_t* k_hot = m.hot(m.k, m.row_k, kl, stream, 0);
  const uint8_t* v_hot = m.hot(m.v, m.row_v, kl, stream, 0);
  if (!m.windowed) {
    for (size_t j = 0; j < n; ++j) {
      const auto cell = static_cast<size_t>(cells[j]);
      k[j] = k_hot + cell * m.row_k;
      v[j] = v_hot + cell * m.row_v;
    }
    return;
  }
  const uint8_t* k_tail = m.tail(true, kl, stream, 0);
  const uint8_t* v_tail = m.tail(false, kl, stream, 0);
  const size_t row_tk = m.tail_row_bytes(true, kl), row_tv = m.tail_row_bytes(false, kl);
  const int32_t* slots = m.slot_of[stream].data();
  for (size_t j = 0; j < n; ++j) {
    const int32_t cell = cells[j], sl = slots[cell];
    k[j] = sl >= 0 ? k_hot + static_cast<size_t>(sl) * m.row_k : k_tail + static_cast<size_t>(cell) * row_tk;
    v[j] = sl >= 0 ? v_hot + static_cast<size_t>(sl) * m.row_v : v_tail + static_cast<size_t>(cell) * row_tv;
  }
}

std::pair<uint64_t, uint64_t> KvCache::seq_residency(SeqId seq) const {
  const Impl& m = *impl_;
  m.check_seq(seq, "seq_residency");
  const uint32_t s = m.stream_of(seq);
  const KvCells& c = m.cells[s];
  std::pair<uint64_t, uint64_t> out{0, 0};
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)
    if (c.has_seq(i, seq)) (m.slot(s, i) >= 0 ? out.first : out.second) += 1;
  return out;
}

bool KvCache::windowed() const { return impl_->windowed; }

KvResidency KvCache::residency() const {
  const Impl& m = *impl_;
  KvResidency r;
  r.windowed = m.windowed;
  r.hot_cells = m.n_hot;
  r.demotions = m.demotions;
  for (const auto& b : m.k) r.hot_bytes += b.bytes();
  for (const auto& b : m.v) r.hot_bytes += b.bytes();
  for (const auto& b : m.tk) r.tail_bytes += b.bytes();
  for (const auto& b : m.tv) r.tail_bytes += b.bytes();
  for (uint32_t s = 0; s < m.n_streams; ++s) {
    const KvCells& c = m.cells[s];
    for (uint32_t i = 0; i < c.used_max_p1(); ++i)
      if (!c.is_empty(i)) (m.slot(s, i) >= 0 ? r.hot_used : r.tail_used) += 1;
  }
  r.held_bytes = m.k.size() * r.hot_used * (m.row_k + m.row_v);
  for (size_t l = 0; l < m.row_tk.size(); ++l) r.held_bytes += r.tail_used * (m.row_tk[l] + m.row_tv[l]);
  return r;
}
size_t KvCache::row_bytes_k() const { return impl_->row_k; }
size_t KvCache::row_bytes_v() const { return impl_->row_v; }

bool KvCache::layer_has_kv(int layer) const {
  return layer >= 0 && static_cast<size_t>(layer) < impl_->kv_index.size() &&
         impl_->kv_index[static_cast<size_t>(layer)] >= 0;
}
uint32_t KvCache::n_kv_layers() const { return static_cast<uint32_t>(impl_->k.size()); }

MemoryUsage KvCache::usage() const {
  MemoryUsage u;
  for (const KvCells& c : impl_->cells) u.cells_used += c.used(), u.cells_total += c.size();
  u.bytes_total = total_bytes();
  return u;
}

size_t KvCache::total_bytes() const {
  size_t total = 0;
  for (const auto* bufs : {&impl_->k, &impl_->v, &impl_->tk, &impl_->tv})
    for (const auto& b : *bufs) total += b.bytes();
  return total;
}

void KvCache::prefault() {
  // A write to each page gives it its own frame; until then calloc's pages all read as the
  // kernel's shared zero page, which stays in cache and makes reads of untouched rows free.
  // Each byte written is the one read, so the contents never change.
  constexpr size_t kPage = 4096;
  for (auto* bufs : {&impl_->k, &impl_->v, &impl_->tk, &impl_->tv})
    for (auto& b : *bufs)
      for (size_t off = 0; off < b.bytes(); off += kPage) {
        volatile uint8_t* byte = b.data() + off;
        *byte = *byte;
      }
}

uint32_t KvCache::n_kv(uint32_t stream) const {
  impl_->check_stream(stream);
  const uint32_t used_end = impl_->cells[stream].used_max_p1();
  const uint64_t padded = (static_cast<uint64_t>(used_end) + kNKvPad - 1) / kNKvPad * kNKvPad;
  return static_cast<uint32_t>(
      std::min<uint64_t>(impl_->layout.n_cells, std::max<uint64_t>(kNKvPad, padded)));
}

void KvCache::fill_mask(const UBatch& ub, const std::vector<int>& tokens, uint32_t stream,
                        float* mask, int64_t mask_stride) const {
  const Impl& m = *impl_;
  Impl::check_shape(ub);
  const uint32_t n = n_kv(stream);
  const KvCells& c = m.cells[stream];
  const Pos* pos = c.pos_data();
  const SeqSet* seq = c.seq_data();
  for (size_t r = 0; r < tokens.size(); ++r) {
    const int t = tokens[r];
    if (t < 0 || static_cast<size_t>(t) >= ub.size())
      throw Error("kv cache: mask token index " + std::to_string(t) + " outside the ubatch");
    if (ub.seq[static_cast<size_t>(t)].empty())
      throw Error("kv cache: token " + std::to_string(t) + " has no sequence");
    const SeqId s = ub.seq[static_cast<size_t>(t)][0];
    m.check_seq(s, "fill_mask");
    if (m.stream_of(s) != stream)
      throw Error("kv cache: token " + std::to_string(t) + " of sequence " + std::to_string(s) +
                  " masked against stream " + std::to_string(stream));
    const Pos p = ub.pos[static_cast<size_t>(t)];
    float* out = mask + static_cast<int64_t>(r) * mask_stride;
    // Empty cells have pos -1 and no sequence, so the seq test hides them too.
    for (uint32_t j = 0; j < n; ++j)
      out[j] = (pos[j] <= p && seq[j].test(static_cast<size_t>(s))) ? 0.0f : -INFINITY;
  }
}

const KvCells& KvCache::cells(uint32_t stream) const {
  impl_->check_stream(stream);
  return impl_->cells[stream];
}

bool KvCache::has_shift() const {
  for (const auto& c : impl_->cells)
    if (c.has_shift()) return true;
  return false;
}

std::vector<std::pair<uint32_t, Pos>> KvCache::pending_shifts(uint32_t stream) const {
  impl_->check_stream(stream);
  const KvCells& c = impl_->cells[stream];
  std::vector<std::pair<uint32_t, Pos>> out;
  if (!c.has_shift()) return out;
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)
    if (!c.is_empty(i) && c.shift(i) != 0 && !c.known_zero(i)) out.emplace_back(i, c.shift(i));
  return out;
}

size_t KvCache::cells_free_for(SeqId seq) const {
  impl_->check_seq(seq, "cells_free_for");
  const KvCells& c = impl_->cells[impl_->stream_of(seq)];
  size_t n = 0;
  for (uint32_t i = 0; i < c.size(); ++i)
    if (c.is_empty(i) || (c.has_seq(i, seq) && c.seqs(i).count() == 1)) ++n;
  return n;
}

void KvCache::reset_shift() {
  for (auto& c : impl_->cells) c.reset_shift();
}

void KvCache::clear(bool zero_data) {
  Impl& m = *impl_;
  for (auto& c : m.cells) c.reset();
  if (zero_data) {
    for (auto* bufs : {&m.k, &m.v, &m.tk, &m.tv})
      for (auto& b : *bufs) std::memset(b.data(), 0, b.bytes());
    for (auto& c : m.cells) c.mark_all_zero();
  }
}

namespace {

// Removes seq from its cells at positions [p0, p1) found through the cell table's note of each
// (sequence, position): O(positions), not O(pool) — a request's sequence leaving a pool of
// millions of cached cells. False (some or none removed) when a position holds several cells of
// seq or one not noted: the caller scans for the rest.
bool remove_by_position(KvCells& c, SeqId seq, Pos p0, Pos p1) {
  const Pos lo = std::max(p0, c.seq_pos_min(seq));
  const Pos hi = c.seq_pos_max(seq) < p1 ? c.seq_pos_max(seq) + 1 : p1;
  if (c.seq_pos_min(seq) < 0 || lo >= hi) return true;
  if (c.seq_pos_max_count(seq, lo, hi) > 1) return false;
  for (Pos p = lo; p < hi; ++p) {
    const uint32_t i = c.noted_cell(seq, p);
    if (i != UINT32_MAX) c.remove_seq(i, seq);
    else if (c.seq_pos_count(seq, p) > 0) return false;
  }
  return true;
}

}  // namespace

bool KvCache::seq_rm(SeqId seq, Pos p0, Pos p1) {
  Impl& m = *impl_;
  if (seq >= 0) m.check_seq(seq, "seq_rm");
  const Range r = normalize(p0, p1);
  if (r.empty()) return true;
  if (seq >= 0 && remove_by_position(m.cells[m.stream_of(seq)], seq, r.p0, r.p1)) return true;
  for (uint32_t s = 0; s < m.n_streams; ++s) {
    if (seq >= 0 && s != m.stream_of(seq)) continue;
    KvCells& c = m.cells[s];
    for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
      if (!c.pos_in(i, r.p0, r.p1)) continue;
      if (seq >= 0) c.remove_seq(i, seq);
      else c.release(i);
    }
  }
  return true;
}

void KvCache::seq_cp(SeqId src, SeqId dst, Pos p0, Pos p1) {
  Impl& m = *impl_;
  m.check_seq(src, "seq_cp");
  m.check_seq(dst, "seq_cp");
  if (src == dst) return;
  const Range r = normalize(p0, p1);
  const uint32_t s0 = m.stream_of(src), s1 = m.stream_of(dst);
  KvCells& from = m.cells[s0];

  if (s0 == s1) {
    // One stream: the cells (and their K/V rows) are shared, dst just joins them.
    if (r.empty()) return;
    for (uint32_t i = 0; i < from.used_max_p1(); ++i)
      if (from.pos_in(i, r.p0, r.p1) && from.has_seq(i, src)) from.add_seq(i, dst);
    return;
  }

  // Across streams the rows must be copied, and the copy replaces dst wholesale. A partial copy
  // would have to merge src's cells into dst's existing ones at other indices, which no caller
  // needs (forking copies whole sequences); llama.cpp has the same restriction.
  const Pos lo = from.seq_pos_min(src), hi = from.seq_pos_max(src);
  if (lo >= 0 && (r.p0 > lo || r.p1 <= hi))
    throw Error("kv cache: seq_cp from sequence " + std::to_string(src) + " to " +
                std::to_string(dst) + " crosses streams and must copy the whole sequence " +
                "(positions " + std::to_string(lo) + ".." + std::to_string(hi) + "), not [" +
                std::to_string(p0) + ", " + std::to_string(p1) + ")");

  // A stream of a non-unified cache only ever holds its own sequence, so replacing dst means
  // resetting its stream. Cells keep their indices; pending shifts travel with the rows.
  KvCells& to = m.cells[s1];
  to.reset();
  SeqSet only_dst;
  only_dst.set(static_cast<size_t>(dst));
  uint32_t run_start = 0, run_len = 0;
  for (uint32_t i = 0; i <= from.size(); ++i) {
    const bool copy = i < from.size() && from.has_seq(i, src);
    if (copy) {
      to.assign(i, from.pos(i), only_dst, from.shift(i));
      if (run_len == 0) run_start = i;
      ++run_len;
    } else if (run_len > 0) {
      m.copy_rows(s0, s1, run_start, run_len);
      run_len = 0;
    }
  }
}

void KvCache::seq_keep(SeqId seq) {
  Impl& m = *impl_;
  m.check_seq(seq, "seq_keep");
  for (uint32_t s = 0; s < m.n_streams; ++s) {
    KvCells& c = m.cells[s];
    for (uint32_t i = 0; i < c.used_max_p1(); ++i) c.keep_only(i, seq);
  }
}

void KvCache::seq_add(SeqId seq, Pos p0, Pos p1, Pos delta) {
  Impl& m = *impl_;
  m.check_seq(seq, "seq_add");
  const Range r = normalize(p0, p1);
  if (delta == 0 || r.empty()) return;
  const uint32_t s = m.stream_of(seq);
  KvCells& c = m.cells[s];
  if (delta > 0) {
    // Check before changing anything: the highest affected position must stay storable.
    const Pos top = std::min<Pos>(c.seq_pos_max(seq), r.p1 - 1);
    if (top >= r.p0 && static_cast<int64_t>(top) + delta > kPosMax)
      throw Error("kv cache: seq_add of " + std::to_string(delta) + " to sequence " +
                  std::to_string(seq) + " moves position " + std::to_string(top) +
                  " past the largest position");
  }
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)
    if (c.pos_in(i, r.p0, r.p1) && c.has_seq(i, seq)) c.add_pos(i, delta);
}

void KvCache::seq_div(SeqId seq, Pos p0, Pos p1, int d) {
  Impl& m = *impl_;
  m.check_seq(seq, "seq_div");
  if (d < 1) throw Error("kv cache: seq_div divisor " + std::to_string(d) + " must be >= 1");
  const Range r = normalize(p0, p1);
  if (d == 1 || r.empty()) return;
  KvCells& c = m.cells[m.stream_of(seq)];
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)
    if (c.pos_in(i, r.p0, r.p1) && c.has_seq(i, seq)) c.div_pos(i, d);
}

Pos KvCache::seq_pos_min(SeqId seq) const {
  impl_->check_seq(seq, "seq_pos_min");
  return impl_->cells[impl_->stream_of(seq)].seq_pos_min(seq);
}

Pos KvCache::seq_pos_max(SeqId seq) const {
  impl_->check_seq(seq, "seq_pos_max");
  return impl_->cells[impl_->stream_of(seq)].seq_pos_max(seq);
}

void KvCache::restore_cell(uint32_t stream, uint32_t cell, Pos pos, const SeqSet& seqs,
                           Pos shift) {
  Impl& m = *impl_;
  if (stream >= m.n_streams || cell >= m.layout.n_cells)
    throw std::logic_error("kv cache: restore_cell: cell " + std::to_string(cell) + " of stream " +
                           std::to_string(stream) + " does not exist");
  if (pos >= 0) {
    if (pos > kPosMax || seqs.none())
      throw std::logic_error("kv cache: restore_cell: used cell needs a valid position and a sequence");
    for (size_t s = seqs._Find_first(); s < seqs.size(); s = seqs._Find_next(s))
      if (s >= m.layout.n_seq_max || m.stream_of(static_cast<SeqId>(s)) != stream)
        throw std::logic_error("kv cache: restore_cell: sequence " + std::to_string(s) +
                               " cannot live in stream " + std::to_string(stream));
  }
  m.cells[stream].assign(cell, pos, seqs, pos >= 0 ? shift : 0);
}

void KvCache::copy_cell_rows(uint32_t stream, uint32_t src, uint32_t dst) {
  Impl& m = *impl_;
  if (stream >= m.n_streams || src >= m.layout.n_cells || dst >= m.layout.n_cells)
    throw std::logic_error("kv cache: copy_cell_rows: cell out of range");
  m.copy_cell(stream, src, stream, dst);
}

void KvCache::seq_fake_prefix(SeqId seq, Pos n) {
  Impl& m = *impl_;
  m.check_seq(seq, "seq_fake_prefix");
  if (n < 0 || n > kPosEnd - 1)
    throw Error("kv cache: seq_fake_prefix length " + std::to_string(n) + " outside [0, 2^31 - 1)");
  const uint32_t s = m.stream_of(seq);
  KvCells& c = m.cells[s];
  if (c.seq_pos_max(seq) >= 0)
    throw Error("kv cache: seq_fake_prefix: sequence " + std::to_string(seq) + " is not empty (positions " +
                std::to_string(c.seq_pos_min(seq)) + ".." + std::to_string(c.seq_pos_max(seq)) + ")");
  const uint32_t free_cells = c.size() - c.used();
  if (static_cast<uint32_t>(n) > free_cells)
    throw Error("kv cache: seq_fake_prefix of " + std::to_string(n) + " positions for sequence " +
                std::to_string(seq) + ": only " + std::to_string(free_cells) + " empty cells");
  if (n == 0) return;

  // The lowest empty cells, as placement would pick them.
  std::vector<uint32_t> picked(static_cast<size_t>(n));
  uint32_t idx = c.first_free();
  for (auto& cell : picked) {
    while (!c.is_empty(idx)) ++idx;
    cell = idx++;
  }
  // Cells used before may hold old rows: zero those (runs of adjacent cells at once).
  if (m.windowed) {
    // Free hot rows go to the highest positions, as a prefill would have left them.
    // Ascending slots for ascending positions: attention then reads the window's rows in address order.
    std::vector<int32_t>& owners = m.cell_of[s];
    std::vector<int32_t> free_slots;
    for (int32_t sl = 0; sl < static_cast<int32_t>(m.n_hot); ++sl)
      if (owners[static_cast<size_t>(sl)] < 0) free_slots.push_back(sl);
    std::vector<uint32_t> newest;  // the highest picked cells without a hot row, at most one per free slot
    for (size_t j = picked.size(); j-- > 0 && newest.size() < free_slots.size();)
      if (m.slot_of[s][picked[j]] < 0) newest.push_back(picked[j]);
    std::reverse(newest.begin(), newest.end());
    for (size_t i = 0; i < newest.size(); ++i) {
      owners[static_cast<size_t>(free_slots[i])] = static_cast<int32_t>(newest[i]);
      m.slot_of[s][newest[i]] = free_slots[i];
      c.unmark_zero(newest[i]);  // its hot row is whatever the slot held: zeroed below
    }
    for (uint32_t cell : picked) {
      if (c.known_zero(cell)) continue;
      for (size_t l = 0; l < m.k.size(); ++l)
        for (bool is_k : {true, false}) {
          const Impl::StoredRow r = m.stored(is_k, static_cast<int>(l), s, cell);
          std::memset(r.row, 0, r.bytes);
        }
      c.mark_zero(cell);
    }
  }
  for (size_t k = 0; !m.windowed && k < picked.size();) {
    if (c.known_zero(picked[k])) { ++k; continue; }
    size_t e = k + 1;
    while (e < picked.size() && picked[e] == picked[e - 1] + 1 && !c.known_zero(picked[e])) ++e;
    const uint32_t first = picked[k], count = static_cast<uint32_t>(e - k);
    for (size_t l = 0; l < m.k.size(); ++l) {
      const int kl = static_cast<int>(l);
      std::memset(m.hot(m.k, m.row_k, kl, s, static_cast<int32_t>(first)), 0, count * m.row_k);
      std::memset(m.hot(m.v, m.row_v, kl, s, static_cast<int32_t>(first)), 0, count * m.row_v);
    }
    for (size_t j = k; j < e; ++j) c.mark_zero(picked[j]);
    k = e;
  }
  SeqSet only;
  only.set(static_cast<size_t>(seq));
  c.occupy_run(picked.data(), static_cast<uint32_t>(n), 0, only, /*rows_zero=*/true);
}

}  // namespace agentkv::memory
