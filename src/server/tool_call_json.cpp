// A tool call written as one JSON object, the form Llama 3.x and Mistral Nemo share
// (tool_formats.h, parse_json_object_call).
#include "server/tool_formats.h"

namespace agentkv::server {

namespace {

using scan::Match;
using scan::expect;
using scan::skip_ws;

// Either of two keys at q (moved past the one that matched).
Match expect_either(std::string_view s, size_t& q, std::string_view a, std::string_view b) {
  size_t qa = q, qb = q;
  const Match ma = expect(s, qa, a);
  const Match mb = expect(s, qb, b);
  if (ma == Match::Ok) q = qa;
  else if (mb == Match::Ok) q = qb;
  else return ma == Match::Incomplete || mb == Match::Incomplete ? Match::Incomplete : Match::Bad;
  return Match::Ok;
}

// "key": at q, the value's first character after it.
Match expect_key(std::string_view s, size_t& q, std::string_view key) {
  Match m;
  if ((m = expect(s, q, key)) != Match::Ok) return m;
  q = skip_ws(s, q);
  if ((m = expect(s, q, ":")) != Match::Ok) return m;
  q = skip_ws(s, q);
  return Match::Ok;
}

Match parse_in_template_order(std::string_view s, size_t& q, JsonCallParse& r) {
  Match m;
  if ((m = expect(s, q, "{")) != Match::Ok) return m;
  q = skip_ws(s, q);
  {  // "type": "function", (llama.cpp's Llama 3 grammar lets the model write it)
    size_t t = q;
    const Match type_key = expect_key(s, t, "\"type\"");
    if (type_key == Match::Incomplete) return Match::Incomplete;
    if (type_key == Match::Ok) {
      if ((m = expect(s, t, "\"function\"")) != Match::Ok) return m;
      t = skip_ws(s, t);
      if ((m = expect(s, t, ",")) != Match::Ok) return m;
      q = skip_ws(s, t);
    }
  }
  if ((m = expect_key(s, q, "\"name\"")) != Match::Ok) return m;
  size_t name_end = 0;
  if ((m = scan::scan_json_string(s, q, name_end)) != Match::Ok) return m;
  if (!scan::decode_json_string(s, q, name_end, r.call.name) || r.call.name.empty()) return Match::Bad;
  r.has_name = true;
  q = skip_ws(s, name_end);
  if ((m = expect(s, q, ",")) != Match::Ok) return m;
  q = skip_ws(s, q);
  if ((m = expect_either(s, q, "\"parameters\"", "\"arguments\"")) != Match::Ok) return m;
  q = skip_ws(s, q);
  if ((m = expect(s, q, ":")) != Match::Ok) return m;
  q = skip_ws(s, q);
  if (q < s.size() && s[q] != '{') return Match::Bad;  // a string of JSON: only as a whole
  size_t args_end = 0;
  m = scan::scan_json_value(s, q, args_end);
  if (m == Match::Incomplete) r.call.arguments = std::string(s.substr(q));
  if (m != Match::Ok) return m;
  r.call.arguments = std::string(s.substr(q, args_end - q));
  if (!Json::accept(r.call.arguments)) return Match::Bad;
  q = skip_ws(s, args_end);
  if (q < s.size() && s[q] == ',') {  // Mistral Nemo: , "id": "..."
    q = skip_ws(s, q + 1);
    if ((m = expect_key(s, q, "\"id\"")) != Match::Ok) return m;
    size_t id_end = 0;
    if ((m = scan::scan_json_string(s, q, id_end)) != Match::Ok) return m;
    if (!scan::decode_json_string(s, q, id_end, r.call.id)) return Match::Bad;
    q = skip_ws(s, id_end);
  }
  return expect(s, q, "}");
}

}  // namespace

JsonCallParse parse_json_object_call(std::string_view s, size_t p) {
  JsonCallParse r;
  size_t q = p;
  r.status = parse_in_template_order(s, q, r);
  if (r.status == Match::Ok) {
    r.end = q;
    return r;
  }
  size_t end = 0;
  const Match whole = scan::scan_json_value(s, p, end);
  if (whole == Match::Incomplete) {
    r.status = Match::Incomplete;  // may still be a call of another shape: held back
    return r;
  }
  JsonCallParse alt;
  if (whole != Match::Ok || s[p] != '{') return alt;
  try {
    const Json j = Json::parse(s.substr(p, end - p));
    const char* key = j.contains("parameters") ? "parameters" : "arguments";
    if (!j.contains("name") || !j["name"].is_string() || j["name"].get<std::string>().empty() || !j.contains(key))
      return alt;
    if (!arguments_from_json(j[key], alt.call.arguments)) return alt;
    // Arguments read whole in the template's order (another key after them): the model's text,
    // as streamed.
    if (j[key].is_object() && !r.call.arguments.empty() && Json::accept(r.call.arguments) &&
        Json::parse(r.call.arguments) == j[key])
      alt.call.arguments = r.call.arguments;
    alt.call.name = j["name"].get<std::string>();
    if (j.contains("id") && j["id"].is_string()) alt.call.id = j["id"].get<std::string>();
    alt.status = Match::Ok;
    alt.has_name = true;
    alt.end = end;
  } catch (const std::exception&) {
  }
  return alt;
}

}  // namespace agentkv::server
