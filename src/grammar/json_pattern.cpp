#include "grammar/json_pattern.h"

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include "agentkv/error.h"
#include "agentkv/gbnf.h"

namespace agentkv::grammar {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;
constexpr size_t kMaxPatternBytes = 4096;
constexpr int kMaxNesting = 64;
constexpr size_t kMaxGrammarBytes = 256 * 1024;

// A set of code points as sorted, disjoint, non-adjacent ranges.
class CodeSet {
 public:
  CodeSet() = default;
  CodeSet(uint32_t lo, uint32_t hi) { add(lo, hi); }
  void add(uint32_t lo, uint32_t hi) {
    ranges_.emplace_back(lo, hi);
    std::sort(ranges_.begin(), ranges_.end());
    std::vector<std::pair<uint32_t, uint32_t>> merged;
    for (const auto& r : ranges_) {
      if (!merged.empty() && r.first <= merged.back().second + 1) merged.back().second = std::max(merged.back().second, r.second);
      else merged.push_back(r);
    }
    ranges_ = std::move(merged);
  }
  void add(const CodeSet& other) {
    for (const auto& r : other.ranges_) add(r.first, r.second);
  }
  CodeSet complement() const {
    CodeSet out;
    uint32_t next = 0;
    for (const auto& r : ranges_) {
      if (r.first > next) out.ranges_.emplace_back(next, r.first - 1);
      next = r.second + 1;
    }
    if (next <= kMaxCodePoint) out.ranges_.emplace_back(next, kMaxCodePoint);
    return out;
  }
  bool contains(uint32_t c) const {
    for (const auto& r : ranges_)
      if (c >= r.first && c <= r.second) return true;
    return false;
  }
  const std::vector<std::pair<uint32_t, uint32_t>>& ranges() const { return ranges_; }

 private:
  std::vector<std::pair<uint32_t, uint32_t>> ranges_;
};

CodeSet digit_set() { return CodeSet('0', '9'); }
CodeSet word_set() {
  CodeSet s('0', '9');
  s.add('A', 'Z');
  s.add('a', 'z');
  s.add('_', '_');
  return s;
}
CodeSet space_set() {  // ECMA-262's WhiteSpace and LineTerminator
  CodeSet s('\t', '\r');
  s.add(' ', ' ');
  for (uint32_t c : {0xA0u, 0x1680u, 0x2028u, 0x2029u, 0x202Fu, 0x205Fu, 0x3000u, 0xFEFFu}) s.add(c, c);
  s.add(0x2000, 0x200A);
  return s;
}

std::string hex_escape(uint32_t c) {
  char buf[12];
  std::snprintf(buf, sizeof buf, "\\U%08X", static_cast<unsigned>(c));
  return buf;
}

// The JSON text of one character of the set: raw where JSON allows it, else its escape (\" \\ \n
// \t \r; other control characters are left out). Empty when the set has none of these.
std::string json_chars(const CodeSet& set) {
  // What JSON text holds unescaped: no control characters, '"', '\\', DEL or surrogates.
  CodeSet not_raw(0, 0x1F);
  for (uint32_t c : {0x22u, 0x5Cu, 0x7Fu}) not_raw.add(c, c);
  not_raw.add(0xD800, 0xDFFF);
  CodeSet outside = set.complement();
  outside.add(not_raw);
  const CodeSet raw = outside.complement();  // set minus not_raw
  std::string cls;
  for (const auto& [lo, hi] : raw.ranges()) cls += hex_escape(lo) + (hi > lo ? "-" + hex_escape(hi) : "");
  std::vector<std::string> alts;
  if (!cls.empty()) alts.push_back("[" + cls + "]");
  const std::pair<uint32_t, const char*> escapes[] = {{'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\t', "\\t"}, {'\r', "\\r"}};
  for (const auto& [c, text] : escapes)
    if (set.contains(c)) alts.push_back("\"" + gbnf_literal(text) + "\"");
  if (alts.empty()) return "";
  if (alts.size() == 1) return alts[0];
  std::string out = "(";
  for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
  return out + ")";
}

// A piece of the pattern as GBNF: `g` its strings; `nullable` whether the empty string is one of
// them; `nonempty` GBNF of its non-empty strings ("" when it has none). A repetition is written
// over `nonempty`, never over a nullable expression: `(x?)*` would be left recursion in the
// grammar, and `(x)*` over x's non-empty strings is the same language.
struct Expr {
  std::string g;
  bool nullable = false;
  std::string nonempty;
};

Expr literal_expr(std::string g) { return {g, false, g}; }
const Expr kEmptyExpr{"\"\"", true, ""};

std::string alt_of(const std::vector<std::string>& alts) {
  std::vector<std::string> kept;
  for (const std::string& a : alts)
    if (!a.empty() && std::find(kept.begin(), kept.end(), a) == kept.end()) kept.push_back(a);
  if (kept.empty()) return "";
  if (kept.size() == 1) return kept[0];
  std::string out = "(";
  for (size_t i = 0; i < kept.size(); ++i) out += (i ? " | " : "") + kept[i];
  return out + ")";
}

Expr concat(const Expr& a, const Expr& b) {
  if (a.g == kEmptyExpr.g) return b;
  if (b.g == kEmptyExpr.g) return a;
  Expr out;
  out.g = a.g + " " + b.g;
  out.nullable = a.nullable && b.nullable;
  if (!a.nullable || !b.nullable) {
    out.nonempty = out.g;
  } else {  // non-empty: a's part non-empty (then any b), or a empty and b's non-empty
    out.nonempty = alt_of({a.nonempty.empty() ? "" : a.nonempty + " " + b.g, b.nonempty});
  }
  return out;
}

Expr alternation(const std::vector<Expr>& alts) {
  if (alts.size() == 1) return alts[0];
  Expr out;
  std::vector<std::string> gs, nes;
  for (const Expr& e : alts) {
    gs.push_back(e.g);
    nes.push_back(e.nonempty);
    out.nullable = out.nullable || e.nullable;
  }
  out.g = alt_of(gs);
  out.nonempty = alt_of(nes);
  if (!out.nullable) out.nonempty = out.g;
  return out;
}

// x repeated min..max times (max < 0: unbounded).
Expr repeat(const Expr& x, int64_t min, int64_t max) {
  auto count = [](int64_t lo, int64_t hi) {
    if (hi < 0) return lo == 0 ? std::string("*") : lo == 1 ? std::string("+") : "{" + std::to_string(lo) + ",}";
    if (lo == 0 && hi == 1) return std::string("?");
    return lo == hi ? "{" + std::to_string(lo) + "}" : "{" + std::to_string(lo) + "," + std::to_string(hi) + "}";
  };
  if (max == 0) return kEmptyExpr;
  if (x.nullable) {  // = x's non-empty strings 0..max times
    if (x.nonempty.empty()) return kEmptyExpr;
    Expr out;
    out.g = "(" + x.nonempty + ")" + count(0, max);
    out.nullable = true;
    out.nonempty = "(" + x.nonempty + ")" + count(1, max);
    return out;
  }
  Expr out;
  out.g = "(" + x.g + ")" + count(min, max);
  out.nullable = min == 0;
  out.nonempty = min == 0 ? "(" + x.g + ")" + count(1, max) : out.g;
  return out;
}

class PatternParser {
 public:
  explicit PatternParser(std::string_view p) : p_(p) {}

  std::string run() {
    if (p_.size() > kMaxPatternBytes) fail("is longer than 4096 bytes");
    std::vector<std::string> alts;
    do {
      const bool anchored_start = eat('^');
      const Expr body = sequence(0, /*top_level=*/true);
      const bool anchored_end = ended_with_dollar_;
      ended_with_dollar_ = false;
      std::string alt = anchored_start ? "" : "char* ";
      alt += body.g == kEmptyExpr.g ? "" : body.g + " ";
      if (!anchored_end) alt += "char*";
      alts.push_back(alt.empty() ? "\"\"" : alt);
    } while (eat('|'));
    if (pos_ < p_.size()) fail("has an unbalanced ')'");
    std::string out = "\"\\\"\" (";
    for (size_t i = 0; i < alts.size(); ++i) out += (i ? " | " : "") + alts[i];
    return out + ") \"\\\"\"";
  }

 private:
  [[noreturn]] void fail(const std::string& what) const {
    throw Error("json_schema: pattern '" + std::string(p_.substr(0, 200)) + "' " + what +
                " (at byte " + std::to_string(pos_) + "); the grammar cannot enforce it");
  }
  bool eat(char c) {
    if (pos_ < p_.size() && p_[pos_] == c) {
      ++pos_;
      return true;
    }
    return false;
  }
  bool at_end() const { return pos_ >= p_.size(); }
  char peek() const { return at_end() ? '\0' : p_[pos_]; }

  // One UTF-8 code point of the pattern.
  uint32_t next_code_point() {
    const auto b = static_cast<unsigned char>(p_[pos_]);
    int len = b < 0x80 ? 1 : (b >> 5) == 6 ? 2 : (b >> 4) == 14 ? 3 : (b >> 3) == 30 ? 4 : 0;
    if (len == 0 || pos_ + static_cast<size_t>(len) > p_.size()) fail("is not UTF-8");
    uint32_t c = len == 1 ? b : b & (0x7F >> len);
    for (int i = 1; i < len; ++i) {
      const auto cont = static_cast<unsigned char>(p_[pos_ + static_cast<size_t>(i)]);
      if ((cont >> 6) != 2) fail("is not UTF-8");
      c = (c << 6) | (cont & 0x3F);
    }
    pos_ += static_cast<size_t>(len);
    if (c > kMaxCodePoint) fail("is not UTF-8");
    return c;
  }

  uint32_t hex_digits(int n) {
    uint32_t v = 0;
    for (int i = 0; i < n; ++i) {
      if (at_end()) fail("ends inside an escape");
      const char c = p_[pos_++];
      int d = c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
      if (d < 0) fail("has a bad hexadecimal escape");
      v = v * 16 + static_cast<uint32_t>(d);
    }
    return v;
  }

  // After a backslash: the set it stands for (one character, or a class escape).
  CodeSet escape(bool in_class) {
    if (at_end()) fail("ends with a backslash");
    const char c = p_[pos_++];
    switch (c) {
      case 'd': return digit_set();
      case 'D': return digit_set().complement();
      case 'w': return word_set();
      case 'W': return word_set().complement();
      case 's': return space_set();
      case 'S': return space_set().complement();
      case 'n': return CodeSet('\n', '\n');
      case 't': return CodeSet('\t', '\t');
      case 'r': return CodeSet('\r', '\r');
      case 'f': return CodeSet('\f', '\f');
      case 'v': return CodeSet('\v', '\v');
      case '0': return CodeSet(0, 0);
      case 'x': { const uint32_t v = hex_digits(2); return CodeSet(v, v); }
      case 'u': { const uint32_t v = hex_digits(4); return CodeSet(v, v); }
      case 'b':
        if (in_class) return CodeSet('\b', '\b');
        --pos_;
        fail("has a word boundary (\\b)");
      case 'B': --pos_; fail("has a word boundary (\\B)");
      case 'c': case 'k': case 'p': case 'P': --pos_; fail(std::string("has the escape \\") + c);
      default:
        if (c >= '1' && c <= '9') {
          --pos_;
          fail("has a backreference");
        }
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) {
          --pos_;
          fail(std::string("has the unknown escape \\") + c);
        }
        --pos_;
        const uint32_t v = next_code_point();  // escaped punctuation (or any other character) stands for itself
        return CodeSet(v, v);
    }
  }

  CodeSet char_class() {  // after '['
    const bool negated = eat('^');
    CodeSet set;
    bool first = true;
    while (true) {
      if (at_end()) fail("has an unclosed '['");
      if (peek() == ']' && !first) {
        ++pos_;
        break;
      }
      if (peek() == ']' && first) fail("has an empty class '[]'");
      first = false;
      CodeSet lo_set = eat('\\') ? escape(true) : [&] { const uint32_t v = next_code_point(); return CodeSet(v, v); }();
      const bool single = lo_set.ranges().size() == 1 && lo_set.ranges()[0].first == lo_set.ranges()[0].second;
      if (single && peek() == '-' && pos_ + 1 < p_.size() && p_[pos_ + 1] != ']') {
        ++pos_;
        CodeSet hi_set = eat('\\') ? escape(true) : [&] { const uint32_t v = next_code_point(); return CodeSet(v, v); }();
        const bool hi_single = hi_set.ranges().size() == 1 && hi_set.ranges()[0].first == hi_set.ranges()[0].second;
        if (!hi_single) fail("has a range ending in a class escape");
        const uint32_t lo = lo_set.ranges()[0].first, hi = hi_set.ranges()[0].first;
        if (lo > hi) fail("has a range out of order");
        set.add(lo, hi);
      } else {
        set.add(lo_set);
      }
    }
    return negated ? set.complement() : set;
  }

  std::string chars(const CodeSet& set) {
    std::string g = json_chars(set);
    if (g.empty()) fail("matches a character JSON text cannot hold");
    return g;
  }

  // atom := group | class | . | escape | literal.
  Expr atom(int depth) {
    const char c = peek();
    if (c == '(') {
      ++pos_;
      if (eat('?')) {
        if (eat(':')) {
        } else if (peek() == '<' && pos_ + 1 < p_.size() && p_[pos_ + 1] != '=' && p_[pos_ + 1] != '!') {
          while (!at_end() && p_[pos_] != '>') ++pos_;  // a named group: the name is not needed
          if (!eat('>')) fail("has an unclosed group name");
        } else {
          fail("has a lookaround or an unknown group '(?'");
        }
      }
      std::vector<Expr> alts;
      do {
        alts.push_back(sequence(depth + 1, false));
      } while (eat('|'));
      if (!eat(')')) fail("has an unclosed '('");
      Expr e = alternation(alts);
      if (alts.size() > 1 || e.g.find(' ') != std::string::npos) {
        e.g = "(" + e.g + ")";
        if (!e.nonempty.empty()) e.nonempty = "(" + e.nonempty + ")";
      }
      return e;
    }
    if (c == '[') {
      ++pos_;
      return literal_expr(chars(char_class()));
    }
    if (c == '.') {
      ++pos_;
      CodeSet line_ends('\n', '\n');
      line_ends.add('\r', '\r');
      line_ends.add(0x2028, 0x2029);
      return literal_expr(chars(line_ends.complement()));
    }
    if (c == '\\') {
      ++pos_;
      return literal_expr(chars(escape(false)));
    }
    if (c == '*' || c == '+' || c == '?') fail("has a quantifier with nothing before it");
    const uint32_t v = next_code_point();
    return literal_expr(chars(CodeSet(v, v)));
  }

  // {m}, {m,}, {m,n} at pos_ ('{' included); false (pos_ unchanged) when '{' is a literal.
  bool braces(int64_t& min, int64_t& max) {
    size_t k = pos_ + 1;
    auto number = [&](int64_t& out) {
      const size_t start = k;
      out = 0;
      while (k < p_.size() && p_[k] >= '0' && p_[k] <= '9' && k - start < 6) out = out * 10 + (p_[k++] - '0');
      return k > start;
    };
    if (!number(min)) return false;
    max = min;
    if (k < p_.size() && p_[k] == ',') {
      ++k;
      if (!number(max)) max = -1;
    }
    if (k >= p_.size() || p_[k] != '}') return false;
    pos_ = k + 1;
    if (min > kMaxRepetition || max > kMaxRepetition) fail("repeats more than the grammar allows");
    if (max >= 0 && max < min) fail("has a repetition {m,n} with n < m");
    return true;
  }

  Expr sequence(int depth, bool top_level) {
    if (depth > kMaxNesting) fail("nests groups too deeply");
    Expr out = kEmptyExpr;
    while (!at_end() && peek() != '|' && peek() != ')') {
      if (peek() == '$') {
        ++pos_;
        if (!top_level || !(at_end() || peek() == '|')) fail("has '$' before its end");
        ended_with_dollar_ = true;
        break;
      }
      if (peek() == '^') fail("has '^' after its start");
      Expr a = atom(depth);
      int64_t min = 1, max = 1;  // a quantifier (ECMA: lazy forms match the same strings)
      bool quantified = true;
      if (eat('*')) min = 0, max = -1;
      else if (eat('+')) min = 1, max = -1;
      else if (eat('?')) min = 0, max = 1;
      else if (!(peek() == '{' && braces(min, max))) quantified = false;
      if (quantified) {
        eat('?');
        if (peek() == '*' || peek() == '+' || peek() == '?') fail("has a quantifier after a quantifier");
        a = repeat(a, min, max);
      }
      out = concat(out, a);
      if (out.g.size() > kMaxGrammarBytes) fail("makes a grammar over 256 KiB");
    }
    return out;
  }

  std::string_view p_;
  size_t pos_ = 0;
  bool ended_with_dollar_ = false;
};

}  // namespace

std::string pattern_string_gbnf(std::string_view pattern) { return PatternParser(pattern).run(); }

}  // namespace agentkv::grammar
