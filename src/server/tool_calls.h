// Tool calls and reasoning in chat output: the tool-call formats of the Qwen, Llama 3.x and
// Mistral families, the grammar that makes a model write valid calls (tool_choice), the parser
// that turns generated text into OpenAI's message {reasoning_content, content, tool_calls}, and
// the streaming diff that turns successive parses into delta chunks.
//
// Formats (chosen from the chat template's text, detect_tool_format):
// - Hermes (Qwen3, Qwen2.5): <tool_call>\n{"name": "NAME", "arguments": {...}}\n</tool_call>
// - Qwen XML (Qwen3.5, Qwen3-Coder):
//     <tool_call>\n<function=NAME>\n<parameter=P>\nVALUE\n</parameter>\n</function>\n</tool_call>
// - Llama 3.x JSON: {"name": "NAME", "parameters": {...}} at the start of the answer ("arguments"
//   accepted too; more calls after ';' or a newline), or after <|python_tag|> (also
//   NAME.call(k="v") and raw code for a "python" / "code_interpreter" tool): tool_format_llama3.cpp
// - Mistral Nemo: [TOOL_CALLS][{"name": "NAME", "arguments": {...}, "id": "9alnum"}, ...]
// - Mistral [ARGS] (Devstral, Magistral / Ministral): [TOOL_CALLS]NAME[ARGS]{...} per call;
//   Mistral Small 3.2 adds the id: [TOOL_CALLS]NAME[CALL_ID]9alnum[ARGS]{...}
// - Harmony (gpt-oss): messages on channels, <|channel|>analysis<|message|>...<|end|> (reasoning),
//   <|start|>assistant<|channel|>final<|message|>... (content) and
//   <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{...} (a call; the
//   recipient may also follow the channel): tool_format_harmony.cpp
// Several calls in one answer are parallel calls. A call that does not parse (bad JSON, an
// unclosed tag) is left in `content` from its opening on, as llama-server does; a call inside a
// <think> block is reasoning, not a call.
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/tokenizer.h"
#include "server/json_fields.h"

namespace agentkv::server {

enum class ToolFormat { Hermes, QwenXml, Llama3Json, MistralNemo, MistralArgs, MistralCallId, Harmony };
// Hermes when the template shows none of the others (as before: ChatML, Gemma, ...).
ToolFormat detect_tool_format(const std::string& template_source);
const char* tool_format_name(ToolFormat f);

// Where the lazy grammar of tool_choice "auto" starts: the format's opening texts. Llama 3's
// "{\"name\"" counts only at the start of the answer (the parser reads a call only there). One
// starting with '^' matches only at the answer's start (GrammarSettings::triggers).
std::vector<std::string> tool_call_triggers(ToolFormat f);
// The format's markers that are control tokens in the model's vocabulary (<|python_tag|>,
// [TOOL_CALLS], [ARGS], [CALL_ID]): they render no text unless the server keeps them, as
// llama.cpp's preserved_tokens do; without them the parser and the grammar never see the marker.
// Harmony's framing (<|start|>, <|channel|>, <|message|>, <|constrain|>, <|end|>) the tokenizer
// already renders always (llama.cpp's harmony rule); it is listed for a vocabulary that would not.
std::vector<std::string> tool_call_preserved_tokens(ToolFormat f);
// Those of the markers that are control tokens of `tok` (sorted ids): CompletionParams::kept_control_tokens.
std::vector<Token> tool_marker_tokens(ToolFormat f, const Tokenizer& tok);
// The template reads tool_calls[].function.arguments as an object (iterates it, or prints it with
// tojson without first testing for a string): a client's JSON string must be parsed for it.
bool template_wants_object_arguments(const std::string& template_source);
// The template writes a call's arguments back with `tojson` (Llama 3.x, Mistral Nemo / Small 3.2):
// tool-call grammars then let the model write only that spacing (grammar::JsonSpacing::Tojson),
// so that the next turn's prompt holds the answer's own text and its cached tokens.
bool template_dumps_arguments(const std::string& template_source);

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
  // Harmony: the header of the message the prompt leaves open (a continued answer ends inside a
  // message's body: "<|channel|>final<|message|>"); "" when the prompt ends with a generation prompt.
  std::string harmony_open_header;
  Json tools = Json::array();    // the request's tools (types XML values; Llama's raw code calls its python tool)
};

// partial: `text` is what was generated so far (streaming): a tag cut in the middle is held back
// and a call being written comes with its arguments so far (Hermes: a prefix of the final text;
// XML: the parameters completed so far). Final parses (partial = false) give calls ids.
ChatMessage parse_chat_output(std::string_view text, const ChatParseOptions& o, bool partial);

// The grammar for tool_choice "required" / a named function (only_name), or the lazy grammar
// of "auto" (the same rules; it starts at a trigger, tool_call_triggers). think_prefix: the prompt
// opened a <think> block, which the answer closes first; for Harmony, the grammar is not the lazy
// one and the answer may reason in one analysis message first. Llama 3 and gpt-oss templates
// render one call per turn, so their grammars write one call even when `parallel`.
std::string tool_call_grammar(ToolFormat f, const Json& tools, const std::string& only_name, bool parallel,
                              bool think_prefix, bool tojson_arguments = false);

constexpr int kMaxParallelCalls = 8;

// gpt-oss: the header of the message a prompt ends inside of (after its last `<|start|>assistant`,
// a header and no end marker since), "" when there is none.
std::string harmony_open_header(std::string_view prompt);

// gpt-oss: the grammar of a response_format / json_schema, whose JSON is the final channel's
// message (an analysis message may come first). Throws agentkv::Error as json_schema_to_gbnf.
std::string harmony_response_grammar(const Json& schema);

// "call_" + 24 random alphanumerics; Mistral formats: 9 alphanumerics (their templates refuse
// other ids). Final parses give every call one; Mistral parses keep the model's own id when it
// wrote one, and give ids to partial calls too (the streaming diff sends the first it sees).
std::string make_tool_call_id();
std::string make_tool_call_id(ToolFormat f);
bool is_mistral_tool_call_id(std::string_view id);

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
