// Mistral Nemo tool calls: [TOOL_CALLS] then one JSON array of calls,
//   [TOOL_CALLS][{"name": "NAME", "arguments": {...}, "id": "abcdefghi"}, ...]
// as its template renders them (ids: 9 alphanumerics, which the template insists on when the
// calls come back in the history; the model's own id is kept, so the history renders as it
// was generated). Text before [TOOL_CALLS] is content; the array is one JSON value, so a broken
// element leaves all of it in content (from [TOOL_CALLS] on), as llama.cpp does; text after it is
// content.
#include "agentkv/gbnf.h"
#include "server/tool_formats.h"

namespace agentkv::server {

namespace {

using scan::Match;
using scan::skip_ws;

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";

}  // namespace

ToolSection parse_mistral_nemo_tool_calls(std::string_view text, bool partial) {
  ToolSection out;
  const size_t k = text.find(kToolCalls);
  if (k == std::string_view::npos) {
    std::string_view content = text;
    if (partial) content.remove_suffix(scan::partial_tag_suffix(content, kToolCalls));
    out.content = std::string(content);
    return out;
  }
  out.content = std::string(text.substr(0, k));
  const std::string_view malformed = text.substr(k);
  size_t q = skip_ws(text, k + kToolCalls.size());
  const Match open = scan::expect(text, q, "[");
  if (open != Match::Ok) {
    if (open == Match::Bad || !partial) out.content += malformed;
    return out;
  }
  std::vector<ToolCall> calls;
  q = skip_ws(text, q);
  if (q < text.size() && text[q] == ']') {  // an empty list: no calls
    out.content += scan::trim(text.substr(q + 1));
    return out;
  }
  while (true) {
    q = skip_ws(text, q);
    JsonCallParse c = parse_json_object_call(text, q);
    if (!is_mistral_tool_call_id(c.call.id)) c.call.id.clear();
    if (c.status == Match::Incomplete && partial) {
      if (c.has_name) calls.push_back(std::move(c.call));
      out.calls = std::move(calls);
      return out;
    }
    if (c.status != Match::Ok) break;
    calls.push_back(std::move(c.call));
    q = skip_ws(text, c.end);
    if (q >= text.size()) {
      if (!partial) break;  // cut off before the array closed
      out.calls = std::move(calls);
      return out;
    }
    if (text[q] == ',') {
      ++q;
      continue;
    }
    if (text[q] != ']') break;
    out.calls = std::move(calls);
    out.content += scan::trim(text.substr(q + 1));  // text after the array
    return out;
  }
  out.content += malformed;
  return out;
}

std::string mistral_nemo_tool_rules(const std::vector<GrammarTool>& tools, bool parallel) {
  std::string rules, alts;
  for (const GrammarTool& t : tools) {
    rules += arguments_rules(t);
    rules += t.prefix + "call ::= \"" + grammar::gbnf_literal(t.name + "\", \"arguments\": ") + "\" " + t.prefix + "root\n";
    alts += (alts.empty() ? "" : " | ") + t.prefix + "call";
  }
  // The id as the template wants it back: 9 alphanumerics.
  return "tool-calls ::= \"[TOOL_CALLS][\" " + repeated_calls("tool-call", ", ", parallel) + " \"]\"\n" +
         "tool-call ::= \"{\\\"name\\\": \\\"\" (" + alts + ") \", \\\"id\\\": \\\"\" [a-zA-Z0-9]{9} \"\\\"}\"\n" + rules;
}

}  // namespace agentkv::server
