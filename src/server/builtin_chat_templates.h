// Chat templates known by name (`--chat-template NAME`), as llama.cpp's built-in formats render
// them: for models whose GGUF carries no template, or a wrong one.
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace agentkv::server {

// The Jinja source of a named template; nullopt for an unknown name.
std::optional<std::string> builtin_chat_template(std::string_view name);
// Every known name, sorted (for --help and error messages).
std::vector<std::string> builtin_chat_template_names();

}  // namespace agentkv::server
