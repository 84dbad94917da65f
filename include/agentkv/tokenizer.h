// llama.cpp's tokenizers for the vocabularies a GGUF holds: byte-level BPE (tokenizer.ggml.model
// = "gpt2") with its pre-tokenizers (qwen2, qwen35, llama3, tekken, gpt-2, default) and
// SentencePiece ("llama": Llama 2, Mistral 7B, Phi-3, Gemma); special / added tokens and
// detokenization.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::gguf { class Reader; }

namespace agentkv {

using Token = int32_t;

// llama.cpp's token attribute types (tokenizer.ggml.token_type).
enum class TokenType : int32_t { Undefined = 0, Normal = 1, Unknown = 2, Control = 3,
                                 UserDefined = 4, Unused = 5, Byte = 6 };

// The vocabulary as a GGUF holds it. from_gguf fills every field, with llama.cpp's default for the
// model / pre-tokenizer where the file leaves a key out (e.g. add_bos and add_space_prefix are true
// for SentencePiece, add_bos for llama3 / tekken); a VocabData built by hand is taken as it is.
struct VocabData {
  std::string model = "gpt2";  // tokenizer.ggml.model: "gpt2" (BPE) or "llama" (SentencePiece)
  std::string pre = "qwen2";   // tokenizer.ggml.pre (BPE only)
  std::vector<std::string> tokens;  // GGUF form (byte-level encoded "Ġthe", or SentencePiece "▁the")
  std::vector<TokenType> types;
  std::vector<std::string> merges;  // "a b" (BPE)
  std::vector<float> scores;        // tokenizer.ggml.scores (SentencePiece merges by them; may be empty)
  // -1 = not set. eot is the file's own key only; Tokenizer::eot() also detects it by name.
  Token bos = -1, eos = -1, eot = -1, pad = -1, unk = -1;
  bool add_bos = false;  // tokenizer.ggml.add_bos_token
  bool add_eos = false;  // tokenizer.ggml.add_eos_token
  // tokenizer.ggml.add_space_prefix: SentencePiece prepends a space to the text (after BOS and
  // after every special token), and decode() drops the first token's leading space.
  bool add_space_prefix = false;
  std::string chat_template;
  // general.name: llama.cpp gives some models' special tokens attributes by name (Phi-3's eat
  // the whitespace after them).
  std::string model_name;
};

class Tokenizer {
 public:
  // Throws agentkv::Error naming the file/key for unsupported models or pre-tokenizers.
  static std::unique_ptr<Tokenizer> from_gguf(const gguf::Reader& gguf);
  // Hugging Face tokenizer.json (+ optional tokenizer_config.json for the chat template and
  // bos/eos). Produces the same vocabulary llama.cpp's converter would write.
  static std::unique_ptr<Tokenizer> from_hf_files(const std::string& tokenizer_json,
                                                  const std::string& tokenizer_config_json = "");
  // As above, plus the model's config.json: its bos_token_id / eos_token_id fill what
  // tokenizer_config.json leaves unset (Qwen3's BOS <|endoftext|> is only named there).
  static std::unique_ptr<Tokenizer> from_hf_files(const std::string& tokenizer_json,
                                                  const std::string& tokenizer_config_json,
                                                  const std::string& model_config_json);
  // Validates `data` and builds the tokenizer; throws agentkv::Error (messages start with
  // `source`, e.g. the file name, and name the GGUF key at fault).
  explicit Tokenizer(VocabData data);
  Tokenizer(VocabData data, std::string_view source);
  ~Tokenizer();

  // add_special: prepend BOS / append EOS when the vocab asks for it (add_bos / add_eos).
  // parse_special: recognise special/control token texts (e.g. "<|im_start|>") in the input
  // instead of tokenizing them as plain text.
  std::vector<Token> encode(std::string_view text, bool add_special = false,
                            bool parse_special = true) const;
  // The bytes a token stands for (special tokens render their text only when `special`).
  // Negative ids are image rows (agentkv/vision.h) and have no text; throws agentkv::Error for
  // an id at or above n_vocab.
  std::string token_to_piece(Token id, bool special = true) const;
  // llama.cpp's detokenize (remove_special = false): pieces joined, the first token's leading
  // space dropped when the vocab has add_space_prefix, clean_spaces where the pre-tokenizer asks.
  std::string decode(std::span<const Token> tokens, bool special = true) const;

  int32_t n_vocab() const;
  Token bos() const;
  Token eos() const;
  Token eot() const;
  bool add_bos() const;  // encode(..., add_special=true) prepends bos()
  bool add_eos() const;  // encode(..., add_special=true) appends eos()
  bool is_eog(Token id) const;  // end of generation: eos, eot, <|im_end|>, <|endoftext|>, ...
  const std::vector<Token>& eog_tokens() const;  // all of them, ascending
  bool is_control(Token id) const;
  std::optional<Token> find_token(std::string_view text) const;  // exact GGUF-form lookup
  // Fill-in-the-middle tokens, found by text as llama.cpp does ("<|fim_prefix|>", "<PRE>", ...);
  // -1 where the vocabulary has none.
  struct FimTokens {
    Token pre = -1, suf = -1, mid = -1, pad = -1, rep = -1, sep = -1;
  };
  const FimTokens& fim() const;
  // The vocabulary as given (rebuilt from the compact tables on first use, then kept: callers
  // that only need the template should use chat_template()).
  const VocabData& data() const;
  const std::string& chat_template() const;
  // Heap bytes of the vocabulary tables (texts, index, merges); for memory reports.
  size_t memory_bytes() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentkv
