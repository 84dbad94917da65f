// Renders a model's chat template (the Jinja source in tokenizer.chat_template) with a subset of
// Jinja large enough for Qwen's ChatML templates. docs/chat-template.md lists the subset.
#pragma once
#include <memory>
#include <string>

#include <nlohmann/json.hpp>

namespace agentkv {

// Fields are ordered_json so that `tool | tojson` writes keys in the order the client sent them,
// as Hugging Face (Python dicts) does; nlohmann::json values convert implicitly on assignment.
struct ChatTemplateInputs {
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();  // [{role, content, tool_calls?, ...}]
  nlohmann::ordered_json tools;  // null (no tools: the template sees none) or array of tool definitions
  bool add_generation_prompt = true;
  nlohmann::ordered_json extra_context = nlohmann::ordered_json::object();  // e.g. enable_thinking
  std::string bos_token;  // always defined in the template, "" when the model has none
  std::string eos_token;
};

class ChatTemplate {
 public:
  // Parses the template; throws agentkv::Error with line/column on syntax it does not support.
  explicit ChatTemplate(const std::string& source);
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  // Throws agentkv::Error on a runtime error (e.g. raise_exception in the template).
  std::string render(const ChatTemplateInputs& inputs) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace agentkv
