// libFuzzer target for the JSON-schema converter's own parsers (src/grammar/json_schema.cpp with
// json_pattern.cpp and number_range.cpp): a regular expression as a schema's `pattern`, and numeric
// bounds. The input: the first byte picks the case, the rest up to a NUL is the pattern (or the
// bounds' text), what follows the NUL a string to match. A finding: a crash, a sanitizer report, an
// exception other than agentkv::Error, or a grammar the GBNF parser refuses.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "agentkv/error.h"
#include "agentkv/gbnf.h"
#include "agentkv/grammar_matcher.h"
#include "agentkv/json_schema.h"

namespace {

using Json = nlohmann::ordered_json;

#define FUZZ_CHECK(cond)       \
  do {                         \
    if (!(cond)) std::abort(); \
  } while (0)

Json schema_for(uint8_t kind, std::string_view text) {
  switch (kind % 3) {
    case 0: return Json{{"type", "string"}, {"pattern", std::string(text)}};
    case 1: {  // bounds: "lo,hi" as numbers (a malformed one is simply left out)
      Json s = {{"type", kind & 4 ? "number" : "integer"}};
      const size_t comma = text.find(',');
      auto number = [](std::string_view t) { return Json::parse(t, nullptr, false); };
      const Json lo = number(text.substr(0, comma));
      if (lo.is_number()) s[kind & 8 ? "exclusiveMinimum" : "minimum"] = lo;
      if (comma != std::string_view::npos) {
        const Json hi = number(text.substr(comma + 1));
        if (hi.is_number()) s[kind & 16 ? "exclusiveMaximum" : "maximum"] = hi;
      }
      return s;
    }
    default: return Json{{"type", "object"}, {"properties", {{"p", {{"type", "string"}, {"pattern", std::string(text)}}}}},
                         {"required", {"p"}}};
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const std::string_view rest(reinterpret_cast<const char*>(data + 1), size - 1);
  const size_t nul = rest.find('\0');
  const std::string_view text = rest.substr(0, nul);
  const std::string value = nul == std::string_view::npos ? "" : std::string(rest.substr(nul + 1));
  std::string gbnf;
  try {
    gbnf = agentkv::grammar::json_schema_to_gbnf(schema_for(data[0], text));
  } catch (const agentkv::Error&) {
    return 0;  // refused with a message: the server's 400
  }
  std::shared_ptr<agentkv::grammar::Grammar> grammar;
  try {
    grammar = std::make_shared<agentkv::grammar::Grammar>(agentkv::grammar::parse_gbnf(gbnf));
  } catch (const agentkv::Error&) {
    std::abort();  // the converter wrote a grammar that does not parse
  }
  agentkv::grammar::Matcher m(grammar);
  const std::string json_text = Json(value).dump(-1, ' ', false, Json::error_handler_t::replace);
  (void)m.advance(m.start(), json_text);
  return 0;
}
