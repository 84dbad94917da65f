// The Anthropic Messages API (POST /v1/messages, /v1/messages/count_tokens) on the chat
// machinery of /v1/chat/completions: a request becomes the OpenAI-shaped chat request that
// endpoint takes (same template, same tool-call grammar and parser, same cache), and the chat
// result becomes Anthropic's message object or its stream of server-sent events.
#pragma once
#include <string>
#include <vector>

#include "server/json_fields.h"
#include "server/response_format.h"
#include "server/server_error.h"
#include "server/task.h"

namespace agentkv::server {

enum class AnthropicEndpoint { Messages, CountTokens };

// Checks an Anthropic request as the API does (max_tokens required for Messages, roles user /
// assistant, known block types) and returns the equivalent chat request: system first, text
// blocks joined, tool_use blocks as assistant tool_calls, tool_result blocks as tool messages,
// tools as functions, tool_choice auto / any / tool / none as auto / required / a function /
// none, stop_sequences as stop. Throws invalid_request naming the field at fault.
Json anthropic_to_chat_request(const Json& body, AnthropicEndpoint endpoint);

// "toolu_" + the random part of a chat tool-call id ("call_…").
std::string anthropic_tool_use_id(const std::string& call_id);

// The whole message of a non-streamed request.
Json anthropic_message_json(const FinalResult& r, const ResponseInfo& info);

// A streamed message: message_start, ping, then per content block content_block_start /
// content_block_delta (text_delta, thinking_delta, input_json_delta) / content_block_stop, then
// message_delta (stop_reason, usage) and message_stop. Every event is an object whose "type" is
// also its SSE event name.
class AnthropicStream {
 public:
  std::vector<Json> on_token(const TokenEvent& t, const ResponseInfo& info);
  std::vector<Json> on_final(const FinalResult& r, const ResponseInfo& info);

 private:
  enum class Block { None, Text, Thinking, ToolUse };
  void start(const ResponseInfo& info, int32_t n_prompt, const Timings* timings, std::vector<Json>& out);
  void translate(const std::vector<Json>& chat_deltas, std::vector<Json>& out);
  void open(Block kind, Json content_block, std::vector<Json>& out);
  void close(std::vector<Json>& out);

  bool started_ = false;
  ChatStream chat_;
  Block open_ = Block::None;
  int index_ = -1;               // the open (or last) content block
  int open_call_ = -1;           // chat tool-call index of the open tool_use block
};

// {"type": "error", "error": {"type": "invalid_request_error", "message": …}}
Json anthropic_error_body(const HttpError& e);
// The same from a llama-server-shaped error body ({"error": {"code", "message", "type"}}).
Json anthropic_error_body(const Json& llama_error_body);

bool is_anthropic_path(const std::string& path);

}  // namespace agentkv::server
