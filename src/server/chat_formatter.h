// Turns an OpenAI chat request (messages, tools, chat_template_kwargs) into a prompt string with
// the model's chat template (GGUF tokenizer.chat_template), or ChatML when the model has none.
#pragma once
#include <mutex>
#include <optional>
#include <string>

#include "server/json_fields.h"
#include "agentkv/chat_template.h"
#include "agentkv/tokenizer.h"

namespace agentkv::server {

class ChatFormatter {
 public:
  // Throws agentkv::Error when the model's template cannot be parsed.
  explicit ChatFormatter(const Tokenizer& tok);
  // With an explicit template source ("" = ChatML).
  ChatFormatter(const Tokenizer& tok, const std::string& source);

  const std::string& template_source() const { return source_; }
  const std::string& bos_token() const { return bos_; }
  const std::string& eos_token() const { return eos_; }

  // Checks body.messages (a non-empty array of {role, content}) and renders the prompt.
  // Content given as an array of {"type": "text", "text": ...} parts is joined with '\n'
  // (llama-server does the same for templates that expect string content).
  // Throws HttpError (invalid_request) for a malformed conversation or a template error.
  std::string apply(const Json& body) const;
  // The leading system messages alone, rendered as history (no generation prompt), when other
  // messages follow them; nullopt otherwise (or when the template fails on them).
  std::optional<std::string> apply_leading_system(const Json& body) const;

 private:
  std::string render(const Json& body, size_t n_messages, bool add_generation_prompt) const;
  std::string source_;
  std::string bos_, eos_;
  bool adds_bos_ = false;  // the tokenizer prepends BOS itself: a leading one in the text is dropped
  bool object_arguments_ = false;  // the template reads tool_calls[].function.arguments as a mapping
  bool harmony_ = false;           // gpt-oss's template: an answer's reasoning_content goes to `thinking`
  ChatTemplate template_;
  mutable std::mutex mutex_;  // rendering is cheap; one at a time keeps the interpreter simple
};

}  // namespace agentkv::server
