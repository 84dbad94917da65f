#include "server/image_parts.h"
#include "server/openai_responses.h"

#include <set>
#include <utility>

#include "server/server_error.h"
#include "server/tool_calls.h"

namespace agentkv::server {

namespace {

const std::set<std::string> kFields = {
    "model", "input", "instructions", "max_output_tokens", "temperature", "top_p", "stream", "tools", "tool_choice",
    "parallel_tool_calls", "previous_response_id", "reasoning", "text", "truncation", "include", "store", "metadata",
    "user", "service_tier", "prompt_cache_key", "safety_identifier", "background"};
// agentkv / llama-server extensions passed on to the chat request (which checks them).
const std::set<std::string> kPassedOn = {"seed",           "session_id",    "cache_salt",       "cache_prompt",
                                         "id_slot",        "top_k",         "min_p",            "repeat_penalty",
                                         "repeat_last_n",  "presence_penalty", "frequency_penalty",
                                         "chat_template_kwargs", "reasoning_format", "timings_per_token", "logit_bias",
                                         "return_progress"};

const Json& member(const Json& obj, const char* key) {
  static const Json kNull;
  if (!obj.is_object()) return kNull;
  auto it = obj.find(key);
  return it == obj.end() ? kNull : *it;
}

std::string random_id(const char* prefix) { return make_completion_id(prefix); }

// A string, or content parts of type input_text / output_text / text (joined with '\n'), and
// input_image parts (data: URLs): a string without images, else chat content parts.
Json content_of(const Json& content, const std::string& where) {
  if (content.is_null()) return "";
  if (content.is_string()) return content.get<std::string>();
  if (!content.is_array()) throw invalid_request(where + " must be a string or an array of content parts");
  std::string text;
  Json parts = Json::array();
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string at = where + "[" + std::to_string(i) + "]";
    const Json& type = member(content[i], "type");
    const std::string t = type.is_string() ? type.get<std::string>() : "";
    if (t == "input_image") {
      const Json& url = member(content[i], "image_url");
      if (!url.is_string() || url.get<std::string>().rfind("data:", 0) != 0)
        throw invalid_request(at + ": an input_image's image_url must be a data: URL (nothing is fetched; file_id "
                              "images are not supported)");
      if (!text.empty()) parts.push_back(Json{{"type", "text"}, {"text", text}});
      text.clear();
      parts.push_back(image_part(url.get<std::string>()));
      continue;
    }
    if (t == "input_file" || t == "input_audio")
      throw invalid_request(at + ": content of type '" + t + "' is not supported");
    if (t != "input_text" && t != "output_text" && t != "text")
      throw invalid_request(at + ".type must be 'input_text', 'output_text' or 'input_image'");
    const Json& part = member(content[i], "text");
    if (!part.is_string()) throw invalid_request(at + ".text must be a string");
    if (!text.empty()) text += '\n';
    text += part.get<std::string>();
  }
  if (parts.empty()) return text;
  if (!text.empty()) parts.push_back(Json{{"type", "text"}, {"text", text}});
  return parts;
}

std::string text_of(const Json& content, const std::string& where) {
  const Json c = content_of(content, where);
  if (!c.is_string()) throw invalid_request(where + ": images are only taken in input messages");
  return c.get<std::string>();
}

std::string required_string(const Json& item, const char* key, const std::string& where) {
  const Json& v = member(item, key);
  if (!v.is_string() || v.get<std::string>().empty()) throw invalid_request(where + "." + key + " must be a non-empty string");
  return v.get<std::string>();
}

// A reasoning item's text: its reasoning_text parts (what agentkv's responses carry), else its
// summary's summary_text parts, joined with '\n'.
std::string reasoning_text_of(const Json& item, const std::string& where) {
  for (const char* key : {"content", "summary"}) {
    const Json& parts = member(item, key);
    if (parts.is_null()) continue;
    if (!parts.is_array()) throw invalid_request(where + "." + key + " must be an array of parts");
    std::string text;
    for (const Json& part : parts) {
      const Json& t = member(part, "text");
      if (!t.is_string()) throw invalid_request(where + "." + key + "[].text must be a string");
      if (!text.empty()) text += '\n';
      text += t.get<std::string>();
    }
    if (!parts.empty()) return text;
  }
  return "";
}

void convert_input(const Json& input, Json& messages) {
  if (input.is_string()) {
    messages.push_back(Json{{"role", "user"}, {"content", input}});
    return;
  }
  if (!input.is_array()) throw invalid_request("field 'input' must be a string or an array of items");
  // A reasoning item goes with the assistant message or calls after it, as reasoning_content (the
  // chat endpoint's field: templates that render earlier reasoning, such as Qwen3's within a
  // tool loop and gpt-oss's before a call, then render the answer as it was generated).
  std::string reasoning;
  auto assistant = [&](Json message) {
    if (!reasoning.empty()) message["reasoning_content"] = std::exchange(reasoning, std::string());
    messages.push_back(std::move(message));
  };
  for (size_t i = 0; i < input.size(); ++i) {
    const std::string where = "input[" + std::to_string(i) + "]";
    const Json& item = input[i];
    if (!item.is_object()) throw invalid_request(where + " must be an object");
    const Json& type_field = member(item, "type");
    if (!type_field.is_null() && !type_field.is_string()) throw invalid_request(where + ".type must be a string");
    const std::string type = type_field.is_string() ? type_field.get<std::string>() : "message";
    if (type == "message") {
      const Json& role = member(item, "role");
      const std::string r = role.is_string() ? role.get<std::string>() : "";
      if (r != "user" && r != "assistant" && r != "system" && r != "developer")
        throw invalid_request(where + ".role must be 'user', 'assistant', 'system' or 'developer'");
      Json message{{"role", r == "developer" ? "system" : r}, {"content", content_of(member(item, "content"), where + ".content")}};
      if (r == "assistant") {
        assistant(std::move(message));
      } else {
        reasoning.clear();  // reasoning belongs to the answer after it
        messages.push_back(std::move(message));
      }
    } else if (type == "function_call") {
      const std::string call_id = required_string(item, "call_id", where);
      const std::string name = required_string(item, "name", where);
      const Json& arguments = member(item, "arguments");
      if (!arguments.is_string()) throw invalid_request(where + ".arguments must be a JSON string");
      Json call{{"id", call_id}, {"type", "function"}, {"function", Json{{"name", name}, {"arguments", arguments}}}};
      // Calls after an assistant message (or after other calls) belong to that message.
      if (!messages.empty() && messages.back()["role"] == "assistant") {
        Json& last = messages.back();
        if (!reasoning.empty() && !last.contains("reasoning_content")) last["reasoning_content"] = std::exchange(reasoning, std::string());
        if (!last.contains("tool_calls")) last["tool_calls"] = Json::array();
        last["tool_calls"].push_back(std::move(call));
      } else {
        assistant(Json{{"role", "assistant"}, {"content", ""}, {"tool_calls", Json::array({std::move(call)})}});
      }
    } else if (type == "function_call_output") {
      const std::string call_id = required_string(item, "call_id", where);
      reasoning.clear();
      messages.push_back(Json{{"role", "tool"}, {"tool_call_id", call_id}, {"content", text_of(member(item, "output"), where + ".output")}});
    } else if (type == "reasoning") {
      const std::string text = reasoning_text_of(item, where);
      if (!reasoning.empty() && !text.empty()) reasoning += '\n';
      reasoning += text;
    } else if (type == "item_reference") {
      throw invalid_request(where + ": item references are not supported (agentkv stores no responses)");
    } else {
      throw invalid_request(where + ": items of type '" + type + "' are not supported");
    }
  }
}

Json convert_tools(const Json& tools) {
  if (!tools.is_array()) throw invalid_request("field 'tools' must be an array");
  Json out = Json::array();
  for (size_t i = 0; i < tools.size(); ++i) {
    const std::string at = "tools[" + std::to_string(i) + "]";
    const Json& t = tools[i];
    const Json& type = member(t, "type");
    if (type != "function")
      throw invalid_request(at + ": only tools of type 'function' are supported" +
                            (type.is_string() ? std::string(" (got '") + type.get<std::string>() + "')" : std::string()));
    Json fn{{"name", required_string(t, "name", at)}};
    const Json& description = member(t, "description");
    if (!description.is_null()) {
      if (!description.is_string()) throw invalid_request(at + ".description must be a string");
      fn["description"] = description;
    }
    const Json& parameters = member(t, "parameters");
    if (!parameters.is_null()) {
      if (!parameters.is_object()) throw invalid_request(at + ".parameters must be a JSON schema object");
      fn["parameters"] = parameters;
    }
    out.push_back(Json{{"type", "function"}, {"function", fn}});
  }
  return out;
}

Json convert_tool_choice(const Json& choice) {
  if (choice.is_string()) return choice;  // none / auto / required: the chat endpoint checks
  if (choice.is_object() && member(choice, "type") == "function" && member(choice, "name").is_string())
    return Json{{"type", "function"}, {"function", Json{{"name", choice["name"]}}}};
  throw invalid_request("tool_choice must be 'none', 'auto', 'required' or {\"type\": \"function\", \"name\": ...}");
}

// text.format: text, json_object or json_schema ({name, schema, strict}) → response_format.
void convert_text_format(const Json& text, Json& chat) {
  if (!text.is_object()) throw invalid_request("field 'text' must be an object");
  const Json& format = member(text, "format");
  if (format.is_null()) return;
  const Json& type = member(format, "type");
  if (type == "text") return;
  if (type == "json_object") {
    chat["response_format"] = Json{{"type", "json_object"}};
  } else if (type == "json_schema") {
    if (!member(format, "schema").is_object()) throw invalid_request("text.format.schema must be a JSON schema object");
    chat["response_format"] = Json{{"type", "json_schema"}, {"json_schema", Json{{"schema", format["schema"]}}}};
  } else {
    throw invalid_request("text.format.type must be 'text', 'json_object' or 'json_schema'");
  }
}

bool cut_off(const FinalResult& r) { return r.stop != StopType::Eos && r.stop != StopType::Word; }

Json responses_usage(const FinalResult& r) {
  return Json{{"input_tokens", r.n_prompt},
              {"input_tokens_details", Json{{"cached_tokens", r.timings.cache_n}}},
              {"output_tokens", r.n_decoded},
              {"output_tokens_details", Json{{"reasoning_tokens", 0}}},
              {"total_tokens", r.n_prompt + r.n_decoded}};
}

Json response_object(const ResponseInfo& info, const std::string& status, Json output, const FinalResult* r) {
  const Json& echo = info.request_echo;
  const Json& tool_choice = member(echo, "tool_choice");
  const Json& tools = member(echo, "tools");
  const Json& parallel = member(echo, "parallel_tool_calls");
  const Json& metadata = member(echo, "metadata");
  Json incomplete = nullptr;
  if (status == "incomplete") incomplete = Json{{"reason", "max_output_tokens"}};
  Json j{{"id", info.completion_id},
         {"object", "response"},
         {"created_at", info.created},
         {"status", status},
         {"error", nullptr},
         {"incomplete_details", incomplete},
         {"instructions", member(echo, "instructions")},
         {"max_output_tokens", member(echo, "max_output_tokens")},
         {"model", info.model},
         {"output", std::move(output)},
         {"parallel_tool_calls", parallel.is_boolean() ? parallel.get<bool>() : true},
         {"previous_response_id", nullptr},
         {"store", false},
         {"temperature", info.params.sampling.temperature},
         {"text", Json{{"format", Json{{"type", "text"}}}}},
         {"tool_choice", tool_choice.is_null() ? Json("auto") : tool_choice},
         {"tools", tools.is_array() ? tools : Json::array()},
         {"top_p", info.params.sampling.top_p},
         {"truncation", "disabled"},
         {"usage", r ? responses_usage(*r) : Json(nullptr)},
         {"metadata", metadata.is_object() ? metadata : Json::object()}};
  if (r) j["timings"] = r->timings.to_json();
  return j;
}

Json output_text_part(const std::string& text) {
  return Json{{"type", "output_text"}, {"text", text}, {"annotations", Json::array()}, {"logprobs", Json::array()}};
}

Json message_item(const std::string& id, const std::string& status, Json content) {
  return Json{{"type", "message"}, {"id", id}, {"status", status}, {"role", "assistant"}, {"content", std::move(content)}};
}

// One reasoning_text part, empty while streaming starts (clients append the deltas to it).
Json reasoning_item(const std::string& id, const std::string& text) {
  return Json{{"type", "reasoning"},
              {"id", id},
              {"summary", Json::array()},
              {"content", Json::array({Json{{"type", "reasoning_text"}, {"text", text}}})}};
}

Json function_call_item(const std::string& id, const std::string& status, const std::string& call_id,
                        const std::string& name, const std::string& arguments) {
  return Json{{"type", "function_call"}, {"id", id},     {"call_id", call_id}, {"name", name},
              {"arguments", arguments},  {"status", status}};
}

}  // namespace

Json responses_echo(const Json& body) {
  Json echo = Json::object();
  for (const char* key : {"instructions", "tools", "tool_choice", "parallel_tool_calls", "max_output_tokens", "metadata"})
    echo[key] = member(body, key);
  return echo;
}

Json responses_to_chat_request(const Json& body) {
  Json chat = Json::object();
  for (auto it = body.begin(); it != body.end(); ++it) {
    if (kFields.count(it.key())) continue;
    if (kPassedOn.count(it.key())) {
      chat[it.key()] = it.value();
      continue;
    }
    throw invalid_request("field '" + it.key() + "' is not supported by agentkv");
  }
  if (has_field(body, "previous_response_id"))
    throw invalid_request("previous_response_id is not supported: agentkv stores no responses (send the whole input; "
                          "the prompt cache makes that cheap)");
  if (read_bool(body, "background", false)) throw invalid_request("background responses are not supported by agentkv");
  if (has_field(body, "model")) {
    if (!body["model"].is_string()) throw invalid_request("field 'model' must be a string");
    chat["model"] = body["model"];
  }
  if (has_field(body, "max_output_tokens")) chat["max_tokens"] = read_int(body, "max_output_tokens", 0, 1);
  for (const char* key : {"temperature", "top_p"})
    if (has_field(body, key)) chat[key] = read_number(body, key, 0.0);
  if (has_field(body, "stream")) chat["stream"] = read_bool(body, "stream", false);
  if (has_field(body, "parallel_tool_calls")) chat["parallel_tool_calls"] = read_bool(body, "parallel_tool_calls", true);

  Json messages = Json::array();
  if (has_field(body, "instructions")) {
    if (!body["instructions"].is_string()) throw invalid_request("field 'instructions' must be a string");
    messages.push_back(Json{{"role", "system"}, {"content", body["instructions"]}});
  }
  if (!has_field(body, "input")) throw invalid_request("field 'input' is required");
  convert_input(body["input"], messages);
  if (messages.empty()) throw invalid_request("field 'input' must not be empty");
  chat["messages"] = messages;

  if (has_field(body, "tools")) {
    Json tools = convert_tools(body["tools"]);
    if (!tools.empty()) chat["tools"] = tools;
  }
  if (has_field(body, "tool_choice")) chat["tool_choice"] = convert_tool_choice(body["tool_choice"]);
  if (has_field(body, "text")) convert_text_format(body["text"], chat);
  return chat;
}

Json responses_json(const FinalResult& r, const ResponseInfo& info) {
  const ChatMessage m = parse_chat_output(r.content, info.chat, /*partial=*/false);
  Json output = Json::array();
  if (!m.reasoning.empty()) output.push_back(reasoning_item(random_id("rs_"), m.reasoning));
  if (!m.content.empty() || m.tool_calls.empty())
    output.push_back(message_item(random_id("msg_"), "completed", Json::array({output_text_part(m.content)})));
  for (const ToolCall& c : m.tool_calls)
    output.push_back(function_call_item(random_id("fc_"), "completed", c.id, c.name, c.arguments));
  return response_object(info, cut_off(r) ? "incomplete" : "completed", std::move(output), &r);
}

void ResponsesStream::emit(Json event, std::vector<Json>& out) {
  event["sequence_number"] = sequence_++;
  out.push_back(std::move(event));
}

void ResponsesStream::start(const ResponseInfo& info, std::vector<Json>& out) {
  started_ = true;
  emit(Json{{"type", "response.created"}, {"response", response_object(info, "in_progress", Json::array(), nullptr)}}, out);
  emit(Json{{"type", "response.in_progress"}, {"response", response_object(info, "in_progress", Json::array(), nullptr)}},
       out);
}

void ResponsesStream::open(Item kind, Json item, std::vector<Json>& out) {
  close(out);
  open_ = kind;
  ++output_index_;
  item_ = std::move(item);
  text_.clear();
  emit(Json{{"type", "response.output_item.added"}, {"output_index", output_index_}, {"item", item_}}, out);
  if (kind == Item::Message)
    emit(Json{{"type", "response.content_part.added"},
              {"item_id", item_["id"]},
              {"output_index", output_index_},
              {"content_index", 0},
              {"part", output_text_part("")}},
         out);
}

void ResponsesStream::close(std::vector<Json>& out) {
  if (open_ == Item::None) return;
  const Json id = item_["id"];
  Json done;
  if (open_ == Item::Message) {
    emit(Json{{"type", "response.output_text.done"},
              {"item_id", id},
              {"output_index", output_index_},
              {"content_index", 0},
              {"text", text_},
              {"logprobs", Json::array()}},
         out);
    emit(Json{{"type", "response.content_part.done"},
              {"item_id", id},
              {"output_index", output_index_},
              {"content_index", 0},
              {"part", output_text_part(text_)}},
         out);
    done = message_item(id.get<std::string>(), "completed", Json::array({output_text_part(text_)}));
  } else if (open_ == Item::Reasoning) {
    emit(Json{{"type", "response.reasoning_text.done"}, {"item_id", id}, {"output_index", output_index_},
              {"content_index", 0}, {"text", text_}},
         out);
    done = reasoning_item(id.get<std::string>(), text_);
  } else {
    emit(Json{{"type", "response.function_call_arguments.done"}, {"item_id", id}, {"output_index", output_index_},
              {"arguments", text_}},
         out);
    done = function_call_item(id.get<std::string>(), "completed", item_["call_id"].get<std::string>(),
                              item_["name"].get<std::string>(), text_);
  }
  emit(Json{{"type", "response.output_item.done"}, {"output_index", output_index_}, {"item", done}}, out);
  done_items_.push_back(std::move(done));
  open_ = Item::None;
  open_call_ = -1;
}

void ResponsesStream::translate(const std::vector<Json>& chat_deltas, std::vector<Json>& out) {
  for (const Json& d : chat_deltas) {
    if (d.contains("reasoning_content")) {
      if (open_ != Item::Reasoning) open(Item::Reasoning, reasoning_item(random_id("rs_"), ""), out);
      const std::string piece = d.at("reasoning_content").get<std::string>();
      text_ += piece;
      emit(Json{{"type", "response.reasoning_text.delta"}, {"item_id", item_["id"]}, {"output_index", output_index_},
                {"content_index", 0}, {"delta", piece}},
           out);
    } else if (d.contains("content")) {
      if (open_ != Item::Message) open(Item::Message, message_item(random_id("msg_"), "in_progress", Json::array()), out);
      const std::string piece = d.at("content").get<std::string>();
      text_ += piece;
      emit(Json{{"type", "response.output_text.delta"}, {"item_id", item_["id"]}, {"output_index", output_index_},
                {"content_index", 0}, {"delta", piece}, {"logprobs", Json::array()}},
           out);
    } else if (d.contains("tool_calls")) {
      for (const Json& call : d.at("tool_calls")) {
        const int call_index = call.value("index", 0);
        const Json& fn = call.at("function");
        if (call.contains("id")) {
          open(Item::FunctionCall,
               function_call_item(random_id("fc_"), "in_progress", call.at("id").get<std::string>(), fn.value("name", ""), ""),
               out);
          open_call_ = call_index;
        }
        const std::string args = fn.value("arguments", "");
        if (!args.empty() && open_ == Item::FunctionCall && open_call_ == call_index) {
          text_ += args;
          emit(Json{{"type", "response.function_call_arguments.delta"}, {"item_id", item_["id"]},
                    {"output_index", output_index_}, {"delta", args}},
               out);
        }
      }
    }
  }
}

std::vector<Json> ResponsesStream::on_progress(const TokenEvent& t, const ResponseInfo& info) {
  std::vector<Json> out;
  if (!started_) start(info, out);
  emit(Json{{"type", "response.in_progress"},
            {"response", response_object(info, "in_progress", Json::array(), nullptr)},
            {"prompt_progress", prompt_progress_json(*t.progress)}},
       out);
  return out;
}

std::vector<Json> ResponsesStream::on_token(const TokenEvent& t, const ResponseInfo& info) {
  std::vector<Json> out;
  if (!started_) start(info, out);
  chat_.text += t.text;
  if (!t.text.empty()) translate(chat_.diff.update(parse_chat_output(chat_.text, info.chat, /*partial=*/true)), out);
  if (t.timings)  // timings_per_token: on the events this token produced
    for (Json& event : out) event["timings"] = t.timings->to_json();
  return out;
}

std::vector<Json> ResponsesStream::on_final(const FinalResult& r, const ResponseInfo& info) {
  std::vector<Json> out;
  if (!started_) start(info, out);
  translate(chat_.diff.update(parse_chat_output(r.content, info.chat, /*partial=*/false)), out);
  if (output_index_ < 0) open(Item::Message, message_item(random_id("msg_"), "in_progress", Json::array()), out);
  close(out);
  const std::string status = cut_off(r) ? "incomplete" : "completed";
  emit(Json{{"type", "response." + status}, {"response", response_object(info, status, done_items_, &r)}}, out);
  out.back()["timings"] = r.timings.to_json();  // as llama-server: the final event carries them too
  return out;
}

}  // namespace agentkv::server
