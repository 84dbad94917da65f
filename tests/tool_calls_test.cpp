// Tool-call and reasoning parsing (src/server/tool_calls.h) on outputs recorded from Qwen3 /
// Qwen3.5 / Qwen3-Coder style answers, including malformed ones; the streaming diff; the tool
// grammar against the parser; prompt alignment to a cache.
#include <gtest/gtest.h>

#include <random>

#include "agentkv/gbnf.h"
#include "agentkv/grammar_matcher.h"
#include "server/tool_calls.h"

namespace {

using namespace agentkv::server;
using Json = nlohmann::ordered_json;

ChatParseOptions hermes(bool tools = true) {
  ChatParseOptions o;
  o.format = ToolFormat::Hermes;
  o.parse_tools = tools;
  return o;
}

ChatParseOptions xml() {
  ChatParseOptions o;
  o.format = ToolFormat::QwenXml;
  o.parse_tools = true;
  o.tools = Json::parse(R"([{"type":"function","function":{"name":"write_file","parameters":{"type":"object",
    "properties":{"path":{"type":"string"},"content":{"type":"string"},"mode":{"type":"integer"},"flags":{"type":"array"}}}}}])");
  return o;
}

TEST(ToolCalls, DetectsTheFormatFromTheTemplate) {
  EXPECT_EQ(detect_tool_format("{{- \"<|start|>assistant<|channel|>final<|message|>\" + message.content }}"), ToolFormat::Harmony);
  EXPECT_EQ(detect_tool_format("... <tool_call>\n{\"name\": <function-name>, ..."), ToolFormat::Hermes);
  EXPECT_EQ(detect_tool_format("'<tool_call>\\n<function=' + tool_call.name + '>\\n' ... '<parameter=' + args_name"),
            ToolFormat::QwenXml);
}

// Recorded Qwen3 (Hermes) answers.
TEST(ToolCalls, HermesRecorded) {
  const std::string one = "<think>\nThe user wants the weather in Paris.\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", "
                          "\"arguments\": {\"location\": \"Paris, France\", \"unit\": \"celsius\"}}\n</tool_call>";
  ChatMessage m = parse_chat_output(one, hermes(), false);
  EXPECT_EQ(m.reasoning, "The user wants the weather in Paris.");
  EXPECT_EQ(m.content, "");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "get_weather");
  // The model's own argument text, byte for byte (the template re-renders it as is).
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"location\": \"Paris, France\", \"unit\": \"celsius\"}");
  EXPECT_EQ(m.tool_calls[0].id.rfind("call_", 0), 0u);

  const std::string parallel = "I'll check both.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a.txt\"}}\n"
                               "</tool_call>\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"b.txt\"}}\n</tool_call>";
  m = parse_chat_output(parallel, hermes(), false);
  EXPECT_EQ(m.content, "I'll check both.");
  ASSERT_EQ(m.tool_calls.size(), 2u);
  EXPECT_EQ(m.tool_calls[1].arguments, "{\"path\": \"b.txt\"}");
  EXPECT_NE(m.tool_calls[0].id, m.tool_calls[1].id);

  // Keys in the other order, arguments as a JSON string: parsed as JSON.
  m = parse_chat_output("<tool_call>\n{\"arguments\": \"{\\\"q\\\": 1}\", \"name\": \"search\"}\n</tool_call>", hermes(), false);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "search");
  EXPECT_EQ(m.tool_calls[0].arguments, "{\"q\": 1}");
}

TEST(ToolCalls, MalformedFallsBackToContent) {
  // Bad JSON in the arguments.
  const std::string bad = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": Paris}}\n</tool_call>";
  ChatMessage m = parse_chat_output(bad, hermes(), false);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, bad);
  // Unclosed tag (cut off by max_tokens).
  const std::string unclosed = "Let me look.\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {\"dir\": \"sr";
  m = parse_chat_output(unclosed, hermes(), false);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, unclosed);
  // A complete call followed by a broken one: the first is a call, the rest content.
  const std::string mixed = "<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\n<tool_call>\n{\"name\": 5}\n</tool_call>";
  m = parse_chat_output(mixed, hermes(), false);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.content, "<tool_call>\n{\"name\": 5}\n</tool_call>");
  // No JSON object at all.
  m = parse_chat_output("<tool_call>get_weather(Paris)</tool_call>", hermes(), false);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "<tool_call>get_weather(Paris)</tool_call>");
  // Without tools, a call is text.
  m = parse_chat_output("<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>", hermes(false), false);
  EXPECT_TRUE(m.tool_calls.empty());
}

TEST(ToolCalls, CallInsideThinkIsReasoning) {
  const std::string text = "<think>\nMaybe <tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>?\n</think>\n\nNo tool needed.";
  ChatMessage m = parse_chat_output(text, hermes(), false);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, "No tool needed.");
  EXPECT_NE(m.reasoning.find("<tool_call>"), std::string::npos);
  // reasoning_format none: everything is content.
  ChatParseOptions none = hermes();
  none.parse_reasoning = false;
  m = parse_chat_output("<think>x</think>y", none, false);
  EXPECT_EQ(m.content, "<think>x</think>y");
  // The prompt opened the block (Qwen3.5): the answer starts in reasoning.
  ChatParseOptions open = hermes();
  open.thinking_open = true;
  m = parse_chat_output("plan\n</think>\n\nanswer", open, false);
  EXPECT_EQ(m.reasoning, "plan");
  EXPECT_EQ(m.content, "answer");
  // Cut off inside the block: all reasoning.
  m = parse_chat_output("<think>\nstill thinking", hermes(), false);
  EXPECT_EQ(m.reasoning, "still thinking");
  EXPECT_EQ(m.content, "");
}

// Recorded Qwen3.5 / Qwen3-Coder (XML) answers.
TEST(ToolCalls, XmlRecorded) {
  const std::string text = "I will write the file.\n\n<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/main.py\n"
                           "</parameter>\n<parameter=content>\nprint(\"hi\")\nprint(2)\n</parameter>\n<parameter=mode>\n"
                           "420\n</parameter>\n<parameter=flags>\n[\"x\", 1]\n</parameter>\n</function>\n</tool_call>";
  ChatMessage m = parse_chat_output(text, xml(), false);
  EXPECT_EQ(m.content, "I will write the file.");
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(m.tool_calls[0].name, "write_file");
  const Json args = Json::parse(m.tool_calls[0].arguments);
  EXPECT_EQ(args["path"], "src/main.py");
  EXPECT_EQ(args["content"], "print(\"hi\")\nprint(2)");
  EXPECT_EQ(args["mode"], 420);  // typed by the schema
  EXPECT_EQ(args["flags"], Json::parse("[\"x\", 1]"));
  // Unclosed parameter: content.
  const std::string cut = "<tool_call>\n<function=write_file>\n<parameter=path>\nsrc/ma";
  m = parse_chat_output(cut, xml(), false);
  EXPECT_TRUE(m.tool_calls.empty());
  EXPECT_EQ(m.content, cut);
  // A string-typed value that looks like JSON stays a string.
  m = parse_chat_output("<tool_call>\n<function=write_file>\n<parameter=path>\n123\n</parameter>\n</function>\n</tool_call>",
                        xml(), false);
  ASSERT_EQ(m.tool_calls.size(), 1u);
  EXPECT_EQ(Json::parse(m.tool_calls[0].arguments)["path"], "123");
}

// Streaming: feeding the text in random pieces, the deltas add up to the final message, and
// arguments only ever grow.
void check_stream(const std::string& text, const ChatParseOptions& o, uint32_t seed) {
  std::mt19937 rng(seed);
  ChatStreamDiff diff;
  std::string reasoning, content;
  std::vector<std::string> names, args, ids;
  auto apply = [&](const std::vector<Json>& deltas) {
    for (const Json& d : deltas) {
      if (d.contains("reasoning_content")) reasoning += d["reasoning_content"].get<std::string>();
      if (d.contains("content")) content += d["content"].get<std::string>();
      if (d.contains("tool_calls")) {
        for (const Json& c : d["tool_calls"]) {
          const size_t i = c["index"].get<size_t>();
          if (i == names.size()) {
            ASSERT_TRUE(c.contains("id"));
            ids.push_back(c["id"]);
            names.push_back(c["function"]["name"]);
            args.push_back("");
          }
          ASSERT_LT(i, names.size());
          args[i] += c["function"]["arguments"].get<std::string>();
        }
      }
    }
  };
  size_t pos = 0;
  while (pos < text.size()) {
    const size_t n = 1 + rng() % 7;
    pos = std::min(text.size(), pos + n);
    apply(diff.update(parse_chat_output(std::string_view(text).substr(0, pos), o, true)));
  }
  apply(diff.update(parse_chat_output(text, o, false)));
  const ChatMessage final_msg = parse_chat_output(text, o, false);
  EXPECT_EQ(reasoning, final_msg.reasoning) << text;
  EXPECT_EQ(content, final_msg.content) << text;
  ASSERT_EQ(names.size(), final_msg.tool_calls.size()) << text;
  for (size_t i = 0; i < names.size(); ++i) {
    EXPECT_EQ(names[i], final_msg.tool_calls[i].name);
    EXPECT_EQ(args[i], final_msg.tool_calls[i].arguments);
  }
}

TEST(ToolCalls, StreamedDeltasAddUpToTheFinalMessage) {
  for (uint32_t seed = 0; seed < 20; ++seed) {
    check_stream("<think>\nhmm <b>\n</think>\n\nSure.\n<tool_call>\n{\"name\": \"read\", \"arguments\": {\"path\": \"a \\\"q\\\" }\"}}\n"
                 "</tool_call>\n<tool_call>\n{\"name\": \"ls\", \"arguments\": {}}\n</tool_call>",
                 hermes(), seed);
    check_stream("<tool_call>\n<function=write_file>\n<parameter=path>\nx.txt\n</parameter>\n<parameter=mode>\n7\n</parameter>\n"
                 "</function>\n</tool_call>",
                 xml(), seed);
    check_stream("plain text with a < and <tool but no call", hermes(), seed);
    ChatParseOptions harmony = hermes();
    harmony.format = ToolFormat::Harmony;
    check_stream("<|channel|>analysis<|message|>Think <b> a bit.<|end|><|start|>assistant<|channel|>commentary<|message|>On it."
                 "<|end|><|start|>assistant<|channel|>commentary to=functions.read <|constrain|>json<|message|>"
                 "{\"path\": \"a <|x \\\" }\"}",
                 harmony, seed);
    check_stream("<|channel|>analysis<|message|>Fine.<|end|><|start|>assistant<|channel|>final<|message|>The end <3", harmony, seed);
  }
}

// What the tool grammar admits, the parser reads back as calls (both formats).
TEST(ToolCalls, GrammarOutputParses) {
  const Json tools = Json::parse(R"([
    {"type":"function","function":{"name":"get_weather","parameters":{"type":"object",
      "properties":{"city":{"type":"string","maxLength":10},"days":{"type":"integer"}},"required":["city"]}}},
    {"type":"function","function":{"name":"noop","parameters":{"type":"object","properties":{}}}}])");
  for (ToolFormat f : {ToolFormat::Hermes, ToolFormat::QwenXml}) {
    auto g = std::make_shared<agentkv::grammar::Grammar>(agentkv::grammar::parse_gbnf(tool_call_grammar(f, tools, "", true, false)));
    agentkv::grammar::Matcher m(g);
    const std::string text = f == ToolFormat::Hermes
        ? "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\", \"days\": 3}}\n</tool_call>\n"
          "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>"
        : "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n<parameter=days>\n3\n</parameter>\n"
          "</function>\n</tool_call>\n<tool_call>\n<function=noop>\n</function>\n</tool_call>";
    EXPECT_TRUE(m.can_end(m.advance(m.start(), text))) << tool_format_name(f);
    EXPECT_FALSE(m.advance(m.start(), f == ToolFormat::Hermes ? "<tool_call>\n{\"name\": \"other\"" : "<tool_call>\n<function=other").ok());
    ChatParseOptions o;
    o.format = f;
    o.parse_tools = true;
    o.tools = tools;
    const ChatMessage msg = parse_chat_output(text, o, false);
    ASSERT_EQ(msg.tool_calls.size(), 2u);
    EXPECT_EQ(Json::parse(msg.tool_calls[0].arguments), Json::parse(R"({"city": "Oslo", "days": 3})"));
    EXPECT_EQ(msg.tool_calls[1].name, "noop");
  }
  // A named function: only that one.
  auto named = std::make_shared<agentkv::grammar::Grammar>(
      agentkv::grammar::parse_gbnf(tool_call_grammar(ToolFormat::Hermes, tools, "noop", false, false)));
  agentkv::grammar::Matcher m(named);
  EXPECT_TRUE(m.can_end(m.advance(m.start(), "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>")));
  EXPECT_FALSE(m.advance(m.start(), "<tool_call>\n{\"name\": \"get").ok());
  // Not parallel: one call only.
  EXPECT_FALSE(m.advance(m.start(), "<tool_call>\n{\"name\": \"noop\", \"arguments\": {}}\n</tool_call>\n").ok());
}

}  // namespace
