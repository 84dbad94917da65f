// Mistral's [ARGS] tool calls: [TOOL_CALLS]NAME[ARGS]{...} per call (Devstral, Magistral /
// Ministral), and with the call's id between them, [TOOL_CALLS]NAME[CALL_ID]abcdefghi[ARGS]{...}
// (Mistral Small 3.2), as their templates render them; several calls follow one another. The
// parser reads both forms (the id, 9 alphanumerics, is kept when the model wrote one). Text
// before and between calls is content; a call that does not parse is content from its
// [TOOL_CALLS] on. A call is announced once its [ARGS] is seen (a '[' after the name alone could
// still turn out to be text).
#include <algorithm>
#include <cctype>

#include "agentkv/gbnf.h"
#include "server/tool_formats.h"

namespace agentkv::server {

namespace {

using scan::Match;
using scan::expect;

constexpr std::string_view kToolCalls = "[TOOL_CALLS]";
constexpr std::string_view kCallId = "[CALL_ID]";
constexpr std::string_view kArgs = "[ARGS]";

struct CallParse {
  Match status = Match::Bad;
  ToolCall call;
  bool has_name = false;
  size_t end = 0;
};

// Function names as OpenAI allows them: [a-zA-Z0-9_-], plus '.' and ':' some clients use.
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':'; }

// A run of name characters from q up to a '[' (the next marker): Incomplete when the text stops first.
Match scan_name(std::string_view s, size_t& q, std::string& out) {
  const size_t start = q;
  while (q < s.size() && is_name_char(s[q])) ++q;
  if (q >= s.size()) return Match::Incomplete;
  if (s[q] != '[' || q == start) return Match::Bad;
  out = std::string(s.substr(start, q - start));
  return Match::Ok;
}

// After "[TOOL_CALLS]".
CallParse parse_args_call(std::string_view s, size_t p) {
  CallParse r;
  size_t q = p;
  if ((r.status = scan_name(s, q, r.call.name)) != Match::Ok) return r;
  size_t t = q;
  const Match id_marker = expect(s, t, kCallId);
  if (id_marker == Match::Incomplete) {
    r.status = Match::Incomplete;  // "[" or "[CA...": either marker yet
    return r;
  }
  if (id_marker == Match::Ok) {
    q = t;
    std::string id;
    if ((r.status = scan_name(s, q, id)) != Match::Ok) return r;
    if (is_mistral_tool_call_id(id)) r.call.id = id;
  }
  if ((r.status = expect(s, q, kArgs)) != Match::Ok) return r;
  r.has_name = true;
  q = scan::skip_ws(s, q);
  if (q < s.size() && s[q] != '{') {
    r.status = Match::Bad;
    return r;
  }
  size_t end = 0;
  r.status = scan::scan_json_value(s, q, end);
  if (r.status == Match::Incomplete) r.call.arguments = std::string(s.substr(q));
  if (r.status != Match::Ok) return r;
  r.call.arguments = std::string(s.substr(q, end - q));
  if (!Json::accept(r.call.arguments)) r.status = Match::Bad;
  r.end = end;
  return r;
}

}  // namespace

ToolSection parse_mistral_args_tool_calls(std::string_view text, bool partial) {
  ToolSection out;
  size_t pos = 0;
  while (true) {
    const size_t k = text.find(kToolCalls, pos);
    if (k == std::string_view::npos) {
      std::string_view tail = text.substr(pos);
      if (partial) tail.remove_suffix(scan::partial_tag_suffix(tail, kToolCalls));
      if (!out.calls.empty() && scan::trim(tail).empty()) break;  // whitespace between/after calls
      out.content += tail;
      break;
    }
    const std::string_view before = text.substr(pos, k - pos);
    if (out.calls.empty() || !scan::trim(before).empty()) out.content += before;
    CallParse c = parse_args_call(text, k + kToolCalls.size());
    if (c.status == Match::Ok) {
      out.calls.push_back(std::move(c.call));
      pos = c.end;
      continue;
    }
    if (c.status == Match::Incomplete && partial) {
      if (c.has_name) out.calls.push_back(std::move(c.call));
      break;
    }
    out.content += text.substr(k);  // malformed (or cut off): the rest is content
    break;
  }
  return out;
}

std::string mistral_args_tool_rules(const std::vector<GrammarTool>& tools, bool parallel, bool with_call_id) {
  std::string rules, alts;
  // Small 3.2 writes an id of its own (9 alphanumerics, what its template wants back).
  const std::string id = with_call_id ? " \"" + grammar::gbnf_literal(kCallId) + "\" [a-zA-Z0-9]{9}" : "";
  for (const GrammarTool& t : tools) {
    rules += arguments_rules(t);
    rules += t.prefix + "call ::= \"" + grammar::gbnf_literal(t.name) + "\"" + id + " \"" + grammar::gbnf_literal(kArgs) +
             "\" " + t.prefix + "root\n";
    alts += (alts.empty() ? "" : " | ") + t.prefix + "call";
  }
  // Calls follow one another with nothing between them.
  const std::string calls = parallel ? "tool-call{1," + std::to_string(kMaxParallelCalls) + "}" : "tool-call";
  return "tool-calls ::= " + calls + "\n" + "tool-call ::= \"" + grammar::gbnf_literal(kToolCalls) + "\" (" + alts + ")\n" + rules;
}

}  // namespace agentkv::server
