#include "agentkv/tokenizer.h"

#include <algorithm>
#include <cctype>
#include <mutex>
#include <unordered_map>

#include "agentkv/error.h"
#include "tokenizer/bpe.h"
#include "tokenizer/pretokenizer.h"
#include "tokenizer/special_tokens.h"
#include "tokenizer/spm.h"
#include "tokenizer/string_pool.h"
#include "tokenizer/unicode.h"
#include "tokenizer/vocab_defaults.h"

namespace agentkv {

namespace {

// llama.cpp's token attributes (llama_token_attr), a bit set: the loader adjusts them beyond the
// GGUF token types (e.g. FIM and end-of-turn tokens become control tokens).
enum Attr : uint8_t {
  kAttrUnknown = 1 << 0,
  kAttrUnused = 1 << 1,
  kAttrNormal = 1 << 2,
  kAttrControl = 1 << 3,
  kAttrUserDefined = 1 << 4,
  kAttrByte = 1 << 5,
  kAttrLstrip = 1 << 6,  // the special-token splitter takes the whitespace before it too
  kAttrRstrip = 1 << 7,  // ... after it
};

uint8_t attr_of(TokenType t) {
  switch (t) {
    case TokenType::Unknown: return kAttrUnknown;
    case TokenType::Unused: return kAttrUnused;
    case TokenType::Normal: return kAttrNormal;
    case TokenType::Control: return kAttrControl;
    case TokenType::UserDefined: return kAttrUserDefined;
    case TokenType::Byte: return kAttrByte;
    default: return 0;
  }
}

// Token texts llama.cpp recognises by name when the GGUF does not say (llama_vocab::impl::load).
const std::vector<std::string_view> kEotTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
    "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>"};
const std::vector<std::string_view> kEomTexts = {"<|eom_id|>"};
const std::vector<std::string_view> kFimPreTexts = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                                     "<｜fim▁begin｜>", "<PRE>", "▁<PRE>", "<|code_prefix|>",
                                                     "<|prefix|>"};
const std::vector<std::string_view> kFimSufTexts = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                                     "<｜fim▁hole｜>", "<SUF>", "▁<SUF>", "<|code_suffix|>",
                                                     "<|suffix|>"};
const std::vector<std::string_view> kFimMidTexts = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                                     "<｜fim▁end｜>", "<MID>", "▁<MID>", "<|code_middle|>",
                                                     "<|middle|>"};
const std::vector<std::string_view> kFimPadTexts = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"};
const std::vector<std::string_view> kFimRepTexts = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                                     "<reponame>"};
const std::vector<std::string_view> kFimSepTexts = {"<|file_sep|>"};
const std::vector<std::string_view> kEogTexts = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["};
// gpt-oss: always rendered, never end a turn.
const std::vector<std::string_view> kAlwaysUserDefinedTexts = {"<|channel|>", "<|message|>", "<|start|>",
                                                                "<|constrain|>"};

// SentencePiece writes spaces as U+2581 LOWER ONE EIGHTH BLOCK.
constexpr std::string_view kSpmSpace = "\xE2\x96\x81";

void escape_spaces(std::string_view text, std::string& out) {
  for (char c : text) {
    if (c == ' ')
      out.append(kSpmSpace);
    else
      out.push_back(c);
  }
}

void append_unescaped_spaces(std::string_view text, std::string& out) {
  for (size_t at = 0;;) {
    const size_t next = text.find(kSpmSpace, at);
    if (next == std::string_view::npos) {
      out.append(text.substr(at));
      return;
    }
    out.append(text.substr(at, next - at)).push_back(' ');
    at = next + kSpmSpace.size();
  }
}

// Words longer than this are not worth remembering within one encode call.
constexpr size_t kMaxCachedWordBytes = 64;
constexpr size_t kMaxCachedWords = 1 << 16;

// llama.cpp's clean_spaces pass for gpt2-style vocabularies, three in-place compactions:
// " ?" " !" " ." " ," lose the space; " ' " loses both spaces; " 's" " 'm" " 're" " 've" lose the
// space. Each pass keeps the first byte and looks at the byte before in the pass's input.
void clean_spaces(std::string& t) {
  size_t n = t.size();
  if (n == 0) return;
  size_t w = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) --w;
    t[w++] = x;
  }
  n = w;
  w = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (x == '\'' && i + 1 < n && t[i - 1] == ' ' && t[i + 1] == ' ') {
      --w;
      t[++i] = '\0';  // the space after is dropped (and no longer counts as a space before)
    }
    t[w++] = x;
  }
  n = w;
  w = 1;
  for (size_t i = 1; i < n; ++i) {
    const char x = t[i];
    if (t[i - 1] == ' ' && x == '\'' && i + 1 < n) {
      const char x1 = t[i + 1];
      if (x1 == 's' || x1 == 'm') {
        --w;
      } else if (x1 != 't' && x1 != 'd' && i + 2 < n) {
        const char x2 = t[i + 2];
        if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) --w;
      }
    }
    t[w++] = x;
  }
  t.resize(w);
}

}  // namespace

struct Tokenizer::Impl {
  // Everything but the vocabulary lists (tokens, types, merges), which live compactly below;
  // data() rebuilds the full VocabData only when someone asks for it.
  VocabData data;
  std::string source;  // names the file in error messages
  tokenizer::StringPool texts;  // tokens, with empty ones renamed as llama.cpp does
  tokenizer::StringIndex ids;   // text -> token id
  std::vector<Token> empty_ids;  // tokens whose GGUF text was empty (for data())
  std::vector<uint8_t> types;    // TokenType of each entry of the given token_type list
  std::vector<uint8_t> attrs;
  Tokenizer::FimTokens fim;
  tokenizer::VocabKind kind = tokenizer::VocabKind::Bpe;
  tokenizer::BpeModel bpe;
  std::unique_ptr<tokenizer::PreTokenizer> pre;  // BPE only
  bool clean_spaces = false;   // decode's clean-up pass (BPE pre-tokenizers that ask for it)
  bool ignore_merges = false;  // BPE: a whole word that is a token skips the merges
  tokenizer::SpmModel spm;
  tokenizer::SpecialTokenMatcher specials;
  std::vector<Token> eog;  // sorted
  Token eot = -1;          // effective: the GGUF's, else detected by name
  mutable std::once_flag full_data_once;
  mutable std::unique_ptr<VocabData> full_data;

  [[noreturn]] void fail(const std::string& what) const { throw Error(source + ": " + what); }
  Token find(std::string_view text) const { return ids.find(texts, text); }
  Token find_first(const std::vector<std::string_view>& names) const {
    for (auto name : names)
      if (Token t = find(name); t >= 0) return t;
    return -1;
  }
  void build();
  void assign_attributes();
  void assign_strip_attributes();
  // Appends token_to_piece(id, special = true): pieces are rendered on demand, which costs less
  // than keeping another copy of the vocabulary.
  void append_piece(Token id, std::string& out) const;
  void check_id(Token id) const {
    if (id < 0 || id >= Token(texts.size()))
      throw Error("token id " + std::to_string(id) + " is outside the vocabulary (" + std::to_string(texts.size()) +
                  " tokens)");
  }
  void encode_text(std::string_view text, std::vector<Token>& out, tokenizer::PreTokenizerScratch& pre_scratch,
                   tokenizer::BpeScratch& bpe_scratch, std::unordered_map<std::string, std::pair<uint32_t, uint32_t>>& cache,
                   std::vector<Token>& cache_pool) const;
  // llama.cpp's SentencePiece encode: a space before the text at the start and after every
  // special token (add_space_prefix), spaces written as "▁", then the score-ordered merges.
  void encode_spm(std::string_view text, const std::vector<tokenizer::Fragment>& fragments,
                  std::vector<Token>& out) const;
};

void Tokenizer::Impl::build() {
  const auto defaults = tokenizer::vocab_defaults(data.model, data.pre);
  if (!defaults)
    fail("tokenizer.ggml.model is '" + data.model +
         "'; only 'gpt2' (byte-level BPE) and 'llama' (SentencePiece) are supported");
  kind = defaults->kind;
  if (kind == tokenizer::VocabKind::Bpe) {
    pre = tokenizer::PreTokenizer::create(data.pre);
    if (!pre)
      fail("tokenizer.ggml.pre is '" + data.pre +
           "'; supported pre-tokenizers: qwen2, deepseek-r1-qwen, qwen35, llama-bpe (llama3, llama-v3, falcon3, "
           "falcon-h1, pixtral, midm-2.0, lfm2, jina-v5-nano), tekken, gpt-4o (llama4, kanana2, talkie), gpt-2, "
           "default");
    clean_spaces = pre->clean_spaces();
    ignore_merges = pre->ignore_merges();
  }
  const size_t n = data.tokens.size();
  if (n == 0) fail("tokenizer.ggml.tokens is empty");
  if (n > size_t(INT32_MAX)) fail("tokenizer.ggml.tokens has too many entries");
  if (data.types.empty()) data.types.assign(n, TokenType::Normal);
  if (data.types.size() < n)
    fail("tokenizer.ggml.token_type has " + std::to_string(data.types.size()) + " entries for " +
         std::to_string(n) + " tokens");

  size_t n_bytes = 0;
  for (const std::string& t : data.tokens) n_bytes += t.size();
  texts.reserve(n, n_bytes);
  ids.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (data.tokens[i].empty()) {
      texts.add("[EMPTY_" + std::to_string(i) + "]");
      empty_ids.push_back(Token(i));
    } else {
      texts.add(data.tokens[i]);
    }
    if (const int32_t earlier = ids.insert(texts, uint32_t(i)); earlier >= 0)
      fail("tokenizer.ggml.tokens: duplicate token '" + std::string(texts[i]) + "' at ids " +
           std::to_string(earlier) + " and " + std::to_string(i));
  }
  if (kind == tokenizer::VocabKind::Bpe) {
    bpe = tokenizer::BpeModel(texts, ids, data.merges);
  } else {
    if (!data.scores.empty() && data.scores.size() < n)
      fail("tokenizer.ggml.scores has " + std::to_string(data.scores.size()) + " entries for " +
           std::to_string(n) + " tokens");
    spm = tokenizer::SpmModel(texts, ids, std::move(data.scores));
    data.scores.clear();
  }
  types.resize(data.types.size());
  for (size_t i = 0; i < data.types.size(); ++i) {
    const auto t = int32_t(data.types[i]);
    types[i] = uint8_t(t >= 0 && t <= int32_t(TokenType::Byte) ? t : 0);
  }

  // Special ids outside the vocabulary are ignored, as llama.cpp does (with a warning there).
  for (Token* id : {&data.bos, &data.eos, &data.eot, &data.pad, &data.unk})
    if (*id < -1 || *id >= Token(n)) *id = -1;
  if (data.add_bos && data.bos < 0)
    fail("tokenizer.ggml.add_bos_token is true, but tokenizer.ggml.bos_token_id is not set");
  if (data.add_eos && data.eos < 0)
    fail("tokenizer.ggml.add_eos_token is true, but tokenizer.ggml.eos_token_id is not set");

  assign_attributes();

  // Control, user-defined and unknown tokens are matched in the text, longest first.
  std::vector<Token> special_ids;
  for (size_t i = 0; i < n; ++i)
    if (attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) special_ids.push_back(Token(i));
  std::stable_sort(special_ids.begin(), special_ids.end(),
                   [&](Token a, Token b) { return texts[a].size() > texts[b].size(); });
  std::vector<tokenizer::SpecialTokenMatcher::Entry> entries;
  for (Token id : special_ids)
    entries.push_back({id, std::string(texts[id]), (attrs[id] & (kAttrControl | kAttrUnknown)) != 0,
                       (attrs[id] & kAttrLstrip) != 0, (attrs[id] & kAttrRstrip) != 0});
  specials = tokenizer::SpecialTokenMatcher(std::move(entries));

  texts.shrink_to_fit();
  // The lists now live in the compact structures above.
  std::vector<std::string>().swap(data.tokens);
  if (kind == tokenizer::VocabKind::Bpe) std::vector<std::string>().swap(data.merges);  // SPM keeps its (unused) list
  std::vector<TokenType>().swap(data.types);
}

void Tokenizer::Impl::assign_attributes() {
  const size_t n = texts.size();
  attrs.resize(n);
  for (size_t i = 0; i < n; ++i) attrs[i] = attr_of(data.types[i]);  // before types are stored compactly
  auto make_control = [&](Token t) {
    if (t >= 0) attrs[t] |= kAttrControl;
  };

  eot = data.eot >= 0 ? data.eot : find_first(kEotTexts);
  make_control(eot);
  const Token eom = find_first(kEomTexts);
  make_control(eom);
  fim.pre = find_first(kFimPreTexts);
  fim.suf = find_first(kFimSufTexts);
  fim.mid = find_first(kFimMidTexts);
  fim.pad = find_first(kFimPadTexts);
  fim.rep = find_first(kFimRepTexts);
  fim.sep = find_first(kFimSepTexts);
  for (Token t : {fim.pre, fim.suf, fim.mid, fim.pad, fim.rep, fim.sep}) make_control(t);
  const Token fim_pad = fim.pad, fim_rep = fim.rep, fim_sep = fim.sep;

  for (size_t i = 0; i < n; ++i)
    if ((attrs[i] & kAttrControl) && texts[i].find("unused") != std::string::npos) attrs[i] |= kAttrUnused;

  std::vector<Token> end_ids = {fim_pad, fim_rep, fim_sep, data.eos, eot, eom};
  for (auto name : kEogTexts) {
    const Token t = find(name);
    make_control(t);
    end_ids.push_back(t);
  }
  for (auto name : kAlwaysUserDefinedTexts)
    if (Token t = find(name); t >= 0) attrs[t] = kAttrUserDefined;
  // o200k_harmony / solar-open: "<|end|>" ends a message, not the generation.
  const Token end = find("<|end|>");
  const bool has_return = find("<|return|>") >= 0, has_call = find("<|call|>") >= 0 || find("<|calls|>") >= 0,
             has_flush = find("<|flush|>") >= 0;
  if (end >= 0 && has_call && (has_return || has_flush)) {
    std::erase(end_ids, end);
    attrs[end] = kAttrUserDefined;
  }
  // gemma4 / paddleocr: "</s>" is not an end token next to "<|tool_response>".
  if (const Token s = find("</s>"); s >= 0 && find("<|tool_response>") >= 0) {
    std::erase(end_ids, s);
    attrs[s] = kAttrNormal;
  }
  for (Token t : end_ids)
    if (t >= 0) eog.push_back(t);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  assign_strip_attributes();
}

void Tokenizer::Impl::assign_strip_attributes() {
  // llama.cpp sets these by general.name; of its rules only Phi-3's concerns a vocabulary agentkv
  // loads (the others are BERT-family masks). Phi-3's chat template puts "\n" after its special
  // tokens, which the model never saw as tokens.
  std::string name = data.model_name;
  for (char& c : name) c = char(std::tolower(uint8_t(c)));
  if (name.find("phi-3") == std::string::npos && name.find("phi3") == std::string::npos) return;
  for (size_t i = 0; i < texts.size(); ++i)
    if (attrs[i] & (kAttrControl | kAttrUserDefined | kAttrUnknown)) attrs[i] |= kAttrRstrip;
  if (const Token t = find("</s>"); t >= 0) attrs[t] |= kAttrRstrip;
  for (std::string_view text : {"<unk>", "<s>", "<|endoftext|>"})
    if (const Token t = find(text); t >= 0) attrs[t] &= uint8_t(~kAttrRstrip);
}

void Tokenizer::Impl::append_piece(Token id, std::string& out) const {
  const uint8_t attr = attrs[id];
  const std::string_view text = texts[id];
  if (attr & (kAttrUnknown | kAttrControl | kAttrUserDefined)) {
    out.append(text);
    return;
  }
  if ((attr & kAttrNormal) && kind == tokenizer::VocabKind::Spm) {
    append_unescaped_spaces(text, out);
    return;
  }
  if (attr & kAttrNormal) {
    // Fast path: the byte-level alphabet is ASCII and two-byte UTF-8 characters.
    const size_t start = out.size();
    for (size_t i = 0; i < text.size();) {
      const auto b0 = uint8_t(text[i]);
      uint32_t cp;
      if (b0 < 0x80) {
        cp = b0;
        i += 1;
      } else if ((b0 & 0xE0) == 0xC0 && i + 1 < text.size() && (uint8_t(text[i + 1]) & 0xC0) == 0x80) {
        cp = (uint32_t(b0 & 0x1F) << 6) | (uint8_t(text[i + 1]) & 0x3F);
        i += 2;
      } else {
        break;  // anything else: the general path below
      }
      const int byte = unicode::codepoint_to_byte(cp);
      if (byte < 0) break;
      out.push_back(char(byte));
      if (i == text.size()) return;
    }
    if (text.empty()) return;
    out.resize(start);
    // Byte-level decoding; a character outside the mapping is spelled out as llama.cpp does.
    std::vector<uint32_t> cps;
    unicode::decode_utf8(text, cps);
    for (uint32_t cp : cps) {
      const int byte = unicode::codepoint_to_byte(cp);
      if (byte >= 0) {
        out.push_back(char(byte));
        continue;
      }
      std::string utf8;
      unicode::append_utf8(cp, utf8);
      static const char* hex = "0123456789abcdef";
      out += "[UNK_BYTE_0x";
      for (char c : utf8) {
        out.push_back(hex[uint8_t(c) >> 4]);
        out.push_back(hex[uint8_t(c) & 15]);
      }
      out.append(text).append("]");
    }
    return;
  }
  if (attr & kAttrByte) {  // "<0xXX>"
    if (text.size() == 6 && text.compare(0, 3, "<0x") == 0)
      out.push_back(char(std::strtol(std::string(text.substr(3, 2)).c_str(), nullptr, 16)));
    return;
  }
  // unused / undefined tokens render as nothing
}

void Tokenizer::Impl::encode_text(std::string_view text, std::vector<Token>& out,
                                  tokenizer::PreTokenizerScratch& pre_scratch, tokenizer::BpeScratch& bpe_scratch,
                                  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>>& cache,
                                  std::vector<Token>& cache_pool) const {
  std::vector<std::string_view> words;
  pre->split(text, pre_scratch, words);
  for (std::string_view word : words) {
    const bool cacheable = word.size() <= kMaxCachedWordBytes;
    std::string key;
    if (cacheable) {
      key.assign(word);
      if (auto it = cache.find(key); it != cache.end()) {
        out.insert(out.end(), cache_pool.begin() + it->second.first,
                   cache_pool.begin() + it->second.first + it->second.second);
        continue;
      }
    }
    const size_t first = out.size();
    if (ignore_merges) {
      std::string byte_level;
      for (char c : word) byte_level += unicode::byte_to_utf8(uint8_t(c));
      if (const Token whole = find(byte_level); whole >= 0) out.push_back(whole);
    }
    if (out.size() == first) bpe.encode_word(word, bpe_scratch, out);
    if (cacheable && cache.size() < kMaxCachedWords) {
      cache.emplace(std::move(key), std::make_pair(uint32_t(cache_pool.size()), uint32_t(out.size() - first)));
      cache_pool.insert(cache_pool.end(), out.begin() + first, out.end());
    }
  }
}

void Tokenizer::Impl::encode_spm(std::string_view text, const std::vector<tokenizer::Fragment>& fragments,
                                 std::vector<Token>& out) const {
  tokenizer::SpmScratch scratch;
  std::string escaped;
  bool after_special = true;  // the start of the text counts as after a special token
  for (const auto& f : fragments) {
    if (f.token >= 0) {
      out.push_back(f.token);
      after_special = true;
      continue;
    }
    escaped.clear();
    if (data.add_space_prefix && after_special) escaped.append(kSpmSpace);
    escape_spaces(text.substr(f.begin, f.end - f.begin), escaped);
    spm.encode(escaped, texts, ids, scratch, out);
    after_special = false;
  }
}

// ---------------------------------------------------------------------------------------------

Tokenizer::Tokenizer(VocabData data) : Tokenizer(std::move(data), "vocabulary") {}

Tokenizer::Tokenizer(VocabData data, std::string_view source) : impl_(std::make_unique<Impl>()) {
  impl_->data = std::move(data);
  impl_->source = source;
  impl_->build();
}

Tokenizer::~Tokenizer() = default;

std::vector<Token> Tokenizer::encode(std::string_view text, bool add_special, bool parse_special) const {
  const Impl& m = *impl_;
  std::vector<Token> out;
  if (add_special && m.data.add_bos) out.push_back(m.data.bos);
  std::vector<tokenizer::Fragment> fragments;
  m.specials.partition(text, parse_special, fragments);
  if (m.kind == tokenizer::VocabKind::Spm) {
    m.encode_spm(text, fragments, out);
    if (add_special && m.data.add_eos) out.push_back(m.data.eos);
    return out;
  }
  tokenizer::PreTokenizerScratch pre_scratch;
  tokenizer::BpeScratch bpe_scratch;
  std::unordered_map<std::string, std::pair<uint32_t, uint32_t>> cache;
  std::vector<Token> cache_pool;
  out.reserve(out.size() + text.size() / 3);
  for (const auto& f : fragments) {
    if (f.token >= 0)
      out.push_back(f.token);
    else
      m.encode_text(text.substr(f.begin, f.end - f.begin), out, pre_scratch, bpe_scratch, cache, cache_pool);
  }
  if (add_special && m.data.add_eos) out.push_back(m.data.eos);
  return out;
}

std::string Tokenizer::token_to_piece(Token id, bool special) const {
  const Impl& m = *impl_;
  std::string piece;
  if (id < 0) return piece;  // an image row (agentkv/vision.h image_row_token): no text
  m.check_id(id);
  if (!special && (m.attrs[id] & (kAttrControl | kAttrUnknown))) return piece;
  m.append_piece(id, piece);
  return piece;
}

std::string Tokenizer::decode(std::span<const Token> tokens, bool special) const {
  const Impl& m = *impl_;
  std::string text;
  // add_space_prefix: the space encode() put before the text goes again, from the first token
  // only (whatever it is, as llama.cpp's detokenize does).
  bool drop_leading_space = m.data.add_space_prefix;
  for (Token t : tokens) {
    if (t < 0) continue;  // image rows have no text
    m.check_id(t);
    const size_t start = text.size();
    if (special || !(m.attrs[t] & (kAttrControl | kAttrUnknown))) m.append_piece(t, text);
    if (drop_leading_space && text.size() > start && text[start] == ' ') text.erase(start, 1);
    drop_leading_space = false;
  }
  if (!m.clean_spaces) return text;
  clean_spaces(text);
  return text;
}

int32_t Tokenizer::n_vocab() const { return int32_t(impl_->texts.size()); }
Token Tokenizer::bos() const { return impl_->data.bos; }
Token Tokenizer::eos() const { return impl_->data.eos; }
Token Tokenizer::eot() const { return impl_->eot; }
bool Tokenizer::add_bos() const { return impl_->data.add_bos; }
bool Tokenizer::add_eos() const { return impl_->data.add_eos; }

bool Tokenizer::is_eog(Token id) const {
  return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}

const std::vector<Token>& Tokenizer::eog_tokens() const { return impl_->eog; }

bool Tokenizer::is_control(Token id) const {
  return id >= 0 && id < n_vocab() && (impl_->attrs[id] & kAttrControl);
}

const Tokenizer::FimTokens& Tokenizer::fim() const { return impl_->fim; }

std::optional<Token> Tokenizer::find_token(std::string_view text) const {
  const Token t = impl_->find(text);
  if (t < 0) return std::nullopt;
  return t;
}

const VocabData& Tokenizer::data() const {
  const Impl& m = *impl_;
  std::call_once(m.full_data_once, [&m] {
    auto full = std::make_unique<VocabData>(m.data);
    full->tokens.reserve(m.texts.size());
    for (size_t i = 0; i < m.texts.size(); ++i) full->tokens.emplace_back(m.texts[i]);
    for (Token id : m.empty_ids) full->tokens[size_t(id)].clear();
    full->types.reserve(m.types.size());
    for (uint8_t t : m.types) full->types.push_back(TokenType(t));
    if (m.kind == tokenizer::VocabKind::Bpe)
      full->merges = m.bpe.merge_lines(m.texts);
    else
      full->scores = m.spm.scores();
    m.full_data = std::move(full);
  });
  return *m.full_data;
}

const std::string& Tokenizer::chat_template() const { return impl_->data.chat_template; }

size_t Tokenizer::memory_bytes() const {
  const Impl& m = *impl_;
  return m.texts.memory_bytes() + m.ids.memory_bytes() + m.bpe.memory_bytes() + m.spm.memory_bytes() +
         m.types.capacity() + m.attrs.capacity() + m.empty_ids.capacity() * sizeof(Token);
}

}  // namespace agentkv
