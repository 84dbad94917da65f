// libFuzzer target for the parsers of model output (src/server/tool_calls.h and the formats of
// tool_format_*.cpp, gpt-oss's harmony included): generated text, which a model may write in any
// shape, split into reasoning, content and tool calls. The first byte picks the format and the
// options (streaming or final, reasoning parsed, the prompt opened a think block); the rest is
// the text. Every prefix of the text is parsed as the server parses a stream, through the
// streaming diff. A finding: a crash, a sanitizer report, an exception, or a call whose name is
// empty or whose arguments are not JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "server/tool_calls.h"

using namespace agentkv::server;

namespace {

#define FUZZ_CHECK(cond) \
  do {                   \
    if (!(cond)) std::abort(); \
  } while (0)

constexpr ToolFormat kFormats[] = {ToolFormat::Hermes,      ToolFormat::QwenXml,     ToolFormat::Llama3Json,
                                   ToolFormat::MistralNemo, ToolFormat::MistralArgs, ToolFormat::MistralCallId,
                                   ToolFormat::Harmony};

const Json& tools() {
  // Typed parameters (XML values are typed by them) and a code tool (Llama's raw python).
  static const Json t = Json::parse(R"([
    {"type":"function","function":{"name":"f","parameters":{"type":"object","properties":{"s":{"type":"string"},
      "n":{"type":"integer"},"a":{"type":"array"}}}}},
    {"type":"function","function":{"name":"python","parameters":{"type":"object","properties":{"code":{"type":"string"}}}}}])");
  return t;
}

void check_calls(const ChatMessage& m, bool final_parse) {
  for (const ToolCall& c : m.tool_calls) {
    FUZZ_CHECK(!c.name.empty());
    if (final_parse) FUZZ_CHECK(Json::accept(c.arguments));
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size == 0) return 0;
  const uint8_t options = data[0];
  const std::string_view text(reinterpret_cast<const char*>(data + 1), size - 1);
  ChatParseOptions o;
  o.format = kFormats[(options & 7) % std::size(kFormats)];
  o.parse_tools = true;
  o.parse_reasoning = (options & 8) == 0;
  o.thinking_open = (options & 16) != 0;
  o.tools = tools();
  ChatStreamDiff diff;
  // Every prefix while the text is short, else every 7th byte (the fuzzer's time goes to shapes).
  const size_t step = text.size() <= 512 ? 1 : 7;
  for (size_t n = 0; n < text.size(); n += step) {
    const ChatMessage m = parse_chat_output(text.substr(0, n), o, /*partial=*/true);
    check_calls(m, false);
    diff.update(m);
  }
  const ChatMessage final_msg = parse_chat_output(text, o, /*partial=*/false);
  check_calls(final_msg, true);
  diff.update(final_msg);
  return 0;
}
