#include "server/tool_calls.h"

#include <cctype>
#include <random>
#include <set>

#include "agentkv/error.h"
#include "agentkv/gbnf.h"
#include "agentkv/json_schema.h"
#include "server/json_fields.h"

namespace agentkv::server {

namespace {

constexpr std::string_view kCallOpen = "<tool_call>";
constexpr std::string_view kCallClose = "</tool_call>";
constexpr std::string_view kThinkOpen = "<think>";
constexpr std::string_view kThinkClose = "</think>";

bool is_ws(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }
size_t skip_ws(std::string_view s, size_t p) {
  while (p < s.size() && is_ws(s[p])) ++p;
  return p;
}
std::string_view trim(std::string_view s) {
  size_t a = 0, b = s.size();
  while (a < b && is_ws(s[a])) ++a;
  while (b > a && is_ws(s[b - 1])) --b;
  return s.substr(a, b - a);
}
std::string_view rtrim(std::string_view s) {
  size_t b = s.size();
  while (b > 0 && is_ws(s[b - 1])) --b;
  return s.substr(0, b);
}
// Length of the longest suffix of s that is a proper prefix of tag (0 if none).
size_t partial_tag_suffix(std::string_view s, std::string_view tag) {
  for (size_t len = std::min(tag.size() - 1, s.size()); len > 0; --len)
    if (s.substr(s.size() - len) == tag.substr(0, len)) return len;
  return 0;
}

// Result of matching an expected piece of syntax.
enum class Match { Ok, Incomplete, Bad };
Match expect(std::string_view s, size_t& p, std::string_view lit) {
  const size_t n = std::min(lit.size(), s.size() - p);
  if (s.substr(p, n) != lit.substr(0, n)) return Match::Bad;
  if (n < lit.size()) return Match::Incomplete;
  p += lit.size();
  return Match::Ok;
}

// A JSON string starting at p (on the quote). Sets end past the closing quote.
Match scan_json_string(std::string_view s, size_t p, size_t& end) {
  if (p >= s.size()) return Match::Incomplete;
  if (s[p] != '"') return Match::Bad;
  for (size_t i = p + 1; i < s.size(); ++i) {
    if (s[i] == '\\') {
      ++i;
      continue;
    }
    if (s[i] == '"') {
      end = i + 1;
      return Match::Ok;
    }
  }
  return Match::Incomplete;
}

// A JSON value starting at p: its end (structure only; validity is checked by the caller).
Match scan_json_value(std::string_view s, size_t p, size_t& end) {
  if (p >= s.size()) return Match::Incomplete;
  const char c = s[p];
  if (c == '"') return scan_json_string(s, p, end);
  if (c == '{' || c == '[') {
    int depth = 0;
    for (size_t i = p; i < s.size(); ++i) {
      const char d = s[i];
      if (d == '"') {
        size_t e = 0;
        const Match m = scan_json_string(s, i, e);
        if (m != Match::Ok) return m;
        i = e - 1;
      } else if (d == '{' || d == '[') {
        ++depth;
      } else if (d == '}' || d == ']') {
        if (--depth == 0) {
          end = i + 1;
          return Match::Ok;
        }
      }
    }
    return Match::Incomplete;
  }
  size_t i = p;
  while (i < s.size() && (std::isalnum(static_cast<unsigned char>(s[i])) || s[i] == '-' || s[i] == '+' || s[i] == '.')) ++i;
  if (i == p) return Match::Bad;
  if (i == s.size()) return Match::Incomplete;
  end = i;
  return Match::Ok;
}

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
      if (j.is_object() && j.contains("name") && j["name"].is_string() && j.contains("arguments")) {
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
    args += (first ? "" : ", ") + Json(pname).dump() + ": " + jv.dump(-1, ' ', false, Json::error_handler_t::replace);
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

}  // namespace

ToolFormat detect_tool_format(const std::string& source) {
  if (source.find("<function=") != std::string::npos && source.find("<parameter=") != std::string::npos)
    return ToolFormat::QwenXml;
  return ToolFormat::Hermes;
}

const char* tool_format_name(ToolFormat f) { return f == ToolFormat::QwenXml ? "qwen-xml" : "hermes"; }

std::string make_tool_call_id() {
  static const char kAlphabet[] = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789";
  thread_local std::mt19937_64 rng{std::random_device{}()};
  std::uniform_int_distribution<size_t> pick(0, sizeof(kAlphabet) - 2);
  std::string id = "call_";
  for (int i = 0; i < 24; ++i) id += kAlphabet[pick(rng)];
  return id;
}

ChatMessage parse_chat_output(std::string_view text, const ChatParseOptions& o, bool partial) {
  ChatMessage msg;
  std::string_view rest = text;
  bool had_reasoning = false;
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
      had_reasoning = true;
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

  size_t pos = 0;
  std::string content;
  while (true) {
    const size_t k = rest.find(kCallOpen, pos);
    if (k == std::string_view::npos) {
      std::string_view tail = rest.substr(pos);
      if (partial) tail.remove_suffix(partial_tag_suffix(tail, kCallOpen));
      if (!msg.tool_calls.empty() && trim(tail).empty()) break;  // whitespace between/after calls
      content += tail;
      break;
    }
    const std::string_view before = rest.substr(pos, k - pos);
    if (msg.tool_calls.empty() || !trim(before).empty()) content += before;
    CallParse c = o.format == ToolFormat::QwenXml ? parse_xml_call(rest, k + kCallOpen.size(), o.tools)
                                                  : parse_hermes_call(rest, k + kCallOpen.size());
    if (c.status == Match::Ok) {
      msg.tool_calls.push_back(std::move(c.call));
      pos = c.end;
      continue;
    }
    if (c.status == Match::Incomplete && partial) {
      if (c.has_name) msg.tool_calls.push_back(std::move(c.call));
      break;
    }
    content += rest.substr(k);  // malformed (or cut off): the rest is content
    break;
  }
  // Whitespace before a call is not content; while streaming, trailing whitespace waits.
  if (partial || !msg.tool_calls.empty()) msg.content = std::string(rtrim(content));
  else msg.content = content;
  if (!partial)
    for (ToolCall& c : msg.tool_calls) c.id = make_tool_call_id();
  return msg;
}

std::string tool_call_grammar(ToolFormat f, const Json& tools, const std::string& only_name, bool parallel,
                              bool think_prefix) {
  std::string rules;
  std::string alts;
  int i = 0;
  for (const Json& t : tools) {
    const Json& fn = t.contains("function") ? t["function"] : t;
    const std::string name = fn.value("name", "");
    if (!only_name.empty() && name != only_name) continue;
    const std::string prefix = "t" + std::to_string(i++) + "-";
    Json params = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : Json{{"type", "object"}};
    if (f == ToolFormat::Hermes) {
      grammar::SchemaGrammarOptions opt;
      opt.prefix = prefix;
      opt.strip_root_space = true;  // "}\n</tool_call>" follows the arguments directly
      rules += grammar::json_schema_rules(params, opt, false);
      rules += prefix + "call ::= \"" + grammar::gbnf_literal(name + "\", \"arguments\": ") + "\" " + prefix + "root\n";
    } else {
      // XML: one <parameter=...> block per property, required ones mandatory, in schema order.
      const Json props = params.value("properties", Json::object());
      std::set<std::string> required;
      for (const Json& r : params.value("required", Json::array()))
        if (r.is_string()) required.insert(r.get<std::string>());
      std::string body = "\"" + grammar::gbnf_literal(name + ">\n") + "\"";
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
  if (alts.empty()) throw Error(only_name.empty() ? "no tools" : "tool_choice names function '" + only_name + "', which is not in tools");
  std::string out;
  // Parallel calls: at most kMaxParallelCalls in one answer (a model that never stops calling
  // still ends).
  const std::string calls =
      parallel ? "tool-call (\"\\n\" tool-call){0," + std::to_string(kMaxParallelCalls - 1) + "}" : "tool-call";
  out += "root ::= " + std::string(think_prefix ? "[^<]* \"</think>\\n\\n\" " : "") + calls + "\n";
  if (f == ToolFormat::Hermes)
    out += "tool-call ::= \"<tool_call>\\n{\\\"name\\\": \\\"\" (" + alts + ") \"}\\n</tool_call>\"\n";
  else
    out += "tool-call ::= \"<tool_call>\\n<function=\" (" + alts + ") \"</function>\\n</tool_call>\"\n";
  return out + rules + grammar::json_primitive_rules(/*compact_space=*/true);
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
