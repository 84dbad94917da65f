#include "agentkv/gbnf.h"

#include <map>
#include <unordered_map>

#include "agentkv/error.h"

namespace agentkv::grammar {

namespace {

bool is_word_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

class Parser {
 public:
  explicit Parser(std::string_view src) : src_(src) {}

  Grammar run() {
    size_t pos = skip_space(0, true);
    while (pos < src_.size()) pos = parse_rule(pos);
    // Every referenced rule must be defined.
    for (size_t r = 0; r < rules_.size(); ++r) {
      for (const Elem& e : rules_[r]) {
        if (e.type == ElemType::RuleRef && (e.value >= rules_.size() || rules_[e.value].empty()))
          fail_plain("undefined rule '" + names_[e.value] + "'");
      }
    }
    auto root = symbols_.find("root");
    if (root == symbols_.end() || rules_[root->second].empty()) fail_plain("the grammar has no 'root' rule");
    Grammar g;
    g.source = std::string(src_);
    g.root = root->second;
    g.rule_names = names_;
    size_t total = 0;
    for (const auto& r : rules_) total += r.size();
    if (total > kMaxGrammarElems) fail_plain("the grammar is too large");
    g.elems.reserve(total);
    for (const auto& r : rules_) {
      g.rule_start.push_back(static_cast<uint32_t>(g.elems.size()));
      g.elems.insert(g.elems.end(), r.begin(), r.end());
    }
    check_left_recursion(g);
    return g;
  }

 private:
  [[noreturn]] void fail(size_t pos, const std::string& what) const {
    size_t line = 1, col = 1;
    for (size_t i = 0; i < pos && i < src_.size(); ++i) {
      if (src_[i] == '\n') {
        ++line;
        col = 1;
      } else {
        ++col;
      }
    }
    throw Error("grammar: " + what + " at line " + std::to_string(line) + ", column " + std::to_string(col));
  }
  [[noreturn]] void fail_plain(const std::string& what) const { throw Error("grammar: " + what); }

  uint32_t symbol(std::string_view name) {
    auto it = symbols_.find(std::string(name));
    if (it != symbols_.end()) return it->second;
    const auto id = static_cast<uint32_t>(names_.size());
    symbols_.emplace(std::string(name), id);
    names_.emplace_back(name);
    rules_.emplace_back();
    return id;
  }
  uint32_t generate_symbol(const std::string& base) {
    const auto id = static_cast<uint32_t>(names_.size());
    std::string name = base + "_" + std::to_string(id);
    symbols_.emplace(name, id);
    names_.push_back(name);
    rules_.emplace_back();
    return id;
  }
  void add_rule(uint32_t id, std::vector<Elem> elems) {
    elem_count_ += elems.size();
    if (elem_count_ > kMaxGrammarElems) fail_plain("the grammar is too large (repetitions expand too far)");
    rules_[id] = std::move(elems);
  }

  size_t skip_space(size_t pos, bool newline_ok) const {
    while (pos < src_.size()) {
      const char c = src_[pos];
      if (c == ' ' || c == '\t' || c == '#' || (newline_ok && (c == '\r' || c == '\n'))) {
        if (c == '#') {
          while (pos < src_.size() && src_[pos] != '\r' && src_[pos] != '\n') ++pos;
        } else {
          ++pos;
        }
      } else {
        break;
      }
    }
    return pos;
  }

  size_t parse_name(size_t pos) const {
    size_t end = pos;
    while (end < src_.size() && is_word_char(src_[end])) ++end;
    if (end == pos) fail(pos, "expecting a rule name");
    return end;
  }

  size_t parse_int(size_t pos, int& out) const {
    size_t end = pos;
    long long v = 0;
    while (end < src_.size() && src_[end] >= '0' && src_[end] <= '9') {
      v = v * 10 + (src_[end] - '0');
      if (v > kMaxRepetition) fail(pos, "repetition count above " + std::to_string(kMaxRepetition));
      ++end;
    }
    if (end == pos) fail(pos, "expecting an integer");
    out = static_cast<int>(v);
    return end;
  }

  // One UTF-8 code point (not an escape) at pos.
  std::pair<uint32_t, size_t> decode_utf8(size_t pos) const {
    const auto c = static_cast<unsigned char>(src_[pos]);
    int n = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (n == 0 || pos + n > src_.size()) fail(pos, "invalid UTF-8");
    uint32_t cp = n == 1 ? c : n == 2 ? (c & 0x1F) : n == 3 ? (c & 0x0F) : (c & 0x07);
    for (int i = 1; i < n; ++i) {
      const auto d = static_cast<unsigned char>(src_[pos + i]);
      if ((d & 0xC0) != 0x80) fail(pos, "invalid UTF-8");
      cp = (cp << 6) | (d & 0x3F);
    }
    return {cp, pos + n};
  }

  std::pair<uint32_t, size_t> parse_hex(size_t pos, int digits) const {
    uint32_t v = 0;
    for (int i = 0; i < digits; ++i) {
      if (pos + i >= src_.size()) fail(pos, "expecting " + std::to_string(digits) + " hex digits");
      const char c = src_[pos + i];
      int d = (c >= '0' && c <= '9') ? c - '0' : (c >= 'a' && c <= 'f') ? c - 'a' + 10 : (c >= 'A' && c <= 'F') ? c - 'A' + 10 : -1;
      if (d < 0) fail(pos + i, "expecting " + std::to_string(digits) + " hex digits");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    if (v > 0x10FFFF) fail(pos, "code point out of range");
    return {v, pos + digits};
  }

  // A character of a literal or class: an escape or one UTF-8 code point.
  std::pair<uint32_t, size_t> parse_char(size_t pos) const {
    if (pos >= src_.size()) fail(pos, "unexpected end of input");
    if (src_[pos] == '\\') {
      if (pos + 1 >= src_.size()) fail(pos, "unexpected end of input");
      switch (src_[pos + 1]) {
        case 'x': return parse_hex(pos + 2, 2);
        case 'u': return parse_hex(pos + 2, 4);
        case 'U': return parse_hex(pos + 2, 8);
        case 't': return {'\t', pos + 2};
        case 'r': return {'\r', pos + 2};
        case 'n': return {'\n', pos + 2};
        case '\\': case '"': case '[': case ']': case '-': case '^': return {static_cast<uint32_t>(src_[pos + 1]), pos + 2};
        default: fail(pos, std::string("unknown escape '\\") + src_[pos + 1] + "'");
      }
    }
    return decode_utf8(pos);
  }

  size_t parse_rule(size_t pos) {
    const size_t name_end = parse_name(pos);
    const std::string_view name = src_.substr(pos, name_end - pos);
    pos = skip_space(name_end, false);
    if (src_.compare(pos, 3, "::=") != 0) fail(pos, "expecting ::=");
    pos = skip_space(pos + 3, true);
    const uint32_t id = symbol(name);
    if (!rules_[id].empty()) fail(pos, "rule '" + std::string(name) + "' is defined twice");
    pos = parse_alternates(pos, std::string(name), id, false);
    if (pos < src_.size() && src_[pos] == '\r') ++pos;
    if (pos < src_.size() && src_[pos] == '\n') {
      ++pos;
    } else if (pos < src_.size()) {
      fail(pos, "expecting a newline or the end");
    }
    return skip_space(pos, true);
  }

  size_t parse_alternates(size_t pos, const std::string& rule_name, uint32_t rule_id, bool nested) {
    if (++depth_ > 200) fail(pos, "nesting too deep");
    std::vector<Elem> rule;
    pos = parse_sequence(pos, rule_name, rule, nested);
    while (pos < src_.size() && src_[pos] == '|') {
      rule.push_back({ElemType::Alt, 0});
      pos = skip_space(pos + 1, true);
      pos = parse_sequence(pos, rule_name, rule, nested);
    }
    rule.push_back({ElemType::End, 0});
    add_rule(rule_id, std::move(rule));
    --depth_;
    return pos;
  }

  size_t parse_sequence(size_t pos, const std::string& rule_name, std::vector<Elem>& rule, bool nested) {
    size_t last_sym_start = rule.size();
    const size_t seq_start = rule.size();

    auto handle_repetitions = [&](size_t at, int min_times, int max_times) {
      if (last_sym_start == rule.size()) fail(at, "expecting an item before a repetition operator");
      if (max_times >= 0 && max_times < min_times) fail(at, "repetition {m,n} with n < m");
      // S{m,n} -> S (m times) S'(n-m); S'(k) ::= S S'(k-1) | ; S{m,} -> S (m times) S', S' ::= S S' |
      const std::vector<Elem> prev(rule.begin() + static_cast<std::ptrdiff_t>(last_sym_start), rule.end());
      if (min_times == 0) {
        rule.resize(last_sym_start);
      } else {
        for (int i = 1; i < min_times; ++i) {
          rule.insert(rule.end(), prev.begin(), prev.end());
          if (rule.size() > kMaxGrammarElems) fail(at, "the grammar is too large");
        }
      }
      uint32_t last_rec = 0;
      const int n_opt = max_times < 0 ? 1 : max_times - min_times;
      for (int i = 0; i < n_opt; ++i) {
        std::vector<Elem> rec(prev);
        const uint32_t rec_id = generate_symbol(rule_name);
        if (i > 0 || max_times < 0) rec.push_back({ElemType::RuleRef, max_times < 0 ? rec_id : last_rec});
        rec.push_back({ElemType::Alt, 0});
        rec.push_back({ElemType::End, 0});
        add_rule(rec_id, std::move(rec));
        last_rec = rec_id;
      }
      if (n_opt > 0) rule.push_back({ElemType::RuleRef, last_rec});
    };

    while (pos < src_.size()) {
      const char c = src_[pos];
      if (c == '"') {
        ++pos;
        last_sym_start = rule.size();
        while (pos < src_.size() && src_[pos] != '"') {
          auto [cp, next] = parse_char(pos);
          rule.push_back({ElemType::Char, cp});
          pos = next;
        }
        if (pos >= src_.size()) fail(pos, "unterminated literal");
        pos = skip_space(pos + 1, nested);
      } else if (c == '[') {
        ++pos;
        ElemType start = ElemType::Char;
        if (pos < src_.size() && src_[pos] == '^') {
          ++pos;
          start = ElemType::CharNot;
        }
        last_sym_start = rule.size();
        bool first = true;
        while (pos < src_.size() && src_[pos] != ']') {
          auto [cp, next] = parse_char(pos);
          rule.push_back({first ? start : ElemType::CharAlt, cp});
          first = false;
          pos = next;
          if (pos + 1 < src_.size() && src_[pos] == '-' && src_[pos + 1] != ']') {
            auto [hi, after] = parse_char(pos + 1);
            if (hi < cp) fail(pos, "character range with its bounds reversed");
            rule.push_back({ElemType::CharRngUpper, hi});
            pos = after;
          }
        }
        if (pos >= src_.size()) fail(pos, "unterminated character class");
        if (first) fail(pos, "empty character class");
        pos = skip_space(pos + 1, nested);
      } else if (is_word_char(c)) {
        const size_t end = parse_name(pos);
        const uint32_t ref = symbol(src_.substr(pos, end - pos));
        last_sym_start = rule.size();
        rule.push_back({ElemType::RuleRef, ref});
        pos = skip_space(end, nested);
      } else if (c == '(') {
        pos = skip_space(pos + 1, true);
        const uint32_t sub = generate_symbol(rule_name);
        pos = parse_alternates(pos, rule_name, sub, true);
        last_sym_start = rule.size();
        rule.push_back({ElemType::RuleRef, sub});
        if (pos >= src_.size() || src_[pos] != ')') fail(pos, "expecting ')'");
        pos = skip_space(pos + 1, nested);
      } else if (c == '.') {
        last_sym_start = rule.size();
        rule.push_back({ElemType::CharAny, 0});
        pos = skip_space(pos + 1, nested);
      } else if (c == '*' || c == '+' || c == '?') {
        handle_repetitions(pos, c == '+' ? 1 : 0, c == '?' ? 1 : -1);
        pos = skip_space(pos + 1, nested);
      } else if (c == '{') {
        const size_t at = pos;
        pos = skip_space(pos + 1, nested);
        int min_times = 0;
        pos = parse_int(pos, min_times);
        pos = skip_space(pos, nested);
        int max_times = -1;
        if (pos < src_.size() && src_[pos] == '}') {
          max_times = min_times;
        } else if (pos < src_.size() && src_[pos] == ',') {
          pos = skip_space(pos + 1, nested);
          if (pos < src_.size() && src_[pos] >= '0' && src_[pos] <= '9') {
            pos = parse_int(pos, max_times);
            pos = skip_space(pos, nested);
          }
          if (pos >= src_.size() || src_[pos] != '}') fail(pos, "expecting '}'");
        } else {
          fail(pos, "expecting ',' or '}'");
        }
        handle_repetitions(at, min_times, max_times);
        pos = skip_space(pos + 1, nested);
      } else if (c == '<') {
        fail(pos, "token references (<...>) are not supported");
      } else {
        break;
      }
    }
    (void)seq_start;
    return pos;
  }

  // llama.cpp refuses left-recursive grammars: their expansion would never end.
  void check_left_recursion(const Grammar& g) const {
    const size_t n = g.rule_start.size();
    // Nullable rules (can match the empty string), to a fixpoint.
    std::vector<char> nullable(n, 0);
    for (bool changed = true; changed;) {
      changed = false;
      for (size_t r = 0; r < n; ++r) {
        if (nullable[r]) continue;
        bool alt_nullable = true;
        for (uint32_t p = g.rule_start[r];; ++p) {
          const Elem& e = g.elems[p];
          if (e.type == ElemType::End || e.type == ElemType::Alt) {
            if (alt_nullable) {
              nullable[r] = 1;
              changed = true;
              break;
            }
            if (e.type == ElemType::End) break;
            alt_nullable = true;
            continue;
          }
          if (!alt_nullable) continue;
          if (e.type == ElemType::RuleRef) {
            if (!nullable[e.value]) alt_nullable = false;
          } else if (e.type != ElemType::CharRngUpper && e.type != ElemType::CharAlt) {
            alt_nullable = false;
          }
        }
      }
    }
    // Left edges: rule r can start with rule s.
    std::vector<std::vector<uint32_t>> left(n);
    for (size_t r = 0; r < n; ++r) {
      bool at_left = true;
      for (uint32_t p = g.rule_start[r];; ++p) {
        const Elem& e = g.elems[p];
        if (e.type == ElemType::End) break;
        if (e.type == ElemType::Alt) {
          at_left = true;
          continue;
        }
        if (!at_left) continue;
        if (e.type == ElemType::RuleRef) {
          left[r].push_back(e.value);
          if (!nullable[e.value]) at_left = false;
        } else if (e.type != ElemType::CharRngUpper && e.type != ElemType::CharAlt) {
          at_left = false;
        }
      }
    }
    std::vector<uint8_t> color(n, 0);  // 0 new, 1 on the path, 2 done
    for (size_t start = 0; start < n; ++start) {
      if (color[start]) continue;
      std::vector<std::pair<uint32_t, size_t>> path{{static_cast<uint32_t>(start), 0}};
      color[start] = 1;
      while (!path.empty()) {
        auto& [r, next] = path.back();
        if (next < left[r].size()) {
          const uint32_t s = left[r][next++];
          if (color[s] == 1) fail_plain("left recursion in rule '" + g.rule_names[s] + "'");
          if (color[s] == 0) {
            color[s] = 1;
            path.push_back({s, 0});
          }
        } else {
          color[r] = 2;
          path.pop_back();
        }
      }
    }
  }

  std::string_view src_;
  std::unordered_map<std::string, uint32_t> symbols_;
  std::vector<std::string> names_;
  std::vector<std::vector<Elem>> rules_;
  size_t elem_count_ = 0;
  int depth_ = 0;
};

}  // namespace

Grammar parse_gbnf(std::string_view text) {
  if (text.size() > kMaxGrammarBytes) throw Error("grammar: larger than " + std::to_string(kMaxGrammarBytes) + " bytes");
  return Parser(text).run();
}

std::string gbnf_literal(std::string_view text) {
  std::string out;
  static const char kHex[] = "0123456789ABCDEF";
  for (unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20 || c == 0x7F) {
          out += "\\x";
          out += kHex[c >> 4];
          out += kHex[c & 15];
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out;
}

}  // namespace agentkv::grammar
