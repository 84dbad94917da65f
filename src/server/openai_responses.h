// The OpenAI Responses API (POST /v1/responses) on the chat machinery of /v1/chat/completions:
// a request becomes the chat request that endpoint takes (same template, tool-call grammar,
// parser and cache), and the chat result becomes a response object with output items (message,
// function_call, reasoning) or its stream of named server-sent events.
#pragma once
#include <string>
#include <vector>

#include "server/json_fields.h"
#include "server/response_format.h"
#include "server/task.h"

namespace agentkv::server {

// Checks a Responses request and returns the equivalent chat request: `instructions` as the
// system message, `input` (a string or message / function_call / function_call_output items) as
// messages, function tools, tool_choice, max_output_tokens as max_tokens. Throws invalid_request
// naming the field at fault; previous_response_id (agentkv stores no responses) is one.
Json responses_to_chat_request(const Json& body);

// The request fields a response object repeats (instructions, tools, tool_choice,
// parallel_tool_calls, max_output_tokens, metadata), for ResponseInfo::request_echo.
Json responses_echo(const Json& body);

// The whole response of a non-streamed request.
Json responses_json(const FinalResult& r, const ResponseInfo& info);

// A streamed response: response.created, response.in_progress, then per output item
// response.output_item.added, its deltas (response.content_part.added,
// response.output_text.delta / .done, response.content_part.done; or
// response.function_call_arguments.delta / .done; or response.reasoning_text.delta / .done),
// response.output_item.done, and last response.completed (or response.incomplete when cut off).
// Every event carries its "type" (its SSE event name) and a sequence_number.
class ResponsesStream {
 public:
  // return_progress: a response.in_progress event carrying prompt_progress (llama-server's).
  std::vector<Json> on_progress(const TokenEvent& t, const ResponseInfo& info);
  std::vector<Json> on_token(const TokenEvent& t, const ResponseInfo& info);
  std::vector<Json> on_final(const FinalResult& r, const ResponseInfo& info);

 private:
  enum class Item { None, Message, Reasoning, FunctionCall };
  void start(const ResponseInfo& info, std::vector<Json>& out);
  void translate(const std::vector<Json>& chat_deltas, std::vector<Json>& out);
  void open(Item kind, Json item, std::vector<Json>& out);
  void close(std::vector<Json>& out);
  void emit(Json event, std::vector<Json>& out);

  bool started_ = false;
  ChatStream chat_;
  Item open_ = Item::None;
  int output_index_ = -1;
  int open_call_ = -1;     // chat tool-call index of the open function_call item
  Json item_;              // the open item as it will be when done
  std::string text_;       // its text or arguments so far
  Json done_items_ = Json::array();
  int sequence_ = 0;
};

}  // namespace agentkv::server
