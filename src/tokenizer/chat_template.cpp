#include "agentkv/chat_template.h"

#include "agentkv/error.h"
#include "tokenizer/jinja_interpreter.h"
#include "tokenizer/jinja_json.h"
#include "tokenizer/jinja_lexer.h"
#include "tokenizer/jinja_parser.h"

namespace agentkv {

struct ChatTemplate::Impl {
  jinja::LexedTemplate lexed;
  jinja::SourceMap map;
  jinja::Body body;

  explicit Impl(const std::string& source)
      : lexed(jinja::tokenize(source)), map(lexed.source), body(jinja::parse(lexed, map)) {}
};

ChatTemplate::ChatTemplate(const std::string& source) : impl_(std::make_unique<Impl>(source)) {}
ChatTemplate::~ChatTemplate() = default;
ChatTemplate::ChatTemplate(ChatTemplate&&) noexcept = default;
ChatTemplate& ChatTemplate::operator=(ChatTemplate&&) noexcept = default;

std::string ChatTemplate::render(const ChatTemplateInputs& inputs) const {
  if (!inputs.extra_context.is_object()) throw Error("chat template input: extra_context must be a JSON object");
  // The variables Hugging Face's apply_chat_template passes; extra context first so that it
  // cannot replace the conversation itself.
  std::vector<std::pair<std::string, jinja::Value>> context;
  for (const auto& [key, value] : inputs.extra_context.items()) context.emplace_back(key, jinja::value_from_json(value));
  context.emplace_back("bos_token", jinja::Value(inputs.bos_token));
  context.emplace_back("eos_token", jinja::Value(inputs.eos_token));
  context.emplace_back("messages", jinja::value_from_json(inputs.messages));
  context.emplace_back("tools", jinja::value_from_json(inputs.tools));
  context.emplace_back("add_generation_prompt", jinja::Value(inputs.add_generation_prompt));
  jinja::Interpreter interpreter(impl_->map);
  return interpreter.render(impl_->body, context);
}

}  // namespace agentkv
