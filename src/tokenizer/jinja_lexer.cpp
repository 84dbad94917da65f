#include "tokenizer/jinja_lexer.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "agentkv/error.h"
#include "tokenizer/jinja_text.h"

namespace agentkv::jinja {

SourceMap::SourceMap(std::string_view source) {
  line_starts_.push_back(0);
  for (size_t i = 0; i < source.size(); ++i)
    if (source[i] == '\n') line_starts_.push_back(i + 1);
}

std::pair<int, int> SourceMap::line_column(size_t offset) const {
  const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
  const size_t line_index = static_cast<size_t>(it - line_starts_.begin()) - 1;
  return {static_cast<int>(line_index + 1), static_cast<int>(offset - line_starts_[line_index] + 1)};
}

namespace {

bool is_name_start(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
bool is_name_char(char c) { return is_name_start(c) || (c >= '0' && c <= '9'); }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Length of the whitespace run (Python \s*) starting at pos.
size_t whitespace_run(std::string_view s, size_t pos) {
  size_t end = pos;
  while (end < s.size()) {
    size_t probe = end;
    if (!text::is_space(text::next_code_point(s, probe))) break;
    end = probe;
  }
  return end - pos;
}

bool all_whitespace(std::string_view s) {
  return !s.empty() && whitespace_run(s, 0) == s.size();
}

// Decodes a Python string literal body (escapes as Python's unicode-escape codec reads them).
std::string decode_string_literal(std::string_view body, const auto& fail) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out.push_back(c);
      continue;
    }
    const char e = body[++i];
    const auto hex_escape = [&](int digits) {
      uint32_t cp = 0;
      for (int d = 0; d < digits; ++d) {
        if (i + 1 >= body.size()) fail("truncated escape in string");
        const char h = body[++i];
        int v;
        if (h >= '0' && h <= '9') v = h - '0';
        else if (h >= 'a' && h <= 'f') v = h - 'a' + 10;
        else if (h >= 'A' && h <= 'F') v = h - 'A' + 10;
        else fail("invalid escape in string");
        cp = cp * 16 + static_cast<uint32_t>(v);
      }
      if (cp > 0x10FFFF) fail("invalid escape in string");
      text::append_utf8(out, cp);
    };
    switch (e) {
      case '\n': break;  // line continuation
      case '\\': out.push_back('\\'); break;
      case '\'': out.push_back('\''); break;
      case '"': out.push_back('"'); break;
      case 'a': out.push_back('\a'); break;
      case 'b': out.push_back('\b'); break;
      case 'f': out.push_back('\f'); break;
      case 'n': out.push_back('\n'); break;
      case 'r': out.push_back('\r'); break;
      case 't': out.push_back('\t'); break;
      case 'v': out.push_back('\v'); break;
      case 'x': hex_escape(2); break;
      case 'u': hex_escape(4); break;
      case 'U': hex_escape(8); break;
      default:
        if (e >= '0' && e <= '7') {
          uint32_t cp = static_cast<uint32_t>(e - '0');
          for (int d = 0; d < 2 && i + 1 < body.size() && body[i + 1] >= '0' && body[i + 1] <= '7'; ++d)
            cp = cp * 8 + static_cast<uint32_t>(body[++i] - '0');
          text::append_utf8(out, cp);
        } else {
          // Unknown escapes stay as written, as in Python.
          out.push_back('\\');
          out.push_back(e);
        }
    }
  }
  return out;
}

class Lexer {
 public:
  explicit Lexer(std::string source) : source_(std::move(source)), map_(source_) {}

  LexedTemplate run() {
    size_t pos = 0;
    bool line_starting = true;  // the previous token ended a line (lstrip_blocks needs it)
    while (pos < source_.size()) {
      const size_t opener = find_opener(pos);
      std::string text = source_.substr(pos, (opener == std::string::npos ? source_.size() : opener) - pos);
      if (opener == std::string::npos) {
        emit_text(std::move(text), pos);
        break;
      }
      const char type = source_[opener + 1];  // '{', '%' or '#'
      size_t after = opener + 2;
      char sign = 0;
      if (after < source_.size() && (source_[after] == '-' || source_[after] == '+')) sign = source_[after++];
      if (sign == '-') {
        text = std::string(text::strip(text, false, true));
      } else if (sign != '+' && type != '{') {
        text = lstrip_line(std::move(text), line_starting);
      }
      emit_text(std::move(text), pos);
      if (type == '#') {
        pos = skip_comment(opener, after);
      } else if (type == '%' && is_raw_begin(after)) {
        pos = lex_raw(opener, after);
      } else {
        pos = lex_tag(type == '{', opener, after);
      }
      line_starting = pos > 0 && source_[pos - 1] == '\n';
    }
    Token end;
    end.kind = TokenKind::End;
    end.offset = source_.size();
    tokens_.push_back(end);
    return LexedTemplate{std::move(source_), std::move(tokens_)};
  }

 private:
  [[noreturn]] void fail(size_t offset, const std::string& message) const {
    const auto [line, column] = map_.line_column(offset);
    throw Error("chat template syntax error at line " + std::to_string(line) + ", column " +
                std::to_string(column) + ": " + message);
  }

  size_t find_opener(size_t pos) const {
    while (true) {
      const size_t brace = source_.find('{', pos);
      if (brace == std::string::npos || brace + 1 >= source_.size()) return std::string::npos;
      const char next = source_[brace + 1];
      if (next == '{' || next == '%' || next == '#') return brace;
      pos = brace + 1;
    }
  }

  // lstrip_blocks: drop spaces before a block/comment tag that starts its line.
  static std::string lstrip_line(std::string text, bool line_starting) {
    const size_t newline = text.rfind('\n');
    const size_t line_start = newline == std::string::npos ? 0 : newline + 1;
    if ((line_start > 0 || line_starting) && all_whitespace(std::string_view(text).substr(line_start)))
      text.resize(line_start);
    return text;
  }

  void emit_text(std::string text, size_t offset) {
    if (text.empty()) return;
    Token t;
    t.kind = TokenKind::Text;
    t.text = std::move(text);
    t.offset = offset;
    tokens_.push_back(std::move(t));
  }

  void emit(TokenKind kind, size_t offset, std::string text = {}) {
    Token t;
    t.kind = kind;
    t.offset = offset;
    t.text = std::move(text);
    tokens_.push_back(std::move(t));
  }

  // After a block end: "-%}" eats all following whitespace, "+%}" nothing, "%}" one newline.
  size_t after_block_end(size_t end_pos, char sign) const {
    if (sign == '-') return end_pos + whitespace_run(source_, end_pos);
    if (sign == '+') return end_pos;
    return (end_pos < source_.size() && source_[end_pos] == '\n') ? end_pos + 1 : end_pos;
  }

  size_t skip_comment(size_t opener, size_t after) const {
    const size_t close = source_.find("#}", after);
    if (close == std::string::npos) fail(opener, "unterminated comment (missing '#}')");
    char sign = 0;
    if (close > after && (source_[close - 1] == '-' || source_[close - 1] == '+')) sign = source_[close - 1];
    return after_block_end(close + 2, sign);
  }

  // "{% raw %}" with optional "-"/"+" after "{%" (already consumed up to `after`).
  bool is_raw_begin(size_t after) const {
    size_t p = after + whitespace_run(source_, after);
    if (source_.compare(p, 3, "raw") != 0) return false;
    p += 3;
    if (p < source_.size() && is_name_char(source_[p])) return false;
    p += whitespace_run(source_, p);
    return source_.compare(p, 2, "%}") == 0 || source_.compare(p, 3, "-%}") == 0;
  }

  size_t lex_raw(size_t opener, size_t after) {
    size_t p = after + whitespace_run(source_, after) + 3;
    p += whitespace_run(source_, p);
    if (source_[p] == '-') p = after_block_end(p + 3, '-');
    else p += 2;
    // Find "{%[-+]? endraw [-+]?%}".
    size_t search = p;
    while (true) {
      const size_t tag = source_.find("{%", search);
      if (tag == std::string::npos) fail(opener, "unterminated raw block (missing '{% endraw %}')");
      size_t q = tag + 2;
      char sign = 0;
      if (q < source_.size() && (source_[q] == '-' || source_[q] == '+')) sign = source_[q++];
      q += whitespace_run(source_, q);
      if (source_.compare(q, 6, "endraw") != 0) {
        search = tag + 2;
        continue;
      }
      q += 6;
      q += whitespace_run(source_, q);
      char end_sign = 0;
      if (q < source_.size() && (source_[q] == '-' || source_[q] == '+')) end_sign = source_[q++];
      if (source_.compare(q, 2, "%}") != 0) fail(tag, "expected '%}' after 'endraw'");
      std::string body = source_.substr(p, tag - p);
      if (sign == '-') body = std::string(text::strip(body, false, true));
      else if (sign != '+') body = lstrip_line(std::move(body), false);
      emit_text(std::move(body), p);
      return after_block_end(q + 2, end_sign);
    }
  }

  // Lexes the inside of {{ ... }} or {% ... %}; returns the offset after the closing delimiter.
  size_t lex_tag(bool is_variable, size_t opener, size_t pos) {
    emit(is_variable ? TokenKind::VarBegin : TokenKind::BlockBegin, opener);
    std::vector<char> brackets;
    while (true) {
      if (pos >= source_.size())
        fail(opener, is_variable ? "unterminated '{{' (missing '}}')" : "unterminated '{%' (missing '%}')");
      if (brackets.empty()) {
        const size_t end = match_end(is_variable, pos);
        if (end != std::string::npos) return end;
      }
      const char c = source_[pos];
      const size_t ws = whitespace_run(source_, pos);
      if (ws > 0) {
        pos += ws;
        continue;
      }
      if (is_digit(c) && !(pos > 0 && source_[pos - 1] == '.')) {
        pos = lex_number(pos);
      } else if (is_digit(c)) {
        pos = lex_number(pos, /*integer_only=*/true);
      } else if (is_name_start(c)) {
        size_t end = pos + 1;
        while (end < source_.size() && is_name_char(source_[end])) ++end;
        emit(TokenKind::Name, pos, source_.substr(pos, end - pos));
        pos = end;
      } else if (c == '\'' || c == '"') {
        pos = lex_string(pos);
      } else {
        pos = lex_operator(pos, brackets);
      }
    }
  }

  // Recognises the closing delimiter at pos; returns the offset after it (and its trimming).
  size_t match_end(bool is_variable, size_t pos) {
    const std::string_view rest = std::string_view(source_).substr(pos);
    if (is_variable) {
      if (rest.starts_with("-}}")) {
        emit(TokenKind::VarEnd, pos);
        return pos + 3 + whitespace_run(source_, pos + 3);
      }
      if (rest.starts_with("}}")) {
        emit(TokenKind::VarEnd, pos);
        return pos + 2;
      }
      return std::string::npos;
    }
    char sign = 0;
    size_t delim = pos;
    if (rest.starts_with("-%}") || rest.starts_with("+%}")) {
      sign = rest[0];
      ++delim;
    } else if (!rest.starts_with("%}")) {
      return std::string::npos;
    }
    emit(TokenKind::BlockEnd, pos);
    return after_block_end(delim + 2, sign);
  }

  size_t lex_number(size_t start, bool integer_only = false) {
    // Digits with optional single underscores between them.
    const auto digits = [&](size_t p) {
      if (p >= source_.size() || !is_digit(source_[p])) return p;
      ++p;
      while (p < source_.size()) {
        if (is_digit(source_[p])) ++p;
        else if (source_[p] == '_' && p + 1 < source_.size() && is_digit(source_[p + 1])) p += 2;
        else break;
      }
      return p;
    };
    const auto strip_underscores = [](std::string s) {
      s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
      return s;
    };
    if (!integer_only && source_[start] == '0' && start + 1 < source_.size() &&
        std::strchr("xXoObB", source_[start + 1]) != nullptr) {
      const char base_char = static_cast<char>(source_[start + 1] | 0x20);
      const int base = base_char == 'x' ? 16 : base_char == 'o' ? 8 : 2;
      size_t p = start + 2;
      uint64_t value = 0;
      bool any = false;
      while (p < source_.size()) {
        char ch = source_[p];
        if (ch == '_') { ++p; continue; }
        int v = -1;
        if (is_digit(ch)) v = ch - '0';
        else if ((ch | 0x20) >= 'a' && (ch | 0x20) <= 'f') v = (ch | 0x20) - 'a' + 10;
        if (v < 0 || v >= base) break;
        if (value > (static_cast<uint64_t>(INT64_MAX) - static_cast<uint64_t>(v)) / static_cast<uint64_t>(base))
          fail(start, "integer literal too large");
        value = value * static_cast<uint64_t>(base) + static_cast<uint64_t>(v);
        any = true;
        ++p;
      }
      if (!any) fail(start, "invalid integer literal");
      Token t;
      t.kind = TokenKind::Integer;
      t.int_value = static_cast<int64_t>(value);
      t.offset = start;
      tokens_.push_back(t);
      return p;
    }
    size_t p = digits(start);
    bool is_float = false;
    if (!integer_only) {
      if (p + 1 < source_.size() && source_[p] == '.' && is_digit(source_[p + 1])) {
        p = digits(p + 1);
        is_float = true;
      }
      if (p < source_.size() && (source_[p] == 'e' || source_[p] == 'E')) {
        size_t q = p + 1;
        if (q < source_.size() && (source_[q] == '+' || source_[q] == '-')) ++q;
        const size_t exp_end = digits(q);
        if (exp_end > q) {
          p = exp_end;
          is_float = true;
        }
      }
    }
    const std::string literal = strip_underscores(source_.substr(start, p - start));
    Token t;
    t.offset = start;
    if (is_float) {
      t.kind = TokenKind::Float;
      t.float_value = std::strtod(literal.c_str(), nullptr);
    } else {
      t.kind = TokenKind::Integer;
      if (literal.size() > 18) {
        // Python ints are unbounded; this interpreter keeps 64-bit integers.
        errno = 0;
        const unsigned long long v = std::strtoull(literal.c_str(), nullptr, 10);
        if (errno != 0 || v > static_cast<unsigned long long>(INT64_MAX)) fail(start, "integer literal too large");
        t.int_value = static_cast<int64_t>(v);
      } else {
        t.int_value = std::stoll(literal);
      }
    }
    tokens_.push_back(t);
    return p;
  }

  size_t lex_string(size_t start) {
    const char quote = source_[start];
    size_t p = start + 1;
    while (p < source_.size() && source_[p] != quote) {
      if (source_[p] == '\\') ++p;
      ++p;
    }
    if (p >= source_.size()) fail(start, "unterminated string literal");
    const auto fail_here = [&](const std::string& message) { fail(start, message); };
    Token t;
    t.kind = TokenKind::String;
    t.offset = start;
    t.text = decode_string_literal(std::string_view(source_).substr(start + 1, p - start - 1), fail_here);
    tokens_.push_back(std::move(t));
    return p + 1;
  }

  size_t lex_operator(size_t pos, std::vector<char>& brackets) {
    static const char* kTwoChar[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : kTwoChar) {
      if (source_.compare(pos, 2, op) == 0) {
        emit(TokenKind::Operator, pos, op);
        return pos + 2;
      }
    }
    const char c = source_[pos];
    if (std::strchr("+-/*%~[](){}<>=.:|,;", c) == nullptr) {
      fail(pos, std::string("unexpected character '") + c + "'");
    }
    if (c == '(' || c == '[' || c == '{') {
      brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
    } else if (c == ')' || c == ']' || c == '}') {
      if (brackets.empty()) fail(pos, std::string("unexpected '") + c + "'");
      if (brackets.back() != c)
        fail(pos, std::string("unexpected '") + c + "', expected '" + brackets.back() + "'");
      brackets.pop_back();
    }
    emit(TokenKind::Operator, pos, std::string(1, c));
    return pos + 1;
  }

  std::string source_;
  SourceMap map_;
  std::vector<Token> tokens_;
};

// Jinja reads "\r\n" and "\r" as "\n" and drops a single trailing newline.
std::string normalize_newlines(std::string_view source) {
  std::string out;
  out.reserve(source.size());
  for (size_t i = 0; i < source.size(); ++i) {
    if (source[i] == '\r') {
      out.push_back('\n');
      if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
    } else {
      out.push_back(source[i]);
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

}  // namespace

LexedTemplate tokenize(std::string_view source) {
  return Lexer(normalize_newlines(source)).run();
}

}  // namespace agentkv::jinja
