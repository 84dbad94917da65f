#include "server/builtin_chat_templates.h"

#include <map>

namespace agentkv::server {

namespace {

// Each renders what llama.cpp's llm_chat_apply_template writes for the format of that name
// (src/llama-chat.cpp). No whitespace control next to literal newlines: they are part of the
// format.
const std::map<std::string, std::string, std::less<>>& templates() {
  static const std::map<std::string, std::string, std::less<>> kTemplates = {
      {"chatml",
       "{% for message in messages %}<|im_start|>{{ message.role }}\n{{ message.content }}<|im_end|>\n{% endfor %}"
       "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"},
      {"llama3",
       "{% for message in messages %}<|start_header_id|>{{ message.role }}<|end_header_id|>\n\n"
       "{{ message.content | trim }}<|eot_id|>{% endfor %}"
       "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n{% endif %}"},
      // Cohere's turn tokens; roles other than system / user / assistant are left out.
      {"command-r",
       "{% for message in messages %}"
       "{% if message.role == 'system' %}<|START_OF_TURN_TOKEN|><|SYSTEM_TOKEN|>{{ message.content | trim }}<|END_OF_TURN_TOKEN|>"
       "{% elif message.role == 'user' %}<|START_OF_TURN_TOKEN|><|USER_TOKEN|>{{ message.content | trim }}<|END_OF_TURN_TOKEN|>"
       "{% elif message.role == 'assistant' %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{{ message.content | trim }}<|END_OF_TURN_TOKEN|>"
       "{% endif %}{% endfor %}"
       "{% if add_generation_prompt %}<|START_OF_TURN_TOKEN|><|CHATBOT_TOKEN|>{% endif %}"},
      {"phi3",
       "{% for message in messages %}<|{{ message.role }}|>\n{{ message.content }}<|end|>\n{% endfor %}"
       "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"},
      {"phi4",
       "{% for message in messages %}<|im_start|>{{ message.role }}<|im_sep|>{{ message.content }}<|im_end|>{% endfor %}"
       "{% if add_generation_prompt %}<|im_start|>assistant<|im_sep|>{% endif %}"},
      {"falcon3",
       "{% for message in messages %}<|{{ message.role }}|>\n{{ message.content }}\n{% endfor %}"
       "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"},
      {"zephyr",
       "{% for message in messages %}<|{{ message.role }}|>\n{{ message.content }}<|endoftext|>\n{% endfor %}"
       "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"},
      // Gemma has no system turn: system text goes before the next user message's.
      {"gemma",
       "{% set ns = namespace(system='') %}{% for message in messages %}"
       "{% if message.role == 'system' %}{% set ns.system = ns.system + (message.content | trim) %}"
       "{% else %}{% set role = 'model' if message.role == 'assistant' else message.role %}"
       "<start_of_turn>{{ role }}\n"
       "{% if ns.system != '' and role != 'model' %}{{ ns.system }}\n\n{% set ns.system = '' %}{% endif %}"
       "{{ message.content | trim }}<end_of_turn>\n{% endif %}{% endfor %}"
       "{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"},
  };
  return kTemplates;
}

}  // namespace

std::optional<std::string> builtin_chat_template(std::string_view name) {
  const auto it = templates().find(name);
  if (it == templates().end()) return std::nullopt;
  return it->second;
}

std::vector<std::string> builtin_chat_template_names() {
  std::vector<std::string> names;
  for (const auto& [name, source] : templates()) names.push_back(name);
  return names;
}

}  // namespace agentkv::server
