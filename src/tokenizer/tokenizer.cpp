// Temporary skeleton: every entry point exists so the library links; the real tokenizer follows.
#include "tokenizer/tokenizer.h"

#include "core/error.h"

namespace agentkv {

struct Tokenizer::Impl {
  VocabData data;
};

std::unique_ptr<Tokenizer> Tokenizer::from_gguf(const gguf::Reader&) {
  throw Error("tokenizer: GGUF loading not implemented yet");
}
std::unique_ptr<Tokenizer> Tokenizer::from_hf_files(const std::string&, const std::string&) {
  throw Error("tokenizer: tokenizer.json loading not implemented yet");
}
Tokenizer::Tokenizer(VocabData data) : impl_(std::make_unique<Impl>()) { impl_->data = std::move(data); }
Tokenizer::~Tokenizer() = default;
std::vector<Token> Tokenizer::encode(std::string_view, bool, bool) const {
  throw Error("tokenizer: encode not implemented yet");
}
std::string Tokenizer::token_to_piece(Token, bool) const { return {}; }
std::string Tokenizer::decode(std::span<const Token>, bool) const { return {}; }
int32_t Tokenizer::n_vocab() const { return static_cast<int32_t>(impl_->data.tokens.size()); }
Token Tokenizer::bos() const { return impl_->data.bos; }
Token Tokenizer::eos() const { return impl_->data.eos; }
Token Tokenizer::eot() const { return impl_->data.eot; }
bool Tokenizer::is_eog(Token id) const { return id == impl_->data.eos || id == impl_->data.eot; }
bool Tokenizer::is_control(Token) const { return false; }
std::optional<Token> Tokenizer::find_token(std::string_view) const { return std::nullopt; }
const VocabData& Tokenizer::data() const { return impl_->data; }

}  // namespace agentkv
