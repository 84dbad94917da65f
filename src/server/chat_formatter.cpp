#include "server/chat_formatter.h"

#include <ctime>

#include "agentkv/error.h"
#include "server/builtin_chat_templates.h"
#include "server/image_parts.h"
#include "server/server_error.h"
#include "server/tool_calls.h"

namespace agentkv::server {

namespace {

std::string token_text(const Tokenizer& tok, Token id) { return id >= 0 ? tok.token_to_piece(id, true) : ""; }

// A message's role, or "" when it is not a string object field: the caller decides what that means
// (normalize_message refuses it with a 400; Json::value would throw a type_error instead).
std::string role_of(const Json& msg) {
  if (!msg.is_object()) return "";
  auto role = msg.find("role");
  return role != msg.end() && role->is_string() ? role->get<std::string>() : "";
}

Json normalize_message(const Json& msg, size_t index, bool object_arguments, bool harmony) {
  const std::string where = "messages[" + std::to_string(index) + "]";
  if (!msg.is_object()) throw invalid_request(where + " must be an object");
  auto role = msg.find("role");
  if (role == msg.end() || !role->is_string()) throw invalid_request(where + ".role must be a string");
  Json out = msg;
  // OpenAI clients send tool-call arguments as a JSON string; templates that iterate over them
  // (Qwen3.5's XML form) need the object. Qwen3's prints the string as is (exactly what the model
  // generated, which keeps the prompt cache).
  if (object_arguments && out.contains("tool_calls") && out["tool_calls"].is_array()) {
    for (Json& call : out["tool_calls"]) {
      if (!call.is_object() || !call.contains("function") || !call["function"].is_object()) continue;
      Json& args = call["function"]["arguments"];
      if (args.is_string()) {
        try {
          Json parsed = Json::parse(args.get<std::string>());
          if (parsed.is_object()) args = std::move(parsed);
        } catch (const std::exception&) {
        }
      }
    }
  }
  auto content = msg.find("content");
  if (content == msg.end() || content->is_null()) {
    out["content"] = "";  // e.g. an assistant message that only carries tool_calls
  } else if (content->is_array()) {
    std::string text;
    for (const Json& part : *content) {
      if (!text.empty()) text += '\n';
      if (is_image_part(part)) {  // the route reads the image itself (image_parts.h); here its place
        text += kMediaMarker;
        continue;
      }
      const auto type = part.is_object() ? part.find("type") : part.end();
      const auto text_field = part.is_object() ? part.find("text") : part.end();
      if (!part.is_object() || type == part.end() || !type->is_string() || *type != "text" ||
          text_field == part.end() || !text_field->is_string())
        throw invalid_request(where + ".content parts must be {\"type\": \"text\", \"text\": \"...\"} or "
                              "{\"type\": \"image_url\", \"image_url\": {\"url\": \"data:...\"}}");
      text += text_field->get<std::string>();
    }
    out["content"] = text;
  } else if (!content->is_string()) {
    throw invalid_request(where + ".content must be a string or an array of text parts");
  }
  // gpt-oss's template reads an answer's reasoning from `thinking` (and keeps it for a turn of
  // tool calls, the next turn's cache depends on it); it raises on content and thinking together
  // beside tool calls. As llama.cpp: reasoning_content becomes thinking, and wins over content there.
  auto reasoning = out.find("reasoning_content");
  if (harmony && *role == "assistant" && reasoning != out.end() && reasoning->is_string()) {
    out["thinking"] = *reasoning;
    auto calls = out.find("tool_calls");
    if (calls != out.end() && calls->is_array() && !calls->empty()) out.erase("content");
  }
  return out;
}

}  // namespace

ChatFormatter::ChatFormatter(const Tokenizer& tok) : ChatFormatter(tok, tok.chat_template()) {}

ChatFormatter::ChatFormatter(const Tokenizer& tok, const std::string& source)
    // ChatML when the GGUF carries no template (llama-server falls back to it as well).
    : source_(source.empty() ? *builtin_chat_template("chatml") : source),
      bos_(token_text(tok, tok.bos())),
      eos_(token_text(tok, tok.eos())),
      adds_bos_(tok.add_bos() && tok.bos() >= 0),
      template_(source_) {
  object_arguments_ = template_wants_object_arguments(source_);
  harmony_ = detect_tool_format(source_) == ToolFormat::Harmony;
}

std::string ChatFormatter::apply(const Json& body) const {
  auto messages = body.find("messages");
  if (messages == body.end() || !messages->is_array()) throw invalid_request("'messages' must be an array");
  if (messages->empty()) throw invalid_request("'messages' must not be empty");
  const Json& last = messages->back();
  const bool last_is_assistant = role_of(last) == "assistant";
  // add_generation_prompt defaults to true, but only an explicit true turns the prefill off.
  const bool generation_prompt_asked = read_bool(body, "add_generation_prompt", false);
  const bool generation_prompt = generation_prompt_asked || !has_field(body, "add_generation_prompt");
  // continue_final_message (vLLM's / transformers' name for it) asks for the prefill explicitly.
  const bool continue_final = read_bool(body, "continue_final_message", false);
  if (continue_final && generation_prompt_asked)
    throw invalid_request("Cannot set both add_generation_prompt and continue_final_message to true.");
  if (continue_final && !last_is_assistant)
    throw invalid_request("continue_final_message needs a final assistant message to continue");
  if (last_is_assistant && !generation_prompt_asked) {
    // Assistant prefill (llama-server's default): the answer continues the final assistant
    // message. The messages before it get the generation prompt; its text follows as is.
    const size_t n = messages->size();
    if (n >= 2 && role_of((*messages)[n - 2]) == "assistant")
      throw invalid_request("Cannot have 2 or more assistant messages at the end of the list.");
    if (last.contains("tool_calls") && !last["tool_calls"].is_null())
      throw invalid_request("a final assistant message with tool_calls cannot be continued: send the tool results");
    const Json message = normalize_message(last, n - 1, object_arguments_, harmony_);
    const Json content = message.value("content", Json(""));
    if (!content.is_string()) throw invalid_request("the final assistant message's content must be text to be continued");
    std::string prefill = content.get<std::string>();
    if (harmony_) {
      // gpt-oss's answer is framed in channels (llama.cpp's continuation): the reasoning continues
      // when only reasoning was given, else the final message does, after the reasoning.
      const std::string reasoning = message.value("thinking", Json("")).get<std::string>();
      std::string framed = "<|channel|>analysis<|message|>" + reasoning;
      if (reasoning.empty() || !prefill.empty()) framed += "<|end|><|start|>assistant<|channel|>final<|message|>" + prefill;
      prefill = std::move(framed);
    }
    return render(body, n - 1, /*add_generation_prompt=*/true) + prefill;
  }
  return render(body, messages->size(), generation_prompt);
}

std::optional<std::string> ChatFormatter::apply_leading_system(const Json& body) const {
  const Json& messages = body.at("messages");
  size_t n = 0;
  while (n < messages.size() && role_of(messages[n]) == "system") ++n;
  if (n == 0 || n == messages.size()) return std::nullopt;
  try {
    return render(body, n, false);
  } catch (const std::exception&) {
    return std::nullopt;  // e.g. a template that insists on a user message
  }
}

std::string ChatFormatter::render(const Json& body, size_t n_messages, bool add_generation_prompt) const {
  const Json& messages = body.at("messages");
  ChatTemplateInputs in;
  for (size_t i = 0; i < n_messages; ++i) in.messages.push_back(normalize_message(messages[i], i, object_arguments_, harmony_));
  if (has_field(body, "tools")) {
    if (!body.at("tools").is_array()) throw invalid_request("field 'tools' must be an array");
    if (!body.at("tools").empty()) in.tools = body.at("tools");
    // gpt-oss's template prints "// " + description for every tool, which Jinja refuses when a tool
    // has none; llama.cpp's engine prints "" there, and so does this (only for that template).
    if (harmony_ && in.tools.is_array())
      for (auto& tool : in.tools)
        if (tool.is_object() && tool.contains("function") && tool["function"].is_object() &&
            !tool["function"].contains("description"))
          tool["function"]["description"] = "";
  }
  in.add_generation_prompt = add_generation_prompt;
  in.extra_context = read_object(body, "chat_template_kwargs");
  // What llama.cpp gives every template (common/chat.cpp) unless the request says otherwise:
  // enable_thinking true (templates test `not enable_thinking`), and today's date, as `datetime`
  // ("Dec 02 2026") and `date_string` ("02 Dec 2026").
  if (!in.extra_context.contains("enable_thinking")) in.extra_context["enable_thinking"] = true;
  if (!in.extra_context.contains("datetime") || !in.extra_context.contains("date_string")) {
    const std::time_t now = std::time(nullptr);
    std::tm local{};
    localtime_r(&now, &local);
    char buf[32];
    if (!in.extra_context.contains("datetime") && std::strftime(buf, sizeof buf, "%b %d %Y", &local) > 0)
      in.extra_context["datetime"] = buf;
    if (!in.extra_context.contains("date_string") && std::strftime(buf, sizeof buf, "%d %b %Y", &local) > 0)
      in.extra_context["date_string"] = buf;
  }
  in.bos_token = bos_;
  in.eos_token = eos_;
  std::lock_guard<std::mutex> lock(mutex_);
  try {
    std::string text = template_.render(in);
    // Templates that write {{ bos_token }} (Llama 3) would give two BOS once the tokenizer adds
    // its own; llama.cpp drops the rendered one (common/chat.cpp), and so does this.
    if (adds_bos_ && !bos_.empty() && text.compare(0, bos_.size(), bos_) == 0) text.erase(0, bos_.size());
    return text;
  } catch (const Error& e) {
    throw invalid_request(std::string("chat template: ") + e.what());
  }
}

}  // namespace agentkv::server
