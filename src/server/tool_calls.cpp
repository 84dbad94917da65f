#include "server/tool_calls.h"

#include <algorithm>
#include <cctype>
#include <optional>
#include <regex>
#include <set>

#include "agentkv/error.h"
#include "agentkv/gbnf.h"
#include "agentkv/json_schema.h"
#include "server/json_fields.h"
#include "server/tool_formats.h"

namespace agentkv::server {

namespace {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

using scan::Match;
using scan::expect;
using scan::scan_json_string;
using scan::scan_json_value;
using scan::skip_ws;
using scan::trim;
using scan::rtrim;
using scan::partial_tag_suffix;

struct CallParse {
  Match status = Match::Bad;
  ToolCall call;
  bool has_name = false;  // partial: the name is known
  size_t end = 0;         // past "</tool_call>"
};

// Hermes: after "<tool_call>". Strict form first ({"name": ..., "arguments": ...}, the model's
// argument text kept as is); a complete block in another JSON shape is parsed as JSON.
CallParse parse_hermes_call(std::string_view s, size_t p) {
  CallParse r;
  size_t q = skip_ws(s, p);
  auto strict = [&]() -> Match {
    Match m;
    if ((m = expect(s, q, "{")) != Match::Ok) return m;
    q = skip_ws(s, q);
    if ((m = expect(s, q, "\"name\"")) != Match::Ok) return m;
    q = skip_ws(s, q);
    if ((m = expect(s, q, ":")) != Match::Ok) return m;
    q = skip_ws(s, q);
    size_t name_end = 0;
    if ((m = scan_json_string(s, q, name_end)) != Match::Ok) return m;
    try {
      r.call.name = Json::parse(s.substr(q, name_end - q)).get<std::string>();
    } catch (const std::exception&) {
      return Match::Bad;
    }
    if (r.call.name.empty()) return Match::Bad;  // a call names its function
    r.has_name = true;
    q = skip_ws(s, name_end);
    if ((m = expect(s, q, ",")) != Match::Ok) return m;
    q = skip_ws(s, q);
    if ((m = expect(s, q, "\"arguments\"")) != Match::Ok) return m;
    q = skip_ws(s, q);
    if ((m = expect(s, q, ":")) != Match::Ok) return m;
    q = skip_ws(s, q);
    size_t args_end = 0;
    m = scan_json_value(s, q, args_end);
    if (m == Match::Incomplete) {
      r.call.arguments = std::string(s.substr(q));
      return m;
    }
    if (m != Match::Ok) return m;
    r.call.arguments = std::string(s.substr(q, args_end - q));
    if (!Json::accept(r.call.arguments)) return Match::Bad;
    q = skip_ws(s, args_end);
    if ((m = expect(s, q, "}")) != Match::Ok) return m;
    q = skip_ws(s, q);
    if ((m = expect(s, q, kCallClose)) != Match::Ok) return m;
    return Match::Ok;
  };
  r.status = strict();
  if (r.status == Match::Ok) {
    r.end = q;
    return r;
  }
  // Another shape of a complete block: {"arguments": ..., "name": ...}, arguments as a string.
  const size_t close = s.find(kCallClose, p);
  if (close != std::string_view::npos) {
    try {
      const Json j = Json::parse(trim(s.substr(p, close - p)));
      if (j.is_object() && j.contains("name") && j["name"].is_string() && !j["name"].get<std::string>().empty() &&
          j.contains("arguments")) {
        CallParse alt;
        alt.status = Match::Ok;
        alt.has_name = true;
        alt.call.name = j["name"].get<std::string>();
        const Json& a = j["arguments"];
        alt.call.arguments = a.is_string() ? a.get<std::string>() : a.dump();
        if (a.is_string() && !Json::accept(alt.call.arguments)) return r;
        alt.end = close + kCallClose.size();
        return alt;
      }
    } catch (const std::exception&) {
    }
    if (r.status == Match::Incomplete) r.status = Match::Bad;  // closed but not a call
  }
  return r;
}

const Json* param_schema(const Json& tools, const std::string& fn, const std::string& param) {
  for (const Json& t : tools) {
    const Json* f = t.contains("function") ? &t["function"] : &t;
    if (f->value("name", "") != fn || !f->contains("parameters")) continue;
    const Json& params = (*f)["parameters"];
    if (!params.is_object() || !params.contains("properties") || !params["properties"].is_object()) continue;
    const Json& props = params["properties"];
    if (props.contains(param)) return &props[param];
  }
  return nullptr;
}

bool schema_is_string(const Json* s) {
  if (!s || !s->is_object()) return false;
  if (s->contains("type")) {
    const Json& t = (*s)["type"];
    if (t.is_string()) return t.get<std::string>() == "string";
    if (t.is_array()) return t.size() == 1 && t[0] == "string";
  }
  if (s->contains("enum") && (*s)["enum"].is_array() && !(*s)["enum"].empty()) return (*s)["enum"][0].is_string();
  return false;
}

// XML: after "<tool_call>".
CallParse parse_xml_call(std::string_view s, size_t p, const Json& tools) {
  CallParse r;
  size_t q = skip_ws(s, p);
  Match m;
  if ((r.status = expect(s, q, "<function=")) != Match::Ok) return r;
  const size_t name_end = s.find('>', q);
  if (name_end == std::string_view::npos) {
    r.status = s.substr(q).find('\n') == std::string_view::npos ? Match::Incomplete : Match::Bad;
    return r;
  }
  r.call.name = std::string(s.substr(q, name_end - q));
  if (r.call.name.empty() || r.call.name.find_first_of("\n<") != std::string::npos) {
    r.status = Match::Bad;
    return r;
  }
  r.has_name = true;
  q = name_end + 1;
  std::string args = "{";
  bool first = true;
  while (true) {
    q = skip_ws(s, q);
    if (q >= s.size()) {
      r.status = Match::Incomplete;
      r.call.arguments = args;
      return r;
    }
    size_t t = q;
    if ((m = expect(s, t, "</function>")) == Match::Ok) {
      q = t;
      break;
    }
    size_t t2 = q;
    const Match pm = expect(s, t2, "<parameter=");
    if (pm != Match::Ok) {
      r.status = (m == Match::Incomplete || pm == Match::Incomplete) ? Match::Incomplete : Match::Bad;
      r.call.arguments = args;
      return r;
    }
    const size_t pn_end = s.find('>', t2);
    if (pn_end == std::string_view::npos) {
      r.status = Match::Incomplete;
      r.call.arguments = args;
      return r;
    }
    const std::string pname(s.substr(t2, pn_end - t2));
    size_t v = pn_end + 1;
    if (v < s.size() && s[v] == '\n') ++v;
    const size_t v_end = s.find("</parameter>", v);
    if (v_end == std::string_view::npos) {
      r.status = Match::Incomplete;
      r.call.arguments = args;
      return r;
    }
    std::string_view value = s.substr(v, v_end - v);
    if (!value.empty() && value.back() == '\n') value.remove_suffix(1);
    Json jv;
    const Json* ps = param_schema(tools, r.call.name, pname);
    if (schema_is_string(ps) || !Json::accept(value)) {
      jv = std::string(value);
    } else {
      jv = Json::parse(value);
    }
    // replace: the model may write bytes that are not UTF-8 (dump would throw).
    const auto replace = Json::error_handler_t::replace;
    args += (first ? "" : ", ") + Json(pname).dump(-1, ' ', false, replace) + ": " + jv.dump(-1, ' ', false, replace);
    first = false;
    q = v_end + std::string_view("</parameter>").size();
  }
  r.call.arguments = args + "}";
  q = skip_ws(s, q);
  if ((r.status = expect(s, q, kCallClose)) != Match::Ok) {
    if (r.status == Match::Incomplete) r.call.arguments = args;
    return r;
  }
  r.end = q;
  return r;
}

// Hermes and XML: what follows "<tool_call>" is the format's own call syntax.
CallParse parse_tagged_call(std::string_view s, size_t p, const ChatParseOptions& o) {
  return o.format == ToolFormat::QwenXml ? parse_xml_call(s, p, o.tools) : parse_hermes_call(s, p);
}

// Hermes / XML rules of one tool call each; `tool-calls` writes one or several.
std::string tagged_tool_rules(ToolFormat f, const std::vector<GrammarTool>& tools, bool parallel) {
  std::string rules;
  std::string alts;
  for (const GrammarTool& t : tools) {
    const std::string& prefix = t.prefix;
    const Json& params = t.parameters;
    if (f == ToolFormat::Hermes) {
      rules += arguments_rules(t);  // "}\n</tool_call>" follows the arguments directly
      rules += prefix + "call ::= \"" + grammar::gbnf_literal(t.name + "\", \"arguments\": ") + "\" " + prefix + "root\n";
    } else {
      // XML: one <parameter=...> block per property, required ones mandatory, in schema order.
      const Json props = params.value("properties", Json::object());
      std::set<std::string> required;
      for (const Json& r : params.value("required", Json::array()))
        if (r.is_string()) required.insert(r.get<std::string>());
      std::string body = "\"" + grammar::gbnf_literal(t.name + ">\n") + "\"";
      int k = 0;
      for (auto p = props.begin(); p != props.end(); ++p, ++k) {
        const std::string pp = prefix + "p" + std::to_string(k) + "-";
        std::string value;
        if (schema_is_string(&p.value()) && !p.value().contains("enum")) {
          // The grammar compiler caps repetition counts; a bad count is the client's 400.
          const int64_t min = read_int(p.value(), "minLength", 0, 0, grammar::kMaxRepetition);
          const int64_t max = read_int(p.value(), "maxLength", -1, min, grammar::kMaxRepetition);
          value = "[^<]" + std::string(max < 0 ? (min == 0 ? "*" : "{" + std::to_string(min) + ",}")
                                               : "{" + std::to_string(min) + "," + std::to_string(max) + "}");
        } else if (schema_is_string(&p.value())) {
          std::string enum_alts;
          for (const Json& e : p.value()["enum"])
            enum_alts += (enum_alts.empty() ? "\"" : " | \"") + grammar::gbnf_literal(e.is_string() ? e.get<std::string>() : e.dump()) + "\"";
          value = "(" + enum_alts + ")";
        } else {
          grammar::SchemaGrammarOptions opt;
          opt.prefix = pp;
          opt.strip_root_space = true;
          rules += grammar::json_schema_rules(p.value(), opt, false);
          value = pp + "root";
        }
        rules += pp + "param ::= \"" + grammar::gbnf_literal("<parameter=" + p.key() + ">\n") + "\" " + value + " \"" +
                 grammar::gbnf_literal("\n</parameter>\n") + "\"\n";
        body += " " + pp + "param" + (required.count(p.key()) ? "" : "?");
      }
      rules += prefix + "call ::= " + body + "\n";
    }
    alts += (alts.empty() ? "" : " | ") + prefix + "call";
  }
  std::string out = "tool-calls ::= " + repeated_calls("tool-call", "\n", parallel) + "\n";
  if (f == ToolFormat::Hermes)
    out += "tool-call ::= \"<tool_call>\\n{\\\"name\\\": \\\"\" (" + alts + ") \"}\\n</tool_call>\"\n";
  else
    out += "tool-call ::= \"<tool_call>\\n<function=\" (" + alts + ") \"</function>\\n</tool_call>\"\n";
  return out + rules;
}

bool is_mistral(ToolFormat f) {
  return f == ToolFormat::MistralNemo || f == ToolFormat::MistralArgs || f == ToolFormat::MistralCallId;
}

bool contains(const std::string& s, std::string_view what) { return s.find(what) != std::string::npos; }

}  // namespace

ToolSection parse_tagged_tool_calls(std::string_view rest, const ChatParseOptions& o, bool partial) {
  ToolSection out;
  size_t pos = 0;
  std::string& content = out.content;
  while (true) {
    const size_t k = rest.find(kCallOpen, pos);
    if (k == std::string_view::npos) {
      std::string_view tail = rest.substr(pos);
      if (partial) tail.remove_suffix(partial_tag_suffix(tail, kCallOpen));
      if (!out.calls.empty() && trim(tail).empty()) break;  // whitespace between/after calls
      content += tail;
      break;
    }
    const std::string_view before = rest.substr(pos, k - pos);
    if (out.calls.empty() || !trim(before).empty()) content += before;
    CallParse c = parse_tagged_call(rest, k + kCallOpen.size(), o);
    if (c.status == Match::Ok) {
      out.calls.push_back(std::move(c.call));
      pos = c.end;
      continue;
    }
    if (c.status == Match::Incomplete && partial) {
      if (c.has_name) out.calls.push_back(std::move(c.call));
      break;
    }
    content += rest.substr(k);  // malformed (or cut off): the rest is content
    break;
  }
  return out;
}

std::vector<GrammarTool> grammar_tools(const Json& tools, const std::string& only_name, grammar::JsonSpacing spacing) {
  std::vector<GrammarTool> out;
  for (const Json& t : tools) {
    const Json& fn = t.contains("function") ? t["function"] : t;
    const std::string name = fn.value("name", "");
    if (!only_name.empty() && name != only_name) continue;
    GrammarTool g;
    g.name = name;
    g.parameters = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : Json{{"type", "object"}};
    g.prefix = "t" + std::to_string(out.size()) + "-";
    g.spacing = spacing;
    out.push_back(std::move(g));
  }
  if (out.empty()) throw Error(only_name.empty() ? "no tools" : "tool_choice names function '" + only_name + "', which is not in tools");
  return out;
}

std::string arguments_rules(const GrammarTool& t) {
  grammar::SchemaGrammarOptions opt;
  opt.prefix = t.prefix;
  opt.strip_root_space = true;  // the format's fixed text follows the arguments directly
  opt.spacing = t.spacing;
  return grammar::json_schema_rules(t.parameters, opt, false);
}

std::string repeated_calls(const std::string& call, const std::string& separator_literal, bool parallel) {
  // Parallel calls: at most kMaxParallelCalls in one answer (a model that never stops calling
  // still ends).
  if (!parallel) return call;
  return call + " (\"" + grammar::gbnf_literal(separator_literal) + "\" " + call + "){0," +
         std::to_string(kMaxParallelCalls - 1) + "}";
}

bool arguments_from_json(const Json& value, std::string& arguments) {
  if (value.is_object()) {
    arguments = value.dump(-1, ' ', false, Json::error_handler_t::replace);
    return true;
  }
  if (!value.is_string()) return false;
  arguments = value.get<std::string>();
  return Json::accept(arguments);
}

ToolFormat detect_tool_format(const std::string& source) {
  // gpt-oss: harmony's channel and message tokens.
  if (contains(source, "<|channel|>") && contains(source, "<|message|>")) return ToolFormat::Harmony;
  if (contains(source, "<function=") && contains(source, "<parameter=")) return ToolFormat::QwenXml;
  if (contains(source, "<tool_call>")) return ToolFormat::Hermes;
  // Mistral: Small 3.2 writes the call's id between name and arguments; Devstral / Magistral
  // write name[ARGS]arguments; Nemo a JSON array.
  if (contains(source, "[TOOL_CALLS]")) {
    if (contains(source, "[ARGS]")) return contains(source, "[CALL_ID]") ? ToolFormat::MistralCallId : ToolFormat::MistralArgs;
    return ToolFormat::MistralNemo;
  }
  // Llama 3.1 / 3.2 / 3.3: header tokens, and calls rendered as {"name": ..., "parameters": ...}.
  if (contains(source, "<|start_header_id|>") && (contains(source, "\"parameters\": ") || contains(source, "<|python_tag|>")))
    return ToolFormat::Llama3Json;
  return ToolFormat::Hermes;
}

const char* tool_format_name(ToolFormat f) {
  switch (f) {
    case ToolFormat::QwenXml: return "qwen-xml";
    case ToolFormat::Llama3Json: return "llama3-json";
    case ToolFormat::MistralNemo: return "mistral-nemo";
    case ToolFormat::MistralArgs: return "mistral-args";
    case ToolFormat::MistralCallId: return "mistral-call-id";
    case ToolFormat::Harmony: return "harmony";
    case ToolFormat::Hermes: break;
  }
  return "hermes";
}

std::vector<std::string> tool_call_triggers(ToolFormat f) {
  switch (f) {
    case ToolFormat::Llama3Json: return {"{\"name\""};  // the grammar's only call form (tool_format_llama3.cpp)
    case ToolFormat::MistralNemo:
    case ToolFormat::MistralArgs:
    case ToolFormat::MistralCallId: return {"[TOOL_CALLS]"};
    // The recipient in a header: in the role (right after the prompt's <|start|>assistant, or
    // after a later one) or after the channel; not in a message's body.
    case ToolFormat::Harmony:
      return {"^ to=functions.", "<|start|>assistant to=functions.", "<|channel|>commentary to=functions.",
              "<|channel|>analysis to=functions."};
    default: return {std::string(kCallOpen)};
  }
}

std::vector<std::string> tool_call_preserved_tokens(ToolFormat f) {
  switch (f) {
    case ToolFormat::Llama3Json: return {"<|python_tag|>"};
    case ToolFormat::MistralNemo: return {"[TOOL_CALLS]"};
    case ToolFormat::MistralArgs: return {"[TOOL_CALLS]", "[ARGS]"};
    case ToolFormat::MistralCallId: return {"[TOOL_CALLS]", "[CALL_ID]", "[ARGS]"};
    case ToolFormat::Harmony: return {"<|start|>", "<|channel|>", "<|message|>", "<|constrain|>", "<|end|>"};
    default: return {};
  }
}

std::vector<Token> tool_marker_tokens(ToolFormat f, const Tokenizer& tok) {
  std::vector<Token> ids;
  for (const std::string& marker : tool_call_preserved_tokens(f))
    if (const std::optional<Token> id = tok.find_token(marker); id && tok.is_control(*id)) ids.push_back(*id);
  std::sort(ids.begin(), ids.end());
  return ids;
}

bool template_wants_object_arguments(const std::string& source) {
  // Iterating needs the object (Qwen3.5's XML form, Llama 3.1's builtin NAME.call(k="v")).
  static const std::regex iterates(R"(arguments\s*(\|\s*items|is\s+mapping))");
  if (std::regex_search(source, iterates)) return true;
  // A template that tests for a string prints the client's text as is (Qwen3, Devstral): the
  // model's own text keeps the prompt cache.
  static const std::regex tests_string(R"(arguments(\'\])?\s+is\s+(not\s+)?string)");
  if (std::regex_search(source, tests_string)) return false;
  // tojson of a string would print a quoted string where the model wrote an object (Llama 3.x,
  // Mistral Nemo's function|tojson, Mistral Small 3.2).
  return template_dumps_arguments(source);
}

bool template_dumps_arguments(const std::string& source) {
  static const std::regex dumps(R"((arguments(\'\])?|function)\s*\|\s*tojson)");
  return std::regex_search(source, dumps);
}

std::string make_tool_call_id() { return "call_" + scan::random_alphanumerics(24); }

std::string make_tool_call_id(ToolFormat f) { return is_mistral(f) ? scan::random_alphanumerics(9) : make_tool_call_id(); }

bool is_mistral_tool_call_id(std::string_view id) {
  if (id.size() != 9) return false;
  for (char c : id)
    if (!std::isalnum(static_cast<unsigned char>(c))) return false;
  return true;
}

ChatMessage parse_chat_output(std::string_view text, const ChatParseOptions& o, bool partial) {
  if (o.format == ToolFormat::Harmony) return parse_harmony_output(text, o, partial);
  ChatMessage msg;
  std::string_view rest = text;
  if (o.parse_reasoning) {
    bool open = o.thinking_open;
    size_t start = 0;
    if (!open) {
      const size_t k = skip_ws(text, 0);
      const std::string_view head = text.substr(k);
      if (head.substr(0, kThinkOpen.size()) == kThinkOpen) {
        open = true;
        start = k + kThinkOpen.size();
      } else if (partial && !head.empty() && kThinkOpen.substr(0, head.size()) == head) {
        return msg;  // "<thi": wait for the rest of the tag
      } else if (partial && head.empty()) {
        return msg;
      }
    }
    if (open) {
      const size_t close = text.find(kThinkClose, start);
      if (close == std::string_view::npos) {
        std::string_view r = text.substr(start);
        if (partial) r.remove_suffix(partial_tag_suffix(r, kThinkClose));
        msg.reasoning = std::string(trim(r));  // an unclosed block (cut off) is all reasoning
        return msg;
      }
      msg.reasoning = std::string(trim(text.substr(start, close - start)));
      rest = text.substr(close + kThinkClose.size());
      rest = rest.substr(skip_ws(rest, 0));
    }
  }

  if (!o.parse_tools) {
    msg.content = std::string(rest);
    return msg;
  }

  ToolSection section;
  switch (o.format) {
    case ToolFormat::Llama3Json: section = parse_llama3_tool_calls(rest, o, partial); break;
    case ToolFormat::MistralNemo: section = parse_mistral_nemo_tool_calls(rest, partial); break;
    case ToolFormat::MistralArgs:
    case ToolFormat::MistralCallId: section = parse_mistral_args_tool_calls(rest, partial); break;
    default: section = parse_tagged_tool_calls(rest, o, partial); break;
  }
  msg.tool_calls = std::move(section.calls);
  // Whitespace before a call is not content; while streaming, trailing whitespace waits.
  if (partial || !msg.tool_calls.empty()) msg.content = std::string(rtrim(section.content));
  else msg.content = std::move(section.content);
  // Mistral ids are given while streaming too: the diff would otherwise make one of OpenAI's shape.
  if (!partial || is_mistral(o.format))
    for (ToolCall& c : msg.tool_calls)
      if (c.id.empty()) c.id = make_tool_call_id(o.format);
  return msg;
}

std::string tool_call_grammar(ToolFormat f, const Json& tools, const std::string& only_name, bool parallel,
                              bool think_prefix, bool tojson_arguments) {
  const grammar::JsonSpacing spacing = tojson_arguments ? grammar::JsonSpacing::Tojson : grammar::JsonSpacing::Compact;
  const std::vector<GrammarTool> selected = grammar_tools(tools, only_name, spacing);
  std::string rules;
  switch (f) {
    case ToolFormat::Llama3Json: rules = llama3_tool_rules(selected, parallel); break;
    case ToolFormat::MistralNemo: rules = mistral_nemo_tool_rules(selected, parallel); break;
    case ToolFormat::MistralArgs: rules = mistral_args_tool_rules(selected, parallel, false); break;
    case ToolFormat::MistralCallId: rules = mistral_args_tool_rules(selected, parallel, true); break;
    case ToolFormat::Harmony: rules = harmony_tool_rules(selected, think_prefix); break;
    default: rules = tagged_tool_rules(f, selected, parallel); break;
  }
  const std::string reasoning = f == ToolFormat::Harmony ? "harmony-analysis? " : "[^<]* \"</think>\\n\\n\" ";
  const std::string root = "root ::= " + std::string(think_prefix ? reasoning : "") + "tool-calls\n";
  return root + rules + grammar::json_primitive_rules(spacing);
}

std::vector<Json> ChatStreamDiff::update(const ChatMessage& now) {
  std::vector<Json> out;
  auto grow = [&](const std::string& before, const std::string& after, const char* key) {
    if (after.size() > before.size() && after.compare(0, before.size(), before) == 0)
      out.push_back(Json{{key, after.substr(before.size())}});
  };
  grow(sent_.reasoning, now.reasoning, "reasoning_content");
  if (now.reasoning.size() > sent_.reasoning.size()) sent_.reasoning = now.reasoning;
  grow(sent_.content, now.content, "content");
  if (now.content.size() > sent_.content.size() && now.content.compare(0, sent_.content.size(), sent_.content) == 0)
    sent_.content = now.content;
  for (size_t i = 0; i < now.tool_calls.size(); ++i) {
    const ToolCall& c = now.tool_calls[i];
    if (i >= sent_.tool_calls.size()) {
      ids_.push_back(c.id.empty() ? make_tool_call_id() : c.id);
      out.push_back(Json{{"tool_calls", Json::array({Json{{"index", i},
                                                          {"id", ids_.back()},
                                                          {"type", "function"},
                                                          {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}}})}});
      ToolCall s = c;
      s.id = ids_.back();
      sent_.tool_calls.push_back(std::move(s));
      continue;
    }
    ToolCall& s = sent_.tool_calls[i];
    if (c.arguments.size() > s.arguments.size() && c.arguments.compare(0, s.arguments.size(), s.arguments) == 0) {
      out.push_back(Json{{"tool_calls", Json::array({Json{{"index", i},
                                                          {"function", Json{{"arguments", c.arguments.substr(s.arguments.size())}}}}})}});
      s.arguments = c.arguments;
    }
  }
  return out;
}

Json tool_calls_json(const std::vector<ToolCall>& calls) {
  Json out = Json::array();
  for (const ToolCall& c : calls)
    out.push_back(Json{{"type", "function"}, {"function", Json{{"name", c.name}, {"arguments", c.arguments}}}, {"id", c.id}});
  return out;
}

}  // namespace agentkv::server
