// The pure pieces of the Anthropic Messages and OpenAI Responses endpoints: request conversion to
// the chat request, and the event streams built from synthetic token events (Hermes tool calls,
// and gpt-oss's harmony).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "server/anthropic_messages.h"
#include "server/openai_responses.h"
#include "server/server_error.h"

namespace agentkv::server {
namespace {

template <class Fn>
std::string error_message(Fn fn) {
  try {
    fn();
  } catch (const HttpError& e) {
    EXPECT_EQ(e.type(), ErrorType::InvalidRequest);
    return e.what();
  }
  ADD_FAILURE() << "no HttpError thrown";
  return "";
}

TEST(AnthropicRequest, BecomesTheChatRequest) {
  const Json body = Json::parse(R"({
    "model": "claude", "max_tokens": 64, "system": [{"type": "text", "text": "Be brief."}],
    "stop_sequences": ["END"], "temperature": 0.5, "top_k": 5, "metadata": {"user_id": "u"},
    "tools": [{"name": "read", "description": "Read", "input_schema": {"type": "object"}}],
    "tool_choice": {"type": "any", "disable_parallel_tool_use": true},
    "messages": [
      {"role": "user", "content": "hi"},
      {"role": "assistant", "content": [{"type": "text", "text": "let me look"},
                                        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"p": 1}}]},
      {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "data", "is_error": true},
                                   {"type": "text", "text": "and?"}]}]})");
  const Json chat = anthropic_to_chat_request(body, AnthropicEndpoint::Messages);
  EXPECT_EQ(chat["max_tokens"], 64);
  EXPECT_EQ(chat["stop"], Json::array({"END"}));
  EXPECT_EQ(chat["top_k"], 5);
  EXPECT_EQ(chat["tool_choice"], "required");
  EXPECT_EQ(chat["parallel_tool_calls"], false);
  EXPECT_FALSE(chat.contains("metadata"));
  EXPECT_EQ(chat["tools"][0]["function"]["parameters"], Json::parse(R"({"type": "object"})"));
  const Json& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0], Json::parse(R"({"role": "system", "content": "Be brief."})"));
  EXPECT_EQ(m[2]["content"], "let me look");
  EXPECT_EQ(m[2]["tool_calls"][0]["function"]["arguments"], Json::parse(R"({"p": 1})"));
  EXPECT_EQ(m[3], Json::parse(R"({"role": "tool", "tool_call_id": "toolu_1", "content": "Error: data"})"));
  EXPECT_EQ(m[4], Json::parse(R"({"role": "user", "content": "and?"})"));
}

TEST(AnthropicRequest, RefusesWhatTheApiRefuses) {
  auto msg = [](const char* text) {
    return error_message([&] { anthropic_to_chat_request(Json::parse(text), AnthropicEndpoint::Messages); });
  };
  EXPECT_NE(msg(R"({"messages": [{"role": "user", "content": "x"}]})").find("max_tokens"), std::string::npos);
  EXPECT_NE(msg(R"({"max_tokens": 1, "messages": [{"role": "system", "content": "x"}]})").find("role"), std::string::npos);
  EXPECT_NE(msg(R"({"max_tokens": 1, "messages": [{"role": "user", "content": [{"type": "image"}]}]})").find("image"),
            std::string::npos);
  EXPECT_NE(msg(R"({"max_tokens": 1, "messages": [{"role": "user", "content": 5}]})").find("content"), std::string::npos);
  EXPECT_NE(msg(R"({"max_tokens": 1, "messages": [{"role": "user", "content": "x"}], "tool_choice": {"type": "maybe"}})")
                .find("tool_choice"),
            std::string::npos);
  // count_tokens needs no max_tokens.
  EXPECT_NO_THROW(anthropic_to_chat_request(Json::parse(R"({"messages": [{"role": "user", "content": "x"}]})"),
                                            AnthropicEndpoint::CountTokens));
}

TokenEvent token(const std::string& text) {
  TokenEvent t;
  t.text = text;
  t.n_prompt = 7;
  return t;
}

FinalResult final_result(const std::string& content, StopType stop) {
  FinalResult r;
  r.content = content;
  r.stop = stop;
  r.n_prompt = 7;
  r.n_decoded = 3;
  r.timings.cache_n = 4;
  r.timings.prompt_n = 3;
  return r;
}

ResponseInfo tool_info() {
  ResponseInfo info;
  info.completion_id = "msg_x";
  info.model = "m";
  info.chat.parse_tools = true;
  info.chat.tools = Json::parse(R"([{"type": "function", "function": {"name": "read"}}])");
  return info;
}

const std::vector<std::string> kPieces = {"Sure", ".", "<tool_call>\n{\"name\": \"read\", ", "\"arguments\": {\"p\": ",
                                          "1}}\n</tool_call>"};

TEST(AnthropicStream, EventsOfAToolCall) {
  const ResponseInfo info = tool_info();
  AnthropicStream s;
  std::vector<Json> events;
  std::string all;
  for (const std::string& p : kPieces) {
    all += p;
    for (Json& e : s.on_token(token(p), info)) events.push_back(e);
  }
  for (Json& e : s.on_final(final_result(all, StopType::Eos), info)) events.push_back(e);
  std::vector<std::string> types;
  std::string text, partial;
  for (const Json& e : events) {
    types.push_back(e["type"]);
    if (e["type"] == "content_block_delta" && e["delta"]["type"] == "text_delta") text += e["delta"]["text"];
    if (e["type"] == "content_block_delta" && e["delta"]["type"] == "input_json_delta") partial += e["delta"]["partial_json"];
  }
  ASSERT_GE(types.size(), 8u);
  EXPECT_EQ(types[0], "message_start");
  EXPECT_EQ(types[1], "ping");
  EXPECT_EQ(types[2], "content_block_start");
  EXPECT_EQ(types.back(), "message_stop");
  EXPECT_EQ(text, "Sure.");
  EXPECT_EQ(Json::parse(partial), Json::parse(R"({"p": 1})"));
  const Json& delta = events[events.size() - 2];
  EXPECT_EQ(delta["delta"]["stop_reason"], "tool_use");
  EXPECT_EQ(delta["usage"]["input_tokens"], 3);
  EXPECT_EQ(delta["usage"]["cache_read_input_tokens"], 4);
  int starts = 0, stops = 0;
  for (const Json& e : events) {
    if (e["type"] == "content_block_start") {
      EXPECT_EQ(e["index"], starts++);
      if (e["content_block"]["type"] == "tool_use") {
        EXPECT_EQ(e["content_block"]["name"], "read");
        EXPECT_EQ(e["content_block"]["id"].get<std::string>().rfind("toolu_", 0), 0u);
      }
    }
    if (e["type"] == "content_block_stop") EXPECT_EQ(e["index"], stops++);
  }
  EXPECT_EQ(starts, 2);
  EXPECT_EQ(stops, 2);

  // The whole message says the same.
  const Json whole = anthropic_message_json(final_result(all, StopType::Eos), info);
  ASSERT_EQ(whole["content"].size(), 2u);
  EXPECT_EQ(whole["content"][0], Json::parse(R"({"type": "text", "text": "Sure."})"));
  EXPECT_EQ(whole["content"][1]["input"], Json::parse(R"({"p": 1})"));
  EXPECT_EQ(whole["stop_reason"], "tool_use");
  EXPECT_EQ(anthropic_message_json(final_result("abc", StopType::Limit), info)["stop_reason"], "max_tokens");
  FinalResult word = final_result("abc", StopType::Word);
  word.stopping_word = "END";
  EXPECT_EQ(anthropic_message_json(word, info)["stop_sequence"], "END");
}

TEST(AnthropicErrors, Shape) {
  const Json e = anthropic_error_body(HttpError(ErrorType::Authentication, "Invalid API Key"));
  EXPECT_EQ(e, Json::parse(R"({"type": "error", "error": {"type": "authentication_error", "message": "Invalid API Key"}})"));
  EXPECT_EQ(anthropic_error_body(exceed_context_size(10, 5))["error"]["type"], "invalid_request_error");
  EXPECT_EQ(anthropic_error_body(HttpError(ErrorType::Unavailable, "busy"))["error"]["type"], "overloaded_error");
  EXPECT_EQ(anthropic_error_body(HttpError(ErrorType::PayloadTooLarge, "big"))["error"]["type"], "request_too_large");
}

TEST(ResponsesRequest, BecomesTheChatRequest) {
  const Json body = Json::parse(R"({
    "model": "gpt", "instructions": "Be brief.", "max_output_tokens": 32, "store": true,
    "tools": [{"type": "function", "name": "read", "parameters": {"type": "object"}, "strict": true}],
    "tool_choice": {"type": "function", "name": "read"},
    "input": [
      {"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "looking"}]},
      {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{\"p\": 1}"},
      {"type": "function_call", "call_id": "call_2", "name": "read", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "data"},
      {"role": "developer", "content": "more"}]})");
  const Json chat = responses_to_chat_request(body);
  EXPECT_EQ(chat["max_tokens"], 32);
  EXPECT_EQ(chat["tool_choice"], Json::parse(R"({"type": "function", "function": {"name": "read"}})"));
  const Json& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[0]["role"], "system");
  EXPECT_EQ(m[1]["content"], "hi");
  EXPECT_EQ(m[2]["content"], "looking");
  ASSERT_EQ(m[2]["tool_calls"].size(), 2u);
  EXPECT_EQ(m[2]["tool_calls"][1]["id"], "call_2");
  EXPECT_EQ(m[3], Json::parse(R"({"role": "tool", "tool_call_id": "call_1", "content": "data"})"));
  EXPECT_EQ(m[4], Json::parse(R"({"role": "system", "content": "more"})"));
  EXPECT_NE(error_message([] { responses_to_chat_request(Json::parse(R"({"input": "x", "previous_response_id": "r"})")); })
                .find("previous_response_id"),
            std::string::npos);
  EXPECT_NE(error_message([] { responses_to_chat_request(Json::parse(R"({"input": [{"type": "web_search_call"}]})")); })
                .find("web_search_call"),
            std::string::npos);
}

TEST(ResponsesStream, EventsOfAToolCall) {
  ResponseInfo info = tool_info();
  info.completion_id = "resp_x";
  info.request_echo = responses_echo(Json::parse(R"({"instructions": "I", "metadata": {"a": "b"}})"));
  ResponsesStream s;
  std::vector<Json> events;
  std::string all;
  for (const std::string& p : kPieces) {
    all += p;
    for (Json& e : s.on_token(token(p), info)) events.push_back(e);
  }
  for (Json& e : s.on_final(final_result(all, StopType::Eos), info)) events.push_back(e);
  std::string text, args;
  for (size_t i = 0; i < events.size(); ++i) {
    EXPECT_EQ(events[i]["sequence_number"], static_cast<int>(i));
    if (events[i]["type"] == "response.output_text.delta") text += events[i]["delta"];
    if (events[i]["type"] == "response.function_call_arguments.delta") args += events[i]["delta"];
  }
  EXPECT_EQ(events[0]["type"], "response.created");
  EXPECT_EQ(text, "Sure.");
  EXPECT_EQ(Json::parse(args), Json::parse(R"({"p": 1})"));
  const Json& done = events.back();
  EXPECT_EQ(done["type"], "response.completed");
  const Json& output = done["response"]["output"];
  ASSERT_EQ(output.size(), 2u);
  EXPECT_EQ(output[0]["content"][0]["text"], "Sure.");
  EXPECT_EQ(output[1]["type"], "function_call");
  EXPECT_EQ(output[1]["name"], "read");
  EXPECT_EQ(done["response"]["instructions"], "I");
  EXPECT_EQ(done["response"]["usage"]["input_tokens_details"]["cached_tokens"], 4);

  const Json whole = responses_json(final_result(all, StopType::Eos), info);
  ASSERT_EQ(whole["output"].size(), 2u);
  EXPECT_EQ(whole["output"][1]["arguments"], output[1]["arguments"]);
  EXPECT_EQ(responses_json(final_result("abc", StopType::Limit), info)["status"], "incomplete");
}

// A reasoning item goes to the assistant message or calls after it as reasoning_content, which
// templates that render earlier reasoning (gpt-oss's before a call, Qwen3's within a tool loop)
// need to render the answer as it was generated.
TEST(ResponsesRequest, ReasoningGoesWithTheAnswerAfterIt) {
  const Json chat = responses_to_chat_request(Json::parse(R"({"input": [
      {"role": "user", "content": "hi"},
      {"type": "reasoning", "id": "rs_1", "summary": [], "content": [{"type": "reasoning_text", "text": "Need to read."}]},
      {"type": "function_call", "call_id": "call_1", "name": "read", "arguments": "{}"},
      {"type": "function_call_output", "call_id": "call_1", "output": "data"},
      {"type": "reasoning", "id": "rs_2", "summary": [{"type": "summary_text", "text": "Done."}]},
      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "It says data."}]},
      {"type": "reasoning", "id": "rs_3", "content": [{"type": "reasoning_text", "text": "dropped"}]},
      {"role": "user", "content": "thanks"}]})"));
  const Json& m = chat["messages"];
  ASSERT_EQ(m.size(), 5u);
  EXPECT_EQ(m[1]["reasoning_content"], "Need to read.");
  EXPECT_EQ(m[1]["tool_calls"][0]["id"], "call_1");
  EXPECT_EQ(m[3]["reasoning_content"], "Done.");
  EXPECT_EQ(m[3]["content"], "It says data.");
  EXPECT_FALSE(m[4].contains("reasoning_content"));
  EXPECT_NE(error_message([] { responses_to_chat_request(Json::parse(R"({"input": [{"type": "reasoning", "content": "x"}]})")); })
                .find("content"),
            std::string::npos);
}

// gpt-oss's harmony output reaches both APIs as the chat endpoint parses it: the analysis channel
// as a thinking block / reasoning item, the call as tool_use / function_call.
TEST(HarmonyOutput, ReachesAnthropicAndResponses) {
  ResponseInfo info = tool_info();
  info.chat.format = ToolFormat::Harmony;
  const std::vector<std::string> pieces = {"<|channel|>analysis<|message|>Need", " it.<|end|><|start|>assistant to=functions.",
                                           "read<|channel|>commentary json<|message|>{\"p\": ", "1}"};
  std::string all;
  AnthropicStream a;
  ResponsesStream r;
  std::string thinking, partial, reasoning, args;
  auto collect = [&](const std::vector<Json>& anthropic, const std::vector<Json>& responses) {
    for (const Json& e : anthropic) {
      if (e["type"] != "content_block_delta") continue;
      if (e["delta"]["type"] == "thinking_delta") thinking += e["delta"]["thinking"];
      if (e["delta"]["type"] == "input_json_delta") partial += e["delta"]["partial_json"];
    }
    for (const Json& e : responses) {
      if (e["type"] == "response.reasoning_text.delta") reasoning += e["delta"];
      if (e["type"] == "response.function_call_arguments.delta") args += e["delta"];
    }
  };
  for (const std::string& p : pieces) {
    all += p;
    collect(a.on_token(token(p), info), r.on_token(token(p), info));
  }
  collect(a.on_final(final_result(all, StopType::Eos), info), r.on_final(final_result(all, StopType::Eos), info));
  EXPECT_EQ(thinking, "Need it.");
  EXPECT_EQ(Json::parse(partial), Json::parse(R"({"p": 1})"));
  EXPECT_EQ(reasoning, "Need it.");
  EXPECT_EQ(args, R"({"p": 1})");
  const Json message = anthropic_message_json(final_result(all, StopType::Eos), info);
  ASSERT_EQ(message["content"].size(), 2u);
  EXPECT_EQ(message["content"][0]["thinking"], "Need it.");
  EXPECT_EQ(message["content"][1]["name"], "read");
  EXPECT_EQ(message["stop_reason"], "tool_use");
  const Json response = responses_json(final_result(all, StopType::Eos), info);
  ASSERT_EQ(response["output"].size(), 2u);
  EXPECT_EQ(response["output"][0]["type"], "reasoning");
  EXPECT_EQ(response["output"][1]["type"], "function_call");
}

}  // namespace
}  // namespace agentkv::server
