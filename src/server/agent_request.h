// The agent-facing request fields: constrained decoding (grammar, json_schema, response_format),
// tools / tool_choice / parallel_tool_calls, reasoning_format, logprobs, and the check that every
// field of a request is one agentkv implements (a field it would ignore is a 400 naming it).
#pragma once
#include <string>

#include "server/completion_params.h"
#include "server/json_fields.h"
#include "server/tool_calls.h"

namespace agentkv::server {

enum class Endpoint { Native, OaiCompletion, OaiChat, Embedding };

// Throws invalid_request naming the first field agentkv does not implement (or implements only
// at a neutral value, e.g. "typical_p": 1).
void check_known_fields(const Json& body, Endpoint e);

// grammar / json_schema / response_format into p.grammar; logprobs fields into p.n_probs.
// Throws invalid_request for an invalid grammar or schema, or conflicting fields. harmony: the
// chat template is gpt-oss's, whose answer is framed in channels: a schema constrains the final
// channel's message (harmony_response_grammar); a GBNF `grammar` still applies as it is.
void parse_constraints(const Json& body, Endpoint e, CompletionParams& p, bool harmony = false);

// Chat: reasoning_budget_tokens / thinking_budget_tokens (-1: none) and the format's reasoning tags
// into p (server/reasoning_budget.h); thinking_open: the prompt opened a <think> block.
void read_reasoning_budget(const Json& body, ToolFormat format, const std::string& prompt, bool thinking_open,
                           CompletionParams& p);

// Chat: tools, tool_choice, parallel_tool_calls, reasoning_format and the reasoning budget. `prompt` is the rendered
// prompt (it tells whether the template opened a <think> block). Sets p.grammar for tool_choice
// required / named (a grammar) and auto (a lazy one). Returns how to parse the output.
// tojson_arguments: the template writes arguments back with tojson (template_dumps_arguments).
ChatParseOptions parse_chat_options(const Json& body, ToolFormat format, const std::string& prompt,
                                    CompletionParams& p, bool tojson_arguments = false);

}  // namespace agentkv::server
