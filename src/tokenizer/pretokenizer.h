// Pre-tokenizers: split a text fragment into the words that BPE merges within, exactly as
// llama.cpp's unicode_regex_split does for the supported tokenizer.ggml.pre values.
#pragma once
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::tokenizer {

// Reusable buffers for one encode call (keeps the hot loop free of allocations).
struct PreTokenizerScratch {
  std::string normalized;             // the fragment re-encoded, when it is not clean UTF-8
  std::vector<uint32_t> codepoints;
  std::vector<uint32_t> byte_offsets;  // byte offset of each code point, plus the end
  std::vector<uint32_t> lengths;       // word lengths in code points
  std::vector<uint8_t> classes;        // hand-written splitter: class of each code point
  std::string collapsed;               // regex splitter: one byte per code point
};

class PreTokenizer {
 public:
  // The pre-tokenizer for a tokenizer.ggml.pre value ("" = missing = "default"); nullptr when
  // the value is not supported.
  static std::unique_ptr<PreTokenizer> create(std::string_view pre);
  virtual ~PreTokenizer() = default;

  // Splits `text` into words (UTF-8 bytes). Like llama.cpp, invalid UTF-8 bytes become U+FFFD,
  // so a view may point into scratch.normalized instead of `text`; views stay valid until the
  // next call with the same scratch.
  void split(std::string_view text, PreTokenizerScratch& scratch, std::vector<std::string_view>& words) const;
  // Convenience for tests and tools.
  std::vector<std::string> split(std::string_view text) const;

  // Whether decode() should apply llama.cpp's clean_spaces pass for this pre-tokenizer.
  virtual bool clean_spaces() const = 0;
  // llama.cpp's ignore_merges (Llama 3, tekken): a word that is itself a token is that token,
  // whatever the merges would make of it.
  virtual bool ignore_merges() const { return false; }

 protected:
  // Word lengths (in code points) covering cps[0, n) in order.
  virtual void split_codepoints(PreTokenizerScratch& scratch) const = 0;
};

// The Qwen2 regex (and Qwen3.5's variant that also keeps combining marks with letters), matched
// by hand with the regex's exact leftmost-first semantics:
//   (?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}|
//    ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+
std::unique_ptr<PreTokenizer> make_qwen2_pretokenizer(bool marks_join_letters);
// Llama 3's regex (tokenizer.ggml.pre "llama-bpe" and the names llama.cpp gives the same
// pre-tokenizer): Qwen2's, but digits go in runs of up to three (\p{N}{1,3}). Decoding cleans
// spaces and whole-word tokens skip the merges, as llama.cpp does for these vocabularies.
std::unique_ptr<PreTokenizer> make_llama3_pretokenizer();
// Whether llama.cpp maps a tokenizer.ggml.pre value to its Llama 3 pre-tokenizer.
bool is_llama3_pre(std::string_view pre);
// Whether llama.cpp maps it to its GPT-4o (o200k: gpt-oss, Llama 4) pre-tokenizer, a regex run by
// PCRE2 (below) without clean_spaces or ignore_merges.
bool is_gpt4o_pre(std::string_view pre);

// A list of regexes applied one after the other, each splitting the previous one's words, run by
// PCRE2 over llama.cpp's "collapsed" text (one byte per code point standing for its class).
// Throws agentkv::Error if a pattern does not compile.
std::unique_ptr<PreTokenizer> make_regex_pretokenizer(std::vector<std::string> patterns, bool clean_spaces,
                                                      bool ignore_merges = false);

}  // namespace agentkv::tokenizer
