#include "memory/prefix_index.h"

#include <algorithm>
#include <array>
#include <limits>
#include <stdexcept>
#include <string>

#include "agentkv/error.h"
#include "agentkv/request_memory.h"
#include "memory/memory_state.h"

namespace agentkv::memory {

PrefixIndex::PrefixIndex(SequenceMemory& mem, PrefixCacheConfig cfg)
    : mem_(mem), cfg_(cfg), hasher_(cfg.model_fingerprint, cfg.page_tokens) {
  if (!mem_.kv()) throw Error("prefix index: the memory has no KV cache");
  if (mem_.kv()->layout().n_streams() != 1) throw Error("prefix index: needs a unified KV cache (one stream)");
  if (cfg_.holder < 0 || cfg_.holder >= static_cast<SeqId>(mem_.kv()->layout().n_seq_max))
    throw Error("prefix index: holder sequence " + std::to_string(cfg_.holder) + " out of range");
  if (cfg_.page_tokens < 1) throw Error("prefix index: page_tokens must be positive");
  pins_.assign(mem_.kv()->layout().n_cells, 0);
  const size_t each = snapshot_bytes_each();
  if (each > 0 && each <= cfg_.snapshot_bytes) {
    const size_t affordable = cfg_.snapshot_bytes / each;
    const size_t pool = mem_.kv()->layout().n_cells;
    const size_t wanted = (2 * pool + affordable - 1) / affordable;  // half the budget spans the pool
    const size_t stepped = (wanted + kSnapshotSpacingStep - 1) / kSnapshotSpacingStep * kSnapshotSpacingStep;
    snapshot_spacing_ = std::clamp(stepped, kMinSnapshotSpacing, kMaxSnapshotSpacing);
  }
  if (keeps_window_rows(mem_))
    window_pages_ = std::make_unique<WindowPages>(*mem_.window(), cfg_.holder, static_cast<uint32_t>(cfg_.page_tokens));
}

size_t PrefixIndex::snapshot_bytes_each() const {
  if (!mem_.needs_snapshots()) return 0;
  size_t bytes = sizeof(Snapshot);
  if (const RecurrentMemory* rec = mem_.rec()) {
    const RecurrentLayout& l = rec->layout();
    const auto layers = static_cast<size_t>(std::count(l.layer_recurrent.begin(), l.layer_recurrent.end(), true));
    bytes += layers * static_cast<size_t>(l.n_conv + l.n_ssm) * sizeof(float);
  }
  if (const WindowKv* w = mem_.window()) {  // a sequence's kept window of the sliding-window layers
    const KvRows& rows = w->kv().rows();
    bytes += static_cast<size_t>(w->keep()) * rows.n_kv_layers() * (rows.row_bytes_k() + rows.row_bytes_v());
  }
  return bytes;
}

bool PrefixIndex::node_valid(int32_t id) const {
  const Node& n = nodes_[static_cast<size_t>(id)];
  const KvCells& c = mem_.kv()->cells(0);
  for (size_t j = 0; j < n.cells.size(); ++j) {
    const uint32_t cell = n.cells[j];
    if (c.is_empty(cell) || c.pos(cell) != static_cast<Pos>(n.first_pos + j) || !c.has_seq(cell, cfg_.holder) ||
        c.shift(cell) != 0)
      return false;
  }
  return true;
}

PrefixIndex::Match PrefixIndex::match(std::span<const TokenId> tokens, uint64_t salt,
                                      std::span<const uint64_t> known) const {
  Match m;
  const auto root = roots_.find(root_seed(salt));
  if (root == roots_.end()) return m;
  int32_t cur = root->second;
  const size_t P = cfg_.page_tokens;
  size_t pos = 0;
  while (pos < tokens.size()) {
    const std::span<const TokenId> rest = tokens.subspan(pos);
    if (rest.size() >= P) {
      const std::span<const TokenId> page = rest.first(P);
      const size_t k = pos / P;
      const auto f = by_hash_.find(k < known.size() ? known[k] : page_hash(nodes_[static_cast<size_t>(cur)].hash, page));
      if (f != by_hash_.end()) {
        const Node& n = nodes_[static_cast<size_t>(f->second)];
        if (n.parent == cur && std::equal(page.begin(), page.end(), n.tokens.begin()) && node_valid(f->second)) {
          m.path.push_back(f->second);
          m.last_used_tokens = P;
          pos += P;
          cur = f->second;
          continue;
        }
      }
    }
    // The child sharing the longest prefix with the rest: a partial page, or a page this prompt
    // leaves early.
    int32_t best = -1;
    size_t best_n = 0;
    for (int32_t child : nodes_[static_cast<size_t>(cur)].children) {
      const size_t n = common_prefix(nodes_[static_cast<size_t>(child)].tokens, rest);
      if (n > best_n && node_valid(child)) best = child, best_n = n;
    }
    if (best >= 0) {
      m.path.push_back(best);
      m.last_used_tokens = best_n;
      pos += best_n;
    }
    break;
  }
  m.n_tokens = pos;
  return m;
}

std::vector<TokenId> PrefixIndex::follow_chain(uint64_t salt, const PrefixCache::ChainReader& read) const {
  std::vector<TokenId> out;
  const auto root = roots_.find(root_seed(salt));
  if (root == roots_.end()) return out;
  int32_t cur = root->second;
  uint64_t state = 0;
  for (;;) {
    int32_t best = -1;
    PrefixCache::ChainStep best_step;
    for (int32_t child : nodes_[static_cast<size_t>(cur)].children) {
      const Node& n = nodes_[static_cast<size_t>(child)];
      if (!node_valid(child)) continue;
      const PrefixCache::ChainStep step = read(state, n.tokens);
      if (step.taken > best_step.taken) best = child, best_step = step;
    }
    if (best < 0) break;
    const Node& n = nodes_[static_cast<size_t>(best)];
    out.insert(out.end(), n.tokens.begin(), n.tokens.begin() + static_cast<std::ptrdiff_t>(best_step.taken));
    if (best_step.taken < n.tokens.size()) break;
    cur = best;
    state = best_step.state;
  }
  return out;
}

bool PrefixIndex::on_path(const Match& m, const Snapshot& s) const {
  // A path holds each page once, in position order: the snapshot's page is at the index its
  // position gives (O(1) per snapshot; long prompts carry many spaced snapshots).
  const size_t k = nodes_[static_cast<size_t>(s.node)].first_pos / cfg_.page_tokens;
  if (k >= m.path.size() || m.path[k] != s.node) return false;
  return k + 1 < m.path.size() || s.n_in_node <= m.last_used_tokens;
}

size_t PrefixIndex::usable(const Match& m, size_t max_tokens, int* snapshot) const {
  *snapshot = -1;
  const size_t n = std::min(m.n_tokens, max_tokens);
  if (!mem_.needs_snapshots()) return n;
  // A hybrid sequence can only start where a recurrent state is known (a sliding-window one where
  // its window is): the latest snapshot on the matched path at or before n.
  size_t best = 0;
  for (size_t i = 0; i < snapshots_.size(); ++i) {
    const Snapshot& s = snapshots_[i];
    if (!on_path(m, s)) continue;
    const size_t covered = nodes_[static_cast<size_t>(s.node)].first_pos + s.n_in_node;
    if (covered <= n && covered > best) best = covered, *snapshot = static_cast<int>(i);
  }
  if (window_pages_) {  // a later point whose window rows the pages hold: no snapshot needed
    const size_t r = window_pages_->resume_point(m.path, n, best);
    if (r > best) best = r, *snapshot = -1;
  }
  return best;
}

std::vector<TokenId> PrefixIndex::continuation(std::span<const TokenId> run, uint64_t salt, size_t k) const {
  const auto root = roots_.find(root_seed(salt));
  if (run.empty() || run.size() > kMaxContinuationRun || k == 0 || root == roots_.end()) return {};
  // Depth first over the chains, the most recently used child first, each page read with the
  // last run.size() - 1 tokens before it (an occurrence across a page boundary counts). The scan
  // stops after kMaxContinuationScan tokens: a draft source must cost little next to a decode
  // step, and the chains used last come first.
  int32_t best_node = -1;
  size_t best_from = 0;  // where the continuation starts in best_node's tokens (may be its end)
  uint64_t best_used = 0;
  struct Visit {
    int32_t id;
    std::array<TokenId, kMaxContinuationRun> before;  // the chain's last tokens before the page
    size_t n_before;
  };
  std::vector<Visit> stack = {{root->second, {}, 0}};
  std::vector<TokenId> text;
  std::vector<int32_t> children;
  const size_t n = run.size();
  size_t scanned = 0;
  while (!stack.empty() && scanned < kMaxContinuationScan) {
    const Visit v = stack.back();
    stack.pop_back();
    const Node& node = nodes_[static_cast<size_t>(v.id)];
    if (!node.alive) continue;
    scanned += node.tokens.size();
    text.assign(v.before.begin(), v.before.begin() + static_cast<std::ptrdiff_t>(v.n_before));
    text.insert(text.end(), node.tokens.begin(), node.tokens.end());
    const size_t lead = v.n_before;
    if (node.last_used >= best_used && text.size() >= n) {
      // The latest occurrence ending in this page, with something after it here or in a child.
      const size_t last_end = node.children.empty() ? text.size() - 1 : text.size();
      for (size_t end = last_end; end >= n && end > lead; --end) {
        if (!std::equal(run.begin(), run.end(), text.begin() + static_cast<std::ptrdiff_t>(end - n))) continue;
        best_node = v.id;
        best_from = end - lead;
        best_used = node.last_used;
        break;
      }
    }
    Visit next{};
    next.n_before = std::min(text.size(), n - 1);
    std::copy(text.end() - static_cast<std::ptrdiff_t>(next.n_before), text.end(), next.before.begin());
    children = node.children;  // least recently used pushed first: the most recent is visited next
    std::sort(children.begin(), children.end(), [this](int32_t x, int32_t y) {
      return nodes_[static_cast<size_t>(x)].last_used < nodes_[static_cast<size_t>(y)].last_used;
    });
    for (int32_t child : children) {
      next.id = child;
      stack.push_back(next);
    }
  }
  std::vector<TokenId> out;
  for (int32_t id = best_node; id >= 0 && out.size() < k;) {
    const Node& node = nodes_[static_cast<size_t>(id)];
    for (size_t i = best_from; i < node.tokens.size() && out.size() < k; ++i) out.push_back(node.tokens[i]);
    best_from = 0;
    int32_t next = -1;  // the most recently used child goes on
    for (int32_t child : node.children)
      if (nodes_[static_cast<size_t>(child)].alive &&
          (next < 0 || nodes_[static_cast<size_t>(child)].last_used > nodes_[static_cast<size_t>(next)].last_used))
        next = child;
    id = next;
  }
  return out;
}

size_t PrefixIndex::lookup(std::span<const TokenId> tokens, uint64_t salt, size_t max_tokens,
                           std::span<const uint64_t> known) const {
  int snapshot = -1;
  return usable(match(tokens, salt, known), max_tokens, &snapshot);
}

size_t PrefixIndex::attach(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, size_t max_tokens) {
  return attach_matched(seq, match(tokens, salt), tokens.size(), max_tokens);
}

size_t PrefixIndex::attach_matched(SeqId seq, const Match& m, size_t n_query, size_t max_tokens) {
  query_tokens_ += n_query;
  int snapshot = -1;
  const size_t n = usable(m, max_tokens, &snapshot);
  if (n == 0) return 0;
  if (seq == cfg_.holder || mem_.kv()->seq_pos_max(seq) >= 0 || (mem_.rec() && mem_.rec()->seq_pos_max(seq) >= 0) ||
      (window_kv_of(mem_) && window_kv_of(mem_)->seq_pos_max(seq) >= 0))
    throw std::logic_error("prefix index: attach needs an empty sequence other than the holder");
  // The recurrent state first: restoring validates before it changes anything.
  if (snapshot >= 0) {
    Snapshot& s = snapshots_[static_cast<size_t>(snapshot)];
    s.state.restore(mem_, seq);
    s.last_used = ++tick_;
  } else if (window_pages_) {
    window_pages_->join(seq, m.path, n);
  }
  join(m, seq, n);
  hit_tokens_ += n;
  return n;
}

void PrefixIndex::join(const Match& m, SeqId seq, size_t n) {
  KvCache& kv = *mem_.kv();
  const KvCells& c = kv.cells(0);
  for (int32_t id : m.path) {
    Node& node = nodes_[static_cast<size_t>(id)];
    touch(id);
    for (size_t j = 0; j < node.cells.size() && node.first_pos + j < n; ++j) {
      const uint32_t cell = node.cells[j];
      SeqSet seqs = c.seqs(cell);
      seqs.set(static_cast<size_t>(seq));
      kv.restore_cell(0, cell, c.pos(cell), seqs, c.shift(cell));
    }
  }
}

size_t PrefixIndex::cached_kv(std::span<const TokenId> tokens, uint64_t salt, size_t max_tokens,
                              std::span<const uint64_t> known) const {
  return std::min(match(tokens, salt, known).n_tokens, max_tokens);
}

void PrefixIndex::attach_kv(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, size_t n) {
  if (n == 0) return;
  const Match m = match(tokens, salt);
  if (n > m.n_tokens) throw std::logic_error("prefix index: attach_kv beyond the cached pages");
  const Pos lowest = mem_.kv()->seq_pos_min(seq);
  if (seq == cfg_.holder || (lowest >= 0 && static_cast<size_t>(lowest) < n))
    throw std::logic_error("prefix index: attach_kv needs a sequence without positions below n");
  query_tokens_ += tokens.size();
  hit_tokens_ += n;
  join(m, seq, n);
}

std::vector<PrefixIndex::PageCells> PrefixIndex::full_pages_along(std::span<const TokenId> tokens, uint64_t salt,
                                                                  std::span<const uint64_t> known) const {
  std::vector<PageCells> out;
  const Match m = match(tokens, salt, known);
  for (int32_t id : m.path) {
    const Node& n = nodes_[static_cast<size_t>(id)];
    if (n.tokens.size() != cfg_.page_tokens || n.first_pos + cfg_.page_tokens > m.n_tokens) break;
    out.push_back({n.hash, n.first_pos, n.cells, window_pages_ ? window_pages_->cells_of(id, n.cells.size()) : std::vector<uint32_t>{}});
  }
  return out;
}

std::optional<PrefixIndex::PageCells> PrefixIndex::tail_along(std::span<const TokenId> tokens, uint64_t salt,
                                                              std::span<const uint64_t> known) const {
  const size_t P = cfg_.page_tokens;
  if (tokens.size() % P == 0) return std::nullopt;
  const Match m = match(tokens, salt, known);
  if (m.n_tokens != tokens.size() || m.path.empty()) return std::nullopt;
  const Node& n = nodes_[static_cast<size_t>(m.path.back())];
  const size_t len = tokens.size() - n.first_pos;  // < P: the last node holds the tail
  const size_t length = tokens.size();
  PageCells out;
  out.hash = hasher_.prefix_hashes(tokens, salt, std::span<const size_t>(&length, 1), known)[0];
  out.first_pos = n.first_pos;
  out.cells.assign(n.cells.begin(), n.cells.begin() + static_cast<std::ptrdiff_t>(len));
  if (window_pages_) out.window_cells = window_pages_->cells_of(m.path.back(), len);
  return out;
}

bool PrefixIndex::adopt_window_rows(std::span<const TokenId> chain, uint64_t salt,
                                    const std::function<void(std::span<const uint32_t>)>& write_rows,
                                    std::span<const uint64_t> known) {
  if (!window_pages_ || chain.empty()) return false;
  const Match m = match(chain, salt, known);
  if (m.n_tokens != chain.size() || m.path.empty()) return false;
  const Node& n = nodes_[static_cast<size_t>(m.path.back())];
  return window_pages_->adopt_rows(m.path.back(), static_cast<Pos>(n.first_pos), chain.size() - n.first_pos, write_rows);
}

bool PrefixIndex::reserve_page(std::span<const TokenId> chain, uint64_t salt, std::vector<uint32_t>& cells,
                               std::span<const uint64_t> known) {
  const size_t P = cfg_.page_tokens;
  if (chain.empty()) return false;
  const size_t first = (chain.size() - 1) / P * P;  // a full page's or a tail's first position
  const size_t len = chain.size() - first;
  const Match m = match(chain, salt, known);
  if (m.n_tokens >= chain.size()) return false;  // already indexed
  if (m.n_tokens < first) return false;  // the parent chain is not all here
  const KvCache& kv = *mem_.kv();
  const KvCells& c = kv.cells(0);
  const size_t n_cells = kv.layout().n_cells;
  if (n_cells - c.used() < len) evict(len - (n_cells - c.used()));
  if (n_cells - c.used() < len) return false;
  // Eviction may have taken the parent chain (it is unused): look again.
  if (match(chain, salt, known).n_tokens < first) return false;
  cells.clear();
  for (uint32_t i = 0; i < n_cells && cells.size() < len; ++i)
    if (c.is_empty(i)) cells.push_back(i);
  return cells.size() == len;
}

bool PrefixIndex::commit_page(std::span<const TokenId> chain, uint64_t salt, const std::vector<uint32_t>& cells,
                              std::span<const uint64_t> known) {
  const size_t P = cfg_.page_tokens;
  const size_t first = (chain.size() - 1) / P * P;
  const size_t len = chain.size() - first;
  // The parent: the root, or the last full page of the chain before this one (valid: checked by
  // reserve_page's match).
  int32_t parent = root_for(salt);
  uint64_t h = nodes_[static_cast<size_t>(parent)].hash;
  for (size_t pos = 0; pos < first; pos += P) {
    h = pos / P < known.size() ? known[pos / P] : page_hash(h, chain.subspan(pos, P));
    const auto f = by_hash_.find(h);
    if (f == by_hash_.end() || !node_valid(f->second)) return false;
    parent = f->second;
  }
  const uint64_t page = len < P ? 0 : first / P < known.size() ? known[first / P] : page_hash(h, chain.subspan(first, P));  // a tail is found by its tokens
  if (len == P)
    if (const auto old = by_hash_.find(page); old != by_hash_.end()) remove_subtree(old->second);  // stale
  SeqSet held;
  held.set(static_cast<size_t>(cfg_.holder));
  KvCache& kv = *mem_.kv();
  const int32_t id = new_node(parent, static_cast<uint32_t>(first));
  Node& n = nodes_[static_cast<size_t>(id)];
  for (size_t j = 0; j < len; ++j) {
    kv.restore_cell(0, cells[j], static_cast<Pos>(first + j), held, 0);
    pins_[cells[j]] = 1;
    n.tokens.push_back(chain[first + j]);
    n.cells.push_back(cells[j]);
  }
  if (len < P) return true;
  n.hash = page;
  by_hash_[page] = id;
  return true;
}

std::vector<uint32_t> PrefixIndex::cells_of(SeqId seq, Pos p0, Pos p1) const {
  std::vector<uint32_t> out(static_cast<size_t>(p1 - p0), UINT32_MAX);
  const KvCells& c = mem_.kv()->cells(0);
  // By the cells the table noted per position, when each position has at most one cell of seq
  // (then the noted one, checked, is it); otherwise a scan of the used cells, lowest cell first.
  bool found_all = c.seq_positions(seq).max_count(p0, p1) <= 1;
  for (Pos p = p0; p < p1 && found_all; ++p) {
    const uint32_t cell = c.cell_at(seq, p);
    if (cell == KvCells::kUnnoted) found_all = false;
    else if (cell != KvCells::kNoCell && c.shift(cell) == 0) out[static_cast<size_t>(p - p0)] = cell;
  }
  if (found_all) return out;
  std::fill(out.begin(), out.end(), UINT32_MAX);
  for (uint32_t i = 0; i < c.used_max_p1(); ++i) {
    if (!c.has_seq(i, seq) || c.pos(i) < p0 || c.pos(i) >= p1 || c.shift(i) != 0) continue;
    uint32_t& slot = out[static_cast<size_t>(c.pos(i) - p0)];
    if (slot == UINT32_MAX) slot = i;
  }
  return out;
}

int32_t PrefixIndex::new_node(int32_t parent, uint32_t first_pos) {
  int32_t id;
  if (!free_nodes_.empty()) {
    id = free_nodes_.back();
    free_nodes_.pop_back();
  } else {
    id = static_cast<int32_t>(nodes_.size());
    nodes_.emplace_back();
  }
  Node& n = nodes_[static_cast<size_t>(id)];
  n = Node{};
  n.alive = true;
  n.parent = parent;
  n.first_pos = first_pos;
  n.last_used = ++tick_;
  if (parent >= 0) {
    Node& p = nodes_[static_cast<size_t>(parent)];
    if (p.parent >= 0 && p.children.empty()) lru_leaves_.erase({p.last_used, parent});
    p.children.push_back(id);
    lru_leaves_.emplace(n.last_used, id);
  }
  return id;
}

void PrefixIndex::touch(int32_t id) {
  Node& n = nodes_[static_cast<size_t>(id)];
  const bool leaf = n.parent >= 0 && n.children.empty();
  if (leaf) lru_leaves_.erase({n.last_used, id});
  n.last_used = ++tick_;
  if (leaf) lru_leaves_.emplace(n.last_used, id);
}

int32_t PrefixIndex::root_for(uint64_t salt) {
  const uint64_t seed = root_seed(salt);
  const auto it = roots_.find(seed);
  if (it != roots_.end()) return it->second;
  const int32_t id = new_node(-1, 0);
  nodes_[static_cast<size_t>(id)].hash = seed;
  roots_.emplace(seed, id);
  return id;
}

void PrefixIndex::pin(uint32_t cell) {
  if (pins_[cell]++ > 0) return;
  KvCache& kv = *mem_.kv();
  const KvCells& c = kv.cells(0);
  SeqSet seqs = c.seqs(cell);
  seqs.set(static_cast<size_t>(cfg_.holder));
  kv.restore_cell(0, cell, c.pos(cell), seqs, c.shift(cell));
}

void PrefixIndex::unpin(uint32_t cell) {
  if (--pins_[cell] > 0) return;
  KvCache& kv = *mem_.kv();
  const KvCells& c = kv.cells(0);
  if (c.is_empty(cell) || !c.has_seq(cell, cfg_.holder)) return;  // freed behind the index's back
  SeqSet seqs = c.seqs(cell);
  seqs.reset(static_cast<size_t>(cfg_.holder));
  kv.restore_cell(0, cell, seqs.none() ? -1 : c.pos(cell), seqs, c.shift(cell));
}

bool PrefixIndex::held_by_index_only(uint32_t cell) const {
  const KvCells& c = mem_.kv()->cells(0);
  SeqSet holder;
  holder.set(static_cast<size_t>(cfg_.holder));
  return !c.is_empty(cell) && c.seqs(cell) == holder;
}

bool PrefixIndex::only_holder_uses(const Node& n) const {
  const KvCells& c = mem_.kv()->cells(0);
  return std::all_of(n.cells.begin(), n.cells.end(),
                     [&](uint32_t cell) { return c.is_empty(cell) || held_by_index_only(cell); });
}

bool PrefixIndex::holds_unused_cell(const Node& n) const {
  return std::any_of(n.cells.begin(), n.cells.end(), [&](uint32_t cell) { return held_by_index_only(cell); });
}

void PrefixIndex::take_cells_if_unused(int32_t id, std::span<const uint32_t> seq_cells) {
  Node& n = nodes_[static_cast<size_t>(id)];
  const std::span<const uint32_t> mine = seq_cells.first(n.cells.size());
  if (std::equal(n.cells.begin(), n.cells.end(), mine.begin()) || !only_holder_uses(n)) return;
  // A sequence computed this page again (a hybrid prompt with no snapshot inside its cached
  // prefix starts over): the page names the sequence's cells and the old copy is freed. Kept, it
  // would be an ancestor of the sequence's next pages that no leaf-first eviction can reach.
  for (size_t j = 0; j < n.cells.size(); ++j) {
    pin(mine[j]);
    unpin(n.cells[j]);
    n.cells[j] = mine[j];
  }
}

void PrefixIndex::publish(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, bool with_tail,
                          std::vector<uint64_t>* hashes, size_t published) {
  if (tokens.empty() || seq == cfg_.holder) return;
  const size_t P = cfg_.page_tokens;
  std::vector<uint64_t> own;
  if (!hashes) hashes = &own;
  hasher_.extend(tokens, salt, *hashes);  // every full page's hash (more may be carried: a prompt's)
  // Resume after the pages published before, at the last full one of them when it is still
  // indexed (the chain up to it then is too: a page goes only with what hangs below it).
  int32_t cur = root_for(salt);
  size_t start = 0;
  if (const size_t k = std::min(published, tokens.size()) / P; k > 0) {
    const auto f = by_hash_.find((*hashes)[k - 1]);
    if (f != by_hash_.end() && node_valid(f->second)) cur = f->second, start = k * P;
  }
  const std::vector<uint32_t> cells = cells_of(seq, static_cast<Pos>(start), static_cast<Pos>(tokens.size()));
  // Only the part the sequence really holds, in order, can be indexed.
  const size_t held = start + static_cast<size_t>(std::find(cells.begin(), cells.end(), UINT32_MAX) - cells.begin());
  if (held < tokens.size()) tokens = tokens.first(held), with_tail = true;
  for (size_t pos = start; pos < tokens.size(); pos += P) {
    const size_t len = std::min(P, tokens.size() - pos);
    if (len < P && !with_tail) break;
    const std::span<const TokenId> t = tokens.subspan(pos, len);
    const std::span<const uint32_t> c = std::span<const uint32_t>(cells).subspan(pos - start, len);
    const uint64_t h = len == P ? (*hashes)[pos / P] : 0;
    if (len == P) {
      const auto f = by_hash_.find(h);
      if (f != by_hash_.end()) {
        Node& n = nodes_[static_cast<size_t>(f->second)];
        if (n.parent == cur && std::equal(t.begin(), t.end(), n.tokens.begin())) {
          if (node_valid(f->second)) {
            take_cells_if_unused(f->second, c);
            touch(f->second);
            keep_window_rows(f->second, seq, len);
            cur = f->second;
            continue;
          }
          remove_subtree(f->second);  // its cells were freed or moved: index the new ones
        }
      }
    }
    // A child already holding these tokens (a partial tail only: a full one is found by hash).
    bool covered = false;
    int32_t extend = -1;
    for (int32_t child : nodes_[static_cast<size_t>(cur)].children) {
      Node& n = nodes_[static_cast<size_t>(child)];
      const size_t k = common_prefix(n.tokens, t);
      if (len < P && k == len && node_valid(child)) {
        if (n.tokens.size() == len) take_cells_if_unused(child, c);
        touch(child);
        keep_window_rows(child, seq, len);
        covered = true;
        break;
      }
      // A partial page of this very sequence that it has since continued: grow it.
      if (n.tokens.size() < P && k == n.tokens.size() && std::equal(n.cells.begin(), n.cells.end(), c.begin()))
        extend = child;
    }
    if (covered) break;
    int32_t id = extend;
    if (id < 0) id = new_node(cur, static_cast<uint32_t>(pos));
    Node& n = nodes_[static_cast<size_t>(id)];
    for (size_t j = n.tokens.size(); j < len; ++j) {
      n.tokens.push_back(t[j]);
      n.cells.push_back(c[j]);
      pin(c[j]);
    }
    touch(id);
    keep_window_rows(id, seq, len);
    if (len < P) break;
    n.hash = h;
    by_hash_[h] = id;
    cur = id;
  }
}

bool PrefixIndex::snapshot(SeqId seq, std::span<const TokenId> tokens, uint64_t salt, std::vector<uint64_t>* hashes,
                           size_t published) {
  if (!mem_.needs_snapshots() || tokens.empty() || mem_.seq_pos_max(seq) != static_cast<Pos>(tokens.size()) - 1) return false;
  std::vector<uint64_t> own;
  if (!hashes) hashes = &own;
  publish(seq, tokens, salt, /*with_tail=*/true, hashes, published);
  return adopt_snapshot(tokens, salt, MemorySnapshot::capture(mem_, seq, kStatePartialOnly), *hashes);
}

bool PrefixIndex::adopt_snapshot(std::span<const TokenId> tokens, uint64_t salt, MemorySnapshot state,
                                 std::span<const uint64_t> known) {
  if (!mem_.needs_snapshots() || tokens.empty() || state.empty()) return false;
  const Match m = match(tokens, salt, known);
  if (m.n_tokens != tokens.size() || m.path.empty()) return false;
  Snapshot s;
  s.node = m.path.back();
  s.n_in_node = static_cast<uint32_t>(m.last_used_tokens);
  s.state = std::move(state);
  s.bytes = s.state.row_bytes() + sizeof(Snapshot);
  if (s.bytes > cfg_.snapshot_bytes) return false;
  s.last_used = ++tick_;
  for (size_t i = 0; i < snapshots_.size(); ++i)
    if (snapshots_[i].node == s.node && snapshots_[i].n_in_node == s.n_in_node) {
      drop_snapshot(i);
      break;
    }
  snapshot_bytes_ += s.bytes;
  ++nodes_[static_cast<size_t>(s.node)].n_snapshots;
  snapshots_.push_back(std::move(s));
  evict_snapshots_to_budget();
  return true;
}

std::vector<std::pair<size_t, const MemorySnapshot*>> PrefixIndex::snapshots_along(std::span<const TokenId> tokens,
                                                                                    uint64_t salt,
                                                                                    std::span<const uint64_t> known) const {
  std::vector<std::pair<size_t, const MemorySnapshot*>> out;
  const Match m = match(tokens, salt, known);
  for (const Snapshot& s : snapshots_) {
    if (!on_path(m, s)) continue;
    out.emplace_back(nodes_[static_cast<size_t>(s.node)].first_pos + s.n_in_node, &s.state);
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  return out;
}

void PrefixIndex::keep_window_rows(int32_t id, SeqId seq, size_t n) {
  if (window_pages_) window_pages_->adopt(id, seq, static_cast<Pos>(nodes_[static_cast<size_t>(id)].first_pos), n);
}

void PrefixIndex::evict_snapshots_to_budget() {
  while (snapshot_bytes_ > cfg_.snapshot_bytes && !snapshots_.empty()) {
    size_t lru = 0;
    for (size_t i = 1; i < snapshots_.size(); ++i)
      if (snapshots_[i].last_used < snapshots_[lru].last_used) lru = i;
    drop_snapshot(lru);
  }
}

void PrefixIndex::drop_snapshot(size_t i) {
  snapshot_bytes_ -= snapshots_[i].bytes;
  --nodes_[static_cast<size_t>(snapshots_[i].node)].n_snapshots;
  snapshots_.erase(snapshots_.begin() + static_cast<std::ptrdiff_t>(i));
}

void PrefixIndex::remove_node(int32_t id) {
  Node& n = nodes_[static_cast<size_t>(id)];
  for (uint32_t cell : n.cells) unpin(cell);
  if (window_pages_) window_pages_->release(id);
  if (n.parent >= 0) {
    lru_leaves_.erase({n.last_used, id});
    Node& p = nodes_[static_cast<size_t>(n.parent)];
    std::erase(p.children, id);
    if (p.parent >= 0 && p.children.empty()) lru_leaves_.emplace(p.last_used, n.parent);
  }
  if (n.tokens.size() == cfg_.page_tokens) {
    const auto f = by_hash_.find(n.hash);
    if (f != by_hash_.end() && f->second == id) by_hash_.erase(f);
  }
  if (n.parent < 0) roots_.erase(n.hash);
  for (size_t i = snapshots_.size(); i-- > 0 && n.n_snapshots > 0;)
    if (snapshots_[i].node == id) drop_snapshot(i);
  n = Node{};
  free_nodes_.push_back(id);
}

int32_t PrefixIndex::forget_page(int32_t id) {
  const int32_t parent = nodes_[static_cast<size_t>(id)].parent;
  remove_subtree(id);
  if (nodes_[static_cast<size_t>(parent)].parent < 0 && nodes_[static_cast<size_t>(parent)].children.empty())
    remove_node(parent);
  return parent;
}

void PrefixIndex::remove_subtree(int32_t id) {
  while (!nodes_[static_cast<size_t>(id)].children.empty()) remove_subtree(nodes_[static_cast<size_t>(id)].children.back());
  remove_node(id);
}

int32_t PrefixIndex::lru_unused_leaf() const {
  // Leaves in least-recently-used order; the ones skipped are in use, a few per running sequence
  // (the end of its chain), so a victim costs O(log n) plus those.
  for (const auto& [last_used, id] : lru_leaves_)
    if (only_holder_uses(nodes_[static_cast<size_t>(id)])) return id;
  return -1;
}

int32_t PrefixIndex::lru_page_where(bool (PrefixIndex::*eligible)(const Node&) const) const {
  int32_t lru = -1;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.alive || n.parent < 0) continue;
    if (lru >= 0 && n.last_used >= nodes_[static_cast<size_t>(lru)].last_used) continue;
    if ((this->*eligible)(n)) lru = static_cast<int32_t>(i);
  }
  return lru;
}

size_t PrefixIndex::evict(size_t n_cells) {
  const KvCache& kv = *mem_.kv();
  const KvCells& c = kv.cells(0);
  const size_t used_before = c.used();
  while (used_before - c.used() < n_cells) {
    // The least recently used leaf page whose cells nobody but the index uses; a root left
    // without pages goes too. When no leaf is unused, the least recently used unused page goes
    // with everything below it: a page no sequence uses, above pages a sequence computed on its
    // own (its copy of this page is not the cached one), must not pin its cells for ever —
    // that sequence keeps its cells and indexes them again when it next publishes.
    // Last, a page a sequence uses only in part (it attached the page's first tokens): the page
    // is forgotten, the sequence keeps its cells, and the rest are freed. The two fallbacks scan
    // every page; they run only when every leaf is in use (the index is then mostly the running
    // sequences' own pages).
    int32_t victim = lru_unused_leaf();
    if (victim < 0) victim = lru_page_where(&PrefixIndex::only_holder_uses);
    if (victim < 0) victim = lru_page_where(&PrefixIndex::holds_unused_cell);
    if (victim < 0) break;
    forget_page(victim);
  }
  return used_before - c.used();
}

size_t PrefixIndex::forget_own(SeqId seq) {
  const KvCells& c = mem_.kv()->cells(0);
  SeqSet own;
  own.set(static_cast<size_t>(cfg_.holder));
  own.set(static_cast<size_t>(seq));
  auto mine = [&](const Node& n) {
    return std::all_of(n.cells.begin(), n.cells.end(), [&](uint32_t cell) {
      return !c.is_empty(cell) && c.has_seq(cell, seq) && (c.seqs(cell) & ~own).none();
    });
  };
  // From each leaf up its chain while the pages are seq's alone: O(leaves + pages forgotten).
  std::vector<int32_t> leaves;
  leaves.reserve(lru_leaves_.size());
  for (const auto& entry : lru_leaves_) leaves.push_back(entry.second);
  size_t forgotten = 0;
  for (int32_t id : leaves) {
    // A page is taken once it is a leaf of seq's alone; its parent may then be one. A root is no page.
    for (const Node* n = &nodes_[static_cast<size_t>(id)]; n->alive && n->parent >= 0 && n->children.empty() && mine(*n);
         n = &nodes_[static_cast<size_t>(id)]) {
      id = forget_page(id);
      ++forgotten;
    }
  }
  return forgotten;
}

size_t PrefixIndex::unshare(SeqId seq, Pos p0, Pos p1) {
  if (seq == cfg_.holder) throw std::logic_error("prefix index: the holder's cells cannot be moved");
  if (window_pages_) window_pages_->unshare(seq, p0, p1);
  KvCache& kv = *mem_.kv();
  const KvCells& c = kv.cells(0);
  if (p0 < 0) p0 = 0;
  if (p1 < 0) p1 = std::numeric_limits<Pos>::max();
  std::vector<uint32_t> shared;
  for (uint32_t i = 0; i < c.used_max_p1(); ++i)
    if (pins_[i] > 0 && !c.is_empty(i) && c.has_seq(i, seq) && c.pos(i) >= p0 && c.pos(i) < p1) shared.push_back(i);
  if (shared.empty()) return 0;
  const size_t n_cells = kv.layout().n_cells;
  if (n_cells - c.used() < shared.size()) evict(shared.size() - (n_cells - c.used()));
  SeqSet held;
  held.set(static_cast<size_t>(cfg_.holder));
  size_t copied = 0;
  uint32_t empty = 0;
  for (uint32_t cell : shared) {
    while (empty < n_cells && !c.is_empty(empty)) ++empty;
    if (empty == n_cells) {
      // No room for a copy: the cache gives up the pages naming this cell (and their
      // continuations), which lets the sequences move the cell itself.
      for (size_t id = 0; id < nodes_.size() && pins_[cell] > 0; ++id)
        if (nodes_[id].alive && std::count(nodes_[id].cells.begin(), nodes_[id].cells.end(), cell) > 0)
          remove_subtree(static_cast<int32_t>(id));
      continue;
    }
    SeqSet moving = c.seqs(cell);
    moving.reset(static_cast<size_t>(cfg_.holder));
    const Pos pos = c.pos(cell), shift = c.shift(cell);
    kv.rows().copy_cell_rows(0, cell, empty);
    kv.restore_cell(0, empty, pos, moving, shift);
    kv.restore_cell(0, cell, pos, held, shift);
    ++copied;
  }
  return copied;
}

void PrefixIndex::clear() {
  if (window_pages_) window_pages_->clear();
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].alive)
      for (uint32_t cell : nodes_[i].cells) unpin(cell);
  nodes_.clear();
  free_nodes_.clear();
  roots_.clear();
  by_hash_.clear();
  lru_leaves_.clear();
  snapshots_.clear();
  snapshot_bytes_ = 0;
  std::fill(pins_.begin(), pins_.end(), 0);
}

PrefixCacheStats PrefixIndex::stats() const {
  PrefixCacheStats s;
  const KvCells& c = mem_.kv()->cells(0);
  s.pages_free = (mem_.kv()->layout().n_cells - c.used()) / cfg_.page_tokens;
  for (const Node& n : nodes_) {
    if (!n.alive || n.parent < 0) continue;
    ++s.pages;
    if (n.tokens.size() == cfg_.page_tokens) ++s.full_pages;
    const bool in_use = std::any_of(n.cells.begin(), n.cells.end(), [&](uint32_t cell) {
      if (c.is_empty(cell)) return false;
      SeqSet others = c.seqs(cell);
      others.reset(static_cast<size_t>(cfg_.holder));
      return others.any();
    });
    if (in_use) ++s.pages_in_use;
    const bool shared = std::any_of(n.cells.begin(), n.cells.end(), [&](uint32_t cell) {
      if (c.is_empty(cell)) return false;
      SeqSet others = c.seqs(cell);
      others.reset(static_cast<size_t>(cfg_.holder));
      return others.count() >= 2;
    });
    if (shared) ++s.pages_shared;
  }
  for (uint16_t p : pins_) s.cached_cells += p > 0 ? 1 : 0;
  s.window_cells = window_pages_ ? window_pages_->cells_held() : 0;
  s.snapshots = snapshots_.size();
  s.snapshot_bytes = snapshot_bytes_;
  s.query_tokens = query_tokens_;
  s.hit_tokens = hit_tokens_;
  return s;
}

SequencePages PrefixIndex::pages_of(SeqId seq) const {
  SequencePages out;
  const KvCells& c = mem_.kv()->cells(0);
  for (const Node& n : nodes_) {
    if (!n.alive || n.parent < 0) continue;
    bool used = false, shared = false;
    for (uint32_t cell : n.cells) {
      if (c.is_empty(cell) || !c.has_seq(cell, seq)) continue;
      used = true;
      SeqSet others = c.seqs(cell);
      others.reset(static_cast<size_t>(cfg_.holder));
      others.reset(static_cast<size_t>(seq));
      shared = shared || others.any();
    }
    out.pages += used ? 1 : 0;
    out.shared += shared ? 1 : 0;
  }
  return out;
}

void PrefixIndex::check() const {
  auto fail = [](const std::string& what) { throw std::logic_error("prefix index: " + what); };
  const KvCells& c = mem_.kv()->cells(0);
  std::vector<uint32_t> counted(pins_.size(), 0);
  size_t full = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.alive) continue;
    const auto id = static_cast<int32_t>(i);
    if (n.parent < 0) {
      const auto r = roots_.find(n.hash);
      if (r == roots_.end() || r->second != id) fail("root " + std::to_string(i) + " not in the root table");
      if (!n.tokens.empty()) fail("root with tokens");
    } else {
      const Node& p = nodes_[static_cast<size_t>(n.parent)];
      if (!p.alive || std::count(p.children.begin(), p.children.end(), id) != 1) fail("parent link of " + std::to_string(i));
      if (p.parent >= 0 && p.tokens.size() != cfg_.page_tokens) fail("a partial page has children");
      const uint32_t expect_pos = p.parent < 0 ? 0 : p.first_pos + cfg_.page_tokens;
      if (n.first_pos != expect_pos) fail("page " + std::to_string(i) + " at the wrong position");
      if (n.tokens.empty() || n.tokens.size() > cfg_.page_tokens || n.cells.size() != n.tokens.size())
        fail("page " + std::to_string(i) + " size");
      if (n.tokens.size() == cfg_.page_tokens) {
        ++full;
        if (n.hash != page_hash(p.hash, n.tokens)) fail("page " + std::to_string(i) + " hash");
        const auto f = by_hash_.find(n.hash);
        if (f == by_hash_.end() || f->second != id) fail("full page " + std::to_string(i) + " not in the hash table");
      }
      if (!node_valid(id)) fail("page " + std::to_string(i) + " cells do not hold its positions");
    }
    for (uint32_t cell : n.cells) ++counted[cell];
  }
  if (full != by_hash_.size()) fail("hash table names pages that are gone");
  size_t leaves = 0;
  for (size_t i = 0; i < nodes_.size(); ++i) {
    const Node& n = nodes_[i];
    if (!n.alive || n.parent < 0 || !n.children.empty()) continue;
    ++leaves;
    if (!lru_leaves_.count({n.last_used, static_cast<int32_t>(i)})) fail("leaf " + std::to_string(i) + " not in the LRU set");
  }
  if (leaves != lru_leaves_.size()) fail("the LRU set names pages that are no leaves");
  for (size_t cell = 0; cell < pins_.size(); ++cell) {
    if (counted[cell] != pins_[cell]) fail("cell " + std::to_string(cell) + " reference count");
    const bool held = !c.is_empty(static_cast<uint32_t>(cell)) && c.has_seq(static_cast<uint32_t>(cell), cfg_.holder);
    if (held != (pins_[cell] > 0)) fail("cell " + std::to_string(cell) + " holder membership");
  }
  size_t bytes = 0;
  for (const Snapshot& s : snapshots_) {
    bytes += s.bytes;
    if (s.node < 0 || !nodes_[static_cast<size_t>(s.node)].alive) fail("snapshot of a removed page");
    if (s.n_in_node < 1 || s.n_in_node > nodes_[static_cast<size_t>(s.node)].tokens.size()) fail("snapshot offset");
    // A window part keeps up to its window: a young sequence's snapshot holds fewer rows.
    const size_t each = snapshot_bytes_each();
    if (mem_.window() ? s.bytes > each : s.bytes != each) fail("a snapshot's bytes differ from snapshot_bytes_each()");
  }
  if (bytes != snapshot_bytes_) fail("snapshot bytes");
  std::vector<uint32_t> held(nodes_.size(), 0);
  for (const Snapshot& sn : snapshots_) ++held[static_cast<size_t>(sn.node)];
  for (size_t i = 0; i < nodes_.size(); ++i)
    if (nodes_[i].alive && held[i] != nodes_[i].n_snapshots) fail("page " + std::to_string(i) + " snapshot count");
  if (snapshot_bytes_ > cfg_.snapshot_bytes) fail("snapshots over their budget");
  if (window_pages_)
    window_pages_->check([this](int32_t id) { return id >= 0 && static_cast<size_t>(id) < nodes_.size() && nodes_[static_cast<size_t>(id)].alive; });
}

PrefixIndex& enable_prefix_index(SequenceMemory& mem, const PrefixCacheConfig& cfg) {
  if (mem.cell_keeper()) throw Error("sequence memory: the prefix index is already enabled");
  auto index = std::make_unique<PrefixIndex>(mem, cfg);
  PrefixIndex& out = *index;
  mem.set_cell_keeper(std::move(index));
  if (mem.kv()) mem.kv()->window().set_background(cfg.holder);  // cached pages leave a --kv-hot window first
  return out;
}

PrefixIndex* prefix_index_of(SequenceMemory& mem) { return dynamic_cast<PrefixIndex*>(mem.cell_keeper()); }

const PrefixIndex* prefix_index_of(const SequenceMemory& mem) {
  return dynamic_cast<const PrefixIndex*>(mem.cell_keeper());
}

}  // namespace agentkv::memory
