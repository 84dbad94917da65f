// Tool calls and reasoning in chat output: the two tool-call formats of the Qwen families, the
// grammar that makes a model write valid calls (tool_choice), the parser that turns generated
// text into OpenAI's message {reasoning_content, content, tool_calls}, and the streaming diff
// that turns successive parses into delta chunks.
//
// Formats (chosen from the chat template's text):
// - Hermes (Qwen3, Qwen2.5): <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
// - Qwen XML (Qwen3.5, Qwen3-Coder):
//     <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
// Several calls in one answer are parallel calls. A call that does not parse (bad JSON, an
// unclosed tag) is left in `content` from its <tool_call> on, as llama-server does; a
// <tool_call> inside a <think> block is reasoning, not a call.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "server/json_fields.h"

namespace agentkv::server {

enum class ToolFormat { Hermes, QwenXml };
ToolFormat detect_tool_format(const std::string& template_source);
const char* tool_format_name(ToolFormat f);

struct ToolCall {
  std::string id;
  std::string name;
  std::string arguments;  // JSON text (the model's own text for Hermes calls)
};

struct ChatMessage {
  std::string reasoning;
  std::string content;
  std::vector<ToolCall> tool_calls;
};

struct ChatParseOptions {
  ToolFormat format = ToolFormat::Hermes;
  bool parse_tools = false;      // tools given and tool_choice != none
  bool parse_reasoning = true;   // reasoning_format != none
  bool thinking_open = false;    // the prompt ends inside <think> (generation starts in reasoning)
  Json tools = Json::array();    // the request's tools (XML values are typed by their schemas)
};

// partial: `text` is what was generated so far (streaming): a tag cut in the middle is held back
// and a call being written comes with its arguments so far (Hermes: a prefix of the final text;
// XML: the parameters completed so far). Final parses (partial = false) give calls ids.
ChatMessage parse_chat_output(std::string_view text, const ChatParseOptions& o, bool partial);

// The grammar for tool_choice "required" / a named function (only_name), or the lazy grammar
// of "auto" (the same rules; it starts at "<tool_call>"). think_prefix: the prompt opened a
// <think> block, which the answer closes first.
std::string tool_call_grammar(ToolFormat f, const Json& tools, const std::string& only_name, bool parallel,
                              bool think_prefix);

constexpr int kMaxParallelCalls = 8;

// "call_" + 24 random alphanumerics.
std::string make_tool_call_id();

// OpenAI delta objects that take a client from the last snapshot to `now`.
class ChatStreamDiff {
 public:
  std::vector<Json> update(const ChatMessage& now);
  // ids of the calls sent so far (the final message uses the same ones)
  const std::vector<std::string>& ids() const { return ids_; }

 private:
  ChatMessage sent_;
  std::vector<std::string> ids_;
};

// message.tool_calls of a chat completion.
Json tool_calls_json(const std::vector<ToolCall>& calls);

}  // namespace agentkv::server
