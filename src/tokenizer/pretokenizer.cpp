#include "tokenizer/pretokenizer.h"

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "agentkv/error.h"
#include "tokenizer/unicode.h"

namespace agentkv::tokenizer {

namespace {

using unicode::Category;

// The pre-tokenizer regexes llama.cpp uses (llama-vocab.cpp, llm_tokenizer_bpe).
constexpr const char* kGpt2Regex =
    "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)";
constexpr const char* kDefaultPunctuationRegex = "[\\p{P}\\$\\+<=>\\^~\\|]+";
constexpr const char* kDefaultNumbersRegex = "\\p{N}+";
constexpr const char* kDefaultDigitTriplesRegex = "[0-9][0-9][0-9]";
// Mistral's tekken (Nemo, Small 3.x, Devstral), as llama.cpp adapts the tokenizer.json regex: a
// word is an optional non-letter, then upper-case-ish letters followed by lower-case-ish ones (or
// the reverse); "[^a-z]" after the look-ahead for a letter reads "a letter that is not a-z", so a
// non-ASCII letter (one collapsed class) counts as both cases.
constexpr const char* kTekkenRegex =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*|"
    "\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
// OpenAI's o200k (gpt-4o, gpt-oss), as llama.cpp adapts the tokenizer.json regex the same way:
// tekken's two case-shaped word forms, each followed by an optional contraction, and digits in
// runs of up to three.
constexpr const char* kGpt4oRegex =
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))*((?=[\\p{L}])([^A-Z]))+"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "[^\\r\\n\\p{L}\\p{N}]?((?=[\\p{L}])([^a-z]))+((?=[\\p{L}])([^A-Z]))*"
    "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])?|"
    "\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";

}  // namespace

void PreTokenizer::split(std::string_view text, PreTokenizerScratch& s,
                         std::vector<std::string_view>& words) const {
  if (text.empty()) return;
  // Like llama.cpp, work on code points and re-encode them: invalid bytes become U+FFFD.
  std::string_view clean = text;
  s.codepoints.clear();
  if (!unicode::round_trips(text)) {
    unicode::decode_utf8(text, s.codepoints);
    s.normalized.clear();
    for (uint32_t cp : s.codepoints) unicode::append_utf8(cp, s.normalized);
    clean = s.normalized;
    s.codepoints.clear();
  }
  unicode::decode_utf8(clean, s.codepoints);
  // Byte offsets of the (now well-formed) code points.
  s.byte_offsets.resize(s.codepoints.size() + 1);
  {
    size_t off = 0;
    for (size_t i = 0; i < s.codepoints.size(); ++i) {
      s.byte_offsets[i] = uint32_t(off);
      const uint32_t cp = s.codepoints[i];
      off += cp < 0x80 ? 1 : cp < 0x800 ? 2 : cp < 0x10000 ? 3 : 4;
    }
    s.byte_offsets[s.codepoints.size()] = uint32_t(off);
  }
  s.lengths.clear();
  split_codepoints(s);
  size_t start = 0;
  for (uint32_t len : s.lengths) {
    if (len == 0) continue;
    const size_t b0 = s.byte_offsets[start], b1 = s.byte_offsets[start + len];
    words.push_back(clean.substr(b0, b1 - b0));
    start += len;
  }
}

std::vector<std::string> PreTokenizer::split(std::string_view text) const {
  PreTokenizerScratch scratch;
  std::vector<std::string_view> views;
  split(text, scratch, views);
  return {views.begin(), views.end()};
}

// ---------------------------------------------------------------------------------------------
// Qwen2 / Qwen3.5 / Llama 3, by hand.

namespace {

// Code point classes as llama.cpp's collapsed regex sees them: ASCII keeps its identity
// (letters are A-Za-z, digits 0-9, \s is C isspace), other code points go by their Unicode
// class, White_Space first.
enum Cls : uint8_t { kOther = 0, kLetter = 1, kNumber = 2, kMark = 4, kSpace = 8 };

inline uint8_t classify(uint32_t cp) {
  if (cp < 0x80) {
    if ((cp | 0x20) >= 'a' && (cp | 0x20) <= 'z') return kLetter;
    if (cp >= '0' && cp <= '9') return kNumber;
    if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D)) return kSpace;
    return kOther;
  }
  const uint8_t f = unicode::codepoint_flags(cp);
  if (f & unicode::kWhitespaceBit) return kSpace;
  switch (Category(f & unicode::kCategoryMask)) {
    case Category::Letter: return kLetter;
    case Category::Number: return kNumber;
    case Category::Mark: return kMark;
    default: return kOther;
  }
}

inline uint32_t ascii_lower(uint32_t cp) { return (cp >= 'A' && cp <= 'Z') ? cp + 32 : cp; }

// What tells the members of the family apart.
struct Qwen2FamilyShape {
  bool marks_join_letters = false;  // qwen35: [\p{L}\p{M}]+ instead of \p{L}+
  size_t max_digits = 1;            // llama3: \p{N}{1,3} instead of \p{N}
  bool clean_spaces = false;
  bool ignore_merges = false;
};

class Qwen2PreTokenizer final : public PreTokenizer {
 public:
  explicit Qwen2PreTokenizer(Qwen2FamilyShape shape) : shape_(shape) {}
  bool clean_spaces() const override { return shape_.clean_spaces; }
  bool ignore_merges() const override { return shape_.ignore_merges; }

 protected:
  void split_codepoints(PreTokenizerScratch& s) const override {
    const std::vector<uint32_t>& cps = s.codepoints;
    const size_t n = cps.size();
    std::vector<uint8_t>& cls = s.classes;
    cls.resize(n);
    for (size_t i = 0; i < n; ++i) cls[i] = classify(cps[i]);
    // "Word" letters: \p{L} (qwen2) or [\p{L}\p{M}] (qwen35). "Other": not \s, not a word letter,
    // not \p{N} (combining marks are "other" for qwen2).
    const uint8_t word = shape_.marks_join_letters ? uint8_t(kLetter | kMark) : uint8_t(kLetter);
    auto is_word = [&](size_t i) { return i < n && (cls[i] & word); };
    auto is_other = [&](size_t i) { return i < n && (cls[i] == kOther || (cls[i] == kMark && !shape_.marks_join_letters)); };
    auto is_space = [&](size_t i) { return i < n && cls[i] == kSpace; };
    auto is_newline = [&](size_t i) { return i < n && (cps[i] == '\r' || cps[i] == '\n'); };

    size_t pos = 0;
    auto emit = [&](size_t end) {
      s.lengths.push_back(uint32_t(end - pos));
      pos = end;
    };
    while (pos < n) {
      const uint32_t c = cps[pos];
      // (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])
      if (c == '\'' && pos + 1 < n) {
        const uint32_t c1 = ascii_lower(cps[pos + 1]);
        if (c1 == 's' || c1 == 't' || c1 == 'm' || c1 == 'd') {
          emit(pos + 2);
          continue;
        }
        if (pos + 2 < n) {
          const uint32_t c2 = ascii_lower(cps[pos + 2]);
          if ((c1 == 'r' && c2 == 'e') || (c1 == 'v' && c2 == 'e') || (c1 == 'l' && c2 == 'l')) {
            emit(pos + 3);
            continue;
          }
        }
      }
      // [^\r\n\p{L}\p{N}]?\p{L}+  (qwen35: [^\r\n\p{L}\p{N}]?[\p{L}\p{M}]+)
      {
        const bool may_prefix = !(c == '\r' || c == '\n' || (cls[pos] & (kLetter | kNumber)));
        size_t end = pos;
        if (may_prefix && is_word(pos + 1)) {
          end = pos + 1;
        } else if (!is_word(pos)) {
          end = SIZE_MAX;
        }
        if (end != SIZE_MAX) {
          while (is_word(end)) ++end;
          emit(end);
          continue;
        }
      }
      // \p{N} (llama3: \p{N}{1,3}, repeated over a longer run of digits)
      if (cls[pos] == kNumber) {
        size_t end = pos + 1;
        while (end - pos < shape_.max_digits && end < n && cls[end] == kNumber) ++end;
        emit(end);
        continue;
      }
      //  ?[^\s\p{L}\p{N}]+[\r\n]*
      {
        size_t start = SIZE_MAX;
        if (c == ' ' && is_other(pos + 1)) {
          start = pos + 1;
        } else if (is_other(pos)) {
          start = pos;
        }
        if (start != SIZE_MAX) {
          size_t end = start;
          while (is_other(end)) ++end;
          while (is_newline(end)) ++end;
          emit(end);
          continue;
        }
      }
      // Only whitespace is left: \s*[\r\n]+ | \s+(?!\S) | \s+
      size_t run_end = pos;
      size_t last_newline_end = 0;
      while (is_space(run_end)) {
        if (is_newline(run_end)) last_newline_end = run_end + 1;
        ++run_end;
      }
      if (last_newline_end > 0) {
        emit(last_newline_end);
      } else if (run_end == n || run_end - pos < 2) {
        emit(run_end > pos ? run_end : pos + 1);
      } else {
        emit(run_end - 1);  // leave the last space to prefix the next word
      }
    }
  }

 private:
  Qwen2FamilyShape shape_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_qwen2_pretokenizer(bool marks_join_letters) {
  return std::make_unique<Qwen2PreTokenizer>(Qwen2FamilyShape{.marks_join_letters = marks_join_letters});
}

std::unique_ptr<PreTokenizer> make_llama3_pretokenizer() {
  return std::make_unique<Qwen2PreTokenizer>(
      Qwen2FamilyShape{.max_digits = 3, .clean_spaces = true, .ignore_merges = true});
}

bool is_llama3_pre(std::string_view pre) {
  // llama.cpp (llama-vocab.cpp) maps all of these to LLAMA_VOCAB_PRE_TYPE_LLAMA3.
  for (std::string_view name : {"llama3", "llama-v3", "llama-bpe", "falcon3", "falcon-h1", "pixtral", "midm-2.0",
                                "lfm2", "jina-v5-nano"})
    if (pre == name) return true;
  return false;
}

bool is_gpt4o_pre(std::string_view pre) {
  // llama.cpp (llama-vocab.cpp) maps all of these to LLAMA_VOCAB_PRE_TYPE_GPT4O.
  for (std::string_view name : {"gpt-4o", "llama4", "kanana2", "talkie"})
    if (pre == name) return true;
  return false;
}

// ---------------------------------------------------------------------------------------------
// Generic regexes over llama.cpp's collapsed text.

namespace {

// Stand-in bytes for non-ASCII code points, and the ASCII members of each class, as llama.cpp's
// unicode_regex_split defines them (note: \p{S} leaves out '~', \p{P} is the ASCII subset below).
struct CollapsedClass {
  const char* name;  // as written in a pattern
  Category category;
  uint8_t code;
  const char* ascii;  // PCRE2 class body
};
constexpr CollapsedClass kCollapsedClasses[] = {
    {"\\p{N}", Category::Number, 0xD1, "0-9"},
    {"\\p{L}", Category::Letter, 0xD2, "A-Za-z"},
    {"\\p{P}", Category::Punctuation, 0xD3, "!-#%-*,-/:-;?-@\\[-\\]_\\{\\}"},
    {"\\p{M}", Category::Mark, 0xD4, ""},
    {"\\p{S}", Category::Symbol, 0xD5, "\\$\\+<-=>\\^`\\|"},
    {"\\p{Lu}", Category::Letter, 0xD2, "A-Za-z"},
    {"\\p{Ll}", Category::Letter, 0xD2, "A-Za-z"},
    {"\\p{Lt}", Category::Letter, 0xD2, "A-Za-z"},
    {"\\p{Lm}", Category::Letter, 0xD2, "A-Za-z"},
    {"\\p{Lo}", Category::Letter, 0xD2, "A-Za-z"},
};
constexpr uint8_t kCollapsedOther = 0xD0;
constexpr uint8_t kCollapsedSpace = 0x0B;  // vertical tab: a \s that std::regex knows

uint8_t collapse(uint32_t cp) {
  if (cp < 0x80) return uint8_t(cp);
  const uint8_t f = unicode::codepoint_flags(cp);
  if (f & unicode::kWhitespaceBit) return kCollapsedSpace;
  const Category c = Category(f & unicode::kCategoryMask);
  for (const auto& cc : kCollapsedClasses)
    if (cc.category == c) return cc.code;
  return kCollapsedOther;
}

std::string hex_byte(uint8_t b) {
  static const char* digits = "0123456789ABCDEF";
  return std::string("\\x") + digits[b >> 4] + digits[b & 15];
}

// Rewrites \p{..} into classes over the collapsed bytes, as llama.cpp does.
std::string collapse_pattern(const std::string& re) {
  std::string out;
  bool inside = false;
  for (size_t i = 0; i < re.size(); ++i) {
    if (re[i] == '[' && (i == 0 || re[i - 1] != '\\')) {
      out += '[';
      inside = true;
      continue;
    }
    if (inside && re[i] == ']' && re[i - 1] != '\\') {
      out += ']';
      inside = false;
      continue;
    }
    if (re[i] == '\\' && i + 3 < re.size() && re[i + 1] == 'p' && re[i + 2] == '{') {
      const size_t close = re.find('}', i + 3);
      if (close != std::string::npos) {
        const std::string name = re.substr(i, close - i + 1);
        const CollapsedClass* found = nullptr;
        for (const auto& cc : kCollapsedClasses)
          if (name == cc.name) found = &cc;
        if (found) {
          if (!inside) out += '[';
          out += hex_byte(found->code);
          out += found->ascii;
          if (!inside) out += ']';
          i = close;
          continue;
        }
      }
    }
    out += re[i];
  }
  return out;
}

class RegexPreTokenizer final : public PreTokenizer {
 public:
  RegexPreTokenizer(std::vector<std::string> patterns, bool clean_spaces, bool ignore_merges)
      : clean_spaces_(clean_spaces), ignore_merges_(ignore_merges) {
    for (const auto& p : patterns) {
      const std::string collapsed = collapse_pattern(p);
      int err = 0;
      PCRE2_SIZE err_offset = 0;
      pcre2_code* code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(collapsed.data()), collapsed.size(), 0,
                                       &err, &err_offset, nullptr);
      if (!code) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(err, msg, sizeof(msg));
        throw Error("pre-tokenizer regex '" + p + "' does not compile: " + reinterpret_cast<char*>(msg));
      }
      pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional speed-up; the interpreter works too
      codes_.push_back(code);
    }
  }
  ~RegexPreTokenizer() override {
    for (auto* c : codes_) pcre2_code_free(c);
  }
  bool clean_spaces() const override { return clean_spaces_; }
  bool ignore_merges() const override { return ignore_merges_; }

 protected:
  void split_codepoints(PreTokenizerScratch& s) const override {
    const size_t n = s.codepoints.size();
    s.collapsed.resize(n);
    for (size_t i = 0; i < n; ++i) s.collapsed[i] = char(collapse(s.codepoints[i]));
    std::vector<uint32_t> pieces{uint32_t(n)};
    std::vector<uint32_t> next;
    pcre2_match_data* md = pcre2_match_data_create(1, nullptr);
    for (pcre2_code* code : codes_) {
      next.clear();
      size_t start = 0;
      for (uint32_t len : pieces) {
        // Like std::regex_iterator over [start, start+len): unmatched stretches become words too.
        const auto* subject = reinterpret_cast<PCRE2_SPTR>(s.collapsed.data() + start);
        size_t at = 0, last_end = 0;
        while (at < len) {
          const int rc = pcre2_match(code, subject, len, at, 0, md, nullptr);
          if (rc < 0) break;
          const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
          const size_t m0 = ov[0], m1 = ov[1];
          if (m0 > last_end) next.push_back(uint32_t(m0 - last_end));
          if (m1 > m0) next.push_back(uint32_t(m1 - m0));
          last_end = m1;
          at = m1 > m0 ? m1 : m1 + 1;  // never loop on an empty match
        }
        if (last_end < len) next.push_back(uint32_t(len - last_end));
        start += len;
      }
      pieces.swap(next);
    }
    pcre2_match_data_free(md);
    s.lengths.insert(s.lengths.end(), pieces.begin(), pieces.end());
  }

 private:
  std::vector<pcre2_code*> codes_;
  bool clean_spaces_;
  bool ignore_merges_;
};

}  // namespace

std::unique_ptr<PreTokenizer> make_regex_pretokenizer(std::vector<std::string> patterns, bool clean_spaces,
                                                      bool ignore_merges) {
  return std::make_unique<RegexPreTokenizer>(std::move(patterns), clean_spaces, ignore_merges);
}

std::unique_ptr<PreTokenizer> PreTokenizer::create(std::string_view pre) {
  if (pre == "qwen2" || pre == "deepseek-r1-qwen") return make_qwen2_pretokenizer(false);
  if (pre == "qwen35") return make_qwen2_pretokenizer(true);
  if (is_llama3_pre(pre)) return make_llama3_pretokenizer();
  if (pre == "tekken") return make_regex_pretokenizer({kTekkenRegex}, false, true);
  if (is_gpt4o_pre(pre)) return make_regex_pretokenizer({kGpt4oRegex}, false);
  if (pre == "gpt-2") return make_regex_pretokenizer({kGpt2Regex}, true);
  if (pre.empty() || pre == "default")
    return make_regex_pretokenizer(
        {kDefaultPunctuationRegex, kGpt2Regex, kDefaultNumbersRegex, kDefaultDigitTriplesRegex}, true);
  return nullptr;
}

}  // namespace agentkv::tokenizer
