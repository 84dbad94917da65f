// gpt-oss's harmony format. The prompt ends with the generation prompt `<|start|>assistant`; the
// answer is a sequence of messages, each a header and a body:
//
//   <|channel|>analysis<|message|>REASONING<|end|>
//   <|start|>assistant<|channel|>final<|message|>ANSWER                     (then <|return|>)
//   <|start|>assistant to=functions.NAME<|channel|>commentary json<|message|>{ARGS}   (then <|call|>)
//   <|start|>assistant<|channel|>commentary to=functions.NAME <|constrain|>json<|message|>{ARGS}
//
// (the first message's `<|start|>assistant` is the prompt's). A header holds a channel
// (`<|channel|>analysis | commentary | final`), optionally a recipient (` to=R`, before or after the
// channel) and a content type (` json`, ` <|constrain|>json`); the body runs to `<|end|>` (another
// message follows) or `<|call|>` / `<|return|>` (end-of-generation tokens, which do not reach the
// text: the body then runs to the end). analysis → reasoning (several messages concatenate),
// final and commentary without a recipient (a preamble) → content, a recipient `functions.NAME`
// in either channel → a tool call whose body is its JSON arguments, kept as the model wrote
// them. A recipient `assistant` (gpt-oss-20b's stray `<|channel|>commentary to=assistant`
// before the real channel) is no recipient; when a header names two channels the last counts.
//
// What does not parse is content from the failed message's header on, as the other formats
// leave a malformed call in content: an unknown channel or role, a recipient that is not a
// function (harmony's builtin browser / python tools, which the request cannot declare), a
// call whose arguments are not one JSON object, text that is no header at all. An analysis cut
// off by the token limit is reasoning, a final message cut off is content, a call cut off is
// malformed. With reasoning_format "none", an analysis message's text (tags included) is content,
// as llama.cpp gives it.
#include <algorithm>
#include <cctype>

#include "agentkv/gbnf.h"
#include "agentkv/json_schema.h"
#include "server/tool_formats.h"

namespace agentkv::server {

namespace {

using scan::Match;
using scan::expect;

constexpr std::string_view kStart = "<|start|>";
constexpr std::string_view kChannel = "<|channel|>";
constexpr std::string_view kMessage = "<|message|>";
constexpr std::string_view kConstrain = "<|constrain|>";
constexpr std::string_view kEnd = "<|end|>";
constexpr std::string_view kBodyEnds[] = {kEnd, "<|call|>", "<|return|>"};
constexpr std::string_view kFunctions = "functions.";

bool is_word_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.' || c == ':' || c == '/';
}

// A word at q (the role, channel, recipient or content type): Incomplete when the text stops
// inside it (it may go on), Bad when there is none.
Match read_word(std::string_view s, size_t& q, std::string& out) {
  const size_t start = q;
  while (q < s.size() && is_word_char(s[q])) ++q;
  if (q == s.size()) return Match::Incomplete;
  if (q == start) return Match::Bad;
  out = std::string(s.substr(start, q - start));
  return Match::Ok;
}

struct Header {
  std::string channel, recipient, content_type;
  size_t frame = 0;  // past "<|start|>ROLE": where the message's own text starts
  size_t body = 0;   // past "<|message|>"
};

// A message header at p. `first`: the prompt wrote this message's "<|start|>assistant".
Match parse_header(std::string_view s, size_t p, bool first, Header& h) {
  size_t q = p;
  Match m = expect(s, q, kStart);
  if (m == Match::Incomplete) return m;
  if (m == Match::Ok) {
    std::string role;
    if ((m = read_word(s, q, role)) != Match::Ok) return m;
    if (role != "assistant") return Match::Bad;
  } else if (!first) {
    return Match::Bad;  // after <|end|>, a message starts with <|start|>
  }
  h.frame = q;
  while (true) {
    if (q >= s.size()) return Match::Incomplete;
    if ((m = expect(s, q, kMessage)) != Match::Bad) {
      if (m == Match::Incomplete) return m;
      break;
    }
    if ((m = expect(s, q, kChannel)) != Match::Bad) {
      if (m == Match::Incomplete || (m = read_word(s, q, h.channel)) != Match::Ok) return m;
      continue;
    }
    if ((m = expect(s, q, kConstrain)) != Match::Bad) {
      if (m == Match::Incomplete || (m = read_word(s, q, h.content_type)) != Match::Ok) return m;
      continue;
    }
    if (s[q] != ' ') return Match::Bad;
    ++q;
    if ((m = expect(s, q, "to=")) != Match::Bad) {
      if (m == Match::Incomplete || (m = read_word(s, q, h.recipient)) != Match::Ok) return m;
      continue;
    }
    if ((m = expect(s, q, kConstrain)) == Match::Incomplete) return m;
    if ((m = read_word(s, q, h.content_type)) != Match::Ok) return m;  // " json" / " <|constrain|>json"
  }
  if (h.recipient == "assistant") h.recipient.clear();
  if (h.channel != "analysis" && h.channel != "commentary" && h.channel != "final") return Match::Bad;
  if (!h.recipient.empty() && (h.recipient.compare(0, kFunctions.size(), kFunctions) != 0 ||
                               h.recipient.size() == kFunctions.size() || h.channel == "final"))
    return Match::Bad;  // only the request's functions are called
  h.body = q;
  return Match::Ok;
}

// A call's body: its JSON arguments (an object). `open`: the body may still grow (streaming).
Match parse_arguments(std::string_view body, bool open, ToolCall& call) {
  const size_t q = scan::skip_ws(body, 0);
  size_t end = 0;
  const Match m = q < body.size() ? scan::scan_json_value(body, q, end) : Match::Incomplete;
  if (m == Match::Incomplete) {
    if (!open) return Match::Bad;
    call.arguments = std::string(body.substr(std::min(q, body.size())));
    return m;
  }
  if (m != Match::Ok || scan::skip_ws(body, end) != body.size()) return Match::Bad;
  call.arguments = std::string(body.substr(q, end - q));
  if (body[q] != '{' || !Json::accept(call.arguments)) return Match::Bad;
  return Match::Ok;
}

}  // namespace

std::string harmony_open_header(std::string_view prompt) {
  const size_t k = prompt.rfind(kStart);
  if (k == std::string_view::npos) return "";
  Header h;
  if (parse_header(prompt, k, /*first=*/false, h) != Match::Ok) return "";
  for (std::string_view marker : kBodyEnds)
    if (prompt.find(marker, h.body) != std::string_view::npos) return "";
  return std::string(prompt.substr(h.frame, h.body - h.frame));
}

ChatMessage parse_harmony_output(std::string_view s, const ChatParseOptions& o, bool partial) {
  ChatMessage msg;
  // A continued answer: the text starts inside the body of the prompt's open message.
  Header open;
  const bool continued = !o.harmony_open_header.empty() &&
                         parse_header(o.harmony_open_header, 0, /*first=*/true, open) == Match::Ok;
  size_t pos = 0;
  for (bool first = true; pos < s.size() || first; first = false) {
    Header h;
    Match hm = Match::Ok;
    if (first && continued) {
      h = open;
      h.frame = h.body = 0;
    } else {
      hm = parse_header(s, pos, first, h);
    }
    if (hm == Match::Incomplete && partial) break;  // wait for the rest of the header
    const bool call = !h.recipient.empty();
    if (hm != Match::Ok || (call && !o.parse_tools)) {
      msg.content += s.substr(pos);  // malformed: the rest is content
      break;
    }
    // The body: up to the first end marker, else (cut off, or ended by an end-of-generation
    // token) to the end, less what may be the start of a marker while streaming.
    size_t body_end = s.size(), next = s.size();
    for (std::string_view marker : kBodyEnds) {
      const size_t k = s.find(marker, h.body);
      if (k < body_end) {
        body_end = k;
        next = k + marker.size();
      }
    }
    const bool open_body = body_end == s.size();
    if (open_body && partial) {
      size_t held = 0;
      for (std::string_view marker : kBodyEnds) held = std::max(held, scan::partial_tag_suffix(s.substr(h.body), marker));
      body_end -= held;
    }
    const std::string_view body = s.substr(h.body, body_end - h.body);
    if (call) {
      ToolCall c;
      c.name = h.recipient.substr(kFunctions.size());
      const Match am = parse_arguments(body, open_body && partial, c);
      if (am == Match::Bad) {
        msg.content += s.substr(pos);
        break;
      }
      if (!partial) c.id = make_tool_call_id();
      msg.tool_calls.push_back(std::move(c));
    } else if (h.channel == "analysis" && o.parse_reasoning) {
      msg.reasoning += body;
    } else if (h.channel == "analysis") {
      msg.content += s.substr(h.frame, (open_body ? body_end : next) - h.frame);  // the message's own text, tags and all
    } else {
      msg.content += body;
    }
    if (open_body) break;
    pos = next;
  }
  return msg;
}

std::string harmony_tool_rules(const std::vector<GrammarTool>& tools, bool from_answer_start) {
  // From the answer's start (tool_choice required / named): the call in the form the template
  // renders it back (recipient in the role, " json"), so that the next turn's prompt holds the
  // answer's own text; one analysis message may come first. Lazy (auto): from a trigger
  // (tool_call_triggers) on, in any of the forms gpt-oss writes.
  const std::string header = from_answer_start
                                 ? "\"<|channel|>commentary json<|message|>\""
                                 : "(\"<|channel|>\" (\"commentary\" | \"analysis\"))? ((\" \" | \" <|constrain|>\" | "
                                   "\"<|constrain|>\") \"json\")? \"<|message|>\"";
  std::string rules, alts;
  for (const GrammarTool& t : tools) {
    rules += arguments_rules(t);
    rules += t.prefix + "call ::= \"" + grammar::gbnf_literal(t.name) + "\" harmony-header " + t.prefix + "root\n";
    alts += (alts.empty() ? "" : " | ") + t.prefix + "call";
  }
  // <|call|> ends the generation: one call per answer (the template renders one per message). The
  // lazy grammar starts at a trigger: the recipient and what precedes it in the header.
  const std::string start = from_answer_start ? "" : "(\"<|start|>assistant\" | \"<|channel|>\" (\"commentary\" | \"analysis\"))? ";
  return "tool-calls ::= tool-call\ntool-call ::= " + start + "\" to=functions.\" (" + alts + ")\n" + "harmony-header ::= " +
         header + "\n" + harmony_analysis_rules() + rules;
}

std::string harmony_analysis_rules() {
  // An analysis message before the answer, in the form the template renders it back (the next
  // turn keeps it when the client returns it as reasoning_content); its text may not write "<|".
  return "harmony-analysis ::= \"<|channel|>analysis<|message|>\" ([^<] | \"<\" [^|])* \"<|end|><|start|>assistant\"\n";
}

std::string harmony_response_grammar(const Json& schema) {
  grammar::SchemaGrammarOptions opt;
  opt.prefix = "final-";
  return "root ::= harmony-analysis? \"<|channel|>final<|message|>\" final-root\n" + harmony_analysis_rules() +
         grammar::json_schema_rules(schema, opt, /*with_primitives=*/true);
}

}  // namespace agentkv::server
