// What each tool-call format implements, one file per format, and what they share. The public
// entry points (tool_calls.h) pick the format's functions; reasoning (<think>) is split off before.
//
//   format            file                           calls look like
//   Hermes, QwenXml   tool_calls.cpp                 <tool_call>...</tool_call>
//   Llama3Json        tool_format_llama3.cpp         {"name": N, "parameters": {...}}, <|python_tag|>...
//   MistralNemo       tool_format_mistral_nemo.cpp   [TOOL_CALLS][{"name": N, "arguments": {...}, "id": I}]
//   MistralArgs(Id)   tool_format_mistral_args.cpp   [TOOL_CALLS]N[CALL_ID]I[ARGS]{...}
//   Harmony           tool_format_harmony.cpp        <|start|>assistant to=functions.N<|channel|>commentary json<|message|>{...}
#pragma once
#include <string>
#include <string_view>
#include <vector>

#include "agentkv/json_schema.h"
#include "server/tool_call_scan.h"
#include "server/tool_calls.h"

namespace agentkv::server {

// The part of an answer after its reasoning, split into content and calls. While streaming
// (partial), a call being written comes with the arguments so far, and text that may still turn
// out to be a call is held back (neither content nor call yet).
struct ToolSection {
  std::string content;
  std::vector<ToolCall> calls;
};

ToolSection parse_tagged_tool_calls(std::string_view text, const ChatParseOptions& o, bool partial);  // Hermes, QwenXml
ToolSection parse_llama3_tool_calls(std::string_view text, const ChatParseOptions& o, bool partial);
ToolSection parse_mistral_nemo_tool_calls(std::string_view text, bool partial);
ToolSection parse_mistral_args_tool_calls(std::string_view text, bool partial);
// Harmony splits reasoning off itself (its analysis channel): the whole message.
ChatMessage parse_harmony_output(std::string_view text, const ChatParseOptions& o, bool partial);

// A tool the grammar offers: its name, its parameters' schema, and the prefix of its rules.
struct GrammarTool {
  std::string name;
  Json parameters;
  std::string prefix;  // "t0-", "t1-", ...
  grammar::JsonSpacing spacing = grammar::JsonSpacing::Compact;  // of the arguments' JSON
};

// The request's tools (only `only_name` when set); throws agentkv::Error when none is left.
std::vector<GrammarTool> grammar_tools(const Json& tools, const std::string& only_name, grammar::JsonSpacing spacing);
// The rules of a tool's arguments (a JSON value of its schema): the rule <prefix>root.
std::string arguments_rules(const GrammarTool& t);
// "call (sep call){0,7}" when parallel, else "call".
std::string repeated_calls(const std::string& call, const std::string& separator_literal, bool parallel);

// Each format's rules, defining `tool-calls` (what root expands to after a closed think block).
std::string llama3_tool_rules(const std::vector<GrammarTool>& tools, bool parallel);
std::string mistral_nemo_tool_rules(const std::vector<GrammarTool>& tools, bool parallel);
std::string mistral_args_tool_rules(const std::vector<GrammarTool>& tools, bool parallel, bool with_call_id);
// from_answer_start: tool_choice required / named (root is `harmony-analysis? tool-calls`); else
// the lazy grammar's, which starts at the trigger.
std::string harmony_tool_rules(const std::vector<GrammarTool>& tools, bool from_answer_start);
// `harmony-analysis`: one analysis message and the next message's `<|start|>assistant`.
std::string harmony_analysis_rules();

// A call written as one JSON object (Llama 3.x, each element of Mistral Nemo's array):
// {"name": N, "parameters" or "arguments": {...}}, optionally "type": "function" before the name
// and "id": I after the arguments. Read in that key order as it streams (the argument text so far
// is a prefix of the final one, the model's own text); any other shape only once complete (keys
// in another order, arguments as a string of JSON). Incomplete while the object is open.
struct JsonCallParse {
  scan::Match status = scan::Match::Bad;
  ToolCall call;          // id: the one the model wrote, if any
  bool has_name = false;  // partial: the name is known, the call can be announced
  size_t end = 0;         // past the object
};
JsonCallParse parse_json_object_call(std::string_view s, size_t p);

// A call's arguments from a parsed JSON value: an object's text, or a string holding JSON.
// False when the value is neither.
bool arguments_from_json(const Json& value, std::string& arguments);

}  // namespace agentkv::server
