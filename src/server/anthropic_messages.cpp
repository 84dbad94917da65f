#include "server/image_parts.h"
#include "server/anthropic_messages.h"

#include <set>

#include "server/json_fields.h"
#include "server/tool_calls.h"

namespace agentkv::server {

namespace {

// Fields of the Anthropic API agentkv reads, and agentkv / llama-server extensions passed on to
// the chat request as they are (the chat endpoint checks them).
const std::set<std::string> kMessageFields = {"model",       "messages", "system", "max_tokens",  "metadata",
                                              "stop_sequences", "stream", "temperature", "top_k", "top_p",
                                              "tools",       "tool_choice", "thinking", "service_tier"};
const std::set<std::string> kPassedOn = {"seed",       "session_id",       "cache_salt",       "cache_prompt",
                                         "id_slot",    "min_p",            "repeat_penalty",   "repeat_last_n",
                                         "presence_penalty", "frequency_penalty", "chat_template_kwargs",
                                         "reasoning_format", "timings_per_token"};
// count_tokens takes the prompt fields only; max_tokens and sampling are accepted and unused
// (clients reuse their message request).
const std::set<std::string> kCountFields = {"model",    "messages",    "system", "tools",      "tool_choice",
                                            "thinking", "max_tokens",  "metadata", "stop_sequences", "stream",
                                            "temperature", "top_k", "top_p", "service_tier"};

const Json& member(const Json& obj, const char* key) {
  static const Json kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::string block_type(const Json& block, const std::string& where) {
  if (!block.is_object()) throw invalid_request(where + " must be an object");
  const Json& type = member(block, "type");
  if (!type.is_string()) throw invalid_request(where + ".type must be a string");
  return type.get<std::string>();
}

std::string text_of(const Json& block, const std::string& where) {
  const Json& text = member(block, "text");
  if (!text.is_string()) throw invalid_request(where + ".text must be a string");
  return text.get<std::string>();
}

[[noreturn]] void unsupported_block(const std::string& type, const std::string& where) {
  if (type == "image" || type == "document")
    throw invalid_request(where + ": content blocks of type '" + type + "' are not supported here");
  throw invalid_request(where + ": unknown content block type '" + type + "'");
}

// An image block ({"type": "image", "source": {"type": "base64", "media_type": "image/png",
// "data": "..."}}) as the OpenAI image part the chat path reads.
Json image_block_part(const Json& block, const std::string& where) {
  const Json& source = member(block, "source");
  if (!source.is_object()) throw invalid_request(where + ": an image block's source must be an object");
  const Json& kind = member(source, "type");
  if (kind == "url")
    throw invalid_request(where + ": image URLs are not fetched (agentkv reaches nothing on the network): send the "
                          "image as base64");
  if (kind != "base64") throw invalid_request(where + ": an image block's source.type must be 'base64'");
  const Json& media = member(source, "media_type");
  const Json& data = member(source, "data");
  if (!media.is_string() || !data.is_string())
    throw invalid_request(where + ": an image block's source needs a media_type and base64 data");
  return image_part("data:" + media.get<std::string>() + ";base64," + data.get<std::string>());
}

void append(std::string& to, const std::string& text) {
  if (!to.empty() && !text.empty()) to += '\n';
  to += text;
}

// A string or an array of text blocks (system, tool_result content).
std::string text_or_text_blocks(const Json& value, const std::string& where) {
  if (value.is_null()) return "";
  if (value.is_string()) return value.get<std::string>();
  if (!value.is_array()) throw invalid_request(where + " must be a string or an array of text blocks");
  std::string text;
  for (size_t i = 0; i < value.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const std::string type = block_type(value[i], at);
    if (type != "text") unsupported_block(type, at);
    append(text, text_of(value[i], at));
  }
  return text;
}

void convert_user(const Json& content, const std::string& where, Json& out) {
  if (content.is_string()) {
    out.push_back(Json{{"role", "user"}, {"content", content}});
    return;
  }
  // tool_result blocks answer the previous assistant turn's calls: tool messages, in order,
  // before the user's own text (the order OpenAI-style templates expect).
  std::string text;
  bool has_text = false;
  Json parts = Json::array();  // text and images, once an image comes
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    const Json& block = content[i];
    const std::string type = block_type(block, at);
    if (type == "text") {
      append(text, text_of(block, at));
      has_text = true;
    } else if (type == "image") {
      if (!text.empty()) parts.push_back(Json{{"type", "text"}, {"text", text}});
      text.clear();
      parts.push_back(image_block_part(block, at));
      has_text = true;
    } else if (type == "tool_result") {
      const Json& id = member(block, "tool_use_id");
      if (!id.is_string() || id.get<std::string>().empty())
        throw invalid_request(at + ".tool_use_id must be a non-empty string");
      std::string result = text_or_text_blocks(member(block, "content"), at + ".content");
      const Json& is_error = member(block, "is_error");
      if (!is_error.is_null() && !is_error.is_boolean()) throw invalid_request(at + ".is_error must be a boolean");
      if (is_error.is_boolean() && is_error.get<bool>()) result = "Error: " + result;
      out.push_back(Json{{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
    } else if (type == "tool_use" || type == "thinking" || type == "redacted_thinking") {
      throw invalid_request(at + ": '" + type + "' blocks belong to assistant messages");
    } else {
      unsupported_block(type, at);
    }
  }
  if (!parts.empty()) {
    if (!text.empty()) parts.push_back(Json{{"type", "text"}, {"text", text}});
    out.push_back(Json{{"role", "user"}, {"content", parts}});
  } else if (has_text) {
    out.push_back(Json{{"role", "user"}, {"content", text}});
  }
}

void convert_assistant(const Json& content, const std::string& where, Json& out) {
  Json msg{{"role", "assistant"}};
  if (content.is_string()) {
    msg["content"] = content;
    out.push_back(msg);
    return;
  }
  std::string text, reasoning;
  Json calls = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + ".content[" + std::to_string(i) + "]";
    const Json& block = content[i];
    const std::string type = block_type(block, at);
    if (type == "text") {
      append(text, text_of(block, at));
    } else if (type == "thinking") {
      const Json& thinking = member(block, "thinking");
      if (!thinking.is_string()) throw invalid_request(at + ".thinking must be a string");
      append(reasoning, thinking.get<std::string>());
    } else if (type == "redacted_thinking") {
      // another model's encrypted reasoning: nothing a local template can render
    } else if (type == "tool_use") {
      const Json& id = member(block, "id");
      const Json& name = member(block, "name");
      const Json& input = member(block, "input");
      if (!id.is_string() || id.get<std::string>().empty()) throw invalid_request(at + ".id must be a non-empty string");
      if (!name.is_string() || name.get<std::string>().empty())
        throw invalid_request(at + ".name must be a non-empty string");
      if (!input.is_object()) throw invalid_request(at + ".input must be an object");
      // The arguments stay an object: templates print it with tojson, the separators models
      // write, so the re-rendered call usually matches the cached tokens.
      calls.push_back(Json{{"id", id}, {"type", "function"}, {"function", Json{{"name", name}, {"arguments", input}}}});
    } else if (type == "tool_result") {
      throw invalid_request(at + ": 'tool_result' blocks belong to user messages");
    } else {
      unsupported_block(type, at);
    }
  }
  msg["content"] = text;
  if (!reasoning.empty()) msg["reasoning_content"] = reasoning;
  if (!calls.empty()) msg["tool_calls"] = calls;
  out.push_back(msg);
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) throw invalid_request("field 'tools' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    if (!t.is_object()) throw invalid_request(at + " must be an object");
    const Json& type = member(t, "type");
    if (!type.is_null() && type != "custom")
      throw invalid_request(at + ": tools of type " + type.dump() + " are not supported (only client tools)");
    const Json& name = member(t, "name");
    if (!name.is_string() || name.get<std::string>().empty()) throw invalid_request(at + ".name must be a non-empty string");
    const Json& schema = member(t, "input_schema");
    if (!schema.is_object()) throw invalid_request(at + ".input_schema must be a JSON schema object");
    Json fn{{"name", name}};
    const Json& description = member(t, "description");
    if (!description.is_null()) {
      if (!description.is_string()) throw invalid_request(at + ".description must be a string");
      fn["description"] = description;
    }
    fn["parameters"] = schema;
    out.push_back(Json{{"type", "function"}, {"function", fn}});
  }
  return out;
}

void convert_tool_choice(const Json& choice, Json& chat) {
  if (!choice.is_object()) throw invalid_request("field 'tool_choice' must be an object {\"type\": ...}");
  const Json& type = member(choice, "type");
  const std::string t = type.is_string() ? type.get<std::string>() : "";
  if (t == "auto") {
    chat["tool_choice"] = "auto";
  } else if (t == "any") {
    chat["tool_choice"] = "required";
  } else if (t == "none") {
    chat["tool_choice"] = "none";
  } else if (t == "tool") {
    const Json& name = member(choice, "name");
    if (!name.is_string() || name.get<std::string>().empty())
      throw invalid_request("tool_choice of type 'tool' needs a 'name'");
    chat["tool_choice"] = Json{{"type", "function"}, {"function", Json{{"name", name}}}};
  } else {
    throw invalid_request("tool_choice.type must be 'auto', 'any', 'tool' or 'none'");
  }
  const Json& no_parallel = member(choice, "disable_parallel_tool_use");
  if (!no_parallel.is_null()) {
    if (!no_parallel.is_boolean()) throw invalid_request("tool_choice.disable_parallel_tool_use must be a boolean");
    if (no_parallel.get<bool>()) chat["parallel_tool_calls"] = false;
  }
}

// Anthropic's stop_reason, and whether a stop string ended the answer.
const char* stop_reason(const FinalResult& r, bool has_calls) {
  const bool finished = r.stop == StopType::Eos || r.stop == StopType::Word;
  if (has_calls && finished) return "tool_use";
  if (r.stop == StopType::Eos) return "end_turn";
  if (r.stop == StopType::Word) return "stop_sequence";
  return "max_tokens";
}

Json stop_sequence(const FinalResult& r, bool has_calls) {
  if (r.stop == StopType::Word && !has_calls) return r.stopping_word;
  return nullptr;
}

// input_tokens are the prompt tokens evaluated, cache_read_input_tokens those reused from the
// cache (Anthropic's split: the prompt is their sum). Nothing is billed for writing the cache.
Json usage(int64_t prompt_evaluated, int64_t prompt_cached, int64_t output) {
  return Json{{"input_tokens", prompt_evaluated},
              {"cache_creation_input_tokens", 0},
              {"cache_read_input_tokens", prompt_cached},
              {"output_tokens", output}};
}

Json tool_use_input(const std::string& arguments) {
  try {
    Json input = Json::parse(arguments);
    if (input.is_object()) return input;
  } catch (const std::exception&) {
  }
  return Json::object();  // the parser only yields calls whose arguments are an object
}

}  // namespace

bool is_anthropic_path(const std::string& path) { return path.rfind("/v1/messages", 0) == 0; }

std::string anthropic_tool_use_id(const std::string& call_id) {
  return "toolu_" + (call_id.rfind("call_", 0) == 0 ? call_id.substr(5) : call_id);
}

Json anthropic_to_chat_request(const Json& body, AnthropicEndpoint endpoint) {
  const bool messages_endpoint = endpoint == AnthropicEndpoint::Messages;
  const std::set<std::string>& known = messages_endpoint ? kMessageFields : kCountFields;
  Json chat = Json::object();
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (known.count(it.key())) continue;
    if (messages_endpoint && kPassedOn.count(it.key())) {
      chat[it.key()] = it.value();
      continue;
    }
    throw invalid_request("field '" + it.key() + "' is not supported by agentkv");
  }
  if (has_field(body, "model")) {
    if (!body["model"].is_string()) throw invalid_request("field 'model' must be a string");
    chat["model"] = body["model"];
  }

  if (messages_endpoint) {
    if (!has_field(body, "max_tokens")) throw invalid_request("max_tokens: Field required");
    chat["max_tokens"] = read_int(body, "max_tokens", 0, 1);
    for (const char* key : {"temperature", "top_p"})
      if (has_field(body, key)) chat[key] = read_number(body, key, 0.0);
    if (has_field(body, "top_k")) chat["top_k"] = read_int(body, "top_k", 0, 0);
    if (has_field(body, "stop_sequences")) {
      if (!body["stop_sequences"].is_array()) throw invalid_request("field 'stop_sequences' must be an array of strings");
      chat["stop"] = read_string_list(body, "stop_sequences");
    }
    if (has_field(body, "stream")) chat["stream"] = read_bool(body, "stream", false);
  }

  Json messages = Json::array();
  const Json& system = member(body, "system");
  if (!system.is_null()) {
    const std::string text = text_or_text_blocks(system, "system");
    if (!text.empty()) messages.push_back(Json{{"role", "system"}, {"content", text}});
  }
  const Json& input = member(body, "messages");
  if (!input.is_array()) throw invalid_request("messages: Field required (an array of {role, content})");
  if (input.empty()) throw invalid_request("messages: at least one message is required");
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string where = "messages[" + std::to_string(i) + "]";
    const Json& m = input[i];
    if (!m.is_object()) throw invalid_request(where + " must be an object");
    const Json& role = member(m, "role");
    const Json& content = member(m, "content");
    if (!content.is_string() && !content.is_array())
      throw invalid_request(where + ".content must be a string or an array of content blocks");
    if (role == "user") {
      convert_user(content, where, messages);
    } else if (role == "assistant") {
      convert_assistant(content, where, messages);
    } else {
      throw invalid_request(where + ".role must be 'user' or 'assistant'" +
                            (role == "system" ? std::string(" (the system prompt is the top-level 'system' field)") : ""));
    }
  }
  // A final assistant message is a prefilled answer: the chat formatter continues it.
  chat["messages"] = messages;

  if (has_field(body, "tools")) {
    Json tools = convert_tools(body["tools"]);
    if (!tools.empty()) chat["tools"] = tools;
  }
  if (has_field(body, "tool_choice")) {
    convert_tool_choice(body["tool_choice"], chat);
    if (!chat.contains("tools") && chat["tool_choice"] == "none") chat.erase("tool_choice");
  }
  // Extended thinking maps onto the templates' enable_thinking switch (Qwen3 and kin).
  const Json& thinking = member(body, "thinking");
  if (!thinking.is_null()) {
    const std::string type = thinking.is_object() ? read_string(thinking, "type", "") : "";
    if (type != "enabled" && type != "disabled")
      throw invalid_request("thinking must be {\"type\": \"enabled\", \"budget_tokens\": N} or {\"type\": \"disabled\"}");
    if (!chat.contains("chat_template_kwargs")) chat["chat_template_kwargs"] = Json::object();
    if (!chat["chat_template_kwargs"].is_object()) throw invalid_request("field 'chat_template_kwargs' must be an object");
    if (!chat["chat_template_kwargs"].contains("enable_thinking"))
      chat["chat_template_kwargs"]["enable_thinking"] = type == "enabled";
  }
  return chat;
}

Json anthropic_message_json(const FinalResult& r, const ResponseInfo& info) {
  const ChatMessage m = parse_chat_output(r.content, info.chat, /*partial=*/false);
  Json content = Json::array();
  if (!m.reasoning.empty()) content.push_back(Json{{"type", "thinking"}, {"thinking", m.reasoning}, {"signature", ""}});
  if (!m.content.empty() || m.tool_calls.empty()) content.push_back(Json{{"type", "text"}, {"text", m.content}});
  for (const ToolCall& c : m.tool_calls)
    content.push_back(Json{{"type", "tool_use"},
                           {"id", anthropic_tool_use_id(c.id)},
                           {"name", c.name},
                           {"input", tool_use_input(c.arguments)}});
  const bool has_calls = !m.tool_calls.empty();
  return Json{{"id", info.completion_id},
              {"type", "message"},
              {"role", "assistant"},
              {"model", info.model},
              {"content", content},
              {"stop_reason", stop_reason(r, has_calls)},
              {"stop_sequence", stop_sequence(r, has_calls)},
              {"usage", usage(r.timings.prompt_n, r.timings.cache_n, r.n_decoded)}};  // no "timings": not Anthropic's
}

void AnthropicStream::start(const ResponseInfo& info, int32_t n_prompt, const Timings* timings, std::vector<Json>& out) {
  started_ = true;
  // Without timings (none yet) the whole prompt counts as evaluated; message_delta has the split.
  const int64_t cached = timings ? timings->cache_n : 0;
  const int64_t evaluated = timings ? timings->prompt_n : n_prompt;
  out.push_back(Json{{"type", "message_start"},
                     {"message", Json{{"id", info.completion_id},
                                      {"type", "message"},
                                      {"role", "assistant"},
                                      {"model", info.model},
                                      {"content", Json::array()},
                                      {"stop_reason", nullptr},
                                      {"stop_sequence", nullptr},
                                      {"usage", usage(evaluated, cached, 0)}}}});
  out.push_back(Json{{"type", "ping"}});
}

void AnthropicStream::open(Block kind, Json content_block, std::vector<Json>& out) {
  close(out);
  open_ = kind;
  ++index_;
  out.push_back(Json{{"type", "content_block_start"}, {"index", index_}, {"content_block", std::move(content_block)}});
}

void AnthropicStream::close(std::vector<Json>& out) {
  if (open_ == Block::None) return;
  out.push_back(Json{{"type", "content_block_stop"}, {"index", index_}});
  open_ = Block::None;
  open_call_ = -1;
}

void AnthropicStream::translate(const std::vector<Json>& chat_deltas, std::vector<Json>& out) {
  auto delta = [&](Json d) {
    out.push_back(Json{{"type", "content_block_delta"}, {"index", index_}, {"delta", std::move(d)}});
  };
  for (const Json& d : chat_deltas) {
    if (d.contains("reasoning_content")) {
      if (open_ != Block::Thinking) open(Block::Thinking, Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}, out);
      delta(Json{{"type", "thinking_delta"}, {"thinking", d.at("reasoning_content")}});
    } else if (d.contains("content")) {
      if (open_ != Block::Text) open(Block::Text, Json{{"type", "text"}, {"text", ""}}, out);
      delta(Json{{"type", "text_delta"}, {"text", d.at("content")}});
    } else if (d.contains("tool_calls")) {
      for (const Json& call : d.at("tool_calls")) {
        const int call_index = call.value("index", 0);
        const Json& fn = call.at("function");
        if (call.contains("id")) {
          open(Block::ToolUse,
               Json{{"type", "tool_use"},
                    {"id", anthropic_tool_use_id(call.at("id").get<std::string>())},
                    {"name", fn.value("name", "")},
                    {"input", Json::object()}},
               out);
          open_call_ = call_index;
        }
        const std::string args = fn.value("arguments", "");
        // Arguments of a call whose block was closed by other content cannot be reopened (the
        // parser writes calls one after another, so this does not happen).
        if (!args.empty() && open_ == Block::ToolUse && open_call_ == call_index)
          delta(Json{{"type", "input_json_delta"}, {"partial_json", args}});
      }
    }
  }
}

std::vector<Json> AnthropicStream::on_token(const TokenEvent& t, const ResponseInfo& info) {
  std::vector<Json> out;
  if (!started_) start(info, t.n_prompt, t.timings ? &*t.timings : nullptr, out);
  chat_.text += t.text;
  if (!t.text.empty()) translate(chat_.diff.update(parse_chat_output(chat_.text, info.chat, /*partial=*/true)), out);
  return out;
}

std::vector<Json> AnthropicStream::on_final(const FinalResult& r, const ResponseInfo& info) {
  std::vector<Json> out;
  if (!started_) start(info, r.n_prompt, &r.timings, out);
  translate(chat_.diff.update(parse_chat_output(r.content, info.chat, /*partial=*/false)), out);
  if (index_ < 0) open(Block::Text, Json{{"type", "text"}, {"text", ""}}, out);  // as the whole message has
  close(out);
  const bool has_calls = !chat_.diff.ids().empty();
  out.push_back(Json{{"type", "message_delta"},
                     {"delta", Json{{"stop_reason", stop_reason(r, has_calls)}, {"stop_sequence", stop_sequence(r, has_calls)}}},
                     {"usage", usage(r.timings.prompt_n, r.timings.cache_n, r.n_decoded)}});
  out.push_back(Json{{"type", "message_stop"}});
  return out;
}

namespace {
// Anthropic's error types for llama-server's (the HTTP status stays llama-server's).
std::string anthropic_error_type(const std::string& llama_type, int status) {
  if (status == 413) return "request_too_large";
  if (llama_type == "invalid_request_error" || llama_type == "exceed_context_size_error") return "invalid_request_error";
  if (llama_type == "authentication_error" || llama_type == "permission_error" || llama_type == "not_found_error")
    return llama_type;
  if (llama_type == "unavailable_error") return "overloaded_error";
  return "api_error";
}
}  // namespace

Json anthropic_error_body(const HttpError& e) { return anthropic_error_body(error_body(e)); }

Json anthropic_error_body(const Json& llama_error_body) {
  const Json& err = member(llama_error_body, "error");
  const std::string type = err.is_object() ? err.value("type", "api_error") : "api_error";
  const int status = err.is_object() ? err.value("code", 500) : 500;
  const std::string message = err.is_object() ? err.value("message", "") : "";
  return Json{{"type", "error"}, {"error", Json{{"type", anthropic_error_type(type, status)}, {"message", message}}}};
}

}  // namespace agentkv::server
