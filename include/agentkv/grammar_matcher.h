// Matching a GBNF grammar (gbnf.h) against generated text, token by token.
//
// The matcher follows llama.cpp's stack semantics (a set of stacks of rule positions, each stack's
// top a character element) but interns every stack set it meets as a numbered state and memoizes
// the transitions between states (per code point; an array for ASCII). Generation revisits the
// same few states again and again (inside a JSON string, after a key, ...), so after warm-up a
// transition is an array lookup.
//
// Token masks: TokenTrie holds every token's text in a byte trie; the tokens a state allows are
// found by walking the trie and pruning a subtree at the first byte the grammar refuses, so a
// state that expects ':' looks at the few tokens that start with ':' or a space, not at 151k.
// Masks are memoized per state. A token may end inside a UTF-8 character: the position then
// carries the partial character into the next token (llama.cpp's partial_utf8).
//
// Single-threaded: a Matcher belongs to the thread that samples (the server's scheduler).
#pragma once
#include <array>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "agentkv/gbnf.h"

namespace agentkv { class Tokenizer; }

namespace agentkv::grammar {

// Every token's text, in a byte trie. Control tokens have no text here and are never allowed by
// a grammar, except end-of-generation tokens, which are allowed where the grammar may end, and
// the `kept_control` ones, which keep their text (a tool format's markers, such as Mistral's
// [TOOL_CALLS], that the output shows: llama.cpp's preserved tokens).
class TokenTrie {
 public:
  explicit TokenTrie(const Tokenizer& tok, const std::vector<int32_t>& kept_control = {});
  // For tests: explicit token texts; eog: the end-of-generation ids.
  TokenTrie(std::vector<std::string> pieces, std::vector<int32_t> eog);

  int32_t n_vocab() const { return static_cast<int32_t>(pieces_.size()); }
  const std::string& piece(int32_t id) const { return pieces_[static_cast<size_t>(id)]; }
  bool is_eog(int32_t id) const { return id >= 0 && id < n_vocab() && eog_flag_[static_cast<size_t>(id)]; }
  const std::vector<int32_t>& eog() const { return eog_; }

  struct Node {
    uint32_t child_begin = 0, child_end = 0;  // children: nodes_[child_begin, child_end)
    uint32_t tok_begin = 0, tok_end = 0;      // tokens whose text ends here: toks_[tok_begin, tok_end)
    uint8_t byte = 0;
  };
  const std::vector<Node>& nodes() const { return nodes_; }
  const std::vector<int32_t>& toks() const { return toks_; }

 private:
  void build();
  std::vector<std::string> pieces_;
  std::vector<int32_t> eog_;
  std::vector<uint8_t> eog_flag_;
  std::vector<Node> nodes_;
  std::vector<int32_t> toks_;
};

// Where a match stands: a state and an unfinished UTF-8 character.
struct Position {
  int32_t state = -1;      // -1: dead (the text so far is refused)
  uint32_t partial = 0;    // bits of the unfinished character
  uint8_t remain = 0;      // continuation bytes it still needs
  bool ok() const { return state >= 0; }
  bool operator==(const Position&) const = default;
};

class Matcher {
 public:
  explicit Matcher(std::shared_ptr<const Grammar> g);
  const Grammar& grammar() const { return *g_; }

  Position start() const { return {initial_, 0, 0}; }
  // Feeds text (UTF-8 bytes, may end inside a character). A refused byte gives a dead position.
  Position advance(Position p, std::string_view bytes);
  // The grammar is complete here (an end-of-generation token may follow).
  bool can_end(Position p) const { return p.ok() && p.remain == 0 && states_[static_cast<size_t>(p.state)].can_end; }
  // Nothing but the end can follow.
  bool must_end(Position p) const { return p.ok() && p.remain == 0 && states_[static_cast<size_t>(p.state)].stacks.size() == 1 && can_end(p); }

  // Is token `id` allowed at p? (Its text is fed; EOG tokens: can_end.)
  bool allows(Position p, const TokenTrie& trie, int32_t id);
  // Token `id` accepted at p: the position after it (EOG: p unchanged).
  Position accept(Position p, const TokenTrie& trie, int32_t id);
  // Bit i set: token i allowed at p. Memoized; the reference stays valid until the next call.
  const std::vector<uint64_t>& mask(Position p, const TokenTrie& trie);

  size_t n_states() const { return states_.size(); }

 private:
  using Stack = std::vector<uint32_t>;
  struct State {
    std::vector<Stack> stacks;
    bool can_end = false;
    bool any_non_ascii = false;  // some stack top can match a code point >= 0x80
    std::array<int32_t, 128> ascii;  // -2: not computed yet, -1: refused
  };
  struct KeyHash {
    size_t operator()(const std::vector<uint32_t>& v) const;
  };

  int32_t intern(std::vector<Stack> stacks);
  void advance_stack(const Stack& s, std::vector<Stack>& out);
  std::pair<bool, uint32_t> match_char(uint32_t pos, uint32_t cp) const;
  bool could_match_range(uint32_t pos, uint32_t lo, uint32_t hi) const;
  int32_t step_cp(int32_t state, uint32_t cp);
  int32_t compute_step(int32_t state, uint32_t cp);
  Position step_byte(Position p, uint8_t b);
  bool partial_ok(Position p) const;

  std::shared_ptr<const Grammar> g_;
  std::vector<State> states_;
  std::unordered_map<std::vector<uint32_t>, int32_t, KeyHash> index_;
  std::unordered_map<uint64_t, int32_t> non_ascii_;  // (state, code point) -> state
  int32_t initial_ = -1;

  struct MaskEntry {
    std::vector<uint64_t> bits;
    uint64_t last_use = 0;
  };
  std::unordered_map<uint64_t, MaskEntry> masks_;
  uint64_t mask_clock_ = 0;
};

// Limits against grammars that explode (ambiguity): stacks per state, states per matcher.
constexpr size_t kMaxStacksPerState = 4096;
constexpr size_t kMaxStates = 1u << 18;
constexpr size_t kMaxMasks = 192;

}  // namespace agentkv::grammar
