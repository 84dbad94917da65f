#include "agentkv/grammar_matcher.h"

#include <algorithm>
#include <numeric>

#include "agentkv/error.h"
#include "agentkv/tokenizer.h"

namespace agentkv::grammar {

// ---------------------------------------------------------------------------------------------
// TokenTrie

TokenTrie::TokenTrie(const Tokenizer& tok, const std::vector<int32_t>& kept_control) {
  const int32_t n = tok.n_vocab();
  pieces_.resize(static_cast<size_t>(n));
  for (int32_t id = 0; id < n; ++id) {
    if (tok.is_eog(id)) {
      eog_.push_back(id);
      continue;
    }
    // Control tokens render no text without `special`: they never match a grammar.
    pieces_[static_cast<size_t>(id)] = tok.token_to_piece(id, /*special=*/false);
  }
  for (int32_t id : kept_control)
    if (id >= 0 && id < n && !tok.is_eog(id)) pieces_[static_cast<size_t>(id)] = tok.token_to_piece(id, /*special=*/true);
  build();
}

TokenTrie::TokenTrie(std::vector<std::string> pieces, std::vector<int32_t> eog) : pieces_(std::move(pieces)), eog_(std::move(eog)) {
  for (int32_t id : eog_) pieces_.at(static_cast<size_t>(id)).clear();
  build();
}

void TokenTrie::build() {
  eog_flag_.assign(pieces_.size(), 0);
  for (int32_t id : eog_) eog_flag_[static_cast<size_t>(id)] = 1;
  std::vector<int32_t> ids;
  for (size_t i = 0; i < pieces_.size(); ++i)
    if (!pieces_[i].empty()) ids.push_back(static_cast<int32_t>(i));
  std::sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) {
    return pieces_[static_cast<size_t>(a)] < pieces_[static_cast<size_t>(b)];
  });
  // Breadth first, so that every node's children are contiguous. Work item: node index, the
  // range of sorted ids below it, its depth.
  struct Item {
    uint32_t node;
    size_t lo, hi, depth;
  };
  nodes_.clear();
  toks_.clear();
  nodes_.push_back({});
  std::vector<Item> queue{{0, 0, ids.size(), 0}};
  for (size_t qi = 0; qi < queue.size(); ++qi) {
    const Item it = queue[qi];
    size_t i = it.lo;
    nodes_[it.node].tok_begin = static_cast<uint32_t>(toks_.size());
    while (i < it.hi && pieces_[static_cast<size_t>(ids[i])].size() == it.depth) toks_.push_back(ids[i++]);
    nodes_[it.node].tok_end = static_cast<uint32_t>(toks_.size());
    nodes_[it.node].child_begin = static_cast<uint32_t>(nodes_.size());
    while (i < it.hi) {
      const auto b = static_cast<uint8_t>(pieces_[static_cast<size_t>(ids[i])][it.depth]);
      size_t j = i;
      while (j < it.hi && static_cast<uint8_t>(pieces_[static_cast<size_t>(ids[j])][it.depth]) == b) ++j;
      Node child;
      child.byte = b;
      nodes_.push_back(child);
      queue.push_back({static_cast<uint32_t>(nodes_.size() - 1), i, j, it.depth + 1});
      i = j;
    }
    nodes_[it.node].child_end = static_cast<uint32_t>(nodes_.size());
  }
}

// ---------------------------------------------------------------------------------------------
// Matcher

size_t Matcher::KeyHash::operator()(const std::vector<uint32_t>& v) const {
  uint64_t h = 1469598103934665603ull;
  for (uint32_t x : v) {
    h ^= x;
    h *= 1099511628211ull;
  }
  return static_cast<size_t>(h ^ (h >> 29));
}

Matcher::Matcher(std::shared_ptr<const Grammar> g) : g_(std::move(g)) {
  std::vector<Stack> stacks;
  const Grammar& gr = *g_;
  // The root's alternatives, expanded.
  for (uint32_t p = gr.rule_start[gr.root];;) {
    Stack s;
    if (gr.elems[p].type != ElemType::End && gr.elems[p].type != ElemType::Alt) s.push_back(p);
    advance_stack(s, stacks);
    while (gr.elems[p].type != ElemType::End && gr.elems[p].type != ElemType::Alt) ++p;
    if (gr.elems[p].type == ElemType::End) break;
    ++p;
  }
  initial_ = intern(std::move(stacks));
}

// Expands rule references at the top of `s` until every resulting stack's top is a character
// element (or the stack is empty: the grammar may end there).
void Matcher::advance_stack(const Stack& start, std::vector<Stack>& out) {
  const Grammar& g = *g_;
  std::vector<Stack> todo{start};
  size_t work = 0;
  while (!todo.empty()) {
    Stack s = std::move(todo.back());
    todo.pop_back();
    if (++work > 16 * kMaxStacksPerState) throw Error("grammar: too ambiguous (stack expansion limit)");
    if (s.empty()) {
      out.push_back(std::move(s));
      continue;
    }
    const uint32_t pos = s.back();
    const Elem& e = g.elems[pos];
    if (e.type != ElemType::RuleRef) {
      out.push_back(std::move(s));
      continue;
    }
    Stack base(s.begin(), s.end() - 1);
    const ElemType after = g.elems[pos + 1].type;
    if (after != ElemType::End && after != ElemType::Alt) base.push_back(pos + 1);
    for (uint32_t p = g.rule_start[e.value];;) {
      Stack ns = base;
      if (g.elems[p].type != ElemType::End && g.elems[p].type != ElemType::Alt) ns.push_back(p);
      todo.push_back(std::move(ns));
      while (g.elems[p].type != ElemType::End && g.elems[p].type != ElemType::Alt) ++p;
      if (g.elems[p].type == ElemType::End) break;
      ++p;
    }
  }
}

int32_t Matcher::intern(std::vector<Stack> stacks) {
  std::sort(stacks.begin(), stacks.end());
  stacks.erase(std::unique(stacks.begin(), stacks.end()), stacks.end());
  if (stacks.empty()) return -1;
  if (stacks.size() > kMaxStacksPerState) throw Error("grammar: too ambiguous (more than 4096 parses at once)");
  std::vector<uint32_t> key;
  for (const Stack& s : stacks) {
    key.insert(key.end(), s.begin(), s.end());
    key.push_back(0xFFFFFFFFu);
  }
  auto it = index_.find(key);
  if (it != index_.end()) return it->second;
  if (states_.size() >= kMaxStates) throw Error("grammar: too many states");
  State st;
  st.ascii.fill(-2);
  for (const Stack& s : stacks) {
    if (s.empty()) {
      st.can_end = true;
    } else if (!st.any_non_ascii && could_match_range(s.back(), 0x80, 0x10FFFF)) {
      st.any_non_ascii = true;
    }
  }
  st.stacks = std::move(stacks);
  const auto id = static_cast<int32_t>(states_.size());
  states_.push_back(std::move(st));
  index_.emplace(std::move(key), id);
  return id;
}

std::pair<bool, uint32_t> Matcher::match_char(uint32_t pos, uint32_t cp) const {
  const auto& el = g_->elems;
  const bool positive = el[pos].type == ElemType::Char || el[pos].type == ElemType::CharAny;
  bool found = false;
  do {
    if (el[pos + 1].type == ElemType::CharRngUpper) {
      found = found || (el[pos].value <= cp && cp <= el[pos + 1].value);
      pos += 2;
    } else if (el[pos].type == ElemType::CharAny) {
      found = true;
      pos += 1;
    } else {
      found = found || el[pos].value == cp;
      pos += 1;
    }
  } while (el[pos].type == ElemType::CharAlt);
  return {found == positive, pos};
}

// Could the class at pos match some code point in [lo, hi]?
bool Matcher::could_match_range(uint32_t pos, uint32_t lo, uint32_t hi) const {
  const auto& el = g_->elems;
  const bool positive = el[pos].type == ElemType::Char || el[pos].type == ElemType::CharAny;
  if (!positive) return true;  // a negated class excludes a few code points, rarely a whole range
  do {
    if (el[pos].type == ElemType::CharAny) return true;
    uint32_t a = el[pos].value, b = a;
    if (el[pos + 1].type == ElemType::CharRngUpper) {
      b = el[pos + 1].value;
      pos += 2;
    } else {
      pos += 1;
    }
    if (a <= hi && b >= lo) return true;
  } while (el[pos].type == ElemType::CharAlt);
  return false;
}

int32_t Matcher::compute_step(int32_t state, uint32_t cp) {
  std::vector<Stack> next;
  // Copy: intern() may grow states_.
  const std::vector<Stack> stacks = states_[static_cast<size_t>(state)].stacks;
  const auto& el = g_->elems;
  for (const Stack& s : stacks) {
    if (s.empty()) continue;
    auto [ok, after] = match_char(s.back(), cp);
    if (!ok) continue;
    Stack ns(s.begin(), s.end() - 1);
    if (el[after].type != ElemType::End && el[after].type != ElemType::Alt) ns.push_back(after);
    advance_stack(ns, next);
  }
  return intern(std::move(next));
}

int32_t Matcher::step_cp(int32_t state, uint32_t cp) {
  if (cp < 128) {
    int32_t& slot = states_[static_cast<size_t>(state)].ascii[cp];
    if (slot != -2) return slot;
    const int32_t n = compute_step(state, cp);
    states_[static_cast<size_t>(state)].ascii[cp] = n;  // states_ may have moved
    return n;
  }
  const uint64_t key = (static_cast<uint64_t>(state) << 21) | cp;
  auto it = non_ascii_.find(key);
  if (it != non_ascii_.end()) return it->second;
  const int32_t n = compute_step(state, cp);
  non_ascii_.emplace(key, n);
  return n;
}

Position Matcher::step_byte(Position p, uint8_t b) {
  if (p.remain == 0) {
    if (b < 0x80) return {step_cp(p.state, b), 0, 0};
    if (!states_[static_cast<size_t>(p.state)].any_non_ascii) return {-1, 0, 0};
    if ((b >> 5) == 0x6) return {p.state, static_cast<uint32_t>(b & 0x1F), 1};
    if ((b >> 4) == 0xE) return {p.state, static_cast<uint32_t>(b & 0x0F), 2};
    if ((b >> 3) == 0x1E) return {p.state, static_cast<uint32_t>(b & 0x07), 3};
    return {-1, 0, 0};
  }
  if ((b & 0xC0) != 0x80) return {-1, 0, 0};
  const uint32_t v = (p.partial << 6) | (b & 0x3F);
  if (p.remain > 1) return {p.state, v, static_cast<uint8_t>(p.remain - 1)};
  return {step_cp(p.state, v), 0, 0};
}

bool Matcher::partial_ok(Position p) const {
  if (p.remain == 0) return true;
  const uint32_t shift = 6u * p.remain;
  const uint32_t lo = p.partial << shift;
  const uint32_t hi = lo | ((1u << shift) - 1u);
  for (const Stack& s : states_[static_cast<size_t>(p.state)].stacks)
    if (!s.empty() && could_match_range(s.back(), lo, hi)) return true;
  return false;
}

Position Matcher::advance(Position p, std::string_view bytes) {
  for (char c : bytes) {
    if (!p.ok()) return p;
    p = step_byte(p, static_cast<uint8_t>(c));
  }
  return p;
}

bool Matcher::allows(Position p, const TokenTrie& trie, int32_t id) {
  if (!p.ok() || id < 0 || id >= trie.n_vocab()) return false;
  if (trie.is_eog(id)) return can_end(p);
  const std::string& piece = trie.piece(id);
  if (piece.empty()) return false;
  const Position q = advance(p, piece);
  return q.ok() && partial_ok(q);
}

Position Matcher::accept(Position p, const TokenTrie& trie, int32_t id) {
  if (trie.is_eog(id)) return p;
  return advance(p, trie.piece(id));
}

const std::vector<uint64_t>& Matcher::mask(Position p, const TokenTrie& trie) {
  const uint64_t key = (static_cast<uint64_t>(p.state) << 26) | (static_cast<uint64_t>(p.remain) << 22) | p.partial;
  auto it = masks_.find(key);
  if (it != masks_.end()) {
    it->second.last_use = ++mask_clock_;
    return it->second.bits;
  }
  if (masks_.size() >= kMaxMasks) {
    // Drop the least recently used half.
    std::vector<std::pair<uint64_t, uint64_t>> uses;
    for (const auto& [k, e] : masks_) uses.emplace_back(e.last_use, k);
    std::sort(uses.begin(), uses.end());
    for (size_t i = 0; i < uses.size() / 2; ++i) masks_.erase(uses[i].second);
  }
  MaskEntry& entry = masks_[key];
  entry.last_use = ++mask_clock_;
  std::vector<uint64_t>& bits = entry.bits;
  bits.assign((static_cast<size_t>(trie.n_vocab()) + 63) / 64, 0);
  auto set = [&bits](int32_t id) { bits[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); };
  if (!p.ok()) return bits;
  if (can_end(p))
    for (int32_t id : trie.eog()) set(id);

  const auto& nodes = trie.nodes();
  const auto& toks = trie.toks();
  struct Frame {
    uint32_t node;
    Position pos;
  };
  std::vector<Frame> stack;
  stack.push_back({0, p});
  while (!stack.empty()) {
    const Frame f = stack.back();
    stack.pop_back();
    const TokenTrie::Node& n = nodes[f.node];
    if (f.node != 0 && n.tok_begin != n.tok_end && partial_ok(f.pos))
      for (uint32_t t = n.tok_begin; t < n.tok_end; ++t) set(toks[t]);
    for (uint32_t c = n.child_begin; c < n.child_end; ++c) {
      const Position q = step_byte(f.pos, nodes[c].byte);
      if (q.ok()) stack.push_back({c, q});
    }
  }
  return bits;
}

}  // namespace agentkv::grammar
